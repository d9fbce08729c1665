"""Locks that know their place in the lock order, so the order is checked rather than only documented.

Each :class:`RankedLock` has a rank; a thread may take a lock only while every lock it holds has a lower rank,
and taking one out of order raises ``RuntimeError`` naming both (a deadlock found the first time the wrong order
runs, not the day two threads meet in it). A ``threading.Condition`` may be built over one; ``wait()`` gives the
lock back and takes it again in order. Not reentrant.

The ranks in use (lowest first): a chunk stream's condition (1), the chunk cache's shared state (2), the disk
store's list of cold objects (3), the chunk cache's counters (4).
"""

from __future__ import annotations

import threading
from types import TracebackType

STREAM = 1
CACHE_STATE = 2
DISK_COLD = 3
COUNTERS = 4

_held = threading.local()


def _stack() -> list[RankedLock]:
    try:
        return _held.stack
    except AttributeError:
        stack: list[RankedLock] = []
        _held.stack = stack
        return stack


class RankedLock:
    """A lock with a rank in the lock order (see the module docstring)."""

    __slots__ = ("_lock", "name", "rank")

    def __init__(self, name: str, rank: int) -> None:
        self.name, self.rank = name, rank
        self._lock = threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        stack = _stack()
        if stack and stack[-1].rank >= self.rank:
            self._refuse(stack[-1])
        if not self._lock.acquire(blocking, timeout):
            return False
        stack.append(self)
        return True

    def release(self) -> None:
        stack = _stack()
        if stack and stack[-1] is self:
            stack.pop()
        else:
            stack.remove(self)
        self._lock.release()

    def _refuse(self, top: RankedLock) -> None:
        raise RuntimeError(f"lock order: {self.name} (rank {self.rank}) taken while holding {top.name} (rank {top.rank})")

    def _is_owned(self) -> bool:  # what threading.Condition asks of its lock
        return self in _stack()

    # ``with`` is the hot path (every chunk cache read): the same as acquire/release, in one call each.
    def __enter__(self) -> bool:
        try:
            stack = _held.stack
        except AttributeError:
            stack = _stack()
        if stack and stack[-1].rank >= self.rank:
            self._refuse(stack[-1])
        self._lock.acquire()
        stack.append(self)
        return True

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        stack = _held.stack
        if stack[-1] is self:
            stack.pop()
        else:
            stack.remove(self)
        self._lock.release()
