"""Segments copied in batches through the copier process (tiered/copier_process.py BatchCopier,
tiered/rlm_copy.py _copy_batch_of): several segments per request, each with its COPY_SEGMENT_STARTED event, checksums,
objects and COPY_SEGMENT_FINISHED event written by the child in that order, recorded in the parent's view after;
a failure at any step of any segment stops the batch there, keeps the copies before it, and cleans up as the
one-by-one copy does. The failures are injected once in the child by tests.gated_rsm.FlakyDir."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from local import LogConfig
from local.log import Log
from local.manager import LogManager
from local.records import MemoryRecords, SimpleRecord
from tests.logutil import local_tier_props, read_all_values
from tiered import layout
from tiered.composition import open_log_manager, remote_log_manager_of
from tiered.copier_process import BatchCopier
from tiered.metadata import RemoteLogMetadataStore, encode_metadata
from tiered.remote_log_manager import RemoteLogManager
from tiered.rlm_copy import COPY_BATCH_SEGMENTS
from tiered.rsm import RemoteLogSegmentState

TIERED = {"remote.storage.enable": "true"}
NOW = int(time.time() * 1000)
SEGMENTS = COPY_BATCH_SEGMENTS + 3  # two requests


def _manager(tmp: Path, **rsm: str) -> LogManager:
    props = local_tier_props(tmp, **{f"rsm.config.{k}": v for k, v in rsm.items()})
    if rsm:
        props["remote.log.storage.manager.class.name"] = "tests.gated_rsm.FlakyDir"
    return open_log_manager(LogConfig.from_properties(props), start_scheduler=False)


def _produce(log: Log, segments: int) -> None:
    for i in range(segments):
        if i:
            log.roll()
        log.append(MemoryRecords.build([SimpleRecord(NOW, b"k%d" % o, b"v%d" % o) for o in range(log.log_end_offset, log.log_end_offset + 50)]))
    log.roll()  # every segment written is closed


def _rlm(manager: LogManager) -> RemoteLogManager:
    rlm = remote_log_manager_of(manager)
    assert rlm is not None and isinstance(rlm._copy_batch, BatchCopier)  # the composition root set batches up
    return rlm


def _base_of_segment(tmp: Path, index: int) -> int:
    """Where the ``index``-th segment of what :func:`_produce` writes starts (a probe's, deleted after)."""
    with _manager(tmp) as probe:
        _produce(probe.get_or_create_log("t", 0, TIERED), SEGMENTS)
        base = list(probe.get_log("t", 0).segments.values())[index].base_offset  # type: ignore[union-attr]
        probe.delete_log("t", 0)
    return base


def _store_view(tmp: Path, rlm: RemoteLogManager, log: Log) -> list[tuple[int, str]]:
    """The segments as a new process finds them in the bucket (start offset, state)."""
    fresh = RemoteLogMetadataStore.in_bucket(rlm.rsm)  # type: ignore[arg-type]
    return [(m.start_offset, m.state.name) for m in fresh.list_remote_log_segments(rlm.topic_id_partition(log))]


def _data_objects(tmp: Path) -> set[str]:
    """The segment ids of every data object in the bucket."""
    return {p.name.split("-", 1)[1].rsplit(".", 1)[0] for p in (tmp / "remote").rglob("*")
            if p.is_file() and not p.name.endswith(".json") and "__remote_log_metadata" not in str(p)}


def test_a_run_copies_in_batches_whose_events_are_the_ones_the_view_holds(tmp_path: Path) -> None:
    with _manager(tmp_path) as manager:
        log = manager.get_or_create_log("t", 0, TIERED)
        _produce(log, SEGMENTS)
        rlm = _rlm(manager)
        copier = rlm.process_copier
        before = copier.requests
        assert rlm.run_once(manager.all_logs()).segments_copied == SEGMENTS
        # Two requests for eleven segments, events included (one by one: three per segment).
        assert copier.requests - before == 2
        tip = rlm.topic_id_partition(log)
        finished = rlm.finished_segments(tip)
        assert [m.start_offset for m in finished] == [s.base_offset for s in list(log.segments.values())[:SEGMENTS]]
        # What the child wrote is what the parent's view holds, byte for byte, checksums included.
        for md in finished:
            sums = rlm.metadata.segment_checksums(md)
            assert sums is not None and ".log" in sums.objects
            key = layout.metadata_event_key(rlm.rsm.prefix, md.remote_log_segment_id, md.start_offset, 1)  # type: ignore[attr-defined]
            assert (tmp_path / "remote" / key).read_bytes() == encode_metadata(md, sums)
        assert _store_view(tmp_path, rlm, log) == [(m.start_offset, "COPY_SEGMENT_FINISHED") for m in finished]
        assert {layout.kafka_uuid(m.remote_log_segment_id.id) for m in finished} == _data_objects(tmp_path)
        expected = read_all_values(log)
        manager.cleanup_logs()
    # Read back through a new process's view after local retention.
    with _manager(tmp_path) as again:
        log = again.get_or_create_log("t", 0, {**TIERED, "local.retention.bytes": "1"})
        again.cleanup_logs()
        assert log.local_log_start_offset > 0 and read_all_values(log) == expected


@pytest.mark.parametrize("step", ["started", "copy", "custom"])
def test_a_failure_in_a_batch_keeps_the_copies_before_it_and_cleans_up_after_it(
    tmp_path: Path, step: str, caplog: pytest.LogCaptureFixture
) -> None:
    third = _base_of_segment(tmp_path, 2)
    with _manager(tmp_path, **{"fail": step, "fail.start": str(third), "fail.custom.bytes": "4096"}) as manager:
        log = manager.get_or_create_log("t", 0, TIERED)
        _produce(log, SEGMENTS)
        rlm = _rlm(manager)
        tip = rlm.topic_id_partition(log)
        caplog.set_level(logging.ERROR)
        first = rlm.run_once(manager.all_logs())
        assert (first.segments_copied, first.copy_errors) == (2, 1)  # the two before it; none after it was tried
        assert [m.start_offset for m in rlm.finished_segments(tip)] == [0, list(log.segments.values())[1].base_offset]
        assert str(third) in caplog.text or "custom metadata" in caplog.text
        # The segments after it, uploaded with it (BATCH_UPLOADS at a time), got no FINISHED event and were deleted:
        # a FINISHED copy after an unfinished one would be a hole the next copies start past.
        kept = rlm.finished_segments(tip)
        assert _store_view(tmp_path, rlm, log) == [(m.start_offset, "COPY_SEGMENT_FINISHED") for m in kept]
        assert {layout.kafka_uuid(m.remote_log_segment_id.id) for m in kept} == _data_objects(tmp_path)
        if step == "custom":  # as Kafka: the task stops copying until a restart, the refused copy deleted
            assert rlm.copy_task(log).cancelled is not None
            assert rlm.run_once(manager.all_logs()).segments_copied == 0
            assert [s for s, _ in _store_view(tmp_path, rlm, log)] == [m.start_offset for m in rlm.finished_segments(tip)]
            return
        second = rlm.run_once(manager.all_logs())  # the failure was once: the rest is copied now
        assert second.segments_copied == SEGMENTS - 2
        assert second.stale_copies_cleaned == (1 if step == "started" else 0)
        finished = rlm.finished_segments(tip)
        assert [m.start_offset for m in finished] == [s.base_offset for s in list(log.segments.values())[:SEGMENTS]]
        # Nothing of the failed attempt is left: no data object, no event, of a segment not FINISHED.
        assert _store_view(tmp_path, rlm, log) == [(m.start_offset, "COPY_SEGMENT_FINISHED") for m in finished]
        assert {layout.kafka_uuid(m.remote_log_segment_id.id) for m in finished} == _data_objects(tmp_path)
        assert all(m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in finished)


def test_a_claim_landing_during_a_batch_stops_it_before_the_next_finished_event(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The parent checks ownership once per batch of up to COPY_BATCH_SEGMENTS segments; the child copied them all.
    Another data dir's claim (tiered attach) landing during a batch let the deposed child finish every segment after
    it, outside the new owner's lineage: the new owner's retention then deleted up to 16 segments of records (a
    helper lost 16,000 acknowledged records so). The child checks the owner records before each FINISHED event: the
    segments from the claim on are not finished, their objects are deleted, and the partition is lost here."""
    second = _base_of_segment(tmp_path, COPY_BATCH_SEGMENTS)  # (the second request's first segment)
    with _manager(tmp_path, **{"fail": "claim", "fail.start": str(second)}) as manager:
        log = manager.get_or_create_log("t", 0, TIERED)
        _produce(log, SEGMENTS)
        rlm = _rlm(manager)
        tip = rlm.topic_id_partition(log)
        caplog.set_level(logging.ERROR)
        result = rlm.run_once(manager.all_logs())
        # The first request's segments, copied before the claim; none of the second's (the claim landed as its first
        # segment's upload began, before any of its FINISHED events).
        assert (result.segments_copied, result.copy_errors, result.not_owned) == (COPY_BATCH_SEGMENTS, 0, 1)
        assert "lost ownership" in caplog.text
        kept = rlm.finished_segments(tip)
        assert [m.start_offset for m in kept] == [s.base_offset for s in list(log.segments.values())[:COPY_BATCH_SEGMENTS]]
        fresh = RemoteLogMetadataStore.in_bucket(rlm.rsm)  # type: ignore[arg-type]
        states = [m.state for m in fresh.list_remote_log_segments(tip)]
        assert states.count(RemoteLogSegmentState.COPY_SEGMENT_FINISHED) == COPY_BATCH_SEGMENTS, states
        assert {layout.kafka_uuid(m.remote_log_segment_id.id) for m in kept} == _data_objects(tmp_path)
        assert rlm.run_once(manager.all_logs()).segments_copied == 0  # deposed: nothing more


@pytest.mark.parametrize("sync", [True, False])
def test_a_batch_job_not_yet_flushed_by_the_log_is_synced_before_it_is_read(
    tmp_path: Path, sync: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy task leaves the fsyncs of a segment the log has not flushed yet (recovery point below its end) to
    the copier process (CopyJob.sync): each of its files is synced before its checksums are computed."""
    import os
    import uuid

    from tiered import copier_process
    from tiered.backends.local_dir import LocalDirRemoteStorageManager
    from tiered.rlm_copy import CopyJob
    from tiered.rsm import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

    src = tmp_path / "src"
    src.mkdir()
    for name in ("0.log", "0.index", "0.timeindex", "1.snapshot"):
        (src / name).write_bytes(b"x" * 64)
    data = LogSegmentData(src / "0.log", src / "0.index", src / "0.timeindex", None, src / "1.snapshot", b"0\n0\n")
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(TopicIdPartition(uuid.uuid4(), "t", 0)),
                                  0, 0, 0, 0, 0, 64, {0: 0})
    rsm = LocalDirRemoteStorageManager()
    rsm.configure({"dir": str(tmp_path / "remote")})
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}")
        if target.startswith(str(src)):
            synced.append(Path(target).name)
        real_fsync(fd)

    monkeypatch.setattr(copier_process.os, "fsync", fsync)
    outcome = copier_process._copy_batch(rsm, rsm.prefix, [CopyJob(md, data, 4096, 128, 1, sync=sync)])
    assert outcome.failure is None and len(outcome.copied) == 1
    assert sorted(synced) == (["0.index", "0.log", "0.timeindex", "1.snapshot"] if sync else [])


