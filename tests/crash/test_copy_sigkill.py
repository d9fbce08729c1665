"""A segment copy killed for real: a child process copies with a test-only RSM (``copy_child.py``) that stops
at a chosen step (after the STARTED metadata, after the ``.log``, after the indexes, before FINISHED) and says
so; the test SIGKILLs it there, so nothing of the copy's own cleanup runs (unlike test_copy_crashes.py, which
raises in-process). Then, in this process:

- before any restart, a reader building its view from the bucket sees no segment of the dead attempt (it is
  STARTED, never FINISHED): nothing is half visible;
- a restarted broker's next pass deletes the dead attempt's objects, copies every segment again, and leaves no
  orphan: every data object in the bucket belongs to a FINISHED segment, no temporary file is left, and every
  record reads back through the remote tier after local retention.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from tests.crash.copy_child import STEPS, props
from tests.logutil import read_all_values
from tiered.backends.local_dir import LocalDirRemoteStorageManager
from tiered.layout import kafka_uuid
from tiered.metadata import RemoteLogMetadataStore
from tiered.remote_log_manager import RemoteLogManager
from tiered.rsm import RemoteLogSegmentState, TopicIdPartition

pytestmark = pytest.mark.crash

CHILD = Path(__file__).with_name("copy_child.py")
REPO = Path(__file__).resolve().parents[2]
OVERRIDES = {"remote.storage.enable": "true", "local.retention.bytes": "1"}
RECORDS = 12_000
LIMIT = 120.0  # seconds: a failure bound for a child that should get to its step in a second or two


def _value(i: int) -> bytes:
    return (b"%06d" % i) * 33


def _write_log(data: Path, remote: Path) -> int:
    """The partition the child will copy, written and closed cleanly; returns its number of segments."""
    now = int(time.time() * 1000)
    with LogManager(LogConfig.from_properties(props(data, remote)), start_scheduler=False) as m:
        log = m.get_or_create_log("c", 0, OVERRIDES)
        for first in range(0, RECORDS, 100):
            log.append(MemoryRecords.build([SimpleRecord(now, None, _value(i)) for i in range(first, first + 100)]))
        return log.number_of_segments()


def _temp_dir(data: Path) -> Path:
    temp = data.parent / "child-temp"
    temp.mkdir(exist_ok=True)
    return temp


class Child:
    """The copying process and the lines it prints (read on a thread; ``stopped`` is set on ``STOPPED``)."""

    def __init__(self, data: Path, remote: Path, step: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(data), str(remote), step],
            # its temp dir (the copy's tiered-copy-*, which a SIGKILL leaves behind) inside the test's own dir
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(_temp_dir(data))},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.lines: list[str] = []
        self.stopped = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode().strip()
            self.lines.append(line)
            if line.startswith("STOPPED"):
                self.stopped.set()
        self.stopped.set()  # it ended on its own: nobody waits for ever

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        _, err = self.proc.communicate(timeout=LIMIT)
        self._reader.join(timeout=LIMIT)
        if self.proc.returncode != -signal.SIGKILL:
            pytest.fail(f"the child exited with {self.proc.returncode} before it was killed: {self.lines}\n{err.decode()}")


def _data_objects(remote: Path) -> list[Path]:
    return [p for p in remote.rglob("*") if p.is_file() and not p.name.endswith(".json")]


@pytest.mark.parametrize("step", STEPS)
def test_a_copy_killed_at_each_step_leaves_no_orphan_and_nothing_half_visible(tmp_path: Path, step: str) -> None:
    data, remote = tmp_path / "data", tmp_path / "remote"
    segments = _write_log(data, remote)
    assert segments >= 3

    child = Child(data, remote, step)
    try:
        assert child.stopped.wait(LIMIT), f"the child never reached step {step}: {child.lines}"
        assert child.lines[-1].startswith(f"STOPPED {step} "), child.lines
    finally:
        child.kill()
    stopped_at = child.lines[-1].split()[2]

    # The dead attempt, as the bucket holds it: STARTED only, so invisible to any reader.
    rsm = LocalDirRemoteStorageManager()
    rsm.configure({"dir": str(remote)})
    store = RemoteLogMetadataStore(rsm)
    keys = {p.relative_to(remote).as_posix() for p in remote.rglob("*") if p.is_file()}
    topic_dir = next(k.split("/")[0] for k in keys if k.startswith("c-"))
    with LogManager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False) as plain:
        topic_id = plain.get_log("c", 0).topic_id  # type: ignore[union-attr]
    assert topic_id is not None and topic_dir == f"c-{kafka_uuid(topic_id)}"
    tip = TopicIdPartition(topic_id, "c", 0)
    stale = store.find_stale_copies(tip)
    assert [md.state for md in stale] == [RemoteLogSegmentState.COPY_SEGMENT_STARTED]
    assert store.readable_segments(tip) == []
    dead = kafka_uuid(stale[0].remote_log_segment_id.id)
    left = [p.name for p in _data_objects(remote)]
    assert all(dead in name for name in left), left
    # what the attempt had uploaded when it died, and nothing more
    assert sorted(name.split(dead, 1)[1] for name in left) == {
        "started": [],
        "log": [".log"],
        "indexes": [".index", ".log", ".timeindex"],
        "finished": [".index", ".leader-epoch-checkpoint", ".log", ".snapshot", ".timeindex"],
    }[step], (stopped_at, left)

    # Restart: the next pass cleans the dead attempt up and copies everything again.
    with LogManager(LogConfig.from_properties(props(data, remote)), start_scheduler=False) as m:
        rlm = m.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        log = m.get_log("c", 0)
        assert log is not None
        result = rlm.run_once(m.all_logs())
        assert result.stale_copies_cleaned == 1 and result.copy_errors == 0
        assert result.segments_copied == log.number_of_segments() - 1 == segments - 1
        finished = rlm.finished_segments(tip)
        assert [md.start_offset for md in finished] == [s.base_offset for s in list(log.segments.values())[:-1]]
        assert all(a.end_offset + 1 == b.start_offset for a, b in itertools.pairwise(finished))
        ids = {kafka_uuid(md.remote_log_segment_id.id) for md in finished}
        objects = _data_objects(remote)
        assert not [p for p in objects if dead in p.name], "the dead attempt's objects are still there"
        assert not [p for p in remote.rglob("*") if p.name.endswith(".tmp")], "a temporary upload was left"
        orphans = [p.name for p in objects if not any(i in p.name for i in ids)]
        assert orphans == []
        assert len([p for p in objects if p.name.endswith(".log")]) == len(finished)
        assert m.cleanup_logs() > 0 and log.local_log_start_offset > 0  # the reads below go through the bucket
        assert read_all_values(log) == [(i, _value(i)) for i in range(RECORDS)]
