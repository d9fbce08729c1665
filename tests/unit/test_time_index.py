"""TimeIndex: Kafka's TimeIndexTest cases, the roll slot, crash leftovers and the golden Kafka files."""

from __future__ import annotations

import bisect
import random
import struct
from pathlib import Path

import pytest

from local.errors import (
    CorruptIndexError,
    IndexClosedError,
    IndexFullError,
    IndexOffsetOverflowError,
    InvalidIndexTimestampError,
    InvalidOffsetError,
    ReadOnlyIndexError,
)
from local.index import TIME_ENTRY_SIZE, WARM_SECTION_BYTES, TimeIndex, TimestampOffset
from tests.logutil import serve_a_stale_search_once

MAX_ENTRIES = 30
BASE_OFFSET = 45


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "00000000000000000045.timeindex"


@pytest.fixture
def idx(path: Path) -> TimeIndex:
    return TimeIndex(path, BASE_OFFSET, MAX_ENTRIES * 12)


def append_entries(idx: TimeIndex, count: int) -> None:
    for i in range(1, count + 1):
        idx.maybe_append(i * 10, i * 10 + BASE_OFFSET)


# --- Kafka TimeIndexTest -----------------------------------------------------------------------------


def test_lookup(idx: TimeIndex) -> None:
    assert idx.lookup(100) == TimestampOffset(-1, BASE_OFFSET), "empty time index"
    append_entries(idx, MAX_ENTRIES - 1)
    assert idx.lookup(9) == TimestampOffset(-1, BASE_OFFSET), "below the earliest entry"
    assert idx.lookup(25) == TimestampOffset(20, 65), "between two entries"
    assert idx.lookup(30) == TimestampOffset(30, 75), "equal to an entry"
    assert idx.lookup(10**15) == TimestampOffset(290, 335)


def test_entry(idx: TimeIndex) -> None:
    append_entries(idx, MAX_ENTRIES - 1)
    assert idx.entry(0) == TimestampOffset(10, 55)
    assert idx.entry(1) == TimestampOffset(20, 65)
    assert idx.entry(2) == TimestampOffset(30, 75)
    assert idx.entry(3) == TimestampOffset(40, 85)


def test_entry_overflow(idx: TimeIndex) -> None:
    with pytest.raises(IndexError):
        idx.entry(0)


def test_truncate(idx: TimeIndex) -> None:
    append_entries(idx, MAX_ENTRIES - 1)
    idx.truncate()
    assert idx.entries == 0
    assert idx.last_entry == TimestampOffset(-1, BASE_OFFSET)
    append_entries(idx, MAX_ENTRIES - 1)
    idx.truncate_to(10 + BASE_OFFSET)
    assert idx.entries == 0


def test_truncate_to_keeps_entries_below_the_offset(idx: TimeIndex) -> None:
    append_entries(idx, 5)  # offsets 55 65 75 85 95
    idx.truncate_to(96)
    assert idx.entries == 5, "past the end: unchanged"
    idx.truncate_to(95)
    assert idx.entries == 4 and idx.last_entry == TimestampOffset(40, 85), "exact offset dropped"
    idx.truncate_to(70)
    assert idx.entries == 2 and idx.last_entry == TimestampOffset(20, 65), "between entries"
    idx.maybe_append(25, 70)
    assert idx.lookup(1000) == TimestampOffset(25, 70), "appends continue after truncation"


def test_append(idx: TimeIndex) -> None:
    append_entries(idx, MAX_ENTRIES - 1)
    with pytest.raises(IndexFullError):
        idx.maybe_append(10000, 1000)
    with pytest.raises(InvalidOffsetError) as info:
        idx.maybe_append(10000, (MAX_ENTRIES - 2) * 10, True)
    assert info.value.context["offset"] == (MAX_ENTRIES - 2) * 10
    idx.maybe_append(10000, 1000, True)
    assert idx.entries == MAX_ENTRIES and idx.last_entry == TimestampOffset(10000, 1000)
    with pytest.raises(IndexFullError):  # the roll slot is used: the file has no room left
        idx.maybe_append(10001, 1001, True)


def test_timestamp_going_backwards_is_refused(idx: TimeIndex) -> None:
    idx.maybe_append(100, 50)
    with pytest.raises(InvalidIndexTimestampError) as info:
        idx.maybe_append(99, 60)
    assert isinstance(info.value, InvalidOffsetError)
    assert info.value.context["timestamp"] == 99 and info.value.context["last_timestamp"] == 100
    assert idx.entries == 1


