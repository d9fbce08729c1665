"""The local log's retention, log start and truncation rules one at a time, at their boundaries.

Written from a mutation run of ``local/log.py`` (``python -m bench mutation local/log.py --only '*retention*' ...``,
TESTING.md): each test pins a rule whose change no other fast test noticed. The remote tier is a stand-in that
answers the one question local retention asks it (how far the finished remote copies reach), so that the rule
"with a remote tier, only segments fully copied are deleted" is tested at its exact boundary.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from local.errors import OffsetOutOfRangeError, RemoteStorageNotConfiguredError
from local.log import Log, LogStartOffsetIncrementReason
from local.scheduler import MockTime
from tests.logutil import make_log, read_all_values, records

T0 = 1_700_000_000_000


class CopiedUpTo:
    """A remote tier whose finished copies reach ``highest`` (-1: nothing copied)."""

    def __init__(self, highest: int) -> None:
        self.highest = highest
        self.asked: list[Any] = []

    def highest_offset_in_remote_storage(self, log: Any) -> int:
        self.asked.append(log)
        return self.highest


def _segments_of_ten(log: Log, count: int, timestamp: int = T0) -> None:
    """``count`` closed segments of 10 records each (bases 0, 10, 20, ...), then an empty active segment."""
    for _ in range(count):
        log.append(records(*[b"v"] * 10, timestamp=timestamp))
        log.roll()


def _bases(log: Log) -> list[int]:
    return [s.base_offset for s in log.segments.values()]


def _remote_log(tmp_path: Path, highest: int, time: MockTime | None = None, **fields: Any) -> tuple[Log, CopiedUpTo]:
    log = make_log(tmp_path, time=time, **{"remote_storage_enable": True, "local_retention_bytes": 0, **fields})
    tier = CopiedUpTo(highest)
    log.remote_tier = tier  # type: ignore[assignment]
    return log, tier


@pytest.mark.parametrize(("highest", "deleted"), [(-1, []), (8, []), (9, [0]), (18, [0]), (19, [0, 10]), (39, [0, 10, 20, 30])])
def test_with_a_remote_tier_local_retention_deletes_only_segments_copied_to_their_last_offset(
        tmp_path: Path, highest: int, deleted: list[int]) -> None:
    log, tier = _remote_log(tmp_path, highest)
    _segments_of_ten(log, 4)
    assert log.delete_old_segments() == len(deleted)
    assert tier.asked and all(asked is log for asked in tier.asked)
    assert _bases(log) == [b for b in (0, 10, 20, 30, 40) if b not in deleted]
    assert log.local_log_start_offset == (deleted[-1] + 10 if deleted else 0)
    assert log.log_start_offset == 0  # the data is still in the remote tier
    log.close()


def test_local_retention_remembers_how_far_the_remote_copies_reach_even_offset_0(tmp_path: Path) -> None:
    log, _ = _remote_log(tmp_path, 0)
    for _ in range(3):
        log.append(records(b"v"))
        log.roll()
    assert log.delete_old_segments() == 1  # segment 0 holds offset 0 alone, copied
    assert (log.has_remote_data, log.remote_log_state.highest_remote_offset) == (True, 0)
    log.close()


def test_local_retention_stops_at_the_first_segment_that_does_not_qualify(tmp_path: Path) -> None:
    time = MockTime(ms=T0 + 10_000)
    log, _ = _remote_log(tmp_path, 39, time=time, local_retention_bytes=-1, local_retention_ms=5_000)
    _segments_of_ten(log, 2, timestamp=T0)  # old
    _segments_of_ten(log, 1, timestamp=T0 + 9_000)  # young
    _segments_of_ten(log, 1, timestamp=T0)  # old again, but after a young one
    assert log.delete_old_segments() == 2
    assert _bases(log) == [20, 30, 40]
    log.close()


def test_a_segment_is_deletable_once_the_high_watermark_reaches_the_next_segment(tmp_path: Path) -> None:
    log = make_log(tmp_path, retention_bytes=0)
    _segments_of_ten(log, 3)
    assert log.high_watermark == log.active_segment.base_offset == 30
    assert log.delete_old_segments() == 3
    assert _bases(log) == [30]
    log.close()


def test_log_start_breach_deletes_a_segment_whose_successor_starts_at_the_log_start_copied_or_not(
        tmp_path: Path) -> None:
    log, _ = _remote_log(tmp_path, -1, local_retention_bytes=-1)  # nothing copied, nothing too big
    _segments_of_ten(log, 3)
    assert log.delete_records(10) == 10
    assert log.delete_old_segments() == 1
    assert _bases(log) == [10, 20, 30]
    log.close()


def test_retention_ms_0_deletes_every_segment_older_than_now(tmp_path: Path) -> None:
    time = MockTime(ms=T0 + 1)
    log = make_log(tmp_path, time=time, retention_ms=0)
    _segments_of_ten(log, 2)
    assert log.delete_old_segments() == 2
    log.close()


def test_each_deletion_is_logged_with_the_rule_it_breaches(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    time = MockTime(ms=T0 + 100_000)
    log = make_log(tmp_path, time=time, retention_ms=50_000, segment_bytes=1 << 20)
    _segments_of_ten(log, 1, timestamp=T0)  # 0: past retention.ms
    _segments_of_ten(log, 3, timestamp=T0 + 90_000)
    log.delete_records(20)
    with caplog.at_level(logging.INFO, logger="local.log"):
        assert log.delete_old_segments() == 2
    messages = [r.getMessage() for r in caplog.records]
    assert "deleting segment 0 of topic-0: log start offset breach" in messages
    assert "deleting segment 10 of topic-0: log start offset breach" in messages
    log.close()
    caplog.clear()
    size = make_log(tmp_path, "size-0", retention_bytes=0)
    _segments_of_ten(size, 1)
    with caplog.at_level(logging.INFO, logger="local.log"):
        size.delete_old_segments()
    assert "deleting segment 0 of size-0: retention size breach" in [r.getMessage() for r in caplog.records]
    size.close()
    caplog.clear()
    old = make_log(tmp_path, "time-0", time=MockTime(ms=T0 + 100_000), retention_ms=50_000)
    _segments_of_ten(old, 1)
    with caplog.at_level(logging.INFO, logger="local.log"):
        old.delete_old_segments()
    assert "deleting segment 0 of time-0: retention time breach" in [r.getMessage() for r in caplog.records]
    old.close()


def test_a_compacted_topic_is_never_trimmed_by_retention(tmp_path: Path) -> None:
    log = make_log(tmp_path, retention_bytes=0, cleanup_policy="compact")
    _segments_of_ten(log, 2)
    assert log.delete_old_segments() == 0
    assert _bases(log) == [0, 10, 20]
    log.close()


def test_a_pass_over_segments_another_pass_already_deleted_deletes_and_counts_nothing(tmp_path: Path) -> None:
    log = make_log(tmp_path, retention_bytes=0)
    _segments_of_ten(log, 2)
    stale = list(log.segments.values())[:2]
    assert log.delete_old_segments() == 2
    assert log._delete_segments(stale, "a racing pass") == 0
    log.close()


def test_retention_refused_without_the_remote_tier_names_the_action(tmp_path: Path) -> None:
    log = make_log(tmp_path, remote_storage_enable=True)
    _segments_of_ten(log, 1)
    with pytest.raises(RemoteStorageNotConfiguredError, match=r"^retention refused for topic-0: the partition has "):
        log.delete_old_segments()
    log.close()


def test_delete_records_up_to_the_high_watermark_and_not_past_it(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    _segments_of_ten(log, 2)
    assert log.delete_records(20) == 20  # the high watermark itself is allowed, as in Kafka
    with pytest.raises(OffsetOutOfRangeError, match=r"cannot delete records of topic-0 up to 21: above the high "
                                                    r"watermark 20") as info:
        log.delete_records(21)
    assert info.value.context["offset"] == 21
    log.close()


def test_the_log_start_moves_only_forward_and_checkpoints_each_move(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    _segments_of_ten(log, 2)
    calls: list[int] = []
    log.log_start_offset_checkpointer = lambda lg: calls.append(lg.log_start_offset)
    reason = LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION
    assert log.maybe_increment_log_start_offset(5, reason) is True
    assert log.maybe_increment_log_start_offset(5, reason) is False  # not a move
    assert log.maybe_increment_log_start_offset(4, reason) is False
    assert calls == [5]
    log.ensure_log_start_offset_checkpointed()
    assert calls == [5]  # nothing pending
    log.close()


def test_a_failed_log_start_checkpoint_is_retried_by_the_next_deleter_once(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    _segments_of_ten(log, 2)
    calls: list[int] = []

    def flaky(lg: Log) -> None:
        calls.append(lg.log_start_offset)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")

    log.log_start_offset_checkpointer = flaky
    with pytest.raises(OSError):
        log.maybe_increment_log_start_offset(5, LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION)
    log.ensure_log_start_offset_checkpointed()
    log.ensure_log_start_offset_checkpointed()
    assert calls == [5, 5]
    log.close()


def test_a_log_start_past_the_high_watermark_moves_the_high_watermark_and_the_local_start(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = make_log(tmp_path)
    _segments_of_ten(log, 1)
    with caplog.at_level(logging.INFO, logger="local.log"):
        assert log.maybe_increment_log_start_offset(25, LogStartOffsetIncrementReason.SEGMENT_DELETION)
    assert (log.log_start_offset, log.local_log_start_offset, log.high_watermark) == (25, 25, 25)
    assert "incrementing log start offset of topic-0 to 25 (segment deletion)" in [r.getMessage() for r in caplog.records]
    log.close()


def test_truncate_fully_starts_an_empty_log_at_the_new_offset(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    _segments_of_ten(log, 2)
    log.truncate_fully_and_start_at(50)
    assert tuple(log.log_end_offset_metadata) == (50, 50, 0)
    assert log.producer_state_manager.map_end_offset == 50
    assert (log.log_start_offset, _bases(log)) == (50, [50])
    assert log.append(records(b"x")).first_offset == 50
    log.close()


def test_truncate_to_keeps_the_segment_starting_at_the_target_as_the_empty_active_one(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    _segments_of_ten(log, 3)
    log.append(records(b"w"))
    assert log.truncate_to(20) is True
    assert _bases(log) == [0, 10, 20]
    assert tuple(log.log_end_offset_metadata) == (20, 20, 0)
    log.truncate_to(15)
    assert tuple(log.log_end_offset_metadata) == (15, 10, log.active_segment.size)  # the batch of 15 went whole
    log.close()


def test_truncate_to_0_empties_the_log_and_a_negative_offset_is_refused(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    _segments_of_ten(log, 2)
    assert log.truncate_to(0) is True
    assert log.log_end_offset == 0 and read_all_values(log) == []
    with pytest.raises(ValueError, match=r"cannot truncate topic-0 to a negative offset -1"):
        log.truncate_to(-1)
    log.close()


def test_becoming_leader_at_a_given_start_offset_records_that_offset(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    _segments_of_ten(log, 1)
    log.assign_epoch_start_offset(3, start_offset=7)
    assert log.leader_epoch_cache.epoch_entries()[-1].start_offset == 7
    log.close()


def test_a_truncation_below_the_log_start_takes_the_log_start_down_with_it(tmp_path: Path) -> None:
    # Kafka's truncateTo: logStartOffset = min(targetOffset, logStartOffset). A follower's log whose start moved
    # inside its first segment (DeleteRecords) and is then truncated below it must not start past its end.
    log = make_log(tmp_path)
    _segments_of_ten(log, 2)
    checkpoints: list[int] = []
    log.log_start_offset_checkpointer = lambda lg: checkpoints.append(lg.log_start_offset)
    log.delete_records(5)
    assert log.truncate_to(5) is True  # to the log start itself: it stays, nothing to checkpoint
    assert (log.log_start_offset, log.log_end_offset, checkpoints) == (5, 5, [5])
    assert log.truncate_to(3) is True
    assert (log.log_start_offset, log.local_log_start_offset, log.log_end_offset) == (3, 3, 3)
    assert checkpoints == [5, 3]
    assert log.append(records(b"x")).first_offset == 3
    assert [o for o, _ in read_all_values(log)] == [3]  # offsets 0-2 were in the batch the truncation removed
    log.close()


def test_retention_of_a_follower_stops_at_the_high_watermark(tmp_path: Path) -> None:
    from local.records import MemoryRecords, SimpleRecord

    log = make_log(tmp_path, retention_bytes=0)
    for base in (0, 10, 20):
        log.append_as_follower(MemoryRecords.build([SimpleRecord(T0, None, b"v")] * 10, base_offset=base))
        log.roll()
    log.update_high_watermark(15)  # the leader's high watermark reached the middle of segment 10
    assert log.delete_old_segments() == 1
    assert _bases(log) == [10, 20, 30]
    log.close()
