"""The remote tier's own scheduled tasks (Kafka's RLMCopyTask / RLMExpirationTask, started and stopped with the
LogManager) and Kafka's ordering wherever a log start moves: the new log start is published and checkpointed
before anything below it is deleted, and a read racing a deletion raises OffsetOutOfRangeError naming the current
log start instead of returning later data. Races are interleaved with events, not sleeps."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from local import LogConfig, LogManager
from local.checkpoint import OffsetCheckpointFile
from local.errors import OffsetOutOfRangeError
from local.filenames import LOG_START_OFFSET_CHECKPOINT_FILENAME
from local.log import Log
from local.records import MemoryRecords, SimpleRecord
from local.scheduler import MockTime
from local.segment import LogSegment
from tests.logutil import local_tier_props
from tiered.composition import build_remote_tier
from tiered.remote_log_manager import PassResult, RemoteLogManager

T0 = int(time.time() * 1000) - 60_000
KIB = 1024
MIB = 1024 * KIB
TIMEOUT = 60.0


_props = local_tier_props  # the embedded local-directory tier, 1 MiB segments


def _value(i: int) -> bytes:
    return (b"%08d" % i) * 125


def _produce(log: Log, n: int) -> None:
    """``n`` records of ~1 KB, 100 to a batch (~10 to a 1 MiB segment); the value of offset i is derived from i."""
    start = log.log_end_offset
    for first in range(start, start + n, 100):
        batch = [SimpleRecord(T0, b"k%d" % i, _value(i)) for i in range(first, min(first + 100, start + n))]
        log.append(MemoryRecords.build(batch))


def _first_offset(log: Log, offset: int) -> int:
    info = log.read(offset, 64 * KIB)
    return next(iter(info.records.batches())).base_offset


def _checkpointed_start(data_dir: Path, log: Log) -> int:
    return OffsetCheckpointFile(data_dir / LOG_START_OFFSET_CHECKPOINT_FILENAME).read().get((log.topic, log.partition), 0)


class _Progress:
    """A condition notified each time a scheduled task of ``rlm`` ends: tests wait on it, never sleep."""

    def __init__(self, rlm: RemoteLogManager) -> None:
        self.cond = threading.Condition()
        original = rlm.record_task_result

        def record(result: PassResult) -> None:
            original(result)
            with self.cond:
                self.cond.notify_all()

        rlm.record_task_result = record  # type: ignore[method-assign]

    def wait_for(self, predicate: Callable[[], bool]) -> None:
        with self.cond:
            assert self.cond.wait_for(predicate, TIMEOUT), "the scheduled tasks did not get there"


@pytest.fixture
def running_manager(tmp_path: Path) -> Iterator[LogManager]:
    """A LogManager whose scheduler runs (so the remote tier's tasks do), the tasks every 20 ms."""
    config = LogConfig.from_properties(_props(tmp_path, **{"remote.log.manager.task.interval.ms": "20"}))
    manager = LogManager(config)
    yield manager
    manager.close()


def test_a_manager_with_the_remote_tier_copies_and_expires_by_itself(running_manager: LogManager, tmp_path: Path) -> None:
    rlm = running_manager.remote_tier
    assert isinstance(rlm, RemoteLogManager) and rlm.tasks_running
    progress = _Progress(rlm)
    log = running_manager.get_or_create_log(
        "t", 0, {"remote.storage.enable": "true", "local.retention.bytes": str(2 * MIB), "retention.bytes": str(5 * MIB)}
    )
    _produce(log, 10_000)  # ~10 MB: ~10 segments
    last_closed = log.active_segment.base_offset - 1
    # No run_once, no CLI: the copy task tiers every closed segment...
    progress.wait_for(lambda: rlm.highest_offset_in_remote_storage(log) == last_closed)
    # ...and the expiration task applies retention.bytes to the remote tier, moving the log start.
    progress.wait_for(lambda: rlm.task_totals.segments_deleted > 0)  # recorded when the task run ends
    # the copy task's totals too are recorded when its run ends, which may come after the expiration's
    progress.wait_for(lambda: rlm.task_totals.segments_copied >= 8)
    assert log.log_start_offset > 0
    assert rlm.scheduled_partitions() == ["t-0"]
    # A partition created after start is picked up by the watcher.
    other = running_manager.get_or_create_log("u", 0, {"remote.storage.enable": "true"})
    _produce(other, 3000)
    progress.wait_for(lambda: rlm.highest_offset_in_remote_storage(other) == other.active_segment.base_offset - 1)
    # What is left below the log start is out of range; everything from it reads back, remote then local.
    with pytest.raises(OffsetOutOfRangeError):
        log.read(log.log_start_offset - 1)
    assert _first_offset(log, log.log_start_offset) <= log.log_start_offset


def test_close_stops_the_tasks_before_the_logs_close(tmp_path: Path) -> None:
    config = LogConfig.from_properties(_props(tmp_path, **{"remote.log.manager.task.interval.ms": "10"}))
    manager = LogManager(config)
    rlm = manager.remote_tier
    assert isinstance(rlm, RemoteLogManager)
    log = manager.get_or_create_log("t", 0, {"remote.storage.enable": "true"})
    _produce(log, 3000)
    copied_on_a_closed_log = []
    original = rlm.copy_log_segments

    def copy(lg: Log) -> PassResult:
        if lg.is_closed:
            copied_on_a_closed_log.append(lg.name)
        return original(lg)

    rlm.copy_log_segments = copy  # type: ignore[method-assign]
    manager.close()
    assert not rlm.tasks_running
    alive = [t.name for t in threading.enumerate() if t.name.startswith(("remote-log-copier", "remote-log-expiration"))]
    assert alive == []
    assert copied_on_a_closed_log == []


def test_on_a_mock_clock_the_tasks_run_as_it_advances_and_on_no_thread(tmp_path: Path) -> None:
    """The copy and expiration tasks are scheduled on the remote tier's clock: on a MockTime nothing runs until the
    test advances it, then the due runs happen inside ``clock.sleep`` (no sleeping, no waiting on threads)."""
    clock = MockTime(ms=T0 + 60_000)  # the records below are a minute old
    config = LogConfig.from_properties(_props(tmp_path, **{"remote.log.manager.task.interval.ms": "60000"}))
    rlm = build_remote_tier(config, time=clock)
    with LogManager(config, time=clock, scheduler=clock.scheduler, remote_tier=rlm) as manager:
        assert rlm.tasks_running
        log = manager.get_or_create_log("t", 0, {"remote.storage.enable": "true", "retention.ms": str(10 * 60_000)})
        _produce(log, 3000)
        last_closed = log.active_segment.base_offset - 1
        closed_segments = log.number_of_segments() - 1
        assert closed_segments >= 2
        assert rlm.highest_offset_in_remote_storage(log) == -1  # the clock has not moved: no task ran
        assert not [t.name for t in threading.enumerate() if t.name.startswith(("remote-log-copier", "remote-log-expiration"))]
        clock.sleep(0)  # the watcher is due: it schedules the partition's tasks, due at once, and they run
        assert rlm.highest_offset_in_remote_storage(log) == last_closed
        assert (rlm.task_totals.segments_copied, rlm.task_totals.segments_deleted) == (closed_segments, 0)
        assert rlm.scheduled_partitions() == ["t-0"]
        clock.sleep(8 * 60_000)  # eight runs later the records are 9 minutes old: within retention.ms
        assert rlm.task_totals.segments_deleted == 0
        assert len(rlm.finished_segments(rlm.topic_id_partition(log))) == closed_segments
        clock.sleep(60_000)  # 10 minutes old: the next expiration run finds them breaching (maxTimestamp <= now - retention.ms)
        assert rlm.task_totals.segments_deleted == closed_segments
        assert rlm.finished_segments(rlm.topic_id_partition(log)) == []
        assert log.log_start_offset == last_closed + 1
        assert not [t.name for t in threading.enumerate() if t.name.startswith(("remote-log-copier", "remote-log-expiration"))]
    assert not rlm.tasks_running


def test_without_the_scheduler_no_task_runs(tmp_path: Path) -> None:
    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as manager:
        rlm = manager.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        assert not rlm.tasks_running  # tiered offload and tests drive run_once themselves


def test_thread_pool_configs_have_kafkas_names_and_defaults(tmp_path: Path) -> None:
    config = LogConfig.from_properties(_props(tmp_path))
    assert config.remote_log_manager_copier_thread_pool_size == 10
    assert config.remote_log_manager_expiration_thread_pool_size == 10
    assert config.remote_log_manager_task_interval_ms == 30_000
    config = LogConfig.from_properties(_props(tmp_path, **{
        "remote.log.manager.copier.thread.pool.size": "3", "remote.log.manager.expiration.thread.pool.size": "2",
        "remote.log.manager.task.interval.ms": "1234",
    }))
    rlm = build_remote_tier(config)
    try:
        assert (rlm.copier_threads, rlm.expiration_threads, rlm.task_interval_ms) == (3, 2, 1234)
    finally:
        rlm.close()


# ----------------------------------------------------------------------------------------------------------
# Ordering: the log start is published and checkpointed before deletion


def test_local_retention_checkpoints_the_log_start_before_renaming_files(tmp_path: Path, monkeypatch: Any) -> None:
    props = {"log.dirs": str(tmp_path / "data"), "log.segment.bytes": str(MIB)}
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0, {"retention.bytes": str(3 * MIB)})
        _produce(log, 10_000)
        seen: list[tuple[int, int, int]] = []  # (segment deleted, log start in memory, log start checkpointed)
        original = LogSegment.change_file_suffixes

        def rename(seg: LogSegment, old: str, new: str) -> None:
            seen.append((seg.base_offset, log.log_start_offset, _checkpointed_start(tmp_path / "data", log)))
            original(seg, old, new)

        monkeypatch.setattr(LogSegment, "change_file_suffixes", rename)
        assert manager.cleanup_logs() > 0
        assert seen
        for base, in_memory, checkpointed in seen:
            assert in_memory > base and checkpointed == in_memory == log.log_start_offset


