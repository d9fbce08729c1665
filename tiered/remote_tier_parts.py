"""The collaborators the remote tier's parts share (:class:`RemoteTierParts`), and the rules every part applies the
same way: a log's ``TopicIdPartition`` and which remote segments are readable.

The parts are :class:`tiered.remote_log_reader.RemoteLogReader` (reads), :class:`tiered.rlm_copy.RLMCopyTask` and
:class:`tiered.rlm_expiration.RLMExpirationTask` (Kafka's task classes); :class:`tiered.remote_log_manager.RemoteLogManager`
is the façade a ``LogManager`` talks to. None of them reaches into another. What else they share has a module of its
own: the metrics (:mod:`tiered.rlm_metrics`), a task run's result (:mod:`tiered.pass_result`), the bytes-per-second
quota (:mod:`tiered.rate_limiter`) and how a remote segment is deleted (:mod:`tiered.remote_deletion`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from local.scheduler import Time
from tiered.errors import RemoteStorageError
from tiered.ownership import OwnershipGuard
from tiered.remote_deletion import DeletionClaims, delete_remote_segment
from tiered.rlm_metrics import RemoteLogMetrics
from tiered.rsm import RemoteLogSegmentMetadata, RemoteStorageManager, TopicIdPartition

if TYPE_CHECKING:
    from local.index.entries import AbortedTxn
    from local.log import Log
    from tiered.cache.index_cache import RemoteIndexCache
    from tiered.cache.segment_cache import SegmentCache
    from tiered.rlmm import RemoteLogMetadataManager


class SegmentLister(Protocol):
    """The metadata store as the parts read it."""

    def readable_segments(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]: ...


class LocalAborts(Protocol):
    """Where the local transaction indexes are searched (a :class:`local.log.Log`)."""

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[Any]: ...


def collect_aborted_transactions(metadata: SegmentLister, index_cache: RemoteIndexCache, log: LocalAborts,
                                 tip: TopicIdPartition, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
    """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``, as Kafka's
    ``collectAbortedTransactions`` finds them over both tiers: the remote transaction indexes from the segment holding
    ``fetch_offset`` on, then the local ones, until an entry says the search is complete.

    A transaction's entry is in the index of the segment holding its marker, which may come segments after its records,
    past the upper bound too: a search that stopped at the segments of the range would miss the abort of a transaction
    whose records are in it (an ``endingOffsets`` below its marker). A segment copied without a transaction index holds
    no aborted transaction (Kafka's ``txnIdxEmpty``): its index is not fetched."""
    aborted: list[AbortedTxn] = []
    checksums = getattr(metadata, "segment_checksums", None)
    for seg in finished_segments(metadata, tip):
        if seg.end_offset < fetch_offset:
            continue
        sums = checksums(seg) if checksums is not None else None
        if sums is not None and ".txnindex" not in sums.objects:
            continue
        result = index_cache.collect_aborted_txns(seg, fetch_offset, upper_bound_offset)
        aborted.extend(result.aborted_txns)
        if result.is_complete:
            return aborted
    aborted.extend(log.collect_aborted_transactions(fetch_offset, upper_bound_offset))
    return aborted


def topic_id_partition(log: Log) -> TopicIdPartition:
    """The remote tier's name for ``log``'s partition; a log without a topic id has no remote segments."""
    if log.topic_id is None:
        raise RemoteStorageError(f"log {log.name} has no topic id: cannot address its remote segments", retriable=False)
    return TopicIdPartition(log.topic_id, log.topic, log.partition)


def finished_segments(metadata: SegmentLister, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
    """FINISHED copies of a partition within its owner's lineage, ordered by start offset (the only ones reads and
    retention see: :meth:`tiered.rlmm.RemoteLogMetadataManager.readable_segments`)."""
    return metadata.readable_segments(tip)


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

    def collect_aborted_transactions(self, log: Log, tip: TopicIdPartition, fetch_offset: int,
                                     upper_bound_offset: int) -> list[AbortedTxn]:
        """:func:`collect_aborted_transactions` with the parts' metadata and index cache."""
        return collect_aborted_transactions(self.metadata, self.index_cache, log, tip, fetch_offset, upper_bound_offset)

    def update_log_size(self, tip: TopicIdPartition) -> None:
        """Set ``RemoteLogSizeBytes`` of ``tip`` to the bytes of its finished copies. Both the copy and the
        expiration task call it after their run (as Kafka's do), so the gauge never lags a copy by a pass."""
        size = sum(md.segment_size_in_bytes for md in self.finished_segments(tip))
        self.metrics.log_size_bytes.labels(tip.topic, tip.partition).set(size)

    def delete_remote_segment(self, md: RemoteLogSegmentMetadata, reason: str) -> bool:
        """Delete ``md``'s segment the one way every task does: :func:`tiered.remote_deletion.delete_remote_segment`
        (True when this call deleted it)."""
        return delete_remote_segment(self, md, reason)
