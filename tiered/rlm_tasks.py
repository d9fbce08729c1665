"""The schedule of the RemoteLogManager's tasks: Kafka's ``RLMCopyTask`` and ``RLMExpirationTask``
(:mod:`tiered.rlm_copy`, :mod:`tiered.rlm_expiration`), one of each per partition, run with a fixed delay of
``remote.log.manager.task.interval.ms`` on two thread pools (``remote.log.manager.copier.thread.pool.size`` and
``remote.log.manager.expiration.thread.pool.size``, 10 each as in Kafka).

The pools are :class:`ScheduledPool`: N worker threads sharing one queue of due tasks, a task never running twice
at once (the next run is scheduled when the previous one ends: Kafka's ``scheduleWithFixedDelay``). A watcher
task on the expiration pool adds the tasks of partitions that appear (a log created after start) and cancels
those whose log is closed or no longer remote-enabled.

``tiered offload`` runs each task once (:meth:`tiered.remote_log_manager.RemoteLogManager.run_once`); a
``LogManager`` with the remote tier enabled starts them through :meth:`RemoteLogManager.start_tasks` and stops
them on ``close()`` (via :meth:`RemoteLogManager.stop_tasks`); ``tiered run`` is such a LogManager.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import threading
import time as _time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from local.log import Log
    from tiered.remote_log_manager import RemoteLogManager

logger = logging.getLogger(__name__)

# How often the watcher looks for new or removed partitions, at most (a new partition starts tiering within it).
WATCH_INTERVAL_MS = 1000


@dataclass(order=True)
class _Entry:
    due: float
    seq: int
    task: ScheduledTask = field(compare=False)


class ScheduledTask:
    """A periodic task of a :class:`ScheduledPool`; :meth:`cancel` stops it after the current run."""

    def __init__(self, name: str, fn: Callable[[], object], period_ms: int) -> None:
        self.name = name
        self.fn = fn
        self.period_ms = period_ms
        self.cancelled = False
        self.runs = 0

    def cancel(self) -> None:
        self.cancelled = True


class ScheduledPool:
    """``threads`` daemon workers running periodic tasks with a fixed delay between the end of one run and the
    start of the next (Kafka's ``ScheduledThreadPoolExecutor.scheduleWithFixedDelay``). A task that raises is
    logged and keeps its schedule."""

    def __init__(self, name: str, threads: int) -> None:
        self.name = name
        self._cond = threading.Condition()
        self._queue: list[_Entry] = []
        self._seq = itertools.count()
        self._running = True
        self._active = 0
        self._workers = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(max(1, threads))
        ]
        for worker in self._workers:
            worker.start()

    def schedule(self, name: str, fn: Callable[[], object], period_ms: int, delay_ms: int = 0) -> ScheduledTask:
        if period_ms <= 0:
            raise ValueError(f"period_ms must be > 0, got {period_ms}")
        task = ScheduledTask(name, fn, period_ms)
        with self._cond:
            heapq.heappush(self._queue, _Entry(_time.monotonic() + delay_ms / 1000, next(self._seq), task))
            self._cond.notify()
        return task

    def _work(self) -> None:
        while True:
            with self._cond:
                while self._running and (not self._queue or self._queue[0].due > _time.monotonic()):
                    self._cond.wait(self._queue[0].due - _time.monotonic() if self._queue else None)
                if not self._running:
                    return
                entry = heapq.heappop(self._queue)
                self._active += 1
            task = entry.task
            try:
                if not task.cancelled:
                    try:
                        task.fn()
                    except Exception:
                        logger.exception("remote log manager task %r failed", task.name)
                    task.runs += 1
            finally:
                with self._cond:
                    self._active -= 1
                    if self._running and not task.cancelled:
                        heapq.heappush(self._queue, _Entry(_time.monotonic() + task.period_ms / 1000, next(self._seq), task))
                    self._cond.notify_all()

    def shutdown(self, timeout: float = 60.0) -> None:
        """Stop taking tasks and wait (up to ``timeout`` seconds) for the runs in progress to end."""
        with self._cond:
            self._running = False
            self._queue.clear()
            self._cond.notify_all()
        deadline = _time.monotonic() + timeout
        for worker in self._workers:
            if worker is not threading.current_thread():
                worker.join(max(0.0, deadline - _time.monotonic()))


def tiering_enabled(log: Log) -> bool:
    return not log.is_closed and bool(log.config.remote_storage_enable)


class RLMTaskScheduler:
    """The copy and expiration tasks of every remote-enabled partition that ``logs()`` returns, kept in step with
    it by a watcher task."""

    def __init__(
        self, rlm: RemoteLogManager, logs: Callable[[], Iterable[Log]], interval_ms: int, copier_threads: int,
        expiration_threads: int,
    ) -> None:
        self.rlm = rlm
        self.logs = logs
        self.interval_ms = interval_ms
        self._lock = threading.Lock()
        self._tasks: dict[int, tuple[Log, ScheduledTask, ScheduledTask]] = {}  # id(log) -> its two tasks
        self.copier_pool = ScheduledPool("remote-log-copier", copier_threads)
        self.expiration_pool = ScheduledPool("remote-log-expiration", expiration_threads)
        self._watcher = self.expiration_pool.schedule("rlm-partition-watcher", self.sync, min(interval_ms, WATCH_INTERVAL_MS))

    def sync(self) -> None:
        """Schedule the tasks of new remote-enabled logs; cancel those of logs closed or no longer enabled."""
        current = {id(log): log for log in self.logs() if tiering_enabled(log)}
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
                    self.copier_pool.schedule(f"RLMCopyTask[{log.name}]", copy_run, self.interval_ms),
                    self.expiration_pool.schedule(f"RLMExpirationTask[{log.name}]", expiration_run, self.interval_ms),
                )

    def partitions(self) -> list[str]:
        with self._lock:
            return sorted(log.name for log, _, _ in self._tasks.values())

    def shutdown(self) -> None:
        self._watcher.cancel()
        with self._lock:
            for _, copy, expire in self._tasks.values():
                copy.cancel()
                expire.cancel()
            self._tasks.clear()
        self.copier_pool.shutdown()
        self.expiration_pool.shutdown()
