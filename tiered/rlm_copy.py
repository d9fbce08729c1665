"""RLMCopyTask: copies one partition's closed segments to the remote tier (Kafka's ``RLMCopyTask``).

Candidates are non-active segments whose next segment's base offset is at or below the last stable offset, from
the highest copied offset + 1, in offset order; a run stops at the first failure (the next run retries it). Each
attempt gets a new segment id; metadata COPY_SEGMENT_STARTED is recorded first, then the objects are uploaded,
then COPY_SEGMENT_FINISHED, which records the crc32c checksums of every object (computed from the local files, see
:mod:`tiered.checksums`; every fetch of a segment that has them is verified). A failed attempt deletes what it
uploaded (DELETE_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED). A STARTED copy found at the task's first run (a
crash mid-copy) is cleaned up the same way, and so is, at the next run, a failed attempt whose cleanup failed too
(an outage): as Kafka's copy task deletes a failed copy's data, no orphan waits for a restart. A plugin's custom
metadata larger than ``remote.log.metadata.custom.metadata.max.bytes`` fails the copy the same way and, as in
Kafka (which cancels the task), stops the partition's copies until a restart: a retry would upload it in vain.

With the copier process (tiered.copier_process.BatchCopier) a run copies up to COPY_BATCH_SEGMENTS segments per
request, the events written by the child in the same order (STARTED, objects, FINISHED per segment, the FINISHED
ones in offset order and none after a failure) and recorded in this process's view after; a failed segment is
cleaned up as above, the segments uploaded after it deleted. A stop waits for one batch.

Ownership (:mod:`tiered.ownership`): a run first makes sure this data dir owns the partition's remote data (claiming
it when nobody has), and again before each segment; a data dir that lost it copies nothing (``not_owned``).

One task per partition (the :class:`tiered.remote_log_manager.RemoteLogManager` keeps them), holding the
partition's copy state; its runs are serialised by its lock, apart from the expiration task's.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from local import filenames
from local.scratch import ScratchDir
from tiered.checksums import SegmentChecksums
from tiered.errors import (
    CustomMetadataSizeExceededError,
    NotPartitionOwnerError,
    RemoteStorageError,
    RemoteStoreMismatchError,
    one_line_cause,
)
from tiered.ownership import OWNER
from tiered.pass_result import PassResult
from tiered.rate_limiter import RateLimiter
from tiered.remote_tier_parts import RemoteTierParts
from tiered.rsm import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

if TYPE_CHECKING:
    from local.log import Log
    from local.segment import LogSegment
    from tiered.columnar.keeper import ColumnarKeeper

logger = logging.getLogger(__name__)

# How long after a copy run's own listing of the owner records its first segment goes on it without listing again
# (a run whose cleanup of failed copies waited on a slow store lists again).
_RUN_CHECK_STANDS_S = 1.0

EMPTY_PRODUCER_SNAPSHOT = bytes.fromhex("000148674bc700000000")

# (metadata, the files, the checksum chunk size) -> the checksums of the files (tiered.checksums), computed before the
# upload, and the plugin's custom metadata: copy_log_segment_data with the checksums, which a copier process computes
# (a segment's reads are then off this process's GIL).
CopyData = Callable[[RemoteLogSegmentMetadata, LogSegmentData, int], "tuple[SegmentChecksums, bytes | None]"]


# The most segments one request to the copier process copies: a stop (SIGTERM, Ctrl-C) waits for one request.
COPY_BATCH_SEGMENTS = 16


@dataclass(frozen=True)
class CopyJob:
    """One segment of a batch: its COPY_SEGMENT_STARTED metadata, its files, the checksum chunk size, the custom
    metadata limit, and the event time of its COPY_SEGMENT_FINISHED."""

    metadata: RemoteLogSegmentMetadata
    data: LogSegmentData
    checksum_chunk_bytes: int
    custom_metadata_max_bytes: int
    finished_at_ms: int
    sync: bool = False  # fsync the segment's files before reading them (the log has not flushed them yet)
    # The owner epoch the copy is made under (-1: not checked): the copier process checks before the segment's
    # COPY_SEGMENT_FINISHED event that no newer claim stands (tiered.metadata.check_owner_epoch).
    owner_epoch: int = -1


@dataclass(frozen=True)
class CopyFailure:
    """Why a batch stopped: ``stage`` is "started" (its STARTED event may or may not have landed), "copy" (the
    checksums or the objects), "custom" (the plugin's custom metadata of ``custom_size`` bytes is over the limit),
    "owner" (another data dir claimed the partition meanwhile: no FINISHED event) or "finished" (its FINISHED
    event's put failed)."""

    stage: str
    kind: str
    message: str
    retriable: bool = True
    custom_size: int = 0

    @property
    def started_landed(self) -> bool:
        return self.stage != "started"

    def error(self, md: RemoteLogSegmentMetadata, custom_metadata_max_bytes: int) -> Exception:
        if self.stage == "custom":
            return CustomMetadataSizeExceededError(
                f"custom metadata of {self.custom_size} bytes for {md.remote_log_segment_id} exceeds "
                f"remote.log.metadata.custom.metadata.max.bytes={custom_metadata_max_bytes}", size=self.custom_size,
            )
        if self.stage == "owner":
            return NotPartitionOwnerError(self.message, retriable=False)
        return RemoteStorageError(
            f"copy of {md.remote_log_segment_id} in the copier process failed ({self.stage}): {self.kind}: "
            f"{self.message}", retriable=self.retriable,
        )


@dataclass(frozen=True)
class CopyOutcome:
    """The checksums and custom metadata of the jobs copied (a prefix of the batch), why it stopped (the job after
    them failed), and how many jobs after that one had their COPY_SEGMENT_STARTED written (abandoned: their
    objects may be up; the parent deletes them)."""

    copied: list[tuple[SegmentChecksums, bytes | None]]
    failure: CopyFailure | None = None
    abandoned: int = 0


class CopyBatch(Protocol):
    """Copies in the copier process (tiered.copier_process.BatchCopier), events included."""

    def copy(self, jobs: list[CopyJob]) -> CopyOutcome: ...

    def record(self, md: RemoteLogSegmentMetadata, checksums: SegmentChecksums | None = None) -> None:
        """Record in the metadata view an event the copier process wrote to the store."""
        ...


def highest_offset_in_remote_storage(parts: RemoteTierParts, tip: TopicIdPartition) -> int:
    return max((md.end_offset for md in parts.finished_segments(tip)), default=-1)


def candidate_segments(parts: RemoteTierParts, tip: TopicIdPartition, log: Log) -> list[tuple[LogSegment, LogSegment]]:
    """Non-active segments of ``log`` (with the segment after each) eligible for copy, oldest first."""
    return segments_to_copy(log, highest_offset_in_remote_storage(parts, tip))


def segments_to_copy(log: Log, copied_to: int) -> list[tuple[LogSegment, LogSegment]]:
    """The non-active segments of ``log`` (with the segment after each) past offset ``copied_to`` and the log start,
    below the last stable offset, oldest first."""
    from_offset = max(copied_to + 1, log.log_start_offset)
    lso = log.last_stable_offset
    out = []
    for seg, nxt in itertools.pairwise(list(log.segments.values())):
        if nxt.base_offset <= from_offset:
            continue  # already copied (or below the log start)
        if nxt.base_offset > lso:
            break
        out.append((seg, nxt))
    return out


class RLMCopyTask:
    """See the module docstring."""

    def __init__(
        self,
        parts: RemoteTierParts,
        tip: TopicIdPartition,
        *,
        copy_data: CopyData,
        quota: RateLimiter,
        custom_metadata_max_bytes: int,
        checksum_chunk_bytes: int,
        record: Callable[[PassResult], None],
        stopping: threading.Event | None = None,
        copy_batch: CopyBatch | None = None,
        columnar: ColumnarKeeper | None = None,
        claim_settled: Callable[[Log], object] | None = None,
    ) -> None:
        self.parts = parts
        # Waits until ``tiered run``'s start has settled the partition's claim at a new owner epoch: a run started
        # beside the claim copied under the old one, and the copier process refused each copy at its end (a newer
        # claim) and it was deleted: the first copies came an interval late, 60 s on a broker with that interval.
        self._claim_settled = claim_settled
        # The last offset this task knows copied (FINISHED, in its metadata view), kept as it copies: the watcher's
        # copy lag gauges (tiered.rlm_tasks) count from it, as remote-log-state's highest copied offset moves only
        # at a partition's first copy and at local retention.
        self.copied_to = -1
        # Keeps the Parquet copy of topics with remote.log.columnar.enable=true after each run (tiered.columnar).
        self._columnar = columnar
        # Copies through the copier process in batches of up to COPY_BATCH_SEGMENTS (None: one segment at a time).
        self._copy_batch = copy_batch
        self._segments_per_request = COPY_BATCH_SEGMENTS if copy_batch is not None else 1
        # Set when the manager stops (SIGTERM to `tiered run`, Ctrl-C in `tiered offload`): the run ends after the
        # segment in flight (Kafka's isCancelled() check between segments).
        self._stopping = stopping or threading.Event()
        self.tip = tip
        self._copy_data = copy_data
        self._quota = quota
        self._custom_metadata_max_bytes = custom_metadata_max_bytes
        self._checksum_chunk_bytes = checksum_chunk_bytes
        self._record = record
        self.lock = threading.Lock()
        self._cleaned_stale = False
        # Why the task stopped copying for good (Kafka cancels the copy task when a plugin's custom metadata is
        # over the limit: every retry would upload the segment again, to be refused again); None while it copies.
        self.cancelled: str | None = None
        # Copy attempts of this process whose STARTED event may not have reached the store (its put failed on the
        # client's side), by segment id: the next run deletes whatever they left. (A failed copy whose event did
        # land stays STARTED in the store's view, where the next run finds it.)
        self._failed_copies: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}

    def run(self, log: Log) -> PassResult:
        """One scheduled run: :meth:`copy_log_segments`, added to the manager's task totals."""
        if self._claim_settled is not None:
            self._claim_settled(log)
        result = self.copy_log_segments(log)
        self._record(result)
        return result

    def copy_log_segments(self, log: Log) -> PassResult:
        """Copy every eligible segment of ``log`` in order; stops at the first failure (retried next run)."""
        result = PassResult()
        if log.config.remote_log_copy_disable or not log.config.remote_storage_enable:
            return result
        if self.cancelled is not None:
            logger.debug("copies of %s are stopped: %s", log.name, self.cancelled)
            return result
        with self.lock:
            if log.is_closed:  # (deleted while this run waited for the lock)
                return result
            if not self._owned(log, result):
                return result
            owned_at = time.monotonic()
            loaded = not self._cleaned_stale  # the first run's cleanup lists the partition's metadata anew
            try:
                result.stale_copies_cleaned += self._cleanup_stale_copies(log)
            except Exception:
                # The store is down (an outage): the copies below fail too, and the next run tries again.
                logger.warning("cleanup of failed copies of %s failed; retried at the next pass", log.name, exc_info=True)
            candidates = candidate_segments(self.parts, self.tip, log)
            if candidates and not loaded:
                if not self._refreshed(log, result):
                    return result
                candidates = candidate_segments(self.parts, self.tip, log)
            self._set_lag(log, candidates)
            lag_bytes = sum(s.size for s, _ in candidates)
            # The run's ownership check (above) stands for its first segment when nothing was deleted since: a second
            # LIST of the owner records a few milliseconds later was a third of a short run's requests (profiled).
            checked = result.stale_copies_cleaned == 0 and time.monotonic() - owned_at < _RUN_CHECK_STANDS_S
            i = 0
            while i < len(candidates):
                seg = candidates[i][0]
                if self._stopping.is_set():
                    logger.info("stopping: the copy of %s ends before segment %d", log.name, seg.base_offset)
                    break
                if log.config.remote_log_copy_disable or not log.config.remote_storage_enable:
                    break  # turned off while this run copied: a copy landing now would be deleted again (KIP-950)
                if not checked and not self._owned(log, result):
                    break  # another data dir claimed the partition since the run began
                checked = False
                # One segment, or several in one request to the copier process (see _copy_batch).
                copied, error = self._copy_segments(log, candidates[i : i + self._segments_per_request])
                for done, after in copied:
                    self.copied_to = max(self.copied_to, after.base_offset - 1)
                    result.segments_copied += 1
                    result.bytes_copied += done.size
                    lag_bytes -= done.size
                i += len(copied)
                self._set_lag_to(log, len(candidates) - i, lag_bytes)  # a long run's gauges move as it copies
                if error is None:
                    if not copied:  # a batch the copier process stopped before its first segment (stopping)
                        break
                    continue
                if isinstance(error, NotPartitionOwnerError):
                    self._owned(log, result)  # (the guard says it, once, and counts the partition as not owned)
                    break
                result.copy_errors += 1
                if isinstance(error, CustomMetadataSizeExceededError):
                    self.cancelled = str(error)
                    logger.error(
                        "copies of %s to the remote tier are stopped until the next restart: %s (the copied objects "
                        "were deleted; raise the limit or fix the plugin)", log.name, error,
                    )
                else:
                    # the cause on the line itself (ENOSPC, EROFS, a store's error): without -v the traceback is not
                    # shown, and `tiered run` said only "failed" at every interval
                    logger.error("copy of segment %d of %s to the remote tier failed: %s", candidates[i][0].base_offset,
                                 log.name, one_line_cause(error), exc_info=error)
                break
            self.copied_to = highest_offset_in_remote_storage(self.parts, self.tip)
            self._set_lag(log, segments_to_copy(log, self.copied_to))
            if result.segments_copied:
                self.parts.update_log_size(self.tip)
            if (self._columnar is not None and log.config.remote_log_columnar_enable and not self._stopping.is_set()
                    and not result.not_owned):  # (a run that found the partition lost keeps no copy of it)
                self._keep_columnar(log)
        return result

    def _keep_columnar(self, log: Log) -> None:
        """The columnar copy's step of the run (still under the lock, ownership checked): a failure is logged and
        retried at the next run; the segment copies are not affected."""
        assert self._columnar is not None
        try:
            self._columnar.keep(log, self.tip, self._stopping)
        except Exception as exc:
            logger.warning("keeping the columnar copy of %s failed (%s: %s); retried at the next pass", log.name,
                           type(exc).__name__, exc, exc_info=logger.isEnabledFor(logging.DEBUG))

    def _owned(self, log: Log, result: PassResult) -> bool:
        """Whether this data dir (still) owns the partition's remote data, claiming it when nobody has
        (:mod:`tiered.ownership`); the guard logs the ERROR when it is lost. A store error counts as a copy error."""
        try:
            self.parts.ownership.ensure_owner(log, self.tip)
        except (NotPartitionOwnerError, RemoteStoreMismatchError):
            result.not_owned += 1
            return False
        except Exception as exc:
            result.copy_errors += 1
            logger.warning("cannot check the ownership of %s's remote data (%s); retried at the next pass", log.name,
                           one_line_cause(exc), exc_info=logger.isEnabledFor(logging.DEBUG))
            return False
        return True

    def _refreshed(self, log: Log, result: PassResult) -> bool:
        """Before a copy, the partition's metadata as the store holds it now, and ownership checked against it: a data
        dir holding this one's claim (a copy of it, run beside it) may have copied segments since this process
        loaded the partition. One of other records than the local segment at its offsets fences the partition (the
        content check, :mod:`tiered.ownership`); one of the same records counts as copied. False when nothing may be
        copied this run (a store error counts as a copy error)."""
        try:
            self.parts.metadata.refresh(self.tip)
        except Exception as exc:
            result.copy_errors += 1
            logger.warning("cannot list the remote metadata of %s before copying (%s); retried at the next pass",
                           log.name, one_line_cause(exc), exc_info=logger.isEnabledFor(logging.DEBUG))
            return False
        return self._owned(log, result)

    def _set_lag(self, log: Log, candidates: list[tuple[LogSegment, LogSegment]]) -> None:
        self._set_lag_to(log, len(candidates), sum(s.size for s, _ in candidates))

    def _set_lag_to(self, log: Log, segments: int, size: int) -> None:
        metrics = self.parts.metrics
        metrics.copy_lag_segments.labels(log.topic, log.partition).set(segments)
        metrics.copy_lag_bytes.labels(log.topic, log.partition).set(size)

    def _copy_segments(
        self, log: Log, segments: list[tuple[LogSegment, LogSegment]]
    ) -> tuple[list[tuple[LogSegment, LogSegment]], Exception | None]:
        """Copy ``segments`` in order (one, unless a batch copier copies several in one request); the ones copied,
        and the error that stopped the others (None when all were)."""
        if self._copy_batch is None or len(segments) == 0:
            try:
                self._copy_segment(log, *segments[0])
            except Exception as exc:
                return [], exc
            return segments[:1], None
        return self._copy_batch_of(log, segments)

    def _new_metadata(self, log: Log, seg: LogSegment, nxt: LogSegment) -> RemoteLogSegmentMetadata:
        parts = self.parts
        return RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(self.tip),
            seg.base_offset,
            nxt.base_offset - 1,
            # Kafka's segment.largestTimestamp(): the max timestamp, or the file's mtime when no record has one
            # (-1 here would make the first remote retention pass delete the segment at once).
            seg.largest_timestamp,
            parts.broker_id,
            parts.time.milliseconds(),
            seg.size,
            segment_leader_epochs(log, seg.base_offset, nxt.base_offset),
        )

    def _copy_batch_of(
        self, log: Log, segments: list[tuple[LogSegment, LogSegment]]
    ) -> tuple[list[tuple[LogSegment, LogSegment]], Exception | None]:
        """``segments`` copied by the copier process in ONE request (CopyBatch): for each in order, its
        COPY_SEGMENT_STARTED event, checksums, objects and COPY_SEGMENT_FINISHED event, stopping at the first
        failure. Then this process records in its metadata view the events the child wrote, and cleans up the
        segment that failed as _copy_segment does. Under load, each request costs this process a few waits for the
        GIL (see tiered.copier_process): one per batch instead of several per segment is what lets the copy keep up
        with a writer on a busy machine."""
        parts, batch = self.parts, self._copy_batch
        assert batch is not None
        now = parts.time.milliseconds()
        state = log.remote_log_state  # (the claim the run checked: a newer one stops the batch before its FINISHED)
        owner_epoch = max(state.owner_epoch, state.pending_owner_epoch)
        jobs: list[CopyJob] = []
        with contextlib.ExitStack() as scratches:
            for seg, nxt in segments:
                parts.metrics.copy_requests.inc()
                md = self._new_metadata(log, seg, nxt)
                self._quota.acquire(seg.size)
                try:
                    data = segment_data(log, seg, nxt, scratches.enter_context(_Scratch()),
                                        synced_by_copier=log.recovery_point < nxt.base_offset)
                except Exception as exc:
                    if not jobs:
                        return [], exc
                    break  # the segments before it go in this request; it is tried again in the next
                jobs.append(CopyJob(md, data, self._checksum_chunk_bytes, self._custom_metadata_max_bytes, now,
                                    sync=log.recovery_point < nxt.base_offset, owner_epoch=owner_epoch))
            try:
                outcome = batch.copy(jobs)
            except Exception as exc:
                # The child died or the pipe broke: any of these events may have landed. Purged at the next run.
                for job in jobs:
                    self._failed_copies[job.metadata.remote_log_segment_id.id] = job.metadata
                parts.metrics.copy_errors.inc()
                return [], exc
        copied: list[tuple[LogSegment, LogSegment]] = []
        for job, (checksums, custom) in zip(jobs, outcome.copied, strict=False):
            md = job.metadata
            batch.record(md)
            batch.record(md.create_with_updates(RemoteLogSegmentMetadataUpdate(
                md.remote_log_segment_id, now, custom, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, parts.broker_id,
            )), checksums)
            seg, nxt = segments[len(copied)]
            self._copied(log, md, seg)
            copied.append((seg, nxt))
        failure = outcome.failure
        if failure is None:
            return copied, None
        md = jobs[len(copied)].metadata
        if failure.stage != "owner":  # (a newer claim is no copy error: the partition is not owned any more)
            parts.metrics.copy_errors.inc()
        if failure.started_landed:
            batch.record(md)  # its COPY_SEGMENT_STARTED is in the store: delete what it left (as _copy_segment)
            self._remove_failed_copy(md)
        else:
            self._failed_copies[md.remote_log_segment_id.id] = md  # its STARTED event may have landed
        for job in jobs[len(copied) + 1 : len(copied) + 1 + outcome.abandoned]:
            batch.record(job.metadata)  # uploaded after the failed one: never FINISHED, deleted now
            self._remove_failed_copy(job.metadata)
        return copied, failure.error(md, self._custom_metadata_max_bytes)

    def _copied(self, log: Log, md: RemoteLogSegmentMetadata, seg: LogSegment) -> None:
        if not log.has_remote_data:
            log.note_highest_remote_offset(md.end_offset)  # see _copy_segment
        self.parts.metrics.copy_bytes.inc(seg.size)
        logger.info("copied segment %d-%d of %s to the remote tier as %s", md.start_offset, md.end_offset, log.name,
                    md.remote_log_segment_id)

    def _copy_segment(self, log: Log, seg: LogSegment, nxt: LogSegment) -> None:
        parts = self.parts
        parts.metrics.copy_requests.inc()
        end_offset = nxt.base_offset - 1
        segment_id = RemoteLogSegmentId.generate_new(self.tip)
        md = RemoteLogSegmentMetadata(
            segment_id,
            seg.base_offset,
            end_offset,
            # Kafka's segment.largestTimestamp(): the max timestamp, or the file's mtime when no record has one
            # (-1 here would make the first remote retention pass delete the segment at once).
            seg.largest_timestamp,
            parts.broker_id,
            parts.time.milliseconds(),
            seg.size,
            segment_leader_epochs(log, seg.base_offset, nxt.base_offset),
        )
        try:
            parts.metadata.add_remote_log_segment_metadata(md)
        except Exception:
            # The STARTED event may have reached the store even though the put failed here: the next run purges it.
            self._failed_copies[segment_id.id] = md
            raise
        self._quota.acquire(seg.size)
        try:
            with _Scratch() as scratch:
                data = segment_data(log, seg, nxt, scratch)
                checksums, custom = self._copy_data(md, data, self._checksum_chunk_bytes)
                if custom is not None and len(custom) > self._custom_metadata_max_bytes:
                    raise CustomMetadataSizeExceededError(
                        f"custom metadata of {len(custom)} bytes for {segment_id} exceeds "
                        f"remote.log.metadata.custom.metadata.max.bytes={self._custom_metadata_max_bytes}",
                        size=len(custom),
                    )
            # Owned still, now the objects are up (a segment's upload to S3 can take minutes): a claim made
            # meanwhile keeps this copy from counting, as the copier process checks before its FINISHED events.
            parts.ownership.ensure_owner(log, self.tip)
            parts.metadata.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(
                    segment_id, parts.time.milliseconds(), custom, RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                    parts.broker_id,
                ),
                checksums=checksums,
            )
        except Exception as exc:
            if not isinstance(exc, NotPartitionOwnerError):  # (a newer claim is no copy error)
                parts.metrics.copy_errors.inc()
            self._remove_failed_copy(md)
            raise
        if not log.has_remote_data:
            # The partition dir remembers at once that it has remote data (local.remote_state). The highest offset
            # there is kept up to date by local retention (Log._deletable_segments notes it before deleting), not
            # here: two fsyncs under the log lock per segment were a third of the copy's time under load.
            log.note_highest_remote_offset(end_offset)
        parts.metrics.copy_bytes.inc(seg.size)
        logger.info("copied segment %d-%d of %s to the remote tier as %s", seg.base_offset, end_offset, log.name, segment_id)

    def _remove_failed_copy(self, md: RemoteLogSegmentMetadata) -> None:
        """Delete what a failed copy attempt uploaded and its metadata (Kafka's copy task does the same); when that
        fails too (the store is down), the segment stays COPY_SEGMENT_STARTED or DELETE_SEGMENT_STARTED in the
        metadata store's view, where the next run finds it and deletes it."""
        try:
            self.parts.delete_remote_segment(md, reason="failed copy")
        except Exception:
            logger.warning("cleanup of the failed copy %s failed; retried at the next pass", md.remote_log_segment_id,
                           exc_info=True)

    def _fenced_others(self, log: Log) -> bool:
        """Before the first run deletes copies left COPY_SEGMENT_STARTED: a copy of this data dir (a cloned machine,
        a restored backup) started beside it holds the same claim, and such a copy may be its copy under way, not one
        a crash left. Unless this process made the claim it holds, the data dir claims the partition at the next
        owner epoch first (:meth:`tiered.ownership.OwnershipGuard.renew`, as ``tiered run`` does at its start): the
        other process is fenced, and the copy it finishes does not count (it finds its deletion in the store,
        :func:`tiered.metadata.check_copy_not_deleted`). False where no such claim is made: this data dir lost the
        partition meanwhile (the run's next ownership check says so), or the remote tier reaches past its log end (a
        data dir restored from a backup older than the copies since: its claim would drop them). True where the
        metadata manager keeps no owner records (nothing to fence with: the copies are deleted as before)."""
        renewed = self.parts.ownership.renew(log, self.tip)  # (none made when this process made the claim it holds)
        if renewed is not None:
            return renewed.state == OWNER
        listing = getattr(self.parts.metadata, "owner_records", None)
        return listing is None or not listing(self.tip)

    def _cleanup_stale_copies(self, log: Log) -> int:
        """Copies that never finished: at the task's first run, every COPY_SEGMENT_STARTED (or
        DELETE_SEGMENT_STARTED) in the store (a crash mid-copy); at every run, the failed attempts of this process
        whose cleanup failed (an outage), so none waits for a restart. Called under the task's lock, so no copy of
        this partition is under way in this process.

        A copy left STARTED whose records are no longer in the local log is not deleted: local retention removes
        only what was copied, so its COPY_SEGMENT_FINISHED event was written and is gone since (deleted, or damaged
        past reading: :meth:`tiered.metadata.RemoteLogMetadataStore.find_stale_copies` keeps those out already),
        and its objects may be the only copy of its records. It is said in an error at each pass instead."""
        parts = self.parts
        if not self._cleaned_stale:
            stale = {md.remote_log_segment_id.id: md for md in parts.metadata.find_stale_copies(self.tip)}
            reason = "stale copy left by a crash"
            started = [md for md in stale.values() if md.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED]
            if started and self._fenced_others(log):
                # Listed again now that no other process holds the claim: a copy the fenced process finished between
                # the listing and the claim is FINISHED now, and it may count it (a helper lost 5500 records so).
                stale = {md.remote_log_segment_id.id: md for md in parts.metadata.find_stale_copies(self.tip)}
            elif started:
                # Never deleted without a fence: they may be another process's copies under way (garbage at worst).
                logger.warning("%d remote segment(s) of %s left COPY_SEGMENT_STARTED (e.g. %s, offsets %d-%d) are not "
                               "deleted: this data dir could not claim the partition at a new owner epoch first, and "
                               "they may be copies another process holding its claim has under way", len(started),
                               log.name, started[0].remote_log_segment_id.id, started[0].start_offset,
                               started[0].end_offset)
                for md in started:
                    del stale[md.remote_log_segment_id.id]
        else:
            stale = {md.remote_log_segment_id.id: md for md in parts.metadata.unfinished_segments(self.tip)}
            reason = "failed copy left by an earlier pass"
        first = log.segments.first_segment
        local_start = first.base_offset if first is not None else log.log_end_offset  # (where local records begin)
        for sid, md in list(stale.items()):
            if md.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED and md.start_offset < local_start:
                del stale[sid]
                logger.error(
                    "remote segment %s (offsets %d-%d) of %s is left COPY_SEGMENT_STARTED, but the local log starts "
                    "at %d: its copy finished once (local retention removed its records) and its COPY_SEGMENT_FINISHED "
                    "event is gone. It is not deleted (its objects may be the only copy of those records); run "
                    "tiered verify --remote, and restore the event or remove the segment's objects by hand",
                    sid, md.start_offset, md.end_offset, log.name, local_start)
        failed = self._failed_copies
        cleaned = 0
        for sid, md in list(stale.items()):
            # False: the expiration task is deleting it (DELETE_SEGMENT_STARTED is its state meanwhile) or did.
            cleaned += parts.delete_remote_segment(md, reason=reason)
            failed.pop(sid, None)
        for sid, md in list(failed.items()):
            # Not in the store's view: its STARTED event was never acknowledged. Delete whatever may exist.
            logger.info("purging the failed copy %s (%d-%d)", md.remote_log_segment_id, md.start_offset, md.end_offset)
            parts.rsm.delete_log_segment_data(md)
            parts.metadata.purge(md)
            del failed[sid]
            cleaned += 1
        self._cleaned_stale = True
        return cleaned




