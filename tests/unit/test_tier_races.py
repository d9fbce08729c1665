"""Races of the remote tier's tasks with each other and of readers with retention, found under load (issue 27) and
replayed here deterministically: the threads meet at gates (:mod:`tests.gated_rsm`), never after sleeps.

- A remote segment is deleted once. The expiration task deletes FINISHED segments; the copy task's cleanup deletes
  segments left COPY_SEGMENT_STARTED or DELETE_SEGMENT_STARTED (a crash, an outage), which includes a segment the
  expiration task is deleting at that moment. Under load the two met: the segment's objects were deleted twice, or
  the copy task's cleanup failed with ``invalid remote segment state transition DELETE_SEGMENT_FINISHED ->
  DELETE_SEGMENT_STARTED``.
- A read in flight keeps its file. A fetch answers a slice of its segment's file; retention closes the file
  ``file.delete.delay.ms`` after deleting the segment, and a consumer slowed down by a busy machine read its slice
  after that: ``OSError: [Errno 9] Bad file descriptor`` (or the bytes of another file opened since under the same
  descriptor number).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from local import LogConfig, LogManager
from local.log import Log, LogStartOffsetIncrementReason
from local.records import MemoryRecords, SimpleRecord
from local.scheduler import MockTime
from tests.gated_rsm import LIMIT, Gate, GatedDeletes
from tests.logutil import held_files, local_tier_props, make_log
from tiered.composition import assemble_remote_log_manager
from tiered.metadata import RemoteLogMetadataStore
from tiered.remote_log_manager import RemoteLogManager
from tiered.rsm import RemoteLogSegmentMetadata

NOW = int(time.time() * 1000)
TIERED = {"remote.storage.enable": "true"}


class Node:
    """A LogManager (no scheduler: the test runs the tasks) whose remote tier deletes through :class:`GatedDeletes`;
    :meth:`restart` gives a new RemoteLogManager over the same store, as a restarted process has."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.rsm = GatedDeletes()
        self.rsm.configure({"dir": str(tmp / "remote")})
        self.registry = CollectorRegistry()
        self.rlm = self._rlm()
        self.manager = LogManager(
            LogConfig.from_properties(local_tier_props(tmp)), remote_tier=self.rlm, start_scheduler=False
        )
        self.log = self.manager.get_or_create_log("t", 0, TIERED)

    def _rlm(self) -> RemoteLogManager:
        return assemble_remote_log_manager(self.rsm, RemoteLogMetadataStore.in_bucket(self.rsm), self.tmp / "data",
            registry=self.registry, time=MockTime(ms=NOW),
        )

    def restart_remote_tier(self) -> None:
        """The remote tier as a new process builds it: new tasks, a metadata view loaded from the store."""
        self.rlm = self._rlm()
        self.log.remote_tier = self.rlm

    def remote(self) -> list[RemoteLogSegmentMetadata]:
        """The segments the store's view still lists (not DELETE_SEGMENT_FINISHED), by start offset."""
        return self.rlm.metadata.list_remote_log_segments(self.rlm.topic_id_partition(self.log))

    def deletes_of(self, start: int) -> int:
        return sum(1 for s, _ in self.rsm.deleted if s == start)

    def move_log_start(self, offset: int) -> None:
        self.log.maybe_increment_log_start_offset(offset, LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    for i in range(5):  # four closed segments of two records (offsets 0-1, 2-3, 4-5, 6-7), one active
        if i:
            n.log.roll()
        for _ in range(2 if i < 4 else 1):
            n.log.append(MemoryRecords.build([SimpleRecord(NOW, None, b"v%d" % n.log.log_end_offset)]))
    n.rlm.run_once([n.log])
    assert [m.start_offset for m in n.remote()] == [0, 2, 4, 6]
    yield n
    n.manager.close()


def _in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def _join(thread: threading.Thread) -> None:
    thread.join(LIMIT)
    assert not thread.is_alive(), "a task never ended"


def _no_task_failure(caplog: pytest.LogCaptureFixture) -> None:
    failures = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert failures == [], [(r.getMessage(), r.exc_info[1] if r.exc_info else None) for r in failures]


@pytest.mark.parametrize("restarted", [False, True], ids=["a-later-run", "the-first-run-after-a-restart"])
def test_the_copy_tasks_cleanup_leaves_a_segment_the_expiration_task_is_deleting(
    node: Node, restarted: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The expiration task stops inside the delete of segment 0-1; the copy task's cleanup runs meanwhile and finds
    it DELETE_SEGMENT_STARTED (in its own view, or in the store at its first run after a restart). Its objects must
    be deleted once, by the expiration task."""
    if restarted:
        node.restart_remote_tier()  # its copy task's first run reloads every unfinished segment from the store
    else:
        node.rlm.run_once([node.log])  # the copy task has had its first run: it looks at its own view only
    caplog.set_level(logging.WARNING)
    gate = node.rsm.gates[0] = Gate()
    node.move_log_start(2)
    expiration, expiration_errors = _in_thread(lambda: node.rlm.cleanup_remote_segments(node.log))
    gate.wait_arrived()  # segment 0-1 is DELETE_SEGMENT_STARTED, its objects not yet deleted
    result = node.rlm.copy_log_segments(node.log)
    gate.release()
    _join(expiration)
    assert expiration_errors == []
    _no_task_failure(caplog)
    assert node.deletes_of(0) == 1
    assert result.stale_copies_cleaned == 0
    assert [m.start_offset for m in node.remote()] == [2, 4, 6]


def test_the_copy_tasks_cleanup_never_restarts_a_deletion_the_expiration_task_finished(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    """The copy task's cleanup lists two DELETE_SEGMENT_STARTED segments: 0-1 (an expiration whose delete failed in
    an outage) and 2-3 (the expiration task is deleting it now). It stops in the delete of 0-1 while the expiration
    task finishes 2-3; going on to 2-3 it must see that segment gone, not record DELETE_SEGMENT_STARTED again
    (``invalid remote segment state transition DELETE_SEGMENT_FINISHED -> DELETE_SEGMENT_STARTED``)."""
    node.rlm.run_once([node.log])  # the copy task's first run is done: its cleanup looks at its view
    node.move_log_start(2)
    node.rsm.fail_delete = True
    with pytest.raises(OSError, match="outage"):
        node.rlm.cleanup_remote_segments(node.log)
    node.rsm.fail_delete = False
    assert [(m.start_offset, m.state.name) for m in node.remote()][:2] == [
        (0, "DELETE_SEGMENT_STARTED"), (2, "COPY_SEGMENT_FINISHED")]
    caplog.set_level(logging.WARNING)
    expiration_gate, cleanup_gate = node.rsm.gates[2], node.rsm.gates[0] = Gate(), Gate()
    node.move_log_start(4)
    expiration, expiration_errors = _in_thread(lambda: node.rlm.cleanup_remote_segments(node.log))
    expiration_gate.wait_arrived()  # 2-3 is DELETE_SEGMENT_STARTED
    results = []
    copy, copy_errors = _in_thread(lambda: results.append(node.rlm.copy_log_segments(node.log)))
    cleanup_gate.wait_arrived()  # the cleanup is deleting 0-1, with 2-3 next on its list
    expiration_gate.release()
    _join(expiration)  # 2-3 is DELETE_SEGMENT_FINISHED
    cleanup_gate.release()
    _join(copy)
    assert expiration_errors == copy_errors == []
    _no_task_failure(caplog)
    assert (node.deletes_of(0), node.deletes_of(2)) == (1, 1)
    assert results[0].stale_copies_cleaned == 1  # 0-1 only: 2-3 was the expiration task's
    assert [m.start_offset for m in node.remote()] == [4, 6]


# ------------------------------------------------------------------------------------------------------------
# A read in flight and the retention that deletes its segment


def _open_fds_on(path_part: str) -> list[str]:
    return held_files(lambda target: path_part in target)


def _local_log(tmp_path: Path, time_: MockTime) -> Log:
    log = make_log(
        tmp_path, time=time_, segment_bytes=4096, retention_bytes=0, file_delete_delay_ms=1000,
    )
    for first in range(0, 400, 20):
        log.append(MemoryRecords.build([SimpleRecord(NOW, b"%d" % o, b"value-%06d" % o * 8) for o in range(first, first + 20)]))
    log.flush()
    log.update_high_watermark(log.log_end_offset)
    return log


@pytest.mark.parametrize("other_files", [0, 4], ids=["alone", "other-files-opened-since"])
def test_a_read_in_flight_finishes_on_its_own_file_after_retention_closed_the_segment(
    tmp_path: Path, other_files: int
) -> None:
    """A fetch answers a slice of its segment's file, decoded later by the consumer. Retention deletes that segment
    and, ``file.delete.delay.ms`` later, closes its file; under load the consumer gets to its slice after that. It
    must get its records (the file stays open while a read holds it), never ``OSError: [Errno 9] Bad file
    descriptor``, nor the bytes of a file the process opened since under the same descriptor number."""
    time_ = MockTime(ms=NOW)
    log = _local_log(tmp_path, time_)
    first_segment = log.segments.first_segment
    assert first_segment is not None and log.number_of_segments() > 3
    stem = str(first_segment.log.path.with_suffix(""))  # the segment's files, in this test's dir only
    info = log.read(0, 1 << 20)
    assert log.delete_old_segments() >= 1 and log.local_log_start_offset > 0
    time_.sleep(1000)  # file.delete.delay.ms: the segment's files are closed and removed
    assert not first_segment.log.path.exists()
    # The process opens other files meanwhile: they take the lowest free descriptor numbers.
    others = [os.open(tmp_path / f"other-{i}", os.O_RDWR | os.O_CREAT) for i in range(other_files)]
    try:
        for fd in others:
            os.write(fd, b"\xff" * 8192)
        got = [r.offset for batch in info.records.batches() for r in batch.records()]
    finally:
        for fd in others:
            os.close(fd)
    assert got == list(range(len(got))) and got[-1] >= 19, got[:40]
    # The last holder gone, the deleted file is closed: nothing stays open for it.
    assert _open_fds_on(stem) != []
    del info
    assert _open_fds_on(stem) == []
    log.close()
