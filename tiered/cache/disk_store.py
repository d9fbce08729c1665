"""The chunk cache's disk tier: chunks in a bounded ``diskcache.Cache`` (SQLite + files), shared by the processes
of a machine and kept across restarts, least recently used evicted first.

On disk each chunk is followed by a trailer holding its crc32c (8 bytes: ``b"tcrc"`` and the crc, big-endian),
checked when the chunk is read back: a chunk that does not match (damaged on disk, or written by a version without
the trailer) is dropped from the store and the caller fetches it again. A chunk read back is a read-only map of its
cache file (no copy; a map outlives the file's eviction: the inode goes when the last map does).

A map shows what the file holds now, not what was checked: a write to the file after it was mapped (a stray
process, a disk tool, an attacker) changes the bytes a reader holding the map is served. So the store keeps, per
map, the file's identity and times when it was mapped (:meth:`DiskChunkStore.changed_on_disk` compares them with
the file's now, at most once every :data:`RECHECK_SECONDS` per map: a ``stat`` per read of a held chunk doubled
the cost of small reads): its holder reads the chunk back, checked, when they differ. So a damaged file is served
for at most that long; a write within the file system's timestamp granularity (a few milliseconds) of the mapping
is not seen.

Cold objects: chunks are stored as they are read, so when one chunk of an object is missing the next are missing
too; for ``COLD_SECONDS`` after a miss (a chunk absent, not one dropped as damaged), lookups of that object's chunks answer "missing" without asking SQLite
(whose queries wait behind the writer's transactions). The worst case is a chunk another process stored in that
window fetched again. Thread-safe: diskcache is, and the cold list has its own lock.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
import time as _time
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any, NamedTuple

from local.crc import crc32c
from tiered.cache.chunk_memory import Chunk
from tiered.cache.locks import DISK_COLD, RankedLock

logger = logging.getLogger(__name__)

TRAILER = struct.Struct(">4sI")  # on disk after each chunk: magic, crc32c of the chunk
TRAILER_MAGIC = b"tcrc"
COLD_OBJECTS = 1024  # how many objects are remembered as recently missing chunks on disk
COLD_SECONDS = 10.0  # for how long after a miss their chunks are not looked up
RECHECK_SECONDS = 1.0  # how often, at most, a held map's file is compared with what was mapped


class FileStamp(NamedTuple):
    """What a cache file was when it was mapped: where, which inode, its size and times."""

    path: str
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, path: str, st: os.stat_result) -> FileStamp:
        return cls(path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class DiskChunkStore:
    """See the module docstring."""

    def __init__(self, directory: str | Path, size_limit: int) -> None:
        import diskcache

        self._cache = diskcache.Cache(str(directory), size_limit=size_limit, eviction_policy="least-recently-used")
        self._cold: OrderedDict[str, float] = OrderedDict()  # object -> until when its lookups are skipped
        self._cold_lock = RankedLock("disk store cold objects", DISK_COLD)
        self.mismatches = 0  # chunks read back that failed their crc32c (dropped, to be fetched again)
        # Per live map of a cache file: the file as it was mapped, and when to compare it again (changed_on_disk);
        # gone with the map.
        self._stamps: weakref.WeakKeyDictionary[mmap.mmap, list[Any]] = weakref.WeakKeyDictionary()
        self._stamps_lock = threading.Lock()

    def lookup(self, name: str, obj: str) -> Chunk | None:
        """Chunk ``name`` of object ``obj`` checked against its trailer, or None (and the object marked cold) when
        it is not on disk. A membership query first: get() of a least-recently-used cache updates the access time,
        a write transaction."""
        now = _time.monotonic()
        with self._cold_lock:
            cold = self._cold.get(obj, 0.0) >= now
        if cold:
            return None
        data, damaged = self._checked(name, verify=True) if name in self._cache else (None, False)
        if damaged:
            return None  # the object's other chunks may well be sound: they are still looked up
        if data is None:
            with self._cold_lock:
                self._cold[obj] = now + COLD_SECONDS
                self._cold.move_to_end(obj)
                while len(self._cold) > COLD_OBJECTS:
                    self._cold.popitem(last=False)
        return data

    def changed_on_disk(self, chunk: Chunk) -> bool:
        """Whether the cache file ``chunk`` maps (a chunk this store returned) is no longer the file it mapped: another
        inode at its path, or another size or time (a write since). Asked again within :data:`RECHECK_SECONDS` of
        the last comparison, the answer is no without looking. A chunk that is not a map, or whose file the store
        has evicted since (nothing can write it through its path any more), has not changed."""
        mapping = chunk.obj if isinstance(chunk, memoryview) else chunk
        if not isinstance(mapping, mmap.mmap):
            return False
        now = _time.monotonic()
        with self._stamps_lock:
            entry = self._stamps.get(mapping)
            if entry is None or now < entry[1]:
                return False
            entry[1] = now + RECHECK_SECONDS
        stamp: FileStamp = entry[0]
        try:
            current = FileStamp.of(stamp.path, os.stat(stamp.path))
        except FileNotFoundError:
            return False
        return current != stamp

    def mapped(self, name: str, verify: bool = False) -> Chunk | None:
        """The chunk's cache file mapped read-only without its trailer, or None when it is not on disk (or, with
        ``verify``, does not match its trailer: it is then dropped)."""
        return self._checked(name, verify)[0]

    def _checked(self, name: str, verify: bool) -> tuple[Chunk | None, bool]:
        """:meth:`mapped`, and whether the chunk was damaged (and dropped) rather than absent."""
        try:
            handle = self._cache.get(name, read=True)
        except OSError:
            return None, False
        if handle is None:
            return None, False
        stored: Chunk
        if isinstance(handle, bytes | bytearray):  # stored inline by another writer
            stored = bytes(handle)
        else:
            with handle:
                try:
                    stat = os.fstat(handle.fileno())
                    stored = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
                except (OSError, ValueError):  # an empty file cannot be mapped
                    stored = handle.read()
                else:
                    with self._stamps_lock:
                        self._stamps[stored] = [FileStamp.of(handle.name, stat), _time.monotonic() + RECHECK_SECONDS]
        n = len(stored) - TRAILER.size
        if n <= 0:
            problem = "shorter than its trailer"
        else:
            magic, crc = TRAILER.unpack_from(stored, n)
            chunk = memoryview(stored)[:n]
            if magic != TRAILER_MAGIC:
                problem = "no crc32c trailer (an older cache format, or damaged)"
            elif verify and crc32c(chunk) != crc:
                problem = f"crc32c {crc32c(chunk):#010x} does not match the {crc:#010x} stored with it"
            else:
                return chunk.toreadonly(), False
        level = logging.INFO if problem.startswith("no crc32c") else logging.WARNING  # an upgrade makes many
        logger.log(level, "chunk %s of the segment cache is damaged on disk (%s): fetching it again", name, problem)
        self.mismatches += 1
        try:
            self._cache.delete(name)
        except Exception:
            logger.debug("could not drop chunk %s from the segment cache", name, exc_info=True)
        return None, True

    def store(self, name: str, data: Chunk, obj: str) -> None:
        """Write the chunk and its trailer (tagged with its object, for :meth:`evict`)."""
        # As a file object (read=True): diskcache writes a bytes value by iterating it as a BytesIO, which yields
        # lines, so a 4 MiB chunk of binary data became ~16,000 small writes.
        self._cache.set(name, _TrailedReader(data), read=True, tag=obj)

    def evict(self, obj: str) -> int:
        """Drop every chunk of ``obj``; how many."""
        with self._cold_lock:
            self._cold.pop(obj, None)
        return int(self._cache.evict(obj))

    def clear(self) -> None:
        with self._cold_lock:
            self._cold.clear()
        self._cache.clear()

    def volume(self) -> int:
        return int(self._cache.volume())

    def __len__(self) -> int:
        return len(self._cache)

    def close(self) -> None:
        self._cache.close()


class _TrailedReader:
    """A chunk as the file object diskcache copies from, followed by its trailer (magic and crc32c): slices are
    views, so storing copies nothing in memory."""

    def __init__(self, data: Chunk) -> None:
        self._view = memoryview(data)
        self._trailer = TRAILER.pack(TRAILER_MAGIC, crc32c(self._view))
        self._pos = 0

    def read(self, size: int = -1) -> memoryview | bytes:
        n = len(self._view)
        if self._pos >= n:
            if self._pos >= n + len(self._trailer):
                return b""
            piece = self._trailer[self._pos - n :] if size < 0 else self._trailer[self._pos - n : self._pos - n + size]
            self._pos += len(piece)
            return piece
        end = n if size < 0 else min(self._pos + size, n)
        view = self._view[self._pos : end]
        self._pos = end
        return view


class NoDiskStore:
    """The disk tier switched off: nothing is written, nothing is found (the chunk cache is memory only).

    Used for the segments of a plugin that encrypts them (``rsm.config.encryption.enabled=true``): the cache holds
    plaintext chunks, and plaintext on local disk would undo the encryption at rest, so by default it stays in
    memory (see ``remote.log.segment.cache.plaintext.disk.enable`` in docs/configuration.md)."""

    mismatches = 0

    def lookup(self, name: str, obj: str) -> Chunk | None:
        return None

    def changed_on_disk(self, chunk: Chunk) -> bool:
        return False

    def mapped(self, name: str, verify: bool = False) -> Chunk | None:
        return None

    def store(self, name: str, data: Chunk, obj: str) -> None:
        pass

    def evict(self, obj: str) -> int:
        return 0

    def clear(self) -> None:
        pass

    def volume(self) -> int:
        return 0

    def __len__(self) -> int:
        return 0

    def close(self) -> None:
        pass
