"""Writing a segment in the manifest format and reading byte ranges of it back.

:func:`log_chunks` reads the ``.log`` one chunk at a time and yields stored chunks, recording their offsets and
crcs: the upload streams them (memory: a few chunks, whatever the segment's size). :func:`pack_indexes` builds
the ``.indexes`` object. :class:`ChunkRangeReader` is the stream ``fetch_log_segment`` returns: it fetches the
stored chunks covering the requested original range (in windows, or one streamed GET when the backend streams),
decodes each and hands out exactly the requested bytes.
"""

from __future__ import annotations

import io
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from local.checkpoint import kafka_uuid_to_str
from local.crc import crc32c
from tiered.errors import RemoteChunkError
from tiered.format.manifest import IndexEntry, SegmentManifest
from tiered.format.transforms import LOG_OBJECT, ChunkCodec

#: a non-streaming backend fetches at most this many stored bytes per GET (or one chunk, when chunks are larger)
WINDOW_BYTES = 16 * 1024 * 1024

#: chunks decoded ahead of the reader when a read spans several (zstd and AES-GCM release the GIL, so they run on
#: other cores while the reader hands out the current chunk): memory is this many chunks more
DECODE_AHEAD = 2

Opener = Callable[[int, int], IO[bytes]]  # (stored start, stored end inclusive) -> stream

class Decoders:
    """The threads that decode chunks ahead of a :class:`ChunkRangeReader`: one small pool for every reader of its
    owner (the plugin that returns the readers), started on first use and stopped by :meth:`close`."""

    def __init__(self, threads: int | None = None) -> None:
        self._threads = threads or max(2, min(4, os.cpu_count() or 2))
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[int, bytes], bytes], i: int, stored: bytes) -> Future[bytes]:
        """``fn(i, stored)`` on a decoder thread; after :meth:`close`, run here (a reader still open decodes on)."""
        with self._lock:
            if self._pool is None and not self._closed:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="tiered-decode")
            pool = self._pool
        if pool is not None:
            try:
                return pool.submit(fn, i, stored)
            except RuntimeError:  # closed meanwhile
                pass
        done: Future[bytes] = Future()
        done.set_result(fn(i, stored))
        return done

    def close(self) -> None:
        """Stop the threads (waiting for the decodes in progress); later submits decode in the caller."""
        with self._lock:
            pool, self._pool, self._closed = self._pool, None, True
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def log_chunks(path: Path, chunk_size: int, codec: ChunkCodec, offsets: list[int], crcs: list[int]) -> Iterator[bytes]:
    """The stored chunks of the ``.log`` at ``path``; appends each one's end offset to ``offsets`` (which starts as
    ``[0]``) and its crc32c to ``crcs``."""
    with open(path, "rb", buffering=0) as f:
        index = 0
        while True:
            plain = f.read(chunk_size)
            if not plain:
                return
            while len(plain) < chunk_size:  # a raw read may come back short before the end
                more = f.read(chunk_size - len(plain))
                if not more:
                    break
                plain += more
            stored = codec.encode(LOG_OBJECT, index, plain)
            offsets.append(offsets[-1] + len(stored))
            crcs.append(crc32c(stored))
            index += 1
            yield stored


def pack_indexes(indexes: Mapping[str, bytes], codec: ChunkCodec) -> tuple[bytes, dict[str, IndexEntry]]:
    """The ``.indexes`` object of ``indexes`` (keyed by suffix) and where each lies in it."""
    parts: list[bytes] = []
    entries: dict[str, IndexEntry] = {}
    offset = 0
    for suffix, data in indexes.items():
        stored = codec.encode(suffix, 0, data)
        entries[suffix] = IndexEntry(offset, len(stored), len(data), crc32c(stored))
        parts.append(stored)
        offset += len(stored)
    return b"".join(parts), entries


def unpack_index(packed: bytes, suffix: str, entry: IndexEntry, codec: ChunkCodec, key: str) -> bytes:
    stored = packed[entry.offset : entry.offset + entry.stored_size]
    return codec.decode(suffix, 0, stored, entry.size, entry.crc32c, key=key)


