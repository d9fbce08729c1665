"""The scrub behind ``tiered verify``: checks every byte of a data dir that can be checked, changing nothing.

Read-only by construction: files are opened ``O_RDONLY`` and read with ``os.pread``; no index is mapped, no lock
file, checkpoint, clean-shutdown marker or directory is created, nothing is recovered or renamed. Running it on a
live data dir is safe for the files but may report the active segment's torn tail or a half-written index.

What is checked, per partition dir (``<topic>-<partition>``):

* every batch of every ``.log``: its header (magic, length, last offset delta, record count, codec) and its CRC
  (CRC-32C over attributes..end for v2, zlib CRC-32 over magic..end for legacy v0/v1): one ``unpack_from`` and one
  checksum over a memoryview per batch; offsets increase across batches and segments; no trailing partial batch;
* the offset index (8- or 12-byte entries, auto-detected with ``local.index.detect_entry_size``): offsets
  increase and positions never go down (the loader's sanity rules), and each entry points at a batch start whose
  batch holds the entry's offset;
* the time index: timestamps increase and offsets never go down (the loader's rules), and each entry's offset
  lies in a batch whose max timestamp is the entry's timestamp (what Kafka's ``LogSegment`` appends, and
  recovery rebuilds);
* the transaction index: whole 34-byte entries of a known version, first <= last offset, the abort marker's
  offset inside the segment;
* producer snapshots (version, CRC-32C, length), ``leader-epoch-checkpoint`` (parses; epochs and start offsets
  increase) and ``partition.metadata`` (parses, non-zero topic id);

and per data dir: the recovery-point, log-start-offset, replication-offset and cleaner-offset checkpoints
(parse; a recovery point or log start offset past the partition's log end offset is reported) and the
clean-shutdown marker (parses). Without a clean-shutdown marker the next start recovers the active segment, so
its torn tail and zero-filled (preallocated) index entries are notes there, not problems.

A problem is a :class:`Problem` (a stable ``kind``, the file or remote object, the byte position and the offset
when known, and what is wrong); notes never change the verdict. The remote tier's checks are in
:mod:`tiered.scrub_remote` and reuse the byte-level checks here (:class:`BatchScanner`, ``check_*_index``).
"""

from __future__ import annotations

import itertools
import os
import struct
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c
import numpy as np

from local import filenames
from local.errors import KafkaStorageError
from local.index.detect import reading_is_valid
from local.index.entries import (
    ABORTED_TXN,
    ABORTED_TXN_CURRENT_VERSION,
    ABORTED_TXN_SIZE,
    INT32_MAX,
    LARGE_OFFSET_DTYPE,
    LARGE_OFFSET_ENTRY_SIZE,
    LEGACY_OFFSET_DTYPE,
    LEGACY_OFFSET_ENTRY_SIZE,
    TIME_DTYPE,
    TIME_ENTRY_SIZE,
)
from local.records.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
)
from local.records.legacy import MIN_V0_SIZE, MIN_V1_SIZE

CHUNK_BYTES = 8 * 1024 * 1024
"""How much of a segment is read at a time (local ``pread`` or one remote ranged GET)."""

MAX_LISTED_PER_FILE = 20
"""Problems of one kind listed one by one per file; the rest are counted in one more problem."""

_LEGACY_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_OFFSET_AND_LENGTH = struct.Struct(">qi")  # baseOffset (a legacy entry: its offset), length after this field
_I64 = struct.Struct(">q")
_LEGACY_CRC_START = LOG_OVERHEAD + 4  # a legacy CRC covers magic..end
_MAX_CODEC = 4  # zstd
DATA_DIR_CHECKPOINTS = (
    filenames.RECOVERY_POINT_CHECKPOINT_FILENAME,
    filenames.LOG_START_OFFSET_CHECKPOINT_FILENAME,
    filenames.REPLICATION_OFFSET_CHECKPOINT_FILENAME,
    "cleaner-offset-checkpoint",
)

TOPIC_CONFIG_FILENAME = "tiered-topic.properties"
"""The topic overrides ``LogManager`` persists per partition (``local.manager.TOPIC_CONFIG_FILENAME``; not imported
from there, which would load the whole engine)."""

Progress = Callable[[int], None]