def test_equal_timestamp_is_a_no_op(idx: TimeIndex) -> None:
    idx.maybe_append(100, 50)
    idx.maybe_append(100, 50)  # the roll entry appended again on close
    idx.maybe_append(100, 60)
    assert idx.entries == 1 and idx.last_entry == TimestampOffset(100, 50)
    idx.maybe_append(101, 60)
    assert idx.entries == 2


def test_first_entry_needs_a_timestamp_above_no_timestamp(idx: TimeIndex) -> None:
    idx.maybe_append(-1, 50)  # message format v0: no timestamps, no entries
    assert idx.entries == 0
    idx.maybe_append(0, 50)
    assert idx.entries == 1


def test_relative_offset_overflow(idx: TimeIndex) -> None:
    with pytest.raises(IndexOffsetOverflowError):
        idx.maybe_append(10, BASE_OFFSET + 2**31)
    with pytest.raises(IndexOffsetOverflowError):
        idx.maybe_append(10, BASE_OFFSET - 1)


def test_sanity_check(path: Path, idx: TimeIndex) -> None:
    idx.sanity_check()
    append_entries(idx, 5)
    first = idx.entry(0)
    idx.sanity_check()
    idx.trim_to_valid_size()
    idx.close()
    good = path.read_bytes()
    layout = struct.Struct(">qi")

    def reopened_with_last_entry(timestamp: int, relative: int) -> TimeIndex:
        path.write_bytes(good[:-12] + layout.pack(timestamp, relative))
        return TimeIndex(path, BASE_OFFSET, MAX_ENTRIES * 12)

    corrupt_offset = reopened_with_last_entry(50, -1)
    with pytest.raises(CorruptIndexError, match="last offset 44 is below the base offset 45"):
        corrupt_offset.sanity_check()
    corrupt_offset.close_handler()

    corrupt_timestamp = reopened_with_last_entry(first.timestamp - 1, 50)
    with pytest.raises(CorruptIndexError, match="last timestamp 9 is below the first timestamp 10"):
        corrupt_timestamp.sanity_check()
    corrupt_timestamp.close_handler()

    path.write_bytes(good[:-1])
    corrupt_length = TimeIndex(path, BASE_OFFSET, MAX_ENTRIES * 12)
    with pytest.raises(CorruptIndexError, match="not a multiple of 12"):
        corrupt_length.sanity_check()
    corrupt_length.close_handler()

    path.write_bytes(good)
    healthy = TimeIndex(path, BASE_OFFSET, MAX_ENTRIES * 12)
    healthy.sanity_check()
    healthy.close()


def test_sanity_check_finds_a_middle_entry_out_of_order(path: Path) -> None:
    layout = struct.Struct(">qi")
    path.write_bytes(b"".join(layout.pack(ts, rel) for ts, rel in [(10, 1), (30, 2), (20, 3), (40, 4)]))
    index = TimeIndex(path, 0)
    with pytest.raises(CorruptIndexError) as info:
        index.sanity_check()
    assert info.value.context["entry"] == 2 and info.value.context["path"] == path
    index.close_handler()


def test_unclosed_index_after_crash_fails_sanity_check(path: Path, idx: TimeIndex) -> None:
    append_entries(idx, 3)
    idx.flush()
    idx.close_handler()  # what a crash leaves: the preallocated zeros
    reopened = TimeIndex(path, BASE_OFFSET)
    assert reopened.entries == MAX_ENTRIES
    assert reopened.last_entry == TimestampOffset(0, BASE_OFFSET)
    with pytest.raises(CorruptIndexError):
        reopened.sanity_check()
    reopened.close_handler()


def test_is_full(idx: TimeIndex) -> None:
    assert not idx.is_full
    append_entries(idx, MAX_ENTRIES - 2)
    assert not idx.is_full
    idx.maybe_append((MAX_ENTRIES - 1) * 10, (MAX_ENTRIES - 1) * 10 + BASE_OFFSET)
    assert idx.is_full, "one slot is kept for the roll entry"
    assert idx.entries == idx.max_entries - 1


