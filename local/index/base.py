"""The base of Kafka's memory-mapped segment indexes (Kafka's ``AbstractIndex``).

An index file is an array of fixed-size, big-endian entries, memory-mapped. It knows nothing of entry
formats: subclasses give the entry layout (a ``struct.Struct`` and the matching numpy dtype), how to derive
the search key of every entry (vectorised) and the value of entry n, and their sanity check.

File life cycle (identical to Kafka):

* a NEW file is preallocated, zero-filled, to ``max_index_size`` rounded down to the entry size; the index
  starts empty and appends fill it from the front;
* disk blocks are allocated for real (zeros written, see :func:`allocate`) ahead of the entries,
  :data:`ALLOCATION_STEP` bytes at a time, the first step when the file is created: a store through the
  mapping never reaches a page the file system has not backed. A full disk is then
  an ENOSPC ``OSError`` when the index is created or an append needs the next step, never a SIGBUS (which
  kills the process) on the store. (Allocating the whole maximum up front would reserve 10 MiB per index of
  every active segment, 20 MiB a partition, where Kafka's sparse file reserves nothing.) A sparse file written
  by Kafka or left by a crash is allocated the same way from its last entry on;
* an EXISTING file is taken whole: every full entry of its length counts as an entry. A closed index is
  trimmed to its entries (``close``/``trim_to_valid_size``), and the active segment's index is resized back
  to the maximum by its owner (``resize``) after loading;
* no checksum: after a crash an index may hold stale or zero entries past the real ones; ``sanity_check``
  finds that and recovery rebuilds the index from the log.

Search: the mmap stays the storage of record, and an in-memory ``array('q')`` mirror of the key column
(8 bytes an entry, built with numpy on open, extended on append, cut on truncate) serves the binary search.
Kafka's warm-section search is kept: the last 8192 bytes' worth of entries are searched first whenever the
target is at or after the warm section's first entry, so that lookups near the end (nearly all of them)
touch the same few pages. Mutations hold a lock; lookups take none: they read an immutable snapshot of the
mirror (truncation replaces the array rather than cutting it) and the current mapping, which is never shrunk
below the entries a reader can see.
"""

from __future__ import annotations

import logging
import mmap
import operator
import os
import struct
import sys
import threading
from abc import ABC, abstractmethod
from array import array
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import numpy as np

from local.errors import IndexClosedError, IndexOffsetOverflowError, ReadOnlyIndexError
from local.index.entries import INT32_MAX
from local.native import IndexCore

logger = logging.getLogger(__name__)

_NO_KEY = 2**63  # above every int64 key: an empty index searches nothing

WARM_SECTION_BYTES = 8192
"""Kafka's warm section: small enough that a lookup in it touches every one of its pages (4 KiB pages)."""


