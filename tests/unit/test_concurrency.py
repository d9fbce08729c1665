"""Reads racing the writer: many reader threads during appends, rolls and retention passes, and a LogManager whose
partition map changes while other threads walk it.

What a read may answer while retention moves the log start (Kafka's "no floor segment -> out of
range"): the batch holding the offset (never a later one), or ``OffsetOutOfRangeError`` for an
offset that retention removed meanwhile. With a remote tier, an offset local retention removed is served from the
remote copy: never an out-of-range answer, never "no remote tier".

The readers read only while the writer runs the step under test (a retention pass, a truncation), so the steps
that merely set it up (appends, rolls) run at full speed; each test stops at the first wrong answer. The thread
switch interval is shortened so that threads interleave inside the code paths under test, not only between them.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from local.errors import OffsetOutOfRangeError
from local.fetch import FetchDataInfo, LogOffsetMetadata
from local.log import Log
from local.records import MemoryRecords
from tests.logutil import make_log, records

STEPS = 40
"""Racing steps a test runs (each a retention pass or a truncation with the readers reading)."""
TIME_BOUND_SECONDS = 20.0
"""A failure bound only: a loaded machine runs fewer steps, never a longer test."""
READERS = 3


@pytest.fixture(autouse=True)
def _fine_thread_switching() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _value(offset: int) -> bytes:
    return f"value-{offset}".encode()


def _check_answer(offset: int, end_before: int, info: FetchDataInfo) -> str | None:
    """What is wrong with ``info`` as the answer to a read at ``offset`` begun when the log ended at
    ``end_before`` (None when it is right)."""
    for batch in info.records.batches():
        if not batch.base_offset <= offset <= batch.last_offset:
            return f"read at {offset} answered with the batch {batch.base_offset}..{batch.last_offset}"
        for rec in batch.records():
            if rec.value != _value(rec.offset):
                return f"offset {rec.offset} holds {rec.value!r}"
        return None
    if offset < end_before:
        return f"read at {offset} below the log end {end_before} answered with no batch"
    return None


def _race(
    log: Log,
    prepare: Callable[[int], None],
    racing_step: Callable[[int], None],
    on_out_of_range: Callable[[int, OffsetOutOfRangeError], str | None],
    first: Callable[[], int] | None = None,
    steps: int = STEPS,
) -> list[str]:
    """For i in range(steps): ``prepare(i)`` alone, then ``racing_step(i)`` while READERS threads read the first
    offsets from ``first()`` (default: the log start), where retention deletes; stops at the first wrong answer.
    The wrong answers."""
    first = first or (lambda: log.log_start_offset)
    errors: list[str] = []
    racing = threading.Event()
    stop = threading.Event()

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            if not racing.wait(timeout=0.05):
                continue
            start, end = first(), log.log_end_offset
            if end <= start:
                continue
            offset = start + rng.randrange(min(3, end - start))  # the first segment (3 batches a segment)
            try:
                wrong = _check_answer(offset, end, log.read(offset, 200))
            except OffsetOutOfRangeError as exc:
                wrong = on_out_of_range(offset, exc)
            except Exception as exc:
                wrong = f"read at {offset} raised {exc!r}"
            if wrong is not None:
                errors.append(wrong)
                stop.set()

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(READERS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + TIME_BOUND_SECONDS
    try:
        for i in range(steps):
            if stop.is_set() or time.monotonic() > deadline:
                break
            prepare(i)
            racing.set()
            try:
                racing_step(i)
            finally:
                racing.clear()
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a reader is stuck"
    return errors


def test_local_reads_during_rolls_and_retention_answer_the_batch_or_out_of_range(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=300, retention_bytes=900, retention_ms=-1, file_delete_delay_ms=0)

    def prepare(i: int) -> None:
        for _ in range(3):
            log.append(records(_value(log.log_end_offset)))
        log.update_high_watermark(log.log_end_offset)

    def racing_step(i: int) -> None:
        log.delete_old_segments()
        log.delete_pending_segments()  # close the removed segments' files under the readers

    def out_of_range(offset: int, exc: OffsetOutOfRangeError) -> str | None:
        if offset < log.log_start_offset:
            return None
        return f"read at {offset} said out of range, but the log start is still {log.log_start_offset}: {exc}"

    try:
        assert _race(log, prepare, racing_step, out_of_range) == []
        assert log.log_start_offset > 20  # retention did run many times during the race
    finally:
        log.close()


class CopyingRemoteTier:
    """A remote tier holding copies of the log's rolled segments (as if copied by a RemoteLogManager), serving
    reads from them. Enough of :class:`local.remote.RemoteTier` for a log's reads and local retention."""

    def __init__(self) -> None:
        self._batches: dict[int, bytes] = {}  # base offset -> batch
        self.highest = -1

    def copy_rolled(self, log: Log) -> None:
        for segment in log.segments.non_active_segments():
            if segment.base_offset <= self.highest:
                continue
            for batch in segment.log.batches():
                self._batches[batch.base_offset] = bytes(batch)
            self.highest = max(self.highest, segment.read_next_offset() - 1)
            log.note_highest_remote_offset(self.highest)

    def read(self, log: Log, fetch_offset: int, max_bytes: int, isolation: Any, min_one_message: bool) -> FetchDataInfo:
        if fetch_offset > self.highest or fetch_offset not in self._batches:
            raise OffsetOutOfRangeError(f"remote: no copy of offset {fetch_offset} (copies end at {self.highest})",
                                        offset=fetch_offset)
        return FetchDataInfo(LogOffsetMetadata(fetch_offset, -1, -1), MemoryRecords(self._batches[fetch_offset]))

    def offset_for_timestamp(self, log: Log, timestamp: int) -> None:
        return None

    def highest_offset_in_remote_storage(self, log: Log) -> int:
        return self.highest

    def start_tasks(self, logs: Any) -> None:
        pass

    def stop_tasks(self) -> None:
        pass


