"""Walking a segment's batches in chunks (a local file or a streamed remote object), checking each one's header and
CRC: CRC-32C over attributes..end for v2, zlib CRC-32 over magic..end for legacy v0/v1.

A sound v2 batch costs one ``unpack_from`` and one checksum over a memoryview; anything else takes the slow path,
which says what is wrong. The result is the batches' positions, offsets and max timestamps, in columns, for the
index checks of :mod:`tiered.scrub.files`. Feeding the same bytes in any chunking gives the same problems.
"""

from __future__ import annotations

import os
import struct
import zlib
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from local.crc import crc32c
from local.errors import CorruptRecordError
from local.records.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
)
from local.records.constants import INT32_MAX
from local.records.memory_records import batch_from_buffer
from local.records.walk import checked_batch_size
from tiered.scrub.content import fold_records, new_digest
from tiered.scrub.report import MAX_LISTED_PER_FILE, Problem, problem_at

CHUNK_BYTES = 8 * 1024 * 1024
"""How much of a segment is read at a time (local ``pread`` or one remote ranged GET)."""

_LEGACY_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_I64 = struct.Struct(">q")
_LEGACY_CRC_START = LOG_OVERHEAD + 4  # a legacy CRC covers magic..end
_MAX_CODEC = 4  # zstd
_CONTROL = 0x20  # attributes bit 5: a control batch (transaction markers)
_TRANSACTIONAL = 0x10
_LOG_APPEND_TIME = 0x08

Progress = Callable[[int], None]


def no_progress(_n: int) -> None:
    return None


class BatchScanner:
    """Walks the batches of one segment fed to it in chunks (from a file or a remote object), checking each.

    Keeps, per whole batch, its position, base and last offset and max timestamp in ``array('q')`` columns (32
    bytes a batch) for the index checks. After a problem that makes the next batch's position unknowable (a bad
    length or magic) it stops parsing and only counts bytes.
    """

    def __init__(self, name: str, *, remote: bool, segment_base: int, min_offset: int, total_size: int | None,
                 progress: Progress = no_progress, content: bool = False) -> None:
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
        self.stopped_at: int | None = None  # where parsing stopped for good
        self.bytes_seen = 0
        self._pending = b""
        self._pending_at = 0
        self._next_min = min_offset  # the smallest base offset the next batch may have
        self._counts: dict[str, int] = {}
        # Records of its data batches (control batches' records are no consumer's), while only v2 batches are seen.
        self.records = 0
        self.records_known = True
        # With ``content``: the digest of its data records (tiered.scrub.content), which the columnar copy's rows are
        # compared with, and the offset ranges and producer (base, last, producer id) of its transactional data batches, where alone a row
        # may be marked aborted. None when not asked, or once a batch could not be decoded.
        self.content: Any = new_digest() if content else None
        self.transactional = array("q")

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
        unpack, checksum = BATCH_HEADER.unpack_from, crc32c
        positions, bases, lasts, max_timestamps = (self.positions.append, self.bases.append, self.lasts.append,
                                                   self.max_timestamps.append)
        next_min, max_last = self._next_min, self.segment_base + INT32_MAX
        records = 0
        while n - p >= RECORD_BATCH_OVERHEAD and view[p + MAGIC_OFFSET] == MAGIC_V2:
            (base, length, epoch, _magic, crc, attributes, delta, _base_ts, max_ts, _pid, _pepoch, _seq,
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
            if not attributes & _CONTROL:
                records += count
                if self.content is not None:
                    self._fold(view[p : p + size], start + p, base, attributes, epoch)
            next_min = last + 1
            p += size
        self._next_min = next_min
        self.records += records
        return p

    def _parse_one(self, view: memoryview, start: int, p: int) -> int:
        """Check the one batch at ``p`` whatever its state, reporting what is wrong; the position after it, or -1
        when it is not all there yet or the walk cannot go on."""
        n = len(view)
        total = self.total_size
        if n - p < LOG_OVERHEAD + 5:  # offset, length, epoch and magic: enough to size the batch
            return -1
        position = start + p
        base = _I64.unpack_from(view, p)[0]
        magic = view[p + MAGIC_OFFSET]
        try:  # the walk's rule (local.records.walk): a bad length or magic
            size = checked_batch_size(view, p, position)
        except CorruptRecordError as exc:
            self.report("corrupt_batch", f"{exc} (or a damaged batch length before it): the rest of the segment "
                        "cannot be walked", position, base)
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
        (base, _length, epoch, _magic, crc, attributes, delta, _base_ts, max_ts, _pid, _pepoch, _seq,
         count) = BATCH_HEADER.unpack_from(view, p)
        computed = crc32c(view[p + ATTRIBUTES_OFFSET : p + size])
        last = base + delta
        if computed != crc:
            self.report("crc_mismatch", f"batch of {size} bytes: stored CRC {crc:#010x}, computed {computed:#010x}",
                        position, base)
        elif delta < 0 or not 0 <= count <= delta + 1:
            self.report("corrupt_batch", f"record count {count} does not fit last offset delta {delta}",
                        position, base)
        elif attributes & 0x07 > _MAX_CODEC:
            self.report("corrupt_batch", f"unknown compression codec {attributes & 0x07}", position, base)
        if not attributes & _CONTROL:
            self.records += count
            if self.content is not None:
                if computed == crc:
                    self._fold(view[p : p + size], position, base, attributes, epoch)
                else:
                    self.content = None  # (its records cannot be vouched for)
        self._add(position, base, max(base, last), max_ts)

    def _fold(self, batch: memoryview, position: int, base: int, attributes: int, epoch: int) -> None:
        """Fold a data batch whose CRC matched into the content digest, decoded by the engine's decoder; a batch
        whose records do not decode is a problem (its producer wrote it so, or it was damaged before its CRC)."""
        try:
            decoded = batch_from_buffer(bytes(batch))
            records = list(decoded.records())
        except Exception as exc:  # a codec's own errors, besides InvalidRecordError
            self.report("corrupt_batch", f"its records do not decode: {type(exc).__name__}: {exc}", position, base)
            self.content = None
            return
        fold_records(self.content, records, 1 if attributes & _LOG_APPEND_TIME else 0, epoch)
        if attributes & _TRANSACTIONAL:
            self.transactional.extend((base, decoded.last_offset, decoded.producer_id))

    def _check_legacy(self, view: memoryview, p: int, position: int, size: int, magic: int) -> None:
        offset, _size, crc, _magic, attributes = _LEGACY_HEAD.unpack_from(view, p)
        self.records_known = False  # a compressed wrapper's records are only counted by decompressing it
        computed = zlib.crc32(view[p + _LEGACY_CRC_START : p + size]) & 0xFFFFFFFF
        if computed != crc:
            self.report("crc_mismatch", f"legacy v{magic} message of {size} bytes: stored CRC {crc:#010x}, "
                        f"computed {computed:#010x}", position, offset)
        timestamp = _I64.unpack_from(view, p + 18)[0] if magic == 1 else -1
        # A compressed wrapper's offset is its last inner offset; its first is only known by decompressing, so it
        # is taken as the lowest it may be (old brokers indexed a wrapper by its first inner offset).
        first = min(offset, self._next_min) if attributes & 0x07 else offset
        self._add(position, first, offset, timestamp)

    def _add(self, position: int, base: int, last: int, max_ts: int) -> None:
        if base < self._next_min:
            what = (f"the previous batch's last offset {self.lasts[-1]}" if self.lasts else
                    f"{self._next_min - 1} (the segment starts at {self.segment_base}; the segment before it ends "
                    f"at {self._next_min - 1} or below)")
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