def test_a_failed_checkpoint_deletes_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    props = {"log.dirs": str(tmp_path / "data"), "log.segment.bytes": str(MIB)}
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0, {"retention.bytes": str(3 * MIB)})
        _produce(log, 10_000)
        before = log.number_of_segments()

        def fail(_: Log) -> None:
            raise OSError(28, "No space left on device")

        log.log_start_offset_checkpointer = fail
        with pytest.raises(OSError):
            log.delete_old_segments()
        assert log.number_of_segments() == before
        assert not list(log.dir.glob("*.deleted"))


def test_remote_expiration_moves_and_checkpoints_the_log_start_before_deleting(tmp_path: Path) -> None:
    config = LogConfig.from_properties(_props(tmp_path))
    with LogManager(config, start_scheduler=False) as manager:
        rlm = manager.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        log = manager.get_or_create_log(
            "t", 0, {"remote.storage.enable": "true", "local.retention.bytes": str(2 * MIB), "retention.bytes": str(3 * MIB)}
        )
        _produce(log, 10_000)
        seen: list[tuple[int, int, int]] = []  # (end offset deleted, log start in memory, checkpointed)
        original = rlm.parts.rsm.delete_log_segment_data  # what the tasks delete through (the copier process's)

        def delete(md: Any) -> None:
            seen.append((md.end_offset, log.log_start_offset, _checkpointed_start(tmp_path / "data", log)))
            original(md)

        rlm.parts.rsm.delete_log_segment_data = delete  # type: ignore[method-assign,assignment]
        rlm.copy_log_segments(log)
        assert rlm.cleanup_remote_segments(log) > 0
        assert seen  # the deletes went through the observed call
        for end, in_memory, checkpointed in seen:
            assert in_memory > end and checkpointed == in_memory


