"""LogSegment and FileRecords: the cases of Kafka's LogSegmentTest and FileRecordsTest that apply."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest

from local.errors import (
    CorruptIndexError,
    CorruptRecordError,
    LegacyIndexPositionOverflowError,
    LogSegmentOffsetOverflowError,
)
from local.file_records import FileRecords
from local.index import TimestampOffset
from local.records import MemoryRecords, SimpleRecord
from local.records.constants import INT32_MAX
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
    # a consumer's read past the segment's end, which ends on a whole batch: the next segment holds it
    assert s.read(50, 1000) is None
    assert s.read(50, 1000, checked=True) is None
    held = s.read(43, 1000, checked=True)
    assert held is not None and [b.base_offset for b in held.records.batches()] == [42]
    # ... but bytes after the last whole batch are damage, not the end of the segment
    whole = s.size
    s.log.append(bytes(batch(45, b"f"))[:30])
    assert s.read(50, 1000) is None, "internal reads check nothing"
    with pytest.raises(CorruptRecordError, match=re.escape(f"no batch holds offset 50 in {s.log.path} (segment 40): "
                                                           f"the bytes from position {whole} are not a whole batch")):
        s.read(50, 1000, checked=True)


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


# --- the segment's life cycle: files, clocks and closing (mutation testing, TESTING.md) ---------------------


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _with_all_four_files(tmp_path: Path) -> LogSegment:
    s = seg(tmp_path, interval=0)
    fill(s, 40, 3)
    s.update_txn_index(CompletedTxn(7, 40, 41, is_aborted=True), 40)
    s.flush()
    return s


def test_change_file_suffixes_renames_all_four_files_loaded_or_not(tmp_path: Path) -> None:
    s = _with_all_four_files(tmp_path)
    names = ["00000000000000000040.index", "00000000000000000040.log", "00000000000000000040.timeindex",
             "00000000000000000040.txnindex"]
    assert _files(tmp_path) == names
    s.change_file_suffixes("", ".deleted")
    assert _files(tmp_path) == [n + ".deleted" for n in names]
    assert s.has_suffix(".deleted") and not s.has_suffix(".cleaned")
    assert (s.log.path.name, s.offset_index_path.name, s.time_index_path.name, s.txn_index.path.name) == (
        names[1] + ".deleted", names[0] + ".deleted", names[2] + ".deleted", names[3] + ".deleted")
    s.change_file_suffixes(".deleted", "")  # the suffix is cut off the name, not appended to it
    assert _files(tmp_path) == names and not s.has_suffix(".deleted")
    s.change_file_suffixes(".cleaned", ".swap")  # a suffix the names do not have: kept whole
    assert _files(tmp_path) == [n + ".swap" for n in names]
    assert s.read_next_offset() == 43 and s.txn_index.all_aborted_txns()[0].producer_id == 7
    s.close()
    # indexes never loaded (lazy) are renamed on disk all the same
    again = seg(tmp_path, file_suffix=".swap", file_already_exists=True)
    again.change_file_suffixes(".swap", "")
    assert _files(tmp_path) == names
    assert again.offset_index.entries == 2 and again.read_next_offset() == 43


def test_last_modified_is_the_log_files_mtime_in_ms_and_the_creation_time_once_deleted(tmp_path: Path) -> None:
    s = seg(tmp_path, time=lambda: 1234)
    s.set_last_modified(T0 + 500)
    assert s.last_modified == T0 + 500
    assert os.stat(s.log.path).st_mtime == os.stat(s.log.path).st_atime == (T0 + 500) / 1000
    s.append(40, batch(40, b"x", ts=-1))
    s.set_last_modified(T0 + 500)
    assert s.largest_timestamp == T0 + 500, "no timestamp in the segment: its last-modified time"
    s.append(41, batch(41, b"y", ts=0))
    assert s.largest_timestamp == 0, "a timestamp of 0 is a timestamp"
    s.delete_if_exists()
    assert s.last_modified == 1234


def test_time_waited_for_roll_counts_from_the_first_batchs_timestamp_else_from_creation(tmp_path: Path) -> None:
    clock = [1000]
    s = seg(tmp_path, time=lambda: clock[0])
    assert s.time_waited_for_roll(now=1700, message_timestamp=T0) == 700, "empty: time since creation"
    s.append(40, batch(40, b"a", ts=T0 + 5))
    s.append(41, batch(41, b"b", ts=T0 + 50))
    assert s.time_waited_for_roll(now=1700, message_timestamp=T0 + 80) == 75
    s.close()
    # reopened: the first batch's timestamp is read back from the log (the first batch, not the last)
    again = seg(tmp_path, file_already_exists=True, time=lambda: 0)
    assert again.rolling_based_timestamp is None
    assert again.time_waited_for_roll(now=9, message_timestamp=T0 + 80) == 75
    (tmp_path / "zero").mkdir()
    zero = seg(tmp_path / "zero", time=lambda: 1000)
    zero.append(40, batch(40, b"a", ts=0))
    assert zero.time_waited_for_roll(now=5000, message_timestamp=30) == 30, "timestamp 0 is a timestamp"
    (tmp_path / "none").mkdir()
    none = seg(tmp_path / "none", time=lambda: 1000)
    none.append(40, batch(40, b"a", ts=-1))
    assert none.time_waited_for_roll(now=5000, message_timestamp=30) == 4000, "no timestamp: since creation"


def roll(s: LogSegment, *, size: int = 10, offset: int = 43, ts: int = T0 + 40, now: int = 0,
         max_bytes: int = 10**9, max_ms: int = 10**9) -> bool:
    return s.should_roll_for(size, offset, ts, now, max_bytes, max_ms)


def test_should_roll_for_at_each_bound(tmp_path: Path) -> None:
    clock = [1000]
    s = seg(tmp_path, roll_jitter_ms=100, time=lambda: clock[0])
    assert not roll(s, ts=T0 + 10**10, now=10**12), "an empty segment is never too old"
    assert not roll(s, size=100, max_bytes=100) and roll(s, size=101, max_bytes=100)
    fill(s, 40, 3)
    full = s.size
    assert not roll(s, size=10, max_bytes=full + 10) and roll(s, size=11, max_bytes=full + 10)
    # time: from the first batch's timestamp (T0 + 40), roll when MORE than segment.ms - jitter have passed
    assert not roll(s, ts=T0 + 40 + 900, max_ms=1000) and roll(s, ts=T0 + 40 + 901, max_ms=1000)
    assert not roll(s, offset=40) and not roll(s, offset=40 + INT32_MAX)
    assert roll(s, offset=41 + INT32_MAX) and roll(s, offset=39)
    s.close()
    again = seg(tmp_path, roll_jitter_ms=100, file_already_exists=True, time=lambda: 0)
    assert again.offset_index.is_full, "trimmed on close: full until the loader resizes the active segment"
    again.resize_indexes(1000)
    assert not again.offset_index.is_full and not again.time_index.is_full
    assert again.rolling_based_timestamp is None
    assert roll(again, ts=T0 + 40 + 901, max_ms=1000), "the first batch's timestamp is read back from the log"
    assert not roll(again, ts=T0 + 40 + 900, max_ms=1000)
    (tmp_path / "none").mkdir()
    none = seg(tmp_path / "none", time=lambda: clock[0])
    none.append(40, batch(40, b"a", ts=-1))
    assert not roll(none, now=2000, max_ms=1000, ts=T0 + 10**9) and roll(none, now=2001, max_ms=1000)
    params = RollParams(max_segment_bytes=10**9, max_timestamp_in_messages=T0, max_offset_in_messages=41,
                        messages_size=10, now_ms=2001, max_segment_ms=1000)
    assert none.should_roll(params) and not none.should_roll(dataclasses.replace(params, now_ms=2000))
    (tmp_path / "zero").mkdir()
    zero = seg(tmp_path / "zero", time=lambda: 10**12)  # timestamp 0 is a timestamp: the clock is not used
    zero.append(40, batch(40, b"a", ts=0))
    assert roll(zero, ts=1001, max_ms=1000, now=0) and not roll(zero, ts=1000, max_ms=1000, now=10**13)
    (tmp_path / "full").mkdir()
    # 3 offset slots; no timestamps, so the time index (1 slot left) stays empty
    tiny = LogSegment.open(tmp_path / "full", 40, index_interval_bytes=0, max_index_size=24, time=lambda: 0)
    for off in range(40, 43):
        tiny.append(off, batch(off, b"x", ts=-1))
    assert not roll(tiny, ts=-1)
    tiny.append(43, batch(43, b"x", ts=-1))
    assert tiny.offset_index.is_full and not tiny.time_index.is_full and roll(tiny, ts=-1)


def test_a_time_index_that_is_full_rolls_too(tmp_path: Path) -> None:
    s = LogSegment.open(tmp_path, 40, index_interval_bytes=0, max_index_size=36)  # 3 time slots, 4 offset
    fill(s, 40, 3)
    assert s.time_index.is_full and not s.offset_index.is_full
    assert roll(s, ts=T0 + 40)


class CompletedTxn:
    def __init__(self, producer_id: int, first_offset: int, last_offset: int, is_aborted: bool) -> None:
        self.producer_id, self.first_offset, self.last_offset = producer_id, first_offset, last_offset
        self.is_aborted = is_aborted


def test_update_txn_index_records_only_aborted_transactions(tmp_path: Path) -> None:
    s = seg(tmp_path)
    s.update_txn_index(CompletedTxn(7, 40, 45, is_aborted=False), 40)
    assert s.txn_index.all_aborted_txns() == []
    s.update_txn_index(CompletedTxn(7, 40, 45, is_aborted=True), 41)
    [aborted] = s.txn_index.all_aborted_txns()
    assert (aborted.producer_id, aborted.first_offset, aborted.last_offset, aborted.last_stable_offset) == (7, 40, 45, 41)
    assert [t.producer_id for t in s.collect_aborted_txns(40, 50).aborted_txns] == [7]


class TxnProducerState(RecordingProducerState):
    """Completes a transaction (aborted or committed) on each control batch."""

    def __init__(self) -> None:
        super().__init__()
        self.completed: list[object] = []

    def apply_batch(self, batch: object) -> object:  # type: ignore[override]
        super().apply_batch(batch)
        if not batch.is_control_batch:  # type: ignore[attr-defined]
            return None
        aborted = batch.base_offset == 42  # type: ignore[attr-defined]
        return CompletedTxn(batch.producer_id, 40, batch.base_offset, is_aborted=aborted)  # type: ignore[attr-defined]

    def last_stable_offset(self, completed_txn: object) -> int:
        return completed_txn.first_offset + 1  # type: ignore[attr-defined]

    def complete_txn(self, completed_txn: object) -> None:
        self.completed.append(completed_txn)


def test_recovery_completes_transactions_and_indexes_the_aborted_ones(tmp_path: Path) -> None:
    def data(off: int) -> bytes:
        return bytes(MemoryRecords.build([SimpleRecord(T0, None, b"v")], base_offset=off, producer_id=5,
                                         producer_epoch=0, base_sequence=off - 40, is_transactional=True))

    def marker(off: int, commit: bool) -> bytes:
        return bytes(MemoryRecords.end_transaction_marker(5, 0, commit=commit, base_offset=off, timestamp=T0))

    raw = data(40) + data(41) + marker(42, False) + data(43) + marker(44, True)
    s = _recovered_copy(tmp_path, "txn", raw)
    state = TxnProducerState()
    assert s.recover(producer_state_manager=state) == 0
    assert [t.last_offset for t in state.completed] == [42, 44]  # type: ignore[attr-defined]
    assert [(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset) for t in s.txn_index.all_aborted_txns()] == [
        (5, 40, 42, 41)]
    assert state.map_end_offsets == [41, 42, 43, 44, 45, 45], "after each producer batch, and once at the end"


def test_close_writes_the_closing_time_index_entry_only_for_a_real_max_timestamp(tmp_path: Path) -> None:
    dirs = {name: tmp_path / name for name in ("ts", "zero", "none", "untouched")}
    for d in dirs.values():
        d.mkdir()
    s = seg(dirs["ts"], interval=10**6)  # no index entry while appending: only the closing one
    for off, ts in ((40, 5), (41, 9), (42, 7)):
        s.append(off, batch(off, b"v", ts=T0 + ts))
    s.close()
    again = seg(dirs["ts"], file_already_exists=True)
    assert [(again.time_index.entry(i).timestamp, again.time_index.entry(i).offset)
            for i in range(again.time_index.entries)] == [(T0 + 9, 41)]
    again.close()  # nothing read since reopening: nothing to add
    assert seg(dirs["ts"], file_already_exists=True).time_index.entries == 1
    zero = seg(dirs["zero"], interval=10**6)
    zero.append(40, batch(40, b"v", ts=0))
    zero.close()
    assert seg(dirs["zero"], file_already_exists=True).time_index.last_entry.timestamp == 0
    none = seg(dirs["none"], interval=10**6)
    none.append(40, batch(40, b"v", ts=-1))
    none.close()
    assert (dirs["none"] / "00000000000000000040.timeindex").stat().st_size == 0


def test_close_survives_a_failed_closing_entry_and_closes_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from local.errors import KafkaStorageError

    s = seg(tmp_path, interval=10**6)
    s.append(40, batch(40, b"v"))
    s.update_txn_index(CompletedTxn(7, 40, 40, is_aborted=True), 40)

    def broken(*args: object, **kwargs: object) -> None:
        raise KafkaStorageError("disk gone")

    index, time_index = s.offset_index, s.time_index
    monkeypatch.setattr(time_index, "maybe_append", broken)
    with caplog.at_level("WARNING", logger="local.segment"):
        s.close()
    [warned] = [r for r in caplog.records if r.name == "local.segment"]
    assert warned.getMessage() == f"could not write the closing time index entry of {s.log.path}"
    assert warned.exc_info is not None and isinstance(warned.exc_info[1], KafkaStorageError), "the error is logged"
    assert s.log._closed and index.is_closed and time_index.is_closed
    assert s.txn_index._fd is None


def test_close_handlers_goes_on_past_a_failing_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    s = seg(tmp_path, interval=0)
    fill(s, 40, 3)
    s.update_txn_index(CompletedTxn(7, 40, 40, is_aborted=True), 40)
    index, time_index = s.offset_index, s.time_index

    def broken() -> None:
        raise OSError("EIO")

    monkeypatch.setattr(s._lazy_offset_index, "close_handler", broken)
    with caplog.at_level("DEBUG", logger="local.segment"):
        s.close_handlers()
    [logged] = [r for r in caplog.records if r.name == "local.segment"]
    assert logged.getMessage() == "error closing handlers of segment 40"
    assert logged.exc_info is not None and isinstance(logged.exc_info[1], OSError), "the error is logged"
    assert time_index.is_closed and s.log._closed and s.txn_index._fd is None and not index.is_closed


def test_sanity_check_wants_an_offset_index_file_entries_inside_the_log_and_empties_a_new_time_index(
    tmp_path: Path,
) -> None:
    s = seg(tmp_path, interval=0)
    fill(s, 40, 3)
    s.sanity_check(False)  # the time index has entries: it is not emptied
    assert s.time_index.entries == 2
    last = s.offset_index.entry(s.offset_index.entries - 1)
    s.close()
    log = tmp_path / "00000000000000000040.log"
    data = log.read_bytes()
    log.write_bytes(data[: last.position + 1])  # the last indexed batch cut short: still starts inside the log
    seg(tmp_path, file_already_exists=True).sanity_check(False)
    log.write_bytes(data[: last.position])  # the last entry points at the end of the log
    with pytest.raises(CorruptIndexError, match=f"points at position {last.position}, past the end") as info:
        seg(tmp_path, file_already_exists=True).sanity_check(False)
    assert info.value.context["path"] == str(tmp_path / "00000000000000000040.index")
    (tmp_path / "00000000000000000040.timeindex").unlink()
    fresh = seg(tmp_path, file_already_exists=True)
    fresh.log.truncate_to(0)
    fresh.offset_index.truncate_to(40)
    fresh.sanity_check(True)
    assert (tmp_path / "00000000000000000040.timeindex").stat().st_size == 0
    (tmp_path / "00000000000000000040.index").unlink()
    with pytest.raises(FileNotFoundError, match=r"offset index .*00000000000000000040\.index does not exist"):
        seg(tmp_path, file_already_exists=True).sanity_check(False)


def test_open_passes_on_preallocation_and_read_only(tmp_path: Path) -> None:
    pre = LogSegment.open(tmp_path, 40, preallocate=True, init_file_size=4096)
    assert pre.size == 0 and pre.log.path.stat().st_size == 4096
    pre.append(40, batch(40, b"x"))
    pre.close()
    written = pre.log.path.stat().st_size
    LogSegment.open(tmp_path, 40, preallocate=True, init_file_size=8192, file_already_exists=True).close()
    assert pre.log.path.stat().st_size == written, "an existing log is never preallocated"
    ro = LogSegment.open(tmp_path, 40, file_already_exists=True, mutable=False)
    assert ro.read_next_offset() == 41
    with pytest.raises(OSError):
        ro.append(41, batch(41, b"y"))
    assert repr(ro) == f"LogSegment(base_offset=40, size={ro.size}, path={ro.log.path})"


def test_now_ms_is_whole_milliseconds_of_the_wall_clock() -> None:
    import time

    from local.segment import _now_ms

    before = time.time_ns() // 1_000_000
    now = _now_ms()
    after = time.time_ns() // 1_000_000
    assert type(now) is int and before <= now <= after


def test_offsets_outside_the_segments_int32_range_are_refused_with_their_context(tmp_path: Path) -> None:
    s = seg(tmp_path)  # base 40
    assert [s.can_convert_to_relative_offset(o) for o in (39, 40, 40 + INT32_MAX, 41 + INT32_MAX)] == [
        False, True, True, False]
    for append in (lambda off: s.append(off, batch(off, b"x")),
                   lambda off: s.append_batch(off, T0, bytes(batch(off, b"x")))):
        for off in (39, 41 + INT32_MAX):  # below the base offset, and too far above it
            with pytest.raises(LogSegmentOffsetOverflowError, match=f"offset {off} cannot be stored in segment 40") as info:
                append(off)
            assert info.value.context == {"offset": off, "segment": 40}
    assert s.size == 0


def test_append_batch_indexes_like_append(tmp_path: Path) -> None:
    by_append, by_batch = (tmp_path / "a"), (tmp_path / "b")
    by_append.mkdir()
    by_batch.mkdir()
    a, b = seg(by_append, interval=0), seg(by_batch, interval=0)
    for off, ts in ((40, 5), (41, 9), (42, 7), (43, 12)):
        raw = bytes(batch(off, b"v" * off, ts=T0 + ts))
        a.append(off, raw)
        b.append_batch(off, T0 + ts, raw)
    assert b.log.read(0, b.size) == a.log.read(0, a.size)
    assert [b.offset_index.entry(i) for i in range(b.offset_index.entries)] == [
        a.offset_index.entry(i) for i in range(a.offset_index.entries)]
    assert [b.time_index.entry(i) for i in range(b.time_index.entries)] == [
        a.time_index.entry(i) for i in range(a.time_index.entries)]
    assert b.offset_index.entries == 3 and b.time_index.entries == 2
    assert (b.max_timestamp_so_far, b.offset_of_max_timestamp_so_far, b.rolling_based_timestamp) == (T0 + 12, 43, T0 + 5)
    assert b.bytes_since_last_index_entry == a.bytes_since_last_index_entry == len(bytes(batch(43, b"v" * 43)))


def test_truncating_a_segment_without_timestamps_keeps_the_base_offset_as_the_max_timestamps_offset(
    tmp_path: Path,
) -> None:
    s = seg(tmp_path, interval=0)
    for off in range(40, 44):
        s.append(off, batch(off, b"v", ts=-1))
    s.truncate_to(42)
    assert (s.max_timestamp_so_far, s.offset_of_max_timestamp_so_far) == (-1, 40), "as recovery gives"


def test_open_defaults_are_kafkas(tmp_path: Path) -> None:
    s = LogSegment.open(str(tmp_path), 40)
    assert (s.index_interval_bytes, s.roll_jitter_ms) == (4096, 0)
    assert s.offset_index.max_index_size == s.time_index.max_index_size == 10 * 1024 * 1024
    assert s.txn_index.start_offset == 40
    s.close()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert LogSegment.open(tmp_path / "a", 0, preallocate=True).log.path.stat().st_size == 0, "no size: nothing"
    assert LogSegment.open(tmp_path / "b", 0, init_file_size=4096).log.path.stat().st_size == 0, "not asked"


def test_the_closing_entry_takes_the_time_index_slot_kept_for_it(tmp_path: Path) -> None:
    size = len(bytes(batch(40, b"v")))
    s = LogSegment.open(tmp_path, 40, index_interval_bytes=size, max_index_size=36)  # 3 time slots, 1 kept
    for off in range(40, 46):
        s.append(off, batch(off, b"v", ts=T0 + off))
    assert s.time_index.is_full and s.time_index.entries == 2 and s.max_timestamp_so_far == T0 + 45
    s.close()
    again = LogSegment.open(tmp_path, 40, file_already_exists=True, max_index_size=36)
    assert again.time_index.last_entry == TimestampOffset(T0 + 45, 45) and again.time_index.entries == 3


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and r.name == "local.segment"]


def test_recovery_warns_naming_the_file_the_position_and_what_was_wrong(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = bytes(batch(40, b"a", b"b"))
    codec = bytearray(bytes(MemoryRecords.build([SimpleRecord(T0, None, b"z" * 50)], "zstd", base_offset=42)))
    codec[22] = (codec[22] & ~0x07) | 5
    codec[17:21] = crc32c_of(bytes(codec[21:]))
    magic = bytearray(bytes(batch(42, b"m")))
    magic[16] = 7  # magic 7 (outside the CRC, which starts at the attributes)
    backwards = bytes(batch(41, b"o"))
    crc = bytearray(bytes(batch(42, b"c")))
    crc[-1] ^= 0xFF
    size = b"\x00" * 8 + (5).to_bytes(4, "big") + b"\x00" * 20
    cases = {
        "codec": (bytes(codec), "names an unknown compression codec 5"),
        "magic": (bytes(magic), "has unknown magic 7"),  # refused by the walk, before the segment looks
        "backwards": (backwards, "has offsets [41, 41], not above the previous batch's last offset 41"),
        "crc": (bytes(crc), "stored crc"),
        "size": (size, "position"),
    }
    for name, (bad, why) in cases.items():
        s = _recovered_copy(tmp_path, name, first + bad)
        caplog.clear()
        with caplog.at_level("WARNING", logger="local.segment"):
            assert s.recover() == len(bad)
        found, truncating = _warnings(caplog)
        prefix = f"found invalid batch in {s.log.path} at position {len(first)}: "
        assert found.startswith(prefix) and why in found[len(prefix):], (name, found)
        if name in ("codec", "magic", "backwards", "size"):
            assert str(s.log.path) in found[len(prefix):], "the error itself names the file"
        assert truncating == (f"truncating {s.log.path} to {len(first)} bytes: {len(bad)} invalid bytes from "
                              f"position {len(first)}")
    caplog.clear()
    with caplog.at_level("WARNING", logger="local.segment"):
        assert _recovered_copy(tmp_path, "clean", first).recover() == 0
    assert _warnings(caplog) == [], "a clean recovery warns of nothing"


def crc32c_of(data: bytes) -> bytes:
    import crc32c

    return crc32c.crc32c(data).to_bytes(4, "big")


def test_recovery_refuses_offsets_below_the_base_offset_or_before_any_valid_offset(tmp_path: Path) -> None:
    below = _recovered_copy(tmp_path, "below", bytes(batch(10, b"a")), base=40)
    assert below.recover() == below.size + len(bytes(batch(10, b"a"))) and below.size == 0
    minus_one = bytes(MemoryRecords.build([SimpleRecord(T0, None, b"a"), SimpleRecord(T0, None, b"b")], base_offset=-1))
    negative = _recovered_copy(tmp_path, "negative", minus_one, base=0)
    assert negative.recover() == len(minus_one) and negative.size == 0


def test_recovery_of_a_first_batch_without_timestamps_keeps_the_base_offset(tmp_path: Path) -> None:
    two = bytes(MemoryRecords.build([SimpleRecord(-1, None, b"a"), SimpleRecord(-1, None, b"b")], base_offset=40))
    s = _recovered_copy(tmp_path, "none", two + bytes(batch(42, b"c", ts=-1)))
    assert s.recover() == 0
    assert (s.max_timestamp_so_far, s.offset_of_max_timestamp_so_far) == (-1, 40)


def test_recovery_counts_bytes_since_the_last_index_entry_from_the_start(tmp_path: Path) -> None:
    s = seg(tmp_path, interval=10**6)
    fill(s, 40, 3)
    assert s.recover() == 0
    assert s.offset_index.entries == 0 and s.bytes_since_last_index_entry == s.size
    one = len(bytes(batch(40, b"x" * 10)))
    (tmp_path / "exact").mkdir()
    exact = seg(tmp_path / "exact", interval=one)
    fill(exact, 40, 3)
    assert exact.recover() == 0
    # 2 * one > one: the third batch is indexed, at its position; 1 byte less would not be
    assert [(e.offset, e.position) for e in (exact.offset_index.entry(i) for i in range(exact.offset_index.entries))] == [
        (42, 2 * one)]


def test_recovery_assigns_no_epoch_to_batches_without_one_and_feeds_no_map_end_offset_for_legacy_only(
    tmp_path: Path,
) -> None:
    from local.records.legacy import build_legacy_message

    no_epoch = _recovered_copy(tmp_path, "none", bytes(batch(40, b"a", epoch=-1)) + bytes(batch(41, b"b", epoch=-1)))
    epochs = RecordingEpochs(None)
    assert no_epoch.recover(leader_epoch_cache=epochs) == 0
    assert epochs.assigned == []
    legacy = _recovered_copy(tmp_path, "legacy", build_legacy_message(40, None, b"x", magic=1, timestamp=T0))
    state = RecordingProducerState()
    assert legacy.recover(producer_state_manager=state) == 0 and legacy.read_next_offset() == 41
    assert state.map_end_offsets == [] and state.applied == []


def test_recovery_reads_the_log_in_blocks_of_recovery_read_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = seg(tmp_path)
    fill(s, 40, 20)
    reads: list[int] = []
    read_into = s.log.read_into

    def recording(position: int, buffer: memoryview) -> int:
        reads.append(len(buffer))
        return read_into(position, buffer)

    monkeypatch.setattr(s.log, "read_into", recording)
    monkeypatch.setattr("local.segment.RECOVERY_READ_BYTES", 300)
    assert s.recover() == 0 and s.read_next_offset() == 60
    assert len(reads) > 1 and max(reads) <= 300


def test_recovery_writes_the_closing_time_entry_into_the_slot_kept_for_it(tmp_path: Path) -> None:
    size = len(bytes(batch(40, b"v")))
    s = LogSegment.open(tmp_path, 40, index_interval_bytes=size, max_index_size=36)  # 3 time slots, 1 kept
    for off in range(40, 46):
        s.append(off, batch(off, b"v", ts=T0 + off))
    assert s.recover() == 0
    assert s.time_index.entries == 3 and s.time_index.last_entry == TimestampOffset(T0 + 45, 45)
    assert (s.max_timestamp_so_far, s.offset_of_max_timestamp_so_far) == (T0 + 45, 45)


def test_read_bounds_and_the_incomplete_first_batch(tmp_path: Path) -> None:
    s = seg(tmp_path)
    fill(s, 40, 4)
    positions = [s.translate_offset(off).position for off in range(40, 44)]  # type: ignore[union-attr]
    first_size = positions[1]
    bounded = s.read(41, 10_000, max_position=positions[3])
    assert bounded is not None and [b.base_offset for b in bounded.records.batches()] == [41, 42]
    before = s.read(42, 10_000, max_position=positions[2])
    assert before is not None and before.records.size_in_bytes == 0, "max_position at the start: nothing"
    empty = s.read(41, 0)
    assert empty is not None and empty.fetch_offset_metadata == (41, 40, positions[1])
    assert s.read(40, first_size - 1).first_entry_incomplete  # type: ignore[union-attr]
    assert not s.read(40, first_size).first_entry_incomplete  # type: ignore[union-attr]
    assert not s.read(40, 10_000).first_entry_incomplete  # type: ignore[union-attr]


def test_read_next_offset_does_not_check_crcs(tmp_path: Path) -> None:
    s = seg(tmp_path)
    fill(s, 40, 3)
    last = s.translate_offset(42)
    assert last is not None
    os.pwrite(s.log.fd, b"\xff", s.size - 1)  # the last batch's CRC no longer matches
    assert s.read_next_offset() == 43, "as Kafka's readNextOffset: batch headers only"
    second = s.translate_offset(41)
    assert second is not None
    os.pwrite(s.log.fd, b"\xff", second.position - 1)  # and the first batch's
    s.close()
    again = seg(tmp_path, file_already_exists=True)
    assert again.time_waited_for_roll(now=0, message_timestamp=T0 + 100) == 60, "the first timestamp, unchecked"


def test_truncate_to_resets_the_index_interval_drops_aborted_txns_and_past_the_end_is_a_no_op(tmp_path: Path) -> None:
    s = seg(tmp_path, interval=10**6)
    fill(s, 40, 5)
    s.update_txn_index(CompletedTxn(7, 40, 41, is_aborted=True), 40)
    s.update_txn_index(CompletedTxn(8, 42, 43, is_aborted=True), 40)
    size = s.size
    assert s.truncate_to(45) == 0 and s.size == size, "past the end: nothing to cut"
    assert s.truncate_to(43) > 0
    assert s.bytes_since_last_index_entry == 0
    assert [t.producer_id for t in s.txn_index.all_aborted_txns()] == [7]


def test_an_index_point_whose_max_timestamp_did_not_grow_leaves_a_full_time_index_alone(tmp_path: Path) -> None:
    """``maybe_append`` checks fullness before it skips an equal timestamp: the segment must not call it then."""
    size = len(bytes(batch(40, b"v")))
    s = LogSegment.open(tmp_path, 40, index_interval_bytes=size, max_index_size=36)  # 3 time slots, 1 kept
    for off in range(40, 47):  # index points at 42, 44 and 46; the max timestamp stops growing at 44
        s.append(off, batch(off, b"v", ts=T0 + min(off, 44)))
    offsets = [(e.offset, e.position) for e in (s.offset_index.entry(i) for i in range(s.offset_index.entries))]
    assert offsets == [(42, 2 * size), (44, 4 * size), (46, 6 * size)]
    assert s.time_index.is_full and s.time_index.last_entry == TimestampOffset(T0 + 44, 44)
    assert s.recover() == 0, "nor does recovery collect an entry for it"
    assert s.time_index.entries == 2 and s.time_index.last_entry == TimestampOffset(T0 + 44, 44)
    assert [(e.offset, e.position) for e in (s.offset_index.entry(i) for i in range(s.offset_index.entries))] == offsets


def test_a_rolled_segments_indexes_hold_no_file_descriptor(tmp_path: Path) -> None:
    """CPython's mmap kept a duplicate descriptor for each mapping's life (before 3.13): every rolled segment held
    three (its log and two mapped indexes), and 500 partitions rolling every 15 s took the data dir offline with
    EMFILE within minutes (a helper's run). Only the active segment's indexes are mapped now; the closed ones are
    read, written again (a truncation into them) and flushed as before."""
    from local import LogConfig, LogManager
    from local.records import MemoryRecords, SimpleRecord
    from tests.logutil import held_files

    with LogManager(LogConfig.from_properties({"log.dirs": str(tmp_path / "data"), "log.index.interval.bytes": "1"}),
                    start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0)
        for n in range(40):
            log.append(MemoryRecords.build([SimpleRecord(1000 + 2 * n, b"k", b"v%d" % (2 * n)),
                                            SimpleRecord(1001 + 2 * n, b"k", b"v%d" % (2 * n + 1))]))
            log.roll()
        log.flush()
        held = held_files(lambda t: t.startswith(str(tmp_path)) and t.endswith((".index", ".timeindex")))
        assert len(held) <= 2 and all(f"{log.active_segment.base_offset:020d}" in h for h in held), held
        assert log.read(31, 100).records.batches()  # (an old segment's index, read)
        found = log.offset_for_timestamp(1031)  # (an old segment's time index)
        assert found is not None and found.offset == 31
        log.truncate_to(31)  # into a closed segment: its indexes are written again
        log.append(MemoryRecords.build([SimpleRecord(b"k", b"after")]))
        assert log.log_end_offset == 32
        assert [r.value for b in log.read(31, 1000).records.batches() for r in b.records()] == [b"after"]
    with LogManager(LogConfig.from_properties({"log.dirs": str(tmp_path / "data")}), start_scheduler=False) as manager:
        log = manager.get_log("t", 0)
        assert log is not None and log.log_end_offset == 32
        assert [r.value for b in log.read(20, 1000).records.batches() for r in b.records()][:2] == [b"v20", b"v21"]