def test_deletes_go_through_the_copier_process_after_their_delete_started_event(tmp_path: Path) -> None:
    """Remote retention deletes each segment's objects in the copier process, its DELETE_SEGMENT_STARTED event
    sent with the delete and written first (tests.gated_rsm.OrderedDeletes refuses a delete without it)."""
    props = local_tier_props(tmp_path, **{"remote.log.storage.manager.class.name": "tests.gated_rsm.OrderedDeletes"})
    with open_log_manager(LogConfig.from_properties(props), start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0, {**TIERED, "retention.bytes": "1"})
        _produce(log, 6)
        rlm = _rlm(manager)
        assert rlm.copy_log_segments(log).segments_copied == 6
        requests = rlm.process_copier.requests
        deleted = rlm.cleanup_remote_segments(log)
        assert deleted >= 5 and rlm.process_copier.requests - requests == 2 * deleted  # the delete, then FINISHED
        assert _store_view(tmp_path, rlm, log) == [(m.start_offset, "COPY_SEGMENT_FINISHED")
                                                  for m in rlm.finished_segments(rlm.topic_id_partition(log))]
        assert len(_data_objects(tmp_path)) == 6 - deleted


def test_a_stop_lets_the_segments_in_flight_finish_and_starts_no_other(tmp_path: Path) -> None:
    """The copier process's batch checks the stop file before starting each segment (Kafka's isCancelled()
    between segments): a stop during the first upload lets the BATCH_UPLOADS segments already in flight finish,
    FINISHED events included, and the others never get a STARTED event."""
    import os
    import uuid

    from tiered import copier_process
    from tiered.backends.local_dir import LocalDirRemoteStorageManager, LocalDirStore
    from tiered.rlm_copy import CopyJob
    from tiered.rsm import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

    stop = tmp_path / "stop"

    window_full = threading.Event()

    class CountingStarts(LocalDirStore):
        started = 0

        def put(self, key: str, data: bytes | BinaryIO, *, if_absent: bool = False) -> None:
            super().put(key, data, if_absent=if_absent)
            if key.endswith(".0.json"):
                self.started += 1
                if self.started == copier_process.BATCH_UPLOADS:
                    window_full.set()

    class StoppedDuringTheFirstUpload(LocalDirRemoteStorageManager):
        store_class = CountingStarts

        def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> bytes | None:
            if metadata.start_offset == 0:
                assert window_full.wait(60)  # every slot taken: the next segment would start once this one ends
                stop.touch()  # the parent is signalled while this segment uploads
            return super().copy_log_segment_data(metadata, segment_data)

    src = tmp_path / "src"
    src.mkdir()
    for name in ("0.log", "0.index", "0.timeindex", "1.snapshot"):
        (src / name).write_bytes(os.urandom(64))
    data = LogSegmentData(src / "0.log", src / "0.index", src / "0.timeindex", None, src / "1.snapshot", b"0\n0\n")
    tip = TopicIdPartition(uuid.uuid4(), "t", 0)
    jobs = [CopyJob(RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), 10 * i, 10 * i + 9, 0, 0, 0, 64,
                                             {0: 10 * i}), data, 4096, 128, 1) for i in range(copier_process.BATCH_UPLOADS + 2)]
    rsm = StoppedDuringTheFirstUpload()
    rsm.configure({"dir": str(tmp_path / "remote")})
    outcome = copier_process._copy_batch(rsm, rsm.prefix, jobs, str(stop))
    assert outcome.failure is None and len(outcome.copied) == copier_process.BATCH_UPLOADS
    events = sorted(p.name.split("-", 1)[0] + p.name[-7:] for p in (tmp_path / "remote").rglob("*.json"))
    started = [f"{10 * i:020d}.0.json" for i in range(copier_process.BATCH_UPLOADS)]
    finished = [f"{10 * i:020d}.1.json" for i in range(copier_process.BATCH_UPLOADS)]
    assert events == sorted(started + finished)
    # Stopped before the batch: nothing starts.
    assert copier_process._copy_batch(rsm, rsm.prefix, jobs[-2:], str(stop)).copied == []


