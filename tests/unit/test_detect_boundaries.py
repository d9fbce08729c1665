"""detect_entry_size at the edges of its validity rules (what mutation testing found the rule tests let
through): a negative value that keeps the order, equal offsets or positions, positions one apart, an empty
file's silence, and the context its errors carry."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

from local.errors import CorruptIndexError
from local.index import detect as detect_module
from local.index import detect_entry_size

WORDS = struct.Struct(">6i")  # 24 bytes: three 8-byte entries or two 12-byte ones
INDEX_NAME = "00000000000000000000.index"


def _file(tmp_path: Path, *words: int) -> Path:
    path = tmp_path / INDEX_NAME
    path.write_bytes(WORDS.pack(*words))
    return path


def _readings(path: Path) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    data = path.read_bytes()
    legacy = [struct.unpack_from(">ii", data, i) for i in range(0, 24, 8)]
    large = [struct.unpack_from(">iq", data, i) for i in range(0, 24, 12)]
    return legacy, large


def test_a_negative_first_position_alone_makes_a_reading_invalid(tmp_path: Path) -> None:
    # 8-byte: (0 -> -1), (1 -> 5), (2 -> 10): ordered, but a negative position. 12-byte: a negative position.
    path = _file(tmp_path, 0, -1, 1, 5, 2, 10)
    legacy, large = _readings(path)
    assert legacy == [(0, -1), (1, 5), (2, 10)] and large[0][1] < 0
    with pytest.raises(CorruptIndexError, match="valid neither"):
        detect_entry_size(path, 8)


def test_equal_relative_offsets_make_a_reading_invalid(tmp_path: Path) -> None:
    # 8-byte: (0 -> 0), (7 -> 10), (7 -> 20): offset 7 twice. 12-byte: (0 -> 7), (10 -> 7 * 2**32 + 20): valid.
    path = _file(tmp_path, 0, 0, 7, 10, 7, 20)
    legacy, large = _readings(path)
    assert legacy == [(0, 0), (7, 10), (7, 20)] and large == [(0, 7), (10, 7 * 2**32 + 20)]
    assert detect_entry_size(path, 8) == 12


def test_equal_positions_make_a_reading_invalid(tmp_path: Path) -> None:
    # 8-byte: (0 -> 0), (7 -> 10), (9 -> 10): position 10 twice. 12-byte: (0 -> 7), (10 -> 9 * 2**32 + 10).
    path = _file(tmp_path, 0, 0, 7, 10, 9, 10)
    assert _readings(path)[0] == [(0, 0), (7, 10), (9, 10)]
    assert detect_entry_size(path, 8) == 12


def test_positions_one_apart_are_valid(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # 8-byte: (0 -> 0), (7 -> 10), (9 -> 11): valid. 12-byte: (0 -> 7), (10 -> 9 * 2**32 + 11): valid too.
    path = _file(tmp_path, 0, 0, 7, 10, 9, 11)
    with caplog.at_level(logging.WARNING, logger="local.index.detect"):
        assert detect_entry_size(path, 8) == 8 and detect_entry_size(path, 12) == 12
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert all(
        m.startswith(f"Offset index {path} (24 bytes) reads validly as both 8-byte and 12-byte entries")
        for m in messages
    )
    assert messages[0].endswith("using the requested 8-byte format")
    assert messages[1].endswith("using the requested 12-byte format")


def test_relative_offsets_one_apart_are_valid(tmp_path: Path) -> None:
    path = tmp_path / INDEX_NAME
    path.write_bytes(struct.pack(">6i", 1, 100, 2, 200, 3, 300) + bytes(24))  # three legacy entries, preallocated
    assert detect_entry_size(path, 12) == 8


def test_an_empty_or_missing_file_is_decided_without_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / INDEX_NAME
    with caplog.at_level(logging.DEBUG, logger="local.index.detect"):
        assert detect_entry_size(path, 12) == 12
        path.touch()
        assert detect_entry_size(path, 8) == 8 and detect_entry_size(path, 12) == 12
    assert caplog.records == []


def test_the_errors_carry_their_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        caplog: pytest.LogCaptureFixture) -> None:
    path = _file(tmp_path, 0, -1, 1, 5, 2, 10)
    (tmp_path / "00000000000000000000.log").write_bytes(bytes(50))
    with pytest.raises(CorruptIndexError) as info:
        detect_entry_size(path, 12)
    assert info.value.context == {"path": path, "length": 24, "log_size": 50}
    assert "companion log size 50" in str(info.value)

    real = detect_module._detect_once

    def growing(p: Path, length: int, requested: int) -> int:
        result = real(p, length, requested)
        with open(p, "ab") as file:
            file.write(bytes(8))
        return result

    path.write_bytes(struct.pack(">2i", 1, 10))  # one legacy entry, then eight bytes more at every look
    monkeypatch.setattr(detect_module, "_detect_once", growing)
    with caplog.at_level(logging.INFO, logger="local.index.detect"), pytest.raises(CorruptIndexError) as info:
        detect_entry_size(path, 8)
    assert info.value.context == {"path": path, "lengths": [8, 16, 16, 24]}
    assert [r.getMessage() for r in caplog.records] == [
        f"Offset index {path} changed length during format detection (8 -> 16)",
        f"Offset index {path} changed length during format detection (16 -> 24)",
    ]


def test_positions_are_compared_as_64_bit_integers(tmp_path: Path) -> None:
    # 12-byte: (3 -> 2**60), (4 -> 2**60 + 1): valid (one apart, exact only as integers, not as doubles).
    # 8-byte: (3 -> 2**28), (0 -> 4), (2**28 -> 1): offsets go back, invalid.
    path = tmp_path / INDEX_NAME
    path.write_bytes(struct.pack(">iqiq", 3, 2**60, 4, 2**60 + 1))
    assert _readings(path)[1] == [(3, 2**60), (4, 2**60 + 1)]
    assert detect_entry_size(path, 8) == 12
