"""The active segment's append in C (``local/_appendcore.c``) leaves exactly what its Python definition leaves.

``LogSegment._py_append_batch_if_room`` (with ``OffsetIndex.append`` and ``TimeIndex.maybe_append``) is the
definition; the native ``append_batch_if_room`` takes the common case and hands every other one back to it. Two logs
get the same appends, one through the native path and one with the class's ``append_batch_if_room`` set to the
Python definition: every append answers the same, and at the end both directories hold byte-identical files and the
segments the same bookkeeping (size, first and largest timestamps, bytes since the last index entry, entries).
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from local import native
from local.errors import KafkaStorageError
from local.log import Log
from local.records import MemoryRecords, SimpleRecord
from local.scheduler import MockTime
from local.segment import LogSegment
from tests.logutil import topic_config

T0 = 1_700_000_000_000
ROOT = Path(__file__).resolve().parents[2]


def test_the_native_append_is_built_and_used_where_a_compiler_exists() -> None:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        assert not native.NATIVE_APPEND
        assert LogSegment.append_batch_if_room is LogSegment._py_append_batch_if_room
        assert LogSegment._index_batch is LogSegment._py_index_batch
        return
    assert native.NATIVE_APPEND, f"{compiler} exists but local._appendcore was not built (pip install -e .)"
    assert LogSegment.append_batch_if_room is native.SegmentCore.append_batch_if_room
    assert LogSegment._index_batch is native.SegmentCore._index_batch


@contextmanager
def python_path() -> Iterator[None]:
    """Every segment appends through the Python definition while inside."""
    native = LogSegment.append_batch_if_room, LogSegment._index_batch
    LogSegment.append_batch_if_room = LogSegment._py_append_batch_if_room  # type: ignore[method-assign]
    LogSegment._index_batch = LogSegment._py_index_batch  # type: ignore[method-assign]
    try:
        yield
    finally:
        LogSegment.append_batch_if_room, LogSegment._index_batch = native  # type: ignore[method-assign]


# value sizes, timestamp deltas, clock advance (ms) before the append, codec (a compressed batch takes the log's
# general path: LogSegment.append and _index_batch)
Batch = tuple[list[int], list[int], int, str]


def _run(directory: Path, batches: list[Batch], config_fields: dict[str, Any]) -> tuple[list[Any], Log]:
    time = MockTime(ms=T0)
    random.seed(17)  # the same roll jitter for both logs
    log = Log.open(directory, topic_config(directory.parent, **config_fields), time=time, scheduler=time.scheduler)
    answers = []
    for sizes, deltas, advance, codec in batches:
        time.sleep(advance)
        recs = [SimpleRecord(T0 + d if d >= -T0 else -1, None, b"v" * n) for n, d in zip(sizes, deltas, strict=True)]
        try:
            answers.append(log.append(MemoryRecords.build(recs, codec)))
        except KafkaStorageError as refused:  # too large for the segment: both refuse alike
            answers.append(f"{type(refused).__name__}: {refused}")
    return answers, log


def _segment_state(segment: LogSegment) -> tuple[Any, ...]:
    return (
        segment.base_offset, segment.size, segment.rolling_based_timestamp, segment.max_timestamp_so_far,
        segment.offset_of_max_timestamp_so_far, segment.bytes_since_last_index_entry, segment.offset_index.entries,
        segment.time_index.entries, segment.time_index.last_entry,
    )


def _files(directory: Path) -> dict[str, bytes]:
    """Every file's bytes, but partition.metadata (a random topic id)."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file() and p.name != "partition.metadata"}


def assert_same_appends(batches: list[Batch], **config_fields: Any) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="appendcore-"))
    try:
        native_answers, native_log = _run(tmp / "a" / "t-0", batches, config_fields)
        with python_path():
            python_answers, python_log = _run(tmp / "b" / "t-0", batches, config_fields)
        try:
            assert native_answers == python_answers
            assert [_segment_state(s) for s in native_log.segments.values()] == [
                _segment_state(s) for s in python_log.segments.values()
            ]
            assert native_log.log_end_offset == python_log.log_end_offset
            assert _files(tmp / "a" / "t-0") == _files(tmp / "b" / "t-0")  # the active indexes' preallocated zeros too
        finally:
            native_log.close()
            python_log.close()
        assert _files(tmp / "a" / "t-0") == _files(tmp / "b" / "t-0")  # closed: indexes trimmed, roll entries written
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


timestamp_deltas = st.one_of(st.integers(-5_000, 5_000), st.just(-T0 - 1))  # -T0 - 1: no timestamp (-1)


@st.composite
def batch_runs(draw: st.DrawFn) -> list[Batch]:
    out = []
    for _ in range(draw(st.integers(1, 60))):
        n = draw(st.integers(1, 6))
        sizes = draw(st.lists(st.sampled_from([0, 1, 40, 300, 1500]), min_size=n, max_size=n))
        deltas = draw(st.lists(timestamp_deltas, min_size=n, max_size=n))
        out.append((sizes, deltas, draw(st.sampled_from([0, 0, 0, 1, 700, 5_000])),
                    draw(st.sampled_from(["none", "none", "none", "gzip"]))))
    return out


