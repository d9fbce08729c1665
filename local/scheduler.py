"""Time sources and the background scheduler (Kafka's ``Time`` and ``KafkaScheduler``): the log engine's, and the
remote tier's copier and expiration pools (``tiered.rlm_tasks``), one implementation with N workers.

The log never reads the wall clock directly: it asks a :class:`Time`, so tests drive time with
:class:`MockTime`, whose :class:`MockScheduler` runs due tasks when the clock is advanced; a scheduler made by
:meth:`Time.new_scheduler` is of the clock's kind, so whoever is handed a MockTime schedules on it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time as _time
from collections.abc import Callable
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


class Time:
    """The wall clock, in Kafka's units."""

    def milliseconds(self) -> int:
        return _time.time_ns() // 1_000_000

    def nanoseconds(self) -> int:
        return _time.monotonic_ns()

    def sleep(self, ms: int) -> None:
        _time.sleep(ms / 1000)

    def new_scheduler(self, name: str, threads: int = 1) -> Scheduler:
        """A scheduler on this clock with ``threads`` workers (not started). A :class:`MockTime` answers with a
        :class:`MockScheduler` that its :meth:`MockTime.sleep` drives, so whoever is handed the clock schedules
        work a test can run by advancing it."""
        return Scheduler(name, self, threads=threads)


SYSTEM_TIME = Time()


@dataclass(order=True)
class _Task:
    due_ms: int
    seq: int
    name: str = field(compare=False)
    fn: Callable[[], object] = field(compare=False)
    period_ms: int | None = field(compare=False, default=None)
    cancelled: bool = field(compare=False, default=False)

    def cancel(self) -> None:
        """Run no more (a run in progress ends as it would)."""
        self.cancelled = True


class Scheduler:
    """Runs one-off and periodic tasks on ``threads`` daemon workers sharing one queue (Kafka's ``KafkaScheduler``,
    a ``ScheduledThreadPoolExecutor``).

    A periodic task runs with a fixed delay: its next run is due ``period_ms`` after the previous one ended
    (``scheduleWithFixedDelay``), so it never runs twice at once, however many workers there are. A task that
    raises is logged and, if periodic, keeps its schedule (as Kafka's scheduler does).
    """

    def __init__(self, name: str = "tiered-scheduler", time: Time = SYSTEM_TIME, *, threads: int = 1) -> None:
        self._time = time
        self._name = name
        self._threads = max(1, threads)
        self._tasks: list[_Task] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._workers: list[threading.Thread] = []
        self._running = False

    @property
    def time(self) -> Time:
        """The clock the tasks' due times are read on."""
        return self._time

    def startup(self) -> None:
        with self._cond:
            if self._running:
                return
            self._running = True
            names = [self._name] if self._threads == 1 else [f"{self._name}-{i}" for i in range(self._threads)]
            self._workers = [threading.Thread(target=self._loop, name=n, daemon=True) for n in names]
            for worker in self._workers:
                worker.start()

    def schedule(
        self, name: str, fn: Callable[[], object], delay_ms: int = 0, period_ms: int | None = None
    ) -> _Task:
        """Run ``fn`` after ``delay_ms``, then every ``period_ms`` if given. Returns a cancellable handle."""
        if period_ms is not None and period_ms <= 0:
            raise ValueError(f"period_ms must be > 0, got {period_ms}")
        task = _Task(self._time.milliseconds() + max(0, delay_ms), next(self._seq), name, fn, period_ms)
        with self._cond:
            heapq.heappush(self._tasks, task)
            self._cond.notify()
        return task

    def schedule_once(self, name: str, fn: Callable[[], object], delay_ms: int = 0) -> _Task:
        return self.schedule(name, fn, delay_ms)

    def shutdown(self, run_pending: bool = False, timeout: float = 30.0) -> None:
        """Stop the workers, waiting up to ``timeout`` seconds for the runs in progress; with ``run_pending`` the
        one-off tasks still queued run first (like deletes)."""
        pending = self._stop(run_pending)
        deadline = _time.monotonic() + timeout
        for worker in self._workers:
            if worker is not threading.current_thread():
                worker.join(max(0.0, deadline - _time.monotonic()))
        self._workers = []
        for task in sorted(pending):
            self._run(task)

    def _stop(self, run_pending: bool) -> list[_Task]:
        with self._cond:
            self._running = False
            pending = [t for t in self._tasks if not t.cancelled and t.period_ms is None] if run_pending else []
            self._tasks.clear()
            self._cond.notify_all()
        return pending

    @property
    def is_started(self) -> bool:
        return self._running

    def _run(self, task: _Task) -> None:
        try:
            task.fn()
        except Exception:
            logger.exception("scheduled task %r of %s failed", task.name, self._name)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._running and (not self._tasks or self._tasks[0].due_ms > self._time.milliseconds()):
                    wait = (self._tasks[0].due_ms - self._time.milliseconds()) / 1000 if self._tasks else None
                    self._cond.wait(timeout=wait)
                if not self._running:
                    return
                task = heapq.heappop(self._tasks)
            if task.cancelled:
                continue
            self._run(task)
            if task.period_ms is not None and not task.cancelled:
                with self._cond:
                    if self._running:
                        task.due_ms = self._time.milliseconds() + task.period_ms
                        task.seq = next(self._seq)
                        heapq.heappush(self._tasks, task)
                        self._cond.notify()


class MockScheduler(Scheduler):
    """A scheduler with no thread: due tasks run inside :meth:`MockTime.sleep` (for deterministic tests)."""

    def __init__(self, name: str = "mock-scheduler", time: Time = SYSTEM_TIME, *, threads: int = 1) -> None:
        super().__init__(name, time, threads=threads)
        self._running = True

    def startup(self) -> None:
        self._running = True

    def shutdown(self, run_pending: bool = False, timeout: float = 30.0) -> None:
        for task in sorted(self._stop(run_pending)):
            self._run(task)

    def tick(self) -> bool:
        """Run every task that is due now (re-queueing periodic ones); whether any ran."""
        ran = False
        while True:
            with self._cond:
                if not self._running or not self._tasks or self._tasks[0].due_ms > self._time.milliseconds():
                    return ran
                task = heapq.heappop(self._tasks)
            if task.cancelled:
                continue
            self._run(task)
            ran = True
            if task.period_ms is not None and not task.cancelled:
                with self._cond:
                    if self._running:
                        task.due_ms += task.period_ms
                        task.seq = next(self._seq)
                        heapq.heappush(self._tasks, task)


class MockTime(Time):
    """A clock that only moves when told to; :meth:`sleep` advances it and runs the due tasks of its schedulers
    (:attr:`scheduler`, and every one made by :meth:`new_scheduler`)."""

    def __init__(self, ms: int = 1_700_000_000_000, nanos: int = 0) -> None:
        self._ms = ms
        self._nanos = nanos
        self.scheduler = MockScheduler(time=self)
        self._schedulers: list[MockScheduler] = [self.scheduler]

    def milliseconds(self) -> int:
        return self._ms

    def nanoseconds(self) -> int:
        return self._nanos

    def new_scheduler(self, name: str, threads: int = 1) -> Scheduler:
        scheduler = MockScheduler(name, self, threads=threads)
        self._schedulers.append(scheduler)
        return scheduler

    def sleep(self, ms: int) -> None:
        self._ms += ms
        self._nanos += ms * 1_000_000
        self.tick()

    def tick(self) -> None:
        """Run what is due on every scheduler of this clock, until none has a task due (a task may schedule
        another, on another scheduler, due at once)."""
        while any([scheduler.tick() for scheduler in list(self._schedulers)]):
            pass
