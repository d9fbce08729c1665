"""Kafka's RemoteCopyLagSegments and RemoteCopyLagBytes while a run copies a backlog: the gauges move with each
copied segment (a run that copies hundreds of segments on a busy machine takes minutes), and agree with what the
manager computes from the log at that moment (``copy_lag``, what ``tiered run`` reports)."""

from __future__ import annotations

from pathlib import Path

from local.scheduler import MockTime
from tests.unit.test_copy_rules import NOW, Tier, _segments


def test_the_copy_lag_gauges_move_as_a_run_copies_a_backlog(tmp_path: Path) -> None:
    tier = Tier(tmp_path, time=MockTime(ms=NOW))
    try:
        log = tier.log()
        _segments(log, [30, 30, 30, 30, 1])
        sizes = [seg.size for seg in list(log.segments.values())[:-1]]
        seen: list[tuple[float | None, float | None, tuple[int, int]]] = []
        tier.rsm.on_copy = lambda: seen.append(
            (tier.gauge("RemoteCopyLagSegments"), tier.gauge("RemoteCopyLagBytes"), tier.rlm.copy_lag(log)))
        assert tier.run().segments_copied == 4
        # At the start of the i-th copy, i segments are copied: the gauges say what is left, as copy_lag does.
        assert seen == [(4 - i, sum(sizes[i:]), (4 - i, sum(sizes[i:]))) for i in range(4)]
        assert (tier.gauge("RemoteCopyLagSegments"), tier.gauge("RemoteCopyLagBytes")) == (0, 0)
    finally:
        tier.manager.close()


def test_the_copy_lag_gauges_say_the_backlog_of_a_partition_whose_copy_task_has_not_run(tmp_path: Path) -> None:
    """Set only by a copy task's run, the gauges stayed at their last value (0) for partitions whose task waited for a
    thread behind 2,000 others or failed while the store was down: summed, 85 against 2,478 segments behind (a
    helper's pass at scale). The watcher sets them from what the data dir knows, whatever the tasks did."""
    tier = Tier(tmp_path, time=MockTime(ms=NOW))
    try:
        log = tier.log()
        _segments(log, [30, 30, 30, 30, 1])
        sizes = [seg.size for seg in list(log.segments.values())[:-1]]
        tier.rlm.start_tasks(tier.manager.all_logs)
        scheduler = tier.rlm._task_scheduler
        assert scheduler is not None
        scheduler.sync()  # (the watcher's run; no copy task has run: the mock clock stands still)
        assert (tier.gauge("RemoteCopyLagSegments"), tier.gauge("RemoteCopyLagBytes")) == (4, sum(sizes))
        assert tier.rlm.copy_lag(log) == (4, sum(sizes))  # what the copy task would say
    finally:
        tier.manager.close()


def test_the_watcher_does_not_call_copied_segments_a_backlog(tmp_path: Path) -> None:
    """The watcher set the gauges from remote-log-state's highest copied offset, which a copy notes only for the
    partition's first copy (local retention notes the rest): once a run had copied four segments, every interval the
    watcher said 3 behind (the copies after the first) until the copy task's next run said 0 again, for as long as
    local retention deleted nothing (a helper's run: 6 of 7 copied segments "behind" in 30% of /metrics samples)."""
    tier = Tier(tmp_path, time=MockTime(ms=NOW))
    try:
        log = tier.log()
        _segments(log, [30, 30, 30, 30, 1])
        assert tier.run().segments_copied == 4
        assert (tier.gauge("RemoteCopyLagSegments"), tier.gauge("RemoteCopyLagBytes")) == (0, 0)
        tier.rlm.start_tasks(tier.manager.all_logs)
        scheduler = tier.rlm._task_scheduler
        assert scheduler is not None
        scheduler.sync()  # (the watcher's run)
        assert (tier.gauge("RemoteCopyLagSegments"), tier.gauge("RemoteCopyLagBytes")) == (0, 0)
        assert tier.rlm.copy_lag(log) == (0, 0)
    finally:
        tier.manager.close()