def _no_progress(_n: int) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing found wrong. ``kind`` is one of :data:`PROBLEM_KINDS`; ``file`` (a local path) or ``object`` (a
    remote key) says where, ``position`` is the byte position in it, ``offset`` the record offset concerned."""

    kind: str
    message: str
    file: str | None = None
    object: str | None = None
    position: int | None = None
    offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "file": self.file, "object": self.object, "position": self.position,
                "offset": self.offset, "message": self.message}

    def line(self) -> str:
        """``<file | remote object KEY>, position P, offset O: [kind] message`` (the parts known)."""
        parts = [self.file or (f"remote object {self.object}" if self.object else "")]
        if self.position is not None:
            parts.append(f"position {self.position}")
        if self.offset is not None:
            parts.append(f"offset {self.offset}")
        head = ", ".join(x for x in parts if x)
        return f"{head}: [{self.kind}] {self.message}" if head else f"[{self.kind}] {self.message}"


PROBLEM_KINDS = (
    "missing_dir",  # a data dir or remote directory named on the command line does not exist
    "unreadable",  # a file or object that cannot be read (I/O error, permission, store error)
    "crc_mismatch",  # a batch whose stored CRC is not the CRC of its bytes
    "corrupt_batch",  # a batch header that cannot be right (magic, length, delta, count, codec)
    "truncated_segment",  # trailing bytes that do not form a whole batch, or a batch running past the end
    "offset_order",  # batch offsets that go backwards, or outside the segment's range
    "offset_index",  # an offset index entry that is out of order or does not point at its batch
    "time_index",  # a time index entry out of order or not matching its batch's max timestamp
    "txn_index",  # a malformed transaction index entry
    "producer_snapshot",  # a producer snapshot with a bad version, CRC or length
    "checkpoint",  # a malformed checkpoint, or one naming an offset past the log end
    "partition_metadata",  # a malformed partition.metadata
    "remote_metadata",  # a remote metadata event that cannot be read or contradicts its object
    "missing_object",  # a remote object that the remote metadata says must exist
    "orphaned_object",  # a remote object that no live remote metadata names
    "object_size",  # a remote .log whose size is not the metadata's segment size
    "incomplete_remote_operation",  # a copy or delete left STARTED: its objects are garbage until cleaned
    "offset_gap",  # offsets held by neither tier between the log start and the log end
    "checksum_mismatch",  # a remote object whose recorded chunk checksums do not match its bytes
)


# --------------------------------------------------------------------------------------------------------
# Record batches


class BatchScanner:
    """Walks the batches of one segment fed to it in chunks (from a file or a remote object), checking each.

    Keeps, per whole batch, its position, base and last offset and max timestamp in ``array('q')`` columns (32
    bytes a batch) for the index checks. After a problem that makes the next batch's position unknowable (a bad
    length or magic) it stops parsing and only counts bytes.
    """

    def __init__(self, name: str, *, remote: bool, segment_base: int, min_offset: int, total_size: int | None,
                 progress: Progress = _no_progress) -> None:
        self.name = name
        self.remote = remote
        self.segment_base = segment_base
        self.total_size = total_size
        self.progress = progress
        self.problems: list[Problem] = []
        self.positions = array("q")
        self.bases = array("q")
        self.lasts = array("q")
        self.max_timestamps = array("q")
        self.crc_failures = 0
        self.stopped_at: int | None = None  # where parsing stopped for good
        self.bytes_seen = 0
        self._pending = b""
        self._pending_at = 0
        self._next_min = min_offset  # the smallest base offset the next batch may have
        self._counts: dict[str, int] = {}

    def report(self, kind: str, message: str, position: int | None = None, offset: int | None = None) -> None:
        n = self._counts[kind] = self._counts.get(kind, 0) + 1
        if n <= MAX_LISTED_PER_FILE:
            self.problems.append(problem_at(self.name, self.remote, kind, message, position, offset))

    def feed(self, chunk: bytes) -> None:
        self.bytes_seen += len(chunk)
        self.progress(len(chunk))
        if self.stopped_at is not None:
            return
        data = self._pending + chunk if self._pending else chunk
        start = self._pending_at
        view = memoryview(data)
        try:
            used = self._parse(view, start)
        finally:
            view.release()
        if self.stopped_at is None:
            self._pending = data[used:]
            self._pending_at = start + used

    def _stop(self, position: int) -> None:
        self.stopped_at = position
        self._pending = b""

    def _parse(self, view: memoryview, start: int) -> int:
        """Check the whole batches in ``view`` (file position ``start``); the bytes used."""
        p = 0
        while True:
            p = self._parse_sound_v2(view, start, p)
            after = self._parse_one(view, start, p)
            if after < 0:
                return p
            p = after

    def _parse_sound_v2(self, view: memoryview, start: int, p: int) -> int:
        """The fast path: whole v2 batches with nothing wrong, one ``unpack_from`` and one CRC-32C each. Stops
        (returning the position) at the first batch it cannot vouch for; :meth:`_parse_one` then looks closer."""
        n = len(view)
        total = self.total_size if self.total_size is not None else start + n
        unpack, checksum = BATCH_HEADER.unpack_from, crc32c.crc32c
        positions, bases, lasts, max_timestamps = (self.positions.append, self.bases.append, self.lasts.append,
                                                   self.max_timestamps.append)
        next_min, max_last = self._next_min, self.segment_base + INT32_MAX
        while n - p >= RECORD_BATCH_OVERHEAD and view[p + MAGIC_OFFSET] == MAGIC_V2:
            (base, length, _epoch, _magic, crc, attributes, delta, _base_ts, max_ts, _pid, _pepoch, _seq,
             count) = unpack(view, p)
            size = LOG_OVERHEAD + length
            last = base + delta
            if (size < RECORD_BATCH_OVERHEAD or size > n - p or start + p + size > total or base < next_min
                    or last > max_last or delta < 0 or not 0 <= count <= delta + 1 or attributes & 0x07 > _MAX_CODEC
                    or checksum(view[p + ATTRIBUTES_OFFSET : p + size]) != crc):
                break
            positions(start + p)
            bases(base)
            lasts(last)
            max_timestamps(max_ts)
            next_min = last + 1
            p += size
        self._next_min = next_min
        return p

    def _parse_one(self, view: memoryview, start: int, p: int) -> int:
        """Check the one batch at ``p`` whatever its state, reporting what is wrong; the position after it, or -1
        when it is not all there yet or the walk cannot go on."""
        n = len(view)
        total = self.total_size
        if n - p < LOG_OVERHEAD + 5:  # offset, length, epoch and magic: enough to size the batch
            return -1
        position = start + p
        base, length = _OFFSET_AND_LENGTH.unpack_from(view, p)
        magic = view[p + MAGIC_OFFSET]
        size = LOG_OVERHEAD + length
        if magic == MAGIC_V2:
            minimum = RECORD_BATCH_OVERHEAD
        elif magic in (0, 1):
            minimum = LOG_OVERHEAD + (MIN_V0_SIZE if magic == 0 else MIN_V1_SIZE)
        else:
            self.report("corrupt_batch", f"unknown magic {magic} in the batch header (or a damaged batch length "
                        "before it): the rest of the segment cannot be walked", position, base)
            self._stop(position)
            return -1
        if size < minimum:
            self.report("corrupt_batch", f"batch length {length} is too small for a magic v{magic} batch "
                        f"({minimum} bytes at least): the rest of the segment cannot be walked", position, base)
            self._stop(position)
            return -1
        if total is not None and position + size > total:
            self.report("truncated_segment", f"the batch at this position claims {size} bytes, past the end "
                        f"of the segment ({total} bytes): {total - position} bytes of it are there",
                        position, base)
            self._stop(position)
            return -1
        if n - p < size:
            return -1
        if magic == MAGIC_V2:
            self._check_v2(view, p, position, size)
        else:
            self._check_legacy(view, p, position, size, magic)
        return p + size

    def _check_v2(self, view: memoryview, p: int, position: int, size: int) -> None:
        (base, _length, _epoch, _magic, crc, attributes, delta, _base_ts, max_ts, _pid, _pepoch, _seq,
         count) = BATCH_HEADER.unpack_from(view, p)
        computed = crc32c.crc32c(view[p + ATTRIBUTES_OFFSET : p + size])
        last = base + delta
        if computed != crc:
            self.crc_failures += 1
            self.report("crc_mismatch", f"batch of {size} bytes: stored CRC {crc:#010x}, computed {computed:#010x}",
                        position, base)
        elif delta < 0 or not 0 <= count <= delta + 1:
            self.report("corrupt_batch", f"record count {count} does not fit last offset delta {delta}",
                        position, base)
        elif attributes & 0x07 > _MAX_CODEC:
            self.report("corrupt_batch", f"unknown compression codec {attributes & 0x07}", position, base)
        self._add(position, base, max(base, last), max_ts)

    def _check_legacy(self, view: memoryview, p: int, position: int, size: int, magic: int) -> None:
        offset, _size, crc, _magic, _attributes = _LEGACY_HEAD.unpack_from(view, p)
        computed = zlib.crc32(view[p + _LEGACY_CRC_START : p + size]) & 0xFFFFFFFF
        if computed != crc:
            self.crc_failures += 1
            self.report("crc_mismatch", f"legacy v{magic} message of {size} bytes: stored CRC {crc:#010x}, "
                        f"computed {computed:#010x}", position, offset)
        timestamp = _I64.unpack_from(view, p + 18)[0] if magic == 1 else -1
        # A compressed wrapper's offset is its last inner offset; its first is only known by decompressing, and
        # the indexes only ever name last offsets of legacy entries.
        self._add(position, offset, offset, timestamp)

    def _add(self, position: int, base: int, last: int, max_ts: int) -> None:
        if base < self._next_min:
            what = "the segment's base offset" if not self.lasts else f"the previous batch's last offset {self.lasts[-1]}"
            self.report("offset_order", f"batch offsets {base}..{last} are not above {what}", position, base)
        elif last - self.segment_base > INT32_MAX:
            self.report("offset_order", f"last offset {last} is more than 2^31-1 past the segment's base offset "
                        f"{self.segment_base}", position, base)
        self._next_min = max(self._next_min, last + 1)
        self.positions.append(position)
        self.bases.append(base)
        self.lasts.append(last)
        self.max_timestamps.append(max_ts)

    def finish(self) -> None:
        """Report a trailing partial batch and how many problems were not listed."""
        if self.stopped_at is None and self._pending:
            self.report("truncated_segment", f"{len(self._pending)} trailing bytes do not form a whole batch",
                        self._pending_at)
        for kind, n in self._counts.items():
            if n > MAX_LISTED_PER_FILE:
                self.problems.append(problem_at(self.name, self.remote, kind,
                                                f"{n - MAX_LISTED_PER_FILE} more problem(s) of this kind not listed"))

    @property
    def valid_end(self) -> int:
        """The position after the last whole batch."""
        return self._pending_at if self.stopped_at is None else self.stopped_at

    @property
    def next_offset(self) -> int | None:
        """The offset after the last whole batch (None when there is none)."""
        return self.lasts[-1] + 1 if self.lasts else None

    @property
    def max_timestamp(self) -> int:
        return max(self.max_timestamps, default=-1)

    def columns(self) -> tuple[np.ndarray[Any, Any], ...]:
        """positions, base offsets, last offsets, max timestamps as int64 arrays."""
        return tuple(np.frombuffer(a, dtype=np.int64) if len(a) else np.zeros(0, np.int64)
                     for a in (self.positions, self.bases, self.lasts, self.max_timestamps))


def read_file_chunks(path: Path, size: int) -> Iterator[bytes]:
    fd = os.open(path, os.O_RDONLY)
    try:
        position = 0
        while position < size:
            chunk = os.pread(fd, min(CHUNK_BYTES, size - position), position)
            if not chunk:
                return
            position += len(chunk)
            yield chunk
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------------------
# Indexes (bytes in, problems out; shared with the remote scrub)


def problem_at(name: str, remote: bool, kind: str, message: str, position: int | None = None,
               offset: int | None = None) -> Problem:
    """A problem in the local file or remote object ``name``."""
    return Problem(kind, message, file=None if remote else name, object=name if remote else None,
                   position=position, offset=offset)


def _listed(problems: list[Problem], kind: str, items: Iterable[tuple[str, int, int | None]], name: str,
            remote: bool) -> None:
    """Append one problem per (message, position, offset), at most MAX_LISTED_PER_FILE, then a count."""
    rows = list(items)
    for message, position, offset in rows[:MAX_LISTED_PER_FILE]:
        problems.append(problem_at(name, remote, kind, message, position, offset))
    if len(rows) > MAX_LISTED_PER_FILE:
        problems.append(problem_at(name, remote, kind,
                                   f"{len(rows) - MAX_LISTED_PER_FILE} more problem(s) of this kind not listed"))


def offset_entry_sizes_of_bytes(data: bytes, log_size: int | None) -> tuple[int, ...]:
    """The entry sizes an offset index read as bytes (a remote object, no feature level to break ties) may have,
    by ``local.index.detect_entry_size``'s rules: one size, both (8, 12) when an ambiguous length reads validly
    both ways, none when it reads validly neither way. A length that is a multiple of neither gives 8 (the
    length problem is reported by the check)."""
    by_large, by_legacy = len(data) % LARGE_OFFSET_ENTRY_SIZE == 0, len(data) % LEGACY_OFFSET_ENTRY_SIZE == 0
    if not data or not (by_large or by_legacy):
        return (LEGACY_OFFSET_ENTRY_SIZE,)
    if by_large != by_legacy:
        return (LARGE_OFFSET_ENTRY_SIZE,) if by_large else (LEGACY_OFFSET_ENTRY_SIZE,)
    sizes = (LEGACY_OFFSET_ENTRY_SIZE, LARGE_OFFSET_ENTRY_SIZE)
    return tuple(size for size in sizes if reading_is_valid(data, size, log_size))


def _zero_tail(raw: np.ndarray[Any, Any], entry_size: int, keep_first: bool) -> int:
    """How many entries remain once trailing all-zero entries (preallocated space) are cut; with ``keep_first``
    an all-zero first entry stays (offset index: the base offset at position 0 is a real entry)."""
    rows = raw.view(np.uint8).reshape(-1, entry_size)
    written = np.flatnonzero(rows.any(axis=1))
    kept = int(written[-1]) + 1 if written.size else 0
    return max(kept, 1) if keep_first and len(rows) else kept


def check_offset_index(data: bytes, entry_size: int, base_offset: int, scan: BatchScanner, name: str, *,
                       remote: bool, zero_tail_ok: bool = False) -> tuple[list[Problem], list[str]]:
    """Problems and notes of an offset index (``entry_size`` 8 or 12) against its segment's batches."""
    problems: list[Problem] = []
    notes: list[str] = []
    if len(data) % entry_size:
        problems.append(problem_at(name, remote, "offset_index",
                                   f"length {len(data)} is not a multiple of the {entry_size}-byte entry size"))
    dtype = LEGACY_OFFSET_DTYPE if entry_size == LEGACY_OFFSET_ENTRY_SIZE else LARGE_OFFSET_DTYPE
    entries = np.frombuffer(data, dtype=dtype, count=len(data) // entry_size)
    if zero_tail_ok and entries.size:
        keep = _zero_tail(entries, entry_size, keep_first=len(scan.positions) > 0)
        if keep < entries.size:
            notes.append(f"{name}: {entries.size - keep} zero-filled (preallocated) entries at the end; recovery "
                         "at the next start rebuilds this index")
            entries = entries[:keep]
    rel = entries["rel"].astype(np.int64)
    pos = entries["pos"].astype(np.int64)
    offsets = base_offset + rel
    bad = (rel < 0) | (pos < 0)
    bad[1:] |= (rel[1:] <= rel[:-1]) | (pos[1:] < pos[:-1])  # the loader's rule: equal positions pass
    rows: list[tuple[str, int, int | None]] = [
        (f"entry {i} (offset {offsets[i]}, position {pos[i]}) is negative or below the entry before it",
         int(i) * entry_size, int(offsets[i])) for i in np.flatnonzero(bad)]
    positions, bases, lasts, _ts = scan.columns()
    idx = np.searchsorted(positions, pos)
    hit = idx < positions.size
    hit[hit] = positions[idx[hit]] == pos[hit]
    for i in np.flatnonzero(~hit & ~bad):
        beyond = pos[i] >= scan.valid_end
        rows.append((f"entry {i} (offset {offsets[i]}) points at log position {pos[i]}, which is "
                     + ("past the last whole batch" if beyond else "not the start of a batch"),
                     int(i) * entry_size, int(offsets[i])))
    for i in np.flatnonzero(hit & ~bad):
        b = idx[i]
        if not bases[b] <= offsets[i] <= lasts[b]:
            rows.append((f"entry {i} (offset {offsets[i]}, position {pos[i]}) points at the batch of offsets "
                         f"{bases[b]}..{lasts[b]}, which does not hold it", int(i) * entry_size, int(offsets[i])))
    rows.sort(key=lambda r: r[1])  # stable: per entry, its order problem first
    _listed(problems, "offset_index", rows, name, remote)
    return problems, notes


def check_time_index(data: bytes, base_offset: int, scan: BatchScanner, name: str, *, remote: bool,
                     zero_tail_ok: bool = False) -> tuple[list[Problem], list[str]]:
    """Problems and notes of a time index against its segment's batches."""
    problems: list[Problem] = []
    notes: list[str] = []
    if len(data) % TIME_ENTRY_SIZE:
        problems.append(problem_at(name, remote, "time_index",
                                   f"length {len(data)} is not a multiple of the {TIME_ENTRY_SIZE}-byte entry size"))
    entries = np.frombuffer(data, dtype=TIME_DTYPE, count=len(data) // TIME_ENTRY_SIZE)
    if zero_tail_ok and entries.size:
        keep = _zero_tail(entries, TIME_ENTRY_SIZE, keep_first=False)
        if keep < entries.size:
            notes.append(f"{name}: {entries.size - keep} zero-filled (preallocated) entries at the end; recovery "
                         "at the next start rebuilds this index")
            entries = entries[:keep]
    ts = entries["ts"].astype(np.int64)
    rel = entries["rel"].astype(np.int64)
    offsets = base_offset + rel
    bad = rel < 0
    bad[1:] |= (ts[1:] <= ts[:-1]) | (rel[1:] < rel[:-1])  # TimeIndex appends only a larger timestamp
    rows: list[tuple[str, int, int | None]] = [
        (f"entry {i} (timestamp {ts[i]}, offset {offsets[i]}) does not go above the entry before it (or has a "
         "negative offset)", int(i) * TIME_ENTRY_SIZE, int(offsets[i])) for i in np.flatnonzero(bad)]
    _positions, bases, lasts, max_ts = scan.columns()
    if lasts.size and not (np.diff(lasts) > 0).all():
        # batch offsets out of order (reported with the segment): entries cannot be matched to batches
        _listed(problems, "time_index", rows, name, remote)
        return problems, notes
    idx = np.searchsorted(lasts, offsets)
    inside = idx < lasts.size
    inside[inside] = bases[idx[inside]] <= offsets[inside]
    for i in np.flatnonzero(~inside & ~bad):
        rows.append((f"entry {i} (timestamp {ts[i]}) names offset {offsets[i]}, which no batch of the segment holds",
                     int(i) * TIME_ENTRY_SIZE, int(offsets[i])))
    for i in np.flatnonzero(inside & ~bad):
        b = idx[i]
        if max_ts[b] != ts[i]:
            rows.append((f"entry {i} (timestamp {ts[i]}, offset {offsets[i]}) does not match the max timestamp "
                         f"{max_ts[b]} of the batch of offsets {bases[b]}..{lasts[b]}", int(i) * TIME_ENTRY_SIZE,
                         int(offsets[i])))
    rows.sort(key=lambda r: r[1])  # stable: per entry, its order problem first
    _listed(problems, "time_index", rows, name, remote)
    return problems, notes


def check_txn_index(data: bytes, base_offset: int, segment_last: int | None, name: str, *,
                    remote: bool) -> list[Problem]:
    problems: list[Problem] = []
    if len(data) % ABORTED_TXN_SIZE:
        problems.append(problem_at(name, remote, "txn_index",
                                   f"length {len(data)} is not a multiple of the {ABORTED_TXN_SIZE}-byte entry size"))
    rows: list[tuple[str, int, int | None]] = []
    for position in range(0, len(data) - len(data) % ABORTED_TXN_SIZE, ABORTED_TXN_SIZE):
        version, producer_id, first, last, _lso = ABORTED_TXN.unpack_from(data, position)
        if version > ABORTED_TXN_CURRENT_VERSION or version < 0:
            rows.append((f"unknown aborted transaction version {version}", position, None))
        elif first > last:
            rows.append((f"producer {producer_id}: first offset {first} above last offset {last}", position, first))
        elif last < base_offset or (segment_last is not None and last > segment_last):
            rows.append((f"producer {producer_id}: abort marker offset {last} is outside the segment "
                         f"({base_offset}..{segment_last})", position, last))
    _listed(problems, "txn_index", rows, name, remote)
    return problems


def check_producer_snapshot(data: bytes, name: str, *, remote: bool) -> list[Problem]:
    from local.producer_state import decode_snapshot

    try:
        decode_snapshot(data, name)
    except (KafkaStorageError, ValueError, struct.error) as exc:
        return [problem_at(name, remote, "producer_snapshot", str(exc))]
    return []


def check_leader_epoch_checkpoint(data: bytes, name: str, *, remote: bool) -> list[Problem]:
    from local.checkpoint import decode_leader_epoch_checkpoint

    try:
        entries = decode_leader_epoch_checkpoint(data, name)
    except (KafkaStorageError, ValueError) as exc:
        return [problem_at(name, remote, "checkpoint", f"malformed leader-epoch-checkpoint: {exc}")]
    for before, after in itertools.pairwise(entries):
        if after.epoch <= before.epoch or after.start_offset < before.start_offset:
            return [problem_at(name, remote, "checkpoint",
                               f"leader epochs out of order: epoch {before.epoch} at {before.start_offset} then epoch "
                               f"{after.epoch} at {after.start_offset}", offset=after.start_offset)]
    return []


# --------------------------------------------------------------------------------------------------------
# Local data dirs


@dataclass
class PartitionReport:
    """What the scrub found for one partition (local and/or remote)."""

    topic: str
    partition: int
    data_dir: str | None = None
    topic_id: str | None = None
    segments: int = 0
    batches: int = 0
    bytes: int = 0
    log_start_offset: int | None = None  # from the log-start-offset checkpoint
    local_start_offset: int | None = None
    log_end_offset: int | None = None
    remote_segments: int = 0
    remote_bytes: int = 0
    remote_end_offset: int | None = None
    remote_storage_enable: bool | None = None  # the topic override persisted beside the partition, if any
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.name, "topic": self.topic, "partition_number": self.partition, "topic_id": self.topic_id,
            "data_dir": self.data_dir, "ok": not self.problems, "segments": self.segments, "batches": self.batches,
            "bytes": self.bytes, "log_start_offset": self.log_start_offset,
            "local_start_offset": self.local_start_offset, "log_end_offset": self.log_end_offset,
            "remote_segments": self.remote_segments, "remote_bytes": self.remote_bytes,
            "remote_end_offset": self.remote_end_offset,
            "problems": [p.to_json() for p in self.problems], "notes": list(self.notes),
        }


@dataclass
class DataDirReport:
    """The data dir's own files (checkpoints, the clean-shutdown marker)."""

    path: str
    clean_shutdown: bool = False
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checkpoints: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    requested_entry_size: int = LEGACY_OFFSET_ENTRY_SIZE  # what a new offset index would use (ties in detection)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "clean_shutdown": self.clean_shutdown,
                "problems": [p.to_json() for p in self.problems], "notes": list(self.notes)}


