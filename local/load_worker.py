"""Worker processes for phase 1 of a parallel partition load (``num.segment.loading.threads.per.data.dir`` > 1).

Under CPython's GIL, threads make phase 1 slower, not faster: every segment is a dozen syscalls of a few
microseconds, and each hands the GIL to another thread (``bench/bench_loading.py`` has the profile). Half of
phase 1, reading and checking every segment's index files, needs nothing of the loading process, so it runs
here, in ``python -m local.load_worker`` children, while the loading thread opens the segments.

The children are plain subprocesses speaking JSON lines on stdin/stdout, not a ``multiprocessing`` pool: a
fork-server or spawned pool re-imports the parent's ``__main__`` in every child, which would run any script
that opens a log without an ``if __name__ == "__main__"`` guard a second time. A child exits when its stdin
closes, so one outlives neither its parent nor :func:`shutdown`.

Each worker thread of :class:`CheckerPool` owns one child. When a child cannot be started or dies, the thread
checks the chunk itself: slower, never wrong.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import subprocess
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any

logger = logging.getLogger(__name__)

Chunk = list[tuple[int, bool, bool]]
"""``(base offset, has an offset index, has a transaction index)`` of consecutive segments."""


def check_chunk(directory: str, chunk: Chunk, requested_entry_size: int) -> list[str | None]:
    """:func:`local.index.sanity.check_segment_index_files` for each segment of ``chunk``, the log's size from a stat."""
    from local import filenames
    from local.index.sanity import check_segment_index_files

    problems = []
    for base, has_offset_index, has_txn_index in chunk:
        log = os.path.join(directory, filenames.filename_prefix_from_offset(base) + filenames.LOG_FILE_SUFFIX)
        problems.append(
            check_segment_index_files(
                directory, base, os.stat(log).st_size, has_offset_index, has_txn_index, requested_entry_size
            )
        )
    return problems


class _Child:
    """One ``python -m local.load_worker`` process and its pipes."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # a child's own failure reaches the parent's stderr
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._stdin: IO[bytes] = self.process.stdin
        self._stdout: IO[bytes] = self.process.stdout

    def check(self, directory: str, chunk: Chunk, requested_entry_size: int) -> list[str | None]:
        request = {"dir": directory, "chunk": chunk, "requested": requested_entry_size}
        self._stdin.write(json.dumps(request).encode() + b"\n")
        self._stdin.flush()
        line = self._stdout.readline()
        if not line:
            raise EOFError(f"load worker {self.process.pid} exited (status {self.process.poll()})")
        reply: dict[str, Any] = json.loads(line)
        if "oserror" in reply:
            errno, strerror, filename = reply["oserror"]
            raise OSError(errno, strerror, filename)
        problems: list[str | None] = reply["problems"]
        return problems

    def close(self) -> None:
        try:
            self._stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._stdout.close()


class CheckerPool:
    """``workers`` threads, each with its own child process, checking chunks of segments."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._threads = ThreadPoolExecutor(workers, thread_name_prefix="log-loader")
        self._local = threading.local()
        self._children: list[_Child] = []
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, directory: str, chunk: Chunk, requested_entry_size: int) -> Future[tuple[str, list[str | None]]]:
        """Check ``chunk``; the future holds the name of the thread that did and the problems, in order."""
        return self._threads.submit(self._check, directory, chunk, requested_entry_size)

    def _check(self, directory: str, chunk: Chunk, requested_entry_size: int) -> tuple[str, list[str | None]]:
        name = threading.current_thread().name
        child = self._child()
        if child is not None:
            try:
                return name, child.check(directory, chunk, requested_entry_size)
            except (EOFError, BrokenPipeError, ValueError) as exc:
                logger.warning("segment loading worker failed (%s): checking on thread %s", exc, name)
                self._local.child = None
                self._local.failed = True
                child.close()
        return name, check_chunk(directory, chunk, requested_entry_size)

    def _child(self) -> _Child | None:
        child: _Child | None = getattr(self._local, "child", None)
        if child is not None or getattr(self._local, "failed", False):
            return child
        try:
            child = _Child()
        except OSError as exc:
            logger.warning("cannot start a segment loading worker process (%s): checking on threads", exc)
            self._local.failed = True
            return None
        with self._lock:
            if self._closed:
                child.close()
                return None
            self._children.append(child)
        self._local.child = child
        return child

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            children, self._children = self._children, []
        self._threads.shutdown(wait=True, cancel_futures=True)
        for child in children:
            child.close()


_pools: dict[int, CheckerPool] = {}
_pools_lock = threading.Lock()


def pool(workers: int) -> CheckerPool:
    """The pool of ``workers`` checkers shared by every load of this process (its children start lazily, at
    their first chunk, and are reused by later loads)."""
    with _pools_lock:
        existing = _pools.get(workers)
        if existing is None:
            existing = _pools[workers] = CheckerPool(workers)
        return existing


@atexit.register
def shutdown() -> None:
    """Stop every pool's threads and children."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for each in pools:
        each.shutdown()


def main() -> None:
    """The child's loop: one JSON request per line on stdin, one JSON reply per line on stdout, until EOF."""
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        request = json.loads(line)
        chunk = [(int(base), bool(has_offset), bool(has_txn)) for base, has_offset, has_txn in request["chunk"]]
        try:
            reply: dict[str, Any] = {"problems": check_chunk(request["dir"], chunk, int(request["requested"]))}
        except OSError as exc:
            reply = {"oserror": [exc.errno, exc.strerror, exc.filename]}
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
