"""RemoteLogManager: the remote tier as a LogManager sees it, a small façade over its parts.

Kafka's ``RemoteLogManager`` for one node, in our words. It implements :class:`local.remote.RemoteTier`, so a
:class:`local.log.Log` consults it for offsets below its local log start offset, and local retention deletes a
segment only once its remote copy is FINISHED. It is handed its parts, built once by the composition root
(:func:`tiered.composition.assemble_remote_log_manager`), delegates to them and closes them:

- reads, the timestamp scan and aborted transactions: :class:`tiered.remote_log_reader.RemoteLogReader` (also
  usable alone: :attr:`RemoteLogManager.reader`), over the segment cache
  (:class:`tiered.cache.segment_cache.RemoteSegmentCache`) and the :class:`tiered.cache.index_cache.RemoteIndexCache`;
- copy: one :class:`tiered.rlm_copy.RLMCopyTask` per partition (holding the partition's copy state);
- remote retention: one :class:`tiered.rlm_expiration.RLMExpirationTask` per partition;
- what they share (metadata store, caches, ownership): :mod:`tiered.remote_tier_parts`; the metrics
  (:mod:`tiered.rlm_metrics`), the delete protocol (:mod:`tiered.remote_deletion`);
- one writer per partition across machines sharing the store: :class:`tiered.ownership.OwnershipGuard`
  (:attr:`RemoteLogManager.ownership`), asked before every copy and deletion.

Scheduling (:mod:`tiered.rlm_tasks`): a LogManager with the remote tier calls :meth:`RemoteLogManager.start_tasks`
when its scheduler starts; each remote-enabled partition's copy and expiration tasks then run every
``remote.log.manager.task.interval.ms`` on the copier and expiration pools
(``remote.log.manager.copier.thread.pool.size`` / ``remote.log.manager.expiration.thread.pool.size``), schedulers
of the remote tier's clock (a ``MockTime`` runs them as a test advances it).
``tiered offload`` runs the same task objects once (:meth:`RemoteLogManager.run_once`). With
``remote.log.manager.copier.process.enable`` the plugin's copy runs in a child process (:mod:`tiered.copier_process`,
which says why).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from local.fetch import FetchDataInfo, FetchIsolation, TimestampAndOffset
from tiered.checksums import (
    ChecksumVerifier,
    SegmentChecksums,
    compute_segment_checksums,
)
from tiered.errors import one_line_cause
from tiered.pass_result import PassResult
from tiered.rate_limiter import RateLimiter
from tiered.remote_log_reader import RemoteLogReader
from tiered.remote_tier_parts import RemoteTierParts, topic_id_partition
from tiered.rlm_copy import (
    CopyBatch,
    CopyData,
    RLMCopyTask,
    candidate_segments,
    highest_offset_in_remote_storage,
)
from tiered.rlm_expiration import RLMExpirationTask
from tiered.rlm_tasks import RLMTaskScheduler, remote_tasks_run, tiering_enabled
from tiered.rsm import LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageManager, TopicIdPartition

if TYPE_CHECKING:

    from local.log import Log
    from local.segment import LogSegment
    from tiered.cache.chunk_cache import ChunkCache
    from tiered.columnar.keeper import ColumnarKeeper
    from tiered.copier_process import ProcessCopier

__all__ = ["PassResult", "RemoteLogManager"]

logger = logging.getLogger(__name__)


class RemoteLogManager:
    """See the module docstring. Implements ``local.remote.RemoteTier``."""

    def __init__(
        self,
        parts: RemoteTierParts,
        reader: RemoteLogReader,
        *,
        rsm: RemoteStorageManager,
        checksums: ChecksumVerifier,
        copy_quota: RateLimiter,
        checksum_chunk_bytes: int,
        chunk_cache: ChunkCache | None = None,
        custom_metadata_max_bytes: int = 128,
        copier_threads: int = 10,
        expiration_threads: int = 10,
        task_interval_ms: int = 30_000,
        process_copier: ProcessCopier | None = None,
        copy_batch: CopyBatch | None = None,
        columnar: ColumnarKeeper | None = None,
    ) -> None:
        """Every part is built by the composition root (:func:`tiered.composition.assemble_remote_log_manager`)
        and handed over here; the manager closes what it is handed (:meth:`close`)."""
        self.rsm = rsm  # the plugin itself (parts.rsm may be a proxy deleting through the copier process)
        self.parts = parts
        self.metadata = parts.metadata
        self.index_cache = parts.index_cache
        self.segments = parts.segments
        self.metrics = parts.metrics
        self.ownership = parts.ownership
        self.time = parts.time  # the clock of the scheduled tasks (and of the metadata events' timestamps)
        self.reader = reader
        self.checksums = checksums
        self.chunk_cache = chunk_cache
        self.custom_metadata_max_bytes = custom_metadata_max_bytes
        self.copier_threads = max(1, copier_threads)
        self.expiration_threads = max(1, expiration_threads)
        self.task_interval_ms = task_interval_ms
        # crc32c chunk size of new copies' checksums (tiered.checksums); verifies fetches of segments that have them.
        # The composition root fits it to the segment cache's chunks; nothing here knows their size.
        self.checksum_chunk_bytes = checksum_chunk_bytes
        self._copy_quota = copy_quota
        self._partition_tasks: dict[TopicIdPartition, tuple[RLMCopyTask, RLMExpirationTask]] = {}
        self._partition_tasks_lock = threading.Lock()
        # The start's claims at new owner epochs (renew_ownership_behind): each partition's, set once settled, and
        # until when (time.monotonic()) reads and writes wait for them.
        self._claims_lock = threading.Lock()
        self._claims_awaited: dict[TopicIdPartition, threading.Event] = {}
        self._claims_held_until = 0.0
        self._task_scheduler: Any = None  # tiered.rlm_tasks.RLMTaskScheduler while the tasks run
        # Set by request_stop/stop_tasks: a copy task ends after the segment in flight (Kafka's isCancelled() check
        # between segments), so a stop waits for one segment copy per partition, not for the whole backlog.
        self._stopping = threading.Event()
        self._tasks_lock = threading.Lock()
        self.task_totals = PassResult()  # what the scheduled tasks did since start (tiered run reports it)
        self._closed = False
        # The checksums and the plugin's copy_log_segment_data, here or in a child process (tiered.copier_process).
        self._process_copier = process_copier
        self._copy_data: CopyData = process_copier.copy_with_checksums if process_copier is not None else self._copy_here
        # Batch copies through the copier process, events included (None: one by one).
        self._copy_batch = copy_batch
        # The columnar (Parquet) copies the copy tasks keep (tiered.columnar), or None.
        self.columnar = columnar

    @property
    def process_copier(self) -> ProcessCopier | None:
        """The child process the plugin's copies run in (``remote.log.manager.copier.process.enable``), or None."""
        return self._process_copier

    def _copy_here(
        self, md: RemoteLogSegmentMetadata, data: LogSegmentData, checksum_chunk_bytes: int
    ) -> tuple[SegmentChecksums, bytes | None]:
        return compute_segment_checksums(data, checksum_chunk_bytes), self.rsm.copy_log_segment_data(md, data)

    # ------------------------------------------------------------------------------------------------------
    # Identity and the partitions' tasks

    @staticmethod
    def topic_id_partition(log: Log) -> TopicIdPartition:
        return topic_id_partition(log)

    def finished_segments(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """FINISHED copies of a partition, ordered by start offset."""
        return self.parts.finished_segments(tip)

    def _tasks(self, log: Log) -> tuple[RLMCopyTask, RLMExpirationTask]:
        """The partition's copy and expiration tasks (made on first use, kept for the manager's life)."""
        tip = topic_id_partition(log)
        with self._partition_tasks_lock:
            tasks = self._partition_tasks.get(tip)
            if tasks is None:
                copy = RLMCopyTask(
                    self.parts, tip, copy_data=self._copy_data, quota=self._copy_quota,
                    custom_metadata_max_bytes=self.custom_metadata_max_bytes,
                    checksum_chunk_bytes=self.checksum_chunk_bytes, record=self.record_task_result,
                    stopping=self._stopping, copy_batch=self._copy_batch, columnar=self.columnar,
                    claim_settled=self._start_claim_settled,
                )
                expiration = RLMExpirationTask(self.parts, tip, record=self.record_task_result, columnar=self.columnar,
                                               check_stands_s=2 * self.task_interval_ms / 1000,
                                               claim_settled=self._start_claim_settled)
                tasks = self._partition_tasks[tip] = (copy, expiration)
            return tasks

    def known_copied_to(self, log: Log) -> int:
        """The last offset the partition's copy task knows copied (-1 when it has not run), with no request to the
        store: what the watcher's copy lag gauges count from (:func:`tiered.rlm_tasks.local_copy_lag`)."""
        with self._partition_tasks_lock:
            tasks = self._partition_tasks.get(topic_id_partition(log))
        return -1 if tasks is None else tasks[0].copied_to

    def copy_task(self, log: Log) -> RLMCopyTask:
        return self._tasks(log)[0]

    def expiration_task(self, log: Log) -> RLMExpirationTask:
        return self._tasks(log)[1]

    # ------------------------------------------------------------------------------------------------------
    # RemoteTier protocol

    def highest_offset_in_remote_storage(self, log: Log) -> int:
        """The highest offset the remote tier holds a copy of (local retention deletes only what is below): -1 when
        its segments hold other records than this data dir's at the same offsets (a copy of this data dir writing
        to the same bucket: :meth:`tiered.ownership.OwnershipGuard.trusts_remote_copies`), so none is deleted."""
        tip = topic_id_partition(log)
        if not self.ownership.trusts_remote_copies(log, tip):
            return -1
        return highest_offset_in_remote_storage(self.parts, tip)

    def read(
        self, log: Log, fetch_offset: int, max_bytes: int, isolation: FetchIsolation, min_one_message: bool
    ) -> FetchDataInfo:
        """See :meth:`tiered.remote_log_reader.RemoteLogReader.read`. A store that holds none of the partition's
        remote data (a wrong bucket or prefix) raises :class:`tiered.errors.RemoteStoreMismatchError`."""
        self.ownership.check_store(log, topic_id_partition(log), f"cannot read offset {fetch_offset} of {log.name}")
        return self.reader.read(log, fetch_offset, max_bytes, isolation, min_one_message)

    def offset_for_timestamp(self, log: Log, timestamp: int) -> TimestampAndOffset | None:
        self.ownership.check_store(log, topic_id_partition(log), f"cannot search {log.name} by timestamp")
        return self.reader.offset_for_timestamp(log, timestamp)

    def read_range(self, md: RemoteLogSegmentMetadata, start: int, end_inclusive: int) -> bytes | memoryview:
        """Bytes [start, end_inclusive] of the remote ``.log`` of ``md`` (shorter at the object's end): see
        :meth:`tiered.remote_log_reader.RemoteLogReader.read_range`."""
        return self.reader.read_range(md, start, end_inclusive + 1)

    # ------------------------------------------------------------------------------------------------------
    # Copy and expiration

    def candidate_segments(self, log: Log) -> list[tuple[LogSegment, LogSegment]]:
        """Non-active segments (with the segment after each) eligible for copy, oldest first."""
        return candidate_segments(self.parts, topic_id_partition(log), log)

    def copy_log_segments(self, log: Log) -> PassResult:
        """Copy every eligible segment of ``log`` in order (the partition's copy task, outside its schedule)."""
        return self.copy_task(log).copy_log_segments(log)

    def cleanup_remote_segments(self, log: Log) -> int:
        """Delete remote segments breaching retention (the partition's expiration task, outside its schedule)."""
        return self.expiration_task(log).cleanup_remote_segments(log)

    def copy_lag(self, log: Log) -> tuple[int, int]:
        """Kafka's RemoteCopyLagSegments and RemoteCopyLagBytes of ``log`` now: segments eligible for copy and not
        yet copied, and their bytes."""
        candidates = self.candidate_segments(log)
        return len(candidates), sum(seg.size for seg, _ in candidates)

    def run_once(self, logs: Iterable[Log]) -> PassResult:
        """One run of the copy task then the expiration task of every remote-enabled log (``tiered offload``):
        the same task objects the scheduled tasks run (:mod:`tiered.rlm_tasks`)."""
        total = PassResult()
        eligible = [log for log in logs if remote_tasks_run(log)]

        def one(log: Log) -> PassResult:
            copy, expiration = self._tasks(log)
            res = copy.run(log)
            res.segments_deleted += expiration.run(log).segments_deleted
            return res

        with ThreadPoolExecutor(self.copier_threads, thread_name_prefix="remote-log-copier") as pool:
            for res in pool.map(one, eligible):
                total.add(res)
        return total

    def renew_ownership(self, logs: Iterable[Log]) -> int:
        """Claim every remote-enabled partition this data dir owns again, at its next owner epoch
        (:meth:`tiered.ownership.OwnershipGuard.renew`; ``tiered run`` makes them at its start, behind its endpoints:
        :meth:`renew_ownership_behind`); how many were renewed. A partition whose claim cannot be made now (a store that does not answer) is
        logged and left at its claim: its passes check ownership as before."""
        return self._renew(_claimed(logs))

    def renew_ownership_behind(self, logs: Iterable[Log], hold_s: float) -> threading.Thread:
        """:meth:`renew_ownership` in a thread (started, returned), so that ``tiered run`` serves at once: until a
        partition's claim is settled (made, not needed, or failed), and for at most ``hold_s`` seconds from now,
        :meth:`awaiting_claim` holds its reads and writes, as Kafka serves a partition only once its leader is
        elected. The others are served meanwhile: a start with 2,000 partitions on S3 took 15 s to claim them all."""
        claimed = _claimed(logs)
        with self._claims_lock:
            self._claims_awaited = {topic_id_partition(log): threading.Event() for log in claimed}
            self._claims_held_until = time.monotonic() + hold_s
        renewing = threading.Thread(target=self._renew, args=(claimed,), name="remote-log-claims", daemon=True)
        renewing.start()
        return renewing

    def awaiting_claim(self, log: Log, wait_s: float = 0.0) -> bool:
        """Whether ``log``'s claim at a new owner epoch (:meth:`renew_ownership_behind`) is still being made, after
        waiting for it up to ``wait_s`` seconds (never past the start's hold): its reads and writes wait for it."""
        if not self._claims_awaited:  # (every claim settled: each fetch and produce asks)
            return False
        with self._claims_lock:
            settled = self._claims_awaited.get(topic_id_partition(log))
            held_until = self._claims_held_until
        remaining = held_until - time.monotonic()
        if settled is None or remaining <= 0:
            return False
        return not settled.wait(min(wait_s, remaining)) and time.monotonic() < held_until

    def _start_claim_settled(self, log: Log) -> None:
        """Wait until ``log``'s claim at a new owner epoch (:meth:`renew_ownership_behind`) is settled, never past the
        start's hold: a scheduled run of its copy or expiration task works under the new claim, not beside it."""
        self.awaiting_claim(log, wait_s=math.inf)

    def _claim_settled(self, log: Log) -> None:
        with self._claims_lock:
            settled = self._claims_awaited.pop(topic_id_partition(log), None)
        if settled is not None:
            settled.set()

    def _renew(self, claimed: list[Log]) -> int:
        store_failed = threading.Event()  # after the first store error no more are tried: a store down at start
        skipped: list[str] = []           # would hold the start back by a timeout per partition

        def one(log: Log) -> bool:
            try:
                if store_failed.is_set():
                    skipped.append(log.name)
                    return False
                return self.ownership.renew(log, topic_id_partition(log)) is not None
            except Exception as exc:
                store_failed.set()
                logger.warning("cannot claim %s's remote data at a new owner epoch (%s); it stays at owner epoch %d",
                               log.name, one_line_cause(exc), log.remote_log_state.owner_epoch)
                return False
            finally:
                self._claim_settled(log)

        with ThreadPoolExecutor(self.copier_threads, thread_name_prefix="remote-log-claim") as pool:
            renewed = sum(pool.map(one, claimed))
        if renewed:
            logger.info("claimed %d partition(s) at a new owner epoch", renewed)
        if skipped:
            logger.warning("%d more partition(s) were not claimed at a new owner epoch after that store error (they "
                           "stay at their claims), e.g. %s", len(skipped), skipped[0])
        return renewed

    @contextlib.contextmanager
    def tasks_held(self, logs: Iterable[Log], deadline: float) -> Iterator[None]:
        """Hold the copy and expiration tasks of ``logs`` for the block, whatever their topic's config now says (a
        copy started while the topic was tiered goes on after remote storage is turned off): a run in progress is
        waited for (a copy finishes its segment) until ``deadline`` (``time.monotonic()``), and none starts until the
        block ends. ``TimeoutError`` naming the partition when a run outlasts it. (A topic's deletion: a copy must not
        finish after the check that the partition holds no remote data.)"""
        held: list[threading.Lock] = []
        try:
            for log in logs:
                with self._partition_tasks_lock:
                    made = topic_id_partition(log) in self._partition_tasks
                if not made and not remote_tasks_run(log):
                    continue  # no run of its tasks in this process, and none to come
                copy, expiration = self._tasks(log)
                for lock in (copy.lock, expiration.lock):
                    if not lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                        raise TimeoutError(f"a remote copy or deletion of {log.name} is still running")
                    held.append(lock)
            yield
        finally:
            for lock in reversed(held):
                lock.release()

    def forget_deleted_partition(self, tip: TopicIdPartition, name: str, claim_id: str) -> None:
        """What the store holds of a partition whose topic was just deleted while it held no remote data (its owner
        records: a claim is written at the first pass, before any copy; a failed copy's cleaned-up metadata) is
        deleted, so that a later topic of the same name is the only one the bucket names. Only where no segment is
        listed (any state but deleted) and the newest claim is this data dir's (``claim_id``, its remote-log-state's);
        a failure is logged. Under the same condition, the partition's columnar copy goes too (``ColumnarKeeper.forget``)."""
        from tiered.metadata import RemoteLogMetadataStore

        with self._partition_tasks_lock:
            self._partition_tasks.pop(tip, None)  # (its tasks, held by the deletion, end with it)
        metadata = self.parts.metadata
        if not isinstance(metadata, RemoteLogMetadataStore):
            if self.columnar is not None:
                self.columnar.forget(tip)  # (no claims: the copy is this data dir's)
            return  # a metadata manager of the user's: what it keeps of a deleted topic is its own
        try:
            metadata.refresh(tip)
            owner = metadata.current_owner(tip)
            if owner is None or not claim_id or owner.owner_id != claim_id or metadata.list_remote_log_segments(tip):
                return
            if self.columnar is not None:
                # The deleted topic's Parquet copy, kept while the copy was on; only the owner's (a data dir that
                # attached the partition, or lost it, shares the directory with the owner and leaves its copy be).
                self.columnar.forget(tip)
            removed = metadata.purge_partition(tip, owner.owner_epoch)
            if not removed:
                return
            logger.info("%s: deleted the %d object(s) its topic's deletion left in the remote store (no remote data)",
                        name, removed)
        except Exception as exc:
            logger.warning("%s: the remote store's objects of the deleted partition (owner records) could not be "
                           "deleted (%s); they name a topic that no longer exists", name, one_line_cause(exc))

    def start_tasks(self, logs: Callable[[], Iterable[Log]]) -> None:
        """Start the copy and expiration tasks of every remote-enabled log that ``logs()`` returns, each run every
        ``remote.log.manager.task.interval.ms`` (the ``local.remote.RemoteTier`` hook a LogManager calls at start)."""
        with self._tasks_lock:
            if self._task_scheduler is not None or self._closed:
                return
            self._stopping.clear()
            if self._process_copier is not None:
                self._process_copier.resume()
            self._task_scheduler = RLMTaskScheduler(
                self, logs, self.task_interval_ms, self.copier_threads, self.expiration_threads, self.time
            )

    def request_stop(self) -> None:
        """Tell the copy tasks to end after the segment each is copying, without waiting (``tiered run`` and
        ``tiered offload`` call it when signalled; :meth:`stop_tasks` then waits for them)."""
        self._stop_copies()

    def _stop_copies(self) -> None:
        self._stopping.set()
        if self._process_copier is not None:
            self._process_copier.request_stop()  # a batch in the copier process starts no other segment

    def stop_tasks(self) -> None:
        """Stop the scheduled tasks, waiting for the runs in progress (a LogManager calls it before closing logs):
        a copy task finishes the segment it is copying and copies no more."""
        self._stop_copies()
        with self._tasks_lock:
            scheduler, self._task_scheduler = self._task_scheduler, None
        if scheduler is not None:
            scheduler.shutdown()

    @property
    def tasks_running(self) -> bool:
        return self._task_scheduler is not None

    def scheduled_partitions(self) -> list[str]:
        """The partitions whose tasks are scheduled (names), empty when the tasks are not running."""
        scheduler = self._task_scheduler
        return [] if scheduler is None else scheduler.partitions()

    def record_task_result(self, result: PassResult) -> None:
        with self._tasks_lock:
            self.task_totals.add(result)

    def task_totals_now(self) -> PassResult:
        """A copy of :attr:`task_totals` taken under its lock: never half of a run's result."""
        with self._tasks_lock:
            return dataclasses.replace(self.task_totals)

    def close(self) -> None:
        self.stop_tasks()
        if self._closed:
            return
        self._closed = True
        if self._process_copier is not None:
            self._process_copier.close()
        self.index_cache.close()
        self.segments.close()  # and the chunk cache under it
        self.metadata.close()
        self.rsm.close()


def _claimed(logs: Iterable[Log]) -> list[Log]:
    """The tiered logs whose partitions this data dir has claimed (the start claims them again)."""
    return [log for log in logs if tiering_enabled(log) and log.remote_log_state.claimed]
