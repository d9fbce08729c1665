"""What the remote tier's parts share: the collaborators (:class:`RemoteTierParts`), the metrics, the result of a
task run, a bytes-per-second quota, and the few rules every part applies the same way (a log's
``TopicIdPartition``, which segments are readable, how a remote segment is deleted).

The parts are :class:`tiered.remote_log_reader.RemoteLogReader` (reads), :class:`tiered.rlm_copy.RLMCopyTask` and
:class:`tiered.rlm_expiration.RLMExpirationTask` (Kafka's task classes); :class:`tiered.remote_log_manager.RemoteLogManager`
builds them and is the façade a ``LogManager`` talks to. None of them reaches into another.

Metrics use Kafka's names and are registered once per process in ``local.metrics.REGISTRY``, the registry the
project exposes (beside the log engine's own gauges); every RemoteLogManager of a process adds to them, as the
one RemoteLogManager of a Kafka broker does.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time as _time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from local.scheduler import Time
from tiered.errors import RemoteStorageError
from tiered.ownership import STATES, OwnershipGuard
from tiered.rsm import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageManager,
    TopicIdPartition,
)

if TYPE_CHECKING:
    from local.log import Log
    from tiered.cache.index_cache import RemoteIndexCache
    from tiered.cache.segment_cache import SegmentCache
    from tiered.rlmm import RemoteLogMetadataManager

logger = logging.getLogger(__name__)


class SegmentLister(Protocol):
    """The metadata store as the parts read it."""

    def readable_segments(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]: ...


def topic_id_partition(log: Log) -> TopicIdPartition:
    """The remote tier's name for ``log``'s partition; a log without a topic id has no remote segments."""
    if log.topic_id is None:
        raise RemoteStorageError(f"log {log.name} has no topic id: cannot address its remote segments", retriable=False)
    return TopicIdPartition(log.topic_id, log.topic, log.partition)


def finished_segments(metadata: SegmentLister, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
    """FINISHED copies of a partition within its owner's lineage, ordered by start offset (the only ones reads and
    retention see: :meth:`tiered.rlmm.RemoteLogMetadataManager.readable_segments`)."""
    return metadata.readable_segments(tip)


@dataclass
class PassResult:
    """What one run of the copy and expiration tasks did."""

    segments_copied: int = 0
    bytes_copied: int = 0
    segments_deleted: int = 0
    copy_errors: int = 0
    stale_copies_cleaned: int = 0
    # Runs that did nothing because this data dir does not own the partition's remote data, or because the store
    # lacks it (tiered.ownership): the reason is the partition's state in RemoteLogManager.ownership.
    not_owned: int = 0

    def add(self, other: PassResult) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def since(self, earlier: PassResult) -> PassResult:
        """What was done after ``earlier``, an earlier copy of the same running totals (``tiered run`` records
        its scheduled tasks' work per interval from the manager's totals)."""
        return PassResult(**{f.name: getattr(self, f.name) - getattr(earlier, f.name) for f in dataclasses.fields(self)})


class RateLimiter:
    """Bytes-per-second quota (remote.log.manager.copy/fetch.max.bytes.per.second); None = unbounded."""

    def __init__(self, bytes_per_second: int | None) -> None:
        self.rate = bytes_per_second if bytes_per_second and bytes_per_second < 2**62 else None
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


class RemoteLogMetrics:
    """Kafka's RemoteLogManager metrics (RemoteCopy/Fetch/Delete requests, bytes, errors; copy and delete lag;
    remote log size per partition). The process's one set, in the exposed registry: see :func:`remote_log_metrics`."""

    def __init__(self, registry: Any) -> None:
        from prometheus_client import Counter, Enum, Gauge

        r = self.registry = registry  # where they are exposed (`tiered run`'s /metrics serves it)
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
        self.ownership = Enum(
            "RemoteLogOwnership", "Whether this data dir owns the partition's remote data (tiered.ownership): owner, "
            "lost (another data dir claimed it: nothing is copied or deleted here) or wrong_store (the store holds "
            "none of it)", labels, states=list(STATES), registry=r)


_metrics: dict[int, tuple[Any, RemoteLogMetrics]] = {}  # id(registry) -> (the registry, kept alive; its metrics)
_metrics_lock = threading.Lock()


