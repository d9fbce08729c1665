"""RLMExpirationTask: deletes one partition's remote segments past retention (Kafka's ``RLMExpirationTask``).

A remote segment goes when it breaches ``retention.ms`` (by max timestamp: ``max_timestamp_ms <= now -
retention.ms``, Kafka's remote rule), ``retention.bytes`` over the whole log (remote plus local-only bytes), lies
below the log start offset, or outside the leader-epoch lineage; the oldest first, stopping at the first that
stays. Kafka's order: the log start offset moves first (the LogManager checkpoints it through the log's hook), then
the segments below it are deleted, so a read racing the deletion sees the new log start and raises
``OffsetOutOfRangeError`` (see ``Log.read``).

Ownership (:mod:`tiered.ownership`): only the data dir that owns the partition's remote data deletes there (checked
at the start of a run and before each segment); it also deletes the segments a former owner copied outside its
lineage (never read by anyone). A run with nothing to delete asks the store nothing when the copy task's pass
checked the partition's ownership lately (within two task intervals): on an object store each check is a LIST, and
an idle partition made two every interval.

One task per partition; its runs are serialised by its own lock, so a deletion pass (seconds under load) never
holds back the copy task of the same partition.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from tiered.errors import NotPartitionOwnerError, RemoteStoreMismatchError, one_line_cause
from tiered.pass_result import PassResult
from tiered.remote_tier_parts import RemoteTierParts
from tiered.rlm_tasks import remote_data_to_delete
from tiered.rsm import RemoteLogSegmentMetadata, TopicIdPartition

if TYPE_CHECKING:
    from local.log import Log
    from tiered.columnar.keeper import ColumnarKeeper

logger = logging.getLogger(__name__)

_OUTSIDE_LINEAGE = "outside the owner's lineage (a former owner's copy, made after it lost the partition)"


class RLMExpirationTask:
    """See the module docstring."""

    def __init__(self, parts: RemoteTierParts, tip: TopicIdPartition, *, record: Callable[[PassResult], None],
                 columnar: ColumnarKeeper | None = None, check_stands_s: float = 60.0,
                 claim_settled: Callable[[Log], object] | None = None) -> None:
        self.parts = parts
        # How long another task's ownership check stands for a run with nothing to delete (see the module docstring).
        self._check_stands_s = check_stands_s
        self._claim_settled = claim_settled
        self.tip = tip
        self._record = record
        self._columnar = columnar  # the columnar copy's keeper: its files below a moved log start retire at once
        self.lock = threading.Lock()

    def run(self, log: Log) -> PassResult:
        """One scheduled run: :meth:`cleanup_remote_segments`, added to the manager's task totals (after ``tiered
        run``'s start settled the partition's claim at a new owner epoch: ``claim_settled``, as the copy task)."""
        if self._claim_settled is not None:
            self._claim_settled(log)
        result = PassResult(segments_deleted=self.cleanup_remote_segments(log))
        self._record(result)
        return result

    def cleanup_remote_segments(self, log: Log) -> int:
        """Delete remote segments breaching retention, the log start offset or the epoch lineage; how many."""
        from local.log import LogStartOffsetIncrementReason

        parts = self.parts
        with self.lock:
            if log.is_closed:  # (deleted while this run waited for the lock)
                return 0
            if remote_data_to_delete(log):
                return self._delete_all(log)
            if not self._due(log) and parts.ownership.checked_within(self.tip, self._check_stands_s):
                self._set_lag(log, 0, 0)
                return 0
            if not self._owned(log):
                return 0
            self._remove_leftover_events(log)
            foreign = parts.metadata.foreign_segments(self.tip)
            segs = parts.finished_segments(self.tip)
            if not segs and not foreign:
                return 0
            doomed = self._doomed(log, segs) if segs else []
            self._set_lag(log, len(doomed), sum(m.segment_size_in_bytes for m, _ in doomed))
            if doomed:
                # Kafka's order: the log start offset moves (and is checkpointed, by the log's hook) BEFORE any
                # segment below it is deleted, so a reader that finds a segment gone sees it out of range.
                log.maybe_increment_log_start_offset(doomed[-1][0].end_offset + 1, LogStartOffsetIncrementReason.SEGMENT_DELETION)
                log.ensure_log_start_offset_checkpointed()  # a previous pass's checkpoint may have failed
            if foreign:
                # Records the owner never had (an unclean leader election's, in Kafka's terms): said once per pass,
                # with where else they may be, not only as deletions among retention's.
                logger.warning("%s: deleting %d remote segment(s) outside its lineage (offsets %d-%d): copies a "
                               "former owner made after it lost the partition; their records are not in this data "
                               "dir's log (the former owner's local log may still hold them)", log.name, len(foreign),
                               min(m.start_offset for m in foreign), max(m.end_offset for m in foreign))
            deleted = 0
            for md, reason in [*((m, _OUTSIDE_LINEAGE) for m in foreign), *doomed]:
                if not self._owned(log):
                    break  # another data dir claimed the partition since the run began
                deleted += parts.delete_remote_segment(md, reason=reason)  # False: another task deleted it
            parts.update_log_size(self.tip)
            self._set_lag(log, 0, 0)
            if doomed and self._columnar is not None and log.config.remote_log_columnar_enable:
                self._retire_columnar(log)
            return deleted

    def _delete_all(self, log: Log) -> int:
        """Remote storage turned off with ``remote.log.delete.on.disable=true`` (KIP-950): every remote segment of the
        partition goes, finished or left under way, a former owner's too, and the log start offset moves up to the
        local log start first (Kafka's order, as for retention: a read racing the deletion finds the offsets out of
        range, never a segment half gone). Once none is left the partition dir forgets its remote data; a pass cut
        short (a crash, the store down, the partition claimed elsewhere) leaves the rest to the next."""
        from local.log import LogStartOffsetIncrementReason

        parts = self.parts
        reason = "remote storage turned off (remote.storage.enable=false, remote.log.delete.on.disable=true)"
        # (The config change moved it already; again for a config that changed behind the engine's back.)
        log.maybe_increment_log_start_offset(log.local_log_start_offset, LogStartOffsetIncrementReason.SEGMENT_DELETION)
        log.ensure_log_start_offset_checkpointed()
        try:
            parts.ownership.ensure_owner(log, self.tip)
        except (NotPartitionOwnerError, RemoteStoreMismatchError) as exc:
            # Not this data dir's to delete: the owner's remote data stays (its own config says what becomes of it).
            # This partition gives it up here, as the owner does: local only, from its local log start.
            log.forget_remote_data()
            logger.warning("%s: %s, but the remote data is not this data dir's to delete (%s): it is left as it is, "
                           "and this partition is local only from offset %d", log.name, reason, one_line_cause(exc),
                           log.log_start_offset)
            return 0
        except Exception as exc:
            logger.warning("cannot check the ownership of %s's remote data (%s): nothing is deleted until the next "
                           "pass", log.name, one_line_cause(exc), exc_info=logger.isEnabledFor(logging.DEBUG))
            return 0
        self._remove_leftover_events(log)
        parts.metadata.refresh(self.tip)  # (copies another process of this data dir left under way, too)
        segments = parts.metadata.list_remote_log_segments(self.tip)
        if segments:
            logger.info("%s: deleting its %d remote segment(s) (offsets %d-%d): %s", log.name, len(segments),
                        segments[0].start_offset, max(m.end_offset for m in segments), reason)
        deleted = 0
        # The highest first: what is left is always the copies from the lowest offsets up to some end, so "how far the
        # remote copies reach" (what local retention trusts) stays true at every point a crash or an outage stops it.
        for md in sorted(segments, key=lambda m: m.end_offset, reverse=True):
            if not self._owned(log):
                return deleted  # another data dir claimed the partition since the run began
            deleted += parts.delete_remote_segment(md, reason=reason)
        parts.update_log_size(self.tip)
        if not parts.metadata.list_remote_log_segments(self.tip):
            log.forget_remote_data()
            if self._columnar is not None:
                self._retire_columnar(log)
            logger.info("%s: its remote data is deleted; the partition is local only from offset %d", log.name,
                        log.log_start_offset)
        return deleted

    def _due(self, log: Log) -> bool:
        """Whether the partition's remote segments as this process knows them hold one to delete (no request)."""
        if self.parts.metadata.foreign_segments(self.tip):
            return True
        segs = self.parts.finished_segments(self.tip)
        return bool(segs) and bool(self._doomed(log, segs))

    def _remove_leftover_events(self, log: Log) -> None:
        """The metadata events a crash in a deletion left behind (:meth:`RemoteLogMetadataStore.remove_leftover_events`;
        a failure is logged, and the next pass tries again)."""
        try:
            self.parts.metadata.remove_leftover_events(self.tip)
        except Exception as exc:
            logger.warning("deleting leftover metadata events of %s failed (%s); retried at the next pass", log.name,
                           one_line_cause(exc), exc_info=logger.isEnabledFor(logging.DEBUG))

    def _retire_columnar(self, log: Log) -> None:
        """The columnar copy's files wholly below the new log start leave its manifest (a failure is logged; the
        copy task's next run retires them)."""
        assert self._columnar is not None
        try:
            self._columnar.follow_log_start(log, self.tip)
        except Exception as exc:
            logger.warning("retiring columnar files of %s below its log start failed (%s: %s); retried at the next "
                           "pass", log.name, type(exc).__name__, exc, exc_info=logger.isEnabledFor(logging.DEBUG))

    def _owned(self, log: Log) -> bool:
        """Whether this data dir (still) owns the partition's remote data (:mod:`tiered.ownership`: the guard claims
        it when nobody has, and logs the ERROR when it is lost). A store that cannot be asked (an outage) deletes
        nothing this run; the next run asks again."""
        try:
            self.parts.ownership.ensure_owner(log, self.tip)
        except (NotPartitionOwnerError, RemoteStoreMismatchError):
            return False
        except Exception as exc:
            logger.warning("cannot check the ownership of %s's remote data (%s): no remote segment is deleted until "
                           "the next pass", log.name, one_line_cause(exc), exc_info=logger.isEnabledFor(logging.DEBUG))
            return False
        return True

    def _doomed(self, log: Log, segs: list[RemoteLogSegmentMetadata]) -> list[tuple[RemoteLogSegmentMetadata, str]]:
        """The oldest segments of ``segs`` that breach a rule, up to the first that breaches none, each with the
        rule it breaches (the first of: below the log start offset, outside the lineage, time, size)."""
        config = log.config
        now = self.parts.time.milliseconds()
        # Kafka's rule (a segment of none of the local cache's epochs is outside the lineage) only where no owner
        # record says what the lineage is: with one, foreign_segments applies the readers' rule (within_lineage),
        # and the local cache is no judge of it (its checkpoint deleted by hand, it lost its early epochs and took
        # every older copy for one outside; a claim whose write failed leaves the log a newer epoch than the record).
        current_owner = getattr(self.parts.metadata, "current_owner", None)
        owned = current_owner is not None and current_owner(self.tip) is not None
        lineage = set() if owned else {e.epoch for e in log.leader_epoch_cache.epoch_entries()}
        retention_ms = int(config.retention_ms)
        retention_bytes = int(config.retention_bytes)
        local_only = sum(s.size for s in log.segments.values() if s.base_offset > segs[-1].end_offset)
        breach_bytes = (
            (sum(md.segment_size_in_bytes for md in segs) + local_only - retention_bytes) if retention_bytes >= 0 else -1
        )
        doomed: list[tuple[RemoteLogSegmentMetadata, str]] = []
        for md in segs:
            reason = None
            if md.end_offset < log.log_start_offset:
                reason = "below the log start offset"
            elif lineage and not set(md.segment_leader_epochs) & lineage:
                reason = "outside the leader-epoch lineage"
            elif retention_ms >= 0 and now - md.max_timestamp_ms >= retention_ms:
                reason = "retention.ms breach"
            elif breach_bytes >= 0 and breach_bytes - md.segment_size_in_bytes >= 0:
                reason = "retention.bytes breach"
            if reason is None:
                break
            if breach_bytes >= 0:
                breach_bytes -= md.segment_size_in_bytes
            doomed.append((md, reason))
        return doomed

    def _set_lag(self, log: Log, segments: int, size: int) -> None:
        metrics = self.parts.metrics
        metrics.delete_lag_segments.labels(log.topic, log.partition).set(segments)
        metrics.delete_lag_bytes.labels(log.topic, log.partition).set(size)
