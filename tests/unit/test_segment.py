"""LogSegment and FileRecords: the cases of Kafka's LogSegmentTest and FileRecordsTest that apply."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from local.errors import CorruptRecordError, LegacyIndexPositionOverflowError, LogSegmentOffsetOverflowError
from local.file_records import FileRecords
from local.records import MemoryRecords, SimpleRecord
from local.segment import LogSegment, RollParams
from local.segments import LogSegments

T0 = 1_700_000_000_000


def batch(offset: int, *values: bytes, ts: int = T0, epoch: int = 0) -> MemoryRecords:
    return MemoryRecords.build([SimpleRecord(ts + i, None, v) for i, v in enumerate(values)], base_offset=offset,
                               partition_leader_epoch=epoch)


def seg(tmp: Path, base: int = 40, interval: int = 10, **kw: object) -> LogSegment:
    return LogSegment.open(tmp, base, index_interval_bytes=interval, max_index_size=1000, **kw)  # type: ignore[arg-type]


def fill(s: LogSegment, start: int, n: int, size: int = 10) -> None:
    for off in range(start, start + n):
        s.append(off, batch(off, b"x" * size, ts=T0 + off))


def test_read_before_first_offset_after_last_and_from_gap(tmp_path: Path) -> None:
    s = seg(tmp_path)
    s.append(41, batch(40, b"hello", b"there"))
    info = s.read(39, 300)
    assert info is not None and [b.base_offset for b in info.records.batches()] == [40]
    assert s.read(52, 200) is None  # past the last offset
    s.append(52, batch(50, b"a", b"b", b"c"))
    info = s.read(45, 300)  # a gap: the next batch is returned
    assert info is not None and [b.base_offset for b in info.records.batches()] == [50]


def test_min_one_message_and_max_position(tmp_path: Path) -> None:
    s = seg(tmp_path)
    fill(s, 40, 5, size=100)
    one = s.read(40, 1, min_one_message=True)
    assert one is not None and len(list(one.records.batches())) == 1
    assert s.read(40, 1, min_one_message=False).records.size_in_bytes == 1  # type: ignore[union-attr]
    first = s.translate_offset(42)
    assert first is not None
    bounded = s.read(40, 10_000, max_position=first.position)
    assert [b.last_offset for b in bounded.records.batches()] == [40, 41]  # type: ignore[union-attr]


def test_truncate_and_reload_largest_timestamp_and_next_offset(tmp_path: Path) -> None:
    s = seg(tmp_path)
    fill(s, 40, 30)
    assert s.read_next_offset() == 70
    assert s.truncate_to(55) > 0
    assert s.read_next_offset() == 55
    assert s.max_timestamp_so_far == T0 + 54
    assert s.offset_index.last_offset < 55
    fill(s, 55, 5)
    assert s.read_next_offset() == 60


def test_truncate_empty_segment_resets_roll_clock(tmp_path: Path) -> None:
    clock = [1000]
    s = seg(tmp_path, time=lambda: clock[0])
    fill(s, 40, 1)
    clock[0] = 5000
    s.truncate_to(40)
    assert s.size == 0
    assert s.created == 5000 and s.rolling_based_timestamp is None


def test_find_offset_by_timestamp(tmp_path: Path) -> None:
    s = seg(tmp_path)
    fill(s, 40, 30)
    found = s.find_offset_by_timestamp(T0 + 57)
    assert found is not None and (found.timestamp, found.offset) == (T0 + 57, 57)
    assert s.find_offset_by_timestamp(T0 + 500) is None


@pytest.mark.parametrize("damage", ["index", "timeindex"])
def test_recovery_fixes_corrupt_indexes(tmp_path: Path, damage: str) -> None:
    s = seg(tmp_path)
    fill(s, 40, 50)
    s.on_become_inactive_segment()
    good_index = s.offset_index_path.read_bytes()
    s.close()
    path = tmp_path / f"00000000000000000040.{damage}"
    data = bytearray(path.read_bytes())
    data[4:12] = b"\xff" * 8
    path.write_bytes(bytes(data))
    again = seg(tmp_path, file_already_exists=True)
    assert again.recover() == 0
    again.offset_index.trim_to_valid_size()
    assert again.offset_index_path.read_bytes() == good_index
    again.sanity_check(False)
    for off in range(40, 90):
        found = again.translate_offset(off)
        assert found is not None and found.offset == off


def test_recovery_truncates_at_corrupt_batch(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    s = seg(tmp_path)
    fill(s, 40, 20)
    pos = s.translate_offset(50)
    assert pos is not None
    os.pwrite(s.log.fd, b"\x00\x01\x02", pos.position + 40)  # inside batch 50, past its header
    truncated = s.recover()
    assert truncated == s.log.size_in_bytes + truncated - pos.position and truncated > 0
    assert s.read_next_offset() == 50
    assert "position" in caplog.text


def test_recovery_of_golden_segment_rebuilds_kafkas_index(golden_dir: Path) -> None:
    d = golden_dir / "__cluster_metadata-0"
    original = (d / "00000000000000000000.index").read_bytes()
    (d / "00000000000000000000.index").unlink()
    s = LogSegment.open(d, 0, index_interval_bytes=4096, file_already_exists=True)
    assert s.recover() == 0
    s.offset_index.trim_to_valid_size()
    rebuilt = (d / "00000000000000000000.index").read_bytes()
    # Kafka wrote (56, 4123) while appending; after a restart its counter started again, so recovery, which
    # counts from position 0, also adds the entry that the uninterrupted interval rule gives past 8219.
    assert rebuilt[:8] == original
    starts = {b.position: b for b in s.log.batches()}
    for i in range(s.offset_index.entries):
        e = s.offset_index.entry(i)
        assert e.position in starts and starts[e.position].last_offset == e.offset
    assert s.read_next_offset() == 116


def test_offset_overflow_refused(tmp_path: Path) -> None:
    s = seg(tmp_path, base=0)
    with pytest.raises(LogSegmentOffsetOverflowError, match="int32"):
        s.append(2**31, batch(2**31, b"x"))


def test_should_roll_by_size_time_and_full_index(tmp_path: Path) -> None:
    s = seg(tmp_path, roll_jitter_ms=100)
    fill(s, 40, 3)
    params = dict(max_segment_bytes=10**9, max_timestamp_in_messages=T0 + 40, max_offset_in_messages=43,
                  messages_size=10, now_ms=0, max_segment_ms=10**9)
    assert not s.should_roll(RollParams(**params))  # type: ignore[arg-type]
    assert s.should_roll(RollParams(**{**params, "max_segment_bytes": s.size + 5}))  # type: ignore[arg-type]
    # time is measured from the first batch's timestamp, minus the jitter
    assert s.should_roll(RollParams(**{**params, "max_segment_ms": 1000, "max_timestamp_in_messages": T0 + 40 + 950}))  # type: ignore[arg-type]
    assert not s.should_roll(RollParams(**{**params, "max_segment_ms": 1000, "max_timestamp_in_messages": T0 + 40 + 850}))  # type: ignore[arg-type]
    assert s.should_roll(RollParams(**{**params, "max_offset_in_messages": 40 + 2**31}))  # type: ignore[arg-type]


def test_file_records_torn_tail_and_bad_size(tmp_path: Path) -> None:
    fr = FileRecords.open(tmp_path / "x.log")
    fr.append(batch(0, b"a"))
    fr.append(batch(1, b"b"))
    whole = fr.size_in_bytes
    fr.append(bytes(batch(2, b"c"))[:-5])
    assert [b.base_offset for b in fr.batches()] == [0, 1]  # the torn tail ends iteration
    fr.truncate_to(whole)
    fr.append(b"\x00" * 8 + (5).to_bytes(4, "big") + b"\x00" * 20)
    with pytest.raises(CorruptRecordError, match=f"position {whole}"):
        list(fr.batches())
    fr.close()


def test_file_records_slices_and_search(tmp_path: Path) -> None:
    fr = FileRecords.open(tmp_path / "x.log")
    positions = []
    for off in range(0, 30, 3):
        positions.append(fr.size_in_bytes)
        fr.append(batch(off, b"a", b"b", b"c"))
    found = fr.search_for_offset_from_position(10, 0)
    assert found is not None and (found.offset, found.position) == (11, positions[3])
    sl = fr.slice(positions[2], positions[5] - positions[2])
    assert [b.base_offset for b in sl.batches()] == [6, 9, 12]
    assert bytes(sl) == fr.read(positions[2], positions[5] - positions[2])
    ts = fr.search_for_timestamp(T0 + 1, 0, 4)
    assert ts is not None and ts.offset == 4
    assert fr.largest_timestamp_after(0).timestamp == T0 + 2


def test_sparse_segment_past_4_gib_through_a_12_byte_index(tmp_path: Path) -> None:
    s = LogSegment.open(tmp_path, 0, index_interval_bytes=0, use_large_index=True)
    s.append(0, batch(0, b"first"))
    # a hole up to 5 GiB: the next batch starts past 2^32 (sparse: nothing is written in between)
    hole_end = 5 * 2**30
    os.ftruncate(s.log.fd, hole_end)
    s.log._size = hole_end
    s.append(1, batch(1, b"far away"))
    s.append(2, batch(2, b"further"))
    entry = s.offset_index.lookup(2)
    assert entry.offset == 2 and entry.position > 2**32
    found = s.translate_offset(2)
    assert found is not None and found.position > 2**32
    info = s.read(2, 1000)
    assert info is not None and [r.value for b in info.records.batches() for r in b.records()] == [b"further"]
    assert s.offset_index.entry_size == 12
    legacy = LogSegment.open(tmp_path / "legacy", 0, index_interval_bytes=0) if (tmp_path / "legacy").mkdir() is None else None
    assert legacy is not None
    legacy.append(0, batch(0, b"x"))
    os.ftruncate(legacy.log.fd, 2**31 + 10)
    legacy.log._size = 2**31 + 10
    with pytest.raises(LegacyIndexPositionOverflowError, match="features upgrade"):
        legacy.append(1, batch(1, b"y"))


def test_log_segments_floor_higher_and_values(tmp_path: Path) -> None:
    segs = LogSegments()
    for base in (0, 100, 200):
        (tmp_path / str(base)).mkdir()
        segs.add(LogSegment.open(tmp_path / str(base), base))
    assert segs.floor_segment(150).base_offset == 100  # type: ignore[union-attr]
    assert segs.higher_segment(100).base_offset == 200  # type: ignore[union-attr]
    assert segs.lower_segment(100).base_offset == 0  # type: ignore[union-attr]
    assert [s.base_offset for s in segs.values(150, 250)] == [100, 200]
    assert [s.base_offset for s in segs.values(0, 100)] == [0]
    assert segs.active_segment.base_offset == 200  # type: ignore[union-attr]
    segs.remove(100)
    assert segs.base_offsets() == [0, 200]


# --- recovery rules that mutation testing found unchecked (TESTING.md) -----------------------------------


class RecordingProducerState:
    """The producer-state side of recovery, recorded (the ProducerStateLike protocol)."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, int]] = []
        self.map_end_offsets: list[int] = []

    def apply_batch(self, batch: object) -> None:
        self.applied.append((batch.producer_id, batch.base_offset))  # type: ignore[attr-defined]

    def last_stable_offset(self, completed_txn: object) -> int:
        raise AssertionError("no transaction completes in these tests")

    def complete_txn(self, completed_txn: object) -> None:
        raise AssertionError("no transaction completes in these tests")

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offsets.append(offset)