def test_reads_below_the_local_start_go_remote_during_local_retention(tmp_path: Path) -> None:
    remote = CopyingRemoteTier()
    log = make_log(tmp_path, segment_bytes=300, retention_bytes=-1, retention_ms=-1, remote_storage_enable=True,
                   local_retention_bytes=900, file_delete_delay_ms=0)
    log.remote_tier = remote

    def prepare(i: int) -> None:
        for _ in range(3):
            log.append(records(_value(log.log_end_offset)))
        log.update_high_watermark(log.log_end_offset)
        remote.copy_rolled(log)

    def racing_step(i: int) -> None:
        log.delete_old_segments()
        log.delete_pending_segments()

    def out_of_range(offset: int, exc: OffsetOutOfRangeError) -> str | None:
        return f"read at {offset} said out of range with every offset held locally or remotely: {exc}"

    try:
        assert _race(log, prepare, racing_step, out_of_range, first=lambda: log.local_log_start_offset) == []
        assert log.local_log_start_offset > 20 and log.log_start_offset == 0
    finally:
        log.close()


def test_truncation_to_a_new_start_is_out_of_range_below_it(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=300, retention_ms=-1, file_delete_delay_ms=0)

    def prepare(i: int) -> None:
        log.append(records(_value(log.log_end_offset)))
        log.update_high_watermark(log.log_end_offset)

    def racing_step(i: int) -> None:
        new_start = log.log_end_offset + 5
        log.truncate_fully_and_start_at(new_start)
        log.delete_pending_segments()

    def out_of_range(offset: int, exc: OffsetOutOfRangeError) -> str | None:
        if offset < log.log_start_offset:
            return None
        return f"read at {offset} said out of range, but the log start is still {log.log_start_offset}: {exc}"

    try:
        assert _race(log, prepare, racing_step, out_of_range) == []
        assert log.log_start_offset > 5 * 20
    finally:
        log.close()


# The same orders, checked at the exact point where the old code went wrong: a read made (lock-free, as any
# reader thread's) from inside the writer's step, between two of its stores.


def _read_answer(log: Log, offset: int) -> str | None:
    end = log.log_end_offset
    try:
        return _check_answer(offset, end, log.read(offset, 200))
    except OffsetOutOfRangeError as exc:
        return None if offset < log.log_start_offset else f"out of range with the log start at {log.log_start_offset}: {exc}"


def test_a_read_inside_a_retention_pass_finds_the_log_start_moved_before_the_local_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = make_log(tmp_path, segment_bytes=300, retention_bytes=300, retention_ms=-1, file_delete_delay_ms=0)
    for _ in range(9):
        log.append(records(_value(log.log_end_offset)))
    log.update_high_watermark(log.log_end_offset)
    answers: list[str | None] = []
    original = Log.maybe_increment_log_start_offset

    def read_then_increment(self: Log, new_offset: int, reason: Any) -> bool:
        answers.append(_read_answer(self, 0))
        return original(self, new_offset, reason)

    monkeypatch.setattr(Log, "maybe_increment_log_start_offset", read_then_increment)
    try:
        assert log.delete_old_segments() > 0
        assert answers == [None]
        assert _read_answer(log, 0) is None and log.log_start_offset > 0
    finally:
        log.close()


