"""Delayed calls for the group coordinator (Kafka's timing wheel, reduced to a heap and one thread).

:meth:`Timers.schedule` runs ``fn`` on the timer thread after ``delay_s`` unless the returned handle is cancelled
first. Callbacks must be short (they take the coordinator's lock and complete futures); one that raises is logged
and the others go on.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)


class Timer:
    __slots__ = ("cancelled", "deadline", "fn")

    def __init__(self, deadline: float, fn: Callable[[], None]) -> None:
        self.deadline = deadline
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Timers:
    """See the module docstring."""

    def __init__(self, name: str = "kafka-timers") -> None:
        self._heap: list[tuple[float, int, Timer]] = []
        self._counter = itertools.count()
        self._changed = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def schedule(self, delay_s: float, fn: Callable[[], None]) -> Timer:
        timer = Timer(time.monotonic() + max(0.0, delay_s), fn)
        with self._changed:
            heapq.heappush(self._heap, (timer.deadline, next(self._counter), timer))
            self._changed.notify()
        return timer

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify()
        self._thread.join(10)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._closed:
                    if self._heap and self._heap[0][0] <= time.monotonic():
                        break
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._changed.wait(wait)
                if self._closed:
                    return
                _, _, timer = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            try:
                timer.fn()
            except Exception as exc:  # one failing callback must not stop the others
                logger.error("a group coordinator timer failed: %s", exc, exc_info=exc)
