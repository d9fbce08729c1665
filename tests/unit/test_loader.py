"""LogLoader: every startup rule of Kafka's LogLoader and every on-disk fault of issue 4, each recovered as Kafka's
LogLoader would (LogLoaderTest, LogSplitTest), with a WARNING saying what was found and what was done.

Damage is done to a closed log's files; the log is then reopened through ``Log.open`` (clean or unclean, as a
broker would after that kind of fault) and its offsets, contents, files and warnings are checked.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local import filenames, metrics, read_only
from local import loader as loader_module
from local.config import TopicConfig
from local.errors import CorruptIndexError
from local.index import OffsetIndex, TimeIndex, detect_entry_size
from local.loader import check_offset_index, check_time_index
from local.log import Log
from local.producer_state import AppendOrigin
from local.records import MemoryRecords
from local.scheduler import MockTime
from tests.logutil import read_all_values, records, topic_config

T0 = 1_700_000_000_000
BATCHES = 18
PER_SEGMENT = 6  # batches per segment: segments [0-5] [6-11] [12-17]

Values = list[tuple[int, bytes | None]]


def config(tmp_path: Path, **fields: object) -> TopicConfig:
    base: dict[str, object] = {
        "segment_bytes": 1 << 20,
        "index_interval_bytes": 1,  # an index entry per batch: corrupting an index always has entries to hit
        "file_delete_delay_ms": 0,
        "retention_ms": -1,
    }
    base.update(fields)
    return topic_config(tmp_path, **base)


def open_log(path: Path, cfg: TopicConfig, *, clean: bool = True, **kwargs: object) -> Log:
    return Log.open(path, cfg, time=MockTime(ms=T0 + 10_000), had_clean_shutdown=clean, **kwargs)  # type: ignore[arg-type]


def value(i: int) -> bytes:
    return b"value-%03d-" % i + b"x" * (i % 7)


def write_log(
    path: Path, cfg: TopicConfig, *, rolls: tuple[int, ...] = (6, 12), batches: int = BATCHES, producer: bool = False
) -> Values:
    """Append ``batches`` one-record batches (offset i holds value(i)), rolling before each offset in ``rolls``;
    close cleanly and return what was read back."""
    log = open_log(path, cfg)
    for i in range(batches):
        if i in rolls:
            log.roll()
        extra = {"producer_id": 11, "producer_epoch": 0, "base_sequence": i} if producer else {}
        log.append(records(value(i), timestamp=T0 + i, **extra))
    expected = read_all_values(log)
    assert [o for o, _ in expected] == list(range(batches))
    log.close()
    return expected


@pytest.fixture
def cfg(tmp_path: Path) -> TopicConfig:
    return config(tmp_path)


@pytest.fixture
def built(tmp_path: Path, cfg: TopicConfig) -> tuple[Path, Values]:
    path = tmp_path / "topic-0"
    return path, write_log(path, cfg)


def seg_file(path: Path, base: int, suffix: str) -> Path:
    return path / f"{filenames.filename_prefix_from_offset(base)}{suffix}"


def batch_positions(data: bytes) -> list[int]:
    """The start of every batch in a ``.log`` file's bytes (batchLength at byte 8 counts from byte 12)."""
    out, position = [], 0
    while position + 12 <= len(data):
        out.append(position)
        position += 12 + int.from_bytes(data[position + 8 : position + 12], "big")
    return out


