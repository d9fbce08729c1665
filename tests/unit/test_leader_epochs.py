"""Truncation and the leader-epoch cache: ``Log.truncate_to`` drops the epochs that began at or past the
truncation point (in memory and in ``leader-epoch-checkpoint``), and ``truncate_fully_and_start_at`` (also
reached by ``truncate_to`` below the first segment) empties the log, its epochs and its producer state."""

from __future__ import annotations

from pathlib import Path

import pytest

from local.checkpoint import LeaderEpochCheckpointFile
from local.epoch import EpochEntry, LeaderEpochFileCache
from local.scheduler import MockTime
from tests.logutil import make_log, read_all_values, records

T0 = 1_700_000_000_000


def _epochs(log: object) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()]  # type: ignore[attr-defined]


def _checkpoint(log: object) -> list[tuple[int, int]]:
    path = log.dir / "leader-epoch-checkpoint"  # type: ignore[attr-defined]
    return [(e.epoch, e.start_offset) for e in LeaderEpochCheckpointFile(path).read()]


def _log_with_three_epochs(tmp_path: Path, clock: MockTime):  # type: ignore[no-untyped-def]
    """Offsets 0-4 in epoch 0, 5-9 in epoch 3, 10-14 in epoch 5 (one record a batch, small segments)."""
    log = make_log(tmp_path, time=clock, segment_bytes=400)
    for epoch, first in ((0, 0), (3, 5), (5, 10)):
        if epoch:
            log.assign_epoch_start_offset(epoch)
        for i in range(first, first + 5):
            log.append(records(b"%d" % i * 20, timestamp=T0 + i, producer_id=7, producer_epoch=0, base_sequence=i))
    assert _epochs(log) == [(0, 0), (3, 5), (5, 10)]
    assert log.number_of_segments() > 2
    return log


def test_truncate_to_drops_the_epochs_that_begin_at_or_after_the_truncation_point(tmp_path: Path) -> None:
    clock = MockTime(ms=T0)
    log = _log_with_three_epochs(tmp_path, clock)
    assert log.truncate_to(12)
    assert _epochs(log) == [(0, 0), (3, 5), (5, 10)] == _checkpoint(log)  # epoch 5 still has offsets 10, 11
    assert log.truncate_to(10)  # exactly where epoch 5 began: it goes
    assert _epochs(log) == [(0, 0), (3, 5)] == _checkpoint(log)
    assert log.latest_epoch == 3
    assert log.end_offset_for_epoch(3) == (3, 10)
    assert log.end_offset_for_epoch(5) == (-1, -1)  # an epoch this log no longer knows
    assert log.truncate_to(6)
    assert _epochs(log) == [(0, 0), (3, 5)] == _checkpoint(log)
    assert log.truncate_to(5)
    assert _epochs(log) == [(0, 0)] == _checkpoint(log)
    assert log.end_offset_for_epoch(0) == (0, 5)
    assert [o for o, _ in read_all_values(log)] == [0, 1, 2, 3, 4]
    # a new leader epoch starts at the new log end, and a reopened log reads the same lineage
    log.assign_epoch_start_offset(7)
    log.append(records(b"after", timestamp=T0 + 100))
    assert _epochs(log) == [(0, 0), (7, 5)]
    log.close()
    again = make_log(tmp_path, time=clock, segment_bytes=400)
    assert _epochs(again) == [(0, 0), (7, 5)]
    assert again.leader_epoch_cache.epoch_for_offset(5) == 7
    again.close()


def test_truncate_to_the_log_end_or_beyond_changes_nothing(tmp_path: Path) -> None:
    log = _log_with_three_epochs(tmp_path, MockTime(ms=T0))
    assert not log.truncate_to(15) and not log.truncate_to(100)
    assert _epochs(log) == [(0, 0), (3, 5), (5, 10)] and log.log_end_offset == 15


