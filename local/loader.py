"""Startup of one partition directory: Kafka's ``LogLoader``.

What a partition dir may hold after a crash, and what loading does about it, in Kafka's order:

1. ``*.deleted`` files (segments retention had renamed but not yet removed): deleted. ``.cleaned`` files (a
   cleaning or split that had not reached its swap): deleted, after every ``.swap`` file at or above the lowest
   ``.cleaned`` offset (the unfinished part of a split) is deleted too;
2. the remaining ``.swap`` files finished their swap: the regular files they replace, every file whose base
   offset lies in ``[lowest swap base, highest swap next offset)``, are deleted and the ``.swap`` files renamed
   to their plain names;
3. index files with no ``.log`` are deleted. Every segment is opened and sanity-checked (phase 1; when
   ``num.segment.loading.threads.per.data.dir`` is > 1, that many worker processes check the index files while
   this thread opens the segments, see :mod:`local.load_worker`); a missing or corrupt index
   means the segment is recovered, its indexes rebuilt from its log (phase 2: sequentially, in offset order,
   because recovering a segment replays the producer state of the segments before it);
   A segment below the recovery point (or after a clean shutdown) that this recovery cuts short while later
   segments follow (a closed segment truncated by hand, or its index pointing past its end) keeps those later
   segments, as Kafka does, and the offsets it lost up to the next segment's base offset are recorded in
   ``tiered-lost-offsets`` (:mod:`local.lost_offsets`) with an ERROR naming the file and the range: a hole is
   never silent;
4. after an unclean shutdown every segment from the recovery point on is recovered; the first one that had to
   truncate bytes (a torn or corrupt batch) deletes every later segment, so the log stays a prefix (an ERROR
   names the offsets lost with them, a torn tail of the last segment being a WARNING);
5. a log end offset below the log start offset (segment files deleted behind the broker's back) deletes every
   segment and starts empty at the log start offset;
6. the leader epoch cache is cut to the loaded offsets, the producer state rebuilt from the latest valid snapshot,
   and the active segment's indexes resized back to their maximum size. A ``leader-epoch-checkpoint`` that is
   missing while segments are there (deleted by hand) is rebuilt first from their batches' partition leader epochs
   (a WARNING says so): Kafka starts such a cache empty, and the next leader epoch then looked like the partition's
   first, so that the remote tier's expiration took every copy of an earlier epoch for one outside the lineage.

Once the large-index feature is finalized (``use_large_index``) an offset index rebuilt by recovery is written in
the 12-byte format; an intact 8-byte index keeps its format (KIP-1333).

Every fault found and every file deleted or renamed because of one is logged as a WARNING (an ERROR when offsets
are lost) naming the file and what was done, and counted in :class:`LoadStats`.
"""

from __future__ import annotations

import bisect
import logging
import os
import random
import threading
import time as _time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from local import filenames, load_worker, metrics
from local.errors import InvalidOffsetError, KafkaStorageError, KafkaStorageIOError
from local.index.entries import LARGE_OFFSET_ENTRY_SIZE, LEGACY_OFFSET_ENTRY_SIZE
from local.index.offset_index import LAST_ENTRY_PAST_LOG

# The byte-level index checks live with the indexes; re-exported here, where they used to be.
from local.index.offset_index import check_offset_index as check_offset_index
from local.index.sanity import check_segment_index_files as check_segment_index_files
from local.index.time_index import check_time_index as check_time_index
from local.lost_offsets import LOST_OFFSETS_FILENAME, LostOffsets, LostOffsetsSet
from local.producer_rebuild import rebuild_producer_state
from local.producer_state import ProducerStateManager
from local.scheduler import Time
from local.segment import LogSegment
from local.segments import LogSegments

if TYPE_CHECKING:
    from local.config import TopicConfig
    from local.epoch import LeaderEpochFileCache

logger = logging.getLogger(__name__)

# KRaft snapshots marked for deletion are the metadata log's business (Kafka's SNAPSHOT_DELETE_SUFFIX).
_KRAFT_SNAPSHOT_DELETED_SUFFIX = ".checkpoint.deleted"

_PHASE1_CHUNK = 256  # segments a phase-1 task checks

RemainingSegmentsCallback = Callable[[str, "int | None"], None]
"""``(thread name, remaining)`` sets that thread's ``remaining_segments_to_load``; ``remaining=None`` removes it."""