def segment_leader_epochs(log: Log, start: int, next_offset: int) -> dict[int, int]:
    """The leader epochs of ``log``'s offsets ``[start, next_offset)``, each with its first offset there."""
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


class _Scratch:
    """A temporary directory made on first use (most copies need none) and removed at exit (a killed process's: by
    the next process's first one, see :mod:`local.scratch`)."""

    def __init__(self) -> None:
        self._dir: ScratchDir | None = None

    def __call__(self) -> Path:
        if self._dir is None:
            self._dir = ScratchDir("tiered-copy-")
        return self._dir.path

    def __enter__(self) -> _Scratch:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._dir is not None:
            self._dir.cleanup()


def segment_data(
    log: Log, seg: LogSegment, nxt: LogSegment, scratch: Callable[[], Path], *, synced_by_copier: bool = False
) -> LogSegmentData:
    """The files of ``seg`` to upload (an empty producer snapshot written to ``scratch()``, a temporary directory,
    when the log has none). Made durable and trimmed first (the roll's background flush usually did it already: a
    flush is then no call at all); with ``synced_by_copier`` only trimmed here, the copier process syncing the files
    before it reads them (tiered.copier_process: fsyncs here are long waits for the GIL under load). The indexes go
    by path, not opened for the copy (an open index holds a file descriptor and a map for as long as its segment
    lives)."""
    if synced_by_copier:
        if seg.trims_pending:
            seg.trim_inactive()
    elif log.recovery_point < nxt.base_offset or seg.trims_pending:
        log.flush(nxt.base_offset)
    snapshot = log.producer_state_manager.fetch_snapshot(nxt.base_offset)
    if snapshot is None:
        # Older segments may have lost their snapshot to retention; an empty one keeps the copy going.
        logger.warning("no producer snapshot at %d for %s: uploading an empty one", nxt.base_offset, log.name)
        snapshot = filenames.producer_snapshot_file(scratch(), nxt.base_offset)
        snapshot.write_bytes(EMPTY_PRODUCER_SNAPSHOT)
    from local.checkpoint import encode_leader_epoch_checkpoint

    entries = [e for e in log.leader_epoch_cache.epoch_entries() if e.start_offset < nxt.base_offset]
    txn_path = seg.txn_index.path
    try:
        has_txn = txn_path.stat().st_size > 0
    except FileNotFoundError:
        has_txn = False
    return LogSegmentData(
        log_segment=seg.log.path,
        offset_index=seg.offset_index_path,
        time_index=seg.time_index_path,
        transaction_index=txn_path if has_txn else None,
        producer_snapshot_index=snapshot,
        leader_epoch_index=encode_leader_epoch_checkpoint(entries),
    )