def test_truncate_fully_and_start_at_empties_log_epochs_and_producer_state(tmp_path: Path) -> None:
    log = _log_with_three_epochs(tmp_path, MockTime(ms=T0))
    old_segments = sorted(p.name for p in log.dir.glob("*.log"))
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.local_log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100, 100)
    assert log.recovery_point == 100
    assert log.number_of_segments() == 1 and log.active_segment.base_offset == 100
    assert _epochs(log) == [] == _checkpoint(log)
    assert log.latest_epoch is None
    assert read_all_values(log) == []
    # the old segments are renamed .deleted at once (removed later)
    assert not any((log.dir / name).exists() for name in old_segments)
    # the producer's state went too: its next batch is accepted whatever its sequence
    info = log.append(records(b"fresh", timestamp=T0 + 1, producer_id=7, producer_epoch=0, base_sequence=0))
    assert not info.duplicate and info.first_offset == 100
    assert read_all_values(log) == [(100, b"fresh")]


def test_truncate_to_below_the_first_segment_truncates_fully(tmp_path: Path) -> None:
    clock = MockTime(ms=T0)
    log = _log_with_three_epochs(tmp_path, clock)
    log.delete_records(9)
    log.delete_old_segments()  # segments wholly below offset 9 go
    first = log.segments.first_segment
    assert first is not None and first.base_offset > 4
    target = first.base_offset - 1
    assert log.truncate_to(target)
    assert (log.log_start_offset, log.log_end_offset) == (target, target)
    assert _epochs(log) == [] == _checkpoint(log)
    assert log.number_of_segments() == 1 and log.active_segment.base_offset == target


def test_epoch_cache_truncation_rules() -> None:
    cache = LeaderEpochFileCache("t-0")
    for epoch, start in ((0, 0), (2, 10), (4, 20)):
        cache.assign(epoch, start)
    cache.truncate_from_end(25)  # nothing starts at or after 25
    assert cache.epoch_entries() == [EpochEntry(0, 0), EpochEntry(2, 10), EpochEntry(4, 20)]
    cache.truncate_from_end(20)
    assert cache.epoch_entries() == [EpochEntry(0, 0), EpochEntry(2, 10)]
    cache.assign(4, 20)
    cache.truncate_from_start(15)  # epoch 2 now starts at 15; epoch 0 is gone
    assert cache.epoch_entries() == [EpochEntry(2, 15), EpochEntry(4, 20)]
    cache.truncate_from_start(20)  # exactly where epoch 4 starts
    assert cache.epoch_entries() == [EpochEntry(4, 20)]
    cache.truncate_from_start(5)  # below everything: no change
    assert cache.epoch_entries() == [EpochEntry(4, 20)]
    assert cache.epoch_for_offset(19) is None and cache.epoch_for_offset(20) == 4 and cache.epoch_for_offset(99) == 4


class _CountingCheckpoint:
    """A checkpoint that keeps what it was last given and counts the writes."""

    def __init__(self, entries: list[EpochEntry] | None = None) -> None:
        self.entries = list(entries or [])
        self.writes = 0

    def read(self) -> list[EpochEntry]:
        return list(self.entries)

    def write(self, entries: list[EpochEntry]) -> None:
        self.entries = list(entries)
        self.writes += 1


def _cache(*entries: tuple[int, int]) -> tuple[LeaderEpochFileCache, _CountingCheckpoint]:
    checkpoint = _CountingCheckpoint([EpochEntry(e, s) for e, s in entries])
    return LeaderEpochFileCache("t-0", checkpoint), checkpoint  # type: ignore[arg-type]


def _pairs(cache: LeaderEpochFileCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.epoch_entries()]


def test_assign_rejects_a_negative_epoch_or_start_offset() -> None:
    cache, _ = _cache()
    for epoch, start in ((-1, 0), (0, -1), (-1, -1)):
        with pytest.raises(ValueError, match=r"invalid epoch entry .* for t-0"):
            cache.assign(epoch, start)
    assert cache.is_empty()


def test_assign_of_the_latest_epoch_again_changes_and_writes_nothing() -> None:
    cache, checkpoint = _cache((0, 0), (3, 5))
    cache.assign(3, 5)  # the same entry
    cache.assign(3, 9)  # the latest epoch, later: it began at 5 already
    assert _pairs(cache) == [(0, 0), (3, 5)] and checkpoint.writes == 0
    cache.assign(3, 4)  # the latest epoch, earlier: it now begins at 4
    assert _pairs(cache) == [(0, 0), (3, 4)] == [(e.epoch, e.start_offset) for e in checkpoint.entries]
    assert checkpoint.writes == 1