@dataclass(frozen=True, slots=True)
class LoadedLogOffsets:
    """The offsets a load ends with (Kafka's ``LoadedLogOffsets``, without the log end: the log reads it from its
    active segment)."""

    log_start_offset: int
    recovery_point: int


@dataclass(slots=True)
class LoadStats:
    """What one load did, for metrics, ``tiered status`` and tests. ``warnings`` repeats every WARNING logged."""

    segments_loaded: int = 0
    segments_recovered: int = 0
    segments_deleted: int = 0
    bytes_truncated: int = 0
    orphan_indexes_deleted: int = 0
    swap_files_recovered: int = 0
    offsets_lost: int = 0
    elapsed_ms: float = 0.0
    warnings: list[str] = field(default_factory=list)


class LogLoader:
    """Loads a partition directory into ``segments``; see the module docstring for the steps.

    ``log_start_offset`` and ``recovery_point`` are the checkpointed values (0 when unknown: everything is
    recovered after an unclean shutdown). ``remaining_segments_callback`` receives the per-thread count of
    segments still to load while ``num_segment_loading_threads`` > 1, and ``(thread, None)`` for every thread it
    was told about once loading ends, whether it succeeded or not. Every argument is given by :meth:`Log.open`,
    its one caller (no defaults of its own to drift from the log's).
    """

    def __init__(
        self,
        directory: Path,
        config: TopicConfig,
        *,
        segments: LogSegments,
        producer_state_manager: ProducerStateManager,
        leader_epoch_cache: LeaderEpochFileCache | None,
        log_start_offset: int,
        recovery_point: int,
        had_clean_shutdown: bool,
        time: Time,
        use_large_index: bool,
        num_segment_loading_threads: int,
        remote_storage_enabled: bool,
        remaining_segments_callback: RemainingSegmentsCallback | None,
        read_only: bool,
        lost_offsets: LostOffsetsSet,
        rebuild_leader_epochs: bool = False,
    ) -> None:
        if num_segment_loading_threads < 1:
            raise ValueError(
                f"num.segment.loading.threads.per.data.dir must be >= 1, got {num_segment_loading_threads}"
            )
        self.dir = Path(directory)
        self.config = config
        self.segments = segments
        self.producer_state_manager = producer_state_manager
        self.leader_epoch_cache = leader_epoch_cache
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.had_clean_shutdown = had_clean_shutdown
        self.time = time
        self.use_large_index = use_large_index
        self.num_threads = num_segment_loading_threads
        self.remote_storage_enabled = remote_storage_enabled
        self.read_only = read_only  # .log files opened read-only (a scratch copy of links, see local.read_only)
        self.lost_offsets = lost_offsets  # where a hole left by recovering a segment is recorded
        self.rebuild_leader_epochs = rebuild_leader_epochs  # its checkpoint was missing (see step 6)
        self.stats = LoadStats()
        self._remaining_callback = remaining_segments_callback if num_segment_loading_threads > 1 else None
        self._gauge_threads: set[str] = set()
        self._gauge_lock = threading.Lock()
        self._data_dir = str(self.dir.parent)
        self._rebuilt_from: int | None = None  # segments from this base on are rebuilt by step 4 (an unclean stop)

    # ------------------------------------------------------------------------------------------------------

    def _rebuild_leader_epoch_cache(self, cache: LeaderEpochFileCache) -> None:
        """Assign each epoch where the segments' v2 batches first carry it (headers only; a corrupt batch ends its
        segment's walk: recovery decides what of it stays, and the cache is cut to the loaded offsets after it)."""
        from local.errors import CorruptRecordError
        from local.records.batch import PARTITION_LEADER_EPOCH_OFFSET
        from local.records.constants import MAGIC_OFFSET, MAGIC_V2
        from local.records.walk import walk_batches

        latest = -1
        for segment in self.segments.values():
            log = segment.log
            try:
                for _position, _size, view, at in walk_batches(log.read_into, log.size_in_bytes, whole=False,
                                                               reuse=True, origin=str(log.source_path)):
                    if view[at + MAGIC_OFFSET] != MAGIC_V2:
                        continue
                    epoch = int.from_bytes(view[at + PARTITION_LEADER_EPOCH_OFFSET:at + PARTITION_LEADER_EPOCH_OFFSET + 4],
                                           "big", signed=True)
                    if epoch > latest:
                        cache.assign(epoch, int.from_bytes(view[at:at + 8], "big", signed=True))
                        latest = epoch
            except CorruptRecordError:
                continue
        entries = cache.epoch_entries()
        logger.warning("%s: its %s was missing: rebuilt from its segments' batches (%s)", self.dir.name,
                       filenames.LEADER_EPOCH_CHECKPOINT_FILENAME,
                       ", ".join(f"epoch {e.epoch} from offset {e.start_offset}" for e in entries) or "no epoch")

    def load(self) -> LoadedLogOffsets:
        """Run every step; returns the loaded offsets. OSError (an unreadable file, a full disk) propagates:
        the caller takes the data dir offline."""
        started = _time.perf_counter()
        try:
            swap_files = self._remove_temp_files_and_collect_swap_files()
            self._complete_swaps(swap_files)
            self._load_segment_files()
            # (A log without a byte has nothing to rebuild from: a new one, or one never written.)
            if (self.rebuild_leader_epochs and self.leader_epoch_cache is not None
                    and any(s.size for s in self.segments.values())):
                self._rebuild_leader_epoch_cache(self.leader_epoch_cache)
            recovery_point, next_offset = self._recover_log()
        finally:
            self._remove_gauges()
        active = self.segments.active_segment
        assert active is not None, "recovery always leaves an active segment"
        active.resize_indexes(self.config.segment_index_bytes)

        first = self.segments.first_segment
        assert first is not None
        log_start = self.log_start_offset if self.remote_storage_enabled else max(self.log_start_offset, first.base_offset)
        if self.leader_epoch_cache is not None:
            self.leader_epoch_cache.truncate_from_end(next_offset)
            # The earliest epoch may not have been flushed before a hard failure (Kafka uses the checkpoint here).
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        psm = self.producer_state_manager
        # Recovery used its own producer state managers, which may have deleted snapshots behind this one's back.
        psm.remove_straggling_snapshots(self.segments.base_offsets())
        rebuild_producer_state(
            psm, self.segments, log_start, next_offset, self.time, reload_from_clean_shutdown=self.had_clean_shutdown
        )
        self.stats.elapsed_ms = (_time.perf_counter() - started) * 1000
        metrics.partition_loaded(self._data_dir, self.dir.name, stats_summary(self.stats))
        return LoadedLogOffsets(log_start, recovery_point)

    # ------------------------------------------------------------------------------------------------------
    # Steps 1-2: transient files

    def _names(self) -> list[str]:
        """The names of the files in the partition dir, sorted (names, not Paths: 30,000 of them at 10,000
        segments, and Path construction and comparison would cost more than the rest of a clean load)."""
        with os.scandir(self.dir) as entries:
            return sorted(e.name for e in entries if e.is_file())

    def _remove_temp_files_and_collect_swap_files(self) -> list[Path]:
        min_cleaned: int | None = None
        cleaned: list[str] = []
        swaps: list[str] = []
        directory = str(self.dir)
        for name in self._names():
            path = os.path.join(directory, name)
            if not os.access(path, os.R_OK):
                raise KafkaStorageIOError(f"cannot read {path} while loading {self.dir}", path=path)
            if name.endswith(filenames.DELETED_FILE_SUFFIX) and not name.endswith(_KRAFT_SNAPSHOT_DELETED_SUFFIX):
                logger.debug("deleting stray file %s marked for deletion", path)
                (self.dir / name).unlink(missing_ok=True)
            elif name.endswith(filenames.CLEANED_FILE_SUFFIX):
                offset = filenames.offset_from_file_name(name)
                min_cleaned = offset if min_cleaned is None else min(min_cleaned, offset)
                cleaned.append(name)
            elif name.endswith(filenames.SWAP_FILE_SUFFIX):
                swaps.append(name)
        valid: list[Path] = []
        for name in swaps:
            if min_cleaned is not None and filenames.offset_from_file_name(name) >= min_cleaned:
                self._warn(
                    f"deleting {name}: part of a split that did not complete (at or above the lowest "
                    f".cleaned offset {min_cleaned})"
                )
                (self.dir / name).unlink(missing_ok=True)
            else:
                valid.append(self.dir / name)
        for name in cleaned:
            self._warn(f"deleting {name}: left by a cleaning or split that did not reach its swap")
            (self.dir / name).unlink(missing_ok=True)
        return valid

    def _complete_swaps(self, swap_files: list[Path]) -> None:
        swap_log_suffix = filenames.LOG_FILE_SUFFIX + filenames.SWAP_FILE_SUFFIX
        min_swap: int | None = None
        max_swap: int | None = None
        for path in swap_files:
            if not path.name.endswith(swap_log_suffix):
                continue
            base = filenames.offset_from_file_name(path.name)
            segment = LogSegment.open(
                self.dir,
                base,
                file_already_exists=True,
                file_suffix=filenames.SWAP_FILE_SUFFIX,
                index_interval_bytes=self.config.index_interval_bytes,
                max_index_size=self.config.segment_index_bytes,
                use_large_index=self.use_large_index,
                time=self.time.milliseconds,
            )
            try:
                next_offset = segment.read_next_offset()
            finally:
                segment.close_handlers()
            min_swap = base if min_swap is None else min(min_swap, base)
            max_swap = next_offset if max_swap is None else max(max_swap, next_offset)
            self._warn(f"found {path.name} from an interrupted swap: completing the swap by renaming it")
            self.stats.swap_files_recovered += 1
        if min_swap is not None and max_swap is not None:
            # The segments the swap replaced (compacted or split away) but had not yet renamed to .deleted.
            for name in self._names():
                if name.endswith(filenames.SWAP_FILE_SUFFIX):
                    continue
                replaced = _base_offset(name)  # None: not a segment file (checkpoints, partition.metadata)
                if replaced is not None and min_swap <= replaced < max_swap:
                    self._warn(f"deleting {name}: replaced by the swapped-in segment(s) [{min_swap}, {max_swap})")
                    (self.dir / name).unlink(missing_ok=True)
        for path in swap_files:
            if path.exists():
                os.replace(path, path.with_name(path.name[: -len(filenames.SWAP_FILE_SUFFIX)]))

    # ------------------------------------------------------------------------------------------------------
    # Step 3: open and check every segment (phase 1), recover the failed ones (phase 2)

    def _roll_jitter_ms(self) -> int:
        """Kafka's ``randomSegmentJitter``, drawn for every segment opened (loaded ones and an empty log's first
        included), as ``Log._new_segment`` draws it for a rolled one: else every partition's active segment
        rolls at exactly ``segment.ms`` after a restart, together."""
        jitter = min(self.config.segment_jitter_ms, self.config.max_segment_ms)
        return random.randrange(jitter) if jitter > 0 else 0

    def _open_segment(self, base_offset: int) -> LogSegment:
        return LogSegment.open(
            self.dir,
            base_offset,
            file_already_exists=True,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.segment_index_bytes,
            roll_jitter_ms=self._roll_jitter_ms(),
            use_large_index=self.use_large_index,
            time=self.time.milliseconds,
            mutable=not self.read_only,
        )

    def _open_and_check(self, base: int, names: Collection[str]) -> tuple[LogSegment, str | None]:
        """Phase 1 for one segment: open it and sanity-check its index files. Returns the segment and, when it
        must be recovered, why ("missing" or what is corrupt). ``names`` is the directory listing."""
        has_offset_index, has_txn_index = self._prepare_index_files(base, names)
        segment = self._open_segment(base)
        requested = LARGE_OFFSET_ENTRY_SIZE if self.use_large_index else LEGACY_OFFSET_ENTRY_SIZE
        problem = check_segment_index_files(str(self.dir), base, segment.size, has_offset_index, has_txn_index, requested)
        return segment, self._settle_problem(base, problem)

    def _prepare_index_files(self, base: int, names: Collection[str]) -> tuple[bool, bool]:
        """Create the empty time index a segment without one gets; returns whether it has an offset index and a
        transaction index.

        The offset and time indexes of a segment that unclean-shutdown recovery (step 4) rebuilds anyway are deleted
        unread: the active segment's keep their preallocated size (10 MiB each by default) until a clean close, and
        reading them whole cost ~25 ms a partition at every start after a crash (28 s before the Kafka port opened
        with 800 partitions). Kafka's sanity check reads one entry; a rebuilt index is the same bytes either way."""
        prefix = filenames.filename_prefix_from_offset(base)
        has_offset_index = prefix + filenames.INDEX_FILE_SUFFIX in names
        time_index = prefix + filenames.TIME_INDEX_FILE_SUFFIX
        if self._rebuilt_from is not None and base >= self._rebuilt_from:
            for name in (prefix + filenames.INDEX_FILE_SUFFIX, time_index):
                if name in names:
                    os.unlink(os.path.join(self.dir, name))
            return False, False
        if has_offset_index and time_index not in names:
            # Kafka resizes a newly created time index to 0: an empty file, not a preallocated one.
            os.close(os.open(os.path.join(self.dir, time_index), os.O_WRONLY | os.O_CREAT, 0o644))
        return has_offset_index, prefix + filenames.TXN_INDEX_FILE_SUFFIX in names

    def _settle_problem(self, base: int, problem: str | None) -> str | None:
        """A corrupt segment's index files are deleted: recovery resets the indexes, but an offset index that fits
        neither entry size cannot even be opened."""
        if problem is not None and problem != "missing":
            prefix = filenames.filename_prefix_from_offset(base)
            (self.dir / (prefix + filenames.INDEX_FILE_SUFFIX)).unlink(missing_ok=True)
            (self.dir / (prefix + filenames.TIME_INDEX_FILE_SUFFIX)).unlink(missing_ok=True)
            return f"corrupt index ({problem})"
        return problem

    def _load_segment_files(self) -> None:
        names = self._names()
        log_bases = sorted(
            base for n in names if n.endswith(filenames.LOG_FILE_SUFFIX) and (base := _base_offset(n)) is not None
        )
        log_base_set = set(log_bases)
        orphans: set[int] = set()
        for name in names:
            if not name.endswith(filenames.INDEX_SUFFIXES):
                continue
            base = _base_offset(name)
            if base is not None and base not in log_base_set:
                if self.read_only:  # a reader's scratch view of a log whose retention deleted the segment meanwhile:
                    # nothing of the live data dir is deleted, and a hole is said below (_record_missing_segment)
                    logger.debug("%s: orphaned index file %s in the read-only view: left out", self.dir.name, name)
                else:
                    self._warn(f"found an orphaned index file {name} with no log file: deleting it")
                (self.dir / name).unlink(missing_ok=True)
                self.stats.orphan_indexes_deleted += 1
                orphans.add(base)
        for base in sorted(orphans):
            self._record_missing_segment(base, log_bases)
        names_set = frozenset(names)
        if not self.had_clean_shutdown and log_bases:  # the floor segment of the recovery point, and those after it
            self._rebuilt_from = log_bases[max(0, bisect.bisect_right(log_bases, self.recovery_point) - 1)]
        metrics.partition_loading(self._data_dir, self.dir.name, len(log_bases))
        if self.num_threads > 1 and len(log_bases) > 1:
            results = self._phase1_parallel(log_bases, names_set)
        else:
            results = [self._open_and_check(base, names_set) for base in log_bases]
            metrics.segments_opened(self._data_dir, self.dir.name, len(results))
        self.segments.add_all(segment for segment, _ in results)
        self.stats.segments_loaded += len(results)

        # Phase 2, in offset order: recovering a segment replays the producer state of the segments before it.
        # A segment that unclean-shutdown recovery (step 4) will recover anyway is left to it, so that its
        # truncation, if any, also deletes the segments after it.
        recovered_later = self._unflushed_bases()
        for i, (segment, reason) in enumerate(results):
            if reason is None:
                continue
            if segment.base_offset in recovered_later:
                continue  # its indexes were deleted unread (_prepare_index_files): step 4 rebuilds them, and says so
            log_name = filenames.log_file(self.dir, segment.base_offset).name
            if reason == "missing" and segment.size == 0:
                # An empty segment (a roll's new active segment, closed before anything was appended or its index
                # was opened) has nothing to recover: its index is empty, and is created when first used.
                logger.debug("%s: %s has no offset index yet and no data", self.dir.name, log_name)
                continue
            if reason == "missing":
                message = f"offset index of {log_name} is missing: recovering the segment and rebuilding its index files"
            else:
                message = f"{reason}; recovering {log_name} and rebuilding its index files"
            self._warn(message)
            recovered, truncated = self._recover_segment(segment)
            if i + 1 < len(results):
                self._record_lost_offsets(recovered, truncated, reason, results[i + 1][0].base_offset)

    def _record_missing_segment(self, base: int, log_bases: list[int]) -> None:
        """An index whose segment's ``.log`` is gone, between two segments that are there (deleted by hand): its
        offsets up to the next segment's base are lost. Kafka's loader deletes the index and reads go on at the next
        segment, past acknowledged records without a word; here the range is recorded as a hole (see
        :mod:`local.lost_offsets`) and said in an ERROR naming the missing file."""
        at = bisect.bisect_right(log_bases, base)
        if at == 0 or at == len(log_bases) or base < self.log_start_offset:
            return  # (before the first segment: the log starts later; after the last: the log ends there)
        next_base = log_bases[at]
        name = filenames.filename_prefix_from_offset(base) + filenames.LOG_FILE_SUFFIX
        entry = LostOffsets(base, next_base - 1, 0, name)
        if self.lost_offsets.find(base) is None:
            self.lost_offsets.add(entry)
        self.stats.offsets_lost += next_base - base
        self._error(f"{self.dir / name} is missing (its index files are there): offsets {base}..{next_base - 1} are "
                    f"lost; reads there fail (the segments from offset {next_base} are read), recorded in "
                    f"{LOST_OFFSETS_FILENAME}" + (" (in memory: this view changes nothing)" if self.read_only else ""))

    def _record_lost_offsets(self, segment: LogSegment, truncated: int, reason: str, next_base: int) -> None:
        """A segment recovered while later segments follow: when the recovery shows it held more than it now does
        (bytes cut, or an index pointing past its end), the offsets up to the next segment's base are lost,
        recorded and logged as an ERROR (see :mod:`local.lost_offsets`)."""
        if truncated == 0 and LAST_ENTRY_PAST_LOG not in reason:
            return
        end = segment.read_next_offset()
        if end >= next_base:
            return
        source = segment.log.source_path
        self.lost_offsets.add(LostOffsets(end, next_base - 1, segment.size, source.name))
        self.stats.offsets_lost += next_base - end
        if self.read_only:
            self._error(
                f"{source} is damaged: this read-only view ends it at byte {segment.size}, so offsets {end}.."
                f"{next_base - 1} cannot be read (reads there fail; the segments from offset {next_base} are read); "
                f"the files are not changed (a writer opening this dir would cut the segment there, keep the later "
                f"segments and record the lost offsets in {LOST_OFFSETS_FILENAME})"
            )
        else:
            self._error(
                f"{source} was damaged: recovery cut it at byte {segment.size} and offsets {end}..{next_base - 1} "
                f"are lost (recorded in {self.lost_offsets.path}; reads there fail, tiered verify reports them); the "
                f"later segments, from offset {next_base}, are kept"
            )

    def _unflushed_bases(self) -> set[int]:
        if self.had_clean_shutdown:
            return set()
        return {seg.base_offset for seg in self.segments.values(self.recovery_point, None)}

    def _phase1_parallel(self, log_bases: list[int], names: Collection[str]) -> list[tuple[LogSegment, str | None]]:
        """Phase 1 with ``num_threads`` loaders: the index files are checked by ``num_threads`` worker processes
        (:mod:`local.load_worker`, which says why not threads) in chunks of consecutive segments, while this
        thread opens the segments, whose descriptors must live in this process."""
        size = max(1, min(_PHASE1_CHUNK, -(-len(log_bases) // self.num_threads)))
        requested = LARGE_OFFSET_ENTRY_SIZE if self.use_large_index else LEGACY_OFFSET_ENTRY_SIZE
        directory = str(self.dir)
        checkers = load_worker.pool(self.num_threads)
        chunks: list[load_worker.Chunk] = []
        futures = []
        for i in range(0, len(log_bases), size):
            chunk = [(base, *self._prepare_index_files(base, names)) for base in log_bases[i : i + size]]
            chunks.append(chunk)
            futures.append(checkers.submit(directory, chunk, requested))
        segments: list[LogSegment] = []
        try:
            results: list[tuple[LogSegment, str | None]] = []
            remaining = len(log_bases)
            labels: dict[str, str] = {}
            for chunk, future in zip(chunks, futures, strict=True):
                for base, _, _ in chunk:
                    segments.append(self._open_segment(base))
                worker, problems = future.result()
                for (base, _, _), problem in zip(chunk, problems, strict=True):
                    results.append((segments[len(results)], self._settle_problem(base, problem)))
                remaining -= len(chunk)
                label = labels.setdefault(worker, f"log-loader-{self.dir.name}-{len(labels)}")
                self._set_gauge(label, remaining)
                metrics.segments_opened(self._data_dir, self.dir.name, len(chunk))
            return results
        except BaseException:
            for future in futures:
                future.cancel()
            for segment in segments:
                segment.close_handlers()
            raise

    def _set_gauge(self, thread: str, remaining: int) -> None:
        if self._remaining_callback is None:
            return
        with self._gauge_lock:
            self._gauge_threads.add(thread)
            self._remaining_callback(thread, remaining)

    def _remove_gauges(self) -> None:
        if self._remaining_callback is None:
            return
        with self._gauge_lock:
            for thread in sorted(self._gauge_threads):
                self._remaining_callback(thread, None)
            self._gauge_threads.clear()

    def _recover_segment(self, segment: LogSegment) -> tuple[LogSegment, int]:
        """Rebuild a segment's indexes from its log, truncating at the first invalid batch. Returns the segment
        (a new object when its offset index was reopened in the 12-byte format) and the bytes truncated."""
        if self.use_large_index and not segment.offset_index.is_large_format:
            segment = self._reopen_with_large_index(segment)
        # A throwaway producer state, as Kafka does: the log's own one is rebuilt from scratch at the end.
        psm = self._new_producer_state_manager()
        rebuild_producer_state(psm, self.segments, self.log_start_offset, segment.base_offset, self.time)
        truncated = segment.recover(psm, self.leader_epoch_cache)
        # Snapshot now so that recovering the next segment does not replay this one again.
        psm.take_snapshot()
        self.stats.segments_recovered += 1
        self.stats.bytes_truncated += truncated
        return segment, truncated

    def _new_producer_state_manager(self) -> ProducerStateManager:
        # The log's own limits. (A recovery's snapshot is reloaded by the log's manager, which applies them again.)
        main = self.producer_state_manager
        return ProducerStateManager(
            self.dir, time=self.time.milliseconds, max_transaction_timeout_ms=main.max_transaction_timeout_ms,
            producer_id_expiration_ms=main.producer_id_expiration_ms,
        )

    def _reopen_with_large_index(self, segment: LogSegment) -> LogSegment:
        """Once the large-index feature is finalized a rebuilt offset index is written in the 12-byte format."""
        base = segment.base_offset
        segment.close_handlers()
        filenames.offset_index_file(self.dir, base).unlink(missing_ok=True)
        reopened = self._open_segment(base)
        self.segments.add(reopened)  # replaces the entry for this base offset
        logger.info("%s: rebuilding the offset index of segment %d in the 12-byte format", self.dir.name, base)
        return reopened

    # ------------------------------------------------------------------------------------------------------
    # Steps 4-5: unclean shutdown recovery, log end below log start

    def _recover_log(self) -> tuple[int, int]:
        """Returns (new recovery point, log end offset)."""
        if not self.had_clean_shutdown:
            self._recover_unflushed()

        log_end: int | None = None
        last = self.segments.last_segment
        if last is not None:
            end = last.read_next_offset()
            if end >= self.log_start_offset:
                log_end = end
            else:
                self._warn(
                    f"deleting all {self.segments.number_of_segments()} segment(s): the log end offset {end} is below "
                    f"the log start offset {self.log_start_offset} (were segment files deleted behind our back?)"
                )
                self._delete_segments(list(self.segments.values()))
                if self.leader_epoch_cache is not None:
                    self.leader_epoch_cache.clear_and_flush()
                self.producer_state_manager.truncate_full_and_start_at(self.log_start_offset)
        if self.segments.is_empty():
            self.segments.add(
                LogSegment.open(
                    self.dir,
                    self.log_start_offset,
                    index_interval_bytes=self.config.index_interval_bytes,
                    max_index_size=self.config.segment_index_bytes,
                    roll_jitter_ms=self._roll_jitter_ms(),
                    preallocate=self.config.preallocate,
                    init_file_size=self.config.segment_bytes if self.config.preallocate else 0,
                    use_large_index=self.use_large_index,
                    time=self.time.milliseconds,
                )
            )
        # The recovery point only moves on a flush: advancing it here could skip recovery of segments that a
        # crash right after the next checkpoint would leave unflushed.
        if self.had_clean_shutdown and log_end is not None:
            return log_end, log_end
        last = self.segments.last_segment
        assert last is not None
        end = log_end if log_end is not None else last.read_next_offset()
        return min(self.recovery_point, end), end

    def _recover_unflushed(self) -> None:
        unflushed = list(self.segments.values(self.recovery_point, None))
        thread = threading.current_thread().name
        total = len(unflushed)
        for i, segment in enumerate(unflushed):
            self._set_gauge(thread, total - i)
            logger.info("%s: recovering unflushed segment %d (%d/%d)", self.dir.name, segment.base_offset, i, total)
            try:
                segment, truncated = self._recover_segment(segment)
            except InvalidOffsetError as exc:
                # Kafka's guard. Not reached by the recovery here, which refuses a batch whose offsets go back as
                # an invalid one (truncated below) before any index could. The live segment: recovery may have
                # reopened it with a 12-byte offset index before failing.
                live = self.segments.get(segment.base_offset)
                assert live is not None, f"segment {segment.base_offset} left the log during its recovery"
                segment = live
                self._warn(
                    f"found an invalid offset while recovering segment {segment.base_offset} ({exc}): "
                    "deleting its data and keeping it empty"
                )
                truncated = segment.truncate_to(segment.base_offset)
                self.stats.bytes_truncated += truncated
            if truncated > 0:
                rest = unflushed[i + 1 :]
                end = segment.read_next_offset()
                # Offsets the later segments held are lost with them: an ERROR naming them (a torn tail: a WARNING).
                report = self._error if rest else self._warn
                lost = f": offsets {end}..{_lost_end(rest[-1])} are lost ({segment.log.source_path} and the later " \
                       "segments)" if rest else ""
                if self.read_only:  # nothing is deleted or cut on disk: the view ends there
                    report(
                        f"corruption found in segment {segment.base_offset}: this read-only view ends at offset "
                        f"{end} and leaves out {truncated} byte(s) of it and the {len(rest)} later segment(s); the "
                        "files are not changed (a writer opening this dir would truncate the segment there and "
                        f"delete the later ones){lost.replace('are lost', 'are left out')}"
                    )
                else:
                    report(
                        f"corruption found in segment {segment.base_offset}: truncated {truncated} byte(s), the log "
                        f"now ends at offset {end}; deleting the {len(rest)} later segment(s){lost}"
                    )
                self._delete_segments(rest)  # not yet recovered, so never replaced
                break
        self._set_gauge(thread, 0)

    def _delete_segments(self, doomed: list[LogSegment]) -> None:
        """Delete segments found past a truncation (or all of them): their files and producer snapshots go now,
        before any reader could see them."""
        for segment in doomed:
            self.segments.remove(segment.base_offset)
            segment.delete_if_exists()
            filenames.producer_snapshot_file(self.dir, segment.base_offset).unlink(missing_ok=True)
            self.stats.segments_deleted += 1

    def _warn(self, message: str) -> None:
        logger.warning("%s: %s", self.dir.name, message)
        self.stats.warnings.append(message)

    def _error(self, message: str) -> None:
        """A fault that lost data: logged as an ERROR (and kept with the warnings)."""
        logger.error("%s: %s", self.dir.name, message)
        self.stats.warnings.append(message)



def _lost_end(segment: LogSegment) -> str:
    """The last offset ``segment`` (not recovered, about to be deleted) holds, as a message says it."""
    try:
        return str(segment.read_next_offset() - 1)
    except KafkaStorageError:  # its tail is damaged too
        return f"(at least) {segment.base_offset}"


def _base_offset(name: str) -> int | None:
    """The base offset a segment file is named by; None for a name that does not start with one. The rule of
    ``filenames.offset_from_file_name`` (20 digits and a dot) without its Path, run 30,000 times at 10,000
    segments."""
    prefix = name[:20]
    if len(name) > 20 and name[20] == "." and prefix.isdigit():
        return int(prefix)
    return None


def stats_summary(stats: LoadStats) -> dict[str, Any]:
    """The counters of a :class:`LoadStats` as a JSON-ready dict (warnings left out)."""
    return {
        "segments_loaded": stats.segments_loaded,
        "segments_recovered": stats.segments_recovered,
        "segments_deleted": stats.segments_deleted,
        "bytes_truncated": stats.bytes_truncated,
        "orphan_indexes_deleted": stats.orphan_indexes_deleted,
        "swap_files_recovered": stats.swap_files_recovered,
        "offsets_lost": stats.offsets_lost,
        "elapsed_ms": round(stats.elapsed_ms, 3),
    }
