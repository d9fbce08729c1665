"""Single flight for chunk loads: the load of a chunk in progress in this process, by chunk name, so concurrent
readers of one missing chunk share one fetch. A failed load is not remembered (the next reader loads again).

Not locked itself: its owner (:class:`tiered.cache.chunk_cache.ChunkCache`) calls it under the cache's state lock,
and a load removes itself when it ends (:meth:`SingleFlight.land`).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, TypeVar

T = TypeVar("T")


class SingleFlight(Generic[T]):
    """Loads in flight, by name."""

    def __init__(self) -> None:
        self._flights: dict[str, Future[T]] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._flights

    def join_or_start(self, name: str, start: Callable[[], Future[T]]) -> Future[T]:
        """The load in flight for ``name``, or a new one from ``start()``."""
        fut = self._flights.get(name)
        if fut is None:
            fut = self._flights[name] = start()
        return fut

    def claim(self, name: str) -> Future[T] | None:
        """A new unresolved load of ``name`` that the caller resolves (and lands), or None when one is in flight."""
        if name in self._flights:
            return None
        fut: Future[T] = Future()
        self._flights[name] = fut
        return fut

    def land(self, name: str, fut: Future[T] | None = None) -> None:
        """The load of ``name`` (``fut``, when given: only if it is still that one) is no longer in flight."""
        if fut is None or self._flights.get(name) is fut:
            self._flights.pop(name, None)

    def pending(self) -> list[Future[T]]:
        return list(self._flights.values())