def partition_dirs(data_dir: Path) -> list[tuple[Path, str, int]]:
    out = []
    for child in sorted(data_dir.iterdir()):
        try:
            topic, partition = filenames.parse_partition_dir_name(child.name)
        except ValueError:
            continue
        if child.is_dir():
            out.append((child, topic, partition))
    return out


def log_bytes(data_dir: Path) -> int:
    """The bytes of every segment ``.log`` under the data dir (the progress bar's total)."""
    total = 0
    for pdir, _topic, _partition in partition_dirs(data_dir):
        for entry in os.scandir(pdir):
            if entry.name.endswith(filenames.LOG_FILE_SUFFIX) and entry.is_file():
                total += entry.stat().st_size
    return total


def scrub_data_dir_files(data_dir: Path) -> DataDirReport:
    from local.checkpoint import CleanShutdownFile, OffsetCheckpointFile
    from local.features import read_features

    report = DataDirReport(str(data_dir))
    marker = data_dir / filenames.CLEAN_SHUTDOWN_FILENAME
    report.clean_shutdown = marker.exists()
    if report.clean_shutdown:
        try:
            CleanShutdownFile(marker).read()
        except (KafkaStorageError, OSError, ValueError) as exc:
            report.problems.append(Problem("checkpoint", f"malformed clean-shutdown marker: {exc}", file=str(marker)))
    else:
        report.notes.append("no clean-shutdown marker: the next start recovers the segments after the recovery "
                            "point (a torn tail of the active segment is expected)")
    try:
        if read_features(data_dir).large_index_finalized:
            report.requested_entry_size = LARGE_OFFSET_ENTRY_SIZE
    except (KafkaStorageError, OSError, ValueError) as exc:
        report.problems.append(Problem("checkpoint", f"malformed feature levels: {exc}",
                                       file=str(data_dir / filenames.FEATURES_FILENAME)))
    for name in DATA_DIR_CHECKPOINTS:
        path = data_dir / name
        if not path.exists():
            continue
        try:
            report.checkpoints[name] = OffsetCheckpointFile(path).read()
        except (KafkaStorageError, OSError, ValueError) as exc:
            report.problems.append(Problem("checkpoint", f"malformed checkpoint: {exc}", file=str(path)))
    return report


