"""RemoteLogManager: copies closed segments to the remote tier, expires them, and serves reads from it.

Kafka's ``RemoteLogManager`` (its copy task, expiration task and remote reads) for one node, in our words.
It implements :class:`local.remote.RemoteTier`, so a :class:`local.log.Log` consults it for offsets below its
local log start offset, and local retention deletes a segment only once its remote copy is FINISHED.

Copy (per partition, in offset order): candidates are non-active segments whose next segment's base offset is at
or below the last stable offset, from the highest copied offset + 1. Each attempt gets a new segment id;
metadata COPY_SEGMENT_STARTED is recorded first, then the objects are uploaded, then COPY_SEGMENT_FINISHED. A
failed attempt deletes what it uploaded (DELETE_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED). A STARTED copy
found at start (a crash mid-copy) is cleaned up the same way.

Remote retention deletes segments past ``retention.ms`` (by max timestamp), past ``retention.bytes`` over the
whole log, below the log start offset, or outside the leader-epoch lineage, then advances the log start offset.
"""

from __future__ import annotations

import functools
import itertools
import logging
import struct
import tempfile
import threading
import time as _time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple

from local import filenames
from local.errors import CorruptRecordError
from local.fetch import FetchDataInfo, FetchIsolation, LogOffsetMetadata, TimestampAndOffset
from local.records import MemoryRecords
from local.records.batch import LAST_OFFSET_DELTA_OFFSET, LENGTH_OFFSET, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2
from local.scheduler import SYSTEM_TIME, Time
from tiered.errors import CustomMetadataSizeExceededError, RemoteStorageError
from tiered.rsm import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageManager,
    TopicIdPartition,
)

if TYPE_CHECKING:
    from local.config import LogConfig
    from local.log import Log
    from local.segment import LogSegment
    from tiered.cache.chunk_cache import ChunkCache
    from tiered.cache.index_cache import RemoteIndexCache
    from tiered.metadata import RemoteLogMetadataStore

logger = logging.getLogger(__name__)

EMPTY_PRODUCER_SNAPSHOT = bytes.fromhex("000148674bc700000000")
INT32_MAX = 2**31 - 1
_READ_SLACK = 64 * 1024  # read past max_bytes a little so a batch straddling the limit can be completed
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_I32 = struct.Struct(">i")
_LAST_OFFSET_DELTA_END = LAST_OFFSET_DELTA_OFFSET + 4
_READERS_PER_PARTITION = 16  # sequential readers of one partition told apart (the offsets they fetch next)


class _SegmentRead(NamedTuple):
    """Whole batches read from a remote segment: the bytes, the position after them and the offset after them."""

    data: bytes | memoryview
    end: int
    next_offset: int


_NOTHING = _SegmentRead(b"", 0, -1)


def _last_offset(data: bytes | memoryview, pos: int) -> int:
    """The last offset of the batch at ``pos`` (whose header is in ``data``)."""
    base_offset = _OFFSET_AND_LENGTH.unpack_from(data, pos)[0]
    if data[pos + MAGIC_OFFSET] >= MAGIC_V2:
        return int(base_offset + _I32.unpack_from(data, pos + LAST_OFFSET_DELTA_OFFSET)[0])
    return int(base_offset)  # a legacy entry's offset field holds its last offset


@dataclass
class PassResult:
    """What one pass of the copy and expiration tasks did."""

    segments_copied: int = 0
    bytes_copied: int = 0
    segments_deleted: int = 0
    copy_errors: int = 0
    stale_copies_cleaned: int = 0


class _RateLimiter:
    """Bytes-per-second quota (remote.log.manager.copy/fetch.max.bytes.per.second); None = unbounded."""

    def __init__(self, bytes_per_second: int | None, time: Time) -> None:
        self.rate = bytes_per_second if bytes_per_second and bytes_per_second < 2**62 else None
        self.time = time
        self._lock = threading.Lock()
        self._available = float(self.rate or 0)
        self._last = _time.monotonic()

    def acquire(self, n: int) -> None:
        if self.rate is None:
            return
        with self._lock:
            now = _time.monotonic()
            self._available = min(float(self.rate), self._available + (now - self._last) * self.rate)
            self._last = now
            self._available -= n
            wait = -self._available / self.rate if self._available < 0 else 0.0
        if wait > 0:
            _time.sleep(wait)


