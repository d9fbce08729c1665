"""Holes (issue 27, item 6): a closed segment in the middle of a log cut short by a careless hand.

The next writer's load recovers it (its index points past its end, or bytes after its last whole batch are torn),
keeps the later segments and records the lost offsets in ``tiered-lost-offsets`` with an ERROR naming the operator's
file and the range. Then: a read there raises ``LostOffsetsError`` (never the next batch, as for a compaction gap);
``tiered verify`` reports it (exit 1); ``tiered consume`` prints it in one line naming the real file (never a
read-only view's scratch path) and exits 1. A read-only view of a dir no writer has recovered yet reads the same and
changes nothing. Retention and truncation forget what they remove. The HTTP side is in test_run_server (unit and
integration)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from local import LogConfig, LogManager, read_only
from local.errors import CorruptCheckpointError, LostOffsetsError
from local.log import Log, LogStartOffsetIncrementReason
from local.lost_offsets import LOST_OFFSETS_FILENAME, LostOffsets, LostOffsetsFile, LostOffsetsSet
from local.records import MemoryRecords, SimpleRecord
from tests.logutil import read_all_values
from tests.unit.test_verify import tree_hashes

PER_SEGMENT = 1000


def _value(i: int) -> bytes:
    return b"v%d" % i


def _write(data: Path, segments: int = 3, **props: str) -> Path:
    """A partition t-0 of ``segments`` closed-and-flushed segments of PER_SEGMENT one-record batches (the last one
    active), closed cleanly; returns the partition dir."""
    config = LogConfig.from_properties({"log.dirs": str(data), **props})
    with LogManager(config, start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0)
        for i in range(segments * PER_SEGMENT):
            if i and i % PER_SEGMENT == 0:
                log.roll()
            log.append(MemoryRecords.build([SimpleRecord(value=_value(i), key=b"k")]))
        log.flush()
    return data / "t-0"


def _open(data: Path) -> LogManager:
    return LogManager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False)


def _segment(pdir: Path, base: int) -> Path:
    return pdir / f"{base:020d}.log"


def _values_before(log: Log, start: int, stop: int) -> list[tuple[int, bytes | None]]:
    out: list[tuple[int, bytes | None]] = []
    while start < stop:
        for batch in log.read(start).records.batches():
            out += [(r.offset, r.value) for r in batch.records() if start <= r.offset < stop]
            start = batch.last_offset + 1
    return out


def _cli(*args: str) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "tiered.cli", *args], capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


# The record: codec and set ------------------------------------------------------------------------------------------


@given(st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**20), st.integers(0, 2**40)), max_size=5))
def test_the_record_round_trips_in_kafkas_checkpoint_format(rows: list[tuple[int, int, int]]) -> None:
    import tempfile

    entries = [LostOffsets(first, first + span, position, f"{first:020d}.log") for first, span, position in rows]
    with tempfile.TemporaryDirectory() as tmp:
        record = LostOffsetsFile(tmp)
        record.write(entries)
        assert record.read() == entries
        if entries:
            text = record.path.read_text()
            assert text.splitlines()[:2] == ["0", str(len(entries))]
            assert text.splitlines()[2] == f"{rows[0][0]} {rows[0][0] + rows[0][1]} {rows[0][2]} {rows[0][0]:020d}.log"
        else:
            assert not record.path.exists(), "no hole, no file"
        assert not (Path(tmp) / (LOST_OFFSETS_FILENAME + ".tmp")).exists()


@pytest.mark.parametrize("text", ["0\n1\n5 4 0 x.log\n", "0\n1\n5 9 0\n", "0\n2\n5 9 0 x.log\n", "1\n0\n", "0\n1\n-1 3 0 a\n"])
def test_a_malformed_record_is_an_error_naming_the_file(tmp_path: Path, text: str) -> None:
    (tmp_path / LOST_OFFSETS_FILENAME).write_text(text)
    with pytest.raises(CorruptCheckpointError, match=str(tmp_path / LOST_OFFSETS_FILENAME)):
        LostOffsetsFile(tmp_path).read()


def test_the_set_finds_forgets_below_a_start_and_cuts_at_a_truncation(tmp_path: Path) -> None:
    lost = LostOffsetsSet(tmp_path, read_only=False)
    lost.add(LostOffsets(100, 199, 7, "a.log"))
    lost.add(LostOffsets(300, 399, 9, "b.log"))
    assert [lost.find(o) for o in (99, 100, 199, 200, 399)] == [None, lost.entries[0], lost.entries[0], None, lost.entries[1]]
    assert LostOffsetsSet(tmp_path, read_only=False).entries == lost.entries  # durable
    lost.truncate_from(350)
    assert lost.entries[1] == LostOffsets(300, 349, 9, "b.log")
    lost.truncate_from(300)
    lost.drop_below(150)
    assert lost.entries == (LostOffsets(100, 199, 7, "a.log"),), "a range the start is inside of stays"
    lost.drop_below(200)
    assert lost.entries == () and not lost.path.exists()
    view = LostOffsetsSet(tmp_path, read_only=True)
    view.add(LostOffsets(1, 2, 3, "c.log"))
    assert view.find(1) is not None and not view.is_recorded(view.entries[0]) and not view.path.exists()


# A writer's load ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cut", [1000, 0])  # inside a batch (a torn one: bytes truncated), and the whole file
def test_a_middle_segment_cut_by_hand_is_recorded_and_reads_there_raise(
    tmp_path: Path, cut: int, caplog: pytest.LogCaptureFixture
) -> None:
    pdir = _write(tmp_path / "data")
    middle = _segment(pdir, PER_SEGMENT)
    os.truncate(middle, cut)
    with caplog.at_level(logging.ERROR), _open(tmp_path / "data") as manager:
        log = manager.get_log("t", 0)
        assert log is not None
        first_lost = log.lost_offsets.entries[0].first_offset
        assert (first_lost == PER_SEGMENT) == (cut == 0) and first_lost < 2 * PER_SEGMENT
        assert [s.base_offset for s in log.segments.values()] == [0, PER_SEGMENT, 2 * PER_SEGMENT], "later ones kept"
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert errors == [f"t-0: {middle} was damaged: recovery cut it at byte {middle.stat().st_size} and offsets "
                          f"{first_lost}..{2 * PER_SEGMENT - 1} are lost (recorded in {pdir / LOST_OFFSETS_FILENAME}; "
                          f"reads there fail, tiered verify reports them); the later segments, from offset "
                          f"{2 * PER_SEGMENT}, are kept"]
        for offset in (first_lost, 1999):
            with pytest.raises(LostOffsetsError) as err:
                log.read(offset)
            assert (err.value.first_offset, err.value.last_offset, err.value.next_offset, err.value.path) == (  # type: ignore[attr-defined]
                first_lost, 1999, 2000, str(middle))
        assert _values_before(log, 0, first_lost) == [(i, _value(i)) for i in range(first_lost)]
        with pytest.raises(LostOffsetsError):
            read_all_values(log, 0)  # a consumer from the start stops at the hole: it never skips it
        assert read_all_values(log, 2000) == [(i, _value(i)) for i in range(2000, 3000)]
        assert log.load_stats.offsets_lost == 2000 - first_lost
    assert LostOffsetsFile(pdir).read() == [LostOffsets(first_lost, 1999, middle.stat().st_size, middle.name)]
    with _open(tmp_path / "data") as manager:  # the next load: the record stays, nothing more is cut
        log = manager.get_log("t", 0)
        assert log is not None and log.load_stats.segments_recovered == 0 and log.lost_offsets.find(1500) is not None


def test_a_middle_segments_log_deleted_by_hand_is_a_recorded_hole_not_a_silent_skip(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A closed middle segment's .log removed while stopped, its indexes left (a helper's pass): the loader deleted
    the "orphaned" indexes and reads went on at the next segment, past 120 acknowledged records without a word, as
    Kafka's do. The missing file's offsets are recorded as lost now, named in an ERROR, and reads there fail."""
    pdir = _write(tmp_path / "data")
    middle = _segment(pdir, PER_SEGMENT)
    middle.unlink()
    with caplog.at_level(logging.ERROR), _open(tmp_path / "data") as manager:
        log = manager.get_log("t", 0)
        assert log is not None
        assert log.lost_offsets.entries == (LostOffsets(PER_SEGMENT, 2 * PER_SEGMENT - 1, 0, middle.name),)
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert any(str(middle) in e and f"offsets {PER_SEGMENT}..{2 * PER_SEGMENT - 1} are lost" in e for e in errors)
        with pytest.raises(LostOffsetsError):
            read_all_values(log, 0)  # a consumer from the start stops at the hole: it never skips it
        with pytest.raises(LostOffsetsError):
            log.read(PER_SEGMENT + 5)
        assert read_all_values(log, 2 * PER_SEGMENT)[0] == (2 * PER_SEGMENT, _value(2 * PER_SEGMENT))
    code, out, _ = _cli("verify", "--log-dirs", str(tmp_path / "data"))
    assert code == 1 and "lost_offsets" in out, out