def test_the_copier_process_writes_no_finished_event_for_a_copy_another_process_deleted(tmp_path: Path) -> None:
    """Another process holding this data dir's claim (a copy of the data dir) took a copy under way for one a crash
    left and deleted it: its DELETE_SEGMENT_STARTED event is in the store when the child is about to write
    COPY_SEGMENT_FINISHED. The child writes none (it would name deleted objects) and reports the copy failed, so the
    parent does not count it (tiered.metadata.check_copy_not_deleted)."""

    from tiered.backends.local_dir import LocalDirRemoteStorageManager, LocalDirStore

    started_event, delete_started_event = (f".{int(s)}.json" for s in (RemoteLogSegmentState.COPY_SEGMENT_STARTED,
                                                                       RemoteLogSegmentState.DELETE_SEGMENT_STARTED))

    class DeletedMeanwhile(LocalDirStore):
        def put(self, key: str, data: bytes | BinaryIO, *, if_absent: bool = False) -> None:
            super().put(key, data, if_absent=if_absent)
            if key.endswith(started_event):  # the other process's deletion begins while the objects upload
                super().put(key.removesuffix(started_event) + delete_started_event, data)

    class Rsm(LocalDirRemoteStorageManager):
        store_class = DeletedMeanwhile

    outcome = _copy_one_segment(tmp_path, Rsm)
    assert outcome.copied == [] and outcome.failure is not None
    assert (outcome.failure.stage, outcome.failure.kind) == ("finished", "InvalidStateTransitionError")
    assert "deleted by another process while this one copied it" in outcome.failure.message
    events = sorted(p.name[-7:] for p in (tmp_path / "remote").rglob("*.json"))
    assert events == [".0.json", ".2.json"]  # no COPY_SEGMENT_FINISHED


