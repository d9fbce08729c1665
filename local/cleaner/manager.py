"""Which compacted log to clean next, and where each one's clean part ends: Kafka's ``LogCleanerManager``.

``cleaner-offset-checkpoint`` (one per data dir, Kafka's offset checkpoint format: ``0``, the entry count, then
``topic partition offset`` a line; written through ``.tmp``, fsync and rename) holds each compacted partition's
first dirty offset: everything below it was cleaned. A missing entry means the whole log is dirty; an entry below
the log start offset or past the log end offset (segments deleted or truncated behind the cleaner's back) is reset
to the log start offset.

The dirty part ends at the first uncleanable offset: the lowest of the last stable offset, the active segment's base
offset, and the base offset of the first dirty segment whose largest timestamp is within ``min.compaction.lag.ms``
of now. Its cleanable bytes are the segments' bytes from the first dirty segment up to the segment holding that
offset; its dirty ratio (``cleanable / (clean + cleanable)``) must exceed ``min.cleanable.dirty.ratio`` unless a
dirty segment's first batch is older than ``max.compaction.lag.ms`` (then it must be cleaned now). Of the candidates
the dirtiest goes first.

Cleaning states, per partition, as Kafka keeps them (``LogCleaningState``): absent (idle), in progress, aborted
(asked to stop; the cleaner notices at its next check and the state becomes paused), paused (n times: nothing
cleans it until resumed as often). A partition whose cleaning failed unexpectedly is uncleanable until restart (or
until it leaves the log manager). Thread-safe: one lock, and a condition for those waiting for a pause.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local.checkpoint import OffsetCheckpointFile
from local.cleaner.cleaner import LogToClean
from local.errors import KafkaStorageError, LogCleaningAbortedError

logger = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT_FILENAME = "cleaner-offset-checkpoint"

TopicPartition = tuple[str, int]
IN_PROGRESS = "in-progress"
ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class Paused:
    count: int


@dataclass(frozen=True, slots=True)
class OffsetsToClean:
    """Kafka's ``OffsetsToClean``: the cleanable range, and whether the checkpoint must be reset to its start."""

    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    force_update_checkpoint: bool = False


@dataclass(slots=True)
class PreCleanStats:
    max_compaction_delay_ms: int = 0
    delayed_partitions: int = 0
    cleanable_partitions: int = 0

    def update_max_compaction_delay(self, delay_ms: int) -> None:
        self.max_compaction_delay_ms = max(self.max_compaction_delay_ms, delay_ms)
        if delay_ms > 0:
            self.delayed_partitions += 1


def cleanable_offsets(log: Any, last_clean_offset: int | None, now: int) -> OffsetsToClean:
    """The range of dirty offsets that may be cleaned (see the module docstring)."""
    log_start = log.log_start_offset
    checkpointed = log_start if last_clean_offset is None else last_clean_offset
    if checkpointed < log_start:
        if not (log.config.compact and log.config.delete):
            logger.warning("resetting the first dirty offset of %s to the log start offset %d: the checkpointed offset "
                           "%d is below it", log.name, log_start, checkpointed)
        first_dirty, force = log_start, True
    elif checkpointed > log.log_end_offset:
        logger.warning("the checkpointed first dirty offset %d of %s is past its log end offset %d: resetting it to the "
                       "log start offset %d", checkpointed, log.name, log.log_end_offset, log_start)
        first_dirty, force = log_start, True
    else:
        first_dirty, force = checkpointed, False
    active = log.active_segment
    candidates = [log.last_stable_offset, active.base_offset]
    lag = max(log.config.min_compaction_lag_ms, 0)
    if lag > 0 and first_dirty < active.base_offset:
        for seg in log.segments.values(first_dirty, active.base_offset):
            if seg.largest_timestamp > now - lag:
                candidates.append(seg.base_offset)
                break
    return OffsetsToClean(first_dirty, max(first_dirty, min(candidates)), force)


