"""The chunk cache's memory tier: the most recently used chunks, under two bounds.

A chunk is held as the fetched bytes until it is on disk, then as a read-only map of its cache file (the page
cache holds the bytes once). Reads of 64 KiB must not copy a 4 MiB chunk off disk: hot chunks are answered from
here as views. Not locked itself: its owner (:class:`tiered.cache.chunk_cache.ChunkCache`) calls it under the
cache's state lock.

The two forms cost different things, so each has its own bound. Bytes are heap: at most ``limit`` of them. A map
is file pages the kernel may reclaim, but it holds a file descriptor open (CPython's ``mmap`` keeps a duplicate of
it before 3.13) and keeps its file on disk after the disk tier evicts it: at most ``map_limit`` bytes and
``max_maps`` maps. Under one bound for both, a reader going round a working set a little larger than the heap
bound (a Spark job reading a topic again) found none of its chunks here: each was evicted just before it was read
again, and every read went back to SQLite and checked the chunk's crc32c again.
"""

from __future__ import annotations

import mmap
from collections import OrderedDict

Chunk = bytes | bytearray | mmap.mmap | memoryview


def is_map(data: Chunk) -> bool:
    """Whether ``data`` is (a view of) a map of a file."""
    return isinstance(data, mmap.mmap) or (isinstance(data, memoryview) and isinstance(data.obj, mmap.mmap))


class _Lru:
    """Chunks of one form, least recently used first, with their total bytes."""

    def __init__(self) -> None:
        self.chunks: OrderedDict[str, Chunk] = OrderedDict()
        self.bytes = 0

    def pop(self, name: str) -> Chunk | None:
        data = self.chunks.pop(name, None)
        if data is not None:
            self.bytes -= len(data)
        return data

    def add(self, name: str, data: Chunk) -> None:
        self.chunks[name] = data
        self.bytes += len(data)

    def shrink(self, max_bytes: int, max_count: int | None) -> None:
        while self.chunks and (self.bytes > max_bytes or (max_count is not None and len(self.chunks) > max_count)):
            _, evicted = self.chunks.popitem(last=False)
            self.bytes -= len(evicted)


class MemoryChunks:
    """An LRU map of chunk name -> chunk (see the module docstring): chunks held as bytes, at most ``limit`` bytes
    (and ``max_chunks`` chunks; None: no count bound); chunks held as maps, at most ``map_limit`` bytes (default
    ``limit``) and ``max_maps`` maps (default ``max_chunks``). A chunk larger than its form's byte bound is not
    held."""

    def __init__(self, limit: int, max_chunks: int | None = None, *, map_limit: int | None = None,
                 max_maps: int | None = None) -> None:
        self._limit = max(0, limit)
        self._max_chunks = None if max_chunks is None else max(1, max_chunks)
        self._map_limit = self._limit if map_limit is None else max(0, map_limit)
        self._max_maps = self._max_chunks if max_maps is None else max(1, max_maps)
        self._owned = _Lru()
        self._maps = _Lru()

    def get(self, name: str) -> Chunk | None:
        """The chunk, now the most recently used, or None."""
        for tier in (self._maps, self._owned):
            data = tier.chunks.get(name)
            if data is not None:
                tier.chunks.move_to_end(name)
                return data
        return None

    def __contains__(self, name: str) -> bool:
        return name in self._maps.chunks or name in self._owned.chunks

    def holds(self, name: str, data: Chunk) -> bool:
        """Whether ``data`` itself (not an equal copy) is what is held under ``name``."""
        return self._maps.chunks.get(name) is data or self._owned.chunks.get(name) is data

    def put(self, name: str, data: Chunk) -> None:
        """Hold ``data``, evicting the least recently used chunks of its form past their bounds."""
        self._maps.pop(name)
        self._owned.pop(name)
        if is_map(data):
            if len(data) <= self._map_limit:
                self._maps.add(name, data)
                self._maps.shrink(self._map_limit, self._max_maps)
        elif len(data) <= self._limit:
            self._owned.add(name, data)
            self._owned.shrink(self._limit, self._max_chunks)

    def __len__(self) -> int:
        return len(self._maps.chunks) + len(self._owned.chunks)

    @property
    def max_chunks(self) -> int | None:
        """The most chunks held as bytes (None: no count bound)."""
        return self._max_chunks

    @property
    def max_maps(self) -> int | None:
        """The most maps held (each an open file)."""
        return self._max_maps

    def swap(self, name: str, old: Chunk, new: Chunk) -> None:
        """Hold ``new`` in place of ``old`` (same bytes, another form), if ``old`` is still what is held."""
        if self.holds(name, old) and len(new) == len(old):
            self.put(name, new)

    def discard(self, name: str, data: Chunk) -> None:
        """Let ``data`` go, if it is still what is held under ``name``."""
        if self.holds(name, data):
            self._maps.pop(name)
            self._owned.pop(name)

    def drop_maps(self, names: list[str]) -> None:
        """Let go of the maps held under ``names`` (their files were removed: a map keeps a file's space)."""
        for name in names:
            self._maps.pop(name)

    def drop_prefix(self, prefix: str) -> None:
        for tier in (self._maps, self._owned):
            for name in [n for n in tier.chunks if n.startswith(prefix)]:
                tier.pop(name)

    def clear(self) -> None:
        self._maps = _Lru()
        self._owned = _Lru()

    @property
    def size_bytes(self) -> int:
        """Bytes held, both forms."""
        return self._maps.bytes + self._owned.bytes
