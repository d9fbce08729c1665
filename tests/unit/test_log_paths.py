"""The log's append, read, roll and flush paths, rule by rule, with every field of what they answer checked.

Written against the survivors of the first mutation run of ``local/log.py``'s append, read and roll functions
(``python -m bench mutation local/log.py --only '*append*' '*read*' '*roll*' ...``, see TESTING.md): the tests
that drive the log for other reasons check the offsets and values that come back, not the metadata beside them.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from local.errors import InvalidRecordError, KafkaStorageIOError, LogDirOfflineError, OffsetOutOfRangeError
from local.fetch import FetchIsolation, LogOffsetMetadata
from local.log import Log, LogAppendInfo
from local.records import MemoryRecords, SimpleRecord
from local.records.batch import TimestampType
from local.records.compression import CompressionType
from local.scheduler import MockTime
from local.segment import LogSegment
from tests.logutil import make_log, records

T0 = 1_700_000_000_000  # MockTime's start


def _batch(*values: bytes, timestamp: int = T0, **kwargs: Any) -> bytes:
    return bytes(records(*values, timestamp=timestamp, **kwargs).buffer)


def _batches_of(log: Log, offset: int = 0, max_bytes: int = 1 << 20) -> list[Any]:
    return list(log.read(offset, max_bytes).records.batches())


# Append ------------------------------------------------------------------------------------------------------------


def test_an_empty_append_assigns_nothing_and_says_so(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(records(b"a"))
    assert log.append(MemoryRecords(b"")) == LogAppendInfo(-1, -1, -1, -1, -1, -1, 0, 0, 0)
    assert log.append_as_follower(b"") == LogAppendInfo(-1, -1, -1, -1, -1, -1, 0, 0, 0)
    assert log.log_end_offset == 1


def test_many_batches_in_one_client_append_get_consecutive_offsets_and_one_answer(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(records(b"first"), leader_epoch=3)
    three = _batch(b"a", b"b", timestamp=T0 - 10) + _batch(b"c", timestamp=T0 - 5) + _batch(b"d", b"e", b"f", timestamp=T0 - 5)
    info = log.append(MemoryRecords(three), leader_epoch=3)
    # the max timestamp is the first batch's to reach it: its last offset
    assert info == LogAppendInfo(1, 6, 3, T0 - 5, 3, -1, 0, 3, len(three))
    batches = _batches_of(log, 1)
    assert [(b.base_offset, b.last_offset, b.partition_leader_epoch) for b in batches] == [(1, 2, 3), (3, 3, 3), (4, 6, 3)]
    assert [r.value for b in batches for r in b.records()] == [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert [r.offset for b in batches for r in b.records()] == [1, 2, 3, 4, 5, 6]
    assert log.log_end_offset_metadata == LogOffsetMetadata(7, 0, log.active_segment.size)
    assert log.high_watermark == 7


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP], ids=lambda c: c.name_lower)
def test_log_append_time_stamps_every_batch_and_keeps_its_other_attributes(tmp_path: Path, codec: CompressionType) -> None:
    time = MockTime(T0 + 5000)
    log = make_log(tmp_path, time=time, message_timestamp_type="LogAppendTime")
    two = _batch(b"a", compression=codec) + _batch(b"b", b"c", compression=codec)
    info = log.append(MemoryRecords(two))
    assert (info.log_append_time, info.max_timestamp, info.offset_of_max_timestamp) == (T0 + 5000, T0 + 5000, 0)
    for batch in _batches_of(log):
        assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME and batch.max_timestamp == T0 + 5000
        assert batch.compression_type is codec and batch.is_valid()
        assert all(r.timestamp == T0 + 5000 for r in batch.records())


def test_the_fast_path_answers_the_offset_of_the_max_timestamp_and_refuses_a_keyless_batch_when_compacted(
    tmp_path: Path,
) -> None:
    log = make_log(tmp_path / "a", message_timestamp_before_max_ms=1 << 62)
    assert log.append(records(b"a", b"b", timestamp=0)).offset_of_max_timestamp == 1  # 0 is a timestamp
    no_time = MemoryRecords.build([SimpleRecord(-1, b"k", b"v"), SimpleRecord(-1, b"k", b"w")])
    assert log.append(no_time).offset_of_max_timestamp == 2  # no timestamp: the first offset
    compacted = make_log(tmp_path / "b", cleanup_policy="compact")
    with pytest.raises(InvalidRecordError, match="no key"):
        compacted.append(MemoryRecords.build([SimpleRecord(T0, None, b"v")]))
    assert compacted.log_end_offset == 0


def test_a_follower_append_keeps_the_high_watermark_and_takes_epochs_from_its_batches(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    first = records(b"a", b"b", partition_leader_epoch=0)
    second = records(b"c", base_offset=2, partition_leader_epoch=2)
    info = log.append_as_follower(bytes(first.buffer) + bytes(second.buffer))  # plain bytes are taken too
    assert info == LogAppendInfo(0, 2, 2, T0, 1, -1, 0, 2, len(first.buffer) + len(second.buffer))
    assert log.high_watermark == 0  # the leader moves it
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()] == [(0, 0), (2, 2)]
    again = records(b"d", base_offset=3, partition_leader_epoch=2)
    log.append_as_follower(again)
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()] == [(0, 0), (2, 2)]
    assert log.log_end_offset_metadata == LogOffsetMetadata(4, 0, log.active_segment.size)
    with pytest.raises(InvalidRecordError, match="out of order offsets in follower append to topic-0: first offset 3 "
                                                 "is below the log end offset 4") as caught:
        log.append_as_follower(again)
    assert caught.value.context == {"offset": 3}


def test_a_leader_append_records_a_new_epoch_once_and_moves_the_high_watermark(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(records(b"a"), leader_epoch=0)
    log.append(records(b"b"), leader_epoch=0)
    log.append(records(b"c"), leader_epoch=4)
    log.append(records(b"d"), leader_epoch=4)
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()] == [(0, 0), (4, 2)]
    assert log.high_watermark == 4


def test_an_idempotent_retry_gets_the_original_offsets(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(records(b"x"))
    batch = records(b"a", b"b", producer_id=7, producer_epoch=0, base_sequence=0)
    original = log.append(batch, leader_epoch=1)
    retry = log.append(batch, leader_epoch=2)
    assert retry == LogAppendInfo(1, 2, -1, T0, 2, -1, 0, 1, len(batch.buffer), duplicate=True)  # (a client's epoch)
    assert (original.first_offset, original.last_offset) == (1, 2) and log.log_end_offset == 3
    plain_then_retry = _batch(b"y") + bytes(batch.buffer)  # the retry found past a batch without a producer id
    assert log.append(MemoryRecords(plain_then_retry)).duplicate


def test_a_client_batch_is_written_with_its_offset_and_epoch_and_the_callers_buffer_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = make_log(tmp_path)
    log.append(records(b"a"))
    original = _batch(b"b", b"c")
    mutable = bytearray(original)
    written: list[object] = []
    real_append = log.active_segment.log.append

    def spy(data: Any, header: bytes = b"") -> int:
        written.append(data)
        return real_append(data, header)

    monkeypatch.setattr(log.active_segment.log, "append", spy)
    for given in (original, mutable, MemoryRecords(original), MemoryRecords(mutable)):
        log.append(given, leader_epoch=4)
    # the caller's bytes keep base offset 0 and no epoch; a buffer the caller could still change was copied first
    assert bytes(mutable) == original and original[:8] == bytes(8)
    assert [type(data).__name__ for data in written] == ["bytes", "bytes", "memoryview", "bytes"]
    batches = _batches_of(log, 1)
    assert [(b.base_offset, b.partition_leader_epoch) for b in batches] == [(1, 4), (3, 4), (5, 4), (7, 4)]
    assert all(b.is_valid() for b in batches)
    assert [r.value for b in batches for r in b.records()] == [b"b", b"c"] * 4


@pytest.mark.parametrize("first", [5, 16, 100])
def test_a_short_write_of_a_patched_batch_writes_the_rest_from_the_patched_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: int
) -> None:
    log = make_log(tmp_path)
    real_pwritev = os.pwritev

    def short_once(fd: int, buffers: Any, offset: int) -> int:
        monkeypatch.setattr(os, "pwritev", real_pwritev)
        return os.pwrite(fd, b"".join(bytes(b) for b in buffers)[:first], offset)

    monkeypatch.setattr(os, "pwritev", short_once)
    log.append(records(b"a"))
    log.append(records(b"b"), leader_epoch=2)
    batches = _batches_of(log)
    assert [(b.base_offset, b.partition_leader_epoch, b.is_valid()) for b in batches] == [(0, 0, True), (1, 2, True)]
    assert log.active_segment.size == sum(b.size_in_bytes for b in batches)


def test_a_failed_write_takes_the_log_offline_and_names_what_it_was_doing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    log = make_log(tmp_path)
    log.append(records(b"a"))

    def full(*args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    follower = make_log(tmp_path / "f")
    follower.append_as_follower(records(b"a"))
    monkeypatch.setattr(os, "pwrite", full)
    monkeypatch.setattr(os, "pwritev", full)  # a client batch is written with its patched header as a second buffer
    for each, append in ((log, lambda: log.append(records(b"b"))),
                         (follower, lambda: follower.append_as_follower(records(b"b", base_offset=1)))):
        with pytest.raises(KafkaStorageIOError, match=r"^I/O error while appending to topic-0 \("):
            append()
        assert each.is_offline
        with pytest.raises(LogDirOfflineError):
            append()  # offline now: refused before any write
    monkeypatch.undo()
    with pytest.raises(LogDirOfflineError):
        log.read(0)


def test_the_first_io_error_names_the_action_the_dir_and_the_errno(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    log = make_log(tmp_path)

    def full(*args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    monkeypatch.setattr(os, "pwritev", full)
    with pytest.raises(KafkaStorageIOError) as caught:
        log.append(records(b"b"))
    assert str(caught.value).startswith("I/O error while appending to topic-0 (")
    assert caught.value.context["errno"] == errno.ENOSPC


# Roll --------------------------------------------------------------------------------------------------------------


def test_offsets_past_the_relative_range_roll_at_the_first_offset_of_the_append(tmp_path: Path) -> None:
    int32_max = 2**31 - 1
    log = make_log(tmp_path)
    log.append_as_follower(records(b"a"))
    log.append_as_follower(records(b"b", base_offset=int32_max))  # exactly the last relative offset: no roll
    assert [s.base_offset for s in log.segments.values()] == [0]
    log.append_as_follower(records(b"c", b"d", base_offset=int32_max + 5))  # past it: a new segment there
    assert [s.base_offset for s in log.segments.values()] == [0, int32_max + 5]
    assert log.log_end_offset_metadata == LogOffsetMetadata(int32_max + 7, int32_max + 5, log.active_segment.size)


def test_a_roll_of_an_empty_active_segment_at_the_log_end_keeps_it(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(records(b"a"))
    rolled = log.roll()
    assert rolled.base_offset == 1 and log.roll() is rolled and log.roll(1) is rolled
    assert log.log_end_offset_metadata == LogOffsetMetadata(1, 1, 0)
    newer = log.roll(5)  # ahead of the log end: a new segment there
    assert newer.base_offset == 5 and [s.base_offset for s in log.segments.values()] == [0, 1, 5]
    assert log.recovery_point == 1  # everything before the new segment flushed (to the log end)


def test_rolled_segments_are_made_with_the_configured_jitter_and_preallocation(tmp_path: Path) -> None:
    log = make_log(tmp_path / "a", segment_jitter_ms=0)
    log.append(records(b"a"))
    assert log.roll().roll_jitter_ms == 0
    jittered = make_log(tmp_path / "b", segment_jitter_ms=1000)
    jitters = {jittered.roll(jittered.log_end_offset + i).roll_jitter_ms for i in range(1, 40)}
    assert all(0 <= j < 1000 for j in jitters) and len(jitters) > 1
    dense = make_log(tmp_path / "dense", index_interval_bytes=1)
    dense.append(records(b"a"))
    rolled = dense.roll()
    for value in (b"b", b"c", b"d"):
        dense.append(records(value))
    assert rolled.offset_index.entries == 2  # an entry for each batch after the first: the configured interval
    for preallocate, size in ((True, 1 << 20), (False, 0)):
        each = make_log(tmp_path / f"c{preallocate}", preallocate=preallocate, segment_bytes=1 << 20)
        each.append(records(b"a"))
        assert os.path.getsize(each.roll().log.path) == size


# Flush -------------------------------------------------------------------------------------------------------------


def test_flush_to_an_offset_syncs_the_segments_below_it_and_flush_syncs_the_active_one_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = make_log(tmp_path)
    for base in (0, 2, 4):
        if base:
            log.roll()
        log.append(records(b"a", b"b"))
    synced: list[int] = []
    real = LogSegment.flush
    monkeypatch.setattr(LogSegment, "flush", lambda self: (synced.append(self.base_offset), real(self))[1])
    log.recovery_point = 0
    log.flush(3)
    assert log.recovery_point == 3 and synced == [0, 2]
    log.flush(1)  # below the recovery point: nothing
    assert log.recovery_point == 3 and synced == [0, 2]
    log.flush()
    assert log.recovery_point == 6 and synced == [0, 2, 2, 4]
    log.flush(100)  # past the log end: to the log end
    assert log.recovery_point == 6 and synced == [0, 2, 2, 4]


# Read --------------------------------------------------------------------------------------------------------------


def test_reads_out_of_range_name_the_offset_and_both_ends(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(records(b"a", b"b", b"c"))
    log.delete_records(1)
    for offset in (0, 4):
        with pytest.raises(OffsetOutOfRangeError) as caught:
            log.read(offset)
        assert str(caught.value) == f"offset {offset} is out of range for topic-0: log start offset 1, log end offset 3"
        assert caught.value.context == {"offset": offset, "log_start_offset": 1, "log_end_offset": 3}
    assert log.read(3).records.size_in_bytes == 0  # the log end itself: nothing yet


def test_a_read_smaller_than_a_batch_gets_the_whole_batch_unless_asked_not_to(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(records(b"a" * 100, b"b"))
    size = log.active_segment.size
    whole = log.read(0, 10)
    assert whole.records.size_in_bytes == size and not whole.first_entry_incomplete
    cut = log.read(0, 10, min_one_message=False)  # Kafka's answer: the first 10 bytes, marked incomplete
    assert cut.records.size_in_bytes == 10 and cut.first_entry_incomplete


def test_reads_stop_at_the_high_watermark_and_the_last_stable_offset(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append_as_follower(records(b"a", b"b"))
    log.append_as_follower(records(b"c", base_offset=2))
    log.update_high_watermark(2)
    assert [b.last_offset for b in _batches_of(log)] == [1, 2]
    hw = log.read(0, 1 << 20, FetchIsolation.HIGH_WATERMARK)
    assert [b.last_offset for b in hw.records.batches()] == [1]
    assert log.read(2, 1 << 20, FetchIsolation.HIGH_WATERMARK).records.size_in_bytes == 0
    assert log.maybe_increment_high_watermark(2) is False and log.maybe_increment_high_watermark(3) is True
    assert log.high_watermark == 3 and log.maybe_increment_high_watermark(3) is False


def test_a_compacted_read_past_the_end_of_its_segment_goes_on_to_the_next(tmp_path: Path) -> None:
    log = make_log(tmp_path, cleanup_policy="compact")
    log.append_as_follower(records(b"a", base_offset=0))
    log.roll(10)  # offsets 1..9 compacted away, the next segment starting at 10
    log.append_as_follower(records(b"c", base_offset=10))
    assert [b.base_offset for b in _batches_of(log, 3)] == [10]
    plain = make_log(tmp_path / "plain")  # whatever the policy: the data dir may be a real broker's compacted topic
    plain.append_as_follower(records(b"a", base_offset=0))
    plain.roll(10)
    plain.append_as_follower(records(b"c", base_offset=10))
    assert [b.base_offset for b in _batches_of(plain, 3)] == [10]


# batches_from ------------------------------------------------------------------------------------------------------


def test_batches_from_yields_every_batch_from_the_one_holding_the_offset_to_the_bound(tmp_path: Path) -> None:
    log = make_log(tmp_path, max_message_bytes=10 << 20)
    log.append(records(b"a", b"b"))
    log.roll()
    log.append(records(b"c"))
    big = MemoryRecords.build([SimpleRecord(T0, b"k", os.urandom(9 << 20))])  # larger than one 8 MiB read
    log.append(big)
    log.append(records(b"d"))
    assert [(b.base_offset, b.last_offset) for b in log.batches_from(1)] == [(0, 1), (2, 2), (3, 3), (4, 4)]
    assert [b.base_offset for b in log.batches_from(3)] == [3, 4]
    assert list(log.batches_from(5)) == []
    follower = make_log(tmp_path / "f")
    follower.append_as_follower(records(b"a", b"b"))
    follower.append_as_follower(records(b"c", base_offset=2))
    follower.update_high_watermark(2)
    assert [b.base_offset for b in follower.batches_from(0, FetchIsolation.HIGH_WATERMARK)] == [0]
    assert [b.base_offset for b in follower.batches_from(0)] == [0, 2]


# Through a remote tier ---------------------------------------------------------------------------------------------


class Remote:
    """A remote tier holding what local retention removed: it records what it is asked and answers as told."""

    def __init__(self, highest: int) -> None:
        self.highest = highest
        self.reads: list[tuple[Any, ...]] = []
        self.lookups: list[tuple[Any, int]] = []
        self.answer: Any = None
        self.found: Any = None
        self.on_read: Any = None
        self.asked_by: list[Any] = []

    def highest_offset_in_remote_storage(self, log: Any) -> int:
        self.asked_by.append(log)
        return self.highest

    def read(self, log: Any, offset: int, max_bytes: int, isolation: Any, min_one_message: bool) -> Any:
        self.reads.append((log, offset, max_bytes, isolation, min_one_message))
        if self.on_read is not None:
            self.on_read()
        return self.answer

    def offset_for_timestamp(self, log: Any, timestamp: int) -> Any:
        self.lookups.append((log, timestamp))
        return self.found


def _tiered_log(tmp_path: Path) -> tuple[Log, Remote]:
    """Segments at 0, 10, 20 (epochs 1, 1, 2), the first two copied and deleted locally: local log start 20."""
    log = make_log(tmp_path, remote_storage_enable=True, local_retention_bytes=0)
    remote = Remote(19)
    log.remote_tier = remote  # type: ignore[assignment]
    for i in range(3):
        log.append(records(*[b"v"] * 10, timestamp=T0 + 100 * i), leader_epoch=1 if i < 2 else 2)
        log.roll()
    assert log.delete_old_segments() == 2
    assert (log.log_start_offset, log.local_log_start_offset, log.log_end_offset) == (0, 20, 30)
    return log, remote


def test_retention_asks_the_remote_tier_only_when_a_segment_breaches_and_once_a_pass(tmp_path: Path) -> None:
    """Each retention check asked the remote tier how far its copies reach (an ownership LIST and a metadata view
    per partition) before it looked at a segment: every idle check of every partition asked, and a pass checking
    local.retention.bytes and local.retention.ms asked twice. Now at most once a pass, when a segment breaches."""
    time = MockTime()
    log = make_log(tmp_path, time=time, remote_storage_enable=True, local_retention_bytes=1 << 30,
                   local_retention_ms=3_600_000)
    remote = Remote(19)
    log.remote_tier = remote  # type: ignore[assignment]
    for i in range(4):
        log.append(records(*[b"v"] * 10, timestamp=time.milliseconds() + 100 * i))
        log.roll()
    assert log.delete_old_segments() == 0 and remote.asked_by == []  # nothing breaches: nothing asked
    log.config = dataclasses.replace(log.config, local_retention_bytes=1)
    time.sleep(7_200_000)  # both limits breached by every closed segment
    assert log.delete_old_segments() == 2 and remote.asked_by == [log]  # the copies reach offset 19: two segments
    assert log.local_log_start_offset == 20


def test_a_read_below_the_local_log_start_goes_to_the_remote_tier_with_the_same_question(tmp_path: Path) -> None:
    from local.fetch import FetchDataInfo

    log, remote = _tiered_log(tmp_path)
    remote.answer = FetchDataInfo(LogOffsetMetadata(19), MemoryRecords(b""))
    assert log.read(19, 1234, FetchIsolation.HIGH_WATERMARK, False) is remote.answer
    assert remote.reads == [(log, 19, 1234, FetchIsolation.HIGH_WATERMARK, False)]
    assert [b.base_offset for b in _batches_of(log, 20)] == [20] and len(remote.reads) == 1  # local from 20

    def boom() -> None:
        raise RuntimeError("the store is down")

    remote.on_read = boom
    with pytest.raises(RuntimeError, match="the store is down"):  # the log start did not move: the error itself
        log.read(0)

    def retention_then_boom() -> None:
        log.maybe_increment_log_start_offset(12, _reason())
        raise RuntimeError("the segment was deleted")

    remote.on_read = retention_then_boom
    with pytest.raises(OffsetOutOfRangeError) as caught:  # retention overtook the read
        log.read(5)
    assert caught.value.context == {"offset": 5, "log_start_offset": 12, "log_end_offset": 30}

    def retention_only() -> None:
        log.maybe_increment_log_start_offset(15, _reason())

    remote.on_read = retention_only
    with pytest.raises(OffsetOutOfRangeError) as caught:  # the answer may hold later data: refused
        log.read(13)
    assert caught.value.context == {"offset": 13, "log_start_offset": 15, "log_end_offset": 30}


def _reason() -> Any:
    from local.log import LogStartOffsetIncrementReason

    return next(iter(LogStartOffsetIncrementReason))


def test_a_read_of_remote_data_without_a_remote_tier_says_how_to_configure_one(tmp_path: Path) -> None:
    from local.errors import RemoteStorageNotConfiguredError

    log, _ = _tiered_log(tmp_path)
    log.remote_tier = None
    with pytest.raises(RemoteStorageNotConfiguredError) as caught:
        log.read(19)
    assert str(caught.value) == (
        "offset 19 of topic-0 is in remote storage (the local log starts at 20) and this process has no remote tier: "
        "set remote.log.storage.system.enable=true and remote.log.storage.manager.class.name (with its rsm.config.* "
        "keys) in the broker config (tiered: pass --config FILE)")
    assert caught.value.context == {"offset": 19, "topic": "topic", "partition": 0}
    assert [b.base_offset for b in _batches_of(log, 20)] == [20]


# Offsets by timestamp ----------------------------------------------------------------------------------------------


def test_the_special_timestamps_answer_with_the_offset_and_its_epoch(tmp_path: Path) -> None:
    from local.fetch import TimestampAndOffset
    from local.log import (
        EARLIEST_LOCAL_TIMESTAMP,
        EARLIEST_TIMESTAMP,
        LATEST_TIERED_TIMESTAMP,
        LATEST_TIMESTAMP,
        MAX_TIMESTAMP,
    )

    log, remote = _tiered_log(tmp_path)
    log.append(records(b"late", timestamp=T0 + 50), leader_epoch=3)
    remote.asked_by.clear()
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == TimestampAndOffset(-1, 0, 1)
    assert log.offset_for_timestamp(EARLIEST_LOCAL_TIMESTAMP) == TimestampAndOffset(-1, 20, 2)
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == TimestampAndOffset(-1, 31, 3)
    assert log.offset_for_timestamp(LATEST_TIERED_TIMESTAMP) == TimestampAndOffset(-1, 19, 1)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == TimestampAndOffset(T0 + 200, 20, 2)  # the first record holding it (KAFKA-16310)
    remote.highest = 0
    assert log.offset_for_timestamp(LATEST_TIERED_TIMESTAMP) == TimestampAndOffset(-1, 0, 1)
    assert remote.asked_by == [log] * 2
    remote.highest = -1
    assert log.offset_for_timestamp(LATEST_TIERED_TIMESTAMP) == TimestampAndOffset(-1, -1, None)
    log.remote_tier = None
    assert log.offset_for_timestamp(LATEST_TIERED_TIMESTAMP) == TimestampAndOffset(-1, -1, None)
    for bad in (-6, -100):
        with pytest.raises(ValueError, match=f"^invalid timestamp {bad}: use >= 0 or one of the special values -1..-5$"):
            log.offset_for_timestamp(bad)


def test_the_max_timestamp_is_the_first_segment_to_reach_it_and_zero_counts(tmp_path: Path) -> None:
    from local.fetch import TimestampAndOffset
    from local.log import MAX_TIMESTAMP

    log = make_log(tmp_path, message_timestamp_before_max_ms=1 << 62)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) is None
    log.append(records(b"a", b"b", timestamp=0), leader_epoch=0)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == TimestampAndOffset(0, 0, 0)  # the first record holding it (KAFKA-16310)
    log.roll()
    log.append(records(b"c", timestamp=T0), leader_epoch=0)
    log.roll()
    log.append(records(b"d", timestamp=T0), leader_epoch=1)  # the same max, later: the first keeps it
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == TimestampAndOffset(T0, 2, 0)
    assert log.offset_for_timestamp(0) == TimestampAndOffset(0, 0, 0)  # 0 is a timestamp, not a special value


def test_a_lookup_by_timestamp_asks_the_remote_tier_first_only_when_it_holds_data(tmp_path: Path) -> None:
    from local.fetch import TimestampAndOffset

    log, remote = _tiered_log(tmp_path)
    remote.found = TimestampAndOffset(T0, 0, 1)
    assert log.offset_for_timestamp(T0) is remote.found and remote.lookups == [(log, T0)]
    remote.found = None  # nothing remote at or after it: the local segments answer
    assert log.offset_for_timestamp(T0 + 200) == TimestampAndOffset(T0 + 200, 20, 2)
    local_only = make_log(tmp_path / "local", remote_storage_enable=True)
    other = Remote(-1)
    local_only.remote_tier = other  # type: ignore[assignment]
    local_only.append(records(b"a", timestamp=T0))
    assert local_only.offset_for_timestamp(T0) == TimestampAndOffset(T0, 0, 0)
    assert other.lookups == []  # no remote data: not asked


def test_a_lookup_by_timestamp_finds_a_segment_by_its_exact_largest_timestamp_and_respects_the_log_start(
    tmp_path: Path,
) -> None:
    from local.fetch import TimestampAndOffset

    log = make_log(tmp_path)
    for i in range(3):
        log.append(MemoryRecords.build([SimpleRecord(T0 + 10 * i + j, b"k", b"v") for j in range(5)]), leader_epoch=0)
        log.roll()
    assert log.offset_for_timestamp(T0 + 4) == TimestampAndOffset(T0 + 4, 4, 0)  # the first segment's largest
    assert log.offset_for_timestamp(T0 + 5) == TimestampAndOffset(T0 + 10, 5, 0)  # between: the next segment's first
    log.delete_records(2)
    assert log.offset_for_timestamp(T0) == TimestampAndOffset(T0 + 2, 2, 0)  # not below the log start
    assert log.offset_for_timestamp(T0 + 100) is None


# Aborted transactions ----------------------------------------------------------------------------------------------


def _txn(log: Log, producer_id: int, *values: bytes, seq: int = 0) -> None:
    log.append(records(*values, producer_id=producer_id, producer_epoch=0, base_sequence=seq, is_transactional=True))


def _abort(log: Log, producer_id: int) -> None:
    log.append(MemoryRecords.end_transaction_marker(producer_id, 0, commit=False))


def _aborted(info: Any) -> list[tuple[int, int]]:
    return [(t.producer_id, t.first_offset) for t in info.aborted_transactions]


def test_a_read_committed_fetch_gets_the_aborted_transactions_up_to_where_its_data_ends(tmp_path: Path) -> None:
    log = make_log(tmp_path, index_interval_bytes=1)  # an index entry for every batch
    _txn(log, 1, b"a")  # 0
    log.append(records(b"plain"))  # 1
    _txn(log, 4, b"b")  # 2
    _abort(log, 1)  # 3
    _abort(log, 4)  # 4
    log.roll()
    _txn(log, 2, b"c")  # 5
    _abort(log, 2)  # 6
    log.roll()
    _txn(log, 3, b"d")  # 7
    _abort(log, 3)  # 8
    first = next(iter(log.read(0).records.batches())).size_in_bytes
    committed = FetchIsolation.TXN_COMMITTED
    assert _aborted(log.read(0, first, committed)) == [(1, 0)]  # the fetch ends at offset 1: producer 4 starts later
    assert _aborted(log.read(0, 1 << 20, committed)) == [(1, 0), (4, 2)]  # to the end of the segment, not beyond
    assert _aborted(log.read(5, 1 << 20, committed)) == [(2, 5)]
    assert _aborted(log.read(7, 1 << 20, committed)) == [(3, 7)]  # the last segment: up to the log end
    plain, committed_read = log.read(0, 1 << 20), log.read(0, 1 << 20, committed)
    assert plain.aborted_transactions is None  # only read-committed fetches carry them
    assert committed_read.fetch_offset_metadata == plain.fetch_offset_metadata == LogOffsetMetadata(0, 0, 0)
    assert [(b.base_offset, b.crc) for b in committed_read.records.batches()] == [
        (b.base_offset, b.crc) for b in plain.records.batches()]
    cut = log.read(0, 10, committed, min_one_message=False)
    assert cut.first_entry_incomplete and cut.records.size_in_bytes == 10
    assert [b.base_offset for b in log.batches_from(0, committed)] == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert [(t.producer_id, t.first_offset) for t in log.collect_aborted_transactions(3, 9)] == [(1, 0), (4, 2), (2, 5), (3, 7)]
    assert [(t.producer_id, t.first_offset) for t in log.collect_aborted_transactions(5, 7)] == [(2, 5)]
    assert [(t.producer_id, t.first_offset) for t in log.collect_aborted_transactions(6, 7)] == [(2, 5)]


def test_batches_without_timestamps_roll_by_the_clock_on_both_append_paths(tmp_path: Path) -> None:
    time = MockTime()
    log = make_log(tmp_path, time=time, segment_ms=1000)
    untimed = [SimpleRecord(-1, b"k", b"v")]
    log.append(MemoryRecords.build(untimed))  # the fast path
    time.sleep(1000)
    log.append(MemoryRecords.build(untimed))
    assert [s.base_offset for s in log.segments.values()] == [0]  # exactly segment.ms: not yet
    time.sleep(1)
    log.append(MemoryRecords.build(untimed))
    assert [s.base_offset for s in log.segments.values()] == [0, 2]
    time.sleep(1001)
    two = bytes(MemoryRecords.build(untimed * 2).buffer) * 2  # two batches of two: the general path
    info = log.append(MemoryRecords(two))
    assert (info.max_timestamp, info.offset_of_max_timestamp) == (-1, 3)  # no timestamp: the first offset
    assert [s.base_offset for s in log.segments.values()] == [0, 2, 3]


def test_rolling_an_empty_log_keeps_its_segment_and_a_roll_syncs_the_producer_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import local.log as log_module

    log = make_log(tmp_path)
    assert log.roll() is log.active_segment and [s.base_offset for s in log.segments.values()] == [0]
    synced: list[str] = []
    real = log_module.fsync_file
    monkeypatch.setattr(log_module, "fsync_file", lambda path: (synced.append(Path(path).name), real(path))[1])
    log.append(records(b"a", producer_id=3, producer_epoch=0, base_sequence=0))
    log.roll()
    assert synced == ["00000000000000000001.snapshot"]


def test_a_followers_high_watermark_releases_its_completed_transactions(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append_as_follower(records(b"t", producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True))
    log.append_as_follower(MemoryRecords.end_transaction_marker(5, 0, commit=True, base_offset=1, timestamp=T0))
    assert log.last_stable_offset == 0  # the high watermark has not passed the transaction yet
    log.update_high_watermark(2)
    assert log.last_stable_offset == 2



def test_log_append_time_keeps_a_transactional_batch_transactional(tmp_path: Path) -> None:
    log = make_log(tmp_path, message_timestamp_type="LogAppendTime")
    log.append(records(b"t", producer_id=2, producer_epoch=0, base_sequence=0, is_transactional=True))
    log.append(records(b"plain"))
    assert log.last_stable_offset == 0  # the open transaction pins it
    log.append(MemoryRecords.end_transaction_marker(2, 0, commit=False))
    assert log.last_stable_offset == 3


def test_a_follower_takes_a_producers_batches_as_the_leader_sequenced_them(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append_as_follower(records(b"a", producer_id=9, producer_epoch=0, base_sequence=0))
    log.append_as_follower(records(b"b", base_offset=1, producer_id=9, producer_epoch=0, base_sequence=5))  # a gap
    assert log.log_end_offset == 2
    leader = make_log(tmp_path / "leader")
    leader.append(records(b"a", producer_id=9, producer_epoch=0, base_sequence=0))
    with pytest.raises(Exception, match=r"(?i)sequence"):
        leader.append(records(b"b", producer_id=9, producer_epoch=0, base_sequence=5))


def test_a_read_at_the_bound_answers_empty_at_that_offset(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append_as_follower(records(b"a", b"b"))
    info = log.read(2)
    assert info.fetch_offset_metadata == LogOffsetMetadata(2, -1, -1) and info.records.size_in_bytes == 0
    bounded = log.read(0, 1 << 20, FetchIsolation.HIGH_WATERMARK)  # the high watermark is still 0
    assert bounded.fetch_offset_metadata == LogOffsetMetadata(0, -1, -1) and bounded.records.size_in_bytes == 0


def test_the_flush_policy_counts_every_appended_message(tmp_path: Path) -> None:
    log = make_log(tmp_path, flush_messages=3)
    log.append(records(b"a", b"b"))
    assert log.recovery_point == 0 and log.unflushed_messages() == 2
    log.append(records(b"c"))  # three: exactly the policy
    assert log.recovery_point == 3 and log.unflushed_messages() == 0
    log.append(records(b"d", b"e"))
    assert log.recovery_point == 3 and log.unflushed_messages() == 2


def test_the_general_path_says_which_timestamp_bound_a_batch_broke(tmp_path: Path) -> None:
    from local.errors import InvalidTimestampError

    log = make_log(tmp_path, message_timestamp_before_max_ms=1000)
    old = _batch(b"a", timestamp=T0 - 1001)
    with pytest.raises(InvalidTimestampError, match=f"^timestamp {T0 - 1001} of a batch appended to topic-0 is more "
                                                    f"than message.timestamp.before.max.ms=1000 behind the broker "
                                                    f"time {T0}$"):
        log.append(MemoryRecords(_batch(b"ok") + old))  # two batches: the general path
    assert log.log_end_offset == 0


def test_a_failed_roll_takes_the_log_offline_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = make_log(tmp_path)
    log.append(records(b"a"))

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device", str(tmp_path / "x.log"))

    monkeypatch.setattr(LogSegment, "open", broken)
    with pytest.raises(KafkaStorageIOError, match=r"^I/O error while rolling topic-0 \("):
        log.roll()
    assert log.is_offline


def test_a_failed_flush_takes_the_log_offline_and_a_closed_log_flushes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = make_log(tmp_path)
    log.append(records(b"a"))
    log.flush()
    assert log.last_flush_time == T0
    log.append(records(b"b"))

    def broken(self: LogSegment) -> None:
        raise OSError(5, "Input/output error", str(self.log.path))

    closed = make_log(tmp_path / "closed")
    closed.append(records(b"a"))
    closed.close()
    monkeypatch.setattr(LogSegment, "flush", broken)
    closed.flush()  # closed, not offline: nothing to do, no error
    with pytest.raises(KafkaStorageIOError, match=r"^I/O error while flushing topic-0 \("):
        log.flush()
    assert log.is_offline and log.recovery_point == 1


def test_a_local_read_overtaken_by_retention_without_a_remote_tier_is_out_of_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = make_log(tmp_path)
    log.append(records(b"a", b"b"))
    monkeypatch.setattr(log.segments, "floor_segment", lambda offset: None)  # the segment went during the read
    with pytest.raises(OffsetOutOfRangeError) as caught:
        log.read(1)
    assert caught.value.context == {"offset": 1, "log_start_offset": 0, "log_end_offset": 2}


def test_rolled_segments_keep_the_logs_index_format(tmp_path: Path) -> None:
    from tests.logutil import topic_config

    for large, size in ((True, 12), (False, 8)):
        log = Log.open(tmp_path / f"large-{large}" / "topic-0", topic_config(tmp_path), time=MockTime(),
                       use_large_index=large)
        log.append(records(b"a"))
        assert log.roll().offset_index.entry_size == size
        log.close()
