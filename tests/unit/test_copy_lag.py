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