def test_a_store_error_in_the_childs_owner_check_fails_the_copy_as_a_retriable_error(tmp_path: Path) -> None:
    """The child's check of the owner records before a FINISHED event took any store error (a timeout, a 503) for
    another data dir's claim: a non-retriable 'not owner' that stopped the partition's copies (a review's
    finding). It fails the copy as its FINISHED put's failure would: retried at the next pass."""

    from tiered.backends.local_dir import LocalDirRemoteStorageManager, LocalDirStore

    class OwnersUnlisted(LocalDirStore):
        def list_keys(self, prefix: str) -> list[str]:
            if layout.OWNER_RECORD_PREFIX in prefix:
                raise OSError("injected: the listing timed out")
            return super().list_keys(prefix)

    class Rsm(LocalDirRemoteStorageManager):
        store_class = OwnersUnlisted

    outcome = _copy_one_segment(tmp_path, Rsm, owner_epoch=0)
    assert outcome.copied == [] and outcome.failure is not None
    assert (outcome.failure.stage, outcome.failure.retriable) == ("finished", True), outcome.failure


def _copy_one_segment(tmp_path: Path, rsm_class: type, owner_epoch: int = -1) -> Any:
    """A batch of one small segment (random bytes) copied by the copier process's own function, in this process,
    through ``rsm_class`` on a local directory: its CopyOutcome."""
    import os
    import uuid

    from tiered import copier_process
    from tiered.rlm_copy import CopyJob
    from tiered.rsm import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

    src = tmp_path / "src"
    src.mkdir()
    for name in ("0.log", "0.index", "0.timeindex", "1.snapshot"):
        (src / name).write_bytes(os.urandom(64))
    data = LogSegmentData(src / "0.log", src / "0.index", src / "0.timeindex", None, src / "1.snapshot", b"0\n0\n")
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(TopicIdPartition(uuid.uuid4(), "t", 0)),
                                  0, 9, 0, 0, 0, 64, {0: 0})
    rsm = rsm_class()
    rsm.configure({"dir": str(tmp_path / "remote")})
    return copier_process._copy_batch(rsm, rsm.prefix, [CopyJob(md, data, 4096, 128, 1, owner_epoch=owner_epoch)])
