"""The columnar manifest codec (tiered.columnar.manifest): what is encoded decodes to the same manifest, appends and
merges keep the files and their segments contiguous, retention retires exactly the files below the log start, a
merge retires exactly the file it replaces, and a manifest that contradicts itself is refused when it is read.
Version 1 manifests (one segment a file) still read."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiered.columnar.manifest import (
    ColumnarFile,
    ColumnarManifestError,
    Manifest,
    SegmentRows,
    decode,
    encode,
    file_name,
)

# One step per remote segment: (its offsets, whether its rows go into a copy of the last file)
_steps = st.lists(st.tuples(st.integers(1, 10_000), st.booleans()), min_size=0, max_size=12)


def _segment(i: int, base: int, n: int) -> SegmentRows:
    return SegmentRows(f"seg{i}", base, base + n - 1, n - i % 2)


def _footer(i: int) -> int | None:
    return None if i % 3 == 0 else (i * 2654435761) % 2**32  # None: a file written before footers were kept


def _manifest(start: int, steps: list[tuple[int, bool]], now: int = 0) -> tuple[Manifest, list[list[SegmentRows]]]:
    """The manifest the keeper's steps make, and the model: the segments of each file, in order."""
    m = Manifest("t\u00fc", 3, "AAAAAAAAAAAAAAAAAAAAAA")
    model: list[list[SegmentRows]] = []
    base = start
    for i, (n, merge) in enumerate(steps):
        s = _segment(i, base, n)
        if merge and m.files:
            last = m.files[-1]
            f = ColumnarFile(file_name(last.base_offset, f"id{i}"), last.base_offset, s.end_offset, last.rows + s.rows,
                             1000 + i, 2**32 - 1 - i, (*last.segments, s), _footer(i))
            m = m.with_last_replaced(f, now)
            model[-1].append(s)
        else:
            m = m.with_file(ColumnarFile(file_name(base, f"id{i}"), base, s.end_offset, s.rows, 1000 + i, i, (s,),
                                         _footer(i)))
            model.append([s])
        base += n
    return m, model


@given(st.integers(0, 2**40), _steps, st.integers(0, 2**41), st.integers(0, 2**50))
def test_encode_decode_round_trip_merges_and_retention(start: int, steps: list[tuple[int, bool]], log_start: int,
                                                       now: int) -> None:
    m, model = _manifest(start, steps, now)
    assert decode(encode(m)) == m
    assert [list(f.segments) for f in m.files] == model
    assert all(f.rows == sum(s.rows for s in f.segments) for f in m.files)
    if steps:
        assert m.start_offset == start and m.next_offset == start + sum(n for n, _ in steps)
    merges = sum(1 for i, (_n, merge) in enumerate(steps) if merge and i > 0)
    assert len(m.retired) == merges and len(m.names()) == len(steps)
    retired = m.retire(log_start, now)
    assert decode(encode(retired)) == retired
    assert [f for f in m.files if f.end_offset < log_start] == [f for f in m.files if f.name in
                                                               {r.name for r in retired.retired}]
    assert retired.files == tuple(f for f in m.files if f.end_offset >= log_start)
    assert retired.names() == m.names()
    assert retired.without_retired({r.name for r in retired.retired}).names() == {f.name for f in retired.files}


def test_a_file_that_does_not_follow_is_refused_on_append_merge_and_read() -> None:
    m, _ = _manifest(10, [(5, False), (5, False)])
    with pytest.raises(ColumnarManifestError, match="starts at 21, not at 20"):
        m.with_file(ColumnarFile("x.parquet", 21, 30, 10, 1, 1))
    with pytest.raises(ColumnarManifestError, match="does not extend the last file"):
        m.with_last_replaced(ColumnarFile("x.parquet", 10, 30, 10, 1, 1), 0)  # not the last file's base offset
    doc = json.loads(encode(m))
    del doc["json_crc32c"]  # (a document of its own, as written before manifests carried it)
    doc["files"][1]["base_offset"] = 14
    with pytest.raises(ColumnarManifestError, match="starts at 14, not at 15"):
        decode(json.dumps(doc).encode(), "m.json")
    doc = json.loads(encode(m))
    del doc["json_crc32c"]
    doc["files"][1]["segments"][0]["rows"] += 1
    with pytest.raises(ColumnarManifestError, match="segments give 5 rows, the file says 4"):
        decode(json.dumps(doc).encode(), "m.json")
    doc = json.loads(encode(m))
    del doc["json_crc32c"]
    doc["files"][1]["segments"][0]["end_offset"] = 18
    with pytest.raises(ColumnarManifestError, match="segments end at 18, the file at 19"):
        decode(json.dumps(doc).encode(), "m.json")
    with pytest.raises(ColumnarManifestError, match=r"m\.json: not a columnar manifest"):
        decode(b"{\"version\": 2}", "m.json")
    with pytest.raises(ColumnarManifestError, match="version 3"):
        decode(b"{\"version\": 3}", "m.json")


def test_a_version_1_manifest_reads_as_one_segment_a_file() -> None:
    doc = {"version": 1, "topic": "t", "partition": 0, "topic_id": "AAAAAAAAAAAAAAAAAAAAAA", "retired": [],
           "files": [{"name": "a.parquet", "base_offset": 0, "end_offset": 9, "rows": 8, "size": 5, "crc32c": 7,
                      "segment_id": "s0"},
                     {"name": "b.parquet", "base_offset": 10, "end_offset": 19, "rows": 10, "size": 5, "crc32c": 7}]}
    m = decode(json.dumps(doc).encode())
    assert m.files[0].segments == (SegmentRows("s0", 0, 9, 8),) and m.files[1].segments == ()
    assert decode(encode(m)) == m  # written again as version 2


def test_file_names_sort_by_offset() -> None:
    names = [file_name(b, "zz") for b in (0, 9, 10, 2**40)]
    assert sorted(names) == names and names[0] == "00000000000000000000-zz.parquet"