def warnings_of(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


def snapshot_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


# ------------------------------------------------------------------------------------------------------------
# Clean and unclean starts


def test_clean_start_skips_recovery_and_warns_nothing(
    built: tuple[Path, Values], cfg: TopicConfig, caplog: pytest.LogCaptureFixture
) -> None:
    path, expected = built
    with caplog.at_level(logging.WARNING):
        log = open_log(path, cfg, recovery_point=0)
    assert read_all_values(log) == expected
    assert log.load_stats.segments_loaded == 3
    assert log.load_stats.segments_recovered == 0
    assert log.recovery_point == log.log_end_offset == BATCHES  # a clean start is fully flushed
    assert warnings_of(caplog) == ""
    log.close()


def test_unclean_start_recovers_from_the_recovery_point_only(built: tuple[Path, Values], cfg: TopicConfig) -> None:
    path, expected = built
    log = open_log(path, cfg, clean=False, recovery_point=8)
    assert read_all_values(log) == expected
    # the segment holding the recovery point (base 6) and every later one; segment 0 is trusted
    assert log.load_stats.segments_recovered == 2
    assert log.recovery_point == 8  # only a flush moves it forward
    log.close()


@pytest.mark.parametrize("junk", [b"\x00" * 40, b"\x17garbage\x99" * 5], ids=["zeros", "garbage"])
def test_junk_appended_to_the_log_is_truncated_on_an_unclean_start(
    built: tuple[Path, Values], cfg: TopicConfig, junk: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path, expected = built
    active = seg_file(path, 12, ".log")
    size = active.stat().st_size
    with active.open("ab") as f:
        f.write(junk)
    with caplog.at_level(logging.WARNING):
        log = open_log(path, cfg, clean=False, recovery_point=0)
    assert read_all_values(log) == expected
    assert log.load_stats.bytes_truncated == len(junk)
    assert active.stat().st_size == size
    assert f"truncated {len(junk)} byte" in warnings_of(caplog)
    log.append(records(b"after"))  # the log goes on from the recovered end
    assert read_all_values(log)[-1] == (BATCHES, b"after")
    log.close()


def test_flipped_byte_mid_segment_truncates_there_and_deletes_later_segments(
    built: tuple[Path, Values], cfg: TopicConfig, caplog: pytest.LogCaptureFixture
) -> None:
    path, expected = built
    middle = seg_file(path, 6, ".log")
    data = bytearray(middle.read_bytes())
    starts = batch_positions(bytes(data))
    # the 4th batch of segment 6 (offset 9): a byte inside its CRC-covered part
    data[starts[3] + 40] ^= 0xFF
    middle.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        log = open_log(path, cfg, clean=False, recovery_point=0)
    assert read_all_values(log) == expected[:9]
    assert log.log_end_offset == 9
    assert [s.base_offset for s in log.segments.values()] == [0, 6]
    assert not seg_file(path, 12, ".log").exists() and not seg_file(path, 12, ".index").exists()
    assert middle.stat().st_size == starts[3]
    text = warnings_of(caplog)
    assert "corruption found in segment 6" in text and "deleting the 1 later segment" in text
    log.close()


def test_a_read_only_view_of_a_corrupt_segment_ends_there_and_says_it_changes_nothing(
    built: tuple[Path, Values], cfg: TopicConfig, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """What `tiered consume` and `status` open after a crash: the same view a writer's recovery would leave, but no
    message may claim a truncation or a deletion that did not happen, and every file stays byte for byte."""
    path, expected = built
    middle = seg_file(path, 6, ".log")
    data = bytearray(middle.read_bytes())
    data[batch_positions(bytes(data))[3] + 40] ^= 0xFF
    middle.write_bytes(bytes(data))
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    scratch = read_only.scratch_partition_dir(path, tmp_path / "scratch")
    with caplog.at_level(logging.WARNING):
        log = open_log(scratch, cfg, clean=False, recovery_point=0, read_only=True)
    try:
        assert read_all_values(log) == expected[:9]
    finally:
        log.close()
    text = warnings_of(caplog)
    assert "corruption found in segment 6: this read-only view ends at offset 9" in text
    assert "and the 1 later segment(s); the files are not changed" in text
    assert f"reading {middle} only up to byte" in text  # the operator's file, not the scratch link
    assert "deleting" not in text and "truncating" not in text
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before


def test_clean_start_trusts_the_log_as_kafka_does(built: tuple[Path, Values], cfg: TopicConfig) -> None:
    # Kafka skips recovery (no CRC checks) after a clean shutdown: a flipped byte is only found by readers.
    path, _ = built
    middle = seg_file(path, 6, ".log")
    data = bytearray(middle.read_bytes())
    data[len(data) // 2] ^= 0xFF
    middle.write_bytes(bytes(data))
    log = open_log(path, cfg, recovery_point=0)
    assert log.load_stats.segments_recovered == 0
    assert log.log_end_offset == BATCHES
    log.close()


# ------------------------------------------------------------------------------------------------------------
# Index faults


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda b: b + b"\x00" * 16, id="zeros-appended"),
        pytest.param(lambda b: b + b"\xff" * 16, id="garbage-entries-appended"),
        pytest.param(lambda b: b + b"\x01\x02\x03\x04\x05", id="partial-entry-appended"),
        pytest.param(lambda b: b[:8] + b"\x7f" * 8 + b[16:], id="entry-overwritten"),
    ],
)
def test_corrupt_offset_index_is_rebuilt_byte_identical(
    built: tuple[Path, Values], cfg: TopicConfig, damage: Callable[[bytes], bytes], caplog: pytest.LogCaptureFixture
) -> None:
    path, expected = built
    index = seg_file(path, 6, ".index")
    before = index.read_bytes()
    assert len(before) == (PER_SEGMENT - 1) * 8  # no entry for the first batch (position 0)
    index.write_bytes(damage(before))
    with caplog.at_level(logging.WARNING):
        log = open_log(path, cfg, recovery_point=BATCHES)
    assert read_all_values(log) == expected
    assert log.load_stats.segments_recovered == 1
    assert "corrupt index" in warnings_of(caplog) and "00000000000000000006.log" in warnings_of(caplog)
    log.close()
    assert index.read_bytes() == before


def test_deleted_offset_index_is_rebuilt_byte_identical(
    built: tuple[Path, Values], cfg: TopicConfig, caplog: pytest.LogCaptureFixture
) -> None:
    path, expected = built
    index = seg_file(path, 0, ".index")
    time_index = seg_file(path, 0, ".timeindex")
    before, time_before = index.read_bytes(), time_index.read_bytes()
    index.unlink()
    with caplog.at_level(logging.WARNING):
        log = open_log(path, cfg)
    assert read_all_values(log) == expected
    assert log.segments.get(0).offset_index.lookup(4).offset == 4  # type: ignore[union-attr]
    assert "offset index of 00000000000000000000.log is missing" in warnings_of(caplog)
    log.close()
    assert index.read_bytes() == before
    assert time_index.read_bytes() == time_before


def test_an_empty_segment_without_an_index_is_loaded_quietly_and_its_index_made_when_used(
    built: tuple[Path, Values], cfg: TopicConfig, caplog: pytest.LogCaptureFixture
) -> None:
    path, expected = built
    log = open_log(path, cfg)
    log.roll()  # a new, empty active segment, closed before anything used its indexes
    log.close()
    last = len(expected)
    for suffix in (".index", ".timeindex"):
        seg_file(path, last, suffix).unlink(missing_ok=True)
    with caplog.at_level(logging.DEBUG):
        log = open_log(path, cfg)
    assert warnings_of(caplog) == "" and log.active_segment.base_offset == last
    assert not any("recover" in r.getMessage() for r in caplog.records if r.levelno >= logging.INFO)
    log.append(records(b"next", timestamp=T0 + 99))  # the index comes into being with the first entry due
    assert read_all_values(log) == [*expected, (last, b"next")]
    log.close()
    assert seg_file(path, last, ".index").exists()


def test_missing_index_of_an_unflushed_segment_is_expected_and_not_a_warning(
    built: tuple[Path, Values], cfg: TopicConfig, caplog: pytest.LogCaptureFixture
) -> None:
    # Kafka logs this at ERROR only for a clean start or a segment below the recovery point.
    path, expected = built
    seg_file(path, 12, ".index").unlink()
    with caplog.at_level(logging.INFO):
        log = open_log(path, cfg, clean=False, recovery_point=6)
    assert read_all_values(log) == expected
    assert "is missing" not in warnings_of(caplog)
    assert any("recovering unflushed segment 12 " in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
    log.close()


def test_truncated_time_index_is_rebuilt(
    built: tuple[Path, Values], cfg: TopicConfig, caplog: pytest.LogCaptureFixture
) -> None:
    path, expected = built
    time_index = seg_file(path, 0, ".timeindex")
    before = time_index.read_bytes()
    time_index.write_bytes(before[:-5])
    with caplog.at_level(logging.WARNING):
        log = open_log(path, cfg)
    assert read_all_values(log) == expected
    assert log.offset_for_timestamp(T0 + 3).offset == 3  # type: ignore[union-attr]
    assert "00000000000000000000.timeindex" in warnings_of(caplog)
    log.close()
    assert time_index.read_bytes() == before


def test_orphan_indexes_are_deleted(built: tuple[Path, Values], cfg: TopicConfig, caplog: pytest.LogCaptureFixture) -> None:
    path, expected = built
    for suffix in (".index", ".timeindex", ".txnindex"):
        seg_file(path, 99, suffix).write_bytes(b"\x00" * 24)
    with caplog.at_level(logging.WARNING):
        log = open_log(path, cfg)
    assert read_all_values(log) == expected
    for suffix in (".index", ".timeindex", ".txnindex"):
        assert not seg_file(path, 99, suffix).exists()
    assert log.load_stats.orphan_indexes_deleted == 3
    assert "orphaned index file 00000000000000000099.index" in warnings_of(caplog)
    log.close()


# ------------------------------------------------------------------------------------------------------------
# Producer snapshots


@pytest.mark.parametrize("damage", ["empty", "flipped-byte", "bad-version"])
def test_corrupt_latest_snapshot_falls_back_to_the_previous_one(tmp_path: Path, cfg: TopicConfig, damage: str) -> None:
    path = tmp_path / "topic-0"
    expected = write_log(path, cfg, producer=True)
    snapshots = sorted(path.glob("*.snapshot"))
    assert len(snapshots) >= 2
    latest = snapshots[-1]
    data = bytearray(latest.read_bytes())
    if damage == "empty":
        data = bytearray()
    elif damage == "flipped-byte":
        data[-3] ^= 0xFF
    else:
        data[0:2] = b"\x00\x07"
    latest.write_bytes(bytes(data))
    log = open_log(path, cfg)
    assert read_all_values(log) == expected
    # the producer state was rebuilt by replaying from the previous snapshot: a retry is still a duplicate
    retry = log.append(records(value(BATCHES - 1), timestamp=T0, producer_id=11, producer_epoch=0, base_sequence=BATCHES - 1))
    assert retry.duplicate and retry.first_offset == BATCHES - 1
    nxt = log.append(records(b"next", timestamp=T0, producer_id=11, producer_epoch=0, base_sequence=BATCHES))
    assert nxt.first_offset == BATCHES
    log.close()


# ------------------------------------------------------------------------------------------------------------
# .deleted, .cleaned and .swap files: every phase of a crashed split (Kafka's LogLoaderTest split phases)


SPLIT = (6, 9)  # segment [6-11] split into [6-8] and [9-11]


def split_segments(tmp_path: Path, cfg: TopicConfig) -> dict[int, dict[str, bytes]]:
    """The files of segments 6 and 9 of the same log rolled at (6, 9, 12): what splitting [6-11] produces."""
    other = tmp_path / "split-0"
    write_log(other, cfg, rolls=(6, 9, 12))
    out: dict[int, dict[str, bytes]] = {}
    for base in SPLIT:
        out[base] = {
            suffix: seg_file(other, base, suffix).read_bytes()
            for suffix in (".log", ".index", ".timeindex")
            if seg_file(other, base, suffix).exists()
        }
    shutil.rmtree(other)
    return out


def place(path: Path, base: int, files: dict[str, bytes], transient: str = "", *, empty: bool = False) -> None:
    for suffix, data in files.items():
        seg_file(path, base, suffix + transient).write_bytes(b"" if empty else data)


def rename_segment(path: Path, base: int, transient: str, *, empty: bool = False) -> None:
    for suffix in (".log", ".index", ".timeindex"):
        src = seg_file(path, base, suffix)
        if src.exists():
            dst = seg_file(path, base, suffix + transient)
            src.rename(dst)
            if empty:
                dst.write_bytes(b"")


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("phase", [1, 2, 3, 4, 5])
def test_recovery_after_crash_during_split(
    tmp_path: Path, cfg: TopicConfig, built: tuple[Path, Values], phase: int, threads: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path, expected = built
    new = split_segments(tmp_path, cfg)
    if phase == 1:
        # after the new segments were written as .cleaned, before any rename to .swap: the split is abandoned
        for base in SPLIT:
            place(path, base, new[base], filenames.CLEANED_FILE_SUFFIX, empty=True)
        bases = [0, 6, 12]
    elif phase == 2:
        # after the last new segment was renamed to .swap: it is part of an incomplete split, deleted
        place(path, 6, new[6], filenames.CLEANED_FILE_SUFFIX, empty=True)
        place(path, 9, new[9], filenames.SWAP_FILE_SUFFIX, empty=True)
        bases = [0, 6, 12]
    elif phase == 3:
        # all new segments renamed to .swap; the old one still there (its .deleted rename undone), emptied
        for base in SPLIT:
            place(path, base, new[base], filenames.SWAP_FILE_SUFFIX)
        for suffix in (".log", ".index", ".timeindex"):
            seg_file(path, 6, suffix).write_bytes(b"")
        bases = [0, 6, 9, 12]
    elif phase == 4:
        # all new segments renamed to .swap and the old segment deleted
        for base in SPLIT:
            place(path, base, new[base], filenames.SWAP_FILE_SUFFIX)
        for suffix in (".log", ".index", ".timeindex"):
            seg_file(path, 6, suffix).unlink()
        bases = [0, 6, 9, 12]
    else:
        # one new segment already renamed to its plain name, the other still .swap; the old one .deleted
        rename_segment(path, 6, filenames.DELETED_FILE_SUFFIX, empty=True)
        place(path, 6, new[6])
        place(path, 9, new[9], filenames.SWAP_FILE_SUFFIX)
        bases = [0, 6, 9, 12]
    with caplog.at_level(logging.WARNING):
        log = open_log(path, cfg, clean=False, recovery_point=0, num_segment_loading_threads=threads)
    assert read_all_values(log) == expected
    assert [s.base_offset for s in log.segments.values()] == bases
    leftovers = [p.name for p in path.iterdir() if p.name.endswith(filenames.TRANSIENT_SUFFIXES)]
    assert leftovers == []
    text = warnings_of(caplog)
    if phase in (1, 2):
        assert ".cleaned" in text
    if phase == 2:
        assert "00000000000000000009.log.swap" in text and "did not complete" in text
    if phase in (3, 4, 5):
        assert "00000000000000000009.log.swap" in text and "completing the swap" in text
    if phase == 3:
        assert "deleting 00000000000000000006.log: replaced by the swapped-in segment(s) [6, 12)" in text
    assert log.load_stats.swap_files_recovered == {3: 2, 4: 2, 5: 1}.get(phase, 0)  # .log.swap files completed
    log.close()


def test_swaps_at_or_above_the_lowest_of_several_cleaned_offsets_are_abandoned(
    tmp_path: Path, cfg: TopicConfig, built: tuple[Path, Values], caplog: pytest.LogCaptureFixture
) -> None:
    """A split of segment 6 crashed with both halves renamed to .swap but its .cleaned file for 6 left, beside an
    unrelated cleaning of 12: the lowest .cleaned offset (6, not the last one listed) bounds the split, and the
    swap at exactly 6 belongs to it: both swaps are deleted, the old segment 6 stays."""
    path, expected = built
    new = split_segments(tmp_path, cfg)
    place(path, 6, new[6], filenames.CLEANED_FILE_SUFFIX, empty=True)
    seg_file(path, 12, ".log.cleaned").write_bytes(seg_file(path, 12, ".log").read_bytes())
    for base in SPLIT:
        place(path, base, new[base], filenames.SWAP_FILE_SUFFIX)
    with caplog.at_level(logging.WARNING):
        log = open_log(path, cfg, clean=False, recovery_point=0)
    assert read_all_values(log) == expected
    assert [s.base_offset for s in log.segments.values()] == [0, 6, 12]
    assert [p.name for p in path.iterdir() if p.name.endswith(filenames.TRANSIENT_SUFFIXES)] == []
    text = warnings_of(caplog)
    why = "part of a split that did not complete (at or above the lowest .cleaned offset 6)"
    for base in SPLIT:
        assert f"deleting {base:020d}.log.swap: {why}" in text
    log.close()


def test_swap_below_the_lowest_cleaned_offset_is_completed(
    tmp_path: Path, cfg: TopicConfig, built: tuple[Path, Values], caplog: pytest.LogCaptureFixture
) -> None:
    path, expected = built
    new = split_segments(tmp_path, cfg)
    for base in SPLIT:
        place(path, base, new[base], filenames.SWAP_FILE_SUFFIX)
    # a later, unrelated cleaning of segment 12 that had not reached its swap
    seg_file(path, 12, ".log.cleaned").write_bytes(seg_file(path, 12, ".log").read_bytes())
    with caplog.at_level(logging.WARNING):
        log = open_log(path, cfg, clean=False, recovery_point=0)
    assert read_all_values(log) == expected
    assert [s.base_offset for s in log.segments.values()] == [0, 6, 9, 12]
    assert not seg_file(path, 12, ".log.cleaned").exists()
    assert "00000000000000000012.log.cleaned" in warnings_of(caplog)
    log.close()


def test_deleted_files_are_swept_but_kraft_snapshot_deletions_are_left_alone(
    built: tuple[Path, Values], cfg: TopicConfig
) -> None:
    path, expected = built
    stray = seg_file(path, 3, ".log.deleted")
    stray.write_bytes(b"old")
    kraft = path / "00000000000000000005-0000000001.checkpoint.deleted"
    kraft.write_bytes(b"kraft")
    log = open_log(path, cfg)
    assert read_all_values(log) == expected
    assert not stray.exists()
    assert kraft.exists()
    log.close()


# ------------------------------------------------------------------------------------------------------------
# Offsets


def test_log_end_below_log_start_starts_empty_at_the_log_start(
    built: tuple[Path, Values], cfg: TopicConfig, caplog: pytest.LogCaptureFixture
) -> None:
    path, _ = built
    with caplog.at_level(logging.WARNING):
        log = open_log(path, cfg, clean=False, log_start_offset=BATCHES + 10, recovery_point=BATCHES + 10)
    assert log.log_start_offset == log.log_end_offset == BATCHES + 10
    assert [s.base_offset for s in log.segments.values()] == [BATCHES + 10]
    assert not seg_file(path, 0, ".log").exists() and not seg_file(path, 12, ".log").exists()
    assert "log end offset 18 is below the log start offset 28" in warnings_of(caplog)
    assert log.load_stats.segments_deleted == 3
    assert log.leader_epoch_cache.epoch_entries() == []  # the epochs of the deleted data are gone
    assert log.producer_state_manager.producers == {} and log.producer_state_manager.map_end_offset == BATCHES + 10
    assert log.append(records(b"x")).first_offset == BATCHES + 10
    log.close()


def test_a_log_whose_end_is_its_start_keeps_its_segments(tmp_path: Path, cfg: TopicConfig) -> None:
    """Every record deleted (DeleteRecords to the log end): the log end equals the log start, nothing is below it."""
    path = tmp_path / "topic-0"
    write_log(path, cfg)
    log = open_log(path, cfg)
    log.delete_records(BATCHES)
    bases = [s.base_offset for s in log.segments.values()]
    log.close()
    log = open_log(path, cfg, log_start_offset=BATCHES)
    assert [s.base_offset for s in log.segments.values()] == bases
    assert log.load_stats.segments_deleted == 0 and log.load_stats.warnings == []
    assert log.segments.active_segment.created == T0 + 10_000  # type: ignore[union-attr]  # opened on the log's clock
    log.close()


@pytest.mark.parametrize("large,preallocate", [(False, False), (True, True)])
def test_an_empty_partition_gets_a_first_segment_as_configured(tmp_path: Path, large: bool, preallocate: bool) -> None:
    cfg = config(tmp_path, preallocate=preallocate, segment_ms=60_000)
    path = tmp_path / "topic-0"
    log = open_log(path, cfg, use_large_index=large)
    active = log.segments.active_segment
    assert active is not None and active.base_offset == 0
    assert active.offset_index.is_large_format is large
    assert seg_file(path, 0, ".log").stat().st_size == (1 << 20 if preallocate else 0)
    assert active.created == T0 + 10_000  # the log's clock, which rolls it by segment.ms
    log.close()


def test_bytes_truncated_add_up_over_the_recovered_segments(
    built: tuple[Path, Values], cfg: TopicConfig
) -> None:
    path, expected = built
    for base, junk in ((0, 7), (6, 11)):
        with seg_file(path, base, ".log").open("ab") as f:
            f.write(b"\xee" * junk)
        index = seg_file(path, base, ".index")
        index.write_bytes(index.read_bytes() + b"\x01")  # corrupt: the segment is recovered
    log = open_log(path, cfg)
    assert (log.load_stats.segments_recovered, log.load_stats.bytes_truncated) == (2, 18)
    assert read_all_values(log) == expected
    log.close()


def test_log_start_checkpoint_above_first_segment_is_kept(built: tuple[Path, Values], cfg: TopicConfig) -> None:
    path, expected = built
    log = open_log(path, cfg, log_start_offset=8)
    assert log.log_start_offset == 8
    assert read_all_values(log) == expected[8:]
    log.close()


def test_active_segment_indexes_are_resized_to_their_maximum(built: tuple[Path, Values], cfg: TopicConfig) -> None:
    path, _ = built
    log = open_log(path, cfg)
    active = log.active_segment
    assert active.offset_index.max_entries == cfg.segment_index_bytes // 8
    assert not active.offset_index.is_full
    log.close()


# ------------------------------------------------------------------------------------------------------------
# What the loader is given: the epoch cache, the remote tier's log start, read-only files, the thread count


def write_epochs(path: Path, cfg: TopicConfig) -> None:
    """Three segments written in leader epochs 0, 1 and 2 (offsets 0, 6 and 12 on)."""
    log = open_log(path, cfg)
    for i in range(BATCHES):
        if i and i % PER_SEGMENT == 0:
            log.roll()
        log.append(records(value(i), timestamp=T0 + i), leader_epoch=i // PER_SEGMENT)
    log.close()


LINEAGE = [(0, 0), (1, 6), (2, 12)]


def epochs(log: Log) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()]


def test_epochs_past_the_loaded_log_end_are_dropped(tmp_path: Path, cfg: TopicConfig) -> None:
    path = tmp_path / "topic-0"
    write_epochs(path, cfg)
    checkpoint = path / filenames.LEADER_EPOCH_CHECKPOINT_FILENAME
    checkpoint.write_text("0\n4\n0 0\n1 6\n2 12\n7 100\n")  # an epoch starting past the log end (18)
    log = open_log(path, cfg)
    assert epochs(log) == LINEAGE
    log.close()


def test_unclean_recovery_rebuilds_the_epochs_from_the_batches(tmp_path: Path, cfg: TopicConfig) -> None:
    path = tmp_path / "topic-0"
    write_epochs(path, cfg)
    (path / filenames.LEADER_EPOCH_CHECKPOINT_FILENAME).unlink()
    log = open_log(path, cfg, clean=False)
    assert epochs(log) == LINEAGE
    log.close()


@pytest.mark.parametrize("remote_data", [True, False])
def test_a_partition_with_remote_data_keeps_its_log_start_below_the_local_segments(
    tmp_path: Path, cfg: TopicConfig, remote_data: bool
) -> None:
    """The first segment is gone locally (copied, then deleted by local retention): with remote data the log start
    stays at the checkpointed 0 (offsets 0-5 are remote); without, it moves up to the first local segment."""
    path = tmp_path / "topic-0"
    write_log(path, cfg)
    if remote_data:
        log = open_log(path, cfg)
        log.note_highest_remote_offset(5)
        log.close()
    for suffix in (".log", ".index", ".timeindex"):
        seg_file(path, 0, suffix).unlink()
    log = open_log(path, cfg, log_start_offset=0)
    assert log.log_start_offset == (0 if remote_data else PER_SEGMENT)
    assert log.segments.first_segment.base_offset == PER_SEGMENT  # type: ignore[union-attr]
    log.close()


def test_a_read_only_load_opens_every_log_file_read_only(built: tuple[Path, Values], cfg: TopicConfig) -> None:
    path, expected = built
    log = open_log(path, cfg, read_only=True)
    assert read_all_values(log) == expected
    for segment in log.segments.values():
        with pytest.raises(PermissionError, match="not open for appending"):
            segment.log.append(b"x")
    log.close()


def test_the_load_time_is_measured_in_milliseconds(
    built: tuple[Path, Values], cfg: TopicConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = built
    ticks = iter([100.0, 100.25])
    monkeypatch.setattr(loader_module, "_time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    log = open_log(path, cfg)
    assert log.load_stats.elapsed_ms == 250.0
    log.close()


@pytest.mark.parametrize("clean", [True, False])
def test_a_clean_shutdown_without_producer_snapshots_starts_with_empty_ones(
    tmp_path: Path, cfg: TopicConfig, clean: bool
) -> None:
    """Kafka's rule for a log from a broker that wrote no snapshots: after a clean shutdown, empty snapshots at the
    last two segments and the log end instead of a scan of every segment; after a crash, the scan."""
    path = tmp_path / "topic-0"
    write_log(path, cfg, producer=True)
    for snapshot in path.glob("*.snapshot"):
        snapshot.unlink()
    log = open_log(path, cfg, clean=clean)
    producers = log.producer_state_manager.producers
    assert (11 in producers) is not clean
    assert sorted(p.name for p in path.glob("*.snapshot")) == [f"{o:020d}.snapshot" for o in (6, 12, BATCHES)]
    log.close()


def test_a_corrupt_transaction_index_is_found_at_load(
    built: tuple[Path, Values], cfg: TopicConfig, caplog: pytest.LogCaptureFixture
) -> None:
    path, expected = built
    seg_file(path, 6, ".txnindex").write_bytes(b"\x00" * 10)  # not a whole number of 34-byte entries
    with caplog.at_level(logging.WARNING):
        log = open_log(path, cfg)
    assert log.load_stats.segments_recovered == 1
    assert "00000000000000000006.txnindex" in warnings_of(caplog)
    assert read_all_values(log) == expected
    log.close()


def test_a_missing_time_index_is_created_empty_without_a_recovery(built: tuple[Path, Values], cfg: TopicConfig) -> None:
    """Kafka's rule: a segment with an offset index but no time index gets an empty time index (a plain file, not a
    preallocated one); nothing needs recovering."""
    path, expected = built
    time_index = seg_file(path, 6, ".timeindex")
    time_index.unlink()
    umask = os.umask(0)
    os.umask(umask)
    log = open_log(path, cfg)
    assert log.load_stats.segments_recovered == 0
    assert time_index.stat().st_size == 0 and stat.S_IMODE(time_index.stat().st_mode) == 0o644 & ~umask
    assert read_all_values(log) == expected
    log.close()


@pytest.mark.parametrize("threads", [1, 3])
def test_load_listeners_hear_each_partition_by_name(built: tuple[Path, Values], cfg: TopicConfig, threads: int) -> None:
    path, _ = built
    heard: list[tuple[str, str, str, object]] = []

    class Listener:
        def partition_loading(self, data_dir: str, partition: str, segments: int) -> None:
            heard.append(("loading", data_dir, partition, segments))

        def segments_opened(self, data_dir: str, partition: str, count: int) -> None:
            heard.append(("opened", data_dir, partition, count))

        def partition_loaded(self, data_dir: str, partition: str, summary: object) -> None:
            heard.append(("loaded", data_dir, partition, dict(summary)["segments_loaded"]))  # type: ignore[call-overload]

    with metrics.load_listener(Listener()):
        open_log(path, cfg, num_segment_loading_threads=threads).close()
    assert {(data_dir, partition) for _, data_dir, partition, _ in heard} == {(str(path.parent), path.name)}
    assert heard[0][::3] == ("loading", 3) and heard[-1][::3] == ("loaded", 3)
    assert sum(n for kind, _, _, n in heard if kind == "opened") == 3  # type: ignore[misc]


@pytest.mark.parametrize("threads", [1, 4])
def test_a_corrupt_index_below_the_recovery_point_is_recovered_after_a_crash(
    built: tuple[Path, Values], cfg: TopicConfig, caplog: pytest.LogCaptureFixture, threads: int
) -> None:
    """After a crash, the segments from the recovery point on are recovered anyway (step 4); a flushed segment
    below it with a corrupt index is not among them, so phase 2 recovers it, with a warning."""
    path, expected = built
    index = seg_file(path, 0, ".index")
    index.write_bytes(index.read_bytes() + b"\x01\x02\x03")
    with caplog.at_level(logging.INFO):
        log = open_log(path, cfg, clean=False, recovery_point=12, num_segment_loading_threads=threads)
    assert log.load_stats.segments_recovered == 2  # segment 0 in phase 2, segment 12 as unflushed
    assert "in the 12-byte format" not in caplog.text  # the large-index feature is off: nothing is upgraded
    assert "recovering 00000000000000000000.log and rebuilding its index files" in warnings_of(caplog)
    assert read_all_values(log) == expected
    assert seg_file(path, 0, ".index").stat().st_size == (PER_SEGMENT - 1) * 8
    log.close()


def test_recovery_rebuilds_a_segments_aborted_transactions(tmp_path: Path, cfg: TopicConfig) -> None:
    """A segment holding an aborted transaction loses its indexes: its recovery replays the producer state and
    writes the transaction index again (one 34-byte entry)."""
    path = tmp_path / "topic-0"
    log = open_log(path, cfg)
    log.append(records(b"t0", b"t1", timestamp=T0, producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True))
    log.append(MemoryRecords.end_transaction_marker(5, 0, commit=False, timestamp=T0), origin=AppendOrigin.COORDINATOR)
    log.append(records(b"after", timestamp=T0))
    log.roll()
    log.append(records(b"active", timestamp=T0))
    log.close()
    txn_index = seg_file(path, 0, ".txnindex")
    assert txn_index.stat().st_size == 34
    for suffix in (".index", ".timeindex", ".txnindex"):
        seg_file(path, 0, suffix).unlink()
    log = open_log(path, cfg)
    assert log.load_stats.segments_recovered == 1
    assert txn_index.stat().st_size == 34
    assert [(t.producer_id, t.first_offset) for t in log.collect_aborted_transactions(0, 4)] == [(5, 0)]
    log.close()


@pytest.mark.parametrize("junk", [1, 5])
def test_a_truncated_unflushed_segment_takes_the_later_ones_with_it(
    built: tuple[Path, Values], cfg: TopicConfig, junk: int
) -> None:
    """Even one byte of junk truncated from an unflushed segment (not the last) deletes every segment after it;
    with several loading threads, the recovery's progress counts down to 0."""
    path, expected = built
    with seg_file(path, 6, ".log").open("ab") as f:
        f.write(b"\xee" * junk)
    progress: list[tuple[str, int | None]] = []
    log = open_log(
        path, cfg, clean=False, recovery_point=0, num_segment_loading_threads=2,
        remaining_segments_callback=lambda thread, remaining: progress.append((thread, remaining)),
    )
    assert [s.base_offset for s in log.segments.values()] == [0, 6]
    assert (log.load_stats.bytes_truncated, log.load_stats.segments_deleted) == (junk, 1)
    assert read_all_values(log) == expected[:12]
    main = threading.current_thread().name
    assert [r for t, r in progress if t == main] == [3, 2, 0, None]  # two recovered, then done, then removed
    log.close()


def test_segment_file_names_give_their_base_offsets() -> None:
    assert loader_module._base_offset("00000000000000000007.log") == 7
    assert loader_module._base_offset("00000000000000000012.timeindex.deleted") == 12
    assert loader_module._base_offset("00000000000000000012.") == 12
    for name in ("00000000000000000000", "00000000000000000000x.log", "0000000000000000000a.log",
                 "leader-epoch-checkpoint", "0000000000000000001.log"):
        assert loader_module._base_offset(name) is None, name


def test_the_load_summary_names_every_counter() -> None:
    stats = loader_module.LoadStats(
        segments_loaded=1, segments_recovered=2, segments_deleted=3, bytes_truncated=4, orphan_indexes_deleted=5,
        swap_files_recovered=6, offsets_lost=8, elapsed_ms=7.123456, warnings=["left out"],
    )
    assert loader_module.stats_summary(stats) == {
        "segments_loaded": 1, "segments_recovered": 2, "segments_deleted": 3, "bytes_truncated": 4,
        "orphan_indexes_deleted": 5, "swap_files_recovered": 6, "offsets_lost": 8, "elapsed_ms": 7.123,
    }


def test_a_thread_count_below_one_is_refused(built: tuple[Path, Values], cfg: TopicConfig) -> None:
    path, _ = built
    with pytest.raises(ValueError, match=r"^num.segment.loading.threads.per.data.dir must be >= 1, got 0$"):
        open_log(path, cfg, num_segment_loading_threads=0)


# ------------------------------------------------------------------------------------------------------------
# Index format upgrade on rebuild (KIP-1333)


def test_rebuilt_index_uses_the_large_format_once_finalized(built: tuple[Path, Values], cfg: TopicConfig) -> None:
    path, expected = built
    corrupt = seg_file(path, 0, ".index")
    corrupt.write_bytes(corrupt.read_bytes() + b"\x01\x02\x03")
    seg_file(path, 6, ".index").unlink()
    intact = seg_file(path, 12, ".index")
    log = open_log(path, cfg, use_large_index=True)
    assert read_all_values(log) == expected
    assert log.segments.get(0).offset_index.is_large_format  # type: ignore[union-attr]
    assert log.segments.get(6).offset_index.is_large_format  # type: ignore[union-attr]
    assert not log.segments.get(12).offset_index.is_large_format  # type: ignore[union-attr]
    assert log.segments.get(12).offset_index.lookup(15).offset == 15  # type: ignore[union-attr]
    log.close()
    for base in (0, 6):
        index = seg_file(path, base, ".index")
        assert index.stat().st_size == (PER_SEGMENT - 1) * 12
        assert detect_entry_size(index, 8) == 12
    assert intact.stat().st_size == (PER_SEGMENT - 1) * 8
    # reopened without the feature the 12-byte files keep being read by detection
    again = open_log(path, cfg)
    assert read_all_values(again) == expected
    assert again.load_stats.segments_recovered == 0
    again.close()


def test_unclean_recovery_upgrades_only_what_it_rebuilds(
    built: tuple[Path, Values], cfg: TopicConfig, caplog: pytest.LogCaptureFixture
) -> None:
    path, expected = built
    with caplog.at_level(logging.INFO, logger="local.loader"):
        log = open_log(path, cfg, clean=False, recovery_point=12, use_large_index=True)
    rebuilt = [r.getMessage() for r in caplog.records if "recovering unflushed segment" in r.getMessage()]
    assert rebuilt == [f"{path.name}: recovering unflushed segment 12 (0/1)"]  # its index written anew, 12-byte
    assert read_all_values(log) == expected
    formats = {s.base_offset: s.offset_index.is_large_format for s in log.segments.values()}
    assert formats == {0: False, 6: False, 12: True}
    log.close()


# ------------------------------------------------------------------------------------------------------------
# The golden Kafka 4.0 log dir


@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("partition,end_offset", [("foo-0", 3), ("__cluster_metadata-0", 116)])
def test_golden_kafka_dir_loads_with_every_batch_readable(
    golden_dir: Path, tmp_path: Path, partition: str, end_offset: int, clean: bool, caplog: pytest.LogCaptureFixture
) -> None:
    path = golden_dir / partition
    before = {name: data for name, data in snapshot_files(path).items() if name.endswith((".log", ".index"))}
    positions = batch_positions(before["00000000000000000000.log"])
    with caplog.at_level(logging.WARNING):
        log = open_log(path, config(tmp_path, index_interval_bytes=4096), clean=clean, recovery_point=0)
    assert log.log_end_offset == end_offset
    found = list(log.batches_from(log.log_start_offset))
    assert len(found) == len(positions)
    assert found[-1].last_offset + 1 == end_offset
    for batch in found:
        for record in batch.records():
            assert record.offset <= batch.last_offset
    assert log.load_stats.bytes_truncated == 0
    assert warnings_of(caplog) == ""
    log.close()
    assert (path / "00000000000000000000.log").read_bytes() == before["00000000000000000000.log"]


# ------------------------------------------------------------------------------------------------------------
# Read-only files


def test_unreadable_file_fails_the_load_clearly(built: tuple[Path, Values], cfg: TopicConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = built
    victim = seg_file(path, 6, ".log")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: Path(p) != victim and real_access(p, mode, **kw))
    with pytest.raises(OSError, match=r"cannot read .*00000000000000000006\.log") as err:
        open_log(path, cfg)
    assert err.value.path == str(victim)  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------------------------
# The loader's byte-level index checks agree with the index classes


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    entries=st.lists(st.tuples(st.integers(-3, 60), st.integers(-3, 5000)), max_size=40),
    entry_size=st.sampled_from([8, 12]),
    requested=st.sampled_from([8, 12]),
    log_size=st.integers(0, 5000),
    tail=st.binary(max_size=30),
)
def test_check_offset_index_agrees_with_offset_index_sanity_check(
    tmp_path: Path, entries: list[tuple[int, int]], entry_size: int, requested: int, log_size: int, tail: bytes
) -> None:
    fmt = ">ii" if entry_size == 8 else ">iq"
    data = b"".join(struct.pack(fmt, rel, pos) for rel, pos in sorted(entries)) + tail
    index_path = tmp_path / "00000000000000000100.index"
    index_path.write_bytes(data)
    (tmp_path / "00000000000000000100.log").write_bytes(b"\x00" * log_size)
    try:
        index = OffsetIndex(index_path, 100, 1 << 20, writable=False, use_large_format=requested == 12)
        try:
            index.sanity_check()
            count = index.entries
            expected_ok = count == 0 or index.entry(count - 1).position < log_size
        finally:
            index.close()
    except CorruptIndexError:
        expected_ok = False
    assert (check_offset_index(data, 100, log_size, requested) is None) == expected_ok


@given(entries=st.lists(st.tuples(st.integers(-2, 10**6), st.integers(-2, 50)), max_size=30), tail=st.binary(max_size=13))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_check_time_index_agrees_with_time_index_sanity_check(
    tmp_path: Path, entries: list[tuple[int, int]], tail: bytes
) -> None:
    data = b"".join(struct.pack(">qi", ts, rel) for ts, rel in sorted(entries)) + tail
    path = tmp_path / "00000000000000000100.timeindex"
    path.write_bytes(data)
    index = TimeIndex(path, 100, 1 << 20, writable=False)
    try:
        index.sanity_check()
        expected_ok = True
    except CorruptIndexError:
        expected_ok = False
    finally:
        index.close()
    assert (check_time_index(data) is None) == expected_ok
