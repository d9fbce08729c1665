"""A bytes-per-second quota: ``remote.log.manager.copy.max.bytes.per.second`` for the copy tasks and
``remote.log.manager.fetch.max.bytes.per.second`` for remote reads (Kafka's RLMQuotaManager, as a token bucket)."""

from __future__ import annotations

import threading
import time as _time


class RateLimiter:
    """Bytes-per-second quota (remote.log.manager.copy/fetch.max.bytes.per.second); None = unbounded."""

    def __init__(self, bytes_per_second: int | None) -> None:
        self.rate = bytes_per_second if bytes_per_second and bytes_per_second < 2**62 else None
        self._lock = threading.Lock()
        self._available = float(self.rate or 0)
        self._last = _time.monotonic()

    def acquire(self, n: int) -> None:
        if self.rate is None:
            return
        with self._lock:
            now = _time.monotonic()
            self._available = min(float(self.rate), self._available + (now - self._last) * self.rate)
            self._last = now
            self._available -= n
            wait = -self._available / self.rate if self._available < 0 else 0.0
        if wait > 0:
            _time.sleep(wait)
