"""OffsetIndex: Kafka's OffsetIndexTest / AbstractIndexTest cases, in both entry formats, plus KIP-1333."""

from __future__ import annotations

import bisect
import random
import struct
import threading
from pathlib import Path

import numpy as np
import pytest

from local.errors import (
    CorruptIndexError,
    IndexClosedError,
    IndexFullError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
    LegacyIndexPositionOverflowError,
    ReadOnlyIndexError,
)
from local.index import (
    LARGE_OFFSET_ENTRY_SIZE,
    LEGACY_OFFSET_ENTRY_SIZE,
    WARM_SECTION_BYTES,
    OffsetIndex,
    OffsetPosition,
)
from tests.logutil import serve_a_stale_search_once

BASE_OFFSET = 45
FORMATS = pytest.mark.parametrize("large", [False, True], ids=["8-byte", "12-byte"])


def entry_size(large: bool) -> int:
    return LARGE_OFFSET_ENTRY_SIZE if large else LEGACY_OFFSET_ENTRY_SIZE


def new_index(path: Path, large: bool, base_offset: int = BASE_OFFSET, max_entries: int = 30) -> OffsetIndex:
    return OffsetIndex(path, base_offset, max_entries * entry_size(large), use_large_format=large)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "00000000000000000045.index"


def monotonic_seq(rng: random.Random, base: int, length: int) -> list[int]:
    seq, last = [], base
    for _ in range(length):
        last += rng.randint(1, 15)
        seq.append(last)
    return seq


# --- Kafka OffsetIndexTest ---------------------------------------------------------------------------


@FORMATS
def test_random_lookup(path: Path, large: bool) -> None:
    index = new_index(path, large)
    assert index.lookup(92) == OffsetPosition(BASE_OFFSET, 0), "not present should return position 0"
    rng = random.Random(7)
    offsets = monotonic_seq(rng, BASE_OFFSET + 1, index.max_entries)
    positions = monotonic_seq(rng, 0, index.max_entries)
    for offset, position in zip(offsets, positions):
        index.append(offset, position)
    for offset, position in zip(offsets, positions):
        assert index.lookup(offset) == OffsetPosition(offset, position)
    for target in range(BASE_OFFSET - 5, offsets[-1] + 5):
        slot = bisect.bisect_right(offsets, target) - 1
        expected = OffsetPosition(BASE_OFFSET, 0) if slot < 0 else OffsetPosition(offsets[slot], positions[slot])
        assert index.lookup(target) == expected, target


@FORMATS
def test_lookup_extreme_cases(path: Path, large: bool) -> None:
    index = new_index(path, large)
    assert index.lookup(BASE_OFFSET) == OffsetPosition(BASE_OFFSET, 0), "lookup on empty file"
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i + 1, i)
    assert index.lookup(BASE_OFFSET) == OffsetPosition(BASE_OFFSET, 0)
    last = BASE_OFFSET + index.max_entries
    assert index.lookup(last) == OffsetPosition(last, index.max_entries - 1)
    assert index.lookup(2**62) == OffsetPosition(last, index.max_entries - 1)
    assert index.lookup(-(2**62)) == OffsetPosition(BASE_OFFSET, 0)


@FORMATS
def test_entry(path: Path, large: bool) -> None:
    index = new_index(path, large)
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i, i)
    for i in range(index.max_entries):
        assert index.entry(i) == OffsetPosition(BASE_OFFSET + i, i)


@FORMATS
def test_entry_overflow(path: Path, large: bool) -> None:
    index = new_index(path, large)
    with pytest.raises(IndexError):
        index.entry(0)
    index.append(BASE_OFFSET, 0)
    with pytest.raises(IndexError):
        index.entry(1)
    with pytest.raises(IndexError):
        index.entry(-1)


@FORMATS
def test_append_too_many(path: Path, large: bool) -> None:
    index = new_index(path, large)
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i + 1, i)
    assert index.is_full
    with pytest.raises(IndexFullError) as info:
        index.append(BASE_OFFSET + index.max_entries + 1, 1)
    assert str(path) in str(info.value)
    assert info.value.context["path"] == path


@FORMATS
def test_append_out_of_order(path: Path, large: bool) -> None:
    index = new_index(path, large)
    index.append(51, 0)
    with pytest.raises(InvalidOffsetError) as info:
        index.append(50, 1)
    assert info.value.context["offset"] == 50 and info.value.context["last_offset"] == 51
    with pytest.raises(InvalidOffsetError):
        index.append(51, 1)  # equal is not larger
    assert index.entries == 1


@FORMATS
def test_fetch_upper_bound_offset(path: Path, large: bool) -> None:
    index = new_index(path, large)
    first = OffsetPosition(BASE_OFFSET, 0)
    second = OffsetPosition(BASE_OFFSET + 1, 10)
    third = OffsetPosition(BASE_OFFSET + 2, 23)
    fourth = OffsetPosition(BASE_OFFSET + 3, 37)
    assert index.fetch_upper_bound_offset(first, 5) is None
    for entry in (first, second, third, fourth):
        index.append(entry.offset, entry.position)
    assert index.fetch_upper_bound_offset(first, 5) == second
    assert index.fetch_upper_bound_offset(first, 10) == second
    assert index.fetch_upper_bound_offset(first, 23) == third
    assert index.fetch_upper_bound_offset(first, 22) == third
    assert index.fetch_upper_bound_offset(second, 24) == fourth
    assert index.fetch_upper_bound_offset(fourth, 1) is None
    assert index.fetch_upper_bound_offset(first, 200) is None
    assert index.fetch_upper_bound_offset(second, 200) is None


