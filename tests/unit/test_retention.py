"""Retention of both tiers at its boundaries, on an injected clock (MockTime), never by sleeping.

- Local time retention keeps a segment whose newest record is exactly ``retention.ms`` old and deletes it one
  millisecond later (Kafka's ``UnifiedLog.deleteRetentionMsBreachedSegments``: ``now - largestTimestamp >
  retentionMs``).
- Remote time retention deletes a remote segment whose ``max_timestamp_ms`` is exactly ``retention.ms`` old
  (Kafka's ``RemoteLogManager``: ``maxTimestampMs <= now - retentionMs``) and keeps a younger one.
- A remote segment wholly below the log start offset goes, and so does one outside the leader-epoch lineage,
  with retention by time and size both off, so no other rule can be what deleted it.
- Remote size retention deletes the oldest segments while the whole log (remote segments plus the local segments
  not yet copied) is over ``retention.bytes`` by at least the segment: one byte short of that, nothing goes.
- Each deletion is logged with the rule it breaches; the delete lag gauges count the pass's segments while it
  deletes and are zero after it, and the remote log size is what remains (a copy counts in it at once).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from local import LogConfig, LogManager
from local.scheduler import MockTime
from tests.logutil import make_log, read_all_values, records
from tiered import RemoteLogSegmentMetadata
from tiered.backends.local_dir import LocalDirRemoteStorageManager
from tiered.composition import assemble_remote_log_manager
from tiered.metadata import RemoteLogMetadataStore

T0 = 1_700_000_000_000
MIB = 1024 * 1024
HOUR = 3_600_000


# Local -------------------------------------------------------------------------------------------------------


def test_local_time_retention_keeps_a_segment_exactly_retention_ms_old_and_deletes_it_a_ms_later(tmp_path: Path) -> None:
    clock = MockTime(ms=T0)
    log = make_log(tmp_path, time=clock, segment_bytes=200, retention_ms=10_000, file_delete_delay_ms=0)
    for i in range(4):
        log.append(records(b"v" * 100, timestamp=T0 + 1000 * i))  # one batch per segment: segment i's newest is T0+1000i
    assert log.number_of_segments() == 4
    clock.sleep(10_000)  # segment 0's newest record is exactly retention.ms old
    assert log.delete_old_segments() == 0
    assert log.log_start_offset == 0
    clock.sleep(1)  # now one millisecond past it
    assert log.delete_old_segments() == 1
    assert log.log_start_offset == 1 and [o for o, _ in read_all_values(log)] == [1, 2, 3]
    clock.sleep(999)  # segment 1 exactly at the limit: kept
    assert log.delete_old_segments() == 0
    clock.sleep(1_000_000)  # everything old: all but the active segment go
    assert log.delete_old_segments() == 2
    assert log.log_start_offset == log.active_segment.base_offset == 3


def test_local_time_retention_off_and_size_retention_boundary(tmp_path: Path) -> None:
    clock = MockTime(ms=T0)
    log = make_log(tmp_path, time=clock, segment_bytes=200, retention_ms=-1, file_delete_delay_ms=0)
    for i in range(3):
        log.append(records(b"v" * 100, timestamp=T0 + i))
    clock.sleep(100 * 365 * 24 * HOUR)
    assert log.delete_old_segments() == 0  # retention.ms = -1: time never deletes
    one = log.segments.first_segment.size  # type: ignore[union-attr]
    log2 = make_log(tmp_path, "topic-1", time=clock, segment_bytes=200, retention_bytes=log.size_in_bytes - one, retention_ms=-1,
                    file_delete_delay_ms=0)
    for i in range(3):
        log2.append(records(b"v" * 100, timestamp=T0 + i))
    # over retention.bytes by exactly one segment: exactly that one goes, not the next
    assert log2.delete_old_segments() == 1 and log2.log_start_offset == 1
    assert log2.delete_old_segments() == 0


# Remote ------------------------------------------------------------------------------------------------------


def _value(i: int) -> bytes:
    return (b"%08d" % i) * 25


def _produce(log: object, n: int, start: int = 0, ts: int = T0) -> None:
    from local.records import MemoryRecords, SimpleRecord

    for first in range(start, start + n, 100):
        batch = [SimpleRecord(ts + i, b"k%d" % i, _value(i)) for i in range(first, min(first + 100, start + n))]
        log.append(MemoryRecords.build(batch))  # type: ignore[attr-defined]


class _Tier:
    """A LogManager with a remote tier on the local-directory backend, both on one MockTime."""

    def __init__(self, tmp: Path, clock: MockTime, rsm: LocalDirRemoteStorageManager | None = None) -> None:
        self.remote_dir = tmp / "remote"
        self.rsm = rsm or LocalDirRemoteStorageManager()
        self.rsm.configure({"dir": str(self.remote_dir)})
        self.store = RemoteLogMetadataStore.in_bucket(self.rsm)
        self.rlm = assemble_remote_log_manager(self.rsm, self.store, tmp / "data", time=clock,
            registry=CollectorRegistry(),
        )
        props = {
            "log.dirs": str(tmp / "data"),
            "remote.log.storage.system.enable": "true",
            "log.segment.bytes": str(MIB),
        }
        self.manager = LogManager(LogConfig.from_properties(props), remote_tier=self.rlm, time=clock, start_scheduler=False)

    def log(self, **overrides: str):  # type: ignore[no-untyped-def]
        return self.manager.get_or_create_log("t", 0, {"remote.storage.enable": "true", **overrides})

    def finished(self, log: object) -> list[RemoteLogSegmentMetadata]:
        return self.rlm.finished_segments(self.rlm.topic_id_partition(log))  # type: ignore[arg-type]

    def close(self) -> None:
        self.manager.close()


def _objects_of(tier: _Tier, md: RemoteLogSegmentMetadata) -> list[Path]:
    sid = str(md.remote_log_segment_id.id)
    from tiered.layout import kafka_uuid

    names = (sid, kafka_uuid(md.remote_log_segment_id.id))
    return [p for p in tier.remote_dir.rglob("*") if p.is_file() and any(n in p.name for n in names)
            and not p.name.endswith(".json")]


def test_remote_time_retention_deletes_a_segment_exactly_retention_ms_old_and_keeps_a_younger_one(tmp_path: Path) -> None:
    clock = MockTime(ms=T0 + 1_000_000)
    tier = _Tier(tmp_path, clock)
    try:
        log = tier.log(**{"retention.ms": str(HOUR), "retention.bytes": "-1"})
        _produce(log, 20_000)  # timestamps T0 .. T0+19999: four 1 MiB segments and the active one
        assert tier.rlm.copy_log_segments(log).segments_copied >= 3
        segs = tier.finished(log)
        assert all(_objects_of(tier, md) for md in segs)
        # the oldest segment's newest record is one ms short of retention.ms: nothing goes
        clock.sleep(segs[0].max_timestamp_ms + HOUR - 1 - clock.milliseconds())
        assert tier.rlm.cleanup_remote_segments(log) == 0
        assert log.log_start_offset == 0
        # exactly retention.ms old: it goes (Kafka: maxTimestampMs <= now - retention.ms); the next, younger
        # by its own records' span, stays
        clock.sleep(1)
        assert segs[1].max_timestamp_ms > segs[0].max_timestamp_ms
        assert tier.rlm.cleanup_remote_segments(log) == 1
        remaining = tier.finished(log)
        assert [md.remote_log_segment_id for md in remaining] == [md.remote_log_segment_id for md in segs[1:]]
        assert log.log_start_offset == segs[0].end_offset + 1 == remaining[0].start_offset
        assert _objects_of(tier, segs[0]) == [] and all(_objects_of(tier, md) for md in segs[1:])
        assert read_all_values(log)[0][0] == log.log_start_offset
        # much later: every remote segment is past retention.ms and goes
        clock.sleep(10 * HOUR)
        assert tier.rlm.cleanup_remote_segments(log) == len(segs) - 1
        assert tier.finished(log) == []
        assert log.log_start_offset == segs[-1].end_offset + 1
    finally:
        tier.close()


def test_remote_time_retention_off_keeps_every_segment(tmp_path: Path) -> None:
    clock = MockTime(ms=T0 + 1_000_000)
    tier = _Tier(tmp_path, clock)
    try:
        log = tier.log(**{"retention.ms": "-1", "retention.bytes": "-1"})
        _produce(log, 12_000)
        tier.rlm.copy_log_segments(log)
        n = len(tier.finished(log))
        assert n >= 1
        clock.sleep(100 * 365 * 24 * HOUR)
        assert tier.rlm.cleanup_remote_segments(log) == 0
        assert len(tier.finished(log)) == n and log.log_start_offset == 0
    finally:
        tier.close()


def test_remote_segments_below_the_log_start_offset_are_deleted(tmp_path: Path) -> None:
    clock = MockTime(ms=T0 + 1_000_000)
    tier = _Tier(tmp_path, clock)
    try:
        log = tier.log(**{"retention.ms": "-1", "retention.bytes": "-1"})
        _produce(log, 20_000)
        tier.rlm.copy_log_segments(log)
        segs = tier.finished(log)
        assert len(segs) >= 3
        assert tier.rlm.cleanup_remote_segments(log) == 0  # no rule applies yet
        # DeleteRecords up to just past the second segment's start: the first is wholly below the log start
        # offset, the second holds it and stays.
        log.delete_records(segs[1].start_offset + 10)
        assert tier.rlm.cleanup_remote_segments(log) == 1
        remaining = tier.finished(log)
        assert [md.start_offset for md in remaining] == [md.start_offset for md in segs[1:]]
        assert _objects_of(tier, segs[0]) == [] and _objects_of(tier, segs[1])
        assert log.log_start_offset == segs[1].start_offset + 10  # not moved back, not moved on
        log.delete_records(segs[1].end_offset)  # the log start is the second segment's last offset: it stays
        assert tier.rlm.cleanup_remote_segments(log) == 0 and log.log_start_offset == segs[1].end_offset
        # up to exactly the second segment's end + 1: it goes too
        log.delete_records(segs[1].end_offset + 1)
        assert tier.rlm.cleanup_remote_segments(log) == 1
        assert tier.finished(log)[0].start_offset == segs[2].start_offset
        assert read_all_values(log)[0][0] == segs[1].end_offset + 1
    finally:
        tier.close()


def test_a_local_epoch_cache_that_disagrees_with_the_owners_lineage_deletes_no_remote_segment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka deletes the remote segments of no epoch in the leader's local epoch cache (copies of an unclean
    leader's history). Here the partition's lineage is its owner record's, which readers follow, and a former
    owner's copies outside it are deleted as such (test_ownership); a local cache that says otherwise (its
    checkpoint deleted by hand and rebuilt from what is local, a claim whose write failed) is no judge of it: it
    took every older copy for one outside the lineage and deleted them all (a helper's pass)."""
    clock = MockTime(ms=T0 + 1_000_000)
    tier = _Tier(tmp_path, clock)
    try:
        log = tier.log(**{"retention.ms": "-1", "retention.bytes": "-1"})
        _produce(log, 12_000)  # epoch 0: two whole segments
        log.assign_epoch_start_offset(1)
        _produce(log, 12_000, start=12_000)  # epoch 1
        tier.rlm.copy_log_segments(log)
        segs = tier.finished(log)
        only_epoch0 = [md for md in segs if set(md.segment_leader_epochs) == {0}]
        assert len(only_epoch0) >= 2 and any(1 in md.segment_leader_epochs for md in segs)
        assert tier.rlm.cleanup_remote_segments(log) == 0  # every segment is in the lineage
        log.leader_epoch_cache.assign(1, 0)  # the local cache now says epoch 1 began at offset 0
        assert [e.epoch for e in log.leader_epoch_cache.epoch_entries()] == [1]
        with caplog.at_level(logging.INFO, logger="tiered.remote_deletion"):
            assert tier.rlm.cleanup_remote_segments(log) == 0
        assert tier.finished(log) == segs and log.log_start_offset == 0
    finally:
        tier.close()


