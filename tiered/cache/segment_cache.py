"""The remote segment cache as its callers see it: byte ranges of a remote segment's ``.log``, by segment.

:class:`SegmentCache` is the port. A caller names the segment (its :class:`RemoteLogSegmentMetadata`) and a byte
range; it never sees how the cache stores or fetches (chunk sizes, streams, the disk store, checksums, and later
the transforms of a segment manifest: decompression and decryption sit behind this port, and what the cache holds
is the plaintext). :class:`RemoteSegmentCache` implements it over the plugin's ``fetch_log_segment``, the
segment's recorded checksums (:class:`tiered.checksums.ChecksumVerifier`: every fetched byte is checked before it
is cached or returned) and, when ``diskcache`` is installed, a :class:`tiered.cache.chunk_cache.ChunkCache`;
without one every read is a ranged fetch.

Read-ahead is asked for, never guessed: a reader that knows it reads on (the sequential-reader policy of
:class:`tiered.remote_log_reader.RemoteLogReader`) calls :meth:`SegmentCache.prefetch` with where it will read
next, and learns whether the read-ahead reaches the segment's end (the reader then asks for the next segment).

Thread-safe: one instance serves every reader of a process.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Protocol

from local.records.constants import INT32_MAX
from tiered.rsm import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteStorageManager

if TYPE_CHECKING:
    from tiered.cache.chunk_cache import ChunkCache
    from tiered.checksums import ChecksumVerifier

_SOURCES = 4096  # segments whose fetch functions are kept (built once per segment, not once per read)


class SegmentCache(Protocol):
    """Byte ranges of remote segments' ``.log`` objects (see the module docstring)."""

    def read(self, segment: RemoteLogSegmentMetadata, start: int, end: int, *, spare: bool = False) -> bytes | memoryview:
        """Bytes ``[start, end)`` of the segment's ``.log`` (fewer only at the object's end). With ``spare``, the
        answer may run on past ``end`` over bytes the cache holds at no extra cost (a caller that may need more
        saves a second read)."""
        ...

    def prefetch(self, segment: RemoteLogSegmentMetadata, position: int) -> bool:
        """A reader is about to read the segment on from ``position``: fetch from there and ahead in the background
        (failures are only logged; the reader's own read fetches again). True when that read-ahead reaches the
        segment's end."""
        ...

    def invalidate(self, segment: RemoteLogSegmentMetadata) -> None:
        """Forget the segment (its remote copy was deleted)."""
        ...

    def close(self) -> None: ...


def object_size(md: RemoteLogSegmentMetadata) -> int | None:
    """The size of the segment's remote ``.log``, when the metadata knows it: ``segment_size_in_bytes`` is an
    int32, clamped at 2^31-1 for larger segments, and a clamped size is not a size (None: the object's end is
    then learnt from a short read)."""
    size = md.segment_size_in_bytes
    return size if 0 <= size < INT32_MAX else None


@dataclass(frozen=True, slots=True)
class _Source:
    """How one segment's ``.log`` is fetched: a ranged fetch, and a streaming one when the plugin streams."""

    key: str
    size: int | None
    fetch: Callable[[int, int], bytes]
    open: Callable[[int, int | None], IO[bytes]] | None


class RemoteSegmentCache:
    """:class:`SegmentCache` over a plugin, its checksums and an optional chunk cache (see the module docstring)."""

    def __init__(self, rsm: RemoteStorageManager, checksums: ChecksumVerifier, chunks: ChunkCache | None) -> None:
        self._rsm = rsm
        self._checksums = checksums
        self.chunks = chunks
        self._streams = bool(getattr(rsm, "fetch_streams", False))
        self._sources: OrderedDict[RemoteLogSegmentId, _Source] = OrderedDict()
        self._lock = threading.Lock()

    def _source(self, md: RemoteLogSegmentMetadata) -> _Source:
        sid = md.remote_log_segment_id
        with self._lock:
            source = self._sources.get(sid)
            if source is not None:
                self._sources.move_to_end(sid)
                return source
        source = self._new_source(md)
        with self._lock:
            self._sources[sid] = source
            if len(self._sources) > _SOURCES:
                self._sources.popitem(last=False)
        return source

    def _new_source(self, md: RemoteLogSegmentMetadata) -> _Source:
        rsm = self._rsm

        def fetch(start: int, end_inclusive: int) -> bytes:
            with rsm.fetch_log_segment(md, start, end_inclusive) as stream:
                return stream.read()

        def open_stream(start: int, end_inclusive: int | None) -> IO[bytes]:
            return rsm.fetch_log_segment(md, start, end_inclusive)

        sid = md.remote_log_segment_id
        return _Source(
            f"{sid.topic_id_partition.topic_id}/{sid.id}.log",
            object_size(md),
            self._checksums.fetcher(md, fetch),
            self._checksums.opener(md, open_stream) if self._streams else None,
        )

    def read(self, segment: RemoteLogSegmentMetadata, start: int, end: int, *, spare: bool = False) -> bytes | memoryview:
        if start < 0 or end < start:
            raise ValueError(f"invalid range {start}..{end} of remote segment {segment.remote_log_segment_id}")
        if end == start:
            return b""
        source = self._source(segment)
        chunks = self.chunks
        if chunks is None:
            return source.fetch(start, end - 1)
        if spare:
            end = chunks.end_of_chunk(start, end)
        return chunks.read(source.key, source.size, start, end - 1, source.fetch)

    def prefetch(self, segment: RemoteLogSegmentMetadata, position: int) -> bool:
        chunks = self.chunks
        if chunks is None:
            return False
        source = self._source(segment)
        chunks.prefetch(source.key, position, source.fetch, source.size, source.open)
        return source.size is not None and chunks.read_ahead_reaches(position, source.size)

    def invalidate(self, segment: RemoteLogSegmentMetadata) -> None:
        sid = segment.remote_log_segment_id
        with self._lock:
            self._sources.pop(sid, None)
        if self.chunks is not None:
            self.chunks.forget(f"{sid.topic_id_partition.topic_id}/{sid.id}.log")

    def close(self) -> None:
        if self.chunks is not None:
            self.chunks.close()
