"""The remote tier a process keeps between the plans of Spark reads (``tiered.spark.planning.planning_tier``).

Spark keeps its planner process for the next query, and a streaming query plans every micro-batch: the tier is
built once per process and properties, each partition's metadata is listed again at every plan (new segments
found, deleted ones gone), and an event object already decoded is not read again. At most
``MAX_PLANNING_TIERS`` are kept; one a plan still holds is closed when that plan ends."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from tests.logutil import local_tier_props
from tiered.spark import planning
from tiered.spark.options import parse_options

PER_SEGMENT = 500
T0 = int(time.time() * 1000) - 3_600_000  # recent: remote retention must not expire the data


def _props(root: Path) -> dict[str, str]:
    return local_tier_props(root)


def _append(root: Path, segments: int) -> None:
    """``segments`` more segments of :data:`PER_SEGMENT` records to topic t (partition 0), offloaded and deleted
    locally."""
    with LogManager(LogConfig.from_properties(_props(root)), start_scheduler=False) as m:
        log = m.get_or_create_log("t", 0, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
        start = log.log_end_offset
        for first in range(start, start + segments * PER_SEGMENT, 100):
            log.append(MemoryRecords.build([SimpleRecord(T0 + i, None, b"v%06d" % i + b"x" * 200)
                                            for i in range(first, first + 100)]))
            if (first + 100) % PER_SEGMENT == 0:
                log.roll()
        rlm = m.remote_tier
        assert rlm is not None
        rlm.run_once(m.all_logs())
        m.cleanup_logs()


def _opts(root: Path, cache: Path | None = None) -> Any:
    return parse_options({**{f"config.{k}": v for k, v in _props(root).items()}, "topics": "t", "tiers": "remote",
                          "cacheDir": str(cache or root / "cache")})


def _remote_ranges(root: Path, cache: Path | None = None) -> list[tuple[int, int]]:
    return [(p.from_offset, p.until_offset) for p in planning.plan(_opts(root, cache)) if p.remote_metadata]


@pytest.fixture(autouse=True)
def _no_kept_tiers() -> Any:
    planning._close_planning_tiers()
    yield
    planning._close_planning_tiers()


def _count_calls(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    calls = [0]
    real = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_the_tier_is_built_once_and_a_plan_again_reads_only_new_events(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import tiered.metadata

    _append(tmp_path, 2)
    built = _count_calls(monkeypatch, planning, "_metadata_tier")
    decoded = _count_calls(monkeypatch, tiered.metadata, "decode_record")
    first = _remote_ranges(tmp_path)
    assert built[0] == 1 and first and first[0][0] == 0
    events = decoded[0]
    assert events == len(first)  # each segment's newest event (its FINISHED one) only
    assert _remote_ranges(tmp_path) == first
    assert built[0] == 1 and decoded[0] == events  # nothing new: nothing read again

    _append(tmp_path, 3)  # more segments offloaded since (by a writer of this process: its events count too)
    events = decoded[0]
    second = _remote_ranges(tmp_path)
    assert second[: len(first)] == first and len(second) > len(first) and second[-1][1] == 5 * PER_SEGMENT
    assert built[0] == 1 and decoded[0] - events == len(second) - len(first)  # only the new segments' newest events
    tier_dir = next((tmp_path / "cache" / "index").glob("planner-*"))
    assert tier_dir.is_dir()


def test_segments_deleted_since_the_last_plan_are_not_planned(tmp_path: Path) -> None:
    _append(tmp_path, 4)
    before = _remote_ranges(tmp_path)
    assert len(before) >= 3
    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as m:
        log = m.get_log("t", 0)
        assert log is not None and m.remote_tier is not None
        log.delete_records(before[1][1])  # the first two remote segments fall below the log start
        m.remote_tier.run_once(m.all_logs())
    after = _remote_ranges(tmp_path)
    assert after[0][0] == before[1][1] and after == [r for r in before if r[0] >= before[1][1]]


def test_at_most_max_planning_tiers_are_kept_and_a_tier_in_use_is_closed_after_its_plan(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planning, "MAX_PLANNING_TIERS", 1)
    a, b = tmp_path / "a", tmp_path / "b"
    _append(a, 1)
    _append(b, 1)
    assert _remote_ranges(a) and len(planning._planning_tiers) == 1
    a_dir = next((a / "cache" / "index").glob("planner-*"))
    with planning.planning_tier(_props(a), str(a / "cache")) as held:  # a plan of a still running
        assert held is not None
        assert _remote_ranges(b)  # b's tier takes a's place: a's is retired, not closed under the running plan
        assert len(planning._planning_tiers) == 1 and a_dir.is_dir() and not held.index_cache._closed
    assert held.index_cache._closed and not a_dir.exists()  # closed when the plan that held it ended
    b_dir = next((b / "cache" / "index").glob("planner-*"))
    planning._close_planning_tiers()
    assert not b_dir.exists()


def test_a_kept_tier_starts_no_thread_and_its_manager_leaves_it_open(tmp_path: Path) -> None:
    _append(tmp_path, 1)
    _remote_ranges(tmp_path)  # the first plan builds the tier
    before = {t.ident for t in threading.enumerate()}
    assert _remote_ranges(tmp_path)
    assert {t.ident for t in threading.enumerate()} == before
    (kept,) = planning._planning_tiers.values()
    assert not kept.tier.index_cache._closed  # the managers of both plans closed; the tier they shared did not


def test_without_a_cache_dir_every_open_builds_and_closes_its_own_tier(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _append(tmp_path, 1)
    built = _count_calls(monkeypatch, planning, "_metadata_tier")
    for _ in range(2):
        with planning.open_read_only(_props(tmp_path)) as manager:
            tier = manager.remote_tier
            assert tier is not None
        assert tier.index_cache._closed
    assert built[0] == 2 and not planning._planning_tiers


def test_a_cache_dir_that_cannot_be_made_plans_as_before_and_says_so_once(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    import logging

    _append(tmp_path, 2)
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the cache dir should be")
    with caplog.at_level(logging.WARNING, logger="tiered.spark.planning"):
        first = _remote_ranges(tmp_path, blocked)
        assert _remote_ranges(tmp_path, blocked) == first and len(first) == 2
    warned = [r for r in caplog.records if "cannot keep the planning tier" in r.getMessage()]
    assert len(warned) == 1 and str(blocked) in warned[0].getMessage()
    assert not planning._planning_tiers and blocked.read_text().startswith("a file")


def test_a_remote_read_whose_cache_dir_cannot_be_made_names_the_option(tmp_path: Path) -> None:
    from tiered.spark.options import SparkSourceOptionError
    from tiered.spark.reader import read_piece

    _append(tmp_path, 1)
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the cache dir should be")
    (piece,) = [p for p in planning.plan(_opts(tmp_path, blocked)) if p.remote_metadata]
    with pytest.raises(SparkSourceOptionError, match=rf"cacheDir={blocked}: an executor cannot keep its remote"):
        list(read_piece(piece))


def test_an_executor_keeps_at_most_max_worker_tiers_and_closes_the_rest(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-lived worker that reads with many cache dirs (or configurations) keeps only the most recent
    managers; one evicted is closed and its index directory removed, once no read holds it."""
    from tiered.spark import reader

    monkeypatch.setattr(reader, "MAX_WORKER_TIERS", 2)
    reader._managers.close_all()
    _append(tmp_path, 1)
    caches = [tmp_path / f"cache-{i}" for i in range(4)]
    (first,) = [p for p in planning.plan(_opts(tmp_path, caches[0])) if p.remote_metadata]
    rows = sum(b.num_rows for b in reader.read_piece(first))
    assert rows == PER_SEGMENT
    with reader.remote_log_manager(first.props, first.cache_dir) as held:  # a read still holding the first
        for cache in caches[1:]:
            (piece,) = [p for p in planning.plan(_opts(tmp_path, cache)) if p.remote_metadata]
            assert sum(b.num_rows for b in reader.read_piece(piece)) == rows
            assert len(reader._managers) <= 2
        assert not held.index_cache._closed  # retired, but in use: still open
        assert list((caches[0] / "index").glob("worker-*"))
    assert held.index_cache._closed  # closed as its last user let go
    assert not list((caches[0] / "index").glob("worker-*")) and not list((caches[1] / "index").glob("worker-*"))
    assert [len(list((c / "index").glob("worker-*"))) for c in caches[2:]] == [1, 1]
    reader._managers.close_all()
    assert not [d for c in caches for d in (c / "index").glob("worker-*")]


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_local_segment_copied_and_deleted_after_the_plan_is_read_from_its_remote_copy(
        tmp_path: Path, fail_on_data_loss: str) -> None:
    """Local retention deletes a closed segment once it is copied, which can happen between a read's plan and its
    task: nothing is lost (the log start has not moved), so the task reads the remote copy; it neither fails as
    data loss nor, with failOnDataLoss=false, skips the records."""
    from tiered.spark import reader

    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as m:
        log = m.get_or_create_log("t", 0, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
        for first in range(0, 2 * PER_SEGMENT, 100):
            log.append(MemoryRecords.build([SimpleRecord(T0 + i, None, b"v%06d" % i) for i in range(first, first + 100)]))
            if (first + 100) % PER_SEGMENT == 0:
                log.roll()
    opts = parse_options({**{f"config.{k}": v for k, v in _props(tmp_path).items()}, "topics": "t",
                          "cacheDir": str(tmp_path / "cache"), "failOnDataLoss": fail_on_data_loss})
    pieces = planning.plan(opts)
    assert pieces and all(p.local_path is not None for p in pieces)  # nothing in the remote tier yet
    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as m:
        rlm = m.remote_tier
        assert rlm is not None
        rlm.run_once(m.all_logs())
        m.cleanup_logs()
        assert m.get_log("t", 0).log_start_offset == 0  # nothing lost: only the local copies went
    gone = [p for p in pieces if not Path(p.local_path or "").exists()]
    assert gone  # (at least the first: local retention keeps what it may)
    values = [v.as_py() for p in pieces for b in reader.read_piece(p) for v in b.column("value")]
    assert values == [b"v%06d" % i for i in range(2 * PER_SEGMENT)]


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_start_after_the_end_is_refused_as_sparks_kafka_source_does(tmp_path: Path, fail_on_data_loss: str) -> None:
    from tiered.spark.options import SparkSourceOptionError

    _append(tmp_path, 1)
    base = {**{f"config.{k}": v for k, v in _props(tmp_path).items()}, "topics": "t",
            "cacheDir": str(tmp_path / "cache"), "failOnDataLoss": fail_on_data_loss}
    with pytest.raises(SparkSourceOptionError, match="t-0: startingOffsets 300 is after endingOffsets 100"):
        planning.plan(parse_options({**base, "startingOffsets": '{"t":{"0":300}}', "endingOffsets": '{"t":{"0":100}}'}))
    assert planning.plan(parse_options({**base, "startingOffsets": '{"t":{"0":100}}',
                                        "endingOffsets": '{"t":{"0":100}}'})) == []  # an empty range: nothing