def remote_log_metrics(registry: Any = None) -> RemoteLogMetrics:
    """The RemoteLogManager metrics registered in ``registry`` (default: ``local.metrics.REGISTRY``), created on
    first use: a registry holds one metric of a name, and every manager of the process shares it."""
    if registry is None:
        from local.metrics import REGISTRY

        registry = REGISTRY
    with _metrics_lock:
        held = _metrics.get(id(registry))
        if held is None:
            held = _metrics[id(registry)] = (registry, RemoteLogMetrics(registry))
        return held[1]


class DeletionClaims:
    """The remote segments (by id) whose deletion a task of this process is carrying out."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: set[uuid.UUID] = set()

    def claim(self, segment_id: uuid.UUID) -> bool:
        """Take the segment's deletion; False when another task holds it."""
        with self._lock:
            if segment_id in self._ids:
                return False
            self._ids.add(segment_id)
            return True

    def release(self, segment_id: uuid.UUID) -> None:
        with self._lock:
            self._ids.discard(segment_id)


@dataclass(frozen=True)
class RemoteTierParts:
    """The collaborators the copy and expiration tasks share (built once by the RemoteLogManager)."""

    rsm: RemoteStorageManager
    metadata: RemoteLogMetadataManager
    index_cache: RemoteIndexCache
    segments: SegmentCache
    metrics: RemoteLogMetrics
    time: Time
    broker_id: int
    ownership: OwnershipGuard
    deletions: DeletionClaims = dataclasses.field(default_factory=lambda: DeletionClaims())

    def finished_segments(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        return finished_segments(self.metadata, tip)

    def update_log_size(self, tip: TopicIdPartition) -> None:
        """Set ``RemoteLogSizeBytes`` of ``tip`` to the bytes of its finished copies. Both the copy and the
        expiration task call it after their run (as Kafka's do), so the gauge never lags a copy by a pass."""
        size = sum(md.segment_size_in_bytes for md in self.finished_segments(tip))
        self.metrics.log_size_bytes.labels(tip.topic, tip.partition).set(size)

    def delete_remote_segment(self, md: RemoteLogSegmentMetadata, reason: str) -> bool:
        """Kafka's order: DELETE_SEGMENT_STARTED, the objects, DELETE_SEGMENT_FINISHED; then the segment leaves the
        caches. A failed object delete leaves the STARTED event (retried by the next pass that finds it).

        One deletion of a segment at a time in this process: the copy task's cleanup takes every segment left
        DELETE_SEGMENT_STARTED for a leftover, which includes the one the expiration task is deleting at that
        moment. A segment another task is deleting, or deleted since the caller listed it, is left alone: returns
        False (True when this call deleted it)."""
        sid = md.remote_log_segment_id
        if not self.deletions.claim(sid.id):
            logger.debug("remote segment %s is being deleted by another task", sid)
            return False
        try:
            if md.state is not RemoteLogSegmentState.COPY_SEGMENT_FINISHED and not self._listed(md):
                logger.debug("remote segment %s was deleted since it was listed", sid)
                return False
            logger.info("deleting remote segment %s (%d-%d): %s", sid, md.start_offset, md.end_offset, reason)
            self._set_state(md, RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
            try:
                self.rsm.delete_log_segment_data(md)
            except Exception:
                self.metrics.delete_errors.inc()
                raise
            self._set_state(md, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED)
            self.index_cache.remove(sid.id)
            self.segments.invalidate(md)
            self.metrics.delete_requests.inc()
            return True
        finally:
            self.deletions.release(sid.id)

    def _listed(self, md: RemoteLogSegmentMetadata) -> bool:
        """Whether the metadata still lists ``md``'s segment (not DELETE_SEGMENT_FINISHED). Asked only for a segment
        the caller found unfinished (the copy task's cleanup): a FINISHED one is deleted by the expiration task
        alone, whose runs never overlap."""
        sid = md.remote_log_segment_id
        return any(m.remote_log_segment_id == sid for m in self.metadata.list_remote_log_segments(sid.topic_id_partition))

    def _set_state(self, md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> None:
        self.metadata.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, self.time.milliseconds(), None, state, self.broker_id)
        )
