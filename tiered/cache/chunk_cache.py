"""The remote segment cache: fixed-size chunks of remote ``.log`` objects in a bounded ``diskcache`` store.

- Chunks are aligned (chunk ``n`` covers bytes ``[n*size, (n+1)*size)``); the last one of an object is short.
- The store is a ``diskcache.Cache`` (SQLite + files): bounded by bytes with least-recently-used eviction,
  process-safe (Spark executors on one machine share it) and kept across restarts.
- Reads spanning several chunks fetch the missing ones in parallel (ranged GETs), and a sequential reader gets
  the next ``prefetch_chunks`` chunks fetched in the background (read-ahead).
- Given an opener (a fetch that streams, see ``RemoteStorageManager.fetch_streams``), a sequential reader's
  chunks come off one open fetch per object instead of one ranged GET per chunk: a stream thread reads the
  object from the reader's chunk on, chunk by chunk, keeping ``prefetch_chunks`` ahead of the reader and
  waiting (up to a few seconds, then closing the fetch) when it is that far ahead. Each ranged GET pays a
  request's latency and the server's lookup; a stream pays them once per segment.
- Concurrent readers of one missing chunk in this process trigger one fetch (single flight); a failed fetch is
  not cached.
- Integrity: what the fetcher (or the opener's stream) returns is what enters the cache, so a fetcher that checks
  the object's checksums (``tiered.checksums.ChecksumVerifier``, which the RemoteLogManager uses) makes every
  chunk checked once, before it enters the cache; reads of a chunk held in memory check nothing again. On disk
  each chunk is stored with a trailer holding its crc32c (8 bytes: ``b"tcrc"`` and the crc, big-endian), checked
  when the chunk is read back from disk: a chunk that does not match (damaged on disk, or written by a version
  without the trailer) is dropped from the disk store and fetched again.

The cache takes a fetcher ``(start, end_inclusive) -> bytes`` per call, so it is tested without any store.
"""

from __future__ import annotations

import logging
import mmap
import queue
import struct
import sys
import threading
import time as _time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import IO, Any

from crc32c import crc32c

logger = logging.getLogger(__name__)

Fetcher = Callable[[int, int], bytes]
# A chunk held in memory: the fetched bytes until they are on disk, then a read-only map of the cache file (the
# page cache holds the bytes once, and the fetch's memory goes back to the allocator for the next chunk).
Chunk = bytes | bytearray | mmap.mmap | memoryview
# (start, end_inclusive or None for the object's end) -> a binary stream of those bytes, read as they arrive
Opener = Callable[[int, "int | None"], IO[bytes]]

_TRAILER = struct.Struct(">4sI")  # on disk after each chunk: magic, crc32c of the chunk
_TRAILER_MAGIC = b"tcrc"
_COLD_OBJECTS = 1024  # how many objects the cache remembers as recently missing chunks on disk
_COLD_SECONDS = 10.0  # for how long after a miss their next chunks are fetched without asking the disk
_STREAM_IDLE_SECONDS = 5.0  # a stream whose reader stopped this long closes its fetch
_READ_PIECE = 1024 * 1024  # a stream reads its chunk in pieces this size (freed at once, so reused, not faulted)
# Stream buffers are recycled once nothing refers to them, which reference counts tell on CPython with the GIL.
_RECYCLE = sys.implementation.name == "cpython" and getattr(sys, "_is_gil_enabled", lambda: True)()


