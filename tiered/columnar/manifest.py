"""The columnar copy's per-partition manifest: which Parquet files hold which offsets (the only thing readers trust).

One JSON document per partition, ``<remote.log.columnar.dir>/<topic>-<partition>/_manifest.json``::

    {"version": 2, "topic": "events", "partition": 0, "topic_id": "<22-char Kafka UUID>",
     "files":   [{"name": "<20-digit base offset>-<22-char id>.parquet", "base_offset": 0, "end_offset": 2999,
                  "rows": 3000, "size": 81234, "crc32c": 305419896, "footer_crc32c": 2271560481,
                  "segments": [{"id": "<remote segment id>", "base_offset": 0, "end_offset": 999, "rows": 1000},
                               ...]}, ...],
     "retired": [{"name": "...parquet", "at_ms": 1764230400000}, ...], "owner_epoch": 3, "json_crc32c": 1234567890}

``json_crc32c``, the last field, is the CRC-32C of the document's own text (:mod:`tiered.sealed_json`): a manifest
damaged at rest is refused, naming it, rather than trusted (one written before the field existed is read as before).

``files`` are in offset order and contiguous (``base_offset`` of one is ``end_offset + 1`` of the one before): each
holds the offsets ``[base_offset, end_offset]`` (inclusive, as Kafka's segment metadata) of the remote segments
listed in its ``segments``, themselves contiguous, each with the rows it gave (verify compares them with the
segment's records). A file takes the next segments' rows until it holds ``remote.log.columnar.file.bytes``
(:mod:`tiered.columnar.keeper`): then it is replaced by a file holding its rows and the new segment's, and retired.
``rows`` counts its records (control records are never rows), ``size`` and ``crc32c`` are the file's bytes;
``footer_crc32c`` (absent in files written before it existed) is the crc32c of its footer alone, the last
``footer length + 8`` bytes: the row groups' statistics, by which readers skip row groups of an offset range. Page
checksums protect the data pages, not the footer, and a reader cannot afford the whole file's crc32c, so a plan
checks each file's size and footer before it trusts its statistics (:func:`file_problem`): one flipped bit there
would otherwise hide rows from a ranged read, silently.
``retired`` are files taken out of ``files`` (replaced by a larger file, below the log start offset, or of a topic
id that is gone) and deleted ``remote.log.columnar.file.delete.delay.ms`` after ``at_ms``, so a read planned just before still finds
them. Version 1 manifests (one segment a file, its id in ``segment_id``) are read as such. ``owner_epoch`` (absent
before it existed) is the owner epoch (:mod:`tiered.ownership`) of the data dir that last added a file: a data dir
whose own claim is older lost the partition since, and reads the copy only below its local log start (its log from
there on may be another history than the new owner's).

Where the files are: ``_files/<name>`` (:func:`stored_file`), from written to deleted; the partition dir itself
holds a hard link ``<name>`` to each *published* file only, so ``spark.read.parquet(<partition dir>)`` (whose listing
skips ``_`` names) reads each offset once at rest, while a read planned from the manifest opens ``_files/<name>``,
which a retired file keeps until it is deleted.

Crash behaviour: the manifest is replaced whole (temp file, fsync, rename, fsync of the directory: see
:func:`local.checkpoint.atomic_write`), so a reader sees the old one or the new one. A Parquet file is written
under a temp name, fsynced and renamed to its final name *before* the manifest names it: a crash leaves at most a
file that no manifest names (swept by the partition's next writer), never a name without its file. The links are
brought in line with the manifest after each change of it (and by the next writer after a crash).

This module is a pure codec plus the two file operations (read, replace); the writer is
:mod:`tiered.columnar.keeper`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tiered.errors import TieredStorageError
from tiered.sealed_json import seal, unseal

FILES_DIR = "_files"  # the files themselves; the partition dir holds hard links to the published ones
MANIFEST_NAME = "_manifest.json"  # "_": Spark's file listing skips it, so the directory reads as a Parquet dataset
PARQUET_SUFFIX = ".parquet"
TEMP_SUFFIX = ".tmp"
VERSION = 2
_READABLE = (1, 2)


class ColumnarManifestError(TieredStorageError, ValueError):
    """A manifest that cannot be read or contradicts itself, named with its path."""


@dataclass(frozen=True, slots=True)
class SegmentRows:
    """One remote segment's part of a file: its id, offsets [base_offset, end_offset] and the rows it gave."""

    segment_id: str
    base_offset: int
    end_offset: int
    rows: int


@dataclass(frozen=True, slots=True)
class ColumnarFile:
    """One published Parquet file: the offsets [base_offset, end_offset] of the remote segments in ``segments``."""

    name: str
    base_offset: int
    end_offset: int
    rows: int
    size: int
    crc32c: int
    segments: tuple[SegmentRows, ...] = ()
    footer_crc32c: int | None = None  # None: written before the manifest kept it