@settings(max_examples=60, deadline=None)
@given(
    batches=batch_runs(),
    segment_bytes=st.integers(200, 12_000),
    index_interval=st.sampled_from([1, 64, 500, 4096]),
    index_entries=st.sampled_from([2, 3, 5, 64, 1000]),
    segment_ms=st.sampled_from([1_000, 3_000, 7 * 24 * 3600 * 1000]),
    jitter_ms=st.sampled_from([0, 400]),
)
def test_native_and_python_appends_leave_the_same_log(
    batches: list[Batch], segment_bytes: int, index_interval: int, index_entries: int, segment_ms: int,
    jitter_ms: int,
) -> None:
    """Rolls by size, by time (message time and, without timestamps, the clock; with jitter) and by full indexes
    (a small ``segment.index.bytes``), index entries at every interval, timestamps up, down and absent, plain
    batches (the fast path) and compressed ones (the general path) mixed."""
    assert_same_appends(
        batches, segment_bytes=segment_bytes, index_interval_bytes=index_interval, segment_ms=segment_ms,
        segment_jitter_ms=jitter_ms, segment_index_bytes=index_entries * 12,
        message_timestamp_before_max_ms=2**62, message_timestamp_after_max_ms=2**62,
    )


def test_native_and_python_appends_agree_past_allocation_steps_and_warm_section_moves() -> None:
    """Over 8192 offset-index entries (one 64 KiB allocation step) and many moves of the warm search section: the
    native path hands each of those appends to the Python one, and the files still match."""
    batches: list[Batch] = [([1], [i % 7], 0, "none" if i % 50 else "gzip") for i in range(9_000)]
    assert_same_appends(batches, index_interval_bytes=1, segment_bytes=1 << 30)


def test_an_append_into_a_segment_with_unloaded_indexes_loads_them(tmp_path: Path) -> None:
    """A new segment's indexes are lazy: the first append opens them, and its entries land in them."""
    segment = LogSegment.open(tmp_path, 0, index_interval_bytes=1)
    try:
        assert not segment._lazy_offset_index.is_loaded and not segment._lazy_time_index.is_loaded
        for offset, timestamp in ((0, T0), (1, T0 + 9), (2, T0 + 4)):
            batch = bytes(MemoryRecords.build([SimpleRecord(timestamp, None, b"v")], base_offset=offset))
            assert segment.append_batch_if_room(offset, timestamp, batch, T0, 1 << 20, 10**9)
        assert segment.offset_index.entries == 2  # the second and third batches (more than 1 byte since)
        assert (segment.max_timestamp_so_far, segment.offset_of_max_timestamp_so_far) == (T0 + 9, 1)
        assert segment.time_index.last_entry.timestamp == T0 + 9
        assert [b.base_offset for b in segment.read(0, 1 << 20).records.batches()] == [0, 1, 2]
    finally:
        segment.close()


# allowed-skip: without the C build there is no native method to call (the fallback has its own test below)
@pytest.mark.skipif(not native.NATIVE_APPEND, reason="the native append is not built here: nothing to call")
def test_the_native_method_refuses_wrong_arguments(tmp_path: Path) -> None:
    segment = LogSegment.open(tmp_path, 0)
    try:
        with pytest.raises(TypeError, match="takes 6 or 7 arguments"):
            segment.append_batch_if_room(1, 2, b"x")  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            segment.append_batch_if_room("1", 2, b"x", 0, 100, 100)  # type: ignore[arg-type]
        assert segment.size == 0
    finally:
        segment.close()


def test_a_failed_write_names_the_segment_file_and_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An fd's OSError names no file: the append path gives it the .log file's path, and the bookkeeping stays."""
    segment = LogSegment.open(tmp_path, 0, index_interval_bytes=1)

    def full(*args: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    try:
        monkeypatch.setattr(segment.log, "append", full)
        batch = bytes(MemoryRecords.build([SimpleRecord(T0, None, b"v")]))
        with pytest.raises(OSError) as info:
            segment.append_batch_if_room(0, T0, batch, T0, 1 << 20, 10**9)
        assert info.value.filename == str(segment.log.path)
        assert (segment.size, segment.rolling_based_timestamp, segment.bytes_since_last_index_entry) == (0, None, 0)
    finally:
        segment.close()


def test_without_the_c_build_the_python_definitions_run(tmp_path: Path) -> None:
    """A machine without a C compiler: the cores are plain classes, and a log appends, rolls, reads and reopens."""
    script = f"""
import sys
sys.modules["local._appendcore"] = None  # as if never built
from pathlib import Path
from local import native
from local.errors import KafkaStorageError
from local.segment import LogSegment
from local.records import MemoryRecords, SimpleRecord
from tests.logutil import make_log, read_all_values
assert not native.NATIVE_APPEND
assert LogSegment.append_batch_if_room is LogSegment._py_append_batch_if_room
assert LogSegment._index_batch is LogSegment._py_index_batch
log = make_log(Path({str(tmp_path)!r}), segment_bytes=300, index_interval_bytes=1)
for i in range(20):
    log.append(MemoryRecords.build([SimpleRecord(1_700_000_000_000 + i, None, b"v%d" % i)]))
assert log.number_of_segments() > 1, log.number_of_segments()
log.close()
log = make_log(Path({str(tmp_path)!r}), segment_bytes=300, index_interval_bytes=1)
assert read_all_values(log) == [(i, b"v%d" % i) for i in range(20)], read_all_values(log)
log.close()
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
