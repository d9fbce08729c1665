"""The copy task's rules (``tiered/rlm_copy.py``), each checked where it shows: which segments are candidates (the
log start, the highest remote offset, the last stable offset, single-offset segments), the leader epochs and the
producer snapshot a segment is copied with, the metadata's broker id and event times, the pass totals and the
copy-lag gauges, ``remote.log.copy.disable``, a stop between segments, and the failed copies of an outage purged
at the next pass, whether or not their STARTED event reached the store."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from local import LogConfig, LogManager, filenames
from local.checkpoint import EpochEntry
from local.log import Log
from local.producer_state import AppendOrigin
from local.records import MemoryRecords, SimpleRecord
from local.scheduler import MockTime
from tests.logutil import local_tier_props, records
from tiered import layout
from tiered.backends.local_dir import LocalDirRemoteStorageManager
from tiered.composition import assemble_remote_log_manager
from tiered.metadata import RemoteLogMetadataStore
from tiered.pass_result import PassResult
from tiered.rlm_copy import EMPTY_PRODUCER_SNAPSHOT, segment_leader_epochs
from tiered.rsm import LogSegmentData, RemoteLogSegmentMetadata, RemoteLogSegmentState

TIERED = {"remote.storage.enable": "true"}
NOW = int(time.time() * 1000)


# ------------------------------------------------------------------------------------------------------------
# The leader epochs of a segment


def _epochs(entries: list[tuple[int, int]], start: int, next_offset: int, latest: int | None = None) -> dict[int, int]:
    cache = SimpleNamespace(epoch_entries=lambda: [EpochEntry(e, o) for e, o in entries])
    log = SimpleNamespace(leader_epoch_cache=cache, latest_epoch=latest)
    return segment_leader_epochs(log, start, next_offset)  # type: ignore[arg-type]


LINEAGE = [(0, 0), (1, 10), (2, 20), (3, 30)]


@pytest.mark.parametrize(
    "start,next_offset,expected",
    [
        (0, 10, {0: 0}),  # one epoch, exactly
        (5, 15, {0: 5, 1: 10}),  # the first epoch from the segment's start
        (10, 20, {1: 10}),  # epoch 0 ends where the segment starts; epoch 2 starts where it ends
        (12, 35, {1: 12, 2: 20, 3: 30}),
        (25, 35, {2: 25, 3: 30}),  # earlier epochs, wholly before the segment, skipped
        (31, 40, {3: 31}),  # the last epoch runs on to the segment's end
    ],
)
def test_a_segments_epochs_are_the_lineage_cut_to_its_offsets(
    start: int, next_offset: int, expected: dict[int, int]
) -> None:
    assert _epochs(LINEAGE, start, next_offset, latest=3) == expected


@pytest.mark.parametrize("latest,expected", [(None, {0: 7}), (4, {4: 7})])
def test_a_segment_without_epochs_gets_the_latest_or_0(latest: int | None, expected: dict[int, int]) -> None:
    assert _epochs([], 7, 9, latest) == expected
    assert _epochs([(5, 9)], 7, 9, latest) == expected  # the only epoch starts at the segment's end


# ------------------------------------------------------------------------------------------------------------
# Copies through a real LogManager


class Recording(LocalDirRemoteStorageManager):
    """Records every copy: its metadata, the producer snapshot and the epoch checkpoint it was given. ``on_copy``
    runs first; ``fail_copy`` / ``fail_delete`` / ``fail_metadata_put`` make those calls raise (an outage)."""

    def __init__(self) -> None:
        super().__init__()
        self.copied: list[tuple[RemoteLogSegmentMetadata, bytes, bytes]] = []
        self.txn_indexes: list[Path | None] = []
        self.on_copy = lambda: None
        self.fail_copy = self.fail_delete = self.fail_metadata_put = False

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> bytes | None:
        self.on_copy()
        custom = super().copy_log_segment_data(metadata, segment_data)
        self.copied.append((metadata, segment_data.producer_snapshot_index.read_bytes(), segment_data.leader_epoch_index))
        self.txn_indexes.append(segment_data.transaction_index)
        if self.fail_copy:
            raise OSError("injected: the store went away after the upload")
        return custom

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        if self.fail_delete:
            raise OSError("injected: delete during an outage")
        super().delete_log_segment_data(metadata)

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        if self.fail_metadata_put and key.endswith(".json"):
            raise OSError("injected: metadata put during an outage")
        super().put_bytes(key, data, if_absent=if_absent)


class Tier:
    """A LogManager whose remote tier copies through :class:`Recording`, with its own metrics registry."""

    def __init__(self, tmp: Path, **rlm_kwargs: object) -> None:
        self.rsm = Recording()
        self.rsm.configure({"dir": str(tmp / "remote")})
        self.store = RemoteLogMetadataStore(self.rsm)
        self.registry = CollectorRegistry()
        self.rlm = assemble_remote_log_manager(self.rsm, self.store, tmp / "data", registry=self.registry,
            **rlm_kwargs,  # type: ignore[arg-type]
        )
        self.manager = LogManager(
            LogConfig.from_properties(local_tier_props(tmp)), remote_tier=self.rlm, start_scheduler=False
        )

    def log(self, overrides: dict[str, str] | None = None) -> Log:
        return self.manager.get_or_create_log("t", 0, {**TIERED, **(overrides or {})})

    def run(self) -> PassResult:
        return self.rlm.run_once(self.manager.all_logs())

    def finished(self, log: Log) -> list[RemoteLogSegmentMetadata]:
        return self.store.readable_segments(self.rlm.topic_id_partition(log))

    def objects(self, tmp: Path) -> list[Path]:
        return [p for p in (tmp / "remote").rglob("*") if p.is_file() and not p.name.endswith(".json")]

    def gauge(self, name: str) -> float | None:
        return self.registry.get_sample_value(name, {"topic": "t", "partition": "0"})


@pytest.fixture
def tier(tmp_path: Path):  # type: ignore[no-untyped-def]
    t = Tier(tmp_path, broker_id=7, time=MockTime(ms=NOW))
    yield t
    t.manager.close()


def _segments(log: Log, counts: list[int]) -> None:
    """Segments of ``counts[i]`` one-record batches each, the last one left active."""
    for i, n in enumerate(counts):
        if i:
            log.roll()
        for _ in range(n):
            log.append(MemoryRecords.build([SimpleRecord(NOW, None, b"v%d" % log.log_end_offset)]))


def _starts(metas: list[RemoteLogSegmentMetadata]) -> list[tuple[int, int]]:
    return [(m.start_offset, m.end_offset) for m in metas]


def test_single_offset_segments_are_each_copied_once_pass_after_pass(tier: Tier) -> None:
    log = tier.log()
    _segments(log, [1, 1, 1])  # [0] [1] and the active [2]
    assert tier.run().segments_copied == 2
    assert _starts(tier.finished(log)) == [(0, 0), (1, 1)]
    _segments(log, [0, 1])  # [2] closed, [3] active
    assert tier.run().segments_copied == 1
    assert _starts(tier.finished(log)) == [(0, 0), (1, 1), (2, 2)]
    assert tier.run().segments_copied == 0


def test_the_segment_before_an_empty_active_one_is_copied(tier: Tier) -> None:
    log = tier.log()
    _segments(log, [3, 2])
    log.roll()  # the active segment starts at the log end, which is the last stable offset
    assert log.segments.active_segment.size == 0  # type: ignore[union-attr]
    assert tier.run().segments_copied == 2
    assert _starts(tier.finished(log)) == [(0, 2), (3, 4)]


def test_copies_start_at_the_log_start(tier: Tier) -> None:
    log = tier.log()
    _segments(log, [2, 2, 2, 1])
    log.delete_records(4)  # the first two segments are below the new log start
    assert _starts(tier.finished(log)) == []
    tier.run()
    assert _starts(tier.finished(log)) == [(4, 5)]


def test_segments_at_or_past_the_last_stable_offset_wait(tier: Tier) -> None:
    log = tier.log()
    _segments(log, [2])
    log.roll()
    log.append(records(b"t0", timestamp=NOW, producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True))
    log.roll()
    log.append(records(b"after", timestamp=NOW))
    log.roll()
    log.append(records(b"active", timestamp=NOW))
    assert log.last_stable_offset == 2  # the open transaction's first offset
    (log.dir / "00000000000000000000.txnindex").touch()  # empty (as recovery leaves one): nothing to upload
    result = tier.run()
    assert (result.segments_copied, result.copy_errors) == (1, 0)
    assert _starts(tier.finished(log)) == [(0, 1)]
    assert tier.gauge("RemoteCopyLagSegments") == 0  # only what is below the last stable offset lags
    log.append(MemoryRecords.end_transaction_marker(9, 0, commit=False), origin=AppendOrigin.COORDINATOR)  # 5
    log.roll()
    assert log.last_stable_offset == 6
    assert tier.run().segments_copied == 3
    assert _starts(tier.finished(log)) == [(0, 1), (2, 2), (3, 3), (4, 5)]
    # Only the segment the abort marker completed the transaction in has a transaction index to upload.
    assert [p.name if p else None for p in tier.rsm.txn_indexes] == [None, None, None, "00000000000000000004.txnindex"]


def test_a_copy_carries_the_producer_snapshot_epochs_broker_and_event_time(tier: Tier) -> None:
    log = tier.log()
    log.append(records(b"a", b"b", timestamp=NOW, producer_id=3, producer_epoch=0, base_sequence=0), leader_epoch=2)
    log.roll()
    log.append(records(b"c", timestamp=NOW), leader_epoch=5)
    log.roll()
    log.append(records(b"d", timestamp=NOW), leader_epoch=5)
    snapshot = filenames.producer_snapshot_file(log.dir, 2)
    assert snapshot.exists()
    assert tier.run().segments_copied == 2
    (first, first_snapshot, first_epochs), (second, _, second_epochs) = tier.rsm.copied
    assert first_snapshot == snapshot.read_bytes() != EMPTY_PRODUCER_SNAPSHOT
    assert (first.segment_leader_epochs, second.segment_leader_epochs) == ({2: 0}, {5: 2})
    assert first_epochs == b"0\n1\n2 0\n" and second_epochs == b"0\n2\n2 0\n5 2\n"
    for md in tier.finished(log):
        assert (md.broker_id, md.event_timestamp_ms, md.state) == (7, NOW, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    started = [md for md, _, _ in tier.rsm.copied]  # what the copy was given: the STARTED event
    assert [(md.broker_id, md.event_timestamp_ms, md.state) for md in started] == [
        (7, NOW, RemoteLogSegmentState.COPY_SEGMENT_STARTED)
    ] * 2


def test_a_segment_whose_snapshot_is_gone_is_copied_with_an_empty_one(
    tier: Tier, caplog: pytest.LogCaptureFixture
) -> None:
    log = tier.log()
    _segments(log, [2, 1])
    filenames.producer_snapshot_file(log.dir, 2).unlink()
    with caplog.at_level(logging.WARNING, logger="tiered.rlm_copy"):
        assert tier.run().segments_copied == 1
    assert tier.rsm.copied[0][1] == EMPTY_PRODUCER_SNAPSHOT
    assert f"no producer snapshot at 2 for {log.name}: uploading an empty one" in caplog.text


def test_pass_totals_and_copy_lag_gauges(tier: Tier) -> None:
    log = tier.log()
    _segments(log, [40, 40, 40, 1])
    sizes = [seg.size for seg in list(log.segments.values())[:-1]]
    tier.rsm.fail_copy = True
    failed = tier.run()
    assert (failed.segments_copied, failed.bytes_copied, failed.copy_errors) == (0, 0, 1)
    assert (tier.gauge("RemoteCopyLagSegments"), tier.gauge("RemoteCopyLagBytes")) == (3, sum(sizes))
    tier.rsm.fail_copy = False
    done = tier.run()
    assert (done.segments_copied, done.bytes_copied, done.copy_errors) == (3, sum(sizes), 0)
    assert (tier.gauge("RemoteCopyLagSegments"), tier.gauge("RemoteCopyLagBytes")) == (0, 0)


def test_remote_log_copy_disable_copies_nothing(tier: Tier, tmp_path: Path) -> None:
    log = tier.log({"remote.log.copy.disable": "true"})
    _segments(log, [2, 2, 1])
    result = tier.run()
    assert (result.segments_copied, result.copy_errors) == (0, 0)
    assert tier.rsm.copied == [] and tier.objects(tmp_path) == []


def test_a_stop_ends_the_pass_after_the_segment_in_flight(tier: Tier, caplog: pytest.LogCaptureFixture) -> None:
    log = tier.log()
    _segments(log, [2, 2, 2, 1])
    tier.rsm.on_copy = tier.rlm.request_stop
    with caplog.at_level(logging.INFO, logger="tiered.rlm_copy"):
        result = tier.run()
    assert result.segments_copied == 1 and _starts(tier.finished(log)) == [(0, 1)]
    assert f"stopping: the copy of {log.name} ends before segment 2" in caplog.text


def test_copies_that_failed_in_an_outage_are_purged_at_the_next_pass(tier: Tier, tmp_path: Path) -> None:
    """Two passes during an outage: each copy fails after its upload and so does its cleanup. The first pass after
    the outage deletes both (their STARTED events are in the store), then copies."""
    log = tier.log()
    _segments(log, [2, 2, 1])
    tier.rsm.fail_copy = tier.rsm.fail_delete = True
    for _ in range(2):
        assert tier.run().copy_errors == 1
    assert tier.objects(tmp_path) != []
    tier.rsm.fail_copy = tier.rsm.fail_delete = False
    result = tier.run()
    assert (result.stale_copies_cleaned, result.segments_copied) == (2, 2)
    finished = {layout.kafka_uuid(md.remote_log_segment_id.id) for md in tier.finished(log)}
    assert len(finished) == 2
    owners = {p.name.split("-", 1)[1].rsplit(".", 1)[0] for p in tier.objects(tmp_path)}
    assert owners == finished  # no object of a failed copy is left


def test_copies_whose_started_event_never_landed_are_purged_at_the_next_pass(tier: Tier, tmp_path: Path) -> None:
    """The metadata put fails (its object may or may not have landed), and so do deletes, twice: the next pass
    purges both."""
    log = tier.log()
    _segments(log, [2, 2, 1])
    tier.rlm.ownership.ensure_owner(log, tier.rlm.topic_id_partition(log))  # the claim lands before the outage
    tier.rsm.fail_metadata_put = tier.rsm.fail_delete = True
    for _ in range(2):
        assert tier.run().copy_errors == 1
    tier.rsm.fail_metadata_put = tier.rsm.fail_delete = False
    result = tier.run()
    assert (result.stale_copies_cleaned, result.segments_copied) == (2, 2)
    assert tier.rsm.copied and len(tier.finished(log)) == 2