class _Metrics:
    def __init__(self, registry: Any) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.copy_requests = Counter("RemoteCopyRequestsPerSec", "Segment copies attempted", registry=r)
        self.copy_bytes = Counter("RemoteCopyBytesPerSec", "Bytes copied to the remote tier", registry=r)
        self.copy_errors = Counter("RemoteCopyErrorsPerSec", "Failed segment copies", registry=r)
        self.fetch_requests = Counter("RemoteFetchRequestsPerSec", "Reads served by the remote tier", registry=r)
        self.fetch_bytes = Counter("RemoteFetchBytesPerSec", "Bytes read from the remote tier", registry=r)
        self.fetch_errors = Counter("RemoteFetchErrorsPerSec", "Failed remote reads", registry=r)
        self.delete_requests = Counter("RemoteDeleteRequestsPerSec", "Remote segments deleted", registry=r)
        self.delete_errors = Counter("RemoteDeleteErrorsPerSec", "Failed remote deletes", registry=r)
        labels = ["topic", "partition"]
        self.copy_lag_bytes = Gauge("RemoteCopyLagBytes", "Bytes eligible for copy not yet copied", labels, registry=r)
        self.copy_lag_segments = Gauge("RemoteCopyLagSegments", "Segments eligible for copy not yet copied", labels, registry=r)
        self.delete_lag_bytes = Gauge("RemoteDeleteLagBytes", "Bytes of remote segments pending deletion", labels, registry=r)
        self.delete_lag_segments = Gauge("RemoteDeleteLagSegments", "Remote segments pending deletion", labels, registry=r)
        self.log_size_bytes = Gauge("RemoteLogSizeBytes", "Bytes held in the remote tier", labels, registry=r)