def calculate_cleanable_bytes(log: Any, first_dirty_offset: int, uncleanable_offset: int) -> tuple[int, int]:
    """(the base offset of the segment holding ``uncleanable_offset``: where cleaning must stop, the bytes of the
    segments from the first dirty one up to it)."""
    active = log.active_segment
    following = (log.segments.values(uncleanable_offset, active.base_offset)
                 if uncleanable_offset < active.base_offset else [])
    first_uncleanable = following[0].base_offset if following else active.base_offset
    lo = min(first_dirty_offset, first_uncleanable)
    cleanable = sum(seg.size for seg in log.segments.values(lo, first_uncleanable)) if lo < first_uncleanable else 0
    return first_uncleanable, cleanable


def max_compaction_delay(log: Any, first_dirty_offset: int, now: int) -> int:
    """How far past ``max.compaction.lag.ms`` the oldest dirty non-active segment's first batch is (0: not past)."""
    active = log.active_segment
    segments = log.segments.values(first_dirty_offset, active.base_offset) if first_dirty_offset < active.base_offset else []
    stamps = [t for t in (seg.first_batch_timestamp() for seg in segments) if t > 0]
    earliest = min(stamps, default=2**63 - 1)
    clean_until = now - max(log.config.max_compaction_lag_ms, 0)
    return clean_until - earliest if earliest < clean_until else 0


def dirty_ratio_of_files(segments: list[tuple[int, int]], first_dirty_offset: int) -> float:
    """A compacted partition's dirty ratio from its segment files alone, ``(base offset, size)`` oldest first (what
    ``tiered status`` shows without loading): Kafka's formula with the active segment as the first uncleanable one
    (the last stable offset and ``min.compaction.lag.ms``, which need the log, are left out)."""
    if not segments:
        return 0.0
    active = segments[-1][0]
    bases = [b for b, _ in segments]
    floor = max((i for i, b in enumerate(bases) if b <= first_dirty_offset), default=0)
    clean = sum(size for base, size in segments if base < first_dirty_offset)
    cleanable = sum(size for base, size in segments[floor:-1]) if first_dirty_offset < active else 0
    total = clean + cleanable
    return cleanable / total if total else 0.0


def log_to_clean(log: Any, first_dirty_offset: int, uncleanable_offset: int, need_compaction_now: bool = False) -> LogToClean:
    clean_bytes = sum(seg.size for seg in log.segments.values(-1, first_dirty_offset)) if first_dirty_offset > 0 else 0
    first_uncleanable, cleanable = calculate_cleanable_bytes(log, first_dirty_offset, uncleanable_offset)
    return LogToClean(log, first_dirty_offset, first_uncleanable, clean_bytes, cleanable, need_compaction_now)