def test_verify_reports_the_recorded_hole_and_consume_stops_there_naming_the_real_file(tmp_path: Path) -> None:
    pdir = _write(tmp_path / "data")
    middle = _segment(pdir, PER_SEGMENT)
    os.truncate(middle, 1000)
    with _open(tmp_path / "data") as manager:
        log = manager.get_log("t", 0)
        assert log is not None
        first_lost = log.lost_offsets.entries[0].first_offset
    code, out, err = _cli("verify", "--log-dirs", str(tmp_path / "data"))
    assert code == 1, out + err
    assert (f"{middle}, position {middle.stat().st_size}, offset {first_lost}: [lost_offsets] offsets {first_lost}..1999 "
            f"of t-0 were lost") in out
    code, out, err = _cli("consume", "--log-dirs", str(tmp_path / "data"), "-t", "t", "--offset", "990")
    assert code == 1
    assert out.split() == [_value(i).decode() for i in range(990, first_lost)]
    assert err.count("\n") == 1 and "tiered-read-only" not in err, err
    assert err.startswith(f"tiered consume: offsets {first_lost}..1999 of t-0 were lost: a recovery found {middle} "
                          "damaged")
    assert err.rstrip().endswith(f"offset {first_lost} cannot be read, the log goes on at offset 2000")
    code, out, err = _cli("consume", "--log-dirs", str(tmp_path / "data"), "-t", "t", "--offset", "2000")
    assert code == 0 and out.split() == [_value(i).decode() for i in range(2000, 3000)], err


