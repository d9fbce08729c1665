"""FileRecords: a segment's ``.log`` file, a plain concatenation of record batches (Kafka's ``FileRecords``).

Appends are one ``pwrite`` of the whole buffer at the logical end, which advances only once the write is done,
so concurrent readers bounded by the size they saw never read a half-written batch. Reads are ``os.pread`` of
byte ranges: a fetch is served as a slice of the file, never decoded. Positions and sizes are Python ints:
nothing here stops at 2 GiB.

After a crash the file may end in a torn batch (its declared size runs past the end): iteration stops there and
recovery truncates it.

A read in flight keeps its file open: the descriptor is shared by the file and its slices (:class:`_OpenFile`)
and closed once the file is closed AND no slice holds it. A fetch answers a slice, decoded later by the consumer,
maybe after retention closed the segment (``file.delete.delay.ms`` after deleting it): it still reads its own
file, never a closed descriptor (EBADF) nor another file opened since under the same number. So the deleted files
the process holds open are bounded by the slices alive (the reads in flight), not by the segments retention
deleted. Reads through a closed file itself (no slice holding it) raise ``OSError(EBADF)`` naming the file.

Reads are verified where they are decoded: :meth:`FileRecords.batches` (what a consumer of ``Log.read``'s answer
iterates) checks each batch's CRC before yielding it, as Kafka's consumer does with ``check.crcs=true``, and
raises :class:`CorruptRecordError` naming the file, the batch's position in it and its offset. Serving a slice
(``bytes()``, ``read``) decodes nothing. Header walks (recovery, indexes, producer state) pass ``verify=False``.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from local.fetch import LogOffsetPosition, TimestampAndOffset
from local.records import MemoryRecords
from local.records.constants import MAGIC_OFFSET, MAGIC_V2
from local.records.memory_records import AnyBatch, batch_from_buffer, check_offset_order, corrupt_batch_error
from local.records.walk import last_offset, walk_batches

logger = logging.getLogger(__name__)

READ_CHUNK = 1024 * 1024
_unpack_offset = struct.Struct(">q").unpack_from


class OffsetSearch(NamedTuple):
    """What :meth:`FileRecords.search_for_offset` found: the batch (None when the file holds nothing at or after
    the offset), the batch walked over last before it (or before the end), and two signs of damage a consumer's
    read looks at: ``torn_at``, where the whole batches stopped
    short of the file's end when none was found (a cut file, a damaged length), and ``overlap_at``, the position of
    a batch walked over before the one found whose offsets do not come after the batch before it."""

    found: LogOffsetPosition | None
    torn_at: int | None
    overlap_at: int | None
    previous: tuple[int, int] | None = None  # position and size of the last batch walked over, if any


class FileChannelRecordBatch:
    """A batch found in a file: its position and header, with :meth:`load` for the whole batch."""

    __slots__ = ("_batch", "position", "size_in_bytes")

    def __init__(self, position: int, batch: AnyBatch) -> None:
        self.position = position
        self._batch = batch
        self.size_in_bytes = batch.size_in_bytes

    def load(self) -> AnyBatch:
        return self._batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)

    def __bytes__(self) -> bytes:
        return bytes(self._batch)

    def __repr__(self) -> str:
        return f"FileChannelRecordBatch(position={self.position}, {self._batch!r})"


class _OpenFile:
    """A file descriptor shared by a :class:`FileRecords` and its slices: each holds it (the file from its open to
    its close, a slice for its life) and the last to let go closes it."""

    __slots__ = ("_holders", "_lock", "fd", "path")

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path
        self._holders = 1  # the FileRecords that opened it
        self._lock = threading.RLock()  # (re-entrant: a slice's __del__ may run in a thread holding it)

    def hold(self) -> int:
        """One more holder; the descriptor. ``OSError(EBADF)`` naming the file once it is closed."""
        with self._lock:
            if self._holders <= 0:
                raise OSError(errno.EBADF, "the file is closed (its segment was deleted or the log closed)", str(self.path))
            self._holders += 1
            return self.fd

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            last = self._holders == 0
        if last:
            os.close(self.fd)


class FileRecords:
    """See the module docstring. Open with :meth:`open`; :meth:`slice` gives bounded read-only views."""

    def __init__(
        self, path: Path, file: _OpenFile, start: int, end: int | None, is_slice: bool, mutable: bool,
        source: Path | None = None,
    ) -> None:
        self._path = path if isinstance(path, Path) else Path(path)
        # The file errors name: a read-only view's .log is a link in a scratch dir (local.read_only), and an error
        # must name the data dir's file the operator can look at.
        self._source = source or (_link_target(self._path) if not mutable and not is_slice else self._path)
        # A slice holds the descriptor for its life (see the module docstring); the file holds it until closed.
        self._fd = file.hold() if is_slice else file.fd
        self._file: _OpenFile | None = file
        self._start = start
        self._end = end  # None: unbounded (the whole file)
        self._is_slice = is_slice
        self._mutable = mutable
        self._size = 0 if is_slice else os.fstat(self._fd).st_size
        self._closed = False

    def __del__(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None and self._is_slice:
            self._file = None
            file.release()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        mutable: bool = True,
        file_already_exists: bool = False,
        init_file_size: int = 0,
        preallocate: bool = False,
    ) -> FileRecords:
        path = path if isinstance(path, Path) else Path(path)
        flags = os.O_RDWR | os.O_CREAT if mutable else os.O_RDONLY
        fd = os.open(path, flags, 0o644)
        try:
            records = cls(path, _OpenFile(fd, path), 0, None, False, mutable)
        except BaseException:
            os.close(fd)
            raise
        if mutable and preallocate and not file_already_exists and init_file_size > 0:
            os.posix_fallocate(fd, 0, init_file_size) if hasattr(os, "posix_fallocate") else None
            records._size = 0
        return records

    # ------------------------------------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def mutable(self) -> bool:
        """Whether the file was opened for writing. A read-only log's files are not: its recovery only bounds them
        in memory (see :meth:`truncate_to`)."""
        return self._mutable

    @property
    def source_path(self) -> Path:
        """The file as the operator knows it (a read-only view's link resolved): what errors name."""
        return self._source

    @property
    def fd(self) -> int:
        return self._fd

    @property
    def size_in_bytes(self) -> int:
        if self._is_slice:
            assert self._end is not None
            return self._end - self._start
        return self._size

    def __len__(self) -> int:
        return self.size_in_bytes

    def __bytes__(self) -> bytes:
        return self.read(0, self.size_in_bytes)

    def __repr__(self) -> str:
        kind = "slice" if self._is_slice else "file"
        return f"FileRecords({kind} {self._path}, start={self._start}, size={self.size_in_bytes})"

    def append(self, records: MemoryRecords | bytes | bytearray | memoryview, header: bytes = b"") -> int:
        """Write ``records`` at the end in one call; returns the bytes written.

        ``header``, when given, is written in place of the first ``len(header)`` bytes of ``records``: the log
        patches a client batch's base offset, length and leader epoch this way, without copying the batch.
        """
        if not self._mutable or self._is_slice:
            raise PermissionError(f"{self._path} is not open for appending")
        data = records.buffer if isinstance(records, MemoryRecords) else records
        position = self._size
        total = len(data)
        if header:
            view = memoryview(data)
            written = os.pwritev(self._fd, (header, view[len(header):]), position)
            if written < total:  # the header is the first few bytes: a short write almost surely covered it
                data = header + view[len(header):]
        else:
            written = os.pwrite(self._fd, data, position)
        if written < total:  # a short write (a signal, a full disk): write the rest, or fail with the OSError
            view = memoryview(data)
            while written < total:
                written += os.pwrite(self._fd, view[written:], position + written)
        self._size = position + written
        return written

    def read_into(self, position: int, buffer: bytearray | memoryview) -> int:
        """Fill ``buffer`` from ``position`` (relative to this view); returns the bytes read, fewer at the end of
        the view. A sequential scan reusing one buffer saves allocating (and faulting in) one per read."""
        limit = self.size_in_bytes
        if position < 0 or position > limit:
            raise ValueError(f"position {position} outside [0, {limit}] of {self}")
        view = memoryview(buffer)[: max(0, min(len(buffer), limit - position))]
        done = 0
        fd = self._hold()
        try:
            while done < len(view):
                count = os.preadv(fd, [view[done:]], self._start + position + done)
                if not count:
                    break
                done += count
        finally:
            self._unhold()
        return done

    def _hold(self) -> int:
        """The descriptor for one read: a slice holds it already; the file itself holds it for the read, so a close
        racing the read waits for it to end (and a read after the close raises ``OSError(EBADF)`` naming the file)."""
        if self._is_slice:
            return self._fd
        if self._file is None:
            raise OSError(errno.EBADF, "the file is closed", str(self._path))
        return self._file.hold()

    def _unhold(self) -> None:
        if not self._is_slice and self._file is not None:
            self._file.release()

    def read(self, position: int, size: int) -> bytes:
        """``size`` bytes at ``position`` (relative to this view), fewer at the end of the view."""
        limit = self.size_in_bytes
        if position < 0 or position > limit:
            raise ValueError(f"position {position} outside [0, {limit}] of {self}")
        size = min(size, limit - position)
        if size <= 0:
            return b""
        fd = self._hold()
        try:
            data = os.pread(fd, size, self._start + position)
            while len(data) < size:  # pread may return short; loop for the rest
                more = os.pread(fd, size - len(data), self._start + position + len(data))
                if not more:
                    break
                data += more
        finally:
            self._unhold()
        return data

    def slice(self, position: int, size: int) -> FileRecords:
        """A read-only view of ``size`` bytes from ``position`` (clipped to the current size)."""
        if position < 0:
            raise ValueError(f"invalid slice position {position}")
        if size < 0:
            raise ValueError(f"invalid slice size {size}")
        available = self.size_in_bytes
        end = min(self._start + position + size, self._start + available)
        if self._file is None:
            raise OSError(errno.EBADF, "the file is closed", str(self._path))
        view = FileRecords(
            self._path, self._file, self._start + position, max(end, self._start + position), True, False, self._source
        )
        return view

    # ------------------------------------------------------------------------------------------------------
    # Iteration

    def _iter_raw(self, start_position: int = 0, chunk: int = READ_CHUNK) -> Iterator[tuple[int, memoryview]]:
        """(position, batch bytes) of every whole batch from ``start_position``; stops at a torn tail. Each batch
        is a view of a buffer of its own read (batches handed out outlive the walk)."""
        for pos, size, view, at in walk_batches(
            self.read_into, self.size_in_bytes, start_position, window=chunk, origin=str(self._source),
            base_position=self._start, context={"path": str(self._source)},
        ):
            yield pos, view[at : at + size]

    def batches(self, start_position: int = 0, verify: bool = True) -> Iterator[FileChannelRecordBatch]:
        """Every whole batch from ``start_position`` (v2 or legacy), each with its position in this view, its CRC
        checked first unless ``verify=False``: a mismatch, or offsets not after the previous batch's, raises
        CorruptRecordError naming the file, the position in it and the offset."""
        previous_last = -(2**63)
        for pos, data in self._iter_raw(start_position):
            batch = batch_from_buffer(data)
            if verify:
                if not batch.is_valid():
                    raise corrupt_batch_error(batch, str(self._source), self._start + pos, {"path": str(self._source)})
                previous_last = check_offset_order(
                    batch, previous_last, str(self._source), self._start + pos, {"path": str(self._source)})
            yield FileChannelRecordBatch(pos, batch)

    def records(self, verify: bool = True) -> Iterator[Any]:
        """Every record of every batch (CRC-checked unless ``verify=False``)."""
        for batch in self.batches(verify=verify):
            yield from batch.records()

    def search_for_offset_from_position(self, target_offset: int, starting_position: int) -> LogOffsetPosition | None:
        """The first batch from ``starting_position`` whose last offset is >= ``target_offset``.

        Walks batch headers only: a small window is read and refilled at the next header, so large batches are
        skipped without being read (a fetch reads them once, as a slice).
        """
        return self.search_for_offset(target_offset, starting_position)[0]

    def search_for_offset(self, target_offset: int, starting_position: int, previous_last: int = -1) -> OffsetSearch:
        """:meth:`search_for_offset_from_position`, with what a consumer's read checks of the walk (see
        :class:`OffsetSearch`); ``previous_last`` is the last offset before the first batch walked, when known (a
        segment's base offset - 1 from its start). The end is the size when the walk began: an append meanwhile is
        no torn tail."""
        overlap_at: int | None = None
        end = self.size_in_bytes
        walked = starting_position
        previous: tuple[int, int] | None = None
        for pos, size, view, at in walk_batches(
            self.read_into, end, starting_position, whole=False, window=8192, origin=str(self._source),
            base_position=self._start, context={"path": str(self._source)},
        ):
            last = last_offset(view, at)
            base = _unpack_offset(view, at)[0] if view[at + MAGIC_OFFSET] == MAGIC_V2 else -1  # legacy: last only
            if last >= target_offset:
                return OffsetSearch(LogOffsetPosition(last, pos, size, base, previous_last), None, overlap_at, previous)
            if overlap_at is None and view[at + MAGIC_OFFSET] == MAGIC_V2 and (base < 0 or base <= previous_last):
                overlap_at = pos
            previous_last = last
            previous = (pos, size)
            walked = pos + size
        return OffsetSearch(None, walked if walked < end else None, overlap_at, previous)

    def search_for_timestamp(self, target_timestamp: int, starting_position: int, starting_offset: int) -> TimestampAndOffset | None:
        """The first record at or after ``starting_offset`` whose timestamp is >= ``target_timestamp``."""
        for batch in self.batches(starting_position):
            if batch.max_timestamp >= target_timestamp:
                for rec in batch.records():
                    if rec.timestamp >= target_timestamp and rec.offset >= starting_offset:
                        epoch = batch.partition_leader_epoch
                        return TimestampAndOffset(rec.timestamp, rec.offset, epoch if epoch >= 0 else None)
        return None

    def largest_timestamp_after(self, start_position: int) -> TimestampAndOffset:
        """The largest batch max timestamp from ``start_position`` and the last offset of its batch."""
        best = TimestampAndOffset(-1, -1)
        for batch in self.batches(start_position, verify=False):  # headers only
            if batch.max_timestamp > best.timestamp:
                best = TimestampAndOffset(batch.max_timestamp, batch.last_offset)
        return best

    # ------------------------------------------------------------------------------------------------------
    # File operations

    def truncate_to(self, target_size: int) -> int:
        """Cut the file to ``target_size`` bytes; returns the bytes removed. A file opened read-only is only
        bounded in memory (a read-only log's recovery): the file itself is never changed."""
        original = self.size_in_bytes
        if target_size > original or target_size < 0:
            raise ValueError(f"attempt to truncate {self._path} to {target_size} bytes; it has {original}")
        if self._mutable and target_size < os.fstat(self._fd).st_size:
            os.ftruncate(self._fd, target_size)
        self._size = target_size
        return original - target_size

    def flush(self) -> None:
        if not self._closed and self._mutable:
            fd = self._hold()  # a close racing the flush (retention, a closing log) waits for the fsync to end
            try:
                os.fsync(fd)
            finally:
                self._unhold()

    def trim(self) -> None:
        """Drop preallocated space past the logical end."""
        if self._mutable and os.fstat(self._fd).st_size > self._size:
            os.ftruncate(self._fd, self._size)

    def close(self) -> None:
        if self._closed or self._is_slice:
            return
        self.flush()
        self.trim()
        self.close_handlers()

    def close_handlers(self) -> None:
        """Let go of the descriptor: closed now, or when the last slice holding it goes (a read in flight)."""
        if not self._closed and not self._is_slice:
            self._closed = True
            file, self._file = self._file, None
            if file is not None:
                file.release()

    def delete_if_exists(self) -> bool:
        self.close_handlers()
        try:
            self._path.unlink()
            return True
        except FileNotFoundError:
            return False

    def rename_to(self, path: str | os.PathLike[str]) -> None:
        target = Path(path)
        try:
            os.replace(self._path, target)
        finally:
            if self._source == self._path:
                self._source = target  # errors name the file by the name it has now (not a cleaning's .cleaned)
            self._path = target


def _link_target(path: Path) -> Path:
    """Where the link ``path`` points (one ``readlink``, not a walk of every component), or ``path`` itself."""
    try:
        target = os.readlink(path)
    except OSError:  # not a link
        return path
    return Path(target) if os.path.isabs(target) else path.parent / target