def test_remote_lineage_check_is_skipped_for_a_log_without_epochs(tmp_path: Path) -> None:
    clock = MockTime(ms=T0 + 1_000_000)
    tier = _Tier(tmp_path, clock)
    try:
        log = tier.log(**{"retention.ms": "-1", "retention.bytes": "-1"})
        _produce(log, 12_000)
        tier.rlm.copy_log_segments(log)
        n = len(tier.finished(log))
        log.leader_epoch_cache.clear_and_flush()  # no lineage to compare with: nothing is "outside" it
        assert tier.rlm.cleanup_remote_segments(log) == 0 and len(tier.finished(log)) == n
    finally:
        tier.close()



def _retention_bytes(log: object, value: int) -> None:
    log.config = dataclasses.replace(log.config, retention_bytes=value)  # type: ignore[attr-defined]


def _gauge(gauge: object, log: object) -> float:
    return float(gauge.labels(log.topic, log.partition)._value.get())  # type: ignore[attr-defined]


def test_remote_size_retention_deletes_exactly_the_segments_the_whole_log_is_over_by(tmp_path: Path) -> None:
    clock = MockTime(ms=T0 + 1_000_000)
    tier = _Tier(tmp_path, clock)
    try:
        log = tier.log(**{"retention.ms": "-1", "retention.bytes": "-1"})
        _produce(log, 20_000)
        log.roll()
        _produce(log, 1, start=20_000)  # a segment of one offset: its base offset is its end offset
        log.roll()
        _produce(log, 50, start=20_001)  # the active segment: local only
        assert tier.rlm.copy_log_segments(log).segments_copied >= 4
        segs = tier.finished(log)
        assert segs[-1].start_offset == segs[-1].end_offset == 20_000
        # every segment is still local too (no local retention ran): only the active one is local-only
        assert log.active_segment.base_offset == segs[-1].end_offset + 1 and log.number_of_segments() == len(segs) + 1
        total = sum(md.segment_size_in_bytes for md in segs) + log.active_segment.size
        first, second, third, fourth = (md.segment_size_in_bytes for md in segs[:4])
        _retention_bytes(log, total - first + 1)  # over by one byte less than the oldest segment: it stays
        assert tier.rlm.cleanup_remote_segments(log) == 0 and log.log_start_offset == 0
        _retention_bytes(log, total - first)  # over by exactly the oldest: it goes, not the next
        assert tier.rlm.cleanup_remote_segments(log) == 1
        assert [md.start_offset for md in tier.finished(log)] == [md.start_offset for md in segs[1:]]
        assert log.log_start_offset == segs[1].start_offset
        # over by one byte less than the next three: the next two go, the third stays
        _retention_bytes(log, total - first - second - third - fourth + 1)
        assert tier.rlm.cleanup_remote_segments(log) == 2
        assert log.log_start_offset == segs[3].start_offset
        _retention_bytes(log, 0)  # the whole remote log goes; the active segment's bytes cannot be
        assert tier.rlm.cleanup_remote_segments(log) == len(segs) - 3 and tier.finished(log) == []
    finally:
        tier.close()