def test_assign_keeps_only_entries_below_both_the_new_epoch_and_its_start() -> None:
    cache, _ = _cache((0, 0), (2, 10), (4, 20))
    cache.assign(5, 15)  # epoch 4 starts past 15: it goes, though its epoch is lower
    assert _pairs(cache) == [(0, 0), (2, 10), (5, 15)]
    cache, _ = _cache((0, 0), (2, 10), (4, 20))
    cache.assign(2, 15)  # epoch 2 again, later than it began: the old epoch-2 entry goes too
    assert _pairs(cache) == [(0, 0), (2, 15)]
    cache, _ = _cache((0, 0), (2, 10))
    cache.assign(3, 10)  # a new epoch starting where the last began: the last goes
    assert _pairs(cache) == [(0, 0), (3, 10)]
    assert cache.previous_epoch() == 0 and cache.latest_epoch() == 3


def test_end_offset_for_every_kind_of_requested_epoch() -> None:
    cache, _ = _cache((2, 10), (4, 20), (6, 30))
    assert cache.end_offset_for(6, 40) == (6, 40)  # the latest: the log end
    assert cache.end_offset_for(4, 40) == (4, 30)  # a known epoch: where the next begins
    assert cache.end_offset_for(5, 40) == (4, 30)  # unknown, between two: the floor epoch
    assert cache.end_offset_for(1, 40) == (1, 10)  # below every epoch: the first start
    assert cache.end_offset_for(7, 40) == (-1, -1)  # above every epoch
    assert cache.end_offset_for(-1, 40) == (-1, -1)  # UNDEFINED_EPOCH
    empty, _ = _cache()
    assert empty.end_offset_for(0, 5) == (-1, -1)


def test_truncate_from_end_at_zero_empties_and_a_negative_offset_is_ignored() -> None:
    cache, checkpoint = _cache((0, 0), (2, 10))
    cache.truncate_from_end(-1)
    assert _pairs(cache) == [(0, 0), (2, 10)] and checkpoint.writes == 0
    cache.truncate_from_end(0)
    assert cache.is_empty() and checkpoint.entries == [] and checkpoint.writes == 1
    cache.truncate_from_end(0)  # nothing left: no write
    assert checkpoint.writes == 1


def test_epoch_entries_in_range_clip_the_first_and_stop_before_the_end() -> None:
    cache, _ = _cache((0, 0), (2, 10), (4, 20))
    assert cache.epoch_entries_in_range(0, 100) == [EpochEntry(0, 0), EpochEntry(2, 10), EpochEntry(4, 20)]
    assert cache.epoch_entries_in_range(12, 20) == [EpochEntry(2, 12)]  # [12, 20): epoch 4 begins at the end
    assert cache.epoch_entries_in_range(10, 21) == [EpochEntry(2, 10), EpochEntry(4, 20)]
    assert cache.epoch_entries_in_range(5, 11) == [EpochEntry(0, 5), EpochEntry(2, 10)]
    assert cache.epoch_entries_in_range(25, 30) == [EpochEntry(4, 25)]  # the last epoch runs on
    assert cache.epoch_entries_in_range(20, 20) == []
    assert _cache()[0].epoch_entries_in_range(0, 10) == []


def test_small_queries() -> None:
    cache, _ = _cache((1, 0), (5, 7))
    assert not cache.is_empty() and cache.previous_epoch() == 1 and cache.latest_epoch() == 5
    assert cache.earliest_entry == EpochEntry(1, 0) and cache.latest_entry == EpochEntry(5, 7)
    one, _ = _cache((1, 0))
    assert one.previous_epoch() is None
    none, _ = _cache()
    assert none.is_empty() and none.latest_epoch() is None and none.previous_epoch() is None
    assert none.latest_entry is None and none.earliest_entry is None and none.epoch_for_offset(3) is None
    assert [cache.epoch_for_offset(o) for o in (0, 6, 7, 100)] == [1, 1, 5, 5]


def test_write_to_hands_the_writer_a_copy_of_the_entries() -> None:
    cache, _ = _cache((1, 0), (5, 7))
    got: list[list[EpochEntry]] = []
    cache.write_to(got.append)
    assert got == [[EpochEntry(1, 0), EpochEntry(5, 7)]]
    got[0].clear()  # the writer's list is its own
    assert _pairs(cache) == [(1, 0), (5, 7)]
