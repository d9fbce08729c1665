"""End-to-end checksums of remote objects: a crc32c per fixed-size chunk of every object a segment copy uploads.

What is recorded
    For each object of a segment (``.log``, ``.index``, ``.timeindex``, ``.txnindex`` when there is one,
    ``.snapshot``, ``leader-epoch-checkpoint``; keyed by that suffix): its size and the crc32c (Castagnoli, as
    Kafka's v2 batches use) of each ``chunk_bytes`` chunk, chunk ``n`` covering bytes ``[n*C, (n+1)*C)``, the last
    one short. ``C`` is recorded with the checksums; new copies use ``rsm.config.checksum.chunk.bytes`` when set,
    else 1 MiB when the segment cache's chunk size is a multiple of 1 MiB (the default 4 MiB is), else the cache's
    chunk size, so a cache chunk is always made of whole checksum chunks and a ranged read is verified without
    fetching more than it asks for. The checksums are of the segment's own bytes, computed from the local files
    by the copy task before the plugin uploads them: whatever a plugin does to the bytes on the way (compression,
    encryption), what comes back from ``fetch_log_segment``/``fetch_index`` must match them.

Where it is recorded
    In the remote metadata store's record of the segment, the COPY_SEGMENT_FINISHED event
    (``__remote_log_metadata/<start>-<id>.1.json``, field ``checksums``), not in the plugin's custom metadata
    (at most ``remote.log.metadata.custom.metadata.max.bytes``, 128, far too small for a crc per MiB of a GiB
    segment). So the checksums become visible atomically with the copy itself, a reader gets them with the
    metadata it already loads (no extra GET per segment), they work with any plugin (the store is beside the
    plugin's objects, or in the fallback directory for plugins without an object API), and a copy finished before
    checksums existed simply has none (its reads are not verified, as before). :class:`SegmentChecksums` has its
    own versioned JSON form (``to_json``/``from_json``) and a compact binary one (``encode``/``decode``), so a
    segment manifest uploaded with each segment can carry the same structure unchanged.

How it is checked
    :class:`ChecksumVerifier` wraps the fetches of a segment: a ranged fetch is widened to whole checksum chunks,
    each is checked, a mismatch (or a short object) is fetched once more, and a second mismatch raises
    :class:`tiered.errors.RemoteChecksumError` naming the object key, the byte range and the segment. A streaming
    fetch (the segment cache's sequential reader) hands out only checked chunks. The segment cache keeps its own
    crc of each chunk on disk and checks it when a chunk comes back from disk (see ``tiered.cache.chunk_cache``);
    the remote index cache checks downloaded indexes and the cached files it reopens. What is in memory is not
    checked again: a chunk is checked once, when it enters the cache.

Reading every object of a segment and listing what does not match is the scrub's
(:func:`tiered.scrub.object_checksums.verify_object_checksums`, for ``tiered verify``): it finds a segment's
checksums in the store, which lives above this module.
"""

from __future__ import annotations

import base64
import io
import logging
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from local.crc import crc32c
from tiered import layout
from tiered.errors import RemoteChecksumError
from tiered.rsm import IndexType, LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageManager

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
DEFAULT_CHUNK_BYTES = MIB
MIN_CHUNK_BYTES = 4096
FORMAT_VERSION = 1
ALGORITHM = "crc32c"
LOG = layout.LOG_SUFFIX

Fetcher = Callable[[int, int], bytes]
Opener = Callable[[int, "int | None"], IO[bytes]]
ChecksumLookup = Callable[[RemoteLogSegmentMetadata], "SegmentChecksums | None"]


def default_chunk_bytes(cache_chunk_bytes: int | None = None) -> int:
    """The checksum chunk size for new copies when none is configured (see the module docstring)."""
    if cache_chunk_bytes is None or cache_chunk_bytes % DEFAULT_CHUNK_BYTES == 0:
        return DEFAULT_CHUNK_BYTES
    return max(MIN_CHUNK_BYTES, cache_chunk_bytes)