class LogCleanerManager:
    """See the module docstring. ``logs()`` gives the log manager's current logs by (topic, partition); ``dir_of``
    the data dir holding one."""

    def __init__(self, log_dirs: Iterable[Path], logs: Callable[[], dict[TopicPartition, Any]],
                 dir_of: Callable[[TopicPartition], Path | None]) -> None:
        self._checkpoints = {Path(d): OffsetCheckpointFile(Path(d) / CLEANER_OFFSET_CHECKPOINT_FILENAME) for d in log_dirs}
        self._logs = logs
        self._dir_of = dir_of
        self._in_progress: dict[TopicPartition, Any] = {}
        self._uncleanable: dict[Path, set[TopicPartition]] = {}
        self._lock = threading.RLock()
        self._paused = threading.Condition(self._lock)
        self.dirtiest_log_cleanable_ratio = 0.0
        self.time_of_last_run = 0

    # ------------------------------------------------------------------------------------------------------
    # Checkpoints

    def all_cleaner_checkpoints(self) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        with self._lock:
            for checkpoint in self._checkpoints.values():
                try:
                    out.update(checkpoint.read())
                except (KafkaStorageError, OSError) as exc:
                    logger.error("cannot read %s: %s", checkpoint.path, exc)
        return out

    def update_checkpoints(self, data_dir: Path, update: tuple[TopicPartition, int] | None = None,
                           remove: TopicPartition | None = None) -> None:
        """Rewrite ``data_dir``'s checkpoint keeping the partitions the log manager has, with ``update`` set and
        ``remove`` dropped."""
        with self._lock:
            checkpoint = self._checkpoints.get(Path(data_dir))
            if checkpoint is None:
                return
            live = self._logs()
            try:
                current = {tp: o for tp, o in checkpoint.read().items() if tp in live}
            except KafkaStorageError as exc:
                logger.error("ignoring the malformed %s: %s", checkpoint.path, exc)
                current = {}
            if remove is not None:
                current.pop(remove, None)
            if update is not None:
                current[update[0]] = update[1]
            checkpoint.write(current)

    def maybe_truncate_checkpoint(self, data_dir: Path, tp: TopicPartition, offset: int) -> None:
        """After a truncation to ``offset``: a checkpoint past it comes down to it (Kafka's
        ``maybeTruncateCheckpoint``)."""
        with self._lock:
            checkpoint = self._checkpoints.get(Path(data_dir))
            log = self._logs().get(tp)
            if checkpoint is None or log is None or not log.config.compact:
                return
            existing = checkpoint.read()
            if existing.get(tp, 0) > offset:
                existing[tp] = offset
                checkpoint.write(existing)

    # ------------------------------------------------------------------------------------------------------
    # Choosing

    def grab_filthiest_compacted_log(self, now: int, pre_clean_stats: PreCleanStats | None = None,
                                     only: Callable[[TopicPartition], bool] | None = None) -> LogToClean | None:
        """The dirtiest cleanable compacted log (marked in progress), or None. ``only`` narrows the candidates."""
        stats = pre_clean_stats or PreCleanStats()
        with self._lock:
            self.time_of_last_run = now
            last_clean = self.all_cleaner_checkpoints()
            candidates: list[tuple[TopicPartition, LogToClean]] = []
            for tp, log in self._logs().items():
                if not log.config.compact or tp in self._in_progress or self._is_uncleanable(tp):
                    continue
                if only is not None and not only(tp):
                    continue
                offsets = cleanable_offsets(log, last_clean.get(tp), now)
                if offsets.force_update_checkpoint:
                    data_dir = self._dir_of(tp)
                    if data_dir is not None:
                        self.update_checkpoints(data_dir, (tp, offsets.first_dirty_offset))
                delay = max_compaction_delay(log, offsets.first_dirty_offset, now)
                stats.update_max_compaction_delay(delay)
                ltc = log_to_clean(log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset, delay > 0)
                if ltc.total_bytes > 0:
                    candidates.append((tp, ltc))
            self.dirtiest_log_cleanable_ratio = max((c.cleanable_ratio for _, c in candidates), default=0.0)
            cleanable = [(tp, c) for tp, c in candidates
                         if (c.need_compaction_now and c.cleanable_bytes > 0)
                         or c.cleanable_ratio > c.log.config.min_cleanable_dirty_ratio]
            if not cleanable:
                return None
            stats.cleanable_partitions = len(cleanable)
            tp, filthiest = max(cleanable, key=lambda item: item[1].cleanable_ratio)
            self._in_progress[tp] = IN_PROGRESS
            return filthiest

    def deletable_logs(self) -> list[tuple[TopicPartition, Any]]:
        """The compacted logs not being cleaned, marked in progress: the cleaner thread runs their retention
        (``compact,delete``) and their log start offset breaches, as Kafka's does, then :meth:`done_deleting`."""
        with self._lock:
            out = [(tp, log) for tp, log in self._logs().items()
                   if tp not in self._in_progress and log.config.compact and not self._is_uncleanable(tp)]
            for tp, _ in out:
                self._in_progress[tp] = IN_PROGRESS
            return out

    def pause_cleaning_for_non_compacted_partitions(self) -> list[tuple[TopicPartition, Any]]:
        """Kafka's: the non-compacted logs not in progress, marked paused (retention then runs on them alone)."""
        with self._lock:
            out = [(tp, log) for tp, log in self._logs().items() if not log.config.compact and tp not in self._in_progress]
            for tp, _ in out:
                self._in_progress[tp] = Paused(1)
            return out

    # ------------------------------------------------------------------------------------------------------
    # States

    def check_cleaning_aborted(self, tp: TopicPartition) -> None:
        with self._lock:
            if self._in_progress.get(tp) == ABORTED:
                raise LogCleaningAbortedError(f"the cleaning of {tp[0]}-{tp[1]} was aborted")

    def abort_and_pause_cleaning(self, tp: TopicPartition) -> None:
        """Stop the partition's cleaning if one runs, and keep it from starting until :meth:`resume_cleaning`;
        returns once it is paused."""
        with self._lock:
            state = self._in_progress.get(tp)
            if state is None:
                self._in_progress[tp] = Paused(1)
            elif state == IN_PROGRESS:
                self._in_progress[tp] = ABORTED
            elif isinstance(state, Paused):
                self._in_progress[tp] = Paused(state.count + 1)
            else:
                raise KafkaStorageError(f"the cleaning of {tp[0]}-{tp[1]} cannot be aborted and paused in state {state}")
            while not isinstance(self._in_progress.get(tp), Paused):
                self._paused.wait(0.1)

    def resume_cleaning(self, tps: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in tps:
                state = self._in_progress.get(tp)
                if not isinstance(state, Paused):
                    raise KafkaStorageError(f"the cleaning of {tp[0]}-{tp[1]} cannot be resumed: it is not paused")
                if state.count == 1:
                    del self._in_progress[tp]
                else:
                    self._in_progress[tp] = Paused(state.count - 1)

    def abort_cleaning(self, tp: TopicPartition) -> None:
        with self._lock:
            self.abort_and_pause_cleaning(tp)
            self.resume_cleaning([tp])

    def done_cleaning(self, tp: TopicPartition, data_dir: Path | None, end_offset: int) -> None:
        """A cleaning ended: its end offset checkpointed (unless it was aborted), the partition idle (or paused)."""
        with self._lock:
            state = self._in_progress.get(tp)
            if state == IN_PROGRESS:
                if data_dir is not None:
                    self.update_checkpoints(data_dir, (tp, end_offset))
                del self._in_progress[tp]
            elif state == ABORTED:
                self._in_progress[tp] = Paused(1)
                self._paused.notify_all()
            else:
                raise KafkaStorageError(f"the cleaning of {tp[0]}-{tp[1]} ended in state {state}")

    def done_deleting(self, tps: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in tps:
                state = self._in_progress.get(tp)
                if state == IN_PROGRESS:
                    del self._in_progress[tp]
                elif state == ABORTED:
                    self._in_progress[tp] = Paused(1)
                    self._paused.notify_all()

    # ------------------------------------------------------------------------------------------------------
    # Uncleanable partitions

    def mark_partition_uncleanable(self, data_dir: Path, tp: TopicPartition) -> None:
        with self._lock:
            self._uncleanable.setdefault(Path(data_dir), set()).add(tp)

    def uncleanable_partitions(self, data_dir: Path) -> set[TopicPartition]:
        with self._lock:
            return set(self._uncleanable.get(Path(data_dir), ()))

    def _is_uncleanable(self, tp: TopicPartition) -> bool:
        data_dir = self._dir_of(tp)
        return data_dir is not None and tp in self._uncleanable.get(Path(data_dir), ())

    def maintain_uncleanable_partitions(self) -> None:
        """Forget uncleanable partitions the log manager no longer has."""
        with self._lock:
            live = self._logs()
            for data_dir in list(self._uncleanable):
                self._uncleanable[data_dir] &= set(live)
                if not self._uncleanable[data_dir]:
                    del self._uncleanable[data_dir]

    def handle_log_dir_failure(self, data_dir: Path) -> None:
        """Stop checkpointing an offline data dir."""
        with self._lock:
            self._checkpoints.pop(Path(data_dir), None)
