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

A full file system (ENOSPC, EDQUOT, SQLite's "database or disk is full") while storing a chunk: the partial file is
removed (diskcache leaves it, unreferenced, for good), the least recently used chunks are evicted to below the
volume held then (the store's limit stays lowered for the process: the file system holds no more), and the chunk is
stored once more; when that fails too, the chunk stays in memory only and the disk tier is not written for
:data:`FULL_BACKOFF_SECONDS`. The limit is lowered at most once every :data:`SHRINK_SECONDS`: space an eviction
should have freed may still be held (a map of a removed file keeps it until let go; the chunk cache lets its own
go), and lowering on each failure would spiral the limit down to nothing. A WARNING names the dir at most once every :data:`FULL_LOG_SECONDS`, without a
traceback. Chunk files no entry references (left by a process killed while writing one, or by an older version) are
swept by :meth:`DiskChunkStore.sweep` (:func:`sweep_orphans`), which the chunk cache runs when it opens the store.

Cold objects: chunks are stored as they are read, so when one chunk of an object is missing the next are missing
too; for ``COLD_SECONDS`` after a miss (a chunk absent, not one dropped as damaged), lookups of that object's chunks answer "missing" without asking SQLite
(whose queries wait behind the writer's transactions). The worst case is a chunk another process stored in that
window fetched again. Thread-safe: diskcache is, and the cold list has its own lock.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import mmap
import os
import sqlite3
import struct
import threading
import time as _time
import weakref
from collections import OrderedDict
from collections.abc import Callable
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
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
FULL_LOG_SECONDS = 60.0  # a full file system is logged at most this often (per store)
SHRINK_SECONDS = 60.0  # the store's limit is lowered at most this often (see DiskChunkStore._make_room)
RESTORE_SECONDS = 300.0  # a limit lowered on a full file system is set back to the configured one after so long
FULL_BACKOFF_SECONDS = 5.0  # after a store failed even once chunks were evicted, no chunk is written for so long
SWEEP_GRACE_SECONDS = 300.0  # an unreferenced chunk file younger than this may be another process's write under way
# (a file is written before its entry, which may wait for SQLite's lock: diskcache's timeout is 60 s)
VALUE_SUFFIX = ".val"  # diskcache's value files: <2 hex>/<2 hex>/<28 hex>.val under the cache dir
DB_NAME = "cache.db"  # diskcache's SQLite database in the cache dir


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the file system is full (or the quota spent): ENOSPC/EDQUOT, or SQLite's SQLITE_FULL."""
    if isinstance(exc, OSError):
        return exc.errno in FULL_ERRNOS
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        return code == sqlite3.SQLITE_FULL if code is not None else "database or disk is full" in str(exc)
    return False


def sweep_orphans(directory: str | Path, grace_s: float = SWEEP_GRACE_SECONDS) -> tuple[int, int]:
    """Remove the diskcache value files (``*.val``) under ``directory`` that no entry of its database references
    and that were last written more than ``grace_s`` ago (a younger one may be a write another process has under
    way: its entry comes after the file). The files are listed before the database is read, so a file stored
    meanwhile is referenced by then. Reads the database through its own read-only connection (so it runs when the
    store could not be opened too); does nothing when the database cannot be read. How many files, and bytes."""
    root = Path(directory)
    db = root / DB_NAME
    if not db.exists():
        return 0, 0
    now = _time.time()
    candidates: list[tuple[str, int]] = []
    for first in _subdirs(root):
        for second in _subdirs(Path(first.path)):
            with contextlib.suppress(OSError), os.scandir(second.path) as files:
                for f in files:
                    if f.name.endswith(VALUE_SUFFIX):
                        with contextlib.suppress(OSError):
                            st = f.stat(follow_symlinks=False)
                            if now - st.st_mtime > grace_s:
                                candidates.append((f"{first.name}/{second.name}/{f.name}", st.st_size))
    if not candidates:
        return 0, 0
    known = _referenced(db)
    if known is None:
        return 0, 0
    removed = freed = 0
    for rel, size in candidates:
        if os.path.normpath(rel) in known:
            continue
        with contextlib.suppress(FileNotFoundError):
            os.remove(root / rel)
            removed += 1
            freed += size
    return removed, freed


def _referenced(db: Path) -> set[str] | None:
    """The value files the entries of ``db`` reference, or None when it cannot be read. Read only; on a full file
    system SQLite cannot make the shared-memory file a read of a WAL database needs, so a database without a
    write-ahead log (nobody has it open) is read as immutable then."""
    query = "SELECT filename FROM Cache WHERE filename IS NOT NULL"
    wal = Path(str(db) + "-wal")
    for mode in ("mode=ro", "immutable=1"):
        if mode == "immutable=1" and _non_empty(wal):
            break
        try:
            conn = sqlite3.connect(f"{db.as_uri()}?{mode}", uri=True, timeout=5.0)
            try:
                known = {os.path.normpath(row[0]) for row in conn.execute(query)}
            finally:
                conn.close()
        except sqlite3.Error as exc:
            logger.debug("cannot read %s (%s) to sweep unreferenced chunk files: %s", db, mode, exc)
            continue
        if mode == "immutable=1" and _non_empty(wal):
            break  # someone opened it meanwhile: what was read may be stale
        return known
    return None


def _non_empty(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except FileNotFoundError:
        return False
    except OSError:
        return True


def _subdirs(path: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as entries:
            return [e for e in entries if len(e.name) == 2 and e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


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

        self.directory = Path(directory)
        self._written = threading.local()  # per thread: the file the last store wrote (see _disk_class)
        self._cache = diskcache.Cache(str(directory), size_limit=size_limit, eviction_policy="least-recently-used",
                                      disk=_disk_class(self._written))
        self._full_logged = -FULL_LOG_SECONDS  # when a full file system was last logged (monotonic)
        self._full_since_log = 0  # chunks not stored since then
        self._full_until = 0.0  # no chunk is written before then (monotonic): the file system was full
        self._shrunk_at = -SHRINK_SECONDS  # when the limit was last lowered (monotonic)
        self._size_limit = size_limit  # as configured: restored RESTORE_SECONDS after a full file system lowered it
        self._lowered = False
        # Told the names of the chunks evicted to make room, before the retry: a map of a removed file keeps its
        # space (the chunk cache lets its maps of them go).
        self.on_evict: Callable[[list[str]], None] | None = None
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
        except (OSError, sqlite3.Error):  # (a least-recently-used get writes: SQLITE_FULL on a full file system)
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

    def store(self, name: str, data: Chunk, obj: str) -> bool:
        """Write the chunk and its trailer (tagged with its object, for :meth:`evict`); whether it was stored. On
        a full file system, evict and retry once, else give up quietly (module docstring); other errors raise."""
        if self._full_until and _time.monotonic() < self._full_until:
            self._note_full(None, 0, 0)
            return False
        if self._lowered and _time.monotonic() - self._shrunk_at >= RESTORE_SECONDS:
            # Space may have come back: the configured limit again (a file system still full lowers it again).
            self._lowered = False
            with contextlib.suppress(Exception):
                self._cache.reset("size_limit", self._size_limit, update=False)
        try:
            self._set(name, data, obj)
            return True
        except (OSError, sqlite3.Error) as exc:
            if not is_full(exc):
                raise
            full: BaseException = exc
        now = _time.monotonic()
        if now - self._shrunk_at < SHRINK_SECONDS:
            # Lowered a moment ago, and still full: the files evicted then may still be mapped (a reader's view
            # keeps their space), or something else fills the file system; evicting more now would spiral the
            # limit down to nothing. This chunk stays in memory only.
            self._full_until = now + FULL_BACKOFF_SECONDS
            self._note_full(full, 0, int(self._cache.size_limit))
            return False
        self._shrunk_at = now
        evicted, limit = self._make_room(len(data) + TRAILER.size)
        try:
            self._set(name, data, obj)
            self._full_until = 0.0
            self._note_full(None, evicted, limit, stored=True)
            return True
        except (OSError, sqlite3.Error) as exc:
            if not is_full(exc):
                raise
            self._full_until = _time.monotonic() + FULL_BACKOFF_SECONDS
            self._note_full(exc, evicted, limit)
            return False

    def _set(self, name: str, data: Chunk, obj: str) -> None:
        # As a file object (read=True): diskcache writes a bytes value by iterating it as a BytesIO, which yields
        # lines, so a 4 MiB chunk of binary data became ~16,000 small writes.
        written = self._written
        written.path = None
        try:
            self._cache.set(name, _TrailedReader(data), read=True, tag=obj)
        except BaseException:
            # diskcache leaves the value file when writing it or the row fails (ENOSPC, SQLITE_FULL): no entry
            # references it, so nothing would ever remove it.
            path = written.path
            if path is not None:
                with contextlib.suppress(OSError):
                    os.remove(path)
            raise

    def _make_room(self, needed: int) -> tuple[int, int]:
        """Evict least recently used chunks to below the volume held now (by ``needed`` bytes, an eighth of the
        volume at least), lowering the store's limit there for this process: the file system holds no more. How
        many chunks went, and the new limit.

        Their files are removed first: SQLite's delete needs room in the file system too (its write-ahead log),
        which it had not. A reader finding an entry whose file is gone meanwhile gets a miss."""
        try:
            volume = int(self._cache.volume())
            limit = max(0, min(int(self._cache.size_limit), volume - max(needed, volume // 8)))
            rows = self._cache._sql(
                "SELECT key, filename, size FROM Cache WHERE filename IS NOT NULL ORDER BY access_time"
            ).fetchall()
            freeing, names = volume, []
            for key, filename, size in rows:
                if freeing <= limit:
                    break
                with contextlib.suppress(OSError):
                    os.remove(self.directory / filename)
                names.append(key)
                freeing -= size
            if self.on_evict is not None and names:
                self.on_evict(names)
            self._cache.reset("size_limit", limit, update=False)  # this process only (not the shared settings)
            self._lowered = True
            evicted = int(self._cache.cull())
            # SQLite's write-ahead log keeps the size it grew to (up to ~4 MiB), which the volume does not count.
            with contextlib.suppress(sqlite3.Error):
                self._cache._sql("PRAGMA wal_checkpoint(TRUNCATE)")
            return evicted, limit
        except Exception as exc:  # (SQLite may fail too on a full file system)
            logger.debug("evicting from the segment cache in %s failed: %s", self.directory, exc)
            return 0, int(self._cache.size_limit)

    def _note_full(self, exc: BaseException | None, evicted: int, limit: int, stored: bool = False) -> None:
        """Log the full file system at most once every FULL_LOG_SECONDS, without a traceback."""
        if not stored:
            self._full_since_log += 1
        now = _time.monotonic()
        if now - self._full_logged < FULL_LOG_SECONDS or (exc is None and not stored):
            return
        self._full_logged = now
        skipped, self._full_since_log = self._full_since_log, 0
        if stored:
            logger.warning("remote segment cache dir %s is full: evicted %d least recently used chunk(s) and lowered "
                           "its limit to %d bytes for this process", self.directory, evicted, limit)
        else:
            logger.warning("remote segment cache dir %s is full (%s; %d chunk(s) evicted to make room, limit now %d "
                           "bytes): %d chunk(s) not kept on disk since the last report, served from memory (writes "
                           "to the dir resume in %ss)", self.directory, exc, evicted, limit, skipped,
                           FULL_BACKOFF_SECONDS)

    def sweep(self) -> int:
        """Remove the chunk files no entry references (:func:`sweep_orphans`); how many."""
        removed, freed = sweep_orphans(self.directory)
        if removed:
            logger.info("removed %d unreferenced chunk file(s) (%d bytes) from the remote segment cache dir %s",
                        removed, freed, self.directory)
        return removed

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


def _disk_class(written: threading.local) -> Any:
    """A ``diskcache.Disk`` that notes, per thread, the path of the value file it is about to write (in
    ``written.path``): :meth:`DiskChunkStore._set` removes it when the store fails. Same file names and format as
    diskcache's own (other processes may open the dir with plain diskcache)."""
    import diskcache

    class _NotingDisk(diskcache.Disk):
        def filename(self, key: Any = diskcache.core.UNKNOWN, value: Any = diskcache.core.UNKNOWN) -> tuple[str, str]:
            filename, full_path = super().filename(key, value)
            written.path = full_path
            return filename, full_path

    return _NotingDisk


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

    def store(self, name: str, data: Chunk, obj: str) -> bool:
        return False

    def sweep(self) -> int:
        return 0

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
