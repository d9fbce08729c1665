"""Behaviour of Log (UnifiedLog + LocalLog): the cases of Kafka's UnifiedLogTest/LocalLogTest that apply."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from local import filenames
from local.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
)
from local.fetch import FetchIsolation
from local.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Log
from local.producer_state import AppendOrigin
from local.records import MemoryRecords, SimpleRecord, TimestampType
from local.scheduler import MockTime, Scheduler
from tests.logutil import make_log, read_all_values, records, topic_config

T0 = 1_700_000_000_000


def test_append_assigns_offsets_and_reads_back(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    info = log.append(records(b"a", b"b", b"c"))
    assert (info.first_offset, info.last_offset) == (0, 2)
    info = log.append(records(b"d"))
    assert (info.first_offset, info.last_offset) == (3, 3)
    assert log.log_end_offset == 4
    assert log.high_watermark == 4
    assert read_all_values(log) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    batches = list(log.read(0, 1 << 20).records.batches())
    assert [b.base_offset for b in batches] == [0, 3]
    assert all(b.partition_leader_epoch == 0 for b in batches)
    log.close()


def test_read_returns_bytes_exactly_as_stored(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(records(b"x" * 100))
    data = bytes(log.read(0, 1 << 20).records)
    on_disk = (tmp_path / "topic-0" / "00000000000000000000.log").read_bytes()
    assert data == on_disk


def test_read_out_of_range_and_at_end(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(records(b"a"))
    with pytest.raises(OffsetOutOfRangeError, match="out of range"):
        log.read(5, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    assert log.read(1, 100).records.size_in_bytes == 0


def test_client_batch_must_start_at_offset_zero(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    with pytest.raises(InvalidRecordError, match="must be 0"):
        log.append(records(b"a", base_offset=7))
    assert log.log_end_offset == 0


def test_corrupt_batch_is_rejected_and_nothing_is_written(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(records(b"ok"))
    data = bytearray(bytes(records(b"a", b"b")))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append(data)
    truncated = bytes(records(b"a", b"b"))[:-3]
    with pytest.raises(CorruptRecordError):
        log.append(truncated)
    assert log.log_end_offset == 1
    assert read_all_values(log) == [(0, b"ok")]


def test_record_too_large(tmp_path: Path) -> None:
    log = make_log(tmp_path, max_message_bytes=200)
    with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes"):
        log.append(records(b"x" * 500))
    assert log.log_end_offset == 0


def test_roll_by_size(tmp_path: Path) -> None:
    batch = records(b"v" * 200)
    log = make_log(tmp_path, segment_bytes=batch.size_in_bytes * 3)
    for _ in range(10):
        log.append(records(b"v" * 200))
    assert log.number_of_segments() >= 3
    bases = [s.base_offset for s in log.segments.values()]
    assert bases == sorted(bases) and bases[0] == 0
    assert all(s.size <= batch.size_in_bytes * 3 for s in log.segments.values())
    # every roll took a producer snapshot named by the new segment's base offset
    for base in bases[1:]:
        assert filenames.producer_snapshot_file(log.dir, base).exists()
    assert [o for o, _ in read_all_values(log)] == list(range(10))


def test_roll_by_time_measured_from_first_batch_timestamp(tmp_path: Path) -> None:
    time = MockTime(ms=T0)
    log = make_log(tmp_path, time=time, segment_ms=1000)
    log.append(records(b"a", timestamp=T0))
    log.append(records(b"b", timestamp=T0 + 500))
    assert log.number_of_segments() == 1
    # KIP-33: a batch more than segment.ms after the segment's first timestamp rolls, whatever the clock says
    log.append(records(b"c", timestamp=T0 + 1500))
    assert log.number_of_segments() == 2


@pytest.mark.parametrize(("policy", "rolls"), [("compact", True), ("compact,delete", True), ("delete", False)])
def test_a_compacted_topic_rolls_at_max_compaction_lag_ms(tmp_path: Path, policy: str, rolls: bool) -> None:
    """Kafka's LogConfig.maxSegmentMs: a compacted topic's active segment rolls at max.compaction.lag.ms when that
    is shorter than segment.ms, so that its records become cleanable in time (KIP-354). Rolled at segment.ms (7
    days) only, a topic of one record a second kept its superseded values (a helper's pass)."""
    time = MockTime(ms=T0)
    log = make_log(tmp_path, time=time, cleanup_policy=policy, max_compaction_lag_ms=1000)
    log.append(records(b"a", timestamp=T0))
    log.append(records(b"b", timestamp=T0 + 900))
    assert log.number_of_segments() == 1
    log.append(records(b"c", timestamp=T0 + 1500))
    assert log.number_of_segments() == (2 if rolls else 1)


def test_roll_when_index_full(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_index_bytes=8 * 3, index_interval_bytes=1)
    for i in range(10):
        log.append(records(str(i).encode()))
    assert log.number_of_segments() > 1
    for seg in log.segments.values():
        assert seg.offset_index.entries <= 3


def test_log_append_time(tmp_path: Path) -> None:
    time = MockTime(ms=T0 + 12345)
    log = make_log(tmp_path, time=time, message_timestamp_type="LogAppendTime")
    log.append(records(b"a", b"b", timestamp=T0))
    batch = next(iter(log.read(0, 1 << 20).records.batches()))
    assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert batch.max_timestamp == T0 + 12345
    assert all(r.timestamp == T0 + 12345 for r in batch.records())
    batch.ensure_valid()  # the CRC was recomputed


def test_create_time_bounds(tmp_path: Path) -> None:
    time = MockTime(ms=T0)
    log = make_log(tmp_path, time=time, message_timestamp_after_max_ms=1000)
    with pytest.raises(InvalidTimestampError, match=r"after\.max\.ms"):
        log.append(records(b"a", timestamp=T0 + 5000))
    log.append(records(b"a", timestamp=T0 + 500))
    assert log.log_end_offset == 1


def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=300)
    for i in range(10):
        log.append(records(b"v" * 50, timestamp=T0 + i * 10))
    assert log.number_of_segments() > 1
    assert log.offset_for_timestamp(T0 + 35).offset == 4
    assert log.offset_for_timestamp(T0).offset == 0
    assert log.offset_for_timestamp(T0 + 1000) is None
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP).offset == 0
    assert log.offset_for_timestamp(LATEST_TIMESTAMP).offset == 10
    found = log.offset_for_timestamp(MAX_TIMESTAMP)
    assert (found.timestamp, found.offset) == (T0 + 90, 9)