@FORMATS
def test_reopen(path: Path, large: bool) -> None:
    index = new_index(path, large)
    first, second = OffsetPosition(51, 0), OffsetPosition(52, 1)
    index.append(first.offset, first.position)
    index.append(second.offset, second.position)
    index.close()
    assert path.stat().st_size == 2 * entry_size(large), "close trims to the entries"
    # Reopened without saying the format: the file's own format is detected.
    reopened = OffsetIndex(path, BASE_OFFSET, writable=False)
    assert reopened.is_large_format == large
    assert reopened.lookup(first.offset) == first
    assert reopened.lookup(second.offset) == second
    assert reopened.last_offset == second.offset
    assert reopened.entries == 2
    with pytest.raises(IndexFullError):
        reopened.append(53, 1)
    reopened.close()


@FORMATS
def test_truncate(path: Path, large: bool) -> None:
    with OffsetIndex(path, 0, 10 * entry_size(large), use_large_format=large) as idx:
        idx.truncate()
        for i in range(1, 10):
            idx.append(i, i)

        idx.truncate_to(12)
        assert idx.lookup(10) == OffsetPosition(9, 9), "unchanged by truncate past the end"
        assert idx.last_offset == 9

        idx.append(10, 10)
        idx.truncate_to(10)
        assert idx.lookup(10) == OffsetPosition(9, 9), "unchanged by truncate at the end"
        assert idx.last_offset == 9
        idx.append(10, 10)

        idx.truncate_to(9)
        assert idx.lookup(10) == OffsetPosition(8, 8), "truncate drops the last entry"
        assert idx.last_offset == 8
        idx.append(9, 9)

        idx.truncate_to(5)
        assert idx.lookup(10) == OffsetPosition(4, 4)
        assert idx.last_offset == 4
        idx.append(5, 5)

        idx.truncate()
        assert idx.entries == 0, "full truncation leaves no entries"
        assert idx.last_offset == 0
        idx.append(0, 0)
        assert idx.lookup(0) == OffsetPosition(0, 0)


@FORMATS
def test_truncate_to_between_sparse_entries(path: Path, large: bool) -> None:
    index = new_index(path, large, base_offset=0)
    for offset in (10, 20, 30):
        index.append(offset, offset * 100)
    index.truncate_to(25)  # no entry at 25: everything above the next smaller entry goes
    assert [index.entry(i).offset for i in range(index.entries)] == [10, 20]
    index.truncate_to(5)
    assert index.entries == 0


@FORMATS
def test_force_unmap(path: Path, large: bool) -> None:
    index = OffsetIndex(path, 0, 10 * entry_size(large), use_large_format=large)
    index.close_handler()
    with pytest.raises(IndexClosedError):
        index.lookup(1)
    with pytest.raises(IndexClosedError):
        index.append(1, 1)
    index.close()  # still safe
    assert path.stat().st_size == 10 * entry_size(large), "close_handler does not trim"


@FORMATS
def test_lookup_after_close_fails(path: Path, large: bool) -> None:
    index = new_index(path, large)
    index.append(BASE_OFFSET + 1, 10)
    index.close()
    with pytest.raises(IndexClosedError):
        index.lookup(BASE_OFFSET + 1)
    with pytest.raises(IndexClosedError):
        index.fetch_upper_bound_offset(OffsetPosition(BASE_OFFSET, 0), 1)


@FORMATS
def test_appends_after_close_say_closed_not_full(path: Path, large: bool) -> None:
    index = new_index(path, large)
    index.append(BASE_OFFSET + 1, 10)
    index.close()
    with pytest.raises(IndexClosedError):
        index.append(BASE_OFFSET + 2, 20)
    with pytest.raises(IndexClosedError):
        index.append_many([BASE_OFFSET + 2], [20])


@FORMATS
@pytest.mark.parametrize("offset, position", [(46.5, 10), ("46", 10), (True, 10), (46, 10.0), (46, None)])
def test_an_entry_of_another_type_is_refused_naming_it(
    path: Path, large: bool, offset: object, position: object
) -> None:
    with new_index(path, large) as index:
        with pytest.raises(TypeError, match=rf"(offset|position) must be an int.*{path.name}"):
            index.append(offset, position)  # type: ignore[arg-type]
        assert index.entries == 0
        index.append(BASE_OFFSET + 1, 10)
        assert index.lookup(BASE_OFFSET + 1) == OffsetPosition(BASE_OFFSET + 1, 10)


@pytest.mark.parametrize("base_offset, error", [(-1, ValueError), ("0", TypeError), (0.0, TypeError), (False, TypeError)])
def test_a_base_offset_that_no_segment_has_is_refused(path: Path, base_offset: object, error: type) -> None:
    with pytest.raises(error, match="base_offset"):
        OffsetIndex(path, base_offset, 80)  # type: ignore[arg-type]
    assert not path.exists()


