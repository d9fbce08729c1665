"""The remote segment chunk cache: fixed-size chunks of remote ``.log`` objects, in memory and on disk.

- Chunks are aligned (chunk ``n`` covers bytes ``[n*size, (n+1)*size)``); the last one of an object is short.
- Tiers: :class:`tiered.cache.chunk_memory.MemoryChunks` (hot chunks: fetched bytes bounded by ``memory_bytes``,
  maps of cache files by ``mapped_bytes``) over
  :class:`tiered.cache.disk_store.DiskChunkStore` (``diskcache``: bounded, process-safe so Spark executors on
  one machine share it, kept across restarts, each chunk checked against its crc32c trailer when read back).
  ``disk=False`` leaves the disk tier out (:class:`tiered.cache.disk_store.NoDiskStore`): the chunks of an
  encrypting plugin's segments are plaintext, and stay in memory unless the operator allows them on disk.
- Concurrent readers of one missing chunk in this process trigger one load
  (:class:`tiered.cache.single_flight.SingleFlight`); a failed load is not cached. A read spanning several chunks
  loads the missing ones in parallel (ranged GETs) on the cache's workers, which also do the disk lookups (a
  SQLite query waits behind the writer's transactions; the reader should not).
- Read-ahead is asked for (:meth:`ChunkCache.prefetch`: "a reader reads on from this position"), never guessed:
  the cache does not tell sequential readers apart, its caller does (one policy, one owner:
  :class:`tiered.remote_log_reader.RemoteLogReader`). With an opener (a fetch that streams, see
  ``RemoteStorageManager.fetch_streams``), read-ahead comes off one open fetch per object
  (:class:`tiered.cache.chunk_stream.ChunkStream`), else from ranged GETs of the next chunks.
- Integrity: what the fetcher (or the opener's stream) returns is what enters the cache, so a fetcher that checks
  the object's checksums (``tiered.checksums.ChecksumVerifier``, as the segment cache's is) makes every chunk
  checked once, before it enters the cache; reads of a chunk held in memory check nothing again, except that a
  chunk held as a map of its cache file is read back from disk (checked against its crc32c trailer, fetched again
  when it does not match) once the file changed since it was mapped
  (:meth:`tiered.cache.disk_store.DiskChunkStore.changed_on_disk`, a ``stat`` at most once a second per map): a
  map serves what the file holds now, and a file damaged after it was checked would be served until evicted.
- Counters (hits, misses, prefetches, fetches, streams opened, disk mismatches) live in :class:`ChunkCacheMetrics`,
  and add to the process's ``RemoteLogSegmentCache_*`` counters in ``local.metrics.REGISTRY``.

Locking: the state the parts share (memory tier, loads in flight, learnt sizes, streams, buffers) is guarded by
one lock, the cache's; a stream's condition comes before it (checked: :mod:`tiered.cache.locks`).

The cache takes a fetcher ``(start, end_inclusive) -> bytes`` per call, so it is tested without any store.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tiered.cache.chunk_memory import Chunk, MemoryChunks, is_map
from tiered.cache.chunk_stream import ChunkStream, DaemonThreads, Fetcher, Opener
from tiered.cache.disk_store import DiskChunkStore, NoDiskStore
from tiered.cache.locks import CACHE_STATE, COUNTERS, RankedLock
from tiered.cache.single_flight import SingleFlight

__all__ = ["Chunk", "ChunkCache", "ChunkCacheMetrics", "Fetcher", "Opener"]

logger = logging.getLogger(__name__)

# Stream buffers are recycled once nothing refers to them, which reference counts tell on CPython with the GIL.
# The memory tier's default bounds: chunks held as bytes (the heap: the soak test holds the anonymous RSS to it),
# and chunks held as maps of their cache files (file pages; a quarter of the disk tier at most, since a map keeps a
# file the disk tier evicted on disk until it is dropped).
DEFAULT_MEMORY_BYTES = 128 * 1024 * 1024
DEFAULT_MAPPED_BYTES = 512 * 1024 * 1024
_RECYCLE = sys.implementation.name == "cpython" and getattr(sys, "_is_gil_enabled", lambda: True)()

_COUNTER_DOCS = {
    "hits": "chunk reads served from the cache",
    "misses": "chunk reads fetched",
    "prefetches": "chunks fetched ahead of a sequential reader",
}
_registered: dict[int, tuple[Any, dict[str, Any]]] = {}
_registered_lock = threading.Lock()


def _process_counters(registry: Any) -> dict[str, Any]:
    """The ``RemoteLogSegmentCache_*`` counters of ``registry`` (default ``local.metrics.REGISTRY``), made once."""
    if registry is None:
        from local.metrics import REGISTRY

        registry = REGISTRY
    with _registered_lock:
        held = _registered.get(id(registry))
        if held is None:
            from prometheus_client import Counter

            counters = {
                name: Counter(f"RemoteLogSegmentCache_{name}", f"Remote segment cache {doc}", registry=registry)
                for name, doc in _COUNTER_DOCS.items()
            }
            held = _registered[id(registry)] = (registry, counters)
        return held[1]


def _on_every_worker(executor: ThreadPoolExecutor, workers: int, fn: Callable[[], object]) -> None:
    """Run ``fn`` once on each of ``executor``'s ``workers`` threads: each run waits at a barrier until all have
    started, so no thread takes two (the executor starts the threads it has not started yet)."""
    barrier = threading.Barrier(workers)

    def run() -> None:
        try:
            fn()
        finally:
            try:
                barrier.wait(_BARRIER_LIMIT_S)
            except threading.BrokenBarrierError:
                logger.warning("a chunk cache worker did not reach the close barrier in %ss", _BARRIER_LIMIT_S)

    for future in [executor.submit(run) for _ in range(workers)]:
        future.result()


_BARRIER_LIMIT_S = 60.0  # a bound on a worker finishing the load it is doing when the cache closes


class ChunkCacheMetrics:
    """One cache's counters (thread-safe), also added to the process's exposed counters."""

    def __init__(self, registry: Any = None) -> None:
        self._lock = RankedLock("chunk cache counters", COUNTERS)
        self._exposed = _process_counters(registry)
        self.hits = self.misses = self.prefetches = self.fetches = self.streams_opened = 0

    def hit(self) -> None:
        with self._lock:
            self.hits += 1
        self._exposed["hits"].inc()

    def fetched(self, prefetch: bool) -> None:
        """A chunk came from the store: for a reader waiting on it (a miss) or ahead of one (a prefetch)."""
        with self._lock:
            self.fetches += 1
            if prefetch:
                self.prefetches += 1
            else:
                self.misses += 1
        self._exposed["prefetches" if prefetch else "misses"].inc()

    def stream_opened(self) -> None:
        with self._lock:
            self.streams_opened += 1


def _open_disk_store(directory: str | Path, size_limit: int) -> DiskChunkStore | NoDiskStore:
    """The disk tier in ``directory``; memory only (an ERROR naming the dir) when it cannot be opened: a full or
    failing file system (SQLite writes its settings at open) must not keep the broker from starting, as the cache
    only saves fetches."""
    import sqlite3

    from tiered.cache.disk_store import is_full, sweep_orphans

    try:
        try:
            return DiskChunkStore(directory, size_limit)
        except (OSError, sqlite3.Error) as exc:
            # Full (SQLite says "database or disk is full", or "disk I/O error" for its shared-memory file): chunk
            # files nobody references (left by a process killed while writing them) may be what fills it; sweep
            # them and try once more.
            if not (is_full(exc) or isinstance(exc, sqlite3.OperationalError)) or sweep_orphans(directory)[0] == 0:
                raise
            return DiskChunkStore(directory, size_limit)
    except (OSError, sqlite3.Error) as exc:
        logger.error("remote segment cache dir %s is unusable (%s: %s): the segment cache runs in memory only",
                     directory, type(exc).__name__, exc)
        return NoDiskStore()


class ChunkCache:
    """See the module docstring. Implements :class:`tiered.cache.chunk_stream.StreamPort` for its streams."""

    def __init__(
        self,
        directory: str | Path,
        *,
        chunk_size: int = 4 * 1024 * 1024,
        size_limit: int = 2 * 1024**3,
        prefetch_chunks: int = 2,
        max_workers: int = 4,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        mapped_bytes: int | None = None,
        registry: Any = None,
        disk: bool = True,
    ) -> None:
        if chunk_size <= 0:
            raise ValueError(f"chunk size must be > 0, got {chunk_size}")
        self.chunk_size = chunk_size
        self.prefetch_chunks = max(0, prefetch_chunks)
        self.metrics = ChunkCacheMetrics(registry)
        # disk=False: memory only (the plaintext chunks of encrypted segments stay off the local disk).
        self._disk: DiskChunkStore | NoDiskStore = _open_disk_store(directory, size_limit) if disk else NoDiskStore()
        self._workers = max_workers
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="chunk-cache")
        # Writing a chunk to disk is off the reader's path: memory serves it until the write lands.
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chunk-cache-writer")
        self._max_streams = max(1, max_workers)
        # Streams run on long-lived threads: a thread's first disk lookup opens its own SQLite connection (diskcache
        # keeps one per thread), which costs milliseconds a new segment's first chunk would wait for.
        self._stream_threads = DaemonThreads(self._max_streams, "chunk-cache-stream", on_exit=self._disk.close)
        self._max_buffers = max(4, 2 * max_workers * (self.prefetch_chunks + 2))
        # The shared state, under self._lock:
        self._lock = RankedLock("chunk cache state", CACHE_STATE)
        # Maps: at most as many as full chunks fit in their bytes, each an open file (see MemoryChunks).
        if mapped_bytes is None:
            mapped_bytes = min(DEFAULT_MAPPED_BYTES, size_limit // 4)
        self._memory = MemoryChunks(memory_bytes, map_limit=mapped_bytes, max_maps=max(1, mapped_bytes // chunk_size))
        self._flights: SingleFlight[Chunk] = SingleFlight()
        self._sizes: dict[str, int] = {}  # object sizes learnt from short chunks (when callers pass None)
        self._streams: dict[str, ChunkStream] = {}  # per object: the open fetch feeding its reader's read-ahead
        # The chunk buffers streams read into, reused once nothing refers to them (the chunk is on disk and held
        # as a map, and no reader keeps a view): a fresh 4 MiB buffer costs 1,024 page faults.
        self._buffers: list[bytearray] = []
        # Bytes of fetched chunks queued for the disk writer, at most max_pending_write_bytes: a queued chunk holds
        # its bytes until written, and on a busy machine the writer (SQLite, files, the GIL) falls behind the
        # fetches. Unbounded, the soak's heap grew by the writer's backlog (~90 chunks, 100+ MiB); bounded, a fetch
        # waits for room (back pressure on the loads, not a chunk left off the disk). Own lock: it is waited on.
        self._write_room = threading.Condition()
        self._pending_write_bytes = 0
        self.max_pending_write_bytes = max(2 * chunk_size, memory_bytes // 4)
        self._closed = False
        # Chunk files no entry references (a process killed while writing one) are swept once, by the writer: off
        # the start path, before the first chunk is written.
        self._writer.submit(self._sweep)
        if isinstance(self._disk, DiskChunkStore):
            self._disk.on_evict = self._drop_maps

    def _drop_maps(self, names: list[str]) -> None:
        """The disk store removed these chunks' files to make room: maps of them would keep the space taken."""
        with self._lock:
            self._memory.drop_maps(names)

    def _sweep(self) -> None:
        try:
            self._disk.sweep()
        except Exception:
            logger.warning("sweeping unreferenced chunk files from the segment cache failed", exc_info=True)

    # Counters (kept as attributes of the cache for its callers) ----------------------------------------------

    @property
    def hits(self) -> int:
        return self.metrics.hits

    @property
    def misses(self) -> int:
        return self.metrics.misses

    @property
    def prefetches(self) -> int:
        return self.metrics.prefetches

    @property
    def fetches(self) -> int:
        return self.metrics.fetches

    @property
    def streams_opened(self) -> int:
        return self.metrics.streams_opened

    @property
    def disk_mismatches(self) -> int:
        return self._disk.mismatches

    # Reads ----------------------------------------------------------------------------------------------------

    @staticmethod
    def _name(obj: str, index: int) -> str:
        return f"{obj}#{index}"

    def end_of_chunk(self, start: int, end: int) -> int:
        """``end``, moved on to the end of its chunk when ``[start, end)`` lies in one (a view costs nothing more)."""
        cs = self.chunk_size
        if (end - 1) // cs == start // cs:
            return ((end - 1) // cs + 1) * cs
        return end

    def read_ahead_reaches(self, position: int, object_size: int) -> bool:
        """Whether a reader at ``position`` is within the read-ahead distance (``prefetch_chunks`` chunks, one at
        least) of the end of an object of that size: its caller may start on the next object. (Earlier, the next
        object's fetch competes with the chunks of the one being read.)"""
        return position + self.chunk_size * max(1, self.prefetch_chunks) >= object_size

    def read(
        self, obj: str, object_size: int | None, start: int, end_inclusive: int, fetcher: Fetcher
    ) -> bytes | memoryview:
        """Bytes ``[start, end_inclusive]`` of object ``obj`` (shorter at the object's end): a read-only view into
        a cached chunk when the range lies in one, else bytes. ``fetcher`` fetches a chunk that is missing."""
        if start < 0 or end_inclusive < start:
            raise ValueError(f"invalid range {start}..{end_inclusive}")
        if object_size is None:
            object_size = self.known_size(obj)
        if object_size is not None:
            end_inclusive = min(end_inclusive, object_size - 1)
            if start > end_inclusive:
                return b""
        cs = self.chunk_size
        first, last = start // cs, end_inclusive // cs
        if first == last:  # the common case: a range within a chunk held in memory, a view of it
            held = self._held(self._name(obj, first))
            if held is not None and (len(held) == cs or object_size is not None):
                self.metrics.hit()
                lo = start - first * cs
                return memoryview(held).toreadonly()[lo : min(end_inclusive - first * cs + 1, len(held))]
        futures = [self._chunk(obj, i, object_size, fetcher) for i in range(first, last + 1)]
        parts: list[Chunk] = []
        for i, fut in zip(range(first, last + 1), futures):
            chunk = fut.result()
            parts.append(chunk)
            if len(chunk) < cs:  # the object ends in this chunk
                if chunk:  # (an empty chunk, past the end, tells only that the object is no longer)
                    self.learn_size(obj, i * cs + len(chunk))
                break
        # Views of the chunks, not slices: a range within one chunk comes back without a copy, and one spanning
        # chunks with one. (Each copy of a fresh megabyte also faults its pages in, which in a VM costs more
        # than the copy itself.)
        out = []
        for i, chunk in zip(range(first, first + len(parts)), parts):
            lo = max(start - i * cs, 0)
            hi = min(end_inclusive - i * cs + 1, len(chunk))
            if lo < hi:
                out.append(memoryview(chunk).toreadonly()[lo:hi])
        if not out:
            return b""
        return out[0] if len(out) == 1 else b"".join(out)

    def _held(self, name: str) -> Chunk | None:
        """The chunk held in memory, or None; a map whose file changed since it was mapped is let go (None): the
        caller loads the chunk again, from disk (checked) or from the store (module docstring)."""
        with self._lock:
            held = self._memory.get(name)
        if held is not None and is_map(held) and self._disk.changed_on_disk(held):
            logger.warning("chunk %s of the segment cache changed on disk since it was checked and mapped: reading it "
                           "back", name)
            with self._lock:
                self._memory.discard(name, held)
            return None
        return held

    def _chunk(self, obj: str, index: int, object_size: int | None, fetcher: Fetcher, prefetch: bool = False) -> Future[Chunk]:
        """The chunk: from memory at once, else the load in flight, else a new load on a worker (which reads it
        off disk or fetches it)."""
        name = self._name(obj, index)
        cached = self._held(name)
        if cached is None:
            with self._lock:
                cached = self._memory.get(name)  # a load that landed meanwhile: its chunk was checked
                if cached is None:
                    return self._flights.join_or_start(
                        name, lambda: self._pool.submit(self._load, name, obj, index, object_size, fetcher, prefetch)
                    )
        if not prefetch:
            self.metrics.hit()
        done: Future[Chunk] = Future()
        done.set_result(cached)
        return done

    def _load(self, name: str, obj: str, index: int, object_size: int | None, fetcher: Fetcher, prefetch: bool) -> Chunk:
        try:
            data = self._disk.lookup(name, obj)
            if data is not None:
                with self._lock:
                    self._memory.put(name, data)
                if not prefetch:
                    self.metrics.hit()
                return data
            data = self.fetch_chunk(index, object_size, fetcher)
            self._fetched(name, obj, data, prefetch)
            return data
        finally:
            with self._lock:
                self._flights.land(name)

    def _fetched(self, name: str, obj: str, data: Chunk, prefetch: bool) -> None:
        """A chunk that came from the store: held in memory and written to disk off the reader's path."""
        self.metrics.fetched(prefetch)
        if data:
            with self._lock:
                self._memory.put(name, data)
            size = len(data)
            with self._write_room:
                # Room for it, or nothing queued (a chunk larger than the bound goes alone), or closing.
                self._write_room.wait_for(lambda: self._closed or self._pending_write_bytes == 0
                                          or self._pending_write_bytes + size <= self.max_pending_write_bytes)
                self._pending_write_bytes += size
            try:
                self._writer.submit(self._store, name, data, obj)
            except RuntimeError:  # closed meanwhile: nothing more is written
                self._wrote(size)

    def _wrote(self, size: int) -> None:
        with self._write_room:
            self._pending_write_bytes -= size
            self._write_room.notify_all()

    def _store(self, name: str, data: Chunk, obj: str) -> None:
        try:
            self._store_now(name, data, obj)
        finally:
            self._wrote(len(data))

    def _store_now(self, name: str, data: Chunk, obj: str) -> None:
        try:
            if not self._disk.store(name, data, obj):
                return  # not stored (a full file system, logged by the store): memory holds it
            # Held from now on as a map of the file just written: the fetched bytes are freed (unless a reader
            # still has a view), so the next chunk reuses their memory instead of faulting in fresh pages, which
            # in a VM costs more than the fetch.
            with self._lock:
                held = self._memory.holds(name, data)
            if held:
                mapped = self._disk.mapped(name)
                if mapped is not None:
                    with self._lock:
                        self._memory.swap(name, data, mapped)
        except Exception:
            logger.warning("could not store chunk %s in the segment cache", name, exc_info=True)

    # Read-ahead -----------------------------------------------------------------------------------------------

    def prefetch(
        self, obj: str, position: int, fetcher: Fetcher, object_size: int | None = None, opener: Opener | None = None
    ) -> None:
        """A reader is about to read ``obj`` on from byte ``position``: load the chunk there and the
        ``prefetch_chunks`` after it in the background (with ``opener``, through a stream that goes on feeding that
        reader as it asks again); failures are only logged (the reader's own read loads again). A closed cache
        reads nothing ahead."""
        if self.prefetch_chunks == 0 or self._closed:
            return
        size = object_size if object_size is not None else self.known_size(obj)
        index = position // self.chunk_size
        upto = index + self.prefetch_chunks
        if size is not None:
            upto = min(upto, (size - 1) // self.chunk_size)
        if index > upto:
            return  # nothing past the end to read ahead
        if opener is not None and self._stream(obj, index, upto, size, fetcher, opener):
            return
        for i in range(index, upto + 1):
            with self._lock:
                if self._name(obj, i) in self._memory:
                    continue
            self._chunk(obj, i, size, fetcher, prefetch=True).add_done_callback(_log_failure)

    def _stream(self, obj: str, index: int, upto: int, size: int | None, fetcher: Fetcher, opener: Opener) -> bool:
        """Make sure a stream feeds the reader of ``obj`` whose read-ahead is chunks ``index..upto``: move the live
        one on, or start one at ``index`` when there is none and fewer than the limit run. False when no stream
        serves the reader (the caller loads chunk by chunk); True also when there is nothing to stream (the window
        is held or loading, or the cache is closing)."""
        with self._lock:
            if self._closed:  # a prefetch racing close(): no stream may start after close() stopped them
                return True
            stream = self._streams.get(obj)
            new = stream is None or not stream.alive
            if not new and stream.next > upto:  # type: ignore[union-attr]
                return False  # the stream serves another reader further on
            if new:
                if self._window_held(obj, index, upto):
                    return True  # nothing to stream yet (a stream started now would idle, holding a thread)
                if len(self._streams) >= self._max_streams:
                    return False
                stream = ChunkStream(self, obj, index, size, fetcher, opener, self._stream_threads)
                self._streams[obj] = stream
        assert stream is not None
        stream.advance(upto)  # outside the cache's lock: the stream's condition comes first
        if new:
            stream.start()
        return True

    def _window_held(self, obj: str, index: int, upto: int) -> bool:
        """Whether every chunk ``index..upto`` is held or being loaded (under the lock)."""
        return all((n := self._name(obj, i)) in self._memory or n in self._flights for i in range(index, upto + 1))

    # StreamPort: what a ChunkStream asks of its cache -----------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def known_size(self, obj: str) -> int | None:
        with self._lock:
            return self._sizes.get(obj)

    def learn_size(self, obj: str, size: int) -> None:
        with self._lock:
            self._sizes[obj] = size

    def claim(self, obj: str, indexes: Iterable[int]) -> dict[int, Future[Chunk]]:
        claimed = {}
        with self._lock:
            for i in indexes:
                name = self._name(obj, i)
                if name not in self._memory and (fut := self._flights.claim(name)) is not None:
                    claimed[i] = fut
        return claimed

    def land(self, obj: str, index: int, fut: Future[Chunk]) -> None:
        with self._lock:
            self._flights.land(self._name(obj, index), fut)

    def from_disk(self, obj: str, index: int) -> Chunk | None:
        name = self._name(obj, index)
        data = self._disk.lookup(name, obj)
        if data is not None:
            with self._lock:
                self._memory.put(name, data)
            self.metrics.hit()
        return data

    def fetched(self, obj: str, index: int, data: Chunk) -> None:
        self._fetched(self._name(obj, index), obj, data, prefetch=True)

    def fetch_chunk(self, index: int, size: int | None, fetcher: Fetcher) -> bytes:
        start = index * self.chunk_size
        end = start + self.chunk_size - 1
        if size is not None:
            end = min(end, size - 1)
        return fetcher(start, end) if start <= end else b""

    def buffer(self) -> bytearray:
        if _RECYCLE:
            with self._lock:
                buffers = self._buffers
                for buf in buffers:
                    if sys.getrefcount(buf) == 3:  # the list's reference, the loop's and the call's
                        return buf
                buf = bytearray(self.chunk_size)
                if len(buffers) < self._max_buffers:
                    buffers.append(buf)
                return buf
        return bytearray(self.chunk_size)

    def stream_opened(self) -> None:
        self.metrics.stream_opened()

    def stream_ended(self, stream: ChunkStream) -> None:
        with self._lock:
            if self._streams.get(stream.obj) is stream:
                del self._streams[stream.obj]

    # Housekeeping ---------------------------------------------------------------------------------------------

    def loads_in_flight(self) -> list[Future[Chunk]]:
        """The chunk loads under way (read-ahead included): once one is done, its chunk is held."""
        with self._lock:
            return self._flights.pending()

    def streams(self) -> list[ChunkStream]:
        """The streams running (each ends at its object's end, when stopped, or when its reader is gone)."""
        with self._lock:
            return list(self._streams.values())

    def _stop_streams(self, obj: str | None = None) -> None:
        with self._lock:
            streams = [s for s in self._streams.values() if obj is None or s.obj == obj]
        for stream in streams:
            stream.stop()
        for stream in streams:
            stream.join()

    def invalidate(self, obj: str) -> int:
        """Drop every chunk of object ``obj`` (its remote copy was deleted or replaced); how many on disk."""
        self._stop_streams(obj)
        self.flush()
        with self._lock:
            self._memory.drop_prefix(f"{obj}#")
            self._sizes.pop(obj, None)
        return self._disk.evict(obj)

    def forget(self, obj: str) -> None:
        """Drop every chunk of object ``obj``, whose remote copy was deleted (never to be read again: a segment id is
        never reused), without waiting: its streams are told to stop, memory lets its chunks go now, and the disk
        store's are evicted by the writer thread after the writes queued before (so none lands after the evict).
        :meth:`invalidate` waits for all that, for an object replaced under the same name; a remote segment's
        deletion does not need to (it waited ~150 ms a segment under load: the writer's queue, SQLite, the GIL)."""
        with self._lock:
            streams = [s for s in self._streams.values() if s.obj == obj]
            self._memory.drop_prefix(f"{obj}#")
            self._sizes.pop(obj, None)
        for stream in streams:
            stream.stop()
        try:
            self._writer.submit(self._disk.evict, obj).add_done_callback(_log_evict_failure)
        except RuntimeError:  # the cache is closed (the writer shut down): the disk store keeps them (bounded)
            logger.debug("chunk cache closed: chunks of %s left on disk", obj)

    def clear(self) -> None:
        """Drop every chunk, in memory and on disk (shared with other processes: theirs too)."""
        self._stop_streams()
        self.flush()
        with self._lock:
            self._memory.clear()
            self._sizes.clear()
        self._disk.clear()

    @property
    def size_bytes(self) -> int:
        return self._disk.volume()

    def __len__(self) -> int:
        return len(self._disk)

    def flush(self) -> None:
        """Wait until every fetched chunk is on disk."""
        self._writer.submit(lambda: None).result()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        with self._write_room:
            self._write_room.notify_all()  # loads waiting for the writer's room go on (and write nothing more)
        self._stop_streams()
        self._stream_threads.shutdown()  # each stream thread closes its own SQLite connection as it ends
        for load in self.loads_in_flight():
            load.cancel()  # the queued read-ahead is dropped (a load already running goes on to its end)
        # diskcache keeps one SQLite connection per thread, and only the thread that opened one can close it: every
        # worker closes its own before the pools stop (else their files stay open until garbage collection).
        _on_every_worker(self._pool, self._workers, self._disk.close)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._writer.submit(self._disk.close)  # after the writes queued before it
        self._writer.shutdown(wait=True)
        with self._lock:
            self._memory.clear()  # the maps' file descriptors go with them (readers' views keep theirs)
        self._disk.close()  # the closing thread's connection; a reader thread's closes when it is collected

    @property
    def max_open_chunk_files(self) -> int:
        """The most chunk files the memory tier keeps open (mapped), besides the chunks readers still hold."""
        bound = self._memory.max_maps
        assert bound is not None
        return bound

    def __enter__(self) -> ChunkCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _log_evict_failure(fut: Future[int]) -> None:
    exc = None if fut.cancelled() else fut.exception()
    if exc is not None:
        logger.warning("could not drop the chunks of a deleted segment from the segment cache: %s", exc)


def _log_failure(fut: Future[Chunk]) -> None:
    if fut.cancelled():  # the cache closed before the read-ahead ran
        return
    exc = fut.exception()
    if exc is not None:
        logger.debug("read-ahead fetch failed: %s", exc)