def test_max_timestamp_is_the_offset_of_the_record_holding_it_not_its_batchs_last(tmp_path: Path) -> None:
    # KIP-734 / KAFKA-16310: ListOffsets -3 answers the first record with the max timestamp, inside its batch.
    log = make_log(tmp_path)
    log.append(MemoryRecords.build([SimpleRecord(T0 + t, b"k", b"v") for t in (10, 50, 20, 50, 30)]))
    log.append(MemoryRecords.build([SimpleRecord(T0 + t, b"k", b"v") for t in (40, 45)]))
    found = log.offset_for_timestamp(MAX_TIMESTAMP)
    assert (found.timestamp, found.offset) == (T0 + 50, 1)


def test_segment_jitter_is_drawn_for_a_new_logs_first_segment_and_for_segments_loaded_at_open(tmp_path: Path) -> None:
    # Kafka's LogSegment.open takes config.randomSegmentJitter for every segment, not only rolled ones: else all
    # partitions roll their active segments together at segment.ms after a restart.
    fields = {"segment_ms": 3_600_000, "segment_jitter_ms": 3_000_000}
    logs = [make_log(tmp_path, f"t-{p}", **fields) for p in range(4)]
    assert any(log.active_segment.roll_jitter_ms > 0 for log in logs)
    for log in logs:
        log.append(records(b"v"))
        log.close()
    reopened = [make_log(tmp_path, f"t-{p}", **fields) for p in range(4)]
    assert any(log.active_segment.roll_jitter_ms > 0 for log in reopened)
    assert all(0 <= log.active_segment.roll_jitter_ms < 3_000_000 for log in reopened)