class RecordingEpochs:
    def __init__(self, latest: int | None) -> None:
        self.latest = latest
        self.assigned: list[tuple[int, int]] = []

    def latest_epoch(self) -> int | None:
        return self.latest

    def assign(self, epoch: int, start_offset: int) -> None:
        self.assigned.append((epoch, start_offset))
        self.latest = epoch


def _recovered_copy(tmp_path: Path, name: str, data: bytes, base: int = 40) -> LogSegment:
    (tmp_path / name).mkdir()
    (tmp_path / name / f"{base:020d}.log").write_bytes(data)
    return seg(tmp_path / name, base=base, file_already_exists=True)


def test_recovery_feeds_producer_state_for_every_producer_id_from_0_and_the_map_end_offset(tmp_path: Path) -> None:
    parts = [
        MemoryRecords.build([SimpleRecord(T0, None, b"a")], base_offset=40, producer_id=0, producer_epoch=0, base_sequence=0),
        MemoryRecords.build([SimpleRecord(T0, None, b"b"), SimpleRecord(T0, None, b"c")], base_offset=41),
        MemoryRecords.build([SimpleRecord(T0, None, b"d")], base_offset=43, producer_id=7, producer_epoch=0, base_sequence=0),
        MemoryRecords.build([SimpleRecord(T0, None, b"e")], base_offset=44),
    ]
    s = _recovered_copy(tmp_path, "p", b"".join(bytes(p) for p in parts))
    state = RecordingProducerState()
    assert s.recover(producer_state_manager=state) == 0
    assert state.applied == [(0, 40), (7, 43)]
    assert state.map_end_offsets[-1] == 45, "past the last batch, producer or not"
    assert s.recover() == 0, "no producer state: nothing to feed"