def test_a_read_inside_a_truncation_finds_the_new_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = make_log(tmp_path, segment_bytes=300, retention_ms=-1, file_delete_delay_ms=0)
    for _ in range(6):
        log.append(records(_value(log.log_end_offset)))
    log.update_high_watermark(log.log_end_offset)
    answers: list[str | None] = []
    original = log.leader_epoch_cache.clear_and_flush

    def read_then_clear() -> None:  # called once the old segments are gone
        answers.append(_read_answer(log, 0))
        original()

    monkeypatch.setattr(log.leader_epoch_cache, "clear_and_flush", read_then_clear)
    try:
        log.truncate_fully_and_start_at(100)
        assert answers == [None]
    finally:
        log.close()


# LogManager: its partition maps change (creation, deletion, a data dir failing) while other threads walk them.
# The interleaving is forced: the map's own method starts the racing change in another thread and waits for it
# (up to HOOK_WAIT_SECONDS, a failure bound): code that holds the maps' lock makes that thread wait instead.

HOOK_WAIT_SECONDS = 0.5


class _RacingDict(dict[Any, Any]):
    """A dict whose first call of ``method`` first runs ``race`` in another thread (waiting for it, bounded)."""

    def __init__(self, data: dict[Any, Any], method: str, race: Callable[[], None]) -> None:
        super().__init__(data)
        self._method, self._race, self._raced = method, race, False

    def _maybe_race(self, method: str) -> None:
        if method != self._method or self._raced:
            return
        self._raced = True
        done = threading.Event()

        def run() -> None:
            try:
                self._race()
            finally:
                done.set()

        threading.Thread(target=run, daemon=True).start()
        done.wait(HOOK_WAIT_SECONDS)

    def values(self) -> Any:
        if self._method != "values" or self._raced:
            return super().values()
        view = super().values()

        def racing() -> Iterator[Any]:
            for n, value in enumerate(view):
                if n == 0:
                    self._maybe_race("values")
                yield value

        return racing()

    def pop(self, *args: Any) -> Any:
        self._maybe_race("pop")
        return super().pop(*args)


def _until(condition: Callable[[], bool]) -> None:
    """Wait for ``condition`` (another thread's doing, on a machine that may be busy); a failure bound only."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)


def _manager(tmp_path: Path) -> tuple[Any, Path, Path]:
    from local import LogConfig, LogManager

    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    manager = LogManager(LogConfig.from_properties({"log.dirs": f"{d1},{d2}"}), start_scheduler=False)
    for partition in range(4):
        manager.get_or_create_log("t", partition)
    return manager, d1, d2


def test_creating_a_log_while_a_data_dir_fails(tmp_path: Path) -> None:
    manager, _, d2 = _manager(tmp_path)
    fail = lambda: manager.log_dir_failure_channel.maybe_add_offline_log_dir(d2, "disk gone")  # noqa: E731
    manager._log_dirs_of = _RacingDict(manager._log_dirs_of, "values", fail)
    try:
        log = manager.get_or_create_log("t", 9)  # picks the dir with the fewest logs, walking the map
        assert manager.data_dir_of("t", 9) == log.dir.parent
        _until(lambda: d2 in manager.offline_dirs)  # (the failure's thread may finish after the call returned)
    finally:
        manager.close()


def test_deleting_a_log_while_its_data_dir_fails_leaves_no_offline_ghost(tmp_path: Path) -> None:
    manager, d1, d2 = _manager(tmp_path)
    victim = next(p for p in range(4) if manager.data_dir_of("t", p) == d2)
    fail = lambda: manager.log_dir_failure_channel.maybe_add_offline_log_dir(d2, "disk gone")  # noqa: E731
    manager._log_dirs_of = _RacingDict(manager._log_dirs_of, "pop", fail)
    try:
        manager.delete_log("t", victim)
        _until(lambda: d2 in manager.offline_dirs)  # (the failure's thread may finish after the call returned)
        # Deleted before its dir failed: gone, not an offline partition that blocks creating it again.
        assert ("t", victim) not in manager.offline_partitions
        assert manager.get_or_create_log("t", victim).dir.parent == d1
    finally:
        manager.close()