def test_retention_by_size_deletes_oldest_non_active_segments(tmp_path: Path) -> None:
    time = MockTime(ms=T0)
    one = records(b"v" * 100).size_in_bytes
    log = make_log(tmp_path, time=time, segment_bytes=one * 2, retention_bytes=one * 4, file_delete_delay_ms=1000)
    for _ in range(12):
        log.append(records(b"v" * 100))
    before = log.number_of_segments()
    deleted = log.delete_old_segments()
    assert deleted > 0
    assert log.number_of_segments() == before - deleted
    assert log.size_in_bytes - log.active_segment.size <= one * 4
    assert log.log_start_offset == log.segments.first_segment.base_offset
    # renamed to .deleted first, removed after file.delete.delay.ms
    assert list(log.dir.glob("*.log.deleted"))
    time.sleep(1001)
    assert not list(log.dir.glob("*.deleted"))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)


def test_retention_by_time_uses_largest_timestamp_and_keeps_active(tmp_path: Path) -> None:
    time = MockTime(ms=T0)
    log = make_log(tmp_path, time=time, segment_bytes=200, retention_ms=10_000, file_delete_delay_ms=0)
    for i in range(6):
        log.append(records(b"v" * 50, timestamp=T0 + i))
    time.sleep(60_000)
    log.delete_old_segments()
    assert log.number_of_segments() == 1  # only the active segment remains
    assert log.log_start_offset == log.active_segment.base_offset


def test_reader_in_flight_survives_segment_deletion(tmp_path: Path) -> None:
    time = MockTime(ms=T0)
    log = make_log(tmp_path, time=time, segment_bytes=200, retention_bytes=0, file_delete_delay_ms=60_000)
    for _ in range(5):
        log.append(records(b"v" * 50))
    info = log.read(0, 1 << 20)
    log.delete_old_segments()
    assert log.log_start_offset > 0
    # the fetched slice still reads from the renamed, still-open file
    assert next(iter(info.records.batches())).base_offset == 0
    assert len(bytes(info.records)) > 0


