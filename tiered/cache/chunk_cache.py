"""The remote segment cache: fixed-size chunks of remote ``.log`` objects in a bounded ``diskcache`` store.

- Chunks are aligned (chunk ``n`` covers bytes ``[n*size, (n+1)*size)``); the last one of an object is short.
- The store is a ``diskcache.Cache`` (SQLite + files): bounded by bytes with least-recently-used eviction,
  process-safe (Spark executors on one machine share it) and kept across restarts.
- Reads spanning several chunks fetch the missing ones in parallel (ranged GETs), and a sequential reader gets
  the next ``prefetch_chunks`` chunks fetched in the background (read-ahead).
- Concurrent readers of one missing chunk in this process trigger one fetch (single flight); a failed fetch is
  not cached.

The cache takes a fetcher ``(start, end_inclusive) -> bytes`` per call, so it is tested without any store.
"""

from __future__ import annotations

import io
import logging
import threading
import time as _time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

Fetcher = Callable[[int, int], bytes]

_COLD_OBJECTS = 1024  # how many objects the cache remembers as recently missing chunks on disk
_COLD_SECONDS = 10.0  # for how long after a miss their next chunks are fetched without asking the disk


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
        self._inflight: dict[str, Future[bytes]] = {}
        self._lock = threading.Lock()
        # Hot chunks also stay in memory (bounded): a read of 64 KiB must not copy a 4 MiB chunk off disk.
        self._memory: OrderedDict[str, bytes] = OrderedDict()
        self._memory_bytes = 0
        self._memory_limit = max(0, memory_bytes)
        self._cold_objects: OrderedDict[str, float] = OrderedDict()  # object -> until when its disk lookups are skipped
        self._last_chunk: dict[str, int] = {}  # per object: the last chunk read, to spot sequential readers
        self._sizes: dict[str, int] = {}  # object sizes learnt from short chunks (when callers pass None)
        self.hits = self.misses = self.prefetches = self.fetches = 0
        self._metrics = _Metrics(registry)

    @staticmethod
    def _key(key: str, index: int) -> str:
        return f"{key}#{index}"

    # ------------------------------------------------------------------------------------------------------

    def read(self, key: str, object_size: int | None, start: int, end_inclusive: int, fetcher: Fetcher) -> bytes | memoryview:
        """Bytes ``[start, end_inclusive]`` of object ``key`` (shorter at the object's end): a read-only view into
        a cached chunk when the range lies in one, else bytes."""
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
                    return memoryview(held)[lo : min(end_inclusive - first * cs + 1, len(held))]
        futures = [self._chunk(key, i, object_size, fetcher) for i in range(first, last + 1)]
        parts: list[bytes] = []
        for i, fut in zip(range(first, last + 1), futures):
            chunk = fut.result()
            parts.append(chunk)
            if len(chunk) < cs:  # the object ends in this chunk
                self._sizes[key] = i * cs + len(chunk)
                last = i
                break
        previous = self._last_chunk.get(key)
        self._last_chunk[key] = last
        if previous is not None and previous <= first <= previous + 1 and last > previous - 1:
            self._prefetch(key, last + 1, object_size, fetcher)  # a sequential reader: read ahead
        elif previous is None and first == 0:
            self._prefetch(key, last + 1, object_size, fetcher)
        # Views of the chunks, not slices: a range within one chunk comes back without a copy, and one spanning
        # chunks with one. (Each copy of a fresh megabyte also faults its pages in, which in a VM costs more
        # than the copy itself.)
        out = []
        for i, chunk in zip(range(first, first + len(parts)), parts):
            lo = max(start - i * cs, 0)
            hi = min(end_inclusive - i * cs + 1, len(chunk))
            if lo < hi:
                out.append(memoryview(chunk)[lo:hi])
        if not out:
            return b""
        return out[0] if len(out) == 1 else b"".join(out)

    def _remember(self, ckey: str, data: bytes) -> None:
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

    def _in_memory(self, ckey: str) -> bytes | None:
        with self._lock:
            data = self._memory.get(ckey)
            if data is not None:
                self._memory.move_to_end(ckey)
            return data

    def _chunk(self, key: str, index: int, object_size: int | None, fetcher: Fetcher, prefetch: bool = False) -> Future[bytes]:
        """The chunk, from memory at once, else from a worker that reads it off disk or fetches it.

        The disk lookup runs on the worker, not here: it is a SQLite query, which waits whenever the writer
        thread is storing a chunk, and a sequential reader would pay that wait on every read.
        """
        ckey = self._key(key, index)
        cached = self._in_memory(ckey)
        if cached is not None:
            if not prefetch:
                self._count_hit()
            done: Future[bytes] = Future()
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

    def _load(self, ckey: str, key: str, index: int, object_size: int | None, fetcher: Fetcher, prefetch: bool) -> bytes:
        try:
            # The disk is asked unless a chunk of this object was missing from it seconds ago: chunks are stored as they
            # are read, so the next chunks of an object read cold are missing too, and the lookup is a SQLite
            # query that waits behind the writer thread's transactions (worst case, a chunk another process has
            # stored is fetched again). A read-only membership query first: get() of a least-recently-used
            # cache updates the access time, a write transaction.
            data = None
            if self._cold_objects.get(key, 0.0) < _time.monotonic() and ckey in self._cache:
                data = self._cache.get(ckey)
            if data is None:
                with self._lock:
                    self._cold_objects[key] = _time.monotonic() + _COLD_SECONDS
                    self._cold_objects.move_to_end(key)
                    while len(self._cold_objects) > _COLD_OBJECTS:
                        self._cold_objects.popitem(last=False)
            else:
                self._remember(ckey, data)
                if not prefetch:
                    self._count_hit()
                return bytes(data)
            if prefetch:
                self.prefetches += 1
                self._metrics.inc("prefetches")
            else:
                self.misses += 1
                self._metrics.inc("misses")
            start = index * self.chunk_size
            end = start + self.chunk_size - 1
            if object_size is not None:
                end = min(end, object_size - 1)
            data = fetcher(start, end) if start <= end else b""
            self.fetches += 1
            if data:
                self._remember(ckey, data)
                self._writer.submit(self._store, ckey, data, key)
            return data
        finally:
            with self._lock:
                self._inflight.pop(ckey, None)

    def _store(self, ckey: str, data: bytes, key: str) -> None:
        try:
            # As a file object (read=True): diskcache writes a bytes value by iterating it as a BytesIO, which
            # yields lines, so a 4 MiB chunk of binary data became ~16,000 small writes.
            self._cache.set(ckey, io.BytesIO(data), read=True, tag=key)
        except Exception:
            logger.warning("could not store chunk %s in the segment cache", ckey, exc_info=True)

    def prefetch(self, key: str, first_chunk: int, fetcher: Fetcher, object_size: int | None = None) -> None:
        """Fetch ``prefetch_chunks`` chunks of ``key`` from ``first_chunk`` in the background (a reader is about
        to need them); failures are only logged."""
        self._prefetch(key, first_chunk, object_size if object_size is not None else self._sizes.get(key), fetcher)

    def _prefetch(self, key: str, index: int, object_size: int | None, fetcher: Fetcher) -> None:
        for i in range(index, index + self.prefetch_chunks):
            if object_size is not None and i * self.chunk_size >= object_size:
                return
            if self._key(key, i) in self._memory:
                continue
            fut = self._chunk(key, i, object_size, fetcher, prefetch=True)
            fut.add_done_callback(_log_failure)

    def invalidate(self, key: str) -> int:
        """Drop every chunk of object ``key`` (its remote copy was deleted or replaced)."""
        self.flush()
        prefix = f"{key}#"
        with self._lock:
            for ckey in [k for k in self._memory if k.startswith(prefix)]:
                self._memory_bytes -= len(self._memory.pop(ckey))
        return int(self._cache.evict(key))

    def clear(self) -> None:
        """Drop every chunk, in memory and on disk (shared with other processes: theirs too)."""
        self.flush()
        with self._lock:
            self._memory.clear()
            self._memory_bytes = 0
            self._cold_objects.clear()
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
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._writer.shutdown(wait=True)
        self._cache.close()

    def __enter__(self) -> ChunkCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _log_failure(fut: Future[bytes]) -> None:
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