def scrub_partition(pdir: Path, topic: str, partition: int, dir_report: DataDirReport, *,
                    progress: Progress = _no_progress) -> PartitionReport:
    """Scrub one partition dir (see the module docstring)."""
    report = PartitionReport(topic, partition, data_dir=str(pdir.parent))
    _check_partition_files(pdir, report)
    logs: list[tuple[int, Path]] = []
    others: dict[str, list[Path]] = {}
    for entry in sorted(os.scandir(pdir), key=lambda e: e.name):
        if not entry.is_file():
            continue
        name = entry.name
        if name.endswith(filenames.TRANSIENT_SUFFIXES) or name.endswith(filenames.TMP_FILE_SUFFIX):
            report.notes.append(f"leftover {name} (the next start finishes or removes it)")
            continue
        try:
            base = filenames.offset_from_file_name(name)
        except ValueError:
            continue
        suffix = name[20:]
        if suffix == filenames.LOG_FILE_SUFFIX:
            logs.append((base, Path(entry.path)))
        else:
            others.setdefault(suffix, []).append(Path(entry.path))
    last_base = logs[-1][0] if logs else None
    next_min = 0
    for base, path in logs:
        active_unclean = base == last_base and not dir_report.clean_shutdown
        scan = _scrub_segment(pdir, base, path, report, next_min, active_unclean, dir_report, progress)
        if scan.next_offset is not None:
            next_min = scan.next_offset
        report.log_end_offset = scan.next_offset if scan.next_offset is not None else max(base, next_min)
    if logs:
        report.local_start_offset = logs[0][0]
    log_bases = {b for b, _ in logs}
    for suffix in filenames.INDEX_SUFFIXES:
        for path in others.get(suffix, []):
            if filenames.offset_from_file_name(path.name) not in log_bases:
                report.notes.append(f"{path.name} has no segment .log (the next start deletes it)")
    for path in others.get(filenames.PRODUCER_SNAPSHOT_FILE_SUFFIX, []):
        report.problems += check_producer_snapshot(_read(path, report), str(path), remote=False)
    _check_checkpoint_offsets(report, dir_report)
    return report


