"""The one batch walk (``local.records.walk``): Kafka's sizing rule, the same over a buffer and over a file, and
every reader that walks batches agreeing with it."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local.errors import CorruptRecordError
from local.file_records import FileRecords
from local.records import MemoryRecords, SimpleRecord
from local.records.constants import (
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    RECORD_OVERHEAD_V0,
    min_batch_size,
)
from local.records.legacy import build_legacy_message
from local.records.walk import batch_size, checked_batch_size, last_offset, walk_batches


def _batch(base: int, n: int = 2, value: bytes = b"v" * 40) -> bytes:
    buf = bytearray(bytes(MemoryRecords.build([SimpleRecord(value, key=b"k", timestamp=1000 + i) for i in range(n)])))
    struct.pack_into(">q", buf, 0, base)
    return bytes(buf)


def _with_length(batch: bytes, length: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">i", out, 8, length)
    return bytes(out)


def _file(tmp_path: Path, data: bytes) -> FileRecords:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    return FileRecords.open(path)


def test_min_batch_sizes_are_kafkas() -> None:
    assert (min_batch_size(2), min_batch_size(1), min_batch_size(0)) == (61, 34, 26)
    assert RECORD_BATCH_OVERHEAD == 61 and LOG_OVERHEAD + RECORD_OVERHEAD_V0 == 26


def test_batch_size_rules_in_kafkas_order() -> None:
    good = _batch(0)
    assert batch_size(good, 0, len(good)) == len(good)
    assert batch_size(good, 0, len(good) - 1) is None  # runs past the end: a torn tail
    assert batch_size(good, 0, LOG_OVERHEAD - 1) is None  # no room for a size: the walk ends
    # A size below the smallest v0 message is corrupt as soon as the size field is there (rule 2)...
    with pytest.raises(CorruptRecordError, match="below the minimum 26"):
        batch_size(_with_length(good, RECORD_OVERHEAD_V0 - 1), 0, LOG_OVERHEAD)
    # ...but a sane size with the magic byte not yet there only ends the walk (rule 3).
    assert batch_size(good, 0, HEADER_SIZE_UP_TO_MAGIC - 1) is None
    bad_magic = bytearray(good)
    bad_magic[16] = 3
    with pytest.raises(CorruptRecordError, match="unknown magic 3"):
        batch_size(bad_magic, 0, len(good))
    bad_magic[16] = 0xFF
    with pytest.raises(CorruptRecordError, match="unknown magic -1"):
        batch_size(bad_magic, 0, len(good))
    # A v2 batch shorter than its header is corrupt even though a v0 message of that size would not be (rule 5).
    with pytest.raises(CorruptRecordError, match="below the minimum 61 of magic 2"):
        batch_size(_with_length(good, 30), 0, len(good))
    legacy = build_legacy_message(7, b"k", b"v", magic=0)
    assert batch_size(legacy, 0, len(legacy)) == len(legacy)


def test_errors_name_the_position_origin_and_context() -> None:
    data = _batch(0) + _with_length(_batch(2), 20)
    with pytest.raises(CorruptRecordError) as info:
        list(walk_batches(data, origin="seg.log", base_position=1000, context={"path": "seg.log"}))
    first = len(_batch(0))
    assert f"batch at position {1000 + first} of seg.log" in str(info.value)
    assert info.value.context["position"] == 1000 + first and info.value.context["path"] == "seg.log"


@pytest.mark.parametrize("window", [64, 100, 4096])
@pytest.mark.parametrize("reuse", [False, True])
def test_a_file_walk_sees_what_a_buffer_walk_sees(tmp_path: Path, window: int, reuse: bool) -> None:
    data = b"".join(_batch(i * 10, n=1 + i % 3, value=b"x" * (i * 7)) for i in range(20))
    data += _batch(200)[:50]  # a torn tail
    records = _file(tmp_path, data)
    try:
        in_buffer = [(p, s, bytes(v[a : a + s])) for p, s, v, a in walk_batches(data)]
        in_file = [(p, s, bytes(v[a : a + s]))
                   for p, s, v, a in walk_batches(records.read_into, len(data), window=window, reuse=reuse)]
    finally:
        records.close()
    assert in_file == in_buffer
    assert len(in_buffer) == 20 and sum(s for _, s, _ in in_buffer) == len(data) - 50


def test_a_header_walk_reads_headers_only(tmp_path: Path) -> None:
    big = _batch(0, n=3, value=b"z" * 100_000)
    data = big + _batch(3)
    reads: list[int] = []
    records = _file(tmp_path, data)

    def read_into(position: int, buf: memoryview) -> int:
        reads.append(len(buf))
        return records.read_into(position, buf)

    try:
        heads = [(p, s, last_offset(v, a)) for p, s, v, a in walk_batches(read_into, len(data), whole=False, window=512)]
    finally:
        records.close()
    assert heads == [(0, len(big), 2), (len(big), len(data) - len(big), 4)]
    assert max(reads) <= 512  # the large batch was skipped, never read


def test_last_offset_of_v2_and_legacy() -> None:
    assert last_offset(_batch(100, n=5), 0) == 104
    assert last_offset(build_legacy_message(42, None, b"v", magic=1), 0) == 42


def test_checked_batch_size_has_no_end() -> None:
    good = _batch(0)
    assert checked_batch_size(good[:HEADER_SIZE_UP_TO_MAGIC], 0) == len(good)
    with pytest.raises(CorruptRecordError, match="remote segment x"):
        checked_batch_size(_with_length(good, 20), 0, 5, "remote segment x")


def test_readers_agree_on_a_v2_batch_too_short_for_its_header(tmp_path: Path) -> None:
    # Once the walkers disagreed: a size of 26 passed some (the v0 minimum) and not others.
    data = _batch(0) + _with_length(_batch(2), 26 - LOG_OVERHEAD)
    with pytest.raises(CorruptRecordError, match="below the minimum 61"):
        list(MemoryRecords(data).batches(verify=False))
    records = _file(tmp_path, data)
    try:
        with pytest.raises(CorruptRecordError, match="below the minimum 61"):
            list(records.batches(verify=False))
        with pytest.raises(CorruptRecordError, match="below the minimum 61"):
            records.search_for_offset_from_position(5, 0)
    finally:
        records.close()


def test_memory_records_strict_names_a_torn_tail() -> None:
    good = _batch(0)
    with pytest.raises(CorruptRecordError, match=f"truncated batch at position 0: declares {len(good)} bytes"):
        MemoryRecords(good[:-4]).validate()
    with pytest.raises(CorruptRecordError, match=f"truncated batch header at position {len(good)}"):
        MemoryRecords(good + good[:5]).validate()
    assert MemoryRecords(good + good[:5]).next_offset() == 2


def test_file_walk_stops_when_the_file_shrinks(tmp_path: Path) -> None:
    data = _batch(0) + _batch(2)
    records = _file(tmp_path, data)
    try:
        walk = walk_batches(records.read_into, len(data), window=len(_batch(0)))
        assert next(walk)[0] == 0
        os.truncate(records.path, len(_batch(0)) + 10)  # cut under the walk: not a whole header any more
        assert list(walk) == []
    finally:
        records.close()


def _outcome(walk: Any) -> tuple[list[tuple[int, int]], str | None]:
    seen: list[tuple[int, int]] = []
    try:
        for position, size, _, _ in walk:
            seen.append((position, size))
    except CorruptRecordError as exc:
        return seen, str(exc)
    return seen, None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parts=st.lists(st.sampled_from(["v2", "legacy0", "legacy1"]), max_size=6),
    cut=st.integers(0, 40),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    window=st.sampled_from([20, 61, 100, 4096]),
)
def test_buffer_and_file_walks_agree_on_any_bytes(
    tmp_path: Path, parts: list[str], cut: int, flips: list[tuple[int, int]], window: int
) -> None:
    # The rule's fast path (a sound v2 batch) and batch_size must answer alike: batches, then the same error.
    data = bytearray()
    for n, kind in enumerate(parts):
        data += _batch(n * 3, n=1 + n % 2) if kind == "v2" else build_legacy_message(n * 3, b"k", b"v" * n, magic=int(kind[-1]))
    for at, value in flips:
        if data:
            data[at % len(data)] = value
    data = data[: max(0, len(data) - cut)]
    path = tmp_path / f"walk-{window}.log"
    path.write_bytes(bytes(data))
    records = FileRecords.open(path)
    try:
        in_buffer = _outcome(walk_batches(bytes(data)))
        assert _outcome(walk_batches(records.read_into, len(data), window=window)) == in_buffer
        assert _outcome(walk_batches(records.read_into, len(data), whole=False, window=window)) == in_buffer
    finally:
        records.close()
