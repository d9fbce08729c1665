"""The chunk cache's memory tier: the most recently used chunks, bounded by their total bytes.

A chunk is held as the fetched bytes until it is on disk, then as a read-only map of its cache file (the page
cache holds the bytes once). Reads of 64 KiB must not copy a 4 MiB chunk off disk: hot chunks are answered from
here as views. Not locked itself: its owner (:class:`tiered.cache.chunk_cache.ChunkCache`) calls it under the
cache's state lock.
"""

from __future__ import annotations

import mmap
from collections import OrderedDict

Chunk = bytes | bytearray | mmap.mmap | memoryview


class MemoryChunks:
    """An LRU map of chunk name -> chunk, holding at most ``limit`` bytes (a chunk larger than that is not held)
    and at most ``max_chunks`` chunks (None: no count bound).

    The count bound is the open files': a chunk held as a map of its cache file keeps a file descriptor open
    (CPython's ``mmap`` holds a duplicate of it before 3.13), and a byte bound alone lets small chunks (the last one
    of each object; whole objects smaller than a chunk) hold one descriptor per few bytes. The chunk cache bounds
    them by the full chunks its bytes hold."""

    def __init__(self, limit: int, max_chunks: int | None = None) -> None:
        self._limit = max(0, limit)
        self._max_chunks = None if max_chunks is None else max(1, max_chunks)
        self._chunks: OrderedDict[str, Chunk] = OrderedDict()
        self._bytes = 0

    def get(self, name: str) -> Chunk | None:
        """The chunk, now the most recently used, or None."""
        data = self._chunks.get(name)
        if data is not None:
            self._chunks.move_to_end(name)
        return data

    def __contains__(self, name: str) -> bool:
        return name in self._chunks

    def holds(self, name: str, data: Chunk) -> bool:
        """Whether ``data`` itself (not an equal copy) is what is held under ``name``."""
        return self._chunks.get(name) is data

    def put(self, name: str, data: Chunk) -> None:
        """Hold ``data``, evicting the least recently used chunks past the limit."""
        if len(data) > self._limit:
            return
        old = self._chunks.pop(name, None)
        if old is not None:
            self._bytes -= len(old)
        self._chunks[name] = data
        self._bytes += len(data)
        while self._bytes > self._limit or (self._max_chunks is not None and len(self._chunks) > self._max_chunks):
            _, evicted = self._chunks.popitem(last=False)
            self._bytes -= len(evicted)

    def __len__(self) -> int:
        return len(self._chunks)

    @property
    def max_chunks(self) -> int | None:
        return self._max_chunks

    def swap(self, name: str, old: Chunk, new: Chunk) -> None:
        """Hold ``new`` in place of ``old`` (same bytes, another form), if ``old`` is still what is held."""
        if self._chunks.get(name) is old and len(new) == len(old):
            self._chunks[name] = new

    def drop_prefix(self, prefix: str) -> None:
        for name in [n for n in self._chunks if n.startswith(prefix)]:
            self._bytes -= len(self._chunks.pop(name))

    def clear(self) -> None:
        self._chunks.clear()
        self._bytes = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes
