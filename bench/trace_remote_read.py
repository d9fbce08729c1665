"""How much code a remote read runs: ``python -m bench.trace_remote_read`` (a measure, not a benchmark).

Builds a partition on the embedded local-directory tier (1 MiB segments), offloads it, deletes it locally, then
opens a fresh LogManager (fresh caches, no threads yet) and traces, with ``sys.setprofile`` and
``threading.setprofile`` (so the cache's worker threads count too), one read of 64 KiB from the middle of the
second remote segment (cold: an index lookup and a fetch), then the same read again (warm: from memory). It prints,
for each, the Python calls made into the project's own files (``local/`` and ``tiered/``), how many of those
files they touch, and how deep the stack of project frames is at the first call into the plugin's
``fetch_log_segment``: first on the reading thread alone (the read's own path), then with the cache's worker
threads (the fetch itself and the read-ahead it starts).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord

ROOT = Path(__file__).resolve().parent.parent
PROJECT = (str(ROOT / "local") + "/", str(ROOT / "tiered") + "/")


class _Trace:
    def __init__(self) -> None:
        self.calls = self.reader_calls = 0
        self.files: set[str] = set()
        self.reader_files: set[str] = set()
        self.fetch_depth: int | None = None
        self._lock = threading.Lock()
        self._reader = threading.get_ident()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        path = frame.f_code.co_filename
        if not path.startswith(PROJECT):
            return
        with self._lock:
            self.calls += 1
            self.files.add(path)
            if threading.get_ident() == self._reader:
                self.reader_calls += 1
                self.reader_files.add(path)
            if self.fetch_depth is None and frame.f_code.co_name == "fetch_log_segment":
                depth, f = 0, frame.f_back
                while f is not None:
                    depth += f.f_code.co_filename.startswith(PROJECT)
                    f = f.f_back
                self.fetch_depth = depth

    def run(self, fn: Any) -> str:
        threading.setprofile(self)
        sys.setprofile(self)
        try:
            fn()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
        return (f"reading thread {self.reader_calls} calls in {len(self.reader_files)} files; with the cache's "
                f"workers {self.calls} calls in {len(self.files)} files; fetch at depth {self.fetch_depth}")


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="trace-remote-"))
    try:
        props = {
            "log.dirs": str(tmp / "data"), "log.segment.bytes": str(1024 * 1024),
            "remote.log.storage.system.enable": "true", "remote.log.storage.manager.class.name": "local",
            "rsm.config.dir": str(tmp / "remote"),
        }
        overrides = {"remote.storage.enable": "true", "local.retention.bytes": "1"}
        now = int(time.time() * 1000)
        with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
            log = manager.get_or_create_log("t", 0, overrides)
            while log.number_of_segments() < 4:
                log.append(MemoryRecords.build([SimpleRecord(now, None, b"x" * 1000) for _ in range(50)]))
            manager.remote_tier.run_once(manager.all_logs())  # type: ignore[union-attr]
            manager.cleanup_logs()
            second = next(iter(log.segments.values())).base_offset // 3
        with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
            log = manager.get_log("t", 0)
            assert log is not None and second < log.local_log_start_offset
            offset = second + second // 2
            print("cold remote read:", _Trace().run(lambda: log.read(offset, 64 * 1024)))
            print("warm remote read:", _Trace().run(lambda: log.read(offset, 64 * 1024)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