def test_last_entry(idx: TimeIndex) -> None:
    assert idx.last_entry == TimestampOffset(-1, BASE_OFFSET)
    idx.maybe_append(1, 1 + BASE_OFFSET)
    assert idx.last_entry == TimestampOffset(1, BASE_OFFSET + 1)


def test_resize(idx: TimeIndex) -> None:
    assert idx.resize(MAX_ENTRIES * idx.entry_size) is False
    assert idx.resize(MAX_ENTRIES // 2 * idx.entry_size) is True
    assert idx.resize(MAX_ENTRIES * 2 * idx.entry_size) is True
    assert idx.max_entries == MAX_ENTRIES * 2


def test_entry_size(idx: TimeIndex) -> None:
    assert idx.entry_size == TIME_ENTRY_SIZE == 12


def test_parse_entry_reads_the_file(path: Path, idx: TimeIndex) -> None:
    idx.maybe_append(1, 1 + BASE_OFFSET)
    idx.flush()
    assert path.read_bytes()[:12] == struct.pack(">qi", 1, 1)
    assert idx.entry(0) == TimestampOffset(1, BASE_OFFSET + 1)


# --- life cycle --------------------------------------------------------------------------------------


def test_appends_after_close_say_closed_not_full(path: Path, idx: TimeIndex) -> None:
    idx.maybe_append(100, BASE_OFFSET + 1)
    idx.close()
    with pytest.raises(IndexClosedError):
        idx.maybe_append(200, BASE_OFFSET + 2)
    with pytest.raises(IndexClosedError):
        idx.append_many([200], [BASE_OFFSET + 2])


@pytest.mark.parametrize("timestamp, offset", [(100.5, 46), ("100", 46), (100, 46.0), (None, 46), (100, False)])
def test_an_entry_of_another_type_is_refused_naming_it(
    path: Path, idx: TimeIndex, timestamp: object, offset: object
) -> None:
    with pytest.raises(TypeError, match=rf"(timestamp|offset) must be an int.*{path.name}"):
        idx.maybe_append(timestamp, offset)  # type: ignore[arg-type]
    assert idx.entries == 0


def test_close_trims_and_reopen_restores_last_entry(path: Path, idx: TimeIndex) -> None:
    append_entries(idx, 4)
    idx.close()
    assert path.stat().st_size == 4 * 12
    with pytest.raises(IndexClosedError):
        idx.lookup(30)
    reopened = TimeIndex(path, BASE_OFFSET, MAX_ENTRIES * 12)
    assert reopened.last_entry == TimestampOffset(40, 85) and reopened.is_full
    reopened.resize(MAX_ENTRIES * 12)
    reopened.maybe_append(40, 90)
    assert reopened.entries == 4, "equal timestamp after reopen is still a no-op"
    reopened.maybe_append(50, 95)
    assert reopened.lookup(55) == TimestampOffset(50, 95)
    reopened.close()


def test_resize_reloads_last_entry_and_read_only_refuses(path: Path, idx: TimeIndex) -> None:
    append_entries(idx, 2)
    idx.close()
    read_only = TimeIndex(path, BASE_OFFSET, writable=False)
    assert read_only.last_entry == TimestampOffset(20, 65)
    with pytest.raises(ReadOnlyIndexError):
        read_only.resize(360)
    read_only.close()


def test_lookups_across_warm_and_cold_sections(path: Path) -> None:
    count = 2 * WARM_SECTION_BYTES // 12 + 5
    rng = random.Random(11)
    timestamps, offsets = [], []
    ts, offset = 1_700_000_000_000, 0
    index = TimeIndex(path, 0, (count + 1) * 12)
    for _ in range(count):
        ts += rng.randint(1, 50)
        offset += rng.randint(0, 3)
        index.maybe_append(ts, offset)
        timestamps.append(ts)
        offsets.append(offset)
    for target in [timestamps[0] - 1, *timestamps[::97], *(rng.randint(timestamps[0] - 5, ts + 5) for _ in range(1000))]:
        slot = bisect.bisect_right(timestamps, target) - 1
        expected = TimestampOffset(-1, 0) if slot < 0 else TimestampOffset(timestamps[slot], offsets[slot])
        assert index.lookup(target) == expected
    index.sanity_check()
    index.close()


# --- golden Kafka 4.0 files --------------------------------------------------------------------------


def test_golden_cluster_metadata_time_index(golden_dir: Path) -> None:
    path = golden_dir / "__cluster_metadata-0" / "00000000000000000000.timeindex"
    index = TimeIndex(path, 0, writable=False)
    expected = [
        TimestampOffset(0x191B23A1AB8, 56),
        TimestampOffset(0x191B23A4299, 80),
        TimestampOffset(0x191B23B04F8, 115),
    ]
    assert [index.entry(i) for i in range(index.entries)] == expected
    assert index.last_entry == expected[-1]
    assert index.lookup(0x191B23A1AB8 - 1) == TimestampOffset(-1, 0)
    assert index.lookup(0x191B23A4299 + 1) == expected[1]
    assert index.lookup(2**62) == expected[2]
    index.sanity_check()
    index.close()


def test_golden_single_entry_time_index(golden_dir: Path) -> None:
    index = TimeIndex(golden_dir / "foo-0" / "00000000000000000000.timeindex", 0, writable=False)
    assert index.entries == 1
    assert index.last_entry == TimestampOffset(0x191B23A29CC, 2)
    assert index.lookup(0x191B23A29CC) == TimestampOffset(0x191B23A29CC, 2)
    index.sanity_check()
    index.close()


def test_append_many_writes_what_maybe_append_writes(tmp_path: Path) -> None:
    """Bulk when strictly increasing; otherwise one by one, with maybe_append's no-op for a repeated timestamp."""
    pairs = [(10, 50), (20, 55), (20, 56), (30, 60), (40, 70)]
    (tmp_path / "bulk").mkdir()
    bulk = TimeIndex(tmp_path / "bulk" / "00000000000000000045.timeindex", BASE_OFFSET, MAX_ENTRIES * 12)
    single = TimeIndex(tmp_path / "00000000000000000045.timeindex", BASE_OFFSET, MAX_ENTRIES * 12)
    for index in (bulk, single):
        index.maybe_append(5, 46)
    bulk.append_many([t for t, _ in pairs], [o for _, o in pairs])
    for timestamp, offset in pairs:
        single.maybe_append(timestamp, offset)
    strictly = [(50, 80), (60, 81), (70, 90)]
    bulk.append_many([t for t, _ in strictly], [o for _, o in strictly])
    for timestamp, offset in strictly:
        single.maybe_append(timestamp, offset)
    assert bulk.entries == single.entries == 8
    assert bulk.last_entry == single.last_entry == TimestampOffset(70, 90)
    for target in range(0, 80):
        assert bulk.lookup(target) == single.lookup(target)
    assert bulk.path.read_bytes() == single.path.read_bytes()
    bulk.close()
    single.close()


# --- what mutation testing found unchecked (TESTING.md) -------------------------------------------------


def test_append_many_of_unequal_lengths_is_refused_after_the_common_prefix(idx: TimeIndex) -> None:
    with pytest.raises(ValueError, match="zip"):
        idx.append_many([10, 20, 30], [50, 55])
    assert [idx.entry(i) for i in range(idx.entries)] == [TimestampOffset(10, 50), TimestampOffset(20, 55)]


def test_append_many_never_fills_the_roll_slot(idx: TimeIndex) -> None:
    """A run longer than the room left keeps its prefix up to the kept-back last slot, then IndexFullError."""
    idx.maybe_append(1, BASE_OFFSET)
    run = range(1, MAX_ENTRIES + 1)
    with pytest.raises(IndexFullError):
        idx.append_many([10 * i for i in run], [BASE_OFFSET + i for i in run])
    assert idx.entries == MAX_ENTRIES - 1 and idx.is_full
    assert idx.last_entry == TimestampOffset(10 * (MAX_ENTRIES - 2), BASE_OFFSET + MAX_ENTRIES - 2)


def test_append_many_after_an_entry_skips_a_repeated_timestamp_and_refuses_an_older_offset(idx: TimeIndex) -> None:
    idx.maybe_append(100, 50)
    idx.append_many([100, 200], [51, 60])  # the first pair repeats the last timestamp: a no-op
    assert [idx.entry(i) for i in range(idx.entries)] == [TimestampOffset(100, 50), TimestampOffset(200, 60)]
    for offsets in ([55], [55, 70]):
        with pytest.raises(InvalidOffsetError) as info:
            idx.append_many([300 + 10 * i for i in range(len(offsets))], offsets)
        assert info.value.context["offset"] == 55 and info.value.context["last_offset"] == 60
        assert idx.entries == 2 and idx.last_entry == TimestampOffset(200, 60)


def test_append_many_writes_a_valid_run_in_bulk_up_to_every_limit(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that fits is one bulk write, never pair by pair (recovery rebuilds whole indexes this way): at
    relative offsets 0 and 2^31-1, timestamps 1 apart, equal offsets, and a run that fills every slot but the
    roll slot; also after an entry, from an equal offset."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"maybe_append{args} called: the bulk path was not taken")

    index = TimeIndex(path, BASE_OFFSET, 5 * 12)
    monkeypatch.setattr(index, "maybe_append", refuse)
    timestamps = [7, 8, 9, 10]
    offsets = [BASE_OFFSET, BASE_OFFSET, BASE_OFFSET + 1, BASE_OFFSET + 2**31 - 1]
    index.append_many(timestamps, offsets)
    assert [index.entry(i) for i in range(4)] == [TimestampOffset(t, o) for t, o in zip(timestamps, offsets, strict=True)]
    assert index.is_full and index.last_entry == TimestampOffset(10, BASE_OFFSET + 2**31 - 1)
    index.close()
    second = path.with_name("00000000000000000046.timeindex")
    index = TimeIndex(second, BASE_OFFSET, 10 * 12)
    index.maybe_append(5, BASE_OFFSET + 3)
    monkeypatch.setattr(index, "maybe_append", refuse)
    index.append_many([6, 7], [BASE_OFFSET + 3, BASE_OFFSET + 4])
    assert index.entries == 3 and index.last_entry == TimestampOffset(7, BASE_OFFSET + 4)
    index.close()


def test_timestamps_past_2_to_the_53_are_exact_keys(path: Path) -> None:
    """Timestamps are int64 (Kafka's longs): keys of a reopened index stay exact past 2^53."""
    big = 2**60
    with TimeIndex(path, BASE_OFFSET, 10 * 12) as index:
        index.maybe_append(big + 1, BASE_OFFSET + 1)
        index.maybe_append(big + 2, BASE_OFFSET + 2)
    reopened = TimeIndex(path, BASE_OFFSET, writable=False)
    assert reopened.lookup(big + 1) == TimestampOffset(big + 1, BASE_OFFSET + 1)
    assert reopened.lookup(big + 2) == TimestampOffset(big + 2, BASE_OFFSET + 2)
    assert reopened.lookup(big) == TimestampOffset(-1, BASE_OFFSET)
    reopened.close()


def test_sanity_check_errors_carry_their_context(path: Path) -> None:
    layout = struct.Struct(">qi")

    def corrupt(entries: list[tuple[int, int]], tail: bytes = b"") -> CorruptIndexError:
        path.write_bytes(b"".join(layout.pack(ts, rel) for ts, rel in entries) + tail)
        index = TimeIndex(path, BASE_OFFSET)
        with pytest.raises(CorruptIndexError) as info:
            index.sanity_check()
        index.close_handler()
        return info.value

    error = corrupt([(10, 1), (20, 2), (5, 3)])
    assert str(error) == (
        f"corrupt time index {path}: non-zero size but the last timestamp 5 is below the first timestamp 10"
    )
    assert error.context == {"path": path, "timestamp": 5}
    error = corrupt([(10, 1), (20, -2)])
    assert error.context == {"path": path, "offset": BASE_OFFSET - 2, "base_offset": BASE_OFFSET}
    error = corrupt([(10, 1), (20, 2)], tail=b"\x00" * 5)
    assert str(error) == f"time index file {path} is corrupt: found 29 bytes, which is not a multiple of 12"
    assert error.context == {"path": path, "length": 29}
    error = corrupt([(10, 1), (30, 3), (20, 2), (40, 4)])
    assert str(error) == (
        f"corrupt time index {path}: entry 2 (20 -> {BASE_OFFSET + 2}) has a negative offset, a timestamp not "
        "above the previous one or an offset below it"
    )
    assert error.context == {"path": path, "entry": 2, "timestamp": 20, "offset": BASE_OFFSET + 2}


def test_the_roll_entry_rules_for_timestamps_0_and_negative(path: Path, idx: TimeIndex) -> None:
    idx.maybe_append(0, BASE_OFFSET + 1, skip_full_check=True)  # 0 is a timestamp: recorded
    assert idx.last_entry == TimestampOffset(0, BASE_OFFSET + 1) and idx.entries == 1
    with pytest.raises(InvalidIndexTimestampError):
        idx.maybe_append(-1, BASE_OFFSET + 2, skip_full_check=True)  # only an EMPTY index skips a -1
    assert idx.entries == 1


def test_maybe_append_errors_carry_their_context(path: Path) -> None:
    index = TimeIndex(path, BASE_OFFSET, 3 * 12)
    index.maybe_append(10, 50)
    with pytest.raises(InvalidOffsetError) as info:
        index.maybe_append(20, 49)
    assert str(info.value) == (
        f"attempt to append offset 49 to slot 1 of time index {path}, below the last offset appended (50)"
    )
    assert info.value.context == {"offset": 49, "last_offset": 50, "path": path}
    with pytest.raises(InvalidIndexTimestampError) as stamp:
        index.maybe_append(9, 51)
    assert str(stamp.value) == (
        f"attempt to append timestamp 9 to slot 1 of time index {path}, below the last timestamp appended (10)"
    )
    assert stamp.value.context == {"timestamp": 9, "offset": 51, "last_timestamp": 10, "path": path}
    index.maybe_append(20, 52)
    with pytest.raises(IndexFullError) as full:
        index.maybe_append(30, 53)
    assert str(full.value) == f"attempt to append to a full time index {path} (2 entries)"
    assert full.value.context == {"timestamp": 30, "offset": 53, "path": path, "entries": 2}
    index.close()


def test_entry_out_of_range_names_the_index_and_its_count(path: Path, idx: TimeIndex) -> None:
    idx.maybe_append(10, 50)
    with pytest.raises(IndexError, match=f"^attempt to fetch entry 1 from time index {path}, which has 1 entries$"):
        idx.entry(1)


@pytest.mark.parametrize(
    ("entries", "bad"),
    [
        ([(10, 1), (10, 2), (30, 3)], 1),  # a repeated timestamp
        ([(10, 1), (20, 5), (30, 3), (40, 6)], 2),  # an offset below the one before, above the first
        ([(10, 0)], None),  # the last entry at the base offset itself
        ([(2**60 + 1, 1), (2**60 + 2, 2)], None),  # int64 timestamps 1 apart past 2^53
    ],
)
def test_sanity_check_compares_each_entry_with_the_one_before_as_int64(
    path: Path, entries: list[tuple[int, int]], bad: int | None
) -> None:
    path.write_bytes(b"".join(struct.pack(">qi", ts, rel) for ts, rel in entries))
    index = TimeIndex(path, BASE_OFFSET)
    if bad is None:
        index.sanity_check()
    else:
        with pytest.raises(CorruptIndexError) as info:
            index.sanity_check()
        assert info.value.context["entry"] == bad
    index.close_handler()


def test_the_roll_entry_repeating_the_last_one_is_a_no_op_on_a_trimmed_index(path: Path, idx: TimeIndex) -> None:
    idx.maybe_append(10, 50)
    idx.trim_to_valid_size()
    assert idx.max_entries == 1
    idx.maybe_append(10, 50, skip_full_check=True)
    assert idx.entries == 1 and idx.last_entry == TimestampOffset(10, 50)


def test_a_lookup_on_a_snapshot_older_than_a_truncation_never_pairs_a_timestamp_with_another_entrys_offset(
        path: Path) -> None:
    """A lock-free lookup searched a key mirror snapshot taken before a truncation, and the writer has since
    rewritten the slot it found: the answer is still an entry that is in the index."""
    index = TimeIndex(path, 0, 1000 * TIME_ENTRY_SIZE)
    for offset in range(1, 101):
        index.maybe_append(1000 + offset * 10, offset)
    stale = index._search
    index.truncate_to(51)
    for offset in range(60, 70):
        index.maybe_append(1000 + offset * 10 + 5, offset)
    serve_a_stale_search_once(index, stale)
    found = index.lookup(1550)  # the old mirror's slot for timestamp 1550 now holds (1645, 64)
    assert found.offset <= 55 and found.timestamp == 1000 + found.offset * 10, found
    assert found == index.lookup(1550) == TimestampOffset(1500, 50)
    index.close()
