"""The columnar manifest codec (tiered.columnar.manifest): what is encoded decodes to the same manifest, appends
keep the files contiguous, retention retires exactly the files below the log start, and a manifest whose files do
not follow each other is refused when it is read."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiered.columnar.manifest import ColumnarFile, ColumnarManifestError, Manifest, decode, encode, file_name

_sizes = st.lists(st.integers(1, 10_000), min_size=0, max_size=12)


def _manifest(start: int, sizes: list[int]) -> Manifest:
    m = Manifest("t\u00fc", 3, "AAAAAAAAAAAAAAAAAAAAAA")
    base = start
    for i, n in enumerate(sizes):
        m = m.with_file(ColumnarFile(file_name(base, f"id{i}"), base, base + n - 1, n - i % 2, 1000 + i, 2**32 - 1 - i,
                                     f"seg{i}"))
        base += n
    return m


@given(st.integers(0, 2**40), _sizes, st.integers(0, 2**41), st.integers(0, 2**50))
def test_encode_decode_round_trip_and_retention(start: int, sizes: list[int], log_start: int, now: int) -> None:
    m = _manifest(start, sizes)
    assert decode(encode(m)) == m
    if sizes:
        assert m.start_offset == start and m.next_offset == start + sum(sizes)
    retired = m.retire(log_start, now)
    assert decode(encode(retired)) == retired
    assert [f for f in m.files if f.end_offset < log_start] == [f for f in m.files if f.name in
                                                               {r.name for r in retired.retired}]
    assert retired.files == tuple(f for f in m.files if f.end_offset >= log_start)
    assert retired.names() == m.names()
    assert retired.without_retired({r.name for r in retired.retired}).names() == {f.name for f in retired.files}


def test_a_file_that_does_not_follow_is_refused_on_append_and_on_read() -> None:
    m = _manifest(10, [5, 5])
    with pytest.raises(ColumnarManifestError, match="starts at 21, not at 20"):
        m.with_file(ColumnarFile("x.parquet", 21, 30, 10, 1, 1))
    doc = json.loads(encode(m))
    doc["files"][1]["base_offset"] = 14
    with pytest.raises(ColumnarManifestError, match="starts at 14, not at 15"):
        decode(json.dumps(doc).encode(), "m.json")
    with pytest.raises(ColumnarManifestError, match=r"m\.json: not a columnar manifest"):
        decode(b"{\"version\": 1}", "m.json")
    with pytest.raises(ColumnarManifestError, match="version 2"):
        decode(b"{\"version\": 2}", "m.json")


def test_file_names_sort_by_offset() -> None:
    names = [file_name(b, "zz") for b in (0, 9, 10, 2**40)]
    assert sorted(names) == names and names[0] == "00000000000000000000-zz.parquet"