def round_down_to_multiple(number: int, factor: int) -> int:
    """The greatest multiple of ``factor`` not above ``number``: ``round_down_to_multiple(67, 8) == 64``."""
    return factor * (number // factor)


_DETACH_IDLE = sys.version_info < (3, 13)
"""Whether an index not being written holds a copy of its bytes instead of a mapping. CPython's ``mmap`` keeps a
duplicate of the file descriptor for the mapping's life before 3.13 (``trackfd=False``): with every rolled segment's
two indexes mapped, a process held three descriptors per local segment, and 500 partitions rolling every 15 s took
a data dir offline with EMFILE within minutes (a helper's run); Kafka holds one (the JVM closes the file once it has
mapped an index). A closed index is trimmed to its entries, which cost about as much memory again as the key mirror
already does; it is mapped again by its first write (a truncation, or a segment made active again)."""

_DETACH_AT_OPEN_BYTES = 1 << 20
"""The longest index file an open reads into memory instead of mapping (:data:`_DETACH_IDLE`)."""

ALLOCATION_STEP = 64 * 1024
"""How far ahead of the entries an index file's blocks are allocated (the first step on creation)."""

_ZEROS = bytes(1 << 16)


def allocate(fd: int, offset: int, length: int) -> None:
    """Make bytes [offset, offset + length) of ``fd`` allocated, zero-filled, extending the file.

    The zeros are written, not ``posix_fallocate``d: fallocate leaves unwritten extents, and the first store
    through the mapping into one converts it in the file system's journal, which on ext4 waits behind any fsync
    in progress: the first index entry after every roll waited 4-5 ms on the rolled segment's background flush
    (bench/RESULTS.md, ninth session). Written zeros are ordinary page-cache pages whose space the file system
    reserves at the write: a full disk is ENOSPC here, and a store through the mapping never meets SIGBUS.
    """
    position, end = offset, offset + length
    while position < end:
        position += os.pwrite(fd, _ZEROS[: min(len(_ZEROS), end - position)], position)


class AbstractIndex(IndexCore, ABC):
    """A memory-mapped file of fixed-size entries searched by key (see the module docstring).

    Subclasses call ``__init__`` with their layout, then implement :meth:`_keys_of`, :meth:`_value_at`,
    :meth:`sanity_check` and :meth:`truncate_to`.
    """

    # Slots, beside the append's fields in IndexCore (local.native): a class under a C base has no inline
    # instance dict, and CPython 3.11 reads a dict attribute of such an object five times slower than a slot (an
    # index lookup reads several). The __dict__ keeps instances open to new attributes (tests patch methods).
    __slots__ = (
        "__dict__",
        "__weakref__",
        "_detached",
        "_entry_dtype",
        "_entry_struct",
        "_max_index_size",
        "_pack_entry",
        "_path",
        "_search",
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int,
        max_index_size: int,
        writable: bool,
        *,
        entry_struct: struct.Struct,
        entry_dtype: np.dtype[Any],
        reserved_slots: int = 0,
    ) -> None:
        if entry_struct.size != entry_dtype.itemsize:
            raise ValueError(f"entry struct ({entry_struct.size} B) and dtype ({entry_dtype.itemsize} B) differ")
        base_offset = _int_arg("base_offset", base_offset, path)
        max_index_size = _int_arg("max_index_size", max_index_size, path)
        if base_offset < 0:
            raise ValueError(f"base_offset must be >= 0, got {base_offset} for index {path}")
        self._path = path if isinstance(path, Path) else Path(path)
        self._base_offset = base_offset
        self._max_index_size = max_index_size
        self._writable = writable
        self._entry_struct = entry_struct
        self._entry_dtype = entry_dtype
        self._entry_size = entry_struct.size
        self._pack_entry = entry_struct.pack_into
        self._warm_entries = WARM_SECTION_BYTES // self._entry_size
        self._reserved_slots = reserved_slots  # slots at the end that appends leave free (see is_full)
        self._lock = threading.RLock()
        self._closed = False
        self._mmap: mmap.mmap | None = None
        self._detached = False  # holding a copy of the file's bytes, not a mapping (see _DETACH_IDLE)
        self._length = 0
        self._allocated = 0  # bytes [0, _allocated) of the file are backed by disk blocks
        self._keys: array[int] = array("q")
        self._search: tuple[array[int], int, int] = (self._keys, 0, _NO_KEY)
        self._open_mapping()

    # ---------------------------------------------------------------------------------------------------
    # opening and mapping

    def _open_mapping(self) -> None:
        """Create (and preallocate) or open the file, map it, and build the key mirror."""
        newly_created = False
        if self._writable:
            try:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                newly_created = True
            except FileExistsError:
                fd = os.open(self._path, os.O_RDWR)
        else:
            try:
                fd = os.open(self._path, os.O_RDONLY)
            except FileNotFoundError:
                # A read-only index of a missing file is empty; it must not create the file.
                logger.debug("Read-only index %s does not exist: empty", self._path)
                return
        try:
            if newly_created:
                if self._max_index_size < self._entry_size:
                    os.close(fd)
                    fd = -1
                    self._path.unlink()
                    raise ValueError(
                        f"invalid max index size {self._max_index_size} for {self._path}: "
                        f"below the entry size {self._entry_size}"
                    )
                size = round_down_to_multiple(self._max_index_size, self._entry_size)
                try:
                    os.ftruncate(fd, size)
                    allocate(fd, 0, min(size, ALLOCATION_STEP))
                except OSError as exc:
                    # No half-allocated file left behind (a full disk): the index did not come to exist.
                    os.close(fd)
                    fd = -1
                    self._path.unlink(missing_ok=True)
                    if exc.filename is None:
                        exc.filename = str(self._path)
                    raise
            stat = os.fstat(fd)
            self._length = stat.st_size
            if newly_created:
                self._allocated = min(self._length, ALLOCATION_STEP)
            elif stat.st_blocks * 512 >= stat.st_size:
                self._allocated = self._length
            # else a sparse file (Kafka sets an active index's length without writing it; a crash leaves one
            # too): allocated from its last entry on, by the first append that needs it.
            if _DETACH_IDLE and self._writable and not newly_created and self._length <= _DETACH_AT_OPEN_BYTES:
                # (an index opened is read, and mapped when first written; a longer one, such as a preallocated index
                # a crash left untrimmed, stays mapped rather than copied whole, zeros and all, until it is trimmed)
                self._detach_from(fd)
            else:
                self._mmap = self._map(fd, self._length)
        finally:
            if fd >= 0:
                os.close(fd)
        entries = 0 if newly_created else self._length // self._entry_size
        self._set_keys(self._build_keys(entries))
        logger.debug(
            "Loaded index %s: entry size %d, max entries %d, entries %d",
            self._path, self._entry_size, self.max_entries, entries,
        )

    def _map(self, fd: int, length: int) -> mmap.mmap | None:
        if length == 0:
            return None  # a zero-length file cannot be mapped
        if not self._writable:
            # A read-only index (the remote index cache's, `tiered dump`'s) is read whole instead: CPython's mmap
            # keeps a duplicate of the file descriptor for as long as the mapping lives, so a cache of hundreds
            # of remote indexes would hold hundreds of descriptors and run into the process's limit. Its bytes
            # are what the cache's byte bound counts. (bytes answers every read a mapping does.)
            return _read_whole(fd, length)  # type: ignore[return-value]
        if sys.version_info >= (3, 13):  # no duplicate descriptor held for the mapping's life (Kafka closes it too)
            return mmap.mmap(fd, length, access=mmap.ACCESS_WRITE, trackfd=False)
        return mmap.mmap(fd, length, access=mmap.ACCESS_WRITE)

    def _detach_from(self, fd: int) -> None:
        """Hold a copy of the file's bytes instead of a mapping (:data:`_DETACH_IDLE`): reads see the same entries,
        and the first write maps the file again (:meth:`_check_writable`). Under the lock, or while opening."""
        self._mmap = _read_whole(fd, self._length) if self._length else None  # type: ignore[assignment]
        self._detached = True

    def _detach(self) -> None:
        """Give up the mapping of an index no longer written (a rolled or closed segment's, trimmed), so that it
        holds no file descriptor (:data:`_DETACH_IDLE`). The caller holds the lock."""
        if not _DETACH_IDLE or self._detached or self._closed or not self._writable:
            return
        fd = os.open(self._path, os.O_RDONLY)
        try:
            self._detach_from(fd)  # (the old mapping is dropped: a lock-free reader may hold it a while longer)
        finally:
            os.close(fd)

    def _attach(self) -> None:
        """Map the file again for a write (:meth:`_detach`). The caller holds the lock."""
        fd = os.open(self._path, os.O_RDWR)
        try:
            self._mmap = self._map(fd, self._length)
            self._detached = False
        finally:
            os.close(fd)

    def _raw_entries(self, count: int) -> bytes:
        """A copy of the first ``count`` entries' bytes (a copy, so no buffer export pins the mapping)."""
        if count == 0 or self._mmap is None:
            return b""
        return self._mmap[: count * self._entry_size]

    def _entry_array(self, count: int) -> np.ndarray[Any, np.dtype[Any]]:
        """The first ``count`` entries as a numpy structured array (for vectorised checks)."""
        return np.frombuffer(self._raw_entries(count), dtype=self._entry_dtype, count=count)

    def _build_keys(self, count: int) -> array[int]:
        keys: array[int] = array("q")
        if count:
            keys.frombytes(self._keys_of(self._entry_array(count)).astype("=i8", copy=False).tobytes())
        return keys

    # ---------------------------------------------------------------------------------------------------
    # what subclasses provide

    @abstractmethod
    def _keys_of(self, entries: np.ndarray[Any, np.dtype[Any]]) -> np.ndarray[Any, np.dtype[Any]]:
        """The search key (absolute offset, timestamp) of every entry of a structured array, vectorised."""

    @abstractmethod
    def _value_at(self, n: int) -> int:
        """The value (position, offset) of entry ``n``, read from the mapping."""

    @abstractmethod
    def sanity_check(self) -> None:
        """Detect obvious corruption; raise CorruptIndexError naming the file and the entry."""

    @abstractmethod
    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``; an offset past the last entry changes nothing."""

    def _after_entries_changed(self) -> None:
        """Called under the lock after entries were truncated or the file was remapped (an optional hook: empty here)."""

    # ---------------------------------------------------------------------------------------------------
    # properties

    @property
    def path(self) -> Path:
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def entry_size(self) -> int:
        return self._entry_size

    @property
    def writable(self) -> bool:
        return self._writable

    @property
    def max_index_size(self) -> int:
        return self._max_index_size

    @property
    def entries(self) -> int:
        """The number of valid entries."""
        return len(self._keys)

    @property
    def max_entries(self) -> int:
        """How many entries the current file length holds."""
        return self._length // self._entry_size

    @property
    def reserved_slots(self) -> int:
        """The slots at the end that appends leave free (see :attr:`is_full`)."""
        return self._reserved_slots

    @property
    def length(self) -> int:
        """The file length in bytes (preallocated space included)."""
        return self._length

    @property
    def size_in_bytes(self) -> int:
        """The bytes used by valid entries."""
        return len(self._keys) * self._entry_size

    @property
    def is_full(self) -> bool:
        """True when no slot is left for an append (the reserved slots at the end do not count)."""
        return len(self._keys) >= self._length // self._entry_size - self._reserved_slots

    @property
    def is_closed(self) -> bool:
        return self._closed

    # ---------------------------------------------------------------------------------------------------
    # offsets

    def relative_offset(self, offset: int) -> int:
        """``offset - base_offset``; IndexOffsetOverflowError when it does not fit in [0, 2^31-1]."""
        relative = offset - self._base_offset
        if relative < 0 or relative > INT32_MAX:
            raise IndexOffsetOverflowError(
                f"integer overflow for offset {offset} relative to base offset {self._base_offset} "
                f"in {self._path}",
                offset=offset,
                base_offset=self._base_offset,
                path=self._path,
            )
        return relative

    def can_append_offset(self, offset: int) -> bool:
        """Whether ``offset`` can be stored relative to this index's base offset."""
        return 0 <= offset - self._base_offset <= INT32_MAX

    # ---------------------------------------------------------------------------------------------------
    # search

    def _set_keys(self, keys: array[int]) -> None:
        """Install a new key mirror (caller holds the lock, or is the constructor)."""
        self._keys = keys
        self._move_warm_section()

    def _move_warm_section(self) -> None:
        """Recompute the search snapshot: the mirror, its warm section's first slot and that slot's key.

        Lookups read the tuple once, so they always see a mirror together with a warm start inside it:
        appends only extend the mirror (a stale warm start stays valid), truncation installs a new one.
        """
        keys = self._keys
        first_hot = max(0, len(keys) - 1 - self._warm_entries)
        self._search = (keys, first_hot, keys[first_hot] if keys else _NO_KEY)

    def _largest_lower_bound_slot(self, target: int) -> int:
        """The slot of the greatest key <= ``target``, or -1.

        Kafka's warm-section search: when ``target`` is at or after the warm section's first key, only the
        warm section (the last 8 KiB of entries) is searched, else only the cold part before it.
        """
        keys, first_hot, first_hot_key = self._search
        if target >= first_hot_key:
            return bisect_right(keys, target, first_hot) - 1
        return bisect_right(keys, target, 0, first_hot) - 1

    def _value_bisect_left(self, target: int) -> int:
        """The first slot whose value (position, offset) is >= ``target``; ``entries`` when there is none.

        Values are not mirrored: this rarer search reads the mapping, warm section first like the key
        search. Values never decrease, so this is ``bisect_left`` over the value column. (Kafka's own
        value search can answer one entry late, or not at all, when an entry equals the target exactly.)
        """
        value_at: Callable[[int], int] = self._value_at
        n = len(self._keys)
        if n == 0:
            return 0
        first_hot = max(0, n - 1 - self._warm_entries)
        if value_at(first_hot) < target:
            lo, hi = first_hot + 1, n
        else:
            lo, hi = 0, first_hot
        while lo < hi:
            mid = (lo + hi) >> 1
            if value_at(mid) < target:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # ---------------------------------------------------------------------------------------------------
    # writes (callers hold the lock)

    def _check_writable(self, action: str) -> mmap.mmap | None:
        if self._closed:
            raise IndexClosedError(f"cannot {action} closed index {self._path}", path=self._path)
        if not self._writable:
            raise ReadOnlyIndexError(f"cannot {action} read-only index {self._path}", path=self._path)
        if self._detached:
            self._attach()
        return self._mmap

    def _write_entry(self, key: int, first: int, second: int) -> None:
        """Write the next entry (its two fields) and extend the key mirror. The caller holds the lock and
        checked is_full."""
        mm = self._mmap
        if mm is None or self._closed or not self._writable or self._detached:
            mm = self._check_writable("append to")
            assert mm is not None, f"{self._path} is writable but not mapped"
        keys = self._keys
        n = len(keys)
        position = n * self._entry_size
        if position + self._entry_size > self._allocated:
            self._allocate_for(position + self._entry_size)
        self._pack_entry(mm, position, first, second)
        keys.append(key)  # after the bytes: a reader that sees the key finds its entry written
        if n == 0 or (n > self._warm_entries and not n & 63):
            # The first key, or the warm section slides on. Between moves a stale warm start only makes the
            # warm section up to 64 entries longer than 8 KiB: lookups stay correct and appends stay cheap.
            self._move_warm_section()

    def _allocate_for(self, end: int) -> None:
        """Allocate the file's blocks up to ``end`` at least (a step ahead, within the file's length) before a
        store through the mapping reaches them. From the last entry on only: zeros written by the fallback never
        land on an entry. The caller holds the lock."""
        start = max(self._allocated, len(self._keys) * self._entry_size)
        stop = min(self._length, max(end, start + ALLOCATION_STEP))
        if stop > start:
            fd = os.open(self._path, os.O_RDWR)
            try:
                allocate(fd, start, stop - start)
            except OSError as exc:
                if exc.filename is None:
                    exc.filename = str(self._path)
                raise
            finally:
                os.close(fd)
        self._allocated = stop

    def _write_entries(self, keys: np.ndarray[Any, Any], first: np.ndarray[Any, Any], second: np.ndarray[Any, Any]) -> None:
        """Append many entries in one write and one extend of the key mirror.

        The caller holds the lock and has checked that they fit and keep the index ordered. The bytes go in
        with pwrite, not through the mapping (which sees them: one page cache): storing into fresh pages of
        the file through the mapping costs a page_mkwrite fault per page, which on ext4 can wait
        milliseconds on the journal, and a rebuilt index is all fresh pages. Single appends keep writing
        through the mapping: a pwrite per entry would release the GIL per entry and queue the writer
        behind busy reader threads.
        """
        count = len(keys)
        if not count:
            return
        self._check_writable("append to")
        entries = np.empty(count, dtype=self._entry_dtype)
        first_field, second_field = self._entry_dtype.names or ()
        entries[first_field] = first
        entries[second_field] = second
        data = entries.tobytes()
        position = len(self._keys) * self._entry_size
        fd = os.open(self._path, os.O_WRONLY)
        try:
            written = 0
            while written < len(data):
                written += os.pwrite(fd, data[written:], position + written)
        finally:
            os.close(fd)
        self._allocated = max(self._allocated, position + len(data))  # pwrite allocated what it wrote
        self._keys.frombytes(np.ascontiguousarray(keys, dtype=np.int64).tobytes())
        self._move_warm_section()

    def _truncate_to_entries(self, count: int) -> None:
        with self._lock:
            if count < len(self._keys):
                self._set_keys(self._keys[:count])  # a new array: concurrent readers keep their snapshot
            self._after_entries_changed()
            logger.debug("Truncated index %s to %d entries", self._path, count)

    def truncate(self) -> None:
        """Remove every entry (the file keeps its length)."""
        self._truncate_to_entries(0)

    def reset(self) -> None:
        """Remove every entry and resize the file back to ``max_index_size``."""
        with self._lock:
            self.truncate()
            self.resize(self._max_index_size)

    def resize(self, new_size: int) -> bool:
        """Set the file (and mapping) length to ``new_size`` rounded down to the entry size.

        Returns False when the length is already that. Used to trim a closed index to its entries and to
        give the active segment's index its preallocated space back. Never drops entries: a size below
        the valid entries raises ValueError.
        """
        with self._lock:
            rounded = round_down_to_multiple(new_size, self._entry_size)
            if rounded == self._length:
                logger.debug("Index %s not resized: already %d bytes", self._path, rounded)
                return False
            self._check_writable("resize")
            if rounded < self.size_in_bytes:
                raise ValueError(
                    f"cannot resize index {self._path} to {rounded} bytes: it holds {self.size_in_bytes} "
                    "bytes of entries"
                )
            fd = os.open(self._path, os.O_RDWR)
            try:
                os.ftruncate(fd, rounded)  # growing leaves a hole: appends allocate it a step at a time
                self._allocated = min(self._allocated, rounded)
                # The old mapping is dropped, not closed: a lock-free reader may still hold it, and it stays
                # valid over the entries that reader can see (the file never shrinks below them).
                self._mmap = self._map(fd, rounded)
                self._length = rounded
            finally:
                os.close(fd)
            self._after_entries_changed()
            logger.debug("Resized index %s to %d bytes (%d entries)", self._path, rounded, self.entries)
            return True

    def trim_to_valid_size(self) -> None:
        """Shrink the file to exactly its valid entries (done when a segment is closed or rolled)."""
        with self._lock:
            if self._writable and not self._closed:
                self.resize(self.size_in_bytes)
                self._detach()

    def flush(self) -> None:
        """msync the mapping, which also covers entries written with pwrite (no-op when closed, read-only or
        empty)."""
        with self._lock:
            if self._detached and self._writable and not self._closed:
                try:  # (written through a mapping since dropped: the file's pages)
                    fd = os.open(self._path, os.O_RDONLY)
                except FileNotFoundError:
                    return  # renamed this moment (retention's .deleted): a mapping's msync could not fail here
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            elif self._mmap is not None and self._writable and not self._closed:
                self._mmap.flush()

    # ---------------------------------------------------------------------------------------------------
    # life cycle

    def close(self) -> None:
        """Trim a writable index to its entries, then release the mapping. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self.trim_to_valid_size()
            self.close_handler()

    def close_handler(self) -> None:
        """Release the mapping without trimming (Kafka's forceUnmap). Lookups fail afterwards."""
        with self._lock:
            mm, self._mmap = self._mmap, None
            self._closed = True
            if isinstance(mm, mmap.mmap):
                try:
                    mm.close()
                except BufferError:  # a reader still holds a view: the mapping goes when it lets go
                    logger.debug("Index %s still referenced at unmap; left to the garbage collector", self._path)

    def delete_if_exists(self) -> bool:
        """Release the mapping and delete the file; False when it did not exist."""
        self.close_handler()
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        return True

    def rename_to(self, path: str | os.PathLike[str]) -> None:
        """Rename the file (atomic within a file system); the new path is adopted even if renaming fails."""
        target = Path(path)
        try:
            os.replace(self._path, target)
        finally:
            self._path = target

    def _check_entry_args(self, *args: tuple[str, object]) -> None:
        """Refuse an append to a closed index (it would look full) and an entry of another type than int (a
        float or str would fail inside ``struct``), naming the index: called off the fast path only."""
        if self._closed:
            raise self._closed_error()
        for name, arg in args:
            _int_arg(name, arg, self._path)

    def _closed_error(self) -> IndexClosedError:
        return IndexClosedError(f"index {self._path} is closed", path=self._path)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(path={str(self._path)!r}, base_offset={self._base_offset}, "
            f"entry_size={self._entry_size}, entries={self.entries}, max_entries={self.max_entries})"
        )


def _int_arg(name: str, value: object, path: object) -> int:
    """``value`` as an int (anything with ``__index__``, numpy's integers too), or a TypeError naming ``name`` and
    the index: a bool, float or str is refused rather than coerced."""
    if type(value) is int:
        return value
    if not isinstance(value, bool):
        try:
            return operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            pass
    raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r} for index {path}")


def _read_whole(fd: int, length: int) -> bytes:
    """The first ``length`` bytes of the file (fewer if it is shorter)."""
    parts, done = [], 0
    while done < length:
        part = os.pread(fd, length - done, done)
        if not part:
            break
        parts.append(part)
        done += len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)