def test_recovery_assigns_each_new_leader_epoch_at_its_first_offset(tmp_path: Path) -> None:
    data = b"".join(bytes(batch(off, b"x", epoch=e)) for off, e in [(40, 0), (41, 0), (42, 2), (43, 2), (44, 5)])
    s = _recovered_copy(tmp_path, "e", data)
    epochs = RecordingEpochs(None)
    s.recover(leader_epoch_cache=epochs)
    assert epochs.assigned == [(0, 40), (2, 42), (5, 44)]
    known = RecordingEpochs(2)  # the cache already knows epoch 2: only later epochs are assigned
    s.recover(leader_epoch_cache=known)
    assert known.assigned == [(5, 44)]


@pytest.mark.parametrize("read_bytes", [61, 100, 150, 1000])
def test_recovery_reads_in_blocks_smaller_than_a_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_bytes: int
) -> None:
    """Batches crossing the read blocks (or larger than one) are read whole, checked and indexed alike."""
    s = seg(tmp_path, interval=100)
    for off in range(40, 60):
        s.append(off, batch(off, b"y" * (off * 7 % 90), ts=T0 + off))
    s.flush()
    expected = [s.offset_index.entry(i) for i in range(s.offset_index.entries)]
    monkeypatch.setattr("local.segment.RECOVERY_READ_BYTES", read_bytes)
    assert s.recover() == 0
    assert [s.offset_index.entry(i) for i in range(s.offset_index.entries)] == expected
    assert (s.max_timestamp_so_far, s.read_next_offset()) == (T0 + 59, 60)
    bad = bytearray(s.log.read(0, s.size))
    middle = s.translate_offset(50)
    assert middle is not None
    bad[middle.position + 70] ^= 0xFF
    again = _recovered_copy(tmp_path, f"r{read_bytes}", bytes(bad))
    assert again.recover() == len(bad) - middle.position
    assert again.read_next_offset() == 50


