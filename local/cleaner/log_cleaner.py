"""The cleaner threads of a log manager and their metrics: Kafka's ``LogCleaner``.

``log.cleaner.threads`` threads (named ``kafka-log-cleaner-thread-N``) each loop: take the dirtiest cleanable
compacted log (:class:`local.cleaner.manager.LogCleanerManager`), clean it with its own :class:`Cleaner` and offset
map (``log.cleaner.dedupe.buffer.size`` divided among the threads, at most 2 GiB each), checkpoint where the cleaning
ended; then run retention on the compacted logs (``compact,delete``: their retention is the cleaner's, as in Kafka;
``compact`` alone: only segments below a moved log start offset); sleep ``log.cleaner.backoff.ms`` when nothing was
cleaned. Their reads and writes are throttled together to ``log.cleaner.io.max.bytes.per.second``.

A cleaning that fails unexpectedly marks its partition uncleanable (logged, counted in
``uncleanable-partitions-count``) and the thread goes on; an I/O error takes the data dir offline. :meth:`shutdown`
stops the threads at their next check (a cleaning in flight is abandoned before its swap).

Metrics, under Kafka's names (``kafka.log:type=LogCleaner`` and ``LogCleanerManager``; in Prometheus with ``_`` for
``-``): ``max-dirty-percent``, ``cleaner-recopy-percent``, ``max-clean-time-secs``, ``max-compaction-delay-secs``,
``max-buffer-utilization-percent``, ``DeadThreadCount``, ``time-since-last-run-ms`` and
``uncleanable-partitions-count`` (per data dir, label ``logDirectory``).

:meth:`LogCleaner.clean_pass` is one pass in the caller's thread (what ``tiered compact`` runs), with a report of
what each compacted partition got.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from local import metrics
from local.cleaner.cleaner import Cleaner, CleanerStats, LogToClean, Throttler
from local.cleaner.manager import (
    LogCleanerManager,
    PreCleanStats,
    TopicPartition,
    cleanable_offsets,
    log_to_clean,
)
from local.cleaner.offset_map import SkimpyOffsetMap
from local.errors import KafkaStorageError, LogCleaningAbortedError, LogDirOfflineError
from local.scheduler import SYSTEM_TIME, Time

logger = logging.getLogger(__name__)

_MAX_MAP_BYTES = 2**31 - 1  # Kafka: at most 2 GiB of dedupe buffer per thread


@dataclass(slots=True)
class PartitionReport:
    """What one pass did to one compacted partition (``tiered compact`` prints it)."""

    topic: str
    partition: int
    dirty_ratio: float
    first_dirty_offset: int
    cleaned: bool = False
    why_not: str = ""
    end_offset: int = -1
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_written: int = 0
    segments_before: int = 0
    segments_after: int = 0
    segments_deleted_by_retention: int = 0
    elapsed_secs: float = 0.0
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass(slots=True)
class _ThreadState:
    last_stats: CleanerStats = field(default_factory=CleanerStats)
    last_pre_clean: PreCleanStats = field(default_factory=PreCleanStats)
    failed: bool = False


class LogCleaner:
    """See the module docstring. ``logs()`` and ``dir_of`` are the log manager's; ``on_io_error(log, exc)`` takes a
    data dir offline."""

    def __init__(self, config: Any, logs: Callable[[], dict[TopicPartition, Any]],
                 dir_of: Callable[[TopicPartition], Path | None], *, time: Time = SYSTEM_TIME,
                 on_io_error: Callable[[Any, OSError], None] | None = None) -> None:
        self.config = config
        self.time = time
        self.num_threads = config.log_cleaner_threads
        threads = max(1, self.num_threads)
        self.map_memory = min(config.log_cleaner_dedupe_buffer_size // threads, _MAX_MAP_BYTES)
        if config.log_cleaner_dedupe_buffer_size // threads > _MAX_MAP_BYTES:
            logger.warning("cannot use more than 2 GiB of log.cleaner.dedupe.buffer.size per cleaner thread: ignoring "
                           "the excess")
        self.io_buffer_size = config.log_cleaner_io_buffer_size // threads // 2
        self.load_factor = config.log_cleaner_io_buffer_load_factor
        if self.map_memory // 24 * self.load_factor <= 1:
            from local.errors import ConfigError

            raise ConfigError(
                f"Invalid value {config.log_cleaner_dedupe_buffer_size} for configuration log.cleaner.dedupe.buffer.size: "
                f"{self.map_memory} bytes per cleaner thread hold no key at load factor {self.load_factor}, so log "
                "cleaning would never make progress", key="log.cleaner.dedupe.buffer.size")
        self.max_message_bytes = config.topic_config().max_message_bytes
        self.manager = LogCleanerManager(config.log_dirs, logs, dir_of)
        self.throttler = Throttler(config.log_cleaner_io_max_bytes_per_second, time)
        self.backoff_ms = config.log_cleaner_backoff_ms
        self._logs = logs
        self._dir_of = dir_of
        self._on_io_error = on_io_error
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._states: list[_ThreadState] = []
        _LIVE.add(self)

    # ------------------------------------------------------------------------------------------------------
    # Threads

    def new_cleaner(self, cleaner_id: int, check_done: Callable[[Any], None] | None = None) -> Cleaner:
        return Cleaner(cleaner_id, SkimpyOffsetMap(self.map_memory), self.io_buffer_size, self.max_message_bytes,
                       self.load_factor, self.throttler, self.time, check_done or self._check_done)

    def startup(self) -> None:
        logger.info("starting the log cleaner (%d thread(s))", self.num_threads)
        self._stop.clear()
        for i in range(self.num_threads):
            state = _ThreadState()
            cleaner = self.new_cleaner(i)
            thread = threading.Thread(target=self._run, args=(cleaner, state), name=f"kafka-log-cleaner-thread-{i}",
                                      daemon=True)
            self._states.append(state)
            self._threads.append(thread)
            thread.start()

    def shutdown(self) -> None:
        """Stop the threads (a cleaning in flight stops before its swap) and wait for them."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self._threads.clear()
        _LIVE.discard(self)

    @property
    def dead_thread_count(self) -> int:
        return sum(1 for s in self._states if s.failed)

    def _check_done(self, log: Any) -> None:
        if self._stop.is_set():
            raise LogCleaningAbortedError("the log cleaner is shutting down")
        self.manager.check_cleaning_aborted((log.topic, log.partition))

    def _run(self, cleaner: Cleaner, state: _ThreadState) -> None:
        try:
            while not self._stop.is_set():
                cleaned = self._clean_filthiest_log(cleaner, state)
                if not cleaned:
                    self._stop.wait(self.backoff_ms / 1000)
                self.manager.maintain_uncleanable_partitions()
        except BaseException:
            state.failed = True  # counted in DeadThreadCount
            logger.exception("log cleaner thread %s died", threading.current_thread().name)

    def _clean_filthiest_log(self, cleaner: Cleaner, state: _ThreadState,
                             only: Callable[[TopicPartition], bool] | None = None) -> bool:
        pre_clean = PreCleanStats()
        to_clean = self.manager.grab_filthiest_compacted_log(self.time.milliseconds(), pre_clean, only)
        cleaned = False
        if to_clean is not None:
            state.last_pre_clean = pre_clean
            cleaned = self._clean_log(cleaner, to_clean, state)[1] == ""
        self._delete_old_segments(only)
        return cleaned

    def _clean_log(self, cleaner: Cleaner, to_clean: LogToClean, state: _ThreadState) -> tuple[CleanerStats | None, str]:
        """Clean one log; (its stats when it was cleaned, else None; what went wrong, "" when nothing did)."""
        log = to_clean.log
        tp = (log.topic, log.partition)
        end_offset = to_clean.first_dirty_offset
        stats = None
        error = ""
        try:
            end_offset, stats = cleaner.clean(to_clean)
            state.last_stats = stats
            _log_stats(cleaner.id, log.name, to_clean.first_dirty_offset, end_offset, stats)
        except LogCleaningAbortedError as exc:
            logger.info("cleaning of %s stopped: %s", log.name, exc)
        except LogDirOfflineError:
            pass  # the partition is offline already
        except OSError as exc:
            logger.error("cannot clean %s: %s", log.name, exc)
            if self._on_io_error is not None:
                self._on_io_error(log, exc)
        except Exception as exc:  # Kafka's LogCleaningException: this partition is left alone from now on
            logger.warning("unexpected error cleaning %s (%s): marking it uncleanable", log.name, exc, exc_info=True)
            data_dir = self._dir_of(tp)
            if data_dir is not None:
                self.manager.mark_partition_uncleanable(data_dir, tp)
            error = f"{type(exc).__name__}: {exc}"
        finally:
            self.manager.done_cleaning(tp, self._dir_of(tp), end_offset)
        return stats, error

    def _delete_old_segments(self, only: Callable[[TopicPartition], bool] | None = None) -> int:
        deletable = self.manager.deletable_logs()
        deleted = 0
        try:
            for tp, log in deletable:
                if only is not None and not only(tp):
                    continue
                try:
                    deleted += log.delete_old_segments()
                except LogDirOfflineError:
                    pass
                except OSError as exc:
                    if self._on_io_error is not None:
                        self._on_io_error(log, exc)
                except KafkaStorageError as exc:
                    logger.error("retention of %s failed: %s", log.name, exc)
        finally:
            self.manager.done_deleting([tp for tp, _ in deletable])
        return deleted

    # ------------------------------------------------------------------------------------------------------
    # One pass in the caller's thread

    def clean_pass(self, only: Callable[[TopicPartition], bool] | None = None) -> list[PartitionReport]:
        """Clean every compacted log that is due (Kafka's rules: dirty ratio above ``min.cleanable.dirty.ratio``, or
        past ``max.compaction.lag.ms``), dirtiest first, each once, then run their retention; a report per compacted
        partition (those ``only`` allows), cleaned or not and why."""
        now = self.time.milliseconds()
        checkpoints = self.manager.all_cleaner_checkpoints()
        reports: dict[TopicPartition, PartitionReport] = {}
        for tp, log in sorted(self._logs().items()):
            if not log.config.compact or (only is not None and not only(tp)):
                continue
            offsets = cleanable_offsets(log, checkpoints.get(tp), now)
            candidate = log_to_clean(log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset)
            cleanable, ratio = candidate.cleanable_bytes, candidate.cleanable_ratio
            reports[tp] = PartitionReport(tp[0], tp[1], ratio, offsets.first_dirty_offset,
                                          segments_before=log.number_of_segments())
            if cleanable == 0:
                reports[tp].why_not = "nothing to clean: its dirty records are all in the active segment (or newer " \
                                      "than min.compaction.lag.ms, or above the last stable offset)"
            elif ratio <= log.config.min_cleanable_dirty_ratio:
                reports[tp].why_not = (f"its dirty ratio {ratio:.3f} is not above min.cleanable.dirty.ratio "
                                       f"{log.config.min_cleanable_dirty_ratio}")
        done: set[TopicPartition] = set()
        cleaner = self.new_cleaner(0, lambda log: self.manager.check_cleaning_aborted((log.topic, log.partition)))
        state = _ThreadState()
        while True:
            to_clean = self.manager.grab_filthiest_compacted_log(
                self.time.milliseconds(), None, lambda tp: tp in reports and tp not in done)
            if to_clean is None:
                break
            log = to_clean.log
            tp = (log.topic, log.partition)
            done.add(tp)
            report = reports[tp]
            stats, report.error = self._clean_log(cleaner, to_clean, state)
            if report.error:
                continue
            if stats is None:
                report.why_not = report.why_not or "the cleaning was stopped"
                continue
            report.cleaned, report.why_not = True, ""
            report.end_offset = self.manager.all_cleaner_checkpoints().get(tp, -1)
            report.bytes_read, report.bytes_written = stats.bytes_read, stats.bytes_written
            report.records_read, report.records_written = stats.messages_read, stats.messages_written
            report.elapsed_secs = stats.elapsed_secs
        for tp, log in self._logs().items():
            if tp in reports:
                reports[tp].segments_deleted_by_retention = self._delete_old_segments(tp.__eq__)
                reports[tp].segments_after = log.number_of_segments()
        return [reports[tp] for tp in sorted(reports)]

    # ------------------------------------------------------------------------------------------------------
    # Metrics

    def metric_values(self) -> dict[str, float]:
        """Kafka's LogCleaner and LogCleanerManager gauges (without the per-dir ones), by Kafka's names."""
        stats = [s.last_stats for s in self._states]
        read = sum(s.bytes_read for s in stats)
        written = sum(s.bytes_written for s in stats)
        return {
            "max-dirty-percent": int(100 * self.manager.dirtiest_log_cleanable_ratio),
            "cleaner-recopy-percent": int(100 * written / max(read, 1)),
            "max-clean-time-secs": int(max((s.elapsed_secs for s in stats), default=0.0)),
            "max-compaction-delay-secs": int(max((s.last_pre_clean.max_compaction_delay_ms for s in self._states),
                                                 default=0) / 1000),
            "max-buffer-utilization-percent": int(100 * max((s.buffer_utilization for s in stats), default=0.0)),
            "DeadThreadCount": self.dead_thread_count,
            "time-since-last-run-ms": (self.time.milliseconds() - self.manager.time_of_last_run
                                       if self.manager.time_of_last_run else 0),
        }

    def uncleanable_partitions_count(self) -> dict[str, int]:
        return {str(d): len(self.manager.uncleanable_partitions(d)) for d in self.config.log_dirs}