def test_numpy_integers_are_ints(path: Path) -> None:
    with OffsetIndex(path, np.int64(45), 80) as index:
        index.append(np.int64(46), np.int32(7))
        assert index.lookup(46) == OffsetPosition(46, 7)
        assert type(index.base_offset) is int


@FORMATS
def test_sanity_last_offset_equal_to_base_offset(path: Path, large: bool) -> None:
    with OffsetIndex(path, 20, 10 * entry_size(large), use_large_format=large) as index:
        index.append(20, 0)
        index.sanity_check()


# --- AbstractIndex: file life cycle ------------------------------------------------------------------


@FORMATS
def test_new_file_is_preallocated_and_zero_filled(path: Path, large: bool) -> None:
    size = entry_size(large)
    index = OffsetIndex(path, 0, 10 * size + size - 1, use_large_format=large)
    assert path.stat().st_size == 10 * size, "rounded down to the entry size"
    assert path.read_bytes() == bytes(10 * size)
    assert (index.entries, index.max_entries, index.length, index.size_in_bytes) == (0, 10, 10 * size, 0)
    assert index.entry_size == size and index.is_large_format == large
    index.append(3, 7)
    assert index.size_in_bytes == size
    index.close()


def test_max_index_size_below_entry_size_is_refused(path: Path) -> None:
    with pytest.raises(ValueError, match="max index size"):
        OffsetIndex(path, 0, 7)
    assert not path.exists()


@FORMATS
def test_resize(path: Path, large: bool) -> None:
    size = entry_size(large)
    index = OffsetIndex(path, 0, 30 * size, use_large_format=large)
    assert index.resize(30 * size) is False
    assert index.resize(15 * size) is True
    assert (index.max_entries, path.stat().st_size) == (15, 15 * size)
    assert index.resize(60 * size + 1) is True
    assert (index.max_entries, path.stat().st_size) == (60, 60 * size)
    for i in range(3):
        index.append(i, i * 10)
    with pytest.raises(ValueError, match="holds"):
        index.resize(2 * size)
    assert index.resize(3 * size) is True
    assert index.is_full and index.lookup(2) == OffsetPosition(2, 20)
    index.close()


@FORMATS
def test_trim_then_resize_back_keeps_entries_and_appends(path: Path, large: bool) -> None:
    size = entry_size(large)
    index = OffsetIndex(path, 0, 30 * size, use_large_format=large)
    index.append(1, 100)
    index.append(2, 200)
    index.trim_to_valid_size()
    assert path.stat().st_size == 2 * size and index.is_full
    index.resize(30 * size)  # what a segment does when it becomes active again
    index.append(3, 300)
    assert [index.entry(i) for i in range(3)] == [OffsetPosition(1, 100), OffsetPosition(2, 200), OffsetPosition(3, 300)]
    index.close()


@FORMATS
def test_reset(path: Path, large: bool) -> None:
    size = entry_size(large)
    index = OffsetIndex(path, 0, 8 * size, use_large_format=large)
    index.append(1, 1)
    index.trim_to_valid_size()
    index.reset()
    assert (index.entries, index.max_entries, path.stat().st_size) == (0, 8, 8 * size)
    index.close()


@FORMATS
def test_trim_to_empty_and_grow_again(path: Path, large: bool) -> None:
    size = entry_size(large)
    index = OffsetIndex(path, 0, 4 * size, use_large_format=large)
    index.trim_to_valid_size()
    assert path.stat().st_size == 0 and index.max_entries == 0 and index.is_full
    assert index.lookup(5) == OffsetPosition(0, 0)
    index.resize(4 * size)
    index.append(5, 50)
    assert index.lookup(5) == OffsetPosition(5, 50)
    index.close()


@FORMATS
def test_unclosed_index_counts_its_whole_length_and_fails_sanity_check(path: Path, large: bool) -> None:
    """After a crash the preallocated zeros count as entries, and the sanity check sends it to recovery."""
    index = OffsetIndex(path, 0, 10 * entry_size(large), use_large_format=large)
    index.append(5, 100)
    index.append(9, 200)
    index.flush()
    index.close_handler()  # no trim: what a crash leaves
    reopened = OffsetIndex(path, 0, use_large_format=large)
    assert reopened.entries == reopened.max_entries == 10
    with pytest.raises(CorruptIndexError) as info:
        reopened.sanity_check()
    assert info.value.context["entry"] == 2 and info.value.context["path"] == path and str(path) in str(info.value)
    reopened.close_handler()


def test_read_only_index_of_missing_file_is_empty_and_not_created(path: Path) -> None:
    index = OffsetIndex(path, 0, writable=False)
    assert (index.entries, index.length) == (0, 0)
    assert index.lookup(10) == OffsetPosition(0, 0)
    assert not path.exists()
    index.close()
    assert not path.exists()


def test_read_only_index_is_never_resized(path: Path) -> None:
    with OffsetIndex(path, 0, 80) as index:
        index.append(1, 1)
    read_only = OffsetIndex(path, 0, 80, writable=False)
    with pytest.raises(ReadOnlyIndexError):
        read_only.resize(80)
    read_only.close()
    assert path.stat().st_size == 8