def _read(path: Path, report: PartitionReport) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        report.problems.append(Problem("unreadable", f"cannot read: {exc}", file=str(path)))
        return b""


def _check_partition_files(pdir: Path, report: PartitionReport) -> None:
    from local.checkpoint import PartitionMetadataFile, kafka_uuid_to_str

    metadata = pdir / filenames.PARTITION_METADATA_FILENAME
    if metadata.exists():
        try:
            report.topic_id = kafka_uuid_to_str(PartitionMetadataFile.decode(_read(metadata, report), str(metadata)))
        except (KafkaStorageError, ValueError) as exc:
            report.problems.append(Problem("partition_metadata", str(exc), file=str(metadata)))
    overrides = pdir / TOPIC_CONFIG_FILENAME
    if overrides.exists():
        from local.config import read_properties

        try:
            value = read_properties(overrides).get("remote.storage.enable")
        except (KafkaStorageError, OSError, ValueError) as exc:
            report.problems.append(Problem("checkpoint", f"unreadable topic overrides: {exc}", file=str(overrides)))
        else:
            report.remote_storage_enable = None if value is None else str(value).strip().lower() == "true"
    epochs = pdir / filenames.LEADER_EPOCH_CHECKPOINT_FILENAME
    if epochs.exists():
        report.problems += check_leader_epoch_checkpoint(_read(epochs, report), str(epochs), remote=False)