def test_appended_and_recovered_indexes_agree_at_the_interval_boundary(tmp_path: Path) -> None:
    """Kafka indexes a batch when MORE than index.interval.bytes were appended since the last entry."""
    size = len(bytes(batch(40, b"z" * 20)))
    s = seg(tmp_path, interval=size)
    for off in range(40, 48):
        s.append(off, batch(off, b"z" * 20, ts=T0 + off))
    # 0 > size? no; size > size? no; 2*size > size: the third batch (position 2*size) gets an entry; and so on
    entries = [s.offset_index.entry(i) for i in range(s.offset_index.entries)]
    assert [(e.offset, e.position) for e in entries] == [(42, 2 * size), (44, 4 * size), (46, 6 * size)]
    assert s.bytes_since_last_index_entry == 2 * size
    assert s.recover() == 0
    assert [s.offset_index.entry(i) for i in range(s.offset_index.entries)] == entries
    assert s.bytes_since_last_index_entry == 2 * size


def test_the_first_offset_of_the_max_timestamp_wins_on_append_and_recovery(tmp_path: Path) -> None:
    s = seg(tmp_path, interval=0)
    s.append(40, batch(40, b"a", ts=T0 + 5))
    s.append(41, batch(41, b"b", ts=T0 + 9))
    s.append(42, batch(42, b"c", ts=T0 + 9))
    s.append(43, batch(43, b"d", ts=T0 + 2))
    assert s.rolling_based_timestamp == T0 + 5, "the first batch's timestamp, set on the first append"
    assert (s.max_timestamp_so_far, s.offset_of_max_timestamp_so_far) == (T0 + 9, 41)
    assert s.recover() == 0
    assert (s.max_timestamp_so_far, s.offset_of_max_timestamp_so_far) == (T0 + 9, 41)
    s.on_become_inactive_segment()
    assert s.time_index.last_entry.timestamp == T0 + 9 and s.time_index.last_entry.offset == 41
    assert [s.time_index.entry(i).timestamp for i in range(s.time_index.entries)] == [T0 + 9]


def test_recovery_of_timestamps_0_and_none(tmp_path: Path) -> None:
    zero = _recovered_copy(tmp_path, "zero", bytes(batch(40, b"a", ts=0)) + bytes(batch(41, b"b", ts=0)))
    zero.recover()
    assert (zero.max_timestamp_so_far, zero.offset_of_max_timestamp_so_far) == (0, 40)
    none = _recovered_copy(tmp_path, "none", bytes(batch(40, b"a", ts=-1)) + bytes(batch(41, b"b", ts=-1)))
    none.recover()
    assert (none.max_timestamp_so_far, none.offset_of_max_timestamp_so_far) == (-1, 40)
    assert none.time_index.entries == 0