class ChunkCache:
    def __init__(
        self,
        directory: str | Path,
        *,
        chunk_size: int = 4 * 1024 * 1024,
        size_limit: int = 2 * 1024**3,
        prefetch_chunks: int = 2,
        max_workers: int = 4,
        memory_bytes: int = 128 * 1024 * 1024,
        registry: Any = None,
    ) -> None:
        if chunk_size <= 0:
            raise ValueError(f"chunk size must be > 0, got {chunk_size}")
        import diskcache

        self.chunk_size = chunk_size
        self.prefetch_chunks = max(0, prefetch_chunks)
        self._cache = diskcache.Cache(str(directory), size_limit=size_limit, eviction_policy="least-recently-used")
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="chunk-cache")
        # Writing a chunk to disk is off the reader's path: memory serves it until the write lands.
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chunk-cache-writer")
        self._inflight: dict[str, Future[Chunk]] = {}
        self._lock = threading.Lock()
        # Hot chunks also stay in memory (bounded): a read of 64 KiB must not copy a 4 MiB chunk off disk.
        self._memory: OrderedDict[str, Chunk] = OrderedDict()
        self._memory_bytes = 0
        self._memory_limit = max(0, memory_bytes)
        self._cold_objects: OrderedDict[str, float] = OrderedDict()  # object -> until when its disk lookups are skipped
        self._last_chunk: dict[str, int] = {}  # per object: the last chunk read, to spot sequential readers
        self._sizes: dict[str, int] = {}  # object sizes learnt from short chunks (when callers pass None)
        self._streams: dict[str, _Stream] = {}  # per object: the open fetch feeding its sequential reader
        # The chunk buffers streams read into, reused once nothing refers to them (the chunk is on disk and held
        # as a map, and no reader keeps a view): a fresh 4 MiB buffer costs 1,024 page faults.
        self._buffers: list[bytearray] = []
        self._max_buffers = max(4, 2 * max_workers * (self.prefetch_chunks + 2))
        self._max_streams = max(1, max_workers)
        # Streams run on long-lived threads: a thread's first disk lookup opens its own SQLite connection (diskcache
        # keeps one per thread), which costs milliseconds a new segment's first chunk would wait for.
        self._stream_pool = _DaemonThreads(self._max_streams, "chunk-cache-stream")
        self._closed = False
        self.hits = self.misses = self.prefetches = self.fetches = self.streams_opened = 0
        self.disk_mismatches = 0  # chunks read back from disk that failed their crc32c (dropped and fetched again)
        self._metrics = _Metrics(registry)

    @staticmethod
    def _key(key: str, index: int) -> str:
        return f"{key}#{index}"

    # ------------------------------------------------------------------------------------------------------

    def read(
        self, key: str, object_size: int | None, start: int, end_inclusive: int, fetcher: Fetcher,
        opener: Opener | None = None,
    ) -> bytes | memoryview:
        """Bytes ``[start, end_inclusive]`` of object ``key`` (shorter at the object's end): a read-only view into
        a cached chunk when the range lies in one, else bytes. ``fetcher`` fetches one chunk; ``opener``, when
        given, opens a streaming fetch that a sequential reader's chunks then come from."""
        if start < 0 or end_inclusive < start:
            raise ValueError(f"invalid range {start}..{end_inclusive}")
        if object_size is None:
            object_size = self._sizes.get(key)
        if object_size is not None:
            end_inclusive = min(end_inclusive, object_size - 1)
            if start > end_inclusive:
                return b""
        cs = self.chunk_size
        first, last = start // cs, end_inclusive // cs
        if first == last:
            # The common case, a range within a chunk held in memory, unless it starts a sequential reader's next
            # chunk (which moves the read-ahead on): no future, a view of the chunk.
            held = self._in_memory(self._key(key, first))
            if held is not None and (len(held) == cs or object_size is not None):
                previous = self._last_chunk.get(key)
                if previous != first - 1 and not (previous is None and first == 0):
                    self._last_chunk[key] = first
                    self._count_hit()
                    lo = start - first * cs
                    return memoryview(held).toreadonly()[lo : min(end_inclusive - first * cs + 1, len(held))]
        previous = self._last_chunk.get(key)
        sequential = (previous is not None and previous <= first <= previous + 1) or (previous is None and first == 0)
        if opener is not None and sequential:
            self._stream(key, first, last, object_size, fetcher, opener)
        futures = [self._chunk(key, i, object_size, fetcher) for i in range(first, last + 1)]
        parts: list[Chunk] = []
        for i, fut in zip(range(first, last + 1), futures):
            chunk = fut.result()
            parts.append(chunk)
            if len(chunk) < cs:  # the object ends in this chunk
                self._sizes[key] = i * cs + len(chunk)
                last = i
                break
        self._last_chunk[key] = last
        if sequential:
            self._prefetch(key, last + 1, object_size, fetcher, opener)  # a sequential reader: read ahead
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

    def end_of_chunk(self, start: int, end: int) -> int:
        """``end``, moved on to the end of its chunk when ``[start, end)`` lies in one (a view costs nothing more)."""
        cs = self.chunk_size
        if (end - 1) // cs == start // cs:
            return ((end - 1) // cs + 1) * cs
        return end

    def read_ahead_reaches(self, position: int, object_size: int) -> bool:
        """Whether a sequential reader's read-ahead from ``position`` reaches the end of an object of that size."""
        return position + self.chunk_size * max(1, self.prefetch_chunks) >= object_size

    def _remember(self, ckey: str, data: Chunk) -> None:
        if len(data) > self._memory_limit:
            return
        with self._lock:
            old = self._memory.pop(ckey, None)
            if old is not None:
                self._memory_bytes -= len(old)
            self._memory[ckey] = data
            self._memory_bytes += len(data)
            while self._memory_bytes > self._memory_limit:
                _, evicted = self._memory.popitem(last=False)
                self._memory_bytes -= len(evicted)

    def _in_memory(self, ckey: str) -> Chunk | None:
        with self._lock:
            data = self._memory.get(ckey)
            if data is not None:
                self._memory.move_to_end(ckey)
            return data

    def _chunk(self, key: str, index: int, object_size: int | None, fetcher: Fetcher, prefetch: bool = False) -> Future[Chunk]:
        """The chunk, from memory at once, else from a worker that reads it off disk or fetches it.

        The disk lookup runs on the worker, not here: it is a SQLite query, which waits whenever the writer
        thread is storing a chunk, and a sequential reader would pay that wait on every read.
        """
        ckey = self._key(key, index)
        cached = self._in_memory(ckey)
        if cached is not None:
            if not prefetch:
                self._count_hit()
            done: Future[Chunk] = Future()
            done.set_result(cached)
            return done
        with self._lock:
            fut = self._inflight.get(ckey)
            if fut is not None:
                return fut
            fut = self._pool.submit(self._load, ckey, key, index, object_size, fetcher, prefetch)
            self._inflight[ckey] = fut
        return fut

    def _count_hit(self) -> None:
        self.hits += 1
        self._metrics.inc("hits")

    def _from_disk(self, ckey: str, key: str) -> Chunk | None:
        """The chunk from the disk store, or None (and the object marked cold) when it is not there.

        The disk is asked unless a chunk of this object was missing from it seconds ago: chunks are stored as they
        are read, so the next chunks of an object read cold are missing too, and the lookup is a SQLite query
        that waits behind the writer thread's transactions (worst case, a chunk another process has stored is
        fetched again). A read-only membership query first: get() of a least-recently-used cache updates the
        access time, a write transaction."""
        data = None
        if self._cold_objects.get(key, 0.0) < _time.monotonic() and ckey in self._cache:
            data = self._mapped(ckey, verify=True)
        if data is None:
            with self._lock:
                self._cold_objects[key] = _time.monotonic() + _COLD_SECONDS
                self._cold_objects.move_to_end(key)
                while len(self._cold_objects) > _COLD_OBJECTS:
                    self._cold_objects.popitem(last=False)
            return None
        self._remember(ckey, data)
        return data

    def _mapped(self, ckey: str, verify: bool = False) -> Chunk | None:
        """The chunk's cache file mapped read-only (no copy, and pages the page cache shares), without its trailer,
        or None when it is not on disk (or, with ``verify``, does not match its trailer's crc32c: it is then
        dropped from the disk store). A map outlives the file's eviction: the inode goes when the last map does."""
        try:
            handle = self._cache.get(ckey, read=True)
        except OSError:
            return None
        if handle is None:
            return None
        stored: Chunk
        if isinstance(handle, bytes | bytearray):  # stored inline by another writer
            stored = bytes(handle)
        else:
            with handle:
                try:
                    stored = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
                except (OSError, ValueError):  # an empty file cannot be mapped
                    stored = handle.read()
        n = len(stored) - _TRAILER.size
        if n <= 0:
            problem = "shorter than its trailer"
        else:
            magic, crc = _TRAILER.unpack_from(stored, n)
            chunk = memoryview(stored)[:n]
            if magic != _TRAILER_MAGIC:
                problem = "no crc32c trailer (an older cache format, or damaged)"
            elif verify and crc32c(chunk) != crc:
                problem = f"crc32c {crc32c(chunk):#010x} does not match the {crc:#010x} stored with it"
            else:
                return chunk.toreadonly()
        level = logging.INFO if problem.startswith("no crc32c") else logging.WARNING  # an upgrade makes many
        logger.log(level, "chunk %s of the segment cache is damaged on disk (%s): fetching it again", ckey, problem)
        self.disk_mismatches += 1
        try:
            self._cache.delete(ckey)
        except Exception:
            logger.debug("could not drop chunk %s from the segment cache", ckey, exc_info=True)
        return None

    def _count_fetch(self, prefetch: bool) -> None:
        if prefetch:
            self.prefetches += 1
            self._metrics.inc("prefetches")
        else:
            self.misses += 1
            self._metrics.inc("misses")

    def _fetched(self, ckey: str, key: str, data: Chunk) -> None:
        """A chunk that came from the store: kept in memory and written to disk off the reader's path."""
        self.fetches += 1
        if data:
            self._remember(ckey, data)
            self._writer.submit(self._store, ckey, data, key)

    def _load(self, ckey: str, key: str, index: int, object_size: int | None, fetcher: Fetcher, prefetch: bool) -> Chunk:
        try:
            data = self._from_disk(ckey, key)
            if data is not None:
                if not prefetch:
                    self._count_hit()
                return data
            self._count_fetch(prefetch)
            data = self._fetch_chunk(index, object_size, fetcher)
            self._fetched(ckey, key, data)
            return data
        finally:
            with self._lock:
                self._inflight.pop(ckey, None)

    def _fetch_chunk(self, index: int, object_size: int | None, fetcher: Fetcher) -> bytes:
        start = index * self.chunk_size
        end = start + self.chunk_size - 1
        if object_size is not None:
            end = min(end, object_size - 1)
        return fetcher(start, end) if start <= end else b""

    def _store(self, ckey: str, data: Chunk, key: str) -> None:
        try:
            # As a file object (read=True): diskcache writes a bytes value by iterating it as a BytesIO, which
            # yields lines, so a 4 MiB chunk of binary data became ~16,000 small writes.
            self._cache.set(ckey, _Reader(data), read=True, tag=key)
            # Held from now on as a map of the file just written: the fetched bytes are freed (unless a reader
            # still has a view), so the next chunk reuses their memory instead of faulting in fresh pages, which
            # in a VM costs more than the fetch.
            with self._lock:
                held = self._memory.get(ckey) is data
            if held:
                mapped = self._mapped(ckey)
                if mapped is not None and len(mapped) == len(data):
                    with self._lock:
                        if self._memory.get(ckey) is data:
                            self._memory[ckey] = mapped
        except Exception:
            logger.warning("could not store chunk %s in the segment cache", ckey, exc_info=True)

    def prefetch(
        self, key: str, first_chunk: int, fetcher: Fetcher, object_size: int | None = None, opener: Opener | None = None
    ) -> None:
        """Fetch ``prefetch_chunks`` chunks of ``key`` from ``first_chunk`` in the background (a reader is about
        to need them; with ``opener``, through a stream that goes on feeding that reader); failures are only
        logged."""
        self._prefetch(key, first_chunk, object_size if object_size is not None else self._sizes.get(key), fetcher, opener)

    def _prefetch(self, key: str, index: int, object_size: int | None, fetcher: Fetcher, opener: Opener | None = None) -> None:
        if self.prefetch_chunks == 0:
            return
        if opener is not None and self._stream(key, index, index - 1, object_size, fetcher, opener):
            return
        for i in range(index, index + self.prefetch_chunks):
            if object_size is not None and i * self.chunk_size >= object_size:
                return
            if self._key(key, i) in self._memory:
                continue
            fut = self._chunk(key, i, object_size, fetcher, prefetch=True)
            fut.add_done_callback(_log_failure)

    def _stream(
        self, key: str, index: int, wanted: int, object_size: int | None, fetcher: Fetcher, opener: Opener
    ) -> bool:
        """Make sure a stream feeds the sequential reader of ``key`` that is about to need chunk ``index`` (and up
        to ``wanted``): nudge the live one, or start one at ``index`` when there is none and fewer than the limit
        run. False when no stream serves the reader (the caller fetches chunk by chunk)."""
        if object_size is not None and index * self.chunk_size >= object_size:
            return True  # nothing past the end to read ahead
        with self._lock:
            if self._closed:
                return False
            stream = self._streams.get(key)
            new = stream is None or not stream.alive
            if not new and stream.next > index + self.prefetch_chunks:  # type: ignore[union-attr]
                return False  # the stream serves another reader further on
            if new:
                if self._window_held(key, index, wanted, object_size):
                    return True  # nothing to stream yet (a stream started now would idle, holding a thread)
                if len(self._streams) >= self._max_streams:
                    return False
                stream = _Stream(self, key, index, object_size, fetcher, opener)
                self._streams[key] = stream
        assert stream is not None
        stream.want(wanted)  # outside the cache's lock: the stream's condition comes first
        if new:
            stream.start()
        return True

    def _window_held(self, key: str, index: int, wanted: int, object_size: int | None) -> bool:
        """Whether every chunk a new stream at ``index`` would read first is held or being fetched (under the lock)."""
        upto = max(wanted, self._last_chunk.get(key, index - 1) + self.prefetch_chunks)
        size = object_size if object_size is not None else self._sizes.get(key)
        if size is not None:
            upto = min(upto, (size - 1) // self.chunk_size)
        return all(
            (ckey := self._key(key, i)) in self._memory or ckey in self._inflight for i in range(index, upto + 1)
        )

    def _buffer(self) -> bytearray:
        """A chunk-sized buffer: a recycled one nothing refers to any more, else a new one."""
        if _RECYCLE:
            with self._lock:
                buffers = self._buffers
                for i in range(len(buffers)):
                    if sys.getrefcount(buffers[i]) == 2:  # the list's reference and the call's
                        return buffers[i]
                buf = bytearray(self.chunk_size)
                if len(buffers) < self._max_buffers:
                    buffers.append(buf)
                return buf
        return bytearray(self.chunk_size)

    def _stream_ended(self, stream: _Stream) -> None:
        with self._lock:
            if self._streams.get(stream.key) is stream:
                del self._streams[stream.key]

    def invalidate(self, key: str) -> int:
        """Drop every chunk of object ``key`` (its remote copy was deleted or replaced)."""
        with self._lock:
            stream = self._streams.get(key)
        if stream is not None:
            stream.stop()
            stream.join()
        self.flush()
        prefix = f"{key}#"
        with self._lock:
            for ckey in [k for k in self._memory if k.startswith(prefix)]:
                self._memory_bytes -= len(self._memory.pop(ckey))
        return int(self._cache.evict(key))

    def clear(self) -> None:
        """Drop every chunk, in memory and on disk (shared with other processes: theirs too)."""
        with self._lock:
            streams = list(self._streams.values())
        for stream in streams:
            stream.stop()
        for stream in streams:
            stream.join()
        self.flush()
        with self._lock:
            self._memory.clear()
            self._memory_bytes = 0
            self._cold_objects.clear()
            self._last_chunk.clear()
            self._sizes.clear()
        self._cache.clear()

    @property
    def size_bytes(self) -> int:
        return int(self._cache.volume())

    def __len__(self) -> int:
        return len(self._cache)

    def flush(self) -> None:
        """Wait until every fetched chunk is on disk."""
        self._writer.submit(lambda: None).result()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            streams = list(self._streams.values())
        for stream in streams:
            stream.stop()
        for stream in streams:
            stream.join()
        self._stream_pool.shutdown()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._writer.shutdown(wait=True)
        self._cache.close()

    def __enter__(self) -> ChunkCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Stream:
    """One open fetch of an object from chunk ``next`` to its end, feeding a sequential reader chunk by chunk.

    The window: chunks up to ``prefetch_chunks`` past the reader's last chunk (and at least up to the chunk it
    asked for). The stream claims the futures of the window's chunks (readers wait on them as on any fetch in
    flight), reads them off the fetch in order, publishes each, then waits for the reader to move on. Chunks
    already held or being fetched by someone else are read past; before the fetch is open they are skipped and
    chunks on disk come from disk. Claims left when the fetch fails (or the stream ends with some) are fetched
    one by one with the fetcher, whose failure fails the readers waiting on them; only closing the cache
    cancels them. It runs on one of the cache's stream threads, which it gives back at the object's end, when
    stopped, or once its reader has been gone for ``_STREAM_IDLE_SECONDS``.

    Lock order: the stream's condition, then the cache's lock."""

    def __init__(
        self, cache: ChunkCache, key: str, index: int, object_size: int | None, fetcher: Fetcher, opener: Opener
    ) -> None:
        self.cache, self.key, self.object_size = cache, key, object_size
        self.fetcher, self.opener = fetcher, opener
        self.next = index  # the next chunk to take off the stream
        self._first = index
        self._wanted = index - 1
        self._claimed: dict[int, Future[Chunk]] = {}
        self._wake = threading.Condition()
        self._stopped = False
        self._done: Future[None] | None = None
        self.alive = True

    def start(self) -> None:
        self._done = self.cache._stream_pool.submit(self.run)

    def join(self) -> None:
        if self._done is not None:
            wait([self._done])

    def want(self, chunk: int) -> None:
        """A reader needs chunks up to ``chunk`` (claimed at once, so it waits for this stream, not a second fetch)."""
        with self._wake:
            self._wanted = max(self._wanted, chunk)
            self._claim(self._limit())
            self._wake.notify()

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()

    def _limit(self) -> int:
        reader = self.cache._last_chunk.get(self.key, self._first - 1)
        limit = max(self._wanted, reader + self.cache.prefetch_chunks)
        size = self._size()
        return limit if size is None else min(limit, (size - 1) // self.cache.chunk_size)

    def _size(self) -> int | None:
        """The object's size, when the caller gave it or a short chunk told it."""
        return self.object_size if self.object_size is not None else self.cache._sizes.get(self.key)

    def _past_the_end(self) -> bool:
        size = self._size()
        return size is not None and self.next * self.cache.chunk_size >= size

    def _claim(self, upto: int) -> None:
        """Claim the chunks ``next..upto`` that nobody holds or fetches (under the condition)."""
        cache = self.cache
        with cache._lock:
            for i in range(self.next, upto + 1):
                ckey = cache._key(self.key, i)
                if i not in self._claimed and ckey not in cache._memory and ckey not in cache._inflight:
                    fut: Future[Chunk] = Future()
                    cache._inflight[ckey] = fut
                    self._claimed[i] = fut

    def run(self) -> None:
        body: IO[bytes] | None = None
        cache, cs = self.cache, self.cache.chunk_size
        try:
            while not self._past_the_end():
                with self._wake:
                    while not self._stopped and self.next > self._limit():
                        if not self._wake.wait(_STREAM_IDLE_SECONDS) and self.next > self._limit():
                            return  # the reader went away
                    if self._stopped:
                        return
                    upto = self._limit()
                    self._claim(upto)
                while self.next <= upto:
                    i = self.next
                    with self._wake:
                        fut = self._claimed.get(i)
                    ckey = cache._key(self.key, i)
                    if body is None:
                        if fut is None:
                            self.next += 1  # held or fetched elsewhere, and nothing open to read past
                            continue
                        data = cache._from_disk(ckey, self.key)
                        if data is not None:
                            cache._count_hit()
                            self._publish(i, data)
                            self.next += 1
                            continue
                        # To the object's end (a whole object is then a plain GET, which stores serve fastest).
                        body = self.opener(i * cs, None)
                        cache.streams_opened += 1
                    buf = cache._buffer()
                    n = _read_into(body, buf)
                    chunk: Chunk = buf if n == cs else bytes(memoryview(buf)[:n])  # short: the object's last
                    del buf
                    if fut is not None:
                        cache._count_fetch(prefetch=True)
                        cache._fetched(ckey, self.key, chunk)
                        self._publish(i, chunk)
                    del chunk  # nothing but the cache refers to the buffer now: it can be recycled
                    self.next += 1
                    if n < cs:  # the object ends in this chunk
                        cache._sizes[self.key] = i * cs + n
                        return
        except Exception as exc:
            logger.debug("streaming read of %s failed at chunk %d: %s", self.key, self.next, exc)
        finally:
            self.alive = False
            cache._stream_ended(self)
            if body is not None:
                try:
                    body.close()
                except Exception:
                    logger.debug("closing the fetch of %s failed", self.key, exc_info=True)
            self._settle_claims()

    def _release(self, i: int) -> Future[Chunk]:
        """Chunk ``i``'s claimed future, no longer claimed nor in flight (the caller resolves it)."""
        with self._wake:
            fut = self._claimed.pop(i)
        with self.cache._lock:
            self.cache._inflight.pop(self.cache._key(self.key, i), None)
        return fut

    def _publish(self, i: int, data: Chunk) -> None:
        self._release(i).set_result(data)

    def _settle_claims(self) -> None:
        """Claims the stream did not fill: fetched one by one (the fetch broke, or a reader asked as the stream
        was ending), or cancelled when the cache closes."""
        cache = self.cache
        while True:
            with self._wake:
                if not self._claimed:
                    return
                i = min(self._claimed)
            if cache._closed:
                self._release(i).cancel()
                continue
            try:
                cache._count_fetch(prefetch=True)
                size = self._size()
                data = cache._fetch_chunk(i, size, self.fetcher)
                cache._fetched(cache._key(self.key, i), self.key, data)
            except Exception as exc:
                self._release(i).set_exception(exc)
            else:
                self._publish(i, data)


class _DaemonThreads:
    """A fixed set of daemon threads running submitted calls in turn, started on first use. Unlike a
    ThreadPoolExecutor's workers, which the interpreter joins at exit, a stream waiting out its idle timeout on
    one of them does not hold up the exit of a program that never closed its cache."""

    def __init__(self, count: int, name: str) -> None:
        self._count, self._name = count, name
        self._tasks: queue.SimpleQueue[tuple[Callable[[], None], Future[None]] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], None]) -> Future[None]:
        done: Future[None] = Future()
        with self._lock:
            if not self._threads:
                for i in range(self._count):
                    thread = threading.Thread(target=self._work, name=f"{self._name}_{i}", daemon=True)
                    thread.start()
                    self._threads.append(thread)
            self._tasks.put((fn, done))
        return done

    def _work(self) -> None:
        while (task := self._tasks.get()) is not None:
            fn, done = task
            try:
                fn()
            except BaseException as exc:  # a stream catches its own errors; this only keeps the thread alive
                done.set_exception(exc)
            else:
                done.set_result(None)

    def shutdown(self) -> None:
        with self._lock:
            threads, self._threads = self._threads, []
            for _ in threads:
                self._tasks.put(None)
        for thread in threads:
            thread.join()


def _read_into(body: IO[bytes], buf: bytearray) -> int:
    """Fill ``buf`` from ``body`` (less only at its end), in pieces: each piece's memory is freed before the next
    is read, so the allocator hands the same pages back instead of faulting in new ones."""
    view, got, size = memoryview(buf), 0, len(buf)
    while got < size:
        piece = body.read(min(_READ_PIECE, size - got))
        if not piece:
            break
        view[got : got + len(piece)] = piece
        got += len(piece)
    return got


class _Reader:
    """A chunk as the file object diskcache copies from, followed by its trailer (magic and crc32c): slices are
    views, so storing copies nothing in memory."""

    def __init__(self, data: Chunk) -> None:
        self._view = memoryview(data)
        self._trailer = _TRAILER.pack(_TRAILER_MAGIC, crc32c(self._view))
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


def _log_failure(fut: Future[Chunk]) -> None:
    if fut.cancelled():  # the cache closed before the read-ahead ran
        return
    exc = fut.exception()
    if exc is not None:
        logger.debug("read-ahead fetch failed: %s", exc)


class _Metrics:
    def __init__(self, registry: Any) -> None:
        self._counters: dict[str, Any] = {}
        if registry is None:
            return
        from prometheus_client import Counter

        for name, doc in (("hits", "chunk reads served from the cache"), ("misses", "chunk reads fetched"),
                          ("prefetches", "chunks fetched ahead of a sequential reader")):
            self._counters[name] = Counter(f"RemoteLogSegmentCache_{name}", f"Remote segment cache {doc}", registry=registry)

    def inc(self, name: str) -> None:
        counter = self._counters.get(name)
        if counter is not None:
            counter.inc()