def _scrub_segment(pdir: Path, base: int, path: Path, report: PartitionReport, next_min: int, active_unclean: bool,
                   dir_report: DataDirReport, progress: Progress) -> BatchScanner:
    size = path.stat().st_size
    scan = BatchScanner(str(path), remote=False, segment_base=base, min_offset=max(base, next_min),
                        total_size=size, progress=progress)
    try:
        for chunk in read_file_chunks(path, size):
            scan.feed(chunk)
    except OSError as exc:
        report.problems.append(Problem("unreadable", f"cannot read: {exc}", file=str(path), position=scan.bytes_seen))
    scan.finish()
    report.segments += 1
    report.batches += len(scan.positions)
    report.bytes += size
    if active_unclean and scan.stopped_at is None and scan.problems and all(
        p.kind == "truncated_segment" for p in scan.problems
    ):
        report.notes.append(f"{path}: torn tail of {size - scan.valid_end} bytes at position {scan.valid_end} "
                            "(unflushed when the broker stopped; the next start truncates it)")
    else:
        report.problems += scan.problems

    index = filenames.offset_index_file(pdir, base)
    if index.exists():
        from local.errors import CorruptIndexError
        from local.index import detect_entry_size

        try:
            entry_size = detect_entry_size(index, dir_report.requested_entry_size)
        except CorruptIndexError as exc:
            report.problems.append(Problem("offset_index", str(exc), file=str(index)))
        else:
            problems, notes = check_offset_index(_read(index, report), entry_size, base, scan, str(index),
                                                 remote=False, zero_tail_ok=active_unclean)
            report.problems += problems
            report.notes += notes
    else:
        report.notes.append(f"{index.name} is missing (the next start rebuilds it)")
    time_index = filenames.time_index_file(pdir, base)
    if time_index.exists():
        problems, notes = check_time_index(_read(time_index, report), base, scan, str(time_index), remote=False,
                                           zero_tail_ok=active_unclean)
        report.problems += problems
        report.notes += notes
    txn_index = filenames.transaction_index_file(pdir, base)
    if txn_index.exists():
        segment_last = scan.lasts[-1] if scan.lasts else None
        report.problems += check_txn_index(_read(txn_index, report), base, segment_last, str(txn_index),
                                           remote=False)
    return scan


def _check_checkpoint_offsets(report: PartitionReport, dir_report: DataDirReport) -> None:
    key = (report.topic, report.partition)
    end = report.log_end_offset
    for name, what in ((filenames.RECOVERY_POINT_CHECKPOINT_FILENAME, "recovery point"),
                       (filenames.LOG_START_OFFSET_CHECKPOINT_FILENAME, "log start offset")):
        value = dir_report.checkpoints.get(name, {}).get(key)
        if value is None:
            continue
        if what == "log start offset":
            report.log_start_offset = value
        if end is not None and value > end:
            consequence = "flushed data is missing" if what == "recovery point" else "the log start is past its end"
            report.problems.append(Problem(
                "checkpoint", f"{report.name}: {what} {value} is past the log end offset {end} ({consequence})",
                file=str(Path(dir_report.path) / name), offset=value))
