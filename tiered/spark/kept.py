"""What a Spark process keeps from one task (or plan) to the next, by key, within a bound.

Spark reuses its Python workers: the planner keeps a remote tier per broker configuration and cache directory
(:func:`tiered.spark.planning.planning_tier`), an executor's worker a remote log manager
(:func:`tiered.spark.reader.remote_log_manager`). Each holds threads, files, maps and caches; a long-lived worker
that reads with many configurations or cache directories (a notebook trying options, a job per data dir) must not
keep them all. :class:`Kept` keeps the ``limit`` most recently used and closes one beyond it as soon as nothing
holds it: at once, or when its last user lets go.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from local.scratch import ScratchDir

__all__ = ["Kept", "TierInDir"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass
class _Entry(Generic[V]):
    value: V
    users: int = 0
    retired: bool = False


class Kept(Generic[K, V]):
    """Values built once per key and kept for the next use: the ``limit()`` most recently used (a callable, read
    at each use). Thread-safe; ``close`` is called outside the lock."""

    def __init__(self, limit: Callable[[], int], close: Callable[[V], None]) -> None:
        self._limit = limit
        self._close = close
        self._entries: dict[K, _Entry[V]] = {}  # least recently used first
        self._lock = threading.Lock()

    @contextmanager
    def use(self, key: K, build: Callable[[], V | None]) -> Iterator[V | None]:
        """The value kept for ``key``, built by ``build`` at its first use (None from it: nothing is kept, and None
        is yielded). Held until the block ends: a value retired meanwhile is closed then."""
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is not None:
                self._entries[key] = entry  # the most recently used now
                entry.users += 1
        if entry is None:
            value = build()  # outside the lock: it may take a while (a plugin, a store)
            if value is None:
                yield None
                return
            with self._lock:
                raced = self._entries.get(key)
                if raced is not None:  # another thread built one meanwhile: use it, close ours
                    raced.users += 1
                    entry, spare = raced, value
                else:
                    entry, spare = _Entry(value, users=1), None
                    self._entries[key] = entry
                idle = self._retire_over_limit()
            if spare is not None:
                self._close(spare)
            for old in idle:
                self._close(old)
        try:
            yield entry.value
        finally:
            with self._lock:
                entry.users -= 1
                done = entry.retired and entry.users == 0
            if done:
                self._close(entry.value)

    def _retire_over_limit(self) -> list[V]:
        """Drop the least recently used entries beyond the limit (holding the lock): the values no one holds, to be
        closed by the caller; the others are closed when their last user lets go."""
        idle = []
        while len(self._entries) > max(1, self._limit()):
            old = self._entries.pop(next(iter(self._entries)))
            old.retired = True
            if old.users == 0:
                idle.append(old.value)
        return idle

    def close_all(self) -> None:
        """Close every kept value (at exit): those in use too."""
        with self._lock:
            values = [e.value for e in self._entries.values()]
            self._entries.clear()
        for value in values:
            self._close(value)

    def values(self) -> list[V]:
        with self._lock:
            return [e.value for e in self._entries.values()]

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


@dataclass(eq=False)
class TierInDir:
    """A remote tier (or log manager) and the directory of this process its index cache lives in: closing one
    closes the tier, then removes the directory."""

    tier: Any
    directory: ScratchDir

    def close(self) -> None:
        try:
            self.tier.close()
        finally:
            self.directory.cleanup()