@dataclass(frozen=True, slots=True)
class RetiredFile:
    name: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class Manifest:
    topic: str
    partition: int
    topic_id: str
    files: tuple[ColumnarFile, ...] = ()
    retired: tuple[RetiredFile, ...] = field(default=())
    # The owner epoch of the data dir that last added a file (tiered.ownership; -1: not known, a manifest written
    # before the field existed): a data dir whose own claim is older was deposed since, and its log past its local
    # start may hold another history than the copy (columnar_files in tiered.spark.planning).
    owner_epoch: int = -1

    @property
    def start_offset(self) -> int | None:
        """The first offset the files hold (None: no file)."""
        return self.files[0].base_offset if self.files else None

    @property
    def next_offset(self) -> int | None:
        """The offset after the last file's (None: no file)."""
        return self.files[-1].end_offset + 1 if self.files else None

    def with_file(self, f: ColumnarFile) -> Manifest:
        if self.files and f.base_offset != self.files[-1].end_offset + 1:
            raise ColumnarManifestError(
                f"{self.topic}-{self.partition}: file {f.name} starts at {f.base_offset}, not at "
                f"{self.files[-1].end_offset + 1} after {self.files[-1].name}")
        return replace(self, files=(*self.files, f))

    def with_last_replaced(self, f: ColumnarFile, now_ms: int) -> Manifest:
        """``f`` in place of the last file, which it contains (same base offset) and extends; the last file retired."""
        if not self.files or f.base_offset != self.files[-1].base_offset or f.end_offset <= self.files[-1].end_offset:
            last = self.files[-1].name if self.files else "no file"
            raise ColumnarManifestError(f"{self.topic}-{self.partition}: file {f.name} ({f.base_offset}-{f.end_offset})"
                                        f" does not extend the last file ({last})")
        return replace(self, files=(*self.files[:-1], f), retired=(*self.retired, RetiredFile(self.files[-1].name, now_ms)))

    def retire(self, below: int, now_ms: int) -> Manifest:
        """Files wholly below offset ``below`` moved to ``retired`` (retention)."""
        gone = [f for f in self.files if f.end_offset < below]
        if not gone:
            return self
        return replace(self, files=tuple(f for f in self.files if f.end_offset >= below),
                       retired=(*self.retired, *(RetiredFile(f.name, now_ms) for f in gone)))

    def retire_last(self, now_ms: int) -> Manifest:
        """The last file moved to ``retired`` (a damaged one, whose offsets are copied again)."""
        if not self.files:
            return self
        return replace(self, files=self.files[:-1], retired=(*self.retired, RetiredFile(self.files[-1].name, now_ms)))

    def retire_all(self, now_ms: int) -> Manifest:
        return self.retire(self.next_offset or 0, now_ms)

    def without_retired(self, names: set[str]) -> Manifest:
        return replace(self, retired=tuple(r for r in self.retired if r.name not in names))

    def names(self) -> set[str]:
        """Every file the manifest knows (published or waiting for deletion)."""
        return {f.name for f in self.files} | {r.name for r in self.retired}


def file_name(base_offset: int, unique: str) -> str:
    """``<20-digit base offset>-<unique id>.parquet`` (sorts by offset, as Kafka's segment files)."""
    return f"{base_offset:020d}-{unique}{PARQUET_SUFFIX}"


def encode(m: Manifest) -> bytes:
    doc = {
        "version": VERSION, "topic": m.topic, "partition": m.partition, "topic_id": m.topic_id,
        "files": [{"name": f.name, "base_offset": f.base_offset, "end_offset": f.end_offset, "rows": f.rows,
                   "size": f.size, "crc32c": f.crc32c,
                   **({} if f.footer_crc32c is None else {"footer_crc32c": f.footer_crc32c}),
                   "segments": [{"id": s.segment_id, "base_offset": s.base_offset, "end_offset": s.end_offset,
                                 "rows": s.rows} for s in f.segments]} for f in m.files],
        "retired": [{"name": r.name, "at_ms": r.at_ms} for r in m.retired],
        **({"owner_epoch": m.owner_epoch} if m.owner_epoch >= 0 else {}),
    }
    return seal(json.dumps(doc, indent=1) + "\n")


def decode(data: bytes, where: str = "manifest") -> Manifest:
    try:
        doc: Any = unseal(data)
    except json.JSONDecodeError as exc:
        raise ColumnarManifestError(f"{where}: not a columnar manifest (JSONDecodeError: {exc})") from None
    except ValueError as exc:  # its seal does not match
        raise ColumnarManifestError(f"{where}: {exc}") from None
    try:
        version = doc.get("version")
        if version not in _READABLE:
            raise ColumnarManifestError(f"{where}: version {version!r}, expected one of {list(_READABLE)}")
        files = tuple(_decode_file(f, version) for f in doc["files"])
        retired = tuple(RetiredFile(str(r["name"]), int(r["at_ms"])) for r in doc.get("retired", ()))
        m = Manifest(str(doc["topic"]), int(doc["partition"]), str(doc["topic_id"]), files, retired,
                     int(doc.get("owner_epoch", -1)))
    except ColumnarManifestError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ColumnarManifestError(f"{where}: not a columnar manifest ({type(exc).__name__}: {exc})") from None
    for a, b in zip(m.files, m.files[1:], strict=False):
        if b.base_offset != a.end_offset + 1:
            raise ColumnarManifestError(f"{where}: {b.name} starts at {b.base_offset}, not at {a.end_offset + 1}")
    for f in m.files:
        _check_segments(f, where)
    return m