def test_without_remote_segments_a_pass_deletes_nothing(tmp_path: Path) -> None:
    tier = _Tier(tmp_path, MockTime(ms=T0))
    try:
        log = tier.log(**{"retention.ms": "0", "retention.bytes": "0"})
        _produce(log, 100)
        assert tier.rlm.cleanup_remote_segments(log) == 0
        assert tier.rlm.expiration_task(log).run(log).segments_deleted == 0
    finally:
        tier.close()


def _owner_lists(tier: _Tier, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every LIST of a partition's owner records from now on (each one a request on S3)."""
    listed: list[str] = []
    objects = tier.store.store
    list_keys = objects.list_keys

    def counted(prefix: str):  # type: ignore[no-untyped-def]
        listed.append(prefix)
        return list_keys(prefix)

    monkeypatch.setattr(objects, "list_keys", counted)
    return listed


def test_an_expiration_pass_with_nothing_to_delete_leaves_the_ownership_check_to_the_copy_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle partition listed its owner records twice every task interval, once for the copy task and once for
    the expiration task (6.7 of a copied segment's 9.6 LISTs in a helper's 500-partition profile). A pass with nothing
    to delete now stands on the copy pass's check; one with a segment due checks ownership before deleting, as
    does one that no recent check stands for."""
    clock = MockTime(ms=T0 + 1_000_000)
    tier = _Tier(tmp_path, clock)
    try:
        log = tier.log(**{"retention.ms": str(HOUR), "retention.bytes": "-1"})
        _produce(log, 20_000)
        assert tier.rlm.copy_log_segments(log).segments_copied >= 3
        segs = tier.finished(log)
        listed = _owner_lists(tier, monkeypatch)
        assert tier.rlm.cleanup_remote_segments(log) == 0
        assert listed == []
        clock.sleep(segs[0].max_timestamp_ms + HOUR - clock.milliseconds())  # the oldest is due now
        assert tier.rlm.cleanup_remote_segments(log) == 1
        assert [p for p in listed if p.endswith("owner-")], listed  # checked before it deleted
        assert [md.remote_log_segment_id for md in tier.finished(log)] == [md.remote_log_segment_id for md in segs[1:]]
    finally:
        tier.close()
    # No copy pass's check stands (the copy task turned off, or it has not run lately): the pass checks itself.
    other = tmp_path / "other"
    other.mkdir()
    tier = _Tier(other, MockTime(ms=T0 + 1_000_000))
    try:
        log = tier.log(**{"retention.ms": str(HOUR), "retention.bytes": "-1"})
        _produce(log, 20_000)
        assert tier.rlm.copy_log_segments(log).segments_copied >= 3
        task = tier.rlm.expiration_task(log)
        task._check_stands_s = 0.0
        listed = _owner_lists(tier, monkeypatch)
        assert task.run(log).segments_deleted == 0
        assert [p for p in listed if p.endswith("owner-")], listed
    finally:
        tier.close()


class _LagRecordingRSM(LocalDirRemoteStorageManager):
    """Records the delete lag gauges of the partition each time a segment's objects are deleted."""

    def __init__(self) -> None:
        super().__init__()
        self.lags: list[tuple[float, float]] = []
        self.metrics: object = None

    def delete_log_segment_data(self, md: RemoteLogSegmentMetadata) -> None:
        m = self.metrics
        tip = md.topic_id_partition
        self.lags.append((m.delete_lag_segments.labels(tip.topic, tip.partition)._value.get(),  # type: ignore[attr-defined]
                          m.delete_lag_bytes.labels(tip.topic, tip.partition)._value.get()))  # type: ignore[attr-defined]
        super().delete_log_segment_data(md)


def test_each_remote_deletion_names_its_rule_and_the_gauges_count_the_pass(tmp_path: Path,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    clock = MockTime(ms=T0 + 1_000_000)
    rsm = _LagRecordingRSM()
    tier = _Tier(tmp_path, clock, rsm)
    rsm.metrics = tier.rlm.metrics
    try:
        log = tier.log(**{"retention.ms": str(HOUR), "retention.bytes": "-1"})
        _produce(log, 25_000)
        tier.rlm.copy_log_segments(log)
        segs = tier.finished(log)
        sizes = [md.segment_size_in_bytes for md in segs]
        assert len(segs) >= 4
        metrics = tier.rlm.metrics
        assert _gauge(metrics.log_size_bytes, log) == sum(sizes)  # set by the copy, not one pass later
        with caplog.at_level(logging.INFO, logger="tiered.remote_deletion"):
            log.delete_records(segs[1].end_offset + 1)  # the first two are below the log start offset
            assert tier.rlm.cleanup_remote_segments(log) == 2
            assert rsm.lags == [(2, sizes[0] + sizes[1])] * 2  # the pass's lag while it deletes
            assert (_gauge(metrics.delete_lag_segments, log), _gauge(metrics.delete_lag_bytes, log)) == (0, 0)
            assert _gauge(metrics.log_size_bytes, log) == sum(sizes[2:])
            clock.sleep(segs[2].max_timestamp_ms + HOUR - clock.milliseconds())  # the third is retention.ms old
            assert tier.rlm.cleanup_remote_segments(log) == 1
            _retention_bytes(log, sum(sizes[4:]) + log.active_segment.size)  # the fourth is over retention.bytes
            assert tier.rlm.cleanup_remote_segments(log) == 1
            assert _gauge(metrics.log_size_bytes, log) == sum(sizes[4:])
        deleting = [r.getMessage() for r in caplog.records if r.getMessage().startswith("deleting remote segment")]
        assert [m.rsplit(": ", 1)[1] for m in deleting] == [
            "below the log start offset", "below the log start offset", "retention.ms breach", "retention.bytes breach"]
    finally:
        tier.close()


def test_the_remote_log_size_counts_a_copy_at_once(tmp_path: Path) -> None:
    """RemoteLogSizeBytes after a copy task's run, before any expiration run: the copied segments' bytes."""
    tier = _Tier(tmp_path, MockTime(ms=T0 + 1_000_000))
    try:
        log = tier.log(**{"retention.ms": "-1", "retention.bytes": "-1"})
        _produce(log, 12_000)
        result = tier.rlm.copy_task(log).run(log)
        assert result.segments_copied >= 2
        sizes = [md.segment_size_in_bytes for md in tier.finished(log)]
        assert _gauge(tier.rlm.metrics.log_size_bytes, log) == sum(sizes) == result.bytes_copied
    finally:
        tier.close()


def test_remote_retention_ms_0_deletes_every_segment_not_newer_than_now(tmp_path: Path) -> None:
    clock = MockTime(ms=T0 + 1_000_000)
    tier = _Tier(tmp_path, clock)
    try:
        log = tier.log(**{"retention.ms": "0", "retention.bytes": "-1"})
        _produce(log, 12_000)
        tier.rlm.copy_log_segments(log)
        n = len(tier.finished(log))
        assert n >= 1
        assert tier.rlm.cleanup_remote_segments(log) == n and tier.finished(log) == []
    finally:
        tier.close()


def test_a_segment_deleted_by_time_counts_against_the_size_breach(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    clock = MockTime(ms=T0 + 1_000_000)
    tier = _Tier(tmp_path, clock)
    try:
        log = tier.log(**{"retention.ms": str(HOUR), "retention.bytes": "-1"})
        _produce(log, 3000)  # each segment smaller than the one before: the arithmetic shows in what goes
        log.roll()
        _produce(log, 2000, start=3000, ts=T0 + 1_500_000)
        log.roll()
        _produce(log, 1000, start=5000, ts=T0 + 1_500_000)
        log.roll()
        _produce(log, 10, start=6000, ts=T0 + 1_500_000)
        assert tier.rlm.copy_log_segments(log).segments_copied == 3
        segs = tier.finished(log)
        sizes = [md.segment_size_in_bytes for md in segs]
        assert sizes[0] > sizes[1] > sizes[2]
        # the first is past retention.ms, and the log is over retention.bytes by exactly its size: it goes by
        # time, and that ends the size breach too (Kafka's remainingBreachedSize): the second stays
        clock.sleep(T0 + 2999 + HOUR - clock.milliseconds())
        _retention_bytes(log, sum(sizes) + log.active_segment.size - sizes[0])
        with caplog.at_level(logging.INFO, logger="tiered.remote_deletion"):
            assert tier.rlm.cleanup_remote_segments(log) == 1
        assert [r.getMessage().rsplit(": ", 1)[1] for r in caplog.records if "deleting remote" in r.getMessage()] == [
            "retention.ms breach"]
        assert log.log_start_offset == 3000
        # the size breach after a size deletion is what is left of it: over by the second's size, only it goes
        _retention_bytes(log, sizes[2] + log.active_segment.size)
        assert tier.rlm.cleanup_remote_segments(log) == 1 and log.log_start_offset == 5000
    finally:
        tier.close()
