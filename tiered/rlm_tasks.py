"""The schedule of the RemoteLogManager's tasks: Kafka's ``RLMCopyTask`` and ``RLMExpirationTask``
(:mod:`tiered.rlm_copy`, :mod:`tiered.rlm_expiration`), one of each per partition, run with a fixed delay of
``remote.log.manager.task.interval.ms`` on two thread pools (``remote.log.manager.copier.thread.pool.size`` and
``remote.log.manager.expiration.thread.pool.size``, 10 each as in Kafka).

The pools are the log engine's scheduler, :class:`local.scheduler.Scheduler` with N workers, made on the remote
tier's clock (:meth:`local.scheduler.Time.new_scheduler`): a task never runs twice at once (its next run is due when
the previous one ends: Kafka's ``scheduleWithFixedDelay``), and on a :class:`local.scheduler.MockTime` the tasks run
when a test advances the clock. A watcher task on the expiration pool adds the tasks of partitions that appear (a
log created after start) and cancels those whose log is closed or no longer remote-enabled.

``tiered offload`` runs each task once (:meth:`tiered.remote_log_manager.RemoteLogManager.run_once`); a
``LogManager`` with the remote tier enabled starts them through :meth:`RemoteLogManager.start_tasks` and stops
them on ``close()`` (via :meth:`RemoteLogManager.stop_tasks`); ``tiered run`` is such a LogManager.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from local.scheduler import Time

if TYPE_CHECKING:
    from local.log import Log
    from tiered.remote_log_manager import RemoteLogManager

logger = logging.getLogger(__name__)

# How often the watcher looks for new or removed partitions, at most (a new partition starts tiering within it).
WATCH_INTERVAL_MS = 1000
# How long stopping waits for the runs in progress (a copy task ends after the segment it is copying).
STOP_TIMEOUT_S = 60.0


class _Cancellable(Protocol):
    def cancel(self) -> None: ...


def tiering_enabled(log: Log) -> bool:
    return not log.is_closed and bool(log.config.remote_storage_enable)


def local_copy_lag(log: Log, copied_to: int = -1) -> tuple[int, int]:
    """The closed segments below the last stable offset that are not copied yet as this data dir knows it (its
    ``remote-log-state``'s highest copied offset, or ``copied_to``, what its copy task copied, when higher: the state
    file's offset moves only at the first copy and at local retention), and their bytes: what the copy task would
    copy, with no request to the store."""
    from tiered.rlm_copy import segments_to_copy

    behind = segments_to_copy(log, max(log.remote_log_state.highest_remote_offset, copied_to))
    return len(behind), sum(seg.size for seg, _ in behind)


def remote_data_to_delete(log: Log) -> bool:
    """A partition whose topic turned remote storage off with ``remote.log.delete.on.disable=true`` while remote data
    remains (Kafka's KIP-950 disablement): its expiration task deletes all of it, and copies nothing."""
    config = log.config
    return (not log.is_closed and not config.remote_storage_enable and bool(config.remote_log_delete_on_disable)
            and log.has_remote_data)


def remote_tasks_run(log: Log) -> bool:
    """Whether the remote tier's tasks run for ``log``: tiered, or with remote data to delete."""
    return tiering_enabled(log) or remote_data_to_delete(log)


class RLMTaskScheduler:
    """The copy and expiration tasks of every remote-enabled partition that ``logs()`` returns, kept in step with
    it by a watcher task; the pools are schedulers of ``time`` (started here, stopped by :meth:`shutdown`)."""

    def __init__(
        self, rlm: RemoteLogManager, logs: Callable[[], Iterable[Log]], interval_ms: int, copier_threads: int,
        expiration_threads: int, time: Time,
    ) -> None:
        self.rlm = rlm
        self.logs = logs
        self.interval_ms = interval_ms
        self._lock = threading.Lock()
        self._tasks: dict[int, tuple[Log, _Cancellable, _Cancellable]] = {}  # id(log) -> its two tasks
        self.copier_pool = time.new_scheduler("remote-log-copier", copier_threads)
        self.expiration_pool = time.new_scheduler("remote-log-expiration", expiration_threads)
        self.copier_pool.startup()
        self.expiration_pool.startup()
        self._lag_due = 0.0
        self._watcher = self.expiration_pool.schedule(
            "rlm-partition-watcher", self.sync, period_ms=min(interval_ms, WATCH_INTERVAL_MS))

    def sync(self) -> None:
        """Schedule the tasks of new remote-enabled logs (and of those with remote data to delete); cancel those of
        logs closed or no longer enabled. Every ``interval_ms``, the copy lag gauges of every tiered partition from
        what this data dir knows (:func:`local_copy_lag`): a copy task that waits for a thread behind 2,000 others,
        or whose runs fail while the store is down, set them only when it ran, and an alert on the lag never
        fired (a helper's pass: 85 summed against 2,478 segments behind)."""
        current = {id(log): log for log in self.logs() if remote_tasks_run(log)}
        if time.monotonic() >= self._lag_due:
            self._lag_due = time.monotonic() + self.interval_ms / 1000
            metrics = self.rlm.parts.metrics
            for log in current.values():
                if tiering_enabled(log):
                    segments, size = local_copy_lag(log, self.rlm.known_copied_to(log))
                    metrics.copy_lag_segments.labels(log.topic, log.partition).set(segments)
                    metrics.copy_lag_bytes.labels(log.topic, log.partition).set(size)
        with self._lock:
            for key in list(self._tasks):
                if key not in current or current[key] is not self._tasks[key][0]:
                    _, copy, expire = self._tasks.pop(key)
                    copy.cancel()
                    expire.cancel()
            for key, log in current.items():
                if key in self._tasks:
                    continue
                copy_run = functools.partial(self.rlm.copy_task(log).run, log)
                expiration_run = functools.partial(self.rlm.expiration_task(log).run, log)
                self._tasks[key] = (
                    log,
                    self.copier_pool.schedule(f"RLMCopyTask[{log.name}]", copy_run, period_ms=self.interval_ms),
                    self.expiration_pool.schedule(f"RLMExpirationTask[{log.name}]", expiration_run,
                                                  period_ms=self.interval_ms),
                )

    def partitions(self) -> list[str]:
        with self._lock:
            return sorted(log.name for log, _, _ in self._tasks.values())

    def shutdown(self) -> None:
        """Cancel every task and stop both pools, waiting (up to :data:`STOP_TIMEOUT_S`) for the runs in progress."""
        self._watcher.cancel()
        with self._lock:
            for _, copy, expire in self._tasks.values():
                copy.cancel()
                expire.cancel()
            self._tasks.clear()
        self.copier_pool.shutdown(timeout=STOP_TIMEOUT_S)
        self.expiration_pool.shutdown(timeout=STOP_TIMEOUT_S)