class RemoteLogManager:
    """See the module docstring. Implements ``local.remote.RemoteTier``."""

    def __init__(
        self,
        rsm: RemoteStorageManager,
        metadata_store: RemoteLogMetadataStore,
        index_cache: RemoteIndexCache,
        *,
        chunk_cache: ChunkCache | None = None,
        broker_id: int = 0,
        custom_metadata_max_bytes: int = 128,
        copy_max_bytes_per_second: int | None = None,
        fetch_max_bytes_per_second: int | None = None,
        copier_threads: int = 4,
        time: Time = SYSTEM_TIME,
        registry: Any = None,
    ) -> None:
        self.rsm = rsm
        self.metadata = metadata_store
        self.index_cache = index_cache
        self.chunk_cache = chunk_cache
        self.broker_id = broker_id
        self.custom_metadata_max_bytes = custom_metadata_max_bytes
        self.time = time
        self._copy_quota = _RateLimiter(copy_max_bytes_per_second, time)
        self._fetch_quota = _RateLimiter(fetch_max_bytes_per_second, time)
        self._copier_threads = max(1, copier_threads)
        self._partition_locks: dict[TopicIdPartition, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._read_ahead: dict[TopicIdPartition, Any] = {}  # per partition: the segment whose successor was read ahead
        # Per partition: the offsets its recent readers will fetch next, each with the segment and position it
        # starts at (a read from one of them is sequential).
        self._readers: dict[TopicIdPartition, OrderedDict[int, tuple[RemoteLogSegmentId, int]]] = {}
        self._readers_lock = threading.Lock()
        self._cleaned_stale: set[TopicIdPartition] = set()
        self.metrics = _Metrics(registry)
        self._closed = False

    @classmethod
    def from_log_config(cls, config: LogConfig) -> RemoteLogManager:
        """Build the plugin, metadata store and caches from broker configuration (what LogManager calls)."""
        from tiered.backends import load_rsm
        from tiered.cache.index_cache import RemoteIndexCache
        from tiered.metadata import RemoteLogMetadataStore

        rsm = load_rsm(config.remote_log_storage_manager_class_name, config.rsm_config)
        log_dir = Path(config.log_dirs[0])
        index_cache = RemoteIndexCache(
            log_dir, rsm.fetch_index, max_size_bytes=config.remote_log_index_file_cache_total_size_bytes
        )
        chunk_cache = None
        try:
            from tiered.cache.chunk_cache import ChunkCache

            cache_dir = getattr(config, "remote_log_segment_cache_dir", None) or log_dir / "remote-log-segment-cache"
            chunk_cache = ChunkCache(
                cache_dir,
                chunk_size=config.remote_log_segment_cache_chunk_size_bytes,
                size_limit=config.remote_log_segment_cache_total_size_bytes,
                prefetch_chunks=config.remote_log_segment_cache_prefetch_chunks,
            )
        except ImportError as exc:  # diskcache is in the s3 extra
            logger.warning("remote segment cache disabled (%s): pip install 'tiered[s3]' to enable it", exc)
        return cls(
            rsm,
            RemoteLogMetadataStore.for_rsm(rsm),
            index_cache,
            chunk_cache=chunk_cache,
            broker_id=config.broker_id,
            custom_metadata_max_bytes=config.remote_log_metadata_custom_metadata_max_bytes,
            copy_max_bytes_per_second=config.remote_log_manager_copy_max_bytes_per_second,
            fetch_max_bytes_per_second=config.remote_log_manager_fetch_max_bytes_per_second,
            copier_threads=getattr(config, "remote_log_manager_copier_thread_pool_size", 4) or 4,
        )

    # ------------------------------------------------------------------------------------------------------
    # Identity

    @staticmethod
    def topic_id_partition(log: Log) -> TopicIdPartition:
        if log.topic_id is None:
            raise RemoteStorageError(f"log {log.name} has no topic id: cannot address its remote segments", retriable=False)
        return TopicIdPartition(log.topic_id, log.topic, log.partition)

    def _partition_lock(self, tip: TopicIdPartition) -> threading.Lock:
        with self._locks_lock:
            return self._partition_locks.setdefault(tip, threading.Lock())

    def finished_segments(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """FINISHED copies of a partition, ordered by start offset."""
        return [
            md for md in self.metadata.list_remote_log_segments(tip)
            if md.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ]

    # ------------------------------------------------------------------------------------------------------
    # RemoteTier protocol

    def highest_offset_in_remote_storage(self, log: Log) -> int:
        segs = self.finished_segments(self.topic_id_partition(log))
        return max((md.end_offset for md in segs), default=-1)

    def remote_log_size_bytes(self, log: Log) -> int:
        segs = self.finished_segments(self.topic_id_partition(log))
        return sum(md.segment_size_in_bytes for md in segs if md.end_offset < log.local_log_start_offset)

    def read(
        self, log: Log, fetch_offset: int, max_bytes: int, isolation: FetchIsolation, min_one_message: bool
    ) -> FetchDataInfo:
        """Batches from ``fetch_offset`` out of the remote segment holding it (or the next one that has data)."""
        tip = self.topic_id_partition(log)
        self.metrics.fetch_requests.inc()
        try:
            offset = fetch_offset
            resumed = self._resume(tip, fetch_offset)  # where an earlier read of this reader ended, if any
            while True:
                md = self._segment_for_offset(log, tip, offset)
                if md is None:
                    return FetchDataInfo(LogOffsetMetadata(fetch_offset, -1, -1), MemoryRecords(b""))
                position = None
                if resumed is not None and resumed[0] == md.remote_log_segment_id:
                    position = resumed[1]
                got = self._read_segment(md, offset, max_bytes, min_one_message, position)
                data = got.data
                if data:
                    self._remember(tip, got.next_offset, md.remote_log_segment_id, got.end)
                    if resumed is not None and self._near_the_end(md, got.end):
                        self._read_ahead_next_segment(log, tip, md)
                    self.metrics.fetch_bytes.inc(len(data))
                    aborted = None
                    if isolation is FetchIsolation.TXN_COMMITTED:
                        aborted = self._aborted_transactions(log, tip, md, fetch_offset, data)
                    return FetchDataInfo(LogOffsetMetadata(fetch_offset, -1, -1), MemoryRecords(data), False, aborted)
                offset = md.end_offset + 1  # nothing at or after the offset here: the next segment
                if offset >= log.local_log_start_offset:
                    return log.read(offset, max_bytes, isolation, min_one_message)
        except Exception:
            self.metrics.fetch_errors.inc()
            raise

    def _resume(self, tip: TopicIdPartition, fetch_offset: int) -> tuple[RemoteLogSegmentId, int] | None:
        """The segment and position where an earlier read ended, when ``fetch_offset`` is where it ended: the read
        carries on from there without an index lookup (a sequential consumer never needs a segment's offset
        index), and only such readers get the next segment read ahead, not a random read near a segment's end."""
        with self._readers_lock:
            expected = self._readers.get(tip)
            return None if expected is None else expected.pop(fetch_offset, None)

    def _remember(self, tip: TopicIdPartition, next_offset: int, segment_id: RemoteLogSegmentId, end: int) -> None:
        """Where a read ended: the next read from ``next_offset`` starts at position ``end`` of ``segment_id``."""
        with self._readers_lock:
            expected = self._readers.get(tip)
            if expected is None:
                expected = self._readers[tip] = OrderedDict()
            expected[next_offset] = (segment_id, end)
            if len(expected) > _READERS_PER_PARTITION:
                expected.popitem(last=False)

    def _near_the_end(self, md: RemoteLogSegmentMetadata, end_position: int) -> bool:
        """Whether a read that ended at ``end_position`` of ``md`` is within the chunk cache's read-ahead of its end."""
        size = _object_size(md)
        if self.chunk_cache is None or size is None:
            return False
        return end_position + self.chunk_cache.chunk_size * max(1, self.chunk_cache.prefetch_chunks) >= size

    def _segment_for_offset(self, log: Log, tip: TopicIdPartition, offset: int) -> RemoteLogSegmentMetadata | None:
        epoch = log.leader_epoch_cache.epoch_for_offset(offset)
        md = self.metadata.remote_log_segment_metadata(tip, offset, epoch) if epoch is not None else None
        if md is None:
            # No epoch lineage (e.g. a partition written without epochs): fall back to the offset alone.
            for cand in self.finished_segments(tip):
                if cand.start_offset <= offset <= cand.end_offset:
                    return cand
                if cand.start_offset > offset:
                    return cand
        return md

    def _fetcher(self, md: RemoteLogSegmentMetadata) -> Callable[[int, int], bytes]:
        def fetcher(a: int, b: int) -> bytes:
            with self.rsm.fetch_log_segment(md, a, b) as stream:
                return stream.read()

        return fetcher

    def _opener(self, md: RemoteLogSegmentMetadata) -> Callable[[int, int | None], IO[bytes]] | None:
        """A streaming fetch of ``md``'s ``.log`` for the chunk cache, when the plugin's fetches stream."""
        if not getattr(self.rsm, "fetch_streams", False):
            return None

        def opener(a: int, b: int | None) -> IO[bytes]:
            return self.rsm.fetch_log_segment(md, a, b)

        return opener

    @staticmethod
    def _chunk_key(md: RemoteLogSegmentMetadata) -> str:
        return _chunk_key(md.remote_log_segment_id)

    def _fetch_range(self, md: RemoteLogSegmentMetadata, start: int, end_inclusive: int) -> bytes | memoryview:
        """Bytes [start, end_inclusive] of a remote .log (shorter at the object's end), via the chunk cache."""
        self._fetch_quota.acquire(end_inclusive - start + 1)
        if self.chunk_cache is not None:
            return self.chunk_cache.read(
                self._chunk_key(md), _object_size(md), start, end_inclusive, self._fetcher(md), self._opener(md)
            )
        return self._fetcher(md)(start, end_inclusive)

    def _read_ahead_next_segment(self, log: Log, tip: TopicIdPartition, md: RemoteLogSegmentMetadata) -> None:
        """When a sequential reader gets within the chunk cache's read-ahead of a segment's end, start fetching
        the next segment's first chunks (once per segment and partition); it reads that segment from its start,
        which needs no index. Without it the reader stalls at every segment boundary on a download; started any
        earlier, it competes with the chunks of the segment being read."""
        segment_id = md.remote_log_segment_id
        if self._read_ahead.get(tip) == segment_id:
            return
        self._read_ahead[tip] = segment_id
        following = self._segment_for_offset(log, tip, md.end_offset + 1)
        if following is None or following.remote_log_segment_id == segment_id:
            return
        if self.chunk_cache is not None:
            self.chunk_cache.prefetch(
                self._chunk_key(following), 0, self._fetcher(following), _object_size(following), self._opener(following)
            )

    def _read_segment(
        self, md: RemoteLogSegmentMetadata, offset: int, max_bytes: int, min_one_message: bool,
        position: int | None = None,
    ) -> _SegmentRead:
        """The whole batches of ``md`` from the one holding ``offset``, up to ``max_bytes`` (at least one when
        ``min_one_message``): a view into the cached chunk when they lie in one, so a sequential consumer's read
        copies nothing. Only batch headers are parsed: the index is sparse, so the batches before ``offset``
        are skipped by their offsets and lengths. ``position``, when known (where the reader's previous read
        ended), is where to start instead of the index's answer."""
        if position is None:
            # From the start when the offset is the segment's first (or below it): no index needed.
            position = 0 if offset <= md.start_offset else self.index_cache.lookup_offset(md, offset)
        want = max(max_bytes, 1)
        last = position + want + _READ_SLACK - 1
        if self.chunk_cache is not None and last // self.chunk_cache.chunk_size == position // self.chunk_cache.chunk_size:
            # To the end of the chunk: a view of it costs nothing more, and saves a second read when the batches
            # before the offset (the index is sparse) take up the slack.
            last = (last // self.chunk_cache.chunk_size + 1) * self.chunk_cache.chunk_size - 1
        data: bytes | memoryview = self._fetch_range(md, position, last)

        def extend(upto: int) -> bytes | memoryview:
            """``data`` with at least ``upto`` bytes when the object has them (a batch straddling the read)."""
            if len(data) >= upto:
                return data
            extra = self._fetch_range(md, position + len(data), position + upto + _READ_SLACK - 1)
            return b"".join((data, extra)) if extra else data

        pos = 0
        while True:  # skip the batches that end before the offset
            if len(data) - pos < _LAST_OFFSET_DELTA_END:
                data = extend(pos + _LAST_OFFSET_DELTA_END)
                if len(data) - pos < MAGIC_OFFSET + 1:
                    return _NOTHING
            length = _I32.unpack_from(data, pos + LENGTH_OFFSET)[0]
            if length < _LAST_OFFSET_DELTA_END - LOG_OVERHEAD:
                raise CorruptRecordError(
                    f"remote segment {md.remote_log_segment_id} holds a batch of length {length} at position "
                    f"{position + pos}", position=position + pos)
            if data[pos + MAGIC_OFFSET] >= MAGIC_V2 and len(data) - pos < _LAST_OFFSET_DELTA_END:
                return _NOTHING  # the object ends inside a batch header
            if _last_offset(data, pos) >= offset:
                break
            pos += length + LOG_OVERHEAD
        start = end = pos
        next_offset = offset
        while True:  # then whole batches up to max_bytes
            if len(data) - end < LOG_OVERHEAD:
                data = extend(end + LOG_OVERHEAD)
                if len(data) - end < LOG_OVERHEAD:
                    break
            size = _I32.unpack_from(data, end + LENGTH_OFFSET)[0] + LOG_OVERHEAD
            fits = end - start + size <= max_bytes or (end == start and min_one_message)
            if not fits:
                break
            if end + size > len(data):
                data = extend(end + size)
                if end + size > len(data):
                    break  # the object ends inside this batch
            next_offset = _last_offset(data, end) + 1
            end += size
        return _SegmentRead(memoryview(data)[start:end], position + end, next_offset)

    def _aborted_transactions(
        self, log: Log, tip: TopicIdPartition, md: RemoteLogSegmentMetadata, fetch_offset: int, data: bytes | memoryview
    ) -> list[Any]:
        batches = list(MemoryRecords(data).batches())
        upper = batches[-1].last_offset + 1 if batches else fetch_offset
        aborted: list[Any] = []
        for seg in self.finished_segments(tip):
            if seg.end_offset < md.start_offset:
                continue
            result = self.index_cache.collect_aborted_txns(seg, fetch_offset, upper)
            aborted.extend(result.aborted_txns)
            if result.is_complete or seg.end_offset + 1 >= upper:
                return aborted
        # Remote segments did not complete the search: the local txn indexes carry on.
        aborted.extend(log.collect_aborted_transactions(fetch_offset, upper))
        return aborted

    def offset_for_timestamp(self, log: Log, timestamp: int) -> TimestampAndOffset | None:
        tip = self.topic_id_partition(log)
        for md in self.finished_segments(tip):
            if md.max_timestamp_ms < timestamp or md.end_offset < log.log_start_offset:
                continue
            start = max(md.start_offset, log.log_start_offset)
            position = self.index_cache.lookup_timestamp(md, timestamp, start)
            found = self._scan_for_timestamp(md, position, timestamp, start)
            if found is not None:
                return found
        return None

    def _scan_for_timestamp(
        self, md: RemoteLogSegmentMetadata, position: int, timestamp: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        offset = starting_offset
        while offset <= md.end_offset:
            data = self._read_segment(md, offset, 1024 * 1024, True).data
            if not data:
                return None
            for batch in MemoryRecords(data).batches():
                if batch.max_timestamp >= timestamp and batch.last_offset >= starting_offset:
                    for rec in batch.records():
                        if rec.timestamp >= timestamp and rec.offset >= starting_offset:
                            return TimestampAndOffset(rec.timestamp, rec.offset, batch.partition_leader_epoch)
                offset = batch.last_offset + 1
        del position
        return None

    # ------------------------------------------------------------------------------------------------------
    # Copy

    def candidate_segments(self, log: Log) -> list[tuple[LogSegment, LogSegment]]:
        """Non-active segments (with the segment after each) eligible for copy, oldest first."""
        highest = self.highest_offset_in_remote_storage(log)
        from_offset = max(highest + 1, log.log_start_offset)
        lso = log.last_stable_offset
        segs = list(log.segments.values())
        out = []
        for seg, nxt in itertools.pairwise(segs):
            if nxt.base_offset <= from_offset:
                continue  # already copied (or below the log start)
            if nxt.base_offset > lso:
                break
            out.append((seg, nxt))
        return out

    def copy_log_segments(self, log: Log) -> PassResult:
        """Copy every eligible segment of ``log`` in order; stops at the first failure (retried next pass)."""
        result = PassResult()
        if getattr(log.config, "remote_log_copy_disable", False):
            return result
        tip = self.topic_id_partition(log)
        with self._partition_lock(tip):
            result.stale_copies_cleaned += self._cleanup_stale_copies(tip)
            candidates = self.candidate_segments(log)
            self.metrics.copy_lag_segments.labels(log.topic, log.partition).set(len(candidates))
            self.metrics.copy_lag_bytes.labels(log.topic, log.partition).set(sum(s.size for s, _ in candidates))
            for seg, nxt in candidates:
                try:
                    self._copy_segment(log, tip, seg, nxt)
                except Exception:
                    result.copy_errors += 1
                    logger.exception("copy of segment %d of %s to the remote tier failed", seg.base_offset, log.name)
                    break
                result.segments_copied += 1
                result.bytes_copied += seg.size
            remaining = self.candidate_segments(log)
            self.metrics.copy_lag_segments.labels(log.topic, log.partition).set(len(remaining))
            self.metrics.copy_lag_bytes.labels(log.topic, log.partition).set(sum(s.size for s, _ in remaining))
        return result

    def _segment_leader_epochs(self, log: Log, start: int, next_offset: int) -> dict[int, int]:
        entries = [e for e in log.leader_epoch_cache.epoch_entries() if e.start_offset < next_offset]
        out: dict[int, int] = {}
        for i, e in enumerate(entries):
            end = entries[i + 1].start_offset if i + 1 < len(entries) else next_offset
            if end <= start:
                continue
            out[e.epoch] = max(e.start_offset, start)
        if not out:
            out[log.latest_epoch or 0] = start
        return out

    def _copy_segment(self, log: Log, tip: TopicIdPartition, seg: LogSegment, nxt: LogSegment) -> None:
        self.metrics.copy_requests.inc()
        end_offset = nxt.base_offset - 1
        segment_id = RemoteLogSegmentId.generate_new(tip)
        md = RemoteLogSegmentMetadata(
            segment_id,
            seg.base_offset,
            end_offset,
            seg.max_timestamp_so_far,
            self.broker_id,
            self.time.milliseconds(),
            seg.size,
            self._segment_leader_epochs(log, seg.base_offset, nxt.base_offset),
        )
        self.metadata.add_remote_log_segment_metadata(md)
        self._copy_quota.acquire(seg.size)
        with tempfile.TemporaryDirectory(prefix="tiered-copy-") as tmp:
            data = self._segment_data(log, seg, nxt, Path(tmp))
            try:
                custom = self.rsm.copy_log_segment_data(md, data)
                if custom is not None and len(custom) > self.custom_metadata_max_bytes:
                    raise CustomMetadataSizeExceededError(
                        f"custom metadata of {len(custom)} bytes for {segment_id} exceeds "
                        f"remote.log.metadata.custom.metadata.max.bytes={self.custom_metadata_max_bytes}",
                        size=len(custom),
                    )
            except Exception:
                self.metrics.copy_errors.inc()
                self._delete_remote(md, reason="failed copy")
                raise
        self.metadata.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                segment_id, self.time.milliseconds(), custom, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, self.broker_id
            )
        )
        self.metrics.copy_bytes.inc(seg.size)
        logger.info("copied segment %d-%d of %s to the remote tier as %s", seg.base_offset, end_offset, log.name, segment_id)

    def _segment_data(self, log: Log, seg: LogSegment, nxt: LogSegment, tmp: Path) -> LogSegmentData:
        seg.flush()
        snapshot = log.producer_state_manager.fetch_snapshot(nxt.base_offset)
        if snapshot is None:
            # Older segments may have lost their snapshot to retention; an empty one keeps the copy going.
            logger.warning("no producer snapshot at %d for %s: uploading an empty one", nxt.base_offset, log.name)
            snapshot = filenames.producer_snapshot_file(tmp, nxt.base_offset)
            snapshot.write_bytes(EMPTY_PRODUCER_SNAPSHOT)
        from local.checkpoint import encode_leader_epoch_checkpoint

        entries = [e for e in log.leader_epoch_cache.epoch_entries() if e.start_offset < nxt.base_offset]
        txn_path = seg.txn_index.path
        return LogSegmentData(
            log_segment=seg.log.path,
            offset_index=seg.offset_index.path,
            time_index=seg.time_index.path,
            transaction_index=txn_path if txn_path.exists() and txn_path.stat().st_size > 0 else None,
            producer_snapshot_index=snapshot,
            leader_epoch_index=encode_leader_epoch_checkpoint(entries),
        )

    def _cleanup_stale_copies(self, tip: TopicIdPartition) -> int:
        """A COPY_SEGMENT_STARTED that never finished (a crash mid-copy): delete its objects once per start."""
        if tip in self._cleaned_stale:
            return 0
        stale = self.metadata.find_stale_copies(tip)
        for md in stale:
            self._delete_remote(md, reason="stale copy left by a crash")
        self._cleaned_stale.add(tip)
        return len(stale)

    def _delete_remote(self, md: RemoteLogSegmentMetadata, reason: str) -> None:
        sid = md.remote_log_segment_id
        logger.info("deleting remote segment %s (%d-%d): %s", sid, md.start_offset, md.end_offset, reason)
        self.metadata.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(sid, self.time.milliseconds(), None, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, self.broker_id)
        )
        try:
            self.rsm.delete_log_segment_data(md)
        except Exception:
            self.metrics.delete_errors.inc()
            raise
        self.metadata.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(sid, self.time.milliseconds(), None, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, self.broker_id)
        )
        self.index_cache.remove(sid.id)
        if self.chunk_cache is not None:
            self.chunk_cache.invalidate(f"{sid.topic_id_partition.topic_id}/{sid.id}.log")
        self.metrics.delete_requests.inc()

    # ------------------------------------------------------------------------------------------------------
    # Remote retention

    def cleanup_remote_segments(self, log: Log) -> int:
        """Delete remote segments breaching retention, the log start offset or the epoch lineage."""
        from local.log import LogStartOffsetIncrementReason

        tip = self.topic_id_partition(log)
        config = log.config
        with self._partition_lock(tip):
            segs = self.finished_segments(tip)
            if not segs:
                return 0
            now = self.time.milliseconds()
            lineage = {e.epoch for e in log.leader_epoch_cache.epoch_entries()}
            retention_ms = int(config.retention_ms)
            retention_bytes = int(config.retention_bytes)
            local_only = sum(s.size for s in log.segments.values() if s.base_offset > segs[-1].end_offset)
            breach_bytes = (sum(md.segment_size_in_bytes for md in segs) + local_only - retention_bytes) if retention_bytes >= 0 else -1
            doomed: list[RemoteLogSegmentMetadata] = []
            for md in segs:
                reason = None
                if md.end_offset < log.log_start_offset:
                    reason = "below the log start offset"
                elif lineage and not set(md.segment_leader_epochs) & lineage:
                    reason = "outside the leader-epoch lineage"
                elif retention_ms >= 0 and now - md.max_timestamp_ms >= retention_ms:
                    # Kafka's rule for the remote tier: maxTimestampMs <= now - retention.ms (local is a strict >)
                    reason = "retention.ms breach"
                elif breach_bytes >= 0 and breach_bytes - md.segment_size_in_bytes >= 0:
                    reason = "retention.bytes breach"
                if reason is None:
                    break
                if breach_bytes >= 0:
                    breach_bytes -= md.segment_size_in_bytes
                doomed.append(md)
            self.metrics.delete_lag_segments.labels(log.topic, log.partition).set(len(doomed))
            self.metrics.delete_lag_bytes.labels(log.topic, log.partition).set(sum(m.segment_size_in_bytes for m in doomed))
            for md in doomed:
                self._delete_remote(md, reason="retention")
            if doomed:
                new_start = doomed[-1].end_offset + 1
                log.maybe_increment_log_start_offset(new_start, LogStartOffsetIncrementReason.SEGMENT_DELETION)
            remaining = self.finished_segments(tip)
            self.metrics.log_size_bytes.labels(log.topic, log.partition).set(sum(m.segment_size_in_bytes for m in remaining))
            self.metrics.delete_lag_segments.labels(log.topic, log.partition).set(0)
            self.metrics.delete_lag_bytes.labels(log.topic, log.partition).set(0)
            return len(doomed)

    # ------------------------------------------------------------------------------------------------------
    # Passes

    def run_once(self, logs: Iterable[Log]) -> PassResult:
        """One pass of the copy task then the expiration task over every remote-enabled log."""
        total = PassResult()
        eligible = [log for log in logs if getattr(log.config, "remote_storage_enable", False)]

        def one(log: Log) -> PassResult:
            res = self.copy_log_segments(log)
            res.segments_deleted += self.cleanup_remote_segments(log)
            return res

        with ThreadPoolExecutor(self._copier_threads, thread_name_prefix="remote-log-copier") as pool:
            for res in pool.map(one, eligible):
                total.segments_copied += res.segments_copied
                total.bytes_copied += res.bytes_copied
                total.segments_deleted += res.segments_deleted
                total.copy_errors += res.copy_errors
                total.stale_copies_cleaned += res.stale_copies_cleaned
        return total

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.index_cache.close()
        if self.chunk_cache is not None:
            self.chunk_cache.close()
        self.rsm.close()


def _object_size(md: RemoteLogSegmentMetadata) -> int | None:
    """The size of the segment's remote ``.log``, when the metadata knows it: ``segment_size_in_bytes`` is an
    int32, clamped at 2^31-1 for larger segments, and a clamped size is not a size (None: the chunk cache then
    learns the end from a short chunk)."""
    size = md.segment_size_in_bytes
    return size if 0 <= size < INT32_MAX else None


@functools.lru_cache(maxsize=4096)
def _chunk_key(segment_id: RemoteLogSegmentId) -> str:
    """The chunk cache's name for a segment's ``.log`` (memoized: every read asks, and formatting UUIDs costs)."""
    return f"{segment_id.topic_id_partition.topic_id}/{segment_id.id}.log"