def _log_stats(cleaner_id: int, name: str, start: int, end: int, stats: CleanerStats) -> None:
    mb = 1024 * 1024
    elapsed = max(stats.elapsed_secs, 1e-9)
    logger.info(
        "log cleaner thread %d cleaned log %s (dirty section = [%d, %d]): %.1f MB of log processed in %.1f seconds "
        "(%.1f MB/sec); indexed %.1f MB in %.1f seconds; buffer utilization %.1f%%; start size %.1f MB (%d messages), "
        "end size %.1f MB (%d messages): %.1f%% size reduction", cleaner_id, name, start, end, stats.bytes_read / mb,
        elapsed, stats.bytes_read / mb / elapsed, stats.map_bytes_read / mb, stats.elapsed_index_secs,
        100 * stats.buffer_utilization, stats.bytes_read / mb, stats.messages_read, stats.bytes_written / mb,
        stats.messages_written, 100 * (1 - stats.bytes_written / max(stats.bytes_read, 1)))


_LIVE: weakref.WeakSet[LogCleaner] = weakref.WeakSet()


class _CleanerCollector(Collector):
    """The live cleaners' gauges in the log manager's registry, read at scrape time (Prometheus spelling)."""

    def collect(self) -> Iterator[Any]:
        cleaners = list(_LIVE)
        if not cleaners:
            return
        values: dict[str, float] = {}
        for cleaner in cleaners:
            for name, value in cleaner.metric_values().items():
                values[name] = max(values.get(name, 0), value)
        for name, value in values.items():
            yield GaugeMetricFamily(name.replace("-", "_"), f"Kafka's LogCleaner {name}", value=value)
        family = GaugeMetricFamily("uncleanable_partitions_count", "Kafka's LogCleanerManager "
                                   "uncleanable-partitions-count", labels=["logDirectory"])
        for cleaner in cleaners:
            for data_dir, count in cleaner.uncleanable_partitions_count().items():
                family.add_metric([data_dir], count)
        yield family


metrics.REGISTRY.register(_CleanerCollector())