def test_recovery_truncates_an_overlapping_batch_a_stray_byte_and_an_unknown_codec_but_keeps_zstd(
    tmp_path: Path,
) -> None:
    first, second = bytes(batch(40, b"a", b"b")), bytes(batch(41, b"c"))  # 41 overlaps the first batch
    overlap = _recovered_copy(tmp_path, "overlap", first + second)
    assert overlap.recover() == len(second) and overlap.size == len(first)
    stray = _recovered_copy(tmp_path, "stray", first + b"\x00")
    assert stray.recover() == 1 and stray.size == len(first)
    zstd = bytes(MemoryRecords.build([SimpleRecord(T0, None, b"z" * 50)], "zstd", base_offset=42))
    kept = _recovered_copy(tmp_path, "zstd", first + zstd)
    assert kept.recover() == 0 and kept.read_next_offset() == 43
    unknown = bytearray(zstd)
    unknown[22] = (unknown[22] & ~0x07) | 5  # codec 5 (the CRC recomputed: only the codec is wrong)
    import crc32c

    unknown[17:21] = crc32c.crc32c(bytes(unknown[21:])).to_bytes(4, "big")
    cut = _recovered_copy(tmp_path, "unknown", first + bytes(unknown))
    assert cut.recover() == len(unknown) and cut.read_next_offset() == 42


def test_truncation_reloads_the_max_timestamp_from_the_log_past_the_last_time_index_entry(tmp_path: Path) -> None:
    s = seg(tmp_path, interval=10**6)  # no index entries: the max timestamp comes from the log alone
    for off, ts in zip(range(40, 44), (5, 9, 9, 2), strict=True):
        s.append(off, batch(off, b"v", ts=T0 + ts))
    s.truncate_to(43)
    assert s.time_index.entries == 0
    assert (s.max_timestamp_so_far, s.offset_of_max_timestamp_so_far) == (T0 + 9, 41)


def test_a_failed_write_or_flush_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    s = seg(tmp_path)

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(s.log, "append", full)
    for write in (lambda: s.append(40, batch(40, b"x")), lambda: s.append_batch(40, T0, bytes(batch(40, b"x")))):
        with pytest.raises(OSError) as info:
            write()
        assert info.value.filename == str(s.log.path)
    monkeypatch.setattr(s.log, "flush", full)
    with pytest.raises(OSError) as flushed:
        s.flush()
    assert flushed.value.filename == str(s.log.path)


def test_read_returns_where_it_starts_and_checks_what_a_consumer_read_finds(tmp_path: Path) -> None:
    s = seg(tmp_path)
    s.append(41, bytes(batch(40, b"a", b"b")))  # raw bytes are appended as they are
    s.append(44, batch(42, b"c", b"d", b"e"))
    second = s.translate_offset(42)
    assert second is not None and second.position > 0
    info = s.read(43, 1000)
    assert info is not None and info.fetch_offset_metadata == (43, 40, second.position)
    assert [b.base_offset for b in info.records.batches()] == [42]
    assert s.offset_index.entries == 1 and s.offset_index.entry(0).position == second.position
    empty = s.read(40, 0)
    assert empty is not None and empty.records.size_in_bytes == 0, "max_size 0 is an empty read, not an error"
    with pytest.raises(ValueError, match="invalid max size -1"):
        s.read(40, -1)
    partial = s.read(40, 10)
    assert partial is not None and partial.records.size_in_bytes == 10, "min_one_message is off by default"
    # a consumer's read of a dense log past the segment's end: no batch holds it
    assert s.read(50, 1000) is None
    with pytest.raises(CorruptRecordError, match="no batch holds offset 50"):
        s.read(50, 1000, dense=True)
    assert s.read(50, 1000, dense=False) is None
    held = s.read(43, 1000, dense=True)
    assert held is not None and [b.base_offset for b in held.records.batches()] == [42]


def test_find_offset_by_timestamp_starts_at_the_segment_start_by_default(tmp_path: Path) -> None:
    s = seg(tmp_path, base=0)
    s.append(0, batch(0, b"a", ts=T0))
    s.append(1, batch(1, b"b", ts=T0 + 5))
    found = s.find_offset_by_timestamp(T0)
    assert found is not None and found.offset == 0


def test_one_append_of_several_batches_indexes_each_at_its_own_position(tmp_path: Path) -> None:
    s = seg(tmp_path, interval=0)
    parts = [bytes(batch(off, b"v" * off)) for off in range(40, 44)]
    s.append(43, b"".join(parts))
    starts = [sum(len(p) for p in parts[:i]) for i in range(4)]
    entries = [s.offset_index.entry(i) for i in range(s.offset_index.entries)]
    assert [(e.offset, e.position) for e in entries] == [(41, starts[1]), (42, starts[2]), (43, starts[3])]
