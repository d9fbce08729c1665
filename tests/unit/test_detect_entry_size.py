"""detect_entry_size: every rule of the offset index's entry size detection (KIP-1333)."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

from local.errors import CorruptIndexError
from local.index import OffsetIndex, OffsetPosition, detect_entry_size
from local.index import detect as detect_module

LEGACY = struct.Struct(">ii")
LARGE = struct.Struct(">iq")
INDEX_NAME = "00000000000000000000.index"


def legacy_bytes(entries: list[tuple[int, int]]) -> bytes:
    return b"".join(LEGACY.pack(*entry) for entry in entries)


def large_bytes(entries: list[tuple[int, int]]) -> bytes:
    return b"".join(LARGE.pack(*entry) for entry in entries)


# 24 bytes that are valid both ways when nothing else is known:
#   as 12-byte entries: (0 -> 10), (5 -> 20 * 2**32 + 30)
#   as  8-byte entries: (0 -> 0), (10 -> 5), (20 -> 30)
AMBIGUOUS = large_bytes([(0, 10), (5, 20 * 2**32 + 30)])


@pytest.fixture
def index_path(tmp_path: Path) -> Path:
    return tmp_path / INDEX_NAME


def test_the_ambiguous_sample_is_what_it_claims() -> None:
    assert legacy_bytes([(0, 0), (10, 5), (20, 30)]) == AMBIGUOUS
    assert detect_module.reading_is_valid(AMBIGUOUS, 8, None)
    assert detect_module.reading_is_valid(AMBIGUOUS, 12, None)
    assert not detect_module.reading_is_valid(AMBIGUOUS, 12, 1000)


# --- rule 1: missing or empty ------------------------------------------------------------------------


@pytest.mark.parametrize("requested", [8, 12])
def test_missing_file_gives_the_requested_size(index_path: Path, requested: int) -> None:
    assert detect_entry_size(index_path, requested) == requested


@pytest.mark.parametrize("requested", [8, 12])
def test_empty_file_gives_the_requested_size(index_path: Path, requested: int) -> None:
    index_path.touch()
    assert detect_entry_size(index_path, requested) == requested


def test_requested_size_must_be_8_or_12(index_path: Path) -> None:
    with pytest.raises(ValueError, match="8 or 12"):
        detect_entry_size(index_path, 16)


# --- rule 2: divisibility ----------------------------------------------------------------------------


@pytest.mark.parametrize("requested", [8, 12])
@pytest.mark.parametrize("count", [1, 3, 5])  # 12, 36, 60 bytes: multiples of 12 only
def test_multiple_of_12_only(index_path: Path, requested: int, count: int) -> None:
    index_path.write_bytes(large_bytes([(i, i * 100) for i in range(count)]))
    assert detect_entry_size(index_path, requested) == 12


@pytest.mark.parametrize("requested", [8, 12])
@pytest.mark.parametrize("count", [1, 2, 4, 5])  # 8, 16, 32, 40 bytes: multiples of 8 only
def test_multiple_of_8_only(index_path: Path, requested: int, count: int) -> None:
    index_path.write_bytes(legacy_bytes([(i, i * 100) for i in range(count)]))
    assert detect_entry_size(index_path, requested) == 8


@pytest.mark.parametrize("requested", [8, 12])
@pytest.mark.parametrize("length", [1, 7, 10, 25, 30])
def test_multiple_of_neither_gives_the_requested_size(index_path: Path, requested: int, length: int) -> None:
    index_path.write_bytes(b"\x01" * length)
    assert detect_entry_size(index_path, requested) == requested


def test_multiple_of_neither_then_fails_the_sanity_check(index_path: Path) -> None:
    index_path.write_bytes(legacy_bytes([(1, 1)]) + b"\x00\x00")
    index = OffsetIndex(index_path, 0, use_large_format=True)
    assert index.entry_size == 12
    with pytest.raises(CorruptIndexError):
        index.sanity_check()
    index.close_handler()


# --- rule 3: multiples of 24 -------------------------------------------------------------------------


@pytest.mark.parametrize("requested", [8, 12])
def test_ambiguous_legacy_file_read_as_legacy(index_path: Path, requested: int) -> None:
    index_path.write_bytes(legacy_bytes([(i * 3, i * 4096) for i in range(1, 7)]))  # 48 bytes
    assert detect_entry_size(index_path, requested) == 8


@pytest.mark.parametrize("requested", [8, 12])
def test_ambiguous_large_file_read_as_large(index_path: Path, requested: int) -> None:
    index_path.write_bytes(large_bytes([(i * 3, i * 4096) for i in range(1, 5)]))  # 48 bytes
    assert detect_entry_size(index_path, requested) == 12


def test_only_the_first_32_entries_are_judged(index_path: Path) -> None:
    entries = [(i, i * 100) for i in range(1, 49)]  # 48 legacy entries = 384 bytes
    entries[40] = (0, 0)  # garbage past the sample does not change the verdict
    index_path.write_bytes(legacy_bytes(entries))
    assert detect_entry_size(index_path, 12) == 8


@pytest.mark.parametrize("requested", [8, 12])
def test_valid_both_ways_uses_the_hint_and_warns(
    index_path: Path, requested: int, caplog: pytest.LogCaptureFixture
) -> None:
    index_path.write_bytes(AMBIGUOUS)
    with caplog.at_level(logging.WARNING, logger="local.index.detect"):
        assert detect_entry_size(index_path, requested) == requested
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(index_path) in warnings[0].getMessage()
    assert "both" in warnings[0].getMessage()


def test_all_zero_file_is_valid_both_ways(index_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    index_path.write_bytes(bytes(48))  # preallocated, nothing written yet
    with caplog.at_level(logging.WARNING):
        assert detect_entry_size(index_path, 12) == 12
        assert detect_entry_size(index_path, 8) == 8
    assert len(caplog.records) == 2


def test_trailing_preallocated_zeros_are_not_judged(index_path: Path) -> None:
    # 3 real legacy entries, then zeros up to 48 bytes: what a crash leaves of an active index.
    index_path.write_bytes(legacy_bytes([(1, 100), (2, 200), (3, 300)]) + bytes(24))
    assert detect_entry_size(index_path, 12) == 8


@pytest.mark.parametrize("requested", [8, 12])
def test_valid_neither_way_is_corrupt(index_path: Path, requested: int) -> None:
    index_path.write_bytes(b"\xff" * 24)
    with pytest.raises(CorruptIndexError) as info:
        detect_entry_size(index_path, requested)
    assert info.value.context["path"] == index_path and info.value.context["length"] == 24
    assert str(index_path) in str(info.value)


def test_decreasing_entries_both_ways_are_corrupt(index_path: Path) -> None:
    index_path.write_bytes(legacy_bytes([(5, 500), (4, 400), (3, 300)]))
    with pytest.raises(CorruptIndexError):
        detect_entry_size(index_path, 8)


def test_companion_log_size_disambiguates(tmp_path: Path, index_path: Path) -> None:
    index_path.write_bytes(AMBIGUOUS)
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(bytes(100))  # the 12-byte reading points 80 GiB past a 100-byte log
    assert detect_entry_size(index_path, 12) == 8
    assert detect_entry_size(index_path, 8) == 8


def test_position_equal_to_log_size_is_allowed(tmp_path: Path, index_path: Path) -> None:
    index_path.write_bytes(legacy_bytes([(i, i * 10) for i in range(1, 4)]))  # 24 bytes, positions up to 30
    (tmp_path / "00000000000000000000.log").write_bytes(bytes(30))
    assert detect_entry_size(index_path, 12) == 8
    (tmp_path / "00000000000000000000.log").write_bytes(bytes(29))
    with pytest.raises(CorruptIndexError):
        detect_entry_size(index_path, 12)


@pytest.mark.parametrize("suffix", [".swap", ".cleaned", ".deleted"])
def test_companion_log_keeps_the_transient_suffix(
    tmp_path: Path, suffix: str, caplog: pytest.LogCaptureFixture
) -> None:
    index_path = tmp_path / f"{INDEX_NAME}{suffix}"
    index_path.write_bytes(AMBIGUOUS)
    # A plain .log beside it is not its companion: still ambiguous, so the hint wins with a warning.
    (tmp_path / "00000000000000000000.log").write_bytes(bytes(100))
    with caplog.at_level(logging.WARNING):
        assert detect_entry_size(index_path, 12) == 12
    assert len(caplog.records) == 1
    (tmp_path / f"00000000000000000000.log{suffix}").write_bytes(bytes(100))
    assert detect_entry_size(index_path, 12) == 8


# --- rule 4: the file changes under us ---------------------------------------------------------------


def test_length_change_during_detection_detects_again(index_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index_path.write_bytes(legacy_bytes([(1, 10), (2, 20)]))  # 16 bytes: 8
    real = detect_module._detect_once
    calls: list[int] = []

    def growing_once(path: Path, length: int, requested: int) -> int:
        calls.append(length)
        result = real(path, length, requested)
        if len(calls) == 1:  # meanwhile a writer replaces it with 3 large entries
            path.write_bytes(large_bytes([(1, 10), (2, 20), (3, 30)]))
        return result

    monkeypatch.setattr(detect_module, "_detect_once", growing_once)
    assert detect_entry_size(index_path, 8) == 12
    assert calls == [16, 36]


def test_second_length_change_is_corrupt(index_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index_path.write_bytes(legacy_bytes([(1, 10)]))
    real = detect_module._detect_once

    def always_growing(path: Path, length: int, requested: int) -> int:
        result = real(path, length, requested)
        with open(path, "ab") as file:
            file.write(legacy_bytes([(100 + length, 1000 + length)]))
        return result

    monkeypatch.setattr(detect_module, "_detect_once", always_growing)
    with pytest.raises(CorruptIndexError, match="kept changing length") as info:
        detect_entry_size(index_path, 8)
    assert info.value.context["lengths"] == [8, 16, 16, 24]


def test_file_deleted_during_detection_detects_again(index_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index_path.write_bytes(AMBIGUOUS)
    real = detect_module._detect_once

    def deleting(path: Path, length: int, requested: int) -> int:
        result = real(path, length, requested)
        path.unlink(missing_ok=True)
        return result

    monkeypatch.setattr(detect_module, "_detect_once", deleting)
    assert detect_entry_size(index_path, 12) == 12, "second pass: missing file, the requested size"


# --- through OffsetIndex -----------------------------------------------------------------------------


def test_offset_index_uses_detection_for_existing_files_only(tmp_path: Path, index_path: Path) -> None:
    index_path.write_bytes(legacy_bytes([(i * 3, i * 4096) for i in range(1, 7)]))
    legacy = OffsetIndex(index_path, 0, use_large_format=True)
    assert not legacy.is_large_format and legacy.lookup(10) == OffsetPosition(9, 3 * 4096)
    legacy.close()
    fresh = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 1200, use_large_format=True)
    assert fresh.is_large_format and fresh.max_entries == 100
    fresh.close()