def test_existing_empty_file_opens_empty(path: Path) -> None:
    path.touch()
    index = OffsetIndex(path, 0, 80)
    assert (index.entries, index.max_entries) == (0, 0)
    assert path.stat().st_size == 0, "an existing file is never preallocated on open"
    index.resize(80)
    index.append(1, 1)
    index.close()
    assert path.stat().st_size == 8


@FORMATS
def test_delete_and_rename(tmp_path: Path, large: bool) -> None:
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 0, 80, use_large_format=large)
    index.append(1, 1)
    renamed = tmp_path / "0.index.deleted"
    index.rename_to(renamed)
    assert index.path == renamed and renamed.exists() and not path.exists()
    assert index.lookup(1) == OffsetPosition(1, 1)
    assert index.delete_if_exists() is True
    assert not index.path.exists()
    assert index.delete_if_exists() is False


def test_rename_of_missing_file_still_adopts_the_new_path(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", 0, 80)
    index.close()
    (tmp_path / "0.index").unlink()
    with pytest.raises(FileNotFoundError):
        index.rename_to(tmp_path / "1.index")
    assert index.path == tmp_path / "1.index"


def test_relative_offset_and_can_append_offset(path: Path) -> None:
    index = OffsetIndex(path, 100, 80)
    assert index.relative_offset(100) == 0
    assert index.relative_offset(100 + 2**31 - 1) == 2**31 - 1
    assert index.can_append_offset(100 + 2**31 - 1)
    assert not index.can_append_offset(100 + 2**31)
    assert not index.can_append_offset(99)
    with pytest.raises(IndexOffsetOverflowError) as info:
        index.relative_offset(100 + 2**31)
    assert info.value.context["offset"] == 100 + 2**31
    with pytest.raises(IndexOffsetOverflowError):
        index.append(99, 0)
    with pytest.raises(IndexOffsetOverflowError):
        index.append(100 + 2**31, 0)
    index.append(100 + 2**31 - 1, 0)
    assert index.last_offset == 100 + 2**31 - 1
    index.close()


def test_negative_position_is_a_caller_bug(path: Path) -> None:
    with OffsetIndex(path, 0, 80) as index, pytest.raises(ValueError):
        index.append(1, -1)


# --- sanity check ------------------------------------------------------------------------------------


@FORMATS
def test_sanity_check_length_not_a_multiple(path: Path, large: bool) -> None:
    with OffsetIndex(path, 0, 80, use_large_format=large) as index:
        index.append(1, 10)
    with open(path, "ab") as file:
        file.write(b"\x00" * (5 if large else 3))  # 17 or 11 bytes: a multiple of neither 8 nor 12
    reopened = OffsetIndex(path, 0, use_large_format=large)
    assert reopened.entry_size == entry_size(large), "neither multiple: the requested size"
    with pytest.raises(CorruptIndexError, match="not a multiple"):
        reopened.sanity_check()
    reopened.close_handler()


@pytest.mark.parametrize(
    ("entries", "bad_entry"),
    [
        ([(5, 10), (3, 20)], 1),  # offset goes backwards
        ([(5, 10), (5, 20), (9, 30)], 1),  # offset repeats
        ([(5, 10), (6, 9)], 1),  # position goes backwards
        ([(5, -1)], 0),  # negative position
        ([(-3, 0), (2, 5)], 0),  # negative offset
    ],
)
@FORMATS
def test_sanity_check_finds_the_bad_entry(
    path: Path, large: bool, entries: list[tuple[int, int]], bad_entry: int
) -> None:
    layout = struct.Struct(">iq" if large else ">ii")
    while len(entries) * layout.size % 24 == 0:  # keep the length unambiguous: detection is tested elsewhere
        entries = [*entries, (10**6 + len(entries), 10**8 + len(entries))]
    path.write_bytes(b"".join(layout.pack(rel, pos) for rel, pos in entries))
    index = OffsetIndex(path, 1000, use_large_format=large)
    assert index.entry_size == layout.size
    with pytest.raises(CorruptIndexError) as info:
        index.sanity_check()
    assert str(path) in str(info.value) and info.value.context["path"] == path
    assert info.value.context["entry"] == bad_entry
    index.close_handler()


@FORMATS
def test_sanity_check_last_offset_below_base(path: Path, large: bool) -> None:
    path.write_bytes(struct.pack(">iq" if large else ">ii", -1, 5))
    index = OffsetIndex(path, 1000, use_large_format=large)
    with pytest.raises(CorruptIndexError, match="below the base offset 1000") as info:
        index.sanity_check()
    assert info.value.context["offset"] == 999
    index.close_handler()


def test_ambiguous_garbage_is_refused_at_open(path: Path) -> None:
    path.write_bytes(b"\xff" * 48)
    with pytest.raises(CorruptIndexError, match="valid neither"):
        OffsetIndex(path, 0)


# --- KIP-1333: positions past 2 GiB ------------------------------------------------------------------


def test_legacy_index_refuses_position_past_int32_with_upgrade_hint(path: Path) -> None:
    index = OffsetIndex(path, 0, 80)
    index.append(1, 2**31 - 1)  # the largest legacy position is fine
    with pytest.raises(LegacyIndexPositionOverflowError) as info:
        index.append(2, 2**31)
    message = str(info.value)
    assert "tiered features upgrade --release-version 4.4" in message
    assert str(path) in message and "2147483648" in message
    assert info.value.context["position"] == 2**31 and info.value.context["offset"] == 2
    assert index.entries == 1, "nothing written"
    assert index.lookup(2) == OffsetPosition(1, 2**31 - 1), "never a silent cast"
    index.close()


def test_large_index_addresses_positions_past_4_gib(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.index"
    entries = [(1000 + i * 7, i * 1_500_000_000) for i in range(1, 6)]  # up to 7.5 GB
    index = OffsetIndex(path, 1000, 1024, use_large_format=True)
    for offset, position in entries:
        index.append(offset, position)
    assert index.lookup(1000 + 4 * 7 + 3) == OffsetPosition(*entries[3])
    index.close()
    assert path.stat().st_size == 5 * 12  # 60: a multiple of 12 only
    # The reader asks for the legacy format (feature not finalized on its side): detection wins.
    reopened = OffsetIndex(path, 1000, writable=False, use_large_format=False)
    assert reopened.is_large_format
    for offset, position in entries:
        assert reopened.lookup(offset) == OffsetPosition(offset, position)
        assert reopened.lookup(offset + 1) == OffsetPosition(offset, position)
    assert reopened.lookup(999) == OffsetPosition(1000, 0)
    assert reopened.fetch_upper_bound_offset(OffsetPosition(*entries[0]), 2**32) == OffsetPosition(*entries[3])
    reopened.sanity_check()
    reopened.close()


def test_large_index_of_ambiguous_length_is_detected_from_its_entries(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    entries = [(i * 10, 2**32 + i * 4096) for i in range(1, 7)]  # 6 entries = 72 bytes, a multiple of 24
    with OffsetIndex(path, 0, 1024, use_large_format=True) as index:
        for offset, position in entries:
            index.append(offset, position)
    reopened = OffsetIndex(path, 0, use_large_format=False)
    assert reopened.is_large_format
    assert [reopened.entry(i) for i in range(6)] == [OffsetPosition(o, p) for o, p in entries]
    reopened.close()


def test_legacy_index_keeps_its_format_when_large_is_requested(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    with OffsetIndex(path, 0, 1024) as index:
        for i in range(1, 7):  # 48 bytes: ambiguous
            index.append(i * 3, i * 5000)
    (tmp_path / "00000000000000000000.log").write_bytes(bytes(40_000))
    reopened = OffsetIndex(path, 0, 1024, use_large_format=True)
    assert not reopened.is_large_format
    assert reopened.lookup(10) == OffsetPosition(9, 15000)
    reopened.resize(1024)  # the active segment gets its space back, still 8-byte
    reopened.append(100, 2**31 - 1)
    reopened.close()


# --- the warm section, big index ---------------------------------------------------------------------


@FORMATS
def test_lookups_across_warm_and_cold_sections(path: Path, large: bool) -> None:
    size = entry_size(large)
    count = 3 * WARM_SECTION_BYTES // size + 17
    rng = random.Random(3)
    offsets = monotonic_seq(rng, 10, count)
    positions = monotonic_seq(rng, 0, count)
    index = OffsetIndex(path, 10, count * size, use_large_format=large)
    for offset, position in zip(offsets, positions):
        index.append(offset, position)
    first_hot = count - 1 - WARM_SECTION_BYTES // size
    probes = [offsets[first_hot] + d for d in (-2, -1, 0, 1, 2)] + [offsets[0] - 1, offsets[0], offsets[-1], 10**12]
    probes += [rng.randint(0, offsets[-1] + 20) for _ in range(2000)]
    for target in probes:
        slot = bisect.bisect_right(offsets, target) - 1
        expected = OffsetPosition(10, 0) if slot < 0 else OffsetPosition(offsets[slot], positions[slot])
        assert index.lookup(target) == expected, target
    # Value search (fetch upper bound) crosses the same boundary.
    for slot in (0, first_hot - 1, first_hot, first_hot + 1, count - 2):
        start = OffsetPosition(offsets[slot], positions[slot])
        size_to_next = positions[slot + 1] - positions[slot]
        assert index.fetch_upper_bound_offset(start, size_to_next) == OffsetPosition(offsets[slot + 1], positions[slot + 1])
    index.truncate_to(offsets[first_hot])
    assert index.entries == first_hot and index.last_offset == offsets[first_hot - 1]
    assert index.lookup(offsets[-1]) == OffsetPosition(offsets[first_hot - 1], positions[first_hot - 1])
    index.close()


@FORMATS
def test_append_many_writes_what_appends_write(tmp_path: Path, large: bool) -> None:
    """The bulk path recovery uses leaves the same bytes and answers as appending one pair at a time."""
    offsets = [BASE_OFFSET + 3 * i + 1 for i in range(25)]
    positions = [100 * i for i in range(25)]
    (tmp_path / "bulk").mkdir()
    bulk = new_index(tmp_path / "bulk" / "00000000000000000045.index", large)
    single = new_index(tmp_path / "00000000000000000045.index", large)
    bulk.append(BASE_OFFSET, 0)
    single.append(BASE_OFFSET, 0)
    bulk.append_many(offsets, positions)
    for offset, position in zip(offsets, positions, strict=True):
        single.append(offset, position)
    assert bulk.entries == single.entries == 26
    for target in range(BASE_OFFSET, offsets[-1] + 2):
        assert bulk.lookup(target) == single.lookup(target)
    bulk.flush()
    single.flush()
    assert bulk.path.read_bytes() == single.path.read_bytes()
    bulk.close()
    single.close()


@FORMATS
def test_append_many_keeps_the_valid_prefix_and_raises_appends_error(path: Path, large: bool) -> None:
    index = new_index(path, large, max_entries=5)
    with pytest.raises(InvalidOffsetError):
        index.append_many([BASE_OFFSET + 1, BASE_OFFSET + 2, BASE_OFFSET + 2], [10, 20, 30])
    assert [index.entry(i) for i in range(index.entries)] == [OffsetPosition(BASE_OFFSET + 1, 10), OffsetPosition(BASE_OFFSET + 2, 20)]
    with pytest.raises(IndexFullError):
        index.append_many([BASE_OFFSET + 10 + i for i in range(4)], [100 + i for i in range(4)])
    assert index.entries == 5
    index.close()


def test_concurrent_lookups_see_only_written_entries(path: Path) -> None:
    """Lookups take no lock: while a writer appends, every answer is an entry that was really written."""
    count = 20_000
    index = OffsetIndex(path, 0, count * 8)
    errors: list[str] = []
    done = threading.Event()

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        while not done.is_set():
            target = rng.randint(0, 2 * count)
            found = index.lookup(target)
            if found != OffsetPosition(0, 0) and (found.position != found.offset * 3 or found.offset > target):
                errors.append(f"lookup({target}) -> {found}")

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(2)]
    for thread in threads:
        thread.start()
    try:
        for offset in range(1, count + 1):
            index.append(offset, offset * 3)
            if offset % 5000 == 0:
                index.truncate_to(offset - 100)
                index.append(offset - 100, (offset - 100) * 3)
    finally:
        done.set()
        for thread in threads:
            thread.join()
    assert errors == []
    index.close()


def test_a_lookup_on_a_snapshot_older_than_a_truncation_never_pairs_an_offset_with_another_entrys_position(
        path: Path) -> None:
    """The race behind the concurrent test, made deterministic: a lock-free lookup searched a key mirror snapshot
    taken before a truncation, and the writer has since rewritten the slot it found."""
    index = OffsetIndex(path, 0, 1000 * 8)
    for offset in range(1, 101):
        index.append(offset, offset * 3)
    stale = index._search  # what a reader holds when the writer runs
    index.truncate_to(51)
    for offset in range(60, 70):
        index.append(offset, offset * 3)
    serve_a_stale_search_once(index, stale)
    found = index.lookup(55)  # the old mirror's slot for 55 now holds offset 64
    assert found.offset <= 55 and found.position == found.offset * 3, found
    assert found == index.lookup(55) == OffsetPosition(50, 150)
    index.close()


# --- golden Kafka 4.0 files --------------------------------------------------------------------------


def test_golden_cluster_metadata_offset_index(golden_dir: Path) -> None:
    path = golden_dir / "__cluster_metadata-0" / "00000000000000000000.index"
    index = OffsetIndex(path, 0, writable=False)
    assert (index.entries, index.entry_size, index.is_large_format) == (1, 8, False)
    assert index.entry(0) == OffsetPosition(56, 4123)
    assert index.lookup(55) == OffsetPosition(0, 0)
    assert index.lookup(56) == OffsetPosition(56, 4123)
    assert index.lookup(115) == OffsetPosition(56, 4123)
    assert index.last_offset == 56
    index.sanity_check()
    index.close()
    assert path.read_bytes() == bytes.fromhex("00000038 0000101b"), "a read-only close writes nothing"


def test_golden_empty_offset_index(golden_dir: Path) -> None:
    path = golden_dir / "foo-0" / "00000000000000000000.index"
    index = OffsetIndex(path, 0, use_large_format=True)
    assert (index.entries, index.length) == (0, 0)
    assert index.lookup(2) == OffsetPosition(0, 0)
    index.sanity_check()
    index.close()
    assert path.stat().st_size == 0


# --- what mutation testing found unchecked (TESTING.md) -------------------------------------------------


def _unambiguous(layout: struct.Struct, entries: list[tuple[int, int]]) -> bytes:
    """``entries`` packed, padded with valid entries to a length that is not a multiple of 24 (detection is
    tested elsewhere; these files must keep the format they are written in)."""
    while len(entries) * layout.size % 24 == 0:
        entries = [*entries, (10**6 + len(entries), 10**8 + len(entries))]
    return b"".join(layout.pack(rel, pos) for rel, pos in entries)


@FORMATS
def test_truncate_to_between_the_first_two_entries_keeps_the_first(path: Path, large: bool) -> None:
    index = new_index(path, large)
    index.append(50, 0)
    index.append(60, 100)
    index.truncate_to(55)
    assert [index.entry(i) for i in range(index.entries)] == [OffsetPosition(50, 0)]
    index.truncate_to(50)
    assert index.entries == 0
    index.close()


@FORMATS
def test_append_many_of_unequal_lengths_is_refused_after_the_common_prefix(path: Path, large: bool) -> None:
    index = new_index(path, large)
    with pytest.raises(ValueError, match="zip"):
        index.append_many([BASE_OFFSET + 1, BASE_OFFSET + 2, BASE_OFFSET + 3], [10, 20])
    assert [index.entry(i) for i in range(index.entries)] == [
        OffsetPosition(BASE_OFFSET + 1, 10), OffsetPosition(BASE_OFFSET + 2, 20)
    ]
    index.close()


@FORMATS
def test_append_many_refuses_a_first_offset_not_above_the_last_entry(path: Path, large: bool) -> None:
    for first in (BASE_OFFSET + 5, BASE_OFFSET + 4):  # equal to the last entry, and below it
        path.unlink(missing_ok=True)
        index = new_index(path, large)
        index.append(BASE_OFFSET + 5, 10)
        with pytest.raises(InvalidOffsetError) as info:
            index.append_many([first, BASE_OFFSET + 9], [20, 30])
        assert info.value.context["offset"] == first and info.value.context["last_offset"] == BASE_OFFSET + 5
        assert index.entries == 1 and index.lookup(BASE_OFFSET + 9) == OffsetPosition(BASE_OFFSET + 5, 10)
        index.close()


def test_append_many_on_a_legacy_index_refuses_a_position_past_int32(path: Path) -> None:
    index = OffsetIndex(path, 0, 80)
    with pytest.raises(LegacyIndexPositionOverflowError):
        index.append_many([1, 2], [2**31 - 1, 2**31])
    assert [index.entry(i) for i in range(index.entries)] == [OffsetPosition(1, 2**31 - 1)]
    assert index.lookup(2) == OffsetPosition(1, 2**31 - 1), "never a silent cast"
    index.close()


@FORMATS
def test_append_many_writes_a_valid_run_in_bulk_up_to_every_limit(
    path: Path, large: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that fits is one bulk write, never pair by pair (recovery rebuilds whole indexes this way): at
    relative offsets 0 and 2^31-1, position 0 and the format's largest position, consecutive offsets, and a run
    that fills the index exactly."""

    def refuse(*args: object) -> None:
        raise AssertionError(f"append{args} called: the bulk path was not taken")

    index = new_index(path, large, base_offset=BASE_OFFSET, max_entries=4)
    monkeypatch.setattr(index, "append", refuse)
    top = 2**63 - 1 if large else 2**31 - 1
    offsets = [BASE_OFFSET, BASE_OFFSET + 1, BASE_OFFSET + 2, BASE_OFFSET + 2**31 - 1]
    positions = [0, 1, 2, top]
    index.append_many(offsets, positions)
    assert [index.entry(i) for i in range(4)] == [OffsetPosition(o, p) for o, p in zip(offsets, positions, strict=True)]
    assert index.is_full
    index.close()
    second = path.with_name("00000000000000000046.index")
    index = new_index(second, large, base_offset=BASE_OFFSET + 1)
    index.append(BASE_OFFSET + 1, 5)
    monkeypatch.setattr(index, "append", refuse)
    index.append_many([BASE_OFFSET + 2, BASE_OFFSET + 3], [5, 6])  # right after the last entry, equal position
    assert index.entries == 3
    index.close()


def test_sanity_check_compares_large_positions_as_64_bit_integers(path: Path) -> None:
    """Positions differing by 1 past 2^53 (equal as doubles) going backwards are found."""
    layout = struct.Struct(">iq")
    path.write_bytes(b"".join(layout.pack(rel, pos) for rel, pos in [(1, 2**53 + 1), (2, 2**53), (3, 2**54)]))
    index = OffsetIndex(path, 0, use_large_format=True)
    assert index.is_large_format
    with pytest.raises(CorruptIndexError) as info:
        index.sanity_check()
    assert info.value.context["entry"] == 1
    index.close_handler()


@pytest.mark.parametrize(
    ("entries", "bad_entry"),
    [
        ([(1, 10), (5, 20), (3, 30)], 2),  # the third offset below the second, above the first
        ([(1, 10), (5, 30), (6, 20)], 2),  # the third position below the second, above the first
    ],
)
@FORMATS
def test_sanity_check_compares_each_entry_with_the_one_before(
    path: Path, large: bool, entries: list[tuple[int, int]], bad_entry: int
) -> None:
    layout = struct.Struct(">iq" if large else ">ii")
    path.write_bytes(_unambiguous(layout, entries))
    index = OffsetIndex(path, 1000, use_large_format=large)
    assert index.entry_size == layout.size
    with pytest.raises(CorruptIndexError) as info:
        index.sanity_check()
    offset, position = entries[bad_entry]
    previous = OffsetPosition(1000 + entries[bad_entry - 1][0], entries[bad_entry - 1][1])
    assert str(info.value) == (
        f"corrupt index {path}: entry {bad_entry} ({1000 + offset} -> {position}) has a negative or non-increasing "
        f"offset or a negative or decreasing position (previous entry: {previous})"
    )
    assert info.value.context == {"path": path, "entry": bad_entry, "offset": 1000 + offset, "position": position}
    index.close_handler()


@FORMATS
def test_sanity_check_names_the_previous_entry_of_the_second(path: Path, large: bool) -> None:
    layout = struct.Struct(">iq" if large else ">ii")
    path.write_bytes(_unambiguous(layout, [(5, 10), (4, 20)]))
    index = OffsetIndex(path, 0, use_large_format=large)
    with pytest.raises(CorruptIndexError, match=r"\(previous entry: OffsetPosition\(offset=5, position=10\)\)$"):
        index.sanity_check()
    index.close_handler()


@FORMATS
def test_equal_positions_are_sane(path: Path, large: bool) -> None:
    """Positions must not go backwards; equal is allowed (only offsets must strictly increase)."""
    layout = struct.Struct(">iq" if large else ">ii")
    path.write_bytes(_unambiguous(layout, [(1, 10), (2, 10), (3, 40)]))
    index = OffsetIndex(path, 0, use_large_format=large)
    index.sanity_check()
    index.close_handler()


@FORMATS
def test_sanity_check_errors_carry_their_context(path: Path, large: bool) -> None:
    size = entry_size(large)
    path.write_bytes(b"\x00" * (size * 3 + 1 if large else size * 2 + 3))
    index = OffsetIndex(path, 0, use_large_format=large)
    length = path.stat().st_size
    with pytest.raises(CorruptIndexError) as info:
        index.sanity_check()
    assert info.value.context == {"path": path, "length": length, "entry_size": size}
    index.close_handler()
    path.write_bytes(struct.pack(">iq" if large else ">ii", -1, 5))
    index = OffsetIndex(path, 1000, use_large_format=large)
    with pytest.raises(CorruptIndexError) as info:
        index.sanity_check()
    assert info.value.context == {"path": path, "offset": 999, "base_offset": 1000}
    index.close_handler()


@FORMATS
def test_entry_out_of_range_names_the_index_and_its_count(path: Path, large: bool) -> None:
    index = new_index(path, large)
    index.append(BASE_OFFSET, 0)
    with pytest.raises(IndexError, match=f"^attempt to fetch entry 1 from index {path}, which has 1 entries$"):
        index.entry(1)
    index.close()


@FORMATS
def test_append_errors_carry_their_context(path: Path, large: bool) -> None:
    index = new_index(path, large, max_entries=2)
    with pytest.raises(ValueError, match=f"^position must be >= 0, got -1 for offset 50 in {path}$"):
        index.append(50, -1)
    index.append(50, 0)
    with pytest.raises(InvalidOffsetError) as info:
        index.append(50, 10)
    assert str(info.value) == (
        f"attempt to append offset 50 to slot 1 of {path}, no larger than the last offset appended (50)"
    )
    assert info.value.context == {"offset": 50, "last_offset": 50, "path": path}
    index.append(51, 10)
    with pytest.raises(IndexFullError) as full:
        index.append(52, 20)
    assert full.value.context == {"offset": 52, "path": path, "entries": 2}
    index.close()


@FORMATS
def test_an_existing_index_of_a_partial_last_slot_is_full(path: Path, large: bool) -> None:
    """An existing file counts every whole slot as an entry (Kafka); a partial slot at its end is no room."""
    size = entry_size(large)
    layout = struct.Struct(">iq" if large else ">ii")
    path.write_bytes(layout.pack(1, 10) + layout.pack(2, 20) + b"\x00" * 5)
    index = OffsetIndex(path, 0, use_large_format=large)
    assert (index.entry_size, index.entries) == (size, 2)
    with pytest.raises(IndexFullError):
        index.append(3, 30)
    index.close_handler()


@FORMATS
def test_keys_of_a_reopened_index_past_2_to_the_53(tmp_path: Path, large: bool) -> None:
    """Absolute offsets are int64 (Kafka's are longs): a base offset past 2^53 still gives exact keys."""
    base = 2**62 + 1
    path = tmp_path / f"{base:020d}.index"
    with OffsetIndex(path, base, 10 * entry_size(large), use_large_format=large) as index:
        index.append(base + 1, 0)
        index.append(base + 2, 100)
    reopened = OffsetIndex(path, base, writable=False, use_large_format=large)
    assert reopened.last_offset == base + 2
    assert reopened.lookup(base + 1) == OffsetPosition(base + 1, 0)
    assert reopened.lookup(base + 2) == OffsetPosition(base + 2, 100)
    reopened.close()


def test_legacy_position_overflow_error_says_both_ways_out(path: Path) -> None:
    index = OffsetIndex(path, 0, 80)
    with pytest.raises(LegacyIndexPositionOverflowError) as info:
        index.append(2, 2**31)
    assert str(info.value) == (
        f"position 2147483648 of offset 2 does not fit the legacy 8-byte offset index {path} (max 2147483647). "
        "Positions past 2 GiB need the 12-byte index format of KIP-1333: finalize the large-index feature with "
        "`tiered features upgrade --release-version 4.4`, or keep segment.bytes at or below 2147483647"
    )
    assert info.value.context == {"offset": 2, "position": 2**31, "path": path}
    index.close()
