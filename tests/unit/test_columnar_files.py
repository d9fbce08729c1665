"""A columnar file against its manifest entry, as a plan checks it (tiered.columnar.manifest.file_problem): its
size, and the crc32c of its footer, the statistics ranged reads skip row groups by."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from local.crc import crc32c
from tiered.columnar.manifest import ColumnarFile, file_problem, footer_crc32c


def _file(tmp_path: Path) -> tuple[Path, ColumnarFile]:
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"offset": list(range(5000))}), path, row_group_size=1000)
    data = path.read_bytes()
    footer = struct.unpack("<i", data[-8:-4])[0]
    assert footer_crc32c(path) == crc32c(data[-footer - 8:])
    return path, ColumnarFile(path.name, 0, 4999, 5000, len(data), crc32c(data), (), footer_crc32c(path))


def test_a_file_as_written_has_no_problem(tmp_path: Path) -> None:
    path, f = _file(tmp_path)
    assert file_problem(path, f) is None


def test_every_flipped_bit_of_the_footer_is_a_problem(tmp_path: Path) -> None:
    path, f = _file(tmp_path)
    data = path.read_bytes()
    footer = struct.unpack("<i", data[-8:-4])[0]
    for at in range(len(data) - footer - 8, len(data)):
        for bit in (0, 5):
            flipped = bytearray(data)
            flipped[at] ^= 1 << bit
            path.write_bytes(bytes(flipped))
            assert file_problem(path, f) is not None, at


@pytest.mark.parametrize(("change", "problem"), [
    (lambda d: d[:-1], "bytes, the manifest says"),
    (lambda d: d + b"\0", "bytes, the manifest says"),
    (None, "missing"),
])
def test_a_file_cut_grown_or_gone_is_a_problem(tmp_path: Path, change: object, problem: str) -> None:
    path, f = _file(tmp_path)
    if change is None:
        path.unlink()
    else:
        path.write_bytes(change(path.read_bytes()))  # type: ignore[operator]
    found = file_problem(path, f)
    assert found is not None and problem in found


def test_a_file_of_an_older_manifest_is_checked_by_its_size_only(tmp_path: Path) -> None:
    path, f = _file(tmp_path)
    old = ColumnarFile(f.name, f.base_offset, f.end_offset, f.rows, f.size, f.crc32c, f.segments, None)
    data = bytearray(path.read_bytes())
    data[-20] ^= 1
    path.write_bytes(bytes(data))
    assert file_problem(path, old) is None  # (verify's crc32c of the whole file finds it)
    assert file_problem(path, f) is not None


def test_a_file_that_does_not_end_as_parquet_is_named_so(tmp_path: Path) -> None:
    path, f = _file(tmp_path)
    data = bytearray(path.read_bytes())
    data[-1:] = b"X"
    path.write_bytes(bytes(data))
    found = file_problem(path, f)
    assert found == "no Parquet footer at its end"