def test_a_compaction_gap_is_no_problem_for_verify_and_reads_on(tmp_path: Path) -> None:
    # the same shape as a hole (segment 0 ends at 4, the next starts at 10) but intact: what a cleaner leaves
    data = tmp_path / "data"
    with _open(data) as manager:
        log = manager.get_or_create_log("t", 0)
        log.append_as_follower(MemoryRecords.build([SimpleRecord(value=b"a", key=b"k")] * 5, base_offset=0))
        log.roll(10)
        log.append_as_follower(MemoryRecords.build([SimpleRecord(value=b"b", key=b"k")], base_offset=10))
        assert next(log.read(7).records.batches()).base_offset == 10
    code, out, err = _cli("verify", "--log-dirs", str(data))
    assert code == 0, out + err


def test_a_read_only_view_of_a_dir_no_writer_recovered_reads_the_same_and_changes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pdir = _write(tmp_path / "data")
    middle = _segment(pdir, PER_SEGMENT)
    os.truncate(middle, 1000)
    before = tree_hashes(pdir)
    scratch = read_only.scratch_partition_dir(pdir, tmp_path / "scratch")
    from tests.logutil import topic_config

    with caplog.at_level(logging.ERROR):
        log = Log.open(scratch, topic_config(tmp_path), read_only=True)
    try:
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and f"t-0: {middle} is damaged: this read-only view ends it at byte" in errors[0]
        assert "the files are not changed" in errors[0] and str(tmp_path / "scratch") not in errors[0]
        first_lost = log.lost_offsets.entries[0].first_offset
        with pytest.raises(LostOffsetsError) as err:
            log.read(1500)
        assert str(err.value).startswith(f"offsets {first_lost}..1999 of t-0 are lost to damage: {middle} is damaged "
                                         "from byte")
        assert "a writer opening the dir would cut it there" in str(err.value) and "scratch" not in str(err.value)
        assert read_all_values(log, 2000)[0] == (2000, _value(2000))
    finally:
        log.close()
    assert tree_hashes(pdir) == before


def test_retention_past_a_hole_forgets_it_and_a_truncation_into_it_cuts_it(tmp_path: Path) -> None:
    pdir = _write(tmp_path / "data", segments=4)
    os.truncate(_segment(pdir, PER_SEGMENT), 1000)
    with _open(tmp_path / "data") as manager:
        log = manager.get_log("t", 0)
        assert log is not None
        first_lost = log.lost_offsets.entries[0].first_offset
        log.truncate_to(2500)
        assert log.lost_offsets.entries[0].last_offset == 1999, "a truncation after the hole leaves it"
        log.maybe_increment_log_start_offset(1500, LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION)
        assert log.lost_offsets.find(1600) is not None, "the log start inside the hole: the rest is still lost"
        log.maybe_increment_log_start_offset(2000, LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION)
        assert log.lost_offsets.entries == () and not (pdir / LOST_OFFSETS_FILENAME).exists()
    pdir = _write(tmp_path / "other", segments=3)
    os.truncate(_segment(pdir, PER_SEGMENT), 1000)
    with _open(tmp_path / "other") as manager:
        log = manager.get_log("t", 0)
        assert log is not None
        first_lost = log.lost_offsets.entries[0].first_offset
        log.truncate_to(1500)  # a follower truncating into the hole: the offsets from there are written anew
        assert LostOffsetsFile(pdir).read() == [LostOffsets(first_lost, 1499, log.lost_offsets.entries[0].position,
                                                            _segment(pdir, PER_SEGMENT).name)]
