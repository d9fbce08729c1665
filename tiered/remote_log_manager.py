"""RemoteLogManager: copies closed segments to the remote tier, expires them, and serves reads from it.

Kafka's ``RemoteLogManager`` (its copy task, expiration task and remote reads) for one node, in our words.
It implements :class:`local.remote.RemoteTier`, so a :class:`local.log.Log` consults it for offsets below its
local log start offset, and local retention deletes a segment only once its remote copy is FINISHED.

Copy (per partition, in offset order): candidates are non-active segments whose next segment's base offset is at
or below the last stable offset, from the highest copied offset + 1. Each attempt gets a new segment id;
metadata COPY_SEGMENT_STARTED is recorded first, then the objects are uploaded, then COPY_SEGMENT_FINISHED, which
records the crc32c checksums of every object (computed from the local files, see :mod:`tiered.checksums`; every
fetch of a segment that has them is verified). A failed attempt deletes what it uploaded (DELETE_SEGMENT_STARTED
-> DELETE_SEGMENT_FINISHED). A STARTED copy found at start (a crash mid-copy) is cleaned up the same way, and so
is, at the next pass, a failed attempt whose cleanup failed too (an outage): as Kafka's copy task deletes a failed
copy's data, no orphan waits for a restart.

Remote retention deletes segments past ``retention.ms`` (by max timestamp), past ``retention.bytes`` over the
whole log, below the log start offset, or outside the leader-epoch lineage. Kafka's order: the log start offset
moves first (the LogManager checkpoints it through the log's hook), then the segments below it are deleted, so a
read racing the deletion sees the new log start and raises ``OffsetOutOfRangeError`` (see ``Log.read``).

Scheduling (Kafka's RLMCopyTask / RLMExpirationTask, :mod:`tiered.rlm_tasks`): a LogManager with the remote tier
calls :meth:`RemoteLogManager.start_tasks` when its scheduler starts; each remote-enabled partition then gets a
copy task and an expiration task every ``remote.log.manager.task.interval.ms`` on the copier and expiration pools
(``remote.log.manager.copier.thread.pool.size`` / ``remote.log.manager.expiration.thread.pool.size``); copy and
expiration of one partition hold separate locks. ``tiered offload`` runs the same tasks once
(:meth:`RemoteLogManager.run_once`). With ``remote.log.manager.copier.process.enable`` the plugin's copy runs in a
child process (:mod:`tiered.copier_process`, which says why).
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
from local.records.constants import INT32_MAX
from local.records.walk import checked_batch_size
from local.records.walk import last_offset as _last_offset
from local.scheduler import SYSTEM_TIME, Time
from tiered.checksums import (
    ChecksumVerifier,
    compute_segment_checksums,
    default_chunk_bytes,
)
from tiered.errors import CustomMetadataSizeExceededError, RemoteResourceNotFoundError, RemoteStorageError
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
    from tiered.copier_process import ProcessCopier
    from tiered.rlmm import RemoteLogMetadataManager

logger = logging.getLogger(__name__)

EMPTY_PRODUCER_SNAPSHOT = bytes.fromhex("000148674bc700000000")
_READ_SLACK = 64 * 1024  # read past max_bytes a little so a batch straddling the limit can be completed
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_I32 = struct.Struct(">i")
_LAST_OFFSET_DELTA_END = LAST_OFFSET_DELTA_OFFSET + 4
_READERS_PER_PARTITION = 16  # sequential readers of one partition told apart (the offsets they fetch next)


class _SegmentRead(NamedTuple):
    """Whole batches read from a remote segment: the bytes, the position after them, the offset after them and
    the position of the first (``found`` False: no batch of the segment holds the offset or a later one)."""

    data: bytes | memoryview
    end: int
    next_offset: int
    start: int = 0
    found: bool = True


_NOTHING = _SegmentRead(b"", 0, -1, 0, False)


def _allows_gaps(log: Log) -> bool:
    """Whether offsets may be missing from the log (a compacted topic's, as Kafka's cleaner leaves them): only
    then may a read answer with a batch after the offset asked for, or go on to the next segment."""
    return "compact" in str(getattr(log.config, "cleanup_policy", ""))


def _base_offset(data: bytes | memoryview, pos: int) -> int:
    """The base offset of the v2 batch at ``pos`` (a legacy entry's header holds only its last offset: that)."""
    return int(_OFFSET_AND_LENGTH.unpack_from(data, pos)[0])


@dataclass
class PassResult:
    """What one pass of the copy and expiration tasks did."""

    segments_copied: int = 0
    bytes_copied: int = 0
    segments_deleted: int = 0
    copy_errors: int = 0
    stale_copies_cleaned: int = 0

    def add(self, other: PassResult) -> None:
        self.segments_copied += other.segments_copied
        self.bytes_copied += other.bytes_copied
        self.segments_deleted += other.segments_deleted
        self.copy_errors += other.copy_errors
        self.stale_copies_cleaned += other.stale_copies_cleaned


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
        metadata_store: RemoteLogMetadataManager,
        index_cache: RemoteIndexCache,
        *,
        chunk_cache: ChunkCache | None = None,
        broker_id: int = 0,
        custom_metadata_max_bytes: int = 128,
        copy_max_bytes_per_second: int | None = None,
        fetch_max_bytes_per_second: int | None = None,
        copier_threads: int = 10,
        expiration_threads: int = 10,
        task_interval_ms: int = 30_000,
        time: Time = SYSTEM_TIME,
        registry: Any = None,
        checksum_chunk_bytes: int | None = None,
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
        self._expiration_threads = max(1, expiration_threads)
        self.task_interval_ms = task_interval_ms
        self._task_scheduler: Any = None  # tiered.rlm_tasks.RLMTaskScheduler while the tasks run
        # Set by request_stop/stop_tasks: a copy task ends after the segment in flight (Kafka's isCancelled() check
        # between segments), so a stop waits for one segment copy per partition, not for the whole backlog.
        self._stopping = threading.Event()
        self._tasks_lock = threading.Lock()
        self.task_totals = PassResult()  # what the scheduled tasks did since start (tiered run reports it)
        self._partition_locks: dict[TopicIdPartition, threading.Lock] = {}
        # Expiration has its own per-partition lock, as Kafka's RLMExpirationTask runs apart from the copy task: a
        # remote deletion pass (seconds under load) must not hold the copy of the same partition back.
        self._expiration_locks: dict[TopicIdPartition, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._read_ahead: dict[TopicIdPartition, Any] = {}  # per partition: the segment whose successor was read ahead
        # Per partition: the offsets its recent readers will fetch next, each with the segment and position it
        # starts at (a read from one of them is sequential).
        self._readers: dict[TopicIdPartition, OrderedDict[int, tuple[RemoteLogSegmentId, int]]] = {}
        self._readers_lock = threading.Lock()
        self._cleaned_stale: set[TopicIdPartition] = set()
        # Per partition: copy attempts of this process that failed and whose cleanup failed too (an outage), by
        # segment id; the next pass deletes what they left.
        self._failed_copies: dict[TopicIdPartition, dict[Any, RemoteLogSegmentMetadata]] = {}
        # crc32c chunk size of new copies' checksums (tiered.checksums); verifies fetches of segments that have them.
        self.checksum_chunk_bytes = checksum_chunk_bytes or default_chunk_bytes(
            chunk_cache.chunk_size if chunk_cache is not None else None
        )
        self.checksums = ChecksumVerifier(rsm, metadata_store.segment_checksums)
        if getattr(index_cache, "verifier", False) is None:
            index_cache.verifier = self.checksums  # downloaded (and reopened) indexes are checked too
        self.metrics = _Metrics(registry)
        self._closed = False
        # The plugin's copy_log_segment_data, or a child process running it (tiered.copier_process).
        self._copy_data: Callable[[RemoteLogSegmentMetadata, LogSegmentData], bytes | None] = rsm.copy_log_segment_data
        self._process_copier: Any = None

    def copy_in_child_process(self, class_name: str, props: dict[str, str]) -> ProcessCopier:
        """Run the plugin's ``copy_log_segment_data`` in a child process built from ``class_name`` and ``props``
        (see :mod:`tiered.copier_process` for why: the copy no longer waits for the GIL once per system call).
        Returns the copier, which can write the copy's metadata events too (``ChildWritingStore``)."""
        from tiered.copier_process import ProcessCopier

        self._process_copier = ProcessCopier(class_name, props, self.rsm.copy_log_segment_data)
        self._copy_data = self._process_copier
        return self._process_copier

    @classmethod
    def from_log_config(
        cls,
        config: LogConfig,
        cache_root: Path | None = None,
        *,
        index_cache_dir: Path | None = None,
        segment_cache_dir: Path | None = None,
    ) -> RemoteLogManager:
        """Build the plugin, metadata manager and caches from broker configuration: the composition root's
        :func:`tiered.composition.build_remote_tier`, which says where each part comes from."""
        from tiered.composition import build_remote_tier

        return build_remote_tier(config, cache_root, index_cache_dir=index_cache_dir, segment_cache_dir=segment_cache_dir)

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

    def _expiration_lock(self, tip: TopicIdPartition) -> threading.Lock:
        with self._locks_lock:
            return self._expiration_locks.setdefault(tip, threading.Lock())

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
        """Batches from the one holding ``fetch_offset``, out of the remote segment holding it.

        Never skips: an offset no remote segment holds raises (``OffsetOutOfRangeError`` when retention removed it
        meanwhile, else ``RemoteResourceNotFoundError``), and a short object, a damaged batch header or a batch
        after the offset (a gap) raises ``CorruptRecordError`` naming the segment and the position. Only a
        compacted log may have gaps: there a segment without the offset leads to the next one, as in Kafka. The
        answer's ``records`` know their segment and position: a corrupt batch found by their ``batches()`` (CRC
        checked) names them too.
        """
        tip = self.topic_id_partition(log)
        self.metrics.fetch_requests.inc()
        try:
            offset = fetch_offset
            resumed = self._resume(tip, fetch_offset)  # where an earlier read of this reader ended, if any
            gaps = _allows_gaps(log)
            while True:
                md = self._segment_for_offset(log, tip, offset)
                if md is None:
                    raise self._not_in_remote(log, tip, offset)
                if md.start_offset > offset and not gaps:
                    raise CorruptRecordError(
                        f"offsets {offset}..{md.start_offset - 1} of {log.name} are in no remote segment (the next, "
                        f"{md.remote_log_segment_id}, starts at {md.start_offset}): the remote tier has a gap",
                        offset=offset, segment_id=str(md.remote_log_segment_id))
                position = None
                if resumed is not None and resumed[0] == md.remote_log_segment_id:
                    position = resumed[1]
                got = self._read_segment(md, offset, max_bytes, min_one_message, position, gaps)
                if got.found:
                    data = got.data
                    if data:
                        self._remember(tip, got.next_offset, md.remote_log_segment_id, got.end)
                        if resumed is not None and self._near_the_end(md, got.end):
                            self._read_ahead_next_segment(log, tip, md)
                        self.metrics.fetch_bytes.inc(len(data))
                    aborted = None
                    if isolation is FetchIsolation.TXN_COMMITTED and data:
                        aborted = self._aborted_transactions(log, tip, md, fetch_offset, data)
                    records = MemoryRecords(
                        data, origin=f"remote segment {md.remote_log_segment_id}", position=got.start,
                        context={"segment_id": str(md.remote_log_segment_id)})
                    return FetchDataInfo(LogOffsetMetadata(fetch_offset, -1, -1), records, False, aborted)
                if not gaps and offset <= md.end_offset:
                    raise CorruptRecordError(
                        f"remote segment {md.remote_log_segment_id} ends before offset {offset} (its metadata says "
                        f"it holds {md.start_offset}..{md.end_offset}): the object is short or damaged",
                        offset=offset, segment_id=str(md.remote_log_segment_id))
                offset = max(offset, md.end_offset + 1)  # a compacted segment without the offset: the next one
                if offset >= log.local_log_start_offset:
                    return log.read(offset, max_bytes, isolation, min_one_message)
        except Exception:
            self.metrics.fetch_errors.inc()
            raise

    def _not_in_remote(self, log: Log, tip: TopicIdPartition, offset: int) -> Exception:
        """The error for an offset below the local log start that no remote segment holds."""
        from local.errors import OffsetOutOfRangeError

        if offset < log.log_start_offset:  # retention removed it since the read began
            return OffsetOutOfRangeError(
                f"offset {offset} of {log.name} is below the log start offset {log.log_start_offset}",
                offset=offset, log_start_offset=log.log_start_offset)
        return RemoteResourceNotFoundError(
            f"no remote segment of {tip} holds offset {offset} (log start offset {log.log_start_offset}, local "
            f"log start offset {log.local_log_start_offset}): the remote tier's metadata or objects are missing",
            offset=offset)

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
        """Ranged fetches of ``md``'s ``.log``, verified against its checksums when it has them."""

        def fetcher(a: int, b: int) -> bytes:
            with self.rsm.fetch_log_segment(md, a, b) as stream:
                return stream.read()

        return self.checksums.fetcher(md, fetcher)

    def _opener(self, md: RemoteLogSegmentMetadata) -> Callable[[int, int | None], IO[bytes]] | None:
        """A streaming fetch of ``md``'s ``.log`` for the chunk cache, when the plugin's fetches stream."""
        if not getattr(self.rsm, "fetch_streams", False):
            return None

        def opener(a: int, b: int | None) -> IO[bytes]:
            return self.rsm.fetch_log_segment(md, a, b)

        return self.checksums.opener(md, opener)

    @staticmethod
    def _chunk_key(md: RemoteLogSegmentMetadata) -> str:
        return _chunk_key(md.remote_log_segment_id)

    def read_range(self, md: RemoteLogSegmentMetadata, start: int, end_inclusive: int) -> bytes | memoryview:
        """Bytes [start, end_inclusive] of the remote ``.log`` of ``md`` (shorter at the object's end), through the
        segment cache, checked against the segment's recorded checksums: what a reader that walks batches itself
        (the Spark source) needs, with no broker-side state."""
        return self._fetch_range(md, start, end_inclusive)

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
        position: int | None = None, gaps: bool = False,
    ) -> _SegmentRead:
        """The whole batches of ``md`` from the one holding ``offset``, up to ``max_bytes`` (at least one when
        ``min_one_message``): a view into the cached chunk when they lie in one, so a sequential consumer's read
        copies nothing. Only batch headers are parsed: the index is sparse, so the batches before ``offset``
        are skipped by their offsets and lengths. ``position``, when known (where the reader's previous read
        ended), is where to start instead of the index's answer.

        Raises CorruptRecordError naming the segment and the position when the object ends inside a batch
        before one is returned, is shorter than its metadata says, holds a batch length below a header's, or
        (unless ``gaps``) its first batch from ``offset`` starts after it. ``found`` is False only when the
        object ends cleanly with no batch at or after ``offset``."""
        # A reader resumed where its last read ended: the batch there starts at ``offset`` exactly.
        previous_last = offset - 1 if position is not None else -1
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
        segment_id = md.remote_log_segment_id

        def extend(upto: int) -> bytes | memoryview:
            """``data`` with at least ``upto`` bytes when the object has them (a batch straddling the read)."""
            if len(data) >= upto:
                return data
            extra = self._fetch_range(md, position + len(data), position + upto + _READ_SLACK - 1)
            return b"".join((data, extra)) if extra else data

        def damaged(what: str, at: int) -> CorruptRecordError:
            size = _object_size(md)
            known = f" of {size} bytes" if size is not None else ""
            return CorruptRecordError(
                f"remote segment {segment_id} (object{known}) {what} at position {position + at}",
                segment_id=str(segment_id), position=position + at, offset=offset)

        pos = 0
        if position == 0:
            previous_last = md.start_offset - 1  # the offset before the first batch walked
        while True:  # skip the batches that end before the offset
            if len(data) - pos < _LAST_OFFSET_DELTA_END:
                data = extend(pos + _LAST_OFFSET_DELTA_END)
                if len(data) == pos:  # the object ends here, between batches
                    size = _object_size(md)
                    if size is not None and position + pos < size:
                        raise damaged(f"is short: it ends after {position + pos} bytes, its metadata says {size}", pos)
                    return _NOTHING
                if len(data) - pos < MAGIC_OFFSET + 1:
                    raise damaged("ends inside a batch header", pos)
            length = checked_batch_size(data, pos, position + pos, f"remote segment {segment_id}",
                                        {"segment_id": str(segment_id), "offset": offset}) - LOG_OVERHEAD
            if data[pos + MAGIC_OFFSET] >= MAGIC_V2 and len(data) - pos < _LAST_OFFSET_DELTA_END:
                raise damaged("ends inside a batch header", pos)
            last_offset = _last_offset(data, pos)
            if last_offset >= offset:
                break
            previous_last = last_offset
            pos += length + LOG_OVERHEAD
        if data[pos + MAGIC_OFFSET] >= MAGIC_V2:
            base = _base_offset(data, pos)
            if base <= previous_last:  # base offsets are outside the CRC: a damaged one overlaps the batch before
                raise damaged(f"holds a batch with offsets {base}..{_last_offset(data, pos)} that overlap the "
                              f"offset {previous_last} before it", pos)
            if not gaps and base > offset:
                raise damaged(f"has no batch holding offset {offset}: the batch found starts at offset {base}", pos)
        start = end = pos
        next_offset = offset
        while True:  # then whole batches up to max_bytes
            if len(data) - end < LOG_OVERHEAD:
                data = extend(end + LOG_OVERHEAD)
                if len(data) - end < LOG_OVERHEAD:
                    if end == start and len(data) > end:
                        raise damaged("ends inside a batch header", end)
                    break
            size = _I32.unpack_from(data, end + LENGTH_OFFSET)[0] + LOG_OVERHEAD
            fits = end - start + size <= max_bytes or (end == start and min_one_message)
            if not fits:
                break
            if end + size > len(data):
                data = extend(end + size)
                if end + size > len(data):
                    if end == start:  # nothing whole to return: the object is cut (the next read would be too)
                        raise damaged(f"ends inside a batch of {size} bytes ({len(data) - end} present)", end)
                    break  # the object ends inside this batch: the next read, which starts at it, raises
            batch_last = _last_offset(data, end)
            if batch_last > md.end_offset:  # a base offset (outside the CRC) damaged upwards
                if end == start:
                    raise damaged(f"holds a batch ending at offset {batch_last}, past the segment's end offset "
                                  f"{md.end_offset}", end)
                break  # the batches before it are whole and good: the next read, which starts at it, raises
            next_offset = batch_last + 1
            end += size
        return _SegmentRead(memoryview(data)[start:end], position + end, next_offset, position + start)

    def _aborted_transactions(
        self, log: Log, tip: TopicIdPartition, md: RemoteLogSegmentMetadata, fetch_offset: int, data: bytes | memoryview
    ) -> list[Any]:
        batches = list(MemoryRecords(data).batches(verify=False))  # headers only: the consumer checks the CRCs
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
            found = self._scan_for_timestamp(md, position, timestamp, start, _allows_gaps(log))
            if found is not None:
                return found
        return None

    def _scan_for_timestamp(
        self, md: RemoteLogSegmentMetadata, position: int, timestamp: int, starting_offset: int, gaps: bool = False
    ) -> TimestampAndOffset | None:
        offset = starting_offset
        while offset <= md.end_offset:
            got = self._read_segment(md, offset, 1024 * 1024, True, None, gaps)
            if not got.data:
                return None
            records = MemoryRecords(got.data, origin=f"remote segment {md.remote_log_segment_id}", position=got.start,
                                    context={"segment_id": str(md.remote_log_segment_id)})
            for batch in records.batches():
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
            try:
                result.stale_copies_cleaned += self._cleanup_stale_copies(tip)
            except Exception:
                # The store is down (an outage): the copies below fail too, and the next pass tries again.
                logger.warning("cleanup of failed copies of %s failed; retried at the next pass", log.name, exc_info=True)
            candidates = self.candidate_segments(log)
            self.metrics.copy_lag_segments.labels(log.topic, log.partition).set(len(candidates))
            self.metrics.copy_lag_bytes.labels(log.topic, log.partition).set(sum(s.size for s, _ in candidates))
            for seg, nxt in candidates:
                if self._stopping.is_set():
                    logger.info("stopping: the copy of %s ends before segment %d", log.name, seg.base_offset)
                    break
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
            # Kafka's segment.largestTimestamp(): the max timestamp, or the file's mtime when no record has one
            # (-1 here would make the first remote retention pass delete the segment at once).
            seg.largest_timestamp,
            self.broker_id,
            self.time.milliseconds(),
            seg.size,
            self._segment_leader_epochs(log, seg.base_offset, nxt.base_offset),
        )
        try:
            self.metadata.add_remote_log_segment_metadata(md)
        except Exception:
            # The STARTED event may have reached the store even though the put failed here: the next pass purges it.
            self._failed_copies.setdefault(tip, {})[segment_id.id] = md
            raise
        self._copy_quota.acquire(seg.size)
        try:
            with tempfile.TemporaryDirectory(prefix="tiered-copy-") as tmp:
                data = self._segment_data(log, seg, nxt, Path(tmp))
                checksums = compute_segment_checksums(data, self.checksum_chunk_bytes)
                custom = self._copy_data(md, data)
                if custom is not None and len(custom) > self.custom_metadata_max_bytes:
                    raise CustomMetadataSizeExceededError(
                        f"custom metadata of {len(custom)} bytes for {segment_id} exceeds "
                        f"remote.log.metadata.custom.metadata.max.bytes={self.custom_metadata_max_bytes}",
                        size=len(custom),
                    )
            self.metadata.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(
                    segment_id, self.time.milliseconds(), custom, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, self.broker_id
                ),
                checksums=checksums,
            )
        except Exception:
            self.metrics.copy_errors.inc()
            self._remove_failed_copy(tip, md)
            raise
        log.note_highest_remote_offset(end_offset)
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

    def _remove_failed_copy(self, tip: TopicIdPartition, md: RemoteLogSegmentMetadata) -> None:
        """Delete what a failed copy attempt uploaded and its metadata (Kafka's copy task does the same); when that
        fails too (the store is down), the attempt is remembered and the next pass deletes it."""
        try:
            self._delete_remote(md, reason="failed copy")
        except Exception:
            self._failed_copies.setdefault(tip, {})[md.remote_log_segment_id.id] = md
            logger.warning("cleanup of the failed copy %s failed; retried at the next pass", md.remote_log_segment_id,
                           exc_info=True)

    def _cleanup_stale_copies(self, tip: TopicIdPartition) -> int:
        """Copies that never finished: at the first pass of the process, every COPY_SEGMENT_STARTED (or
        DELETE_SEGMENT_STARTED) in the store (a crash mid-copy); at every pass, the failed attempts of this process
        whose cleanup failed (an outage), so none waits for a restart. Called under the partition's lock, so no copy
        of this partition is under way in this process."""
        if tip not in self._cleaned_stale:
            stale = {md.remote_log_segment_id.id: md for md in self.metadata.find_stale_copies(tip)}
            reason = "stale copy left by a crash"
        else:
            stale = {md.remote_log_segment_id.id: md for md in self.metadata.unfinished_segments(tip)}
            reason = "failed copy left by an earlier pass"
        failed = self._failed_copies.get(tip, {})
        cleaned = 0
        for sid, md in list(stale.items()):
            self._delete_remote(md, reason=reason)
            failed.pop(sid, None)
            cleaned += 1
        for sid, md in list(failed.items()):
            # Not in the store's view: its STARTED event was never acknowledged. Delete whatever may exist.
            logger.info("purging the failed copy %s (%d-%d)", md.remote_log_segment_id, md.start_offset, md.end_offset)
            self.rsm.delete_log_segment_data(md)
            self.metadata.purge(md)
            del failed[sid]
            cleaned += 1
        self._cleaned_stale.add(tip)
        return cleaned

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
        with self._expiration_lock(tip):
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
            if doomed:
                # Kafka's order: the log start offset moves (and is checkpointed, by the log's hook) BEFORE any
                # segment below it is deleted, so a reader that finds a segment gone sees it out of range.
                new_start = doomed[-1].end_offset + 1
                log.maybe_increment_log_start_offset(new_start, LogStartOffsetIncrementReason.SEGMENT_DELETION)
                log.ensure_log_start_offset_checkpointed()  # a previous pass's checkpoint may have failed
            for md in doomed:
                self._delete_remote(md, reason="retention")
            remaining = self.finished_segments(tip)
            self.metrics.log_size_bytes.labels(log.topic, log.partition).set(sum(m.segment_size_in_bytes for m in remaining))
            self.metrics.delete_lag_segments.labels(log.topic, log.partition).set(0)
            self.metrics.delete_lag_bytes.labels(log.topic, log.partition).set(0)
            return len(doomed)

    # ------------------------------------------------------------------------------------------------------
    # Passes

    def run_once(self, logs: Iterable[Log]) -> PassResult:
        """One run of the copy task then the expiration task of every remote-enabled log (``tiered offload``):
        the same task objects the scheduled tasks run (:mod:`tiered.rlm_tasks`)."""
        from tiered.rlm_tasks import RLMCopyTask, RLMExpirationTask, tiering_enabled

        total = PassResult()
        eligible = [log for log in logs if tiering_enabled(log)]

        def one(log: Log) -> PassResult:
            res = RLMCopyTask(self, log).run()
            res.segments_deleted += RLMExpirationTask(self, log).run().segments_deleted
            return res

        with ThreadPoolExecutor(self._copier_threads, thread_name_prefix="remote-log-copier") as pool:
            for res in pool.map(one, eligible):
                total.add(res)
        return total

    def start_tasks(self, logs: Callable[[], Iterable[Log]]) -> None:
        """Start the copy and expiration tasks of every remote-enabled log that ``logs()`` returns, each run every
        ``remote.log.manager.task.interval.ms`` (the ``local.remote.RemoteTier`` hook a LogManager calls at start)."""
        from tiered.rlm_tasks import RLMTaskScheduler

        with self._tasks_lock:
            if self._task_scheduler is not None or self._closed:
                return
            self._stopping.clear()
            self._task_scheduler = RLMTaskScheduler(
                self, logs, self.task_interval_ms, self._copier_threads, self._expiration_threads
            )

    def request_stop(self) -> None:
        """Tell the copy tasks to end after the segment each is copying, without waiting (``tiered run`` calls it
        when signalled, then closes the LogManager, whose :meth:`stop_tasks` waits for them)."""
        self._stopping.set()

    def stop_tasks(self) -> None:
        """Stop the scheduled tasks, waiting for the runs in progress (a LogManager calls it before closing logs):
        a copy task finishes the segment it is copying and copies no more."""
        self._stopping.set()
        with self._tasks_lock:
            scheduler, self._task_scheduler = self._task_scheduler, None
        if scheduler is not None:
            scheduler.shutdown()

    @property
    def tasks_running(self) -> bool:
        return self._task_scheduler is not None

    def record_task_result(self, result: PassResult) -> None:
        with self._tasks_lock:
            self.task_totals.add(result)

    def copy_lag(self, log: Log) -> tuple[int, int]:
        """Kafka's RemoteCopyLagSegments and RemoteCopyLagBytes of ``log`` now: segments eligible for copy and not
        yet copied, and their bytes."""
        candidates = self.candidate_segments(log)
        return len(candidates), sum(seg.size for seg, _ in candidates)

    def close(self) -> None:
        self.stop_tasks()
        if self._closed:
            return
        self._closed = True
        if self._process_copier is not None:
            self._process_copier.close()
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
