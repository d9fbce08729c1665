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

Ownership (:mod:`tiered.ownership`): a run first makes sure this data dir owns the partition's remote data (claiming
it when nobody has), and again before each segment; a data dir that lost it copies nothing (``not_owned``).

One task per partition (the :class:`tiered.remote_log_manager.RemoteLogManager` keeps them), holding the
partition's copy state; its runs are serialised by its lock, apart from the expiration task's.
"""

from __future__ import annotations

import itertools
import logging
import tempfile
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from local import filenames
from tiered.checksums import compute_segment_checksums
from tiered.errors import CustomMetadataSizeExceededError, NotPartitionOwnerError, RemoteStoreMismatchError
from tiered.rlm_parts import PassResult, RateLimiter, RemoteTierParts
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

logger = logging.getLogger(__name__)

EMPTY_PRODUCER_SNAPSHOT = bytes.fromhex("000148674bc700000000")

CopyData = Callable[[RemoteLogSegmentMetadata, LogSegmentData], "bytes | None"]


def highest_offset_in_remote_storage(parts: RemoteTierParts, tip: TopicIdPartition) -> int:
    return max((md.end_offset for md in parts.finished_segments(tip)), default=-1)


def candidate_segments(parts: RemoteTierParts, tip: TopicIdPartition, log: Log) -> list[tuple[LogSegment, LogSegment]]:
    """Non-active segments of ``log`` (with the segment after each) eligible for copy, oldest first."""
    from_offset = max(highest_offset_in_remote_storage(parts, tip) + 1, log.log_start_offset)
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
    ) -> None:
        self.parts = parts
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
        result = self.copy_log_segments(log)
        self._record(result)
        return result

    def copy_log_segments(self, log: Log) -> PassResult:
        """Copy every eligible segment of ``log`` in order; stops at the first failure (retried next run)."""
        result = PassResult()
        if log.config.remote_log_copy_disable:
            return result
        if self.cancelled is not None:
            logger.debug("copies of %s are stopped: %s", log.name, self.cancelled)
            return result
        with self.lock:
            if not self._owned(log, result):
                return result
            try:
                result.stale_copies_cleaned += self._cleanup_stale_copies()
            except Exception:
                # The store is down (an outage): the copies below fail too, and the next run tries again.
                logger.warning("cleanup of failed copies of %s failed; retried at the next pass", log.name, exc_info=True)
            candidates = candidate_segments(self.parts, self.tip, log)
            self._set_lag(log, candidates)
            for seg, nxt in candidates:
                if self._stopping.is_set():
                    logger.info("stopping: the copy of %s ends before segment %d", log.name, seg.base_offset)
                    break
                if not self._owned(log, result):
                    break  # another data dir claimed the partition since the run began
                try:
                    self._copy_segment(log, seg, nxt)
                except CustomMetadataSizeExceededError as exc:
                    result.copy_errors += 1
                    self.cancelled = str(exc)
                    logger.error(
                        "copies of %s to the remote tier are stopped until the next restart: %s (the copied objects "
                        "were deleted; raise the limit or fix the plugin)", log.name, exc,
                    )
                    break
                except Exception:
                    result.copy_errors += 1
                    logger.exception("copy of segment %d of %s to the remote tier failed", seg.base_offset, log.name)
                    break
                result.segments_copied += 1
                result.bytes_copied += seg.size
            self._set_lag(log, candidate_segments(self.parts, self.tip, log))
            if result.segments_copied:
                self.parts.update_log_size(self.tip)
        return result

    def _owned(self, log: Log, result: PassResult) -> bool:
        """Whether this data dir (still) owns the partition's remote data, claiming it when nobody has
        (:mod:`tiered.ownership`); the guard logs the ERROR when it is lost. A store error counts as a copy error."""
        try:
            self.parts.ownership.ensure_owner(log, self.tip)
        except (NotPartitionOwnerError, RemoteStoreMismatchError):
            result.not_owned += 1
            return False
        except Exception:
            result.copy_errors += 1
            logger.warning("cannot check the ownership of %s's remote data; retried at the next pass", log.name,
                           exc_info=True)
            return False
        return True

    def _set_lag(self, log: Log, candidates: list[tuple[LogSegment, LogSegment]]) -> None:
        metrics = self.parts.metrics
        metrics.copy_lag_segments.labels(log.topic, log.partition).set(len(candidates))
        metrics.copy_lag_bytes.labels(log.topic, log.partition).set(sum(s.size for s, _ in candidates))

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
            with tempfile.TemporaryDirectory(prefix="tiered-copy-") as tmp:
                data = segment_data(log, seg, nxt, Path(tmp))
                checksums = compute_segment_checksums(data, self._checksum_chunk_bytes)
                custom = self._copy_data(md, data)
                if custom is not None and len(custom) > self._custom_metadata_max_bytes:
                    raise CustomMetadataSizeExceededError(
                        f"custom metadata of {len(custom)} bytes for {segment_id} exceeds "
                        f"remote.log.metadata.custom.metadata.max.bytes={self._custom_metadata_max_bytes}",
                        size=len(custom),
                    )
            parts.metadata.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(
                    segment_id, parts.time.milliseconds(), custom, RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                    parts.broker_id,
                ),
                checksums=checksums,
            )
        except Exception:
            parts.metrics.copy_errors.inc()
            self._remove_failed_copy(md)
            raise
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

    def _cleanup_stale_copies(self) -> int:
        """Copies that never finished: at the task's first run, every COPY_SEGMENT_STARTED (or
        DELETE_SEGMENT_STARTED) in the store (a crash mid-copy); at every run, the failed attempts of this process
        whose cleanup failed (an outage), so none waits for a restart. Called under the task's lock, so no copy of
        this partition is under way in this process."""
        parts = self.parts
        if not self._cleaned_stale:
            stale = {md.remote_log_segment_id.id: md for md in parts.metadata.find_stale_copies(self.tip)}
            reason = "stale copy left by a crash"
        else:
            stale = {md.remote_log_segment_id.id: md for md in parts.metadata.unfinished_segments(self.tip)}
            reason = "failed copy left by an earlier pass"
        failed = self._failed_copies
        cleaned = 0
        for sid, md in list(stale.items()):
            parts.delete_remote_segment(md, reason=reason)
            failed.pop(sid, None)
            cleaned += 1
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


def segment_data(log: Log, seg: LogSegment, nxt: LogSegment, tmp: Path) -> LogSegmentData:
    """The files of ``seg`` to upload (an empty producer snapshot written to ``tmp`` when the log has none)."""
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