def checksum_chunk_bytes(rsm_config: Mapping[str, Any]) -> int | None:
    """``rsm.config.checksum.chunk.bytes`` validated (4096..1 GiB), or None when it is not set."""
    from tiered.options import Options

    return Options(rsm_config).integer("checksum.chunk.bytes", None, MIN_CHUNK_BYTES, 1024 * MIB)


# Values -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ObjectChecksums:
    """One object: its size and the crc32c of each chunk."""

    size: int
    crcs: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        packed = struct.pack(f">{len(self.crcs)}I", *self.crcs)
        return {"size": self.size, "crc32c": base64.b64encode(packed).decode("ascii")}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ObjectChecksums:
        packed = base64.b64decode(d["crc32c"], validate=True)
        if len(packed) % 4:
            raise ValueError("crc32c list is not a whole number of 32-bit values")
        return cls(int(d["size"]), struct.unpack(f">{len(packed) // 4}I", packed))


@dataclass(frozen=True)
class SegmentChecksums:
    """The checksums of every object of one remote segment, keyed by suffix (``.log``, ``.index``, ...)."""

    chunk_bytes: int
    objects: Mapping[str, ObjectChecksums] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.chunk_bytes < 1:
            raise ValueError(f"checksum chunk size must be > 0, got {self.chunk_bytes}")
        for suffix, obj in self.objects.items():
            expected = -(-obj.size // self.chunk_bytes)
            if obj.size < 0 or len(obj.crcs) != expected:
                raise ValueError(
                    f"checksums of {suffix}: {len(obj.crcs)} crc(s) for {obj.size} bytes in chunks of {self.chunk_bytes}"
                )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION, "algorithm": ALGORITHM, "chunk_bytes": self.chunk_bytes,
            "objects": {suffix: obj.to_json() for suffix, obj in sorted(self.objects.items())},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SegmentChecksums:
        if d.get("version") != FORMAT_VERSION or d.get("algorithm") != ALGORITHM:
            raise ValueError(f"unknown checksum format version {d.get('version')!r} / {d.get('algorithm')!r}")
        return cls(int(d["chunk_bytes"]), {str(s): ObjectChecksums.from_json(o) for s, o in d["objects"].items()})

    def encode(self) -> bytes:
        """Compact binary form: version u8, chunk_bytes u32, object count u16, then per object: suffix length u8,
        suffix (ASCII), size u64, crc count u32, crcs u32 each (all big-endian)."""
        out = [struct.pack(">BIH", FORMAT_VERSION, self.chunk_bytes, len(self.objects))]
        for suffix, obj in sorted(self.objects.items()):
            name = suffix.encode("ascii")
            out.append(struct.pack(f">B{len(name)}sQI{len(obj.crcs)}I", len(name), name, obj.size, len(obj.crcs), *obj.crcs))
        return b"".join(out)

    @classmethod
    def decode(cls, data: bytes) -> SegmentChecksums:
        try:
            version, chunk_bytes, count = struct.unpack_from(">BIH", data)
            if version != FORMAT_VERSION:
                raise ValueError(f"unknown checksum format version {version}")
            pos, objects = 7, {}
            for _ in range(count):
                (n,) = struct.unpack_from(">B", data, pos)
                suffix = data[pos + 1 : pos + 1 + n].decode("ascii")
                pos += 1 + n
                size, k = struct.unpack_from(">QI", data, pos)
                pos += 12
                objects[suffix] = ObjectChecksums(size, struct.unpack_from(f">{k}I", data, pos))
                pos += 4 * k
            if pos != len(data):
                raise ValueError(f"{len(data) - pos} trailing byte(s)")
        except (struct.error, UnicodeDecodeError) as exc:
            raise ValueError(f"malformed checksums: {exc}") from None
        return cls(chunk_bytes, objects)


@dataclass(frozen=True)
class ChecksumProblem:
    """What is wrong with (part of) a remote object: ``kind`` is ``mismatch`` (a chunk's crc32c differs),
    ``short``/``long`` (the object's size differs from the recorded one), ``missing`` or ``unreadable``."""

    kind: str
    object: str
    start: int
    end: int
    detail: str
    segment_id: str

    def __str__(self) -> str:
        return f"{self.kind}: object {self.object} bytes {self.start}..{self.end} of {self.segment_id}: {self.detail}"

    def error(self) -> RemoteChecksumError:
        return RemoteChecksumError(
            f"remote object {self.object} (segment {self.segment_id}) bytes {self.start}..{self.end}: {self.detail}",
            key=self.object, start=self.start, position=self.start, end=self.end, segment_id=self.segment_id, kind=self.kind,
        )


# Computing ----------------------------------------------------------------------------------------------------


def crcs_of(data: Any, chunk_bytes: int) -> tuple[int, ...]:
    """The crc32c of each ``chunk_bytes`` chunk of ``data`` (any buffer)."""
    view = memoryview(data).cast("B")
    return tuple(crc32c(view[i : i + chunk_bytes]) for i in range(0, len(view), chunk_bytes))


def checksums_of_bytes(data: Any, chunk_bytes: int) -> ObjectChecksums:
    return ObjectChecksums(len(memoryview(data).cast("B")), crcs_of(data, chunk_bytes))


def checksums_of_file(path: Path, chunk_bytes: int) -> ObjectChecksums:
    """Read ``path`` once, a chunk at a time into one buffer."""
    crcs = []
    size = 0
    buf = bytearray(chunk_bytes)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while True:
            got = 0
            while got < chunk_bytes:
                n = f.readinto(view[got:])
                if not n:
                    break
                got += n
            if got:
                crcs.append(crc32c(view[:got]))
                size += got
            if got < chunk_bytes:
                break
    return ObjectChecksums(size, tuple(crcs))


def compute_segment_checksums(data: LogSegmentData, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> SegmentChecksums:
    """The checksums of every object a copy of ``data`` uploads."""
    objects = {
        LOG: checksums_of_file(data.log_segment, chunk_bytes),
        IndexType.OFFSET.suffix: checksums_of_file(data.offset_index, chunk_bytes),
        IndexType.TIMESTAMP.suffix: checksums_of_file(data.time_index, chunk_bytes),
        IndexType.PRODUCER_SNAPSHOT.suffix: checksums_of_file(data.producer_snapshot_index, chunk_bytes),
        IndexType.LEADER_EPOCH.suffix: checksums_of_bytes(data.leader_epoch_index, chunk_bytes),
    }
    if data.transaction_index is not None:
        objects[IndexType.TRANSACTION.suffix] = checksums_of_file(data.transaction_index, chunk_bytes)
    return SegmentChecksums(chunk_bytes, objects)


# Checking -----------------------------------------------------------------------------------------------------


def object_name(rsm: RemoteStorageManager | None, md: RemoteLogSegmentMetadata, suffix: str) -> str:
    """The object's key when the plugin has the object API, else the segment id and the suffix."""
    if rsm is not None and rsm.object_store is not None:
        return layout.segment_key(rsm.prefix, md, suffix)
    return f"{md.remote_log_segment_id.id}{suffix}"


Name = str | Callable[[], str]  # an object's name, or how to make it (only when something is wrong: it costs)


def check_range(
    sums: SegmentChecksums, suffix: str, start: int, data: Any, expected_len: int, name: Name, segment_id: Name
) -> ChecksumProblem | None:
    """Check ``data``, bytes ``[start, start + expected_len)`` of the object, ``start`` on a chunk boundary and the
    range made of whole chunks (the last one may end at the object's end)."""
    problem = _check_range(sums, suffix, start, data, expected_len)
    if problem is None:
        return None
    kind, lo, hi, detail = problem
    return ChecksumProblem(kind, name if isinstance(name, str) else name(), lo, hi, detail,
                           segment_id if isinstance(segment_id, str) else segment_id())


def _check_range(sums: SegmentChecksums, suffix: str, start: int, data: Any, expected_len: int) -> tuple[str, int, int, str] | None:
    obj = sums.objects[suffix]
    c = sums.chunk_bytes
    view = memoryview(data).cast("B")
    if len(view) != expected_len:
        kind = "short" if len(view) < expected_len else "long"
        end = start + len(view) - 1 if kind == "long" else start + expected_len - 1
        return kind, start, end, f"got {len(view)} byte(s), expected {expected_len} (the copy recorded an object of {obj.size})"
    first = start // c
    for i in range(0, len(view), c):
        k = first + i // c
        actual = crc32c(view[i : i + c])
        if k >= len(obj.crcs) or actual != obj.crcs[k]:
            expected = obj.crcs[k] if k < len(obj.crcs) else None
            lo = start + i
            hi = min(lo + c, start + len(view)) - 1
            recorded = "nothing" if expected is None else f"{expected:#010x}"
            return "mismatch", lo, hi, f"crc32c {actual:#010x}, recorded {recorded}"
    return None


class ChecksumVerifier:
    """Verified fetches of remote objects (see the module docstring). ``lookup`` gives a segment's checksums (None
    for a segment copied before checksums existed: its fetches pass through unchecked)."""

    def __init__(self, rsm: RemoteStorageManager, lookup: ChecksumLookup) -> None:
        self.rsm = rsm
        self.lookup = lookup
        self.mismatches = 0  # chunks that failed a check (refetched or raised)

    def _object(self, md: RemoteLogSegmentMetadata, suffix: str) -> SegmentChecksums | None:
        sums = self.lookup(md)
        return sums if sums is not None and suffix in sums.objects else None

    def fetcher(self, md: RemoteLogSegmentMetadata, raw: Fetcher, suffix: str = LOG) -> Fetcher:
        """``raw`` (``(start, end_inclusive) -> bytes``) verified: ranges widened to whole chunks, a bad one fetched
        once more, then RemoteChecksumError. ``raw`` itself when the segment has no checksums."""
        sums = self._object(md, suffix)
        if sums is None:
            return raw
        return _VerifiedFetcher(self, raw, sums, suffix, md)

    def opener(self, md: RemoteLogSegmentMetadata, raw: Opener, suffix: str = LOG) -> Opener:
        """``raw`` (``(start, end_inclusive | None) -> stream``) whose streams hand out only checked chunks and raise
        RemoteChecksumError at the first bad one (the caller refetches with :meth:`fetcher`)."""
        sums = self._object(md, suffix)
        if sums is None:
            return raw

        def name() -> str:
            return object_name(self.rsm, md, suffix)

        def sid() -> str:
            return str(md.remote_log_segment_id)

        def opener(start: int, end_inclusive: int | None) -> IO[bytes]:
            return cast(IO[bytes], _VerifiedStream(self, raw, sums, suffix, name, sid, start, end_inclusive))

        return opener

    def fetch_index(self, md: RemoteLogSegmentMetadata, index_type: IndexType) -> IO[bytes]:
        """``rsm.fetch_index`` verified (the whole object; fetched once more on a mismatch)."""
        suffix = index_type.suffix
        sums = self._object(md, suffix)
        if sums is None:
            return self.rsm.fetch_index(md, index_type)
        name, sid = object_name(self.rsm, md, suffix), str(md.remote_log_segment_id)
        size = sums.objects[suffix].size
        problem: ChecksumProblem | None = None
        for attempt in range(2):
            with self.rsm.fetch_index(md, index_type) as stream:
                data = stream.read()
            problem = check_range(sums, suffix, 0, data, size, name, sid)
            if problem is None:
                return io.BytesIO(data)
            self.note_mismatch(problem, attempt)
        assert problem is not None
        raise problem.error()

    def check_file(self, md: RemoteLogSegmentMetadata, index_type: IndexType, path: Path) -> ChecksumProblem | None:
        """Check a local copy of one of the segment's objects (None when it matches or there are no checksums). A
        missing transaction index is cached as an empty file: it matches when no transaction index was uploaded."""
        suffix = index_type.suffix
        sums = self.lookup(md)
        if sums is None:
            return None
        name, sid = object_name(self.rsm, md, suffix), str(md.remote_log_segment_id)
        data = path.read_bytes()
        if suffix not in sums.objects:
            if index_type is IndexType.TRANSACTION and not data:
                return None
            return ChecksumProblem("long", name, 0, len(data) - 1, "no such object was uploaded", sid) if data else None
        return check_range(sums, suffix, 0, data, sums.objects[suffix].size, name, sid)

    def note_mismatch(self, problem: ChecksumProblem, attempt: int) -> None:
        """Count and log a checksum mismatch (``attempt`` 0: a refetch follows; else it failed again)."""
        self.mismatches += 1
        if attempt == 0:
            logger.warning("%s: fetching it again", problem)
        else:
            logger.error("%s, again after a refetch", problem)


class _VerifiedFetcher:
    """Made for each read (cheap: the object's name is only made when a check fails)."""

    def __init__(
        self, verifier: ChecksumVerifier, raw: Fetcher, sums: SegmentChecksums, suffix: str, md: RemoteLogSegmentMetadata
    ) -> None:
        self.verifier, self.raw, self.sums, self.suffix, self.md = verifier, raw, sums, suffix, md
        self.size = sums.objects[suffix].size

    def name(self) -> str:
        return object_name(self.verifier.rsm, self.md, self.suffix)

    def segment_id(self) -> str:
        return str(self.md.remote_log_segment_id)

    def __call__(self, start: int, end_inclusive: int) -> bytes:
        end = min(end_inclusive, self.size - 1)
        if start > end:
            return b""
        c = self.sums.chunk_bytes
        lo = start - start % c
        hi = min(end - end % c + c, self.size) - 1
        problem: ChecksumProblem | None = None
        for attempt in range(2):
            data = self.raw(lo, hi)
            problem = check_range(self.sums, self.suffix, lo, data, hi - lo + 1, self.name, self.segment_id)
            if problem is None:
                if lo == start and hi == end:
                    return data
                return bytes(memoryview(data)[start - lo : end - lo + 1])
            self.verifier.note_mismatch(problem, attempt)
        assert problem is not None
        raise problem.error()


class _VerifiedStream(io.BufferedIOBase):
    """A streaming fetch from ``start`` that reads the object a whole checksum chunk at a time and hands out a
    chunk's bytes only once its crc matched (the stream opens at the chunk boundary at or before ``start``)."""

    def __init__(
        self, verifier: ChecksumVerifier, raw: Opener, sums: SegmentChecksums, suffix: str, name: Name, segment_id: Name,
        start: int, end_inclusive: int | None,
    ) -> None:
        self._verifier, self._sums, self._suffix = verifier, sums, suffix
        self._name, self._segment_id = name, segment_id
        size = sums.objects[suffix].size
        self._end = size if end_inclusive is None else max(start, min(end_inclusive + 1, size))  # exclusive
        self._pos = start
        c = sums.chunk_bytes
        self._raw_pos = min(start - start % c, size)
        self._buf: bytes = b""
        self._buf_start = self._raw_pos
        self._body: IO[bytes] | None = None
        if start < self._end:
            last = min(self._end - 1 + c - (self._end - 1) % c, size) - 1 if end_inclusive is not None else None
            self._body = raw(self._raw_pos, last)

    def readable(self) -> bool:
        return True

    def _next_chunk(self) -> None:
        assert self._body is not None
        c = self._sums.chunk_bytes
        want = min(c, self._sums.objects[self._suffix].size - self._raw_pos)
        data = self._body.read(want)
        if len(data) < want:
            parts = [data]
            got = len(data)
            while got < want:
                piece = self._body.read(want - got)
                if not piece:
                    break
                parts.append(piece)
                got += len(piece)
            data = b"".join(parts)
        problem = check_range(self._sums, self._suffix, self._raw_pos, data, want, self._name, self._segment_id)
        if problem is not None:
            self._verifier.note_mismatch(problem, 0)
            raise problem.error()
        self._buf, self._buf_start = bytes(data), self._raw_pos
        self._raw_pos += len(data)

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            return b"".join(iter(lambda: self.read(1 << 30), b""))
        if self._pos >= self._end or size == 0:
            return b""
        if self._pos >= self._buf_start + len(self._buf):
            self._next_chunk()
        off = self._pos - self._buf_start
        take = min(size, len(self._buf) - off, self._end - self._pos)
        piece = self._buf if off == 0 and take == len(self._buf) else self._buf[off : off + take]
        self._pos += take
        return piece

    read1 = read

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed and self._body is not None:
            self._body.close()
        super().close()


# Scrubbing ----------------------------------------------------------------------------------------------------