def test_after_a_failed_checkpoint_no_later_pass_deletes_until_one_succeeds(tmp_path: Path) -> None:
    """The first pass moves the log start in memory and fails to checkpoint it; a later pass finds the log start
    already moved (nothing to increment) and must still not delete below it before the checkpoint is written."""
    config = LogConfig.from_properties(_props(tmp_path))
    with LogManager(config, start_scheduler=False) as manager:
        rlm = manager.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        log = manager.get_or_create_log(
            "t", 0, {"remote.storage.enable": "true", "local.retention.bytes": str(2 * MIB), "retention.bytes": str(3 * MIB)}
        )
        _produce(log, 10_000)
        rlm.copy_log_segments(log)
        deleted: list[int] = []
        original = rlm.parts.rsm.delete_log_segment_data  # what the tasks delete through (the copier process's)

        def delete(md: Any) -> None:
            deleted.append(md.end_offset)
            original(md)

        rlm.parts.rsm.delete_log_segment_data = delete  # type: ignore[method-assign,assignment]
        working = log.log_start_offset_checkpointer

        def fail(_: Log) -> None:
            raise OSError(5, "Input/output error")

        log.log_start_offset_checkpointer = fail
        for _ in range(2):
            with pytest.raises(OSError):
                rlm.cleanup_remote_segments(log)
        assert deleted == [] and log.log_start_offset > 0
        assert _checkpointed_start(tmp_path / "data", log) == 0
        log.log_start_offset_checkpointer = working
        assert rlm.cleanup_remote_segments(log) > 0
        assert deleted and _checkpointed_start(tmp_path / "data", log) == log.log_start_offset > max(deleted)


