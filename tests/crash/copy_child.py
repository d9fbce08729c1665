"""The copying process the copy-crash test kills: ``python copy_child.py DATA_DIR REMOTE_DIR STEP``.

It opens the broker's logs (written by the test beforehand) with a remote tier on the local-directory backend
wrapped by :class:`StoppingDir`, a test-only RSM that, when the first segment copy reaches ``STEP``, prints
``STOPPED <step> <key>`` and waits there for ever: the test then SIGKILLs it, so the copy dies between two of
its steps with no ``finally`` or ``except`` of ours running. Steps:

- ``started``: the COPY_SEGMENT_STARTED metadata is in the bucket, no data yet;
- ``log``: the segment's ``.log`` is uploaded;
- ``indexes``: the offset and time indexes are uploaded too;
- ``finished``: every object is uploaded, the COPY_SEGMENT_FINISHED metadata is about to be written.

Reaching the end of the pass without stopping prints ``DONE`` (a failure for the test: the step never came).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from local import LogConfig, LogManager
from tiered.backends.local_dir import LocalDirRemoteStorageManager
from tiered.composition import assemble_remote_log_manager
from tiered.metadata import RemoteLogMetadataStore
from tiered.rsm import RemoteLogSegmentState

STEPS = ("started", "log", "indexes", "finished")
STARTED_SUFFIX = f".{int(RemoteLogSegmentState.COPY_SEGMENT_STARTED)}.json"
FINISHED_SUFFIX = f".{int(RemoteLogSegmentState.COPY_SEGMENT_FINISHED)}.json"


def props(data_dir: Path, remote_dir: Path) -> dict[str, str]:
    return {
        "log.dirs": str(data_dir),
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "local",
        "rsm.config.dir": str(remote_dir),
        "log.segment.bytes": str(2**20),
    }


class StoppingDir(LocalDirRemoteStorageManager):
    def __init__(self, step: str) -> None:
        super().__init__()
        if step not in STEPS:
            raise ValueError(f"unknown step {step!r}; one of {STEPS}")
        self.step = step

    def _stop(self, key: str) -> None:
        print(f"STOPPED {self.step} {key}", flush=True)
        while True:  # the parent's SIGKILL ends this
            signal.pause()

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        if self.step == "finished" and key.endswith(FINISHED_SUFFIX):
            self._stop(key)
        super().put_bytes(key, data, if_absent=if_absent)
        if self.step == "started" and key.endswith(STARTED_SUFFIX):
            self._stop(key)

    def put_file(self, key: str, path: Path) -> None:
        super().put_file(key, path)
        if (self.step == "log" and key.endswith(".log")) or (self.step == "indexes" and key.endswith(".timeindex")):
            self._stop(key)


def main(data_dir: str, remote_dir: str, step: str) -> None:
    rsm = StoppingDir(step)
    rsm.configure({"dir": remote_dir})
    rlm = assemble_remote_log_manager(rsm, RemoteLogMetadataStore(rsm), Path(data_dir))
    config = LogConfig.from_properties(props(Path(data_dir), Path(remote_dir)))
    with LogManager(config, remote_tier=rlm, start_scheduler=False) as manager:
        print("READY", flush=True)
        rlm.run_once(manager.all_logs())
    print("DONE", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