class ChunkRangeReader(io.BufferedIOBase):
    """Original bytes ``[start, end_inclusive]`` of a segment stored as ``manifest`` says (see the module
    docstring). Stored chunks are fetched in order as the reader advances; when the range spans more than one,
    up to :data:`DECODE_AHEAD` of them are decoded ahead on ``decoders`` (without it, each is decoded as it is
    reached)."""

    def __init__(self, manifest: SegmentManifest, codec: ChunkCodec, key: str, opener: Opener, start: int,
                 end_inclusive: int, *, streams: bool, decoders: Decoders | None = None) -> None:
        self._m, self._codec, self._key, self._open = manifest, codec, key, opener
        self._chunks = manifest.chunks_of(start, end_inclusive)
        self._next = self._chunks.start
        self._skip = start - self._chunks.start * manifest.chunk_size  # bytes to drop from the first chunk
        self._remaining = end_inclusive - start + 1
        self._streams = streams
        self._source: IO[bytes] | None = None
        self._window_end = self._next  # the chunk after the last one the open source covers
        self._buffer = memoryview(b"")
        self._decoders = decoders
        self._ahead = DECODE_AHEAD if decoders is not None and len(self._chunks) > 1 else 0
        self._pending: deque[Future[bytes]] = deque()

    def readable(self) -> bool:
        return True

    def _open_window(self) -> None:
        offsets = self._m.stored_offsets
        last = self._chunks.stop
        if not self._streams:
            last = self._next + 1
            while last < self._chunks.stop and offsets[last + 1] - offsets[self._next] <= WINDOW_BYTES:
                last += 1
        if self._source is not None:
            self._source.close()
        self._source = self._open(offsets[self._next], offsets[last] - 1)
        self._window_end = last

    def _next_chunk(self) -> bytes:
        """The next decoded chunk: decoded here, or taken from those decoded ahead (and more sent ahead)."""
        if not self._ahead or self._decoders is None:
            i, stored = self._read_stored()
            return self._decode(i, stored)
        while len(self._pending) <= self._ahead and self._next < self._chunks.stop:
            i, stored = self._read_stored()
            self._pending.append(self._decoders.submit(self._decode, i, stored))
        return self._pending.popleft().result()

    def _decode(self, i: int, stored: bytes) -> bytes:
        return self._codec.decode(LOG_OBJECT, i, stored, self._m.chunk_size_of(i), self._m.crcs[i], key=self._key)

    def _read_stored(self) -> tuple[int, bytes]:
        i = self._next
        if self._source is None or i >= self._window_end:
            self._open_window()
        assert self._source is not None
        want = self._m.stored_offsets[i + 1] - self._m.stored_offsets[i]
        parts, got = [], 0
        while got < want:
            data = self._source.read(want - got)
            if not data:
                sid = kafka_uuid_to_str(self._codec.segment_id)
                raise RemoteChunkError(f"chunk {i} of remote object {self._key} (segment {sid}) is refused: the "
                                       f"object ends after {got} of its {want} stored bytes",
                                       key=self._key, chunk=i, segment_id=sid)
            parts.append(data)
            got += len(data)
        self._next += 1
        return i, parts[0] if len(parts) == 1 else b"".join(parts)

    def read(self, size: int | None = -1) -> bytes:
        out: list[bytes] = []
        want = self._remaining if size is None or size < 0 else min(size, self._remaining)
        while want > 0:
            if not self._buffer:
                plain = self._next_chunk()
                self._buffer = memoryview(plain)[self._skip :]
                self._skip = 0
            take = self._buffer[:want]
            out.append(bytes(take))
            self._buffer = self._buffer[len(take) :]
            want -= len(take)
            self._remaining -= len(take)
        return b"".join(out)

    read1 = read

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        if self._source is not None:
            self._source.close()
            self._source = None
        super().close()