def _decode_file(f: Any, version: int) -> ColumnarFile:
    base, end, rows = int(f["base_offset"]), int(f["end_offset"]), int(f["rows"])
    segments: tuple[SegmentRows, ...]
    if version == 1:  # one segment a file
        segment_id = str(f.get("segment_id", ""))
        segments = (SegmentRows(segment_id, base, end, rows),) if segment_id else ()
    else:
        segments = tuple(SegmentRows(str(s["id"]), int(s["base_offset"]), int(s["end_offset"]), int(s["rows"]))
                         for s in f["segments"])
    footer = f.get("footer_crc32c")
    return ColumnarFile(str(f["name"]), base, end, rows, int(f["size"]), int(f["crc32c"]), segments,
                        None if footer is None else int(footer))


def _check_segments(f: ColumnarFile, where: str) -> None:
    """A file's segments, when listed, are contiguous, cover its offsets and add up to its rows."""
    if not f.segments:
        return
    at = f.base_offset
    for s in f.segments:
        if s.base_offset != at or s.end_offset < s.base_offset or s.rows < 0:
            raise ColumnarManifestError(f"{where}: {f.name}'s segment {s.segment_id} holds {s.base_offset}-"
                                        f"{s.end_offset}, not from {at} on")
        at = s.end_offset + 1
    if at != f.end_offset + 1:
        raise ColumnarManifestError(f"{where}: {f.name}'s segments end at {at - 1}, the file at {f.end_offset}")
    if sum(s.rows for s in f.segments) != f.rows:
        raise ColumnarManifestError(f"{where}: {f.name}'s segments give {sum(s.rows for s in f.segments)} rows, the "
                                    f"file says {f.rows}")


def stored_file(directory: Path, name: str) -> Path:
    """Where the file ``name`` of the partition dir ``directory`` is kept: ``_files/<name>``, a path that lives until
    the file is deleted, which readers that planned with the manifest open (see :mod:`tiered.columnar.keeper`)."""
    return directory / FILES_DIR / name


def published_file(directory: Path, name: str) -> Path:
    """Where a reader finds the published file ``name``: :func:`stored_file`, else its link in the partition dir,
    which holds the same bytes (a copy made before ``_files/``, or a ``_files/`` entry lost since; the partition's
    next writer puts it back). The reader checks it against the manifest as it would the stored one."""
    kept = stored_file(directory, name)
    if not kept.exists() and (directory / name).exists():
        return directory / name
    return kept


_TAIL = 8  # a Parquet file ends with its footer's length (4 bytes, little-endian) and "PAR1"


def footer_crc32c(path: Path) -> int:
    """The crc32c of the footer of the Parquet file at ``path`` (its last ``footer length + 8`` bytes); ValueError
    for a file that does not end as a Parquet file does."""
    from local.crc import crc32c

    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size < 12:
            raise ValueError(f"{size} bytes: too short for a Parquet file")
        tail = os.pread(fh.fileno(), _TAIL, size - _TAIL)
        length = int.from_bytes(tail[:4], "little")
        if tail[4:] != b"PAR1" or not 0 < length <= size - 12:
            raise ValueError("no Parquet footer at its end")
        return crc32c(os.pread(fh.fileno(), length + _TAIL, size - length - _TAIL))


def file_problem(path: Path, f: ColumnarFile) -> str | None:
    """What is wrong with the file at ``path`` that a reader must not trust, as far as its size and footer tell
    (the manifest's ``f``), or None: a file missing or cut short, or whose footer is not the one written."""
    try:
        size = path.stat().st_size
        if size != f.size:
            return f"{size} bytes, the manifest says {f.size}"
        if f.footer_crc32c is None:
            return None
        crc = footer_crc32c(path)
    except FileNotFoundError:
        return "missing"
    except (OSError, ValueError) as exc:
        return str(exc)
    if crc != f.footer_crc32c:
        return f"its footer has crc32c {crc:#010x}, the manifest says {f.footer_crc32c:#010x}"
    return None


def partition_dir(root: Path, topic: str, partition: int) -> Path:
    return root / f"{topic}-{partition}"


def read_manifest(directory: Path) -> Manifest | None:
    """The manifest in ``directory``, None when there is none."""
    path = directory / MANIFEST_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:  # e.g. a file where remote.log.columnar.dir should be a directory
        raise ColumnarManifestError(f"{path}: cannot be read ({exc.strerror or exc}; remote.log.columnar.dir names "
                                    "where the copies are)") from exc
    return decode(data, str(path))


def write_manifest(directory: Path, m: Manifest) -> None:
    """Replace the manifest atomically (and durably)."""
    from local.checkpoint import atomic_write

    atomic_write(directory / MANIFEST_NAME, encode(m))
