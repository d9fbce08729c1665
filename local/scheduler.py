"""Time sources and the background scheduler of the log engine (Kafka's ``Time`` and ``KafkaScheduler``).

The log never reads the wall clock directly: it asks a :class:`Time`, so tests drive time with
:class:`MockTime`, whose :class:`MockScheduler` runs due tasks when the clock is advanced.
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
        self.cancelled = True


class Scheduler:
    """Runs one-off and periodic tasks on a single daemon thread.

    A task that raises is logged and, if periodic, keeps its schedule (as Kafka's scheduler does).
    """

    def __init__(self, name: str = "tiered-scheduler", time: Time = SYSTEM_TIME) -> None:
        self._time = time
        self._name = name
        self._tasks: list[_Task] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._running = False

    def startup(self) -> None:
        with self._cond:
            if self._running:
                return
            self._running = True
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

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

    def shutdown(self, run_pending: bool = False) -> None:
        """Stop the thread; with ``run_pending`` the one-off tasks still queued run first (like deletes)."""
        with self._cond:
            self._running = False
            pending = [t for t in self._tasks if not t.cancelled and t.period_ms is None] if run_pending else []
            self._tasks.clear()
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        self._thread = None
        for task in sorted(pending):
            self._run(task)

    @property
    def is_started(self) -> bool:
        return self._running

    def _run(self, task: _Task) -> None:
        try:
            task.fn()
        except Exception:
            logger.exception("scheduled task %r failed", task.name)

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


class MockScheduler(Scheduler):
    """A scheduler with no thread: due tasks run inside :meth:`MockTime.sleep` (for deterministic tests)."""

    def __init__(self, name: str = "mock-scheduler", time: Time = SYSTEM_TIME) -> None:
        super().__init__(name, time)
        self._running = True

    def startup(self) -> None:
        self._running = True

    def shutdown(self, run_pending: bool = False) -> None:
        with self._cond:
            self._running = False
            pending = [t for t in self._tasks if not t.cancelled and t.period_ms is None] if run_pending else []
            self._tasks.clear()
        for task in sorted(pending):
            self._run(task)

    def tick(self) -> None:
        """Run every task that is due now (re-queueing periodic ones)."""
        while True:
            with self._cond:
                if not self._tasks or self._tasks[0].due_ms > self._time.milliseconds():
                    return
                task = heapq.heappop(self._tasks)
            if task.cancelled:
                continue
            self._run(task)
            if task.period_ms is not None:
                with self._cond:
                    task.due_ms += task.period_ms
                    task.seq = next(self._seq)
                    heapq.heappush(self._tasks, task)


class MockTime(Time):
    """A clock that only moves when told to; :meth:`sleep` advances it and runs due scheduler tasks."""

    def __init__(self, ms: int = 1_700_000_000_000, nanos: int = 0) -> None:
        self._ms = ms
        self._nanos = nanos
        self.scheduler = MockScheduler(time=self)

    def milliseconds(self) -> int:
        return self._ms

    def nanoseconds(self) -> int:
        return self._nanos

    def sleep(self, ms: int) -> None:
        self._ms += ms
        self._nanos += ms * 1_000_000
        self.scheduler.tick()
