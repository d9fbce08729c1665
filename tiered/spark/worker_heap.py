"""Spark's reused Python workers, kept cheap to garbage-collect.

PySpark's daemon runs a full ``gc.collect()`` in a reused worker after every task (``pyspark/daemon.py``, where
``SPARK_REUSE_WORKER`` is set, Spark's default). A full collection walks every object the process tracks, and a
worker that has read through this source holds many that live as long as it does: the modules of pyspark, pyarrow,
numpy and this package, the remote tier and its caches. On the bench machine that was 15-50 ms a task, most of a
worker's CPU when it reads 1M records (``bench/RESULTS.md``, sixteenth session).

So, at the end of the first read (or plan) of a process that Spark reuses, and when the data source is made (Spark
does that at every ``load()``, in a reused worker of its own: ~14 ms a query went to its collections), the source
collects once and freezes what survives (:func:`gc.freeze`): later collections walk only what later tasks allocate. Objects frozen stay
freed by reference counting as usual; only a reference cycle among them that becomes garbage later is never
collected, a bounded, one-off cost (the surviving objects of one read; the collection before the freeze takes the
garbage). Once per process; nothing happens outside a reused Spark worker (a plain Python process, a test), or with
the read option ``freezeWorkerHeap=false``.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

__all__ = ["settle", "settle_after"]

T = TypeVar("T")
_lock = threading.Lock()
_settled = False


def reused_worker() -> bool:
    """Whether this process is a Spark Python worker that Spark reuses across tasks (its daemon collects after each
    one), as the daemon itself decides it."""
    return bool(os.environ.get("SPARK_REUSE_WORKER"))


def settle(enabled: bool = True) -> bool:
    """Collect, then freeze what survives, the first time it is called in a reused Spark worker (with ``enabled``):
    True when this call did it."""
    global _settled
    if _settled or not enabled or not reused_worker():
        return False
    with _lock:
        if _settled:
            return False
        gc.collect()
        gc.freeze()
        _settled = True
        return True


def settle_after(items: Iterable[T], enabled: bool = True) -> Iterator[T]:
    """``items``, then :func:`settle` once they are all out (a read that raises settles nothing)."""
    yield from items
    settle(enabled)