# ----------------------------------------------------------------------------------------------------------
# Reads racing retention


class _Pause:
    """Wraps a callable so that the reader thread stops inside it until the test lets it go."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.go = threading.Event()

    def wrap(self, fn: Callable[..., Any], before: bool) -> Callable[..., Any]:
        def paused(*args: Any, **kwargs: Any) -> Any:
            if before:
                self.reached.set()
                assert self.go.wait(TIMEOUT)
                return fn(*args, **kwargs)
            result = fn(*args, **kwargs)
            self.reached.set()
            assert self.go.wait(TIMEOUT)
            return result

        return paused


def _race(read: Callable[[], Any], pause: _Pause, retention: Callable[[], Any]) -> Any:
    """Run ``read`` on a thread; when it reaches the pause, run ``retention``, then let the read go on."""
    outcome: dict[str, Any] = {}

    def reader() -> None:
        try:
            outcome["info"] = read()
        except Exception as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=reader)
    thread.start()
    assert pause.reached.wait(TIMEOUT)
    retention()
    pause.go.set()
    thread.join(TIMEOUT)
    return outcome


@pytest.mark.parametrize("where", ["before the floor lookup", "after the floor lookup"])
def test_a_local_read_racing_retention_raises_out_of_range(tmp_path: Path, where: str) -> None:
    props = {"log.dirs": str(tmp_path / "data"), "log.segment.bytes": str(MIB)}
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0, {"retention.bytes": str(3 * MIB)})
        _produce(log, 10_000)
        pause = _Pause()
        log.segments.floor_segment = pause.wrap(log.segments.floor_segment, before=where.startswith("before"))  # type: ignore[method-assign]
        outcome = _race(lambda: log.read(9, 64 * KIB), pause, manager.cleanup_logs)
        assert log.log_start_offset > 9
        error = outcome.get("error")
        assert isinstance(error, OffsetOutOfRangeError), outcome
        assert error.context["log_start_offset"] == log.log_start_offset  # names the current log start
        assert str(log.log_start_offset) in str(error)


def test_a_remote_read_racing_remote_expiration_never_returns_later_data(tmp_path: Path) -> None:
    config = LogConfig.from_properties(_props(tmp_path))
    with LogManager(config, start_scheduler=False) as manager:
        rlm = manager.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        log = manager.get_or_create_log(
            "t", 0, {"remote.storage.enable": "true", "local.retention.bytes": str(2 * MIB), "retention.bytes": str(6 * MIB)}
        )
        _produce(log, 10_000)
        rlm.copy_log_segments(log)
        manager.cleanup_logs()
        assert log.local_log_start_offset > 9 and log.log_start_offset == 0
        assert _first_offset(log, 9) <= 9  # from the remote tier, before the race
        # The reader stops after Log.read checked the log start, just before it looks the remote segment up.
        pause = _Pause()
        rlm.reader.segment_for_offset = pause.wrap(rlm.reader.segment_for_offset, before=True)  # type: ignore[method-assign]
        outcome = _race(lambda: log.read(9, 64 * KIB), pause, lambda: rlm.cleanup_remote_segments(log))
        assert log.log_start_offset > 9
        error = outcome.get("error")
        assert isinstance(error, OffsetOutOfRangeError), f"a read at 9 returned {outcome}"
        assert error.context["log_start_offset"] == log.log_start_offset


def test_a_local_read_overtaken_by_local_retention_goes_remote(tmp_path: Path) -> None:
    """Local retention (remote enabled) moves only the local log start: the read finds its data remotely."""
    config = LogConfig.from_properties(_props(tmp_path))
    with LogManager(config, start_scheduler=False) as manager:
        rlm = manager.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        log = manager.get_or_create_log("t", 0, {"remote.storage.enable": "true", "local.retention.bytes": str(2 * MIB)})
        _produce(log, 10_000)
        rlm.copy_log_segments(log)
        pause = _Pause()
        log.segments.floor_segment = pause.wrap(log.segments.floor_segment, before=True)  # type: ignore[method-assign]
        outcome = _race(lambda: log.read(9, 64 * KIB), pause, manager.cleanup_logs)
        assert log.local_log_start_offset > 9 and log.log_start_offset == 0
        info = outcome["info"]
        first = next(iter(info.records.batches()))
        assert first.base_offset <= 9 <= first.last_offset
        assert [r.value for r in first.records() if r.offset == 9] == [_value(9)]


# ----------------------------------------------------------------------------------------------------------
# The copier process


def test_the_copy_runs_in_a_child_process_and_its_objects_are_the_tiers(tmp_path: Path) -> None:
    config = LogConfig.from_properties(_props(tmp_path))
    with LogManager(config, start_scheduler=False) as manager:
        rlm = manager.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        copier = rlm.process_copier
        assert copier is not None
        log = manager.get_or_create_log("t", 0, {"remote.storage.enable": "true", "local.retention.bytes": str(2 * MIB)})
        _produce(log, 6000)
        copied = rlm.copy_log_segments(log)
        assert copied.segments_copied >= 2 and copied.copy_errors == 0
        assert copier.processes == 1 and copier.failed_to_start is None
        children = list(copier._all)
        highest = rlm.highest_offset_in_remote_storage(log)
        assert highest == log.active_segment.base_offset - 1
        manager.cleanup_logs()
        assert log.local_log_start_offset > 9
        info = log.read(9, 64 * KIB)  # remote: objects the child wrote
        assert [r.value for b in info.records.batches() for r in b.records() if r.offset == 9] == [_value(9)]
    assert all(child.proc.poll() is not None for child in children)  # close() ended the child
    # The metadata events the child wrote are the store's: a restart finds every copy.
    with LogManager(config, start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0)
        rlm = manager.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        assert rlm.highest_offset_in_remote_storage(log) == highest
        assert _first_offset(log, 9) <= 9


def test_the_copier_process_reports_errors_and_replaces_a_dead_child(tmp_path: Path) -> None:
    from tiered.copier_process import ProcessCopier
    from tiered.errors import RemoteStorageError
    from tiered.rsm import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

    src = tmp_path / "src"
    src.mkdir()
    for name in ("0.log", "0.index", "0.timeindex", "1.snapshot"):
        (src / name).write_bytes(b"x" * 10)
    tip = TopicIdPartition(__import__("uuid").uuid4(), "t", 0)

    def md() -> RemoteLogSegmentMetadata:
        return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), 0, 0, 0, 0, 0, 10, {0: 0})

    def data(log_name: str = "0.log") -> LogSegmentData:
        return LogSegmentData(src / log_name, src / "0.index", src / "0.timeindex", None, src / "1.snapshot", b"0\n0\n")

    copier = ProcessCopier("local", {"dir": str(tmp_path / "remote")}, lambda m, d: pytest.fail("no fallback"))
    try:
        assert copier(md(), data()) is None
        with pytest.raises(RemoteStorageError, match="copier process failed"):
            copier(md(), data("missing.log"))  # the plugin's error, raised here
        assert copier(md(), data()) is None and copier.processes == 1  # the same child goes on
        copier._all[0].proc.kill()
        copier._all[0].proc.wait()
        with pytest.raises(RemoteStorageError) as died:
            copier(md(), data())
        assert died.value.retriable
        assert copier(md(), data()) is None and copier.processes == 1  # a new child
    finally:
        copier.close()
    fallback_calls: list[Any] = []
    broken = ProcessCopier("no.such.Plugin", {}, lambda m, d: fallback_calls.append(m))
    try:
        broken(md(), data())
        broken(md(), data())
        assert len(fallback_calls) == 2 and broken.failed_to_start is not None and broken.processes == 0
    finally:
        broken.close()


def test_the_copier_process_can_be_turned_off(tmp_path: Path) -> None:
    config = LogConfig.from_properties(_props(tmp_path, **{"remote.log.manager.copier.process.enable": "false"}))
    rlm = build_remote_tier(config)
    try:
        assert rlm.process_copier is None
    finally:
        rlm.close()