def test_delete_records_moves_log_start_offset(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    for _ in range(5):
        log.append(records(b"x"))
    assert log.delete_records(3) == 3
    assert log.log_start_offset == 3
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(99)


def test_idempotent_producer_dedup_and_sequence_errors(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    first = log.append(records(b"a", b"b", producer_id=7, producer_epoch=0, base_sequence=0))
    again = log.append(records(b"a", b"b", producer_id=7, producer_epoch=0, base_sequence=0))
    assert again.duplicate
    assert (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    assert log.log_end_offset == 2
    with pytest.raises(OutOfOrderSequenceError):
        log.append(records(b"c", producer_id=7, producer_epoch=0, base_sequence=5))
    log.append(records(b"c", producer_id=7, producer_epoch=0, base_sequence=2))
    assert log.log_end_offset == 3


def test_transactions_last_stable_offset_and_aborted(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(records(b"t1", producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True))
    log.append(records(b"plain"))
    assert log.last_stable_offset == 0  # the open transaction pins the LSO
    assert log.read(0, 1 << 20, isolation=FetchIsolation.TXN_COMMITTED).records.size_in_bytes == 0
    log.append(MemoryRecords.end_transaction_marker(1, 0, commit=False))
    assert log.last_stable_offset == log.log_end_offset == 3
    info = log.read(0, 1 << 20, isolation=FetchIsolation.TXN_COMMITTED)
    assert [(t.producer_id, t.first_offset) for t in info.aborted_transactions] == [(1, 0)]
    txns = log.active_segment.txn_index.all_aborted_txns()
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in txns] == [(1, 0, 2)]


def test_high_watermark_isolation(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(records(b"a"))
    log.append(records(b"b"))
    log.update_high_watermark(1)
    info = log.read(0, 1 << 20, isolation=FetchIsolation.HIGH_WATERMARK)
    assert [b.base_offset for b in info.records.batches()] == [0]
    assert log.read(1, 1 << 20, isolation=FetchIsolation.HIGH_WATERMARK).records.size_in_bytes == 0


def test_leader_epoch_stamped_and_cached(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(records(b"a"))
    log.assign_epoch_start_offset(3)
    log.append(records(b"b"))
    epochs = [b.partition_leader_epoch for b in log.read(0, 1 << 20).records.batches()]
    assert epochs == [0, 3]
    assert log.leader_epoch_cache.epoch_for_offset(1) == 3
    assert log.end_offset_for_epoch(0) == (0, 1)
    text = (log.dir / "leader-epoch-checkpoint").read_text()
    assert text.splitlines()[:2] == ["0", "2"]


def test_append_as_follower_keeps_offsets_and_rejects_going_back(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append_as_follower(records(b"a", b"b", base_offset=0, partition_leader_epoch=2))
    log.append_as_follower(records(b"c", base_offset=2, partition_leader_epoch=2))
    assert log.log_end_offset == 3
    with pytest.raises(InvalidRecordError, match="out of order"):
        log.append_as_follower(records(b"x", base_offset=1))
    assert log.leader_epoch_cache.latest_epoch() == 2


def test_truncate_to(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=200)
    for i in range(8):
        log.append(records(str(i).encode() * 40))
    log.truncate_to(3)
    assert log.log_end_offset == 3
    assert [o for o, _ in read_all_values(log)] == [0, 1, 2]
    log.append(records(b"new"))
    assert read_all_values(log)[-1] == (3, b"new")


def test_reopen_after_clean_close(tmp_path: Path) -> None:
    time = MockTime(ms=T0)
    log = make_log(tmp_path, time=time, segment_bytes=300)
    for i in range(10):
        log.append(records(str(i).encode() * 30, producer_id=5, producer_epoch=0, base_sequence=i))
    expected = read_all_values(log)
    log.close()
    again = make_log(tmp_path, time=time, segment_bytes=300)
    assert again.log_end_offset == 10
    assert read_all_values(again) == expected
    # producer state came back from the snapshot: the next sequence continues, a retry is a duplicate
    assert again.append(records(b"9" * 30, producer_id=5, producer_epoch=0, base_sequence=9)).duplicate
    again.append(records(b"x", producer_id=5, producer_epoch=0, base_sequence=10))
    again.close()


def test_reopen_unclean_recovers_torn_tail(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    for i in range(5):
        log.append(records(str(i).encode()))
    log.flush()
    path = log.active_segment.log.path
    log.close_handlers()
    with open(path, "ab") as f:
        f.write(bytes(records(b"torn"))[:-5])
    again = make_log(tmp_path, clean=False)
    assert again.log_end_offset == 5
    assert [o for o, _ in read_all_values(again)] == list(range(5))
    assert again.load_stats is not None and again.load_stats.bytes_truncated > 0


def test_concurrent_readers_never_see_torn_batches(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=64 * 1024)
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                end = log.log_end_offset
                offset = 0
                while offset < end:
                    info = log.read(offset, 8192)
                    batches = list(info.records.batches())
                    if not batches:
                        break
                    for b in batches:
                        b.ensure_valid()
                    offset = batches[-1].last_offset + 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(400):
        log.append(records(str(i).encode() * 50, b"x" * (i % 7)))
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[:1]
    assert log.log_end_offset == 800


def test_topic_id_persisted_in_partition_metadata(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    text = (log.dir / "partition.metadata").read_text()
    assert text.startswith("version: 0\ntopic_id: ")
    log.close()
    again = Log.open(tmp_path / "topic-0", topic_config(tmp_path))
    assert again.topic_id == log.topic_id


def test_build_accepts_simple_records_of_every_form(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(MemoryRecords.build([SimpleRecord(b"v"), SimpleRecord(b"k", b"v2")]))
    assert [v for _, v in read_all_values(log)] == [b"v", b"v2"]


def test_single_batch_fast_path_writes_what_the_general_path_writes(tmp_path: Path) -> None:
    """A lone plain client batch skips the general path; the bytes, offsets, indexes and result must not differ."""
    fast = make_log(tmp_path, "fast-0", index_interval_bytes=1)
    general = make_log(tmp_path, "general-0", index_interval_bytes=1)

    def not_the_fast_path(*args: object) -> None:
        raise AssertionError("a plain client batch went down the general path")

    fast._append = not_the_fast_path  # type: ignore[method-assign,assignment]
    for timestamp, values in [(T0, (b"a" * 50, b"b")), (T0 + 5, (b"c",)), (T0 - 3, (b"d" * 10,))]:
        batch = records(*values, timestamp=timestamp)
        a = fast.append(batch, leader_epoch=3)
        b = general.append(batch, leader_epoch=3, origin=AppendOrigin.COORDINATOR)  # never the fast path
        assert a == b
        assert a.shallow_count == 1 and a.valid_bytes == len(bytes(batch))
    assert bytes(fast.read(0, 1 << 20).records) == bytes(general.read(0, 1 << 20).records)
    fast_seg, general_seg = fast.active_segment, general.active_segment
    fast_index, general_index = fast_seg.offset_index, general_seg.offset_index
    assert fast_index.entries == general_index.entries == 2
    assert [fast_index.entry(i) for i in range(2)] == [general_index.entry(i) for i in range(2)]
    assert fast_seg.time_index.last_entry == general_seg.time_index.last_entry
    assert fast_seg.max_timestamp_so_far == general_seg.max_timestamp_so_far == T0 + 5
    assert fast.leader_epoch_cache.latest_epoch() == 3
    assert fast.high_watermark == fast.log_end_offset == general.log_end_offset
    fast.close()
    general.close()


def test_fast_path_leaves_bad_batches_to_the_general_errors(tmp_path: Path) -> None:
    log = make_log(tmp_path, time=MockTime(T0), message_timestamp_after_max_ms=1000)
    with pytest.raises(InvalidTimestampError, match=r"message\.timestamp\.after\.max\.ms"):
        log.append(records(b"future", timestamp=T0 + 10_000))
    corrupt = bytearray(bytes(records(b"x")))
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="position 0"):
        log.append(bytes(corrupt))
    assert log.log_end_offset == 0 and log.size_in_bytes == 0
    log.close()


def test_appends_go_on_while_a_flush_waits_on_fsync(tmp_path: Path) -> None:
    """Kafka's flush syncs outside the log lock: a slow fsync of a segment must not stall the writer."""
    log = make_log(tmp_path)
    for _ in range(3):
        log.append(records(b"v" * 200))
    old = log.active_segment
    entered, release = threading.Event(), threading.Event()
    real_flush = old.flush

    def slow_flush() -> None:
        entered.set()
        release.wait(10)
        real_flush()

    old.flush = slow_flush  # type: ignore[method-assign]
    flusher = threading.Thread(target=log.flush)
    flusher.start()
    try:
        assert entered.wait(10)
        before = log.log_end_offset
        log.append(records(b"during the flush"))  # would deadlock-wait here if flush held the lock
        assert log.log_end_offset == before + 1
        assert log.recovery_point < log.log_end_offset
    finally:
        release.set()
        flusher.join(10)
    # The flush covered only what existed when it started.
    assert log.recovery_point == before
    log.flush()
    assert log.recovery_point == log.log_end_offset
    log.close()


def test_roll_snapshot_is_written_then_made_durable_by_the_flush(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=2048)
    while log.number_of_segments() < 2:
        log.append(records(b"v" * 200))
    new_base = log.active_segment.base_offset
    snapshot = filenames.producer_snapshot_file(tmp_path / "topic-0", new_base)
    assert snapshot.exists()
    assert not snapshot.with_name(snapshot.name + ".tmp").exists()
    assert log.recovery_point >= new_base  # flushed synchronously: no scheduler runs here
    log.close()


@pytest.fixture
def held_flush_log(tmp_path: Path) -> Iterator[tuple[Log, Scheduler, threading.Event]]:
    """A log of 4 KiB segments on a running scheduler whose thread is held (so every flush a roll queues waits)
    until the returned event is set."""
    scheduler, gate = Scheduler("held"), threading.Event()
    scheduler.startup()
    scheduler.schedule_once("hold", lambda: gate.wait(30))
    log = Log.open(tmp_path / "topic-0", topic_config(tmp_path, segment_bytes=4096, index_interval_bytes=1),
                   scheduler=scheduler)
    try:
        yield log, scheduler, gate
    finally:
        gate.set()
        log.close()
        scheduler.shutdown()


def test_a_roll_with_a_background_flush_leaves_the_trims_to_that_flush(
        held_flush_log: tuple[Log, Scheduler, threading.Event]) -> None:
    # Shrinking a file waits on the file system's journal when an fsync is in flight (tens of ms on ext4): the
    # append that rolls does not, the rolled segment's flush trims before it syncs, and the files end as Kafka's.
    log, scheduler, gate = held_flush_log
    while log.number_of_segments() < 2:
        log.append(records(b"v" * 300))
    rolled = log.segments.values()[0]
    index_bytes = rolled.offset_index.entries * 8
    assert rolled.offset_index_path.stat().st_size > index_bytes  # untrimmed while the flush is queued
    assert rolled.time_index_path.stat().st_size > rolled.time_index.entries * 12
    flushed = threading.Event()
    scheduler.schedule_once("after-flush", flushed.set)  # runs after the flush the roll queued
    gate.set()
    assert flushed.wait(30)
    assert rolled.offset_index_path.stat().st_size == index_bytes
    assert rolled.time_index_path.stat().st_size == rolled.time_index.entries * 12
    assert log.recovery_point >= log.active_segment.base_offset


def test_a_roll_at_the_recovery_point_still_gets_its_trims(
        held_flush_log: tuple[Log, Scheduler, threading.Event]) -> None:
    # A full flush just before the roll (a restart's close, log.flush.interval.*) leaves the recovery point at the
    # roll offset: the rolled segment's flush has nothing to sync, but still owes it the trims the roll deferred.
    # (Found under load: the copy then uploaded a 10 MiB offset index, zeros after its entries, refused as corrupt
    # by every reader of the remote segment.)
    log, scheduler, gate = held_flush_log
    log.append(records(b"v" * 300))
    flushed = threading.Event()
    scheduler.schedule_once("after-first-flush", flushed.set)
    gate.set()
    assert flushed.wait(30)
    while log.number_of_segments() < 2:
        log.flush()  # the recovery point is the log end offset whenever the roll comes
        log.append(records(b"v" * 300))
    rolled = log.segments.values()[0]
    assert log.recovery_point >= log.active_segment.base_offset
    flushed = threading.Event()
    scheduler.schedule_once("after-the-rolls-flush", flushed.set)
    assert flushed.wait(30)
    assert rolled.offset_index_path.stat().st_size == rolled.offset_index.entries * 8
    assert rolled.time_index_path.stat().st_size == rolled.time_index.entries * 12


def test_a_crash_before_the_rolled_segments_flush_recovers_it(
        tmp_path: Path, held_flush_log: tuple[Log, Scheduler, threading.Event]) -> None:
    import shutil

    log, _, _ = held_flush_log
    while log.number_of_segments() < 3:
        log.append(records(b"v" * 300))
    want = read_all_values(log)
    crashed = tmp_path / "crash" / "topic-0"
    shutil.copytree(log.dir, crashed)  # what a kill -9 leaves: untrimmed indexes, nothing flushed
    assert any(p.stat().st_size % 8 == 0 and p.stat().st_size > 8 * 64 for p in crashed.glob("*.index"))
    again = make_log(tmp_path / "crash", clean=False, segment_bytes=4096, index_interval_bytes=1)
    assert read_all_values(again) == want
    for seg in again.segments.values()[:-1]:
        seg.sanity_check(False)
        assert seg.offset_index.lookup(seg.read_next_offset() - 1).offset <= seg.read_next_offset() - 1
    again.close()
