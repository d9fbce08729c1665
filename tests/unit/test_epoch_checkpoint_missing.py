"""A tiered partition whose ``leader-epoch-checkpoint`` was deleted by hand while stopped (a helper's pass): the cache
started empty, the start's claim at a new owner epoch looked like the partition's first epoch, and the remote tier's
expiration took every copy of an earlier epoch for one outside the lineage. It deleted them all and moved the log
start past them: every acknowledged record below the active segment was gone from both tiers. The loader rebuilds
the cache from the batches, and the expiration follows the owner record's lineage, which the remote epochs are in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from local import LogConfig
from local.records import MemoryRecords, SimpleRecord
from tests.logutil import local_tier_props
from tiered.composition import open_log_manager, remote_log_manager_of

TOPIC = "t"


def _pass(manager: Any) -> Any:
    """One pass of the remote tier (copies, expiration) and local retention; the log and the remote manager."""
    rlm = remote_log_manager_of(manager)
    assert rlm is not None
    rlm.run_once(manager.all_logs())
    manager.cleanup_logs()
    return manager.get_log(TOPIC, 0), rlm


def _segments(log: Any, rlm: Any, count: int) -> None:
    for _ in range(count):
        first = log.log_end_offset
        log.append(MemoryRecords.build([SimpleRecord(b"v%d" % (first + i)) for i in range(100)]))
        log.roll()


@pytest.mark.parametrize("local_retention", ["1", "-2"])
def test_a_deleted_leader_epoch_checkpoint_loses_no_remote_segment(tmp_path: Path, local_retention: str) -> None:
    config = LogConfig.from_properties(local_tier_props(tmp_path, **{
        "remote.log.manager.copier.process.enable": "false"}))
    with open_log_manager(config, start_scheduler=False) as manager:  # epoch 0: offsets 0..199
        log = manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "true",
                                                   "local.retention.bytes": local_retention})
        _segments(log, None, 2)
        _pass(manager)
    with open_log_manager(config, start_scheduler=False) as manager:  # a start: owner epoch 1 from 200
        rlm = remote_log_manager_of(manager)
        assert rlm is not None and rlm.renew_ownership(manager.all_logs()) == 1
        log = manager.get_log(TOPIC, 0)
        _segments(log, rlm, 2)
        log, rlm = _pass(manager)
        copied = [(m.start_offset, m.end_offset) for m in rlm.finished_segments(rlm.topic_id_partition(log))]
        assert copied == [(0, 99), (100, 199), (200, 299), (300, 399)]
        end = log.log_end_offset
    (tmp_path / "data" / f"{TOPIC}-0" / "leader-epoch-checkpoint").unlink()
    with open_log_manager(config, start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        assert rlm is not None and rlm.renew_ownership(manager.all_logs()) == 1
        log, rlm = _pass(manager)
        assert (log.log_start_offset, log.log_end_offset) == (0, end)
        assert [(m.start_offset, m.end_offset) for m in rlm.finished_segments(rlm.topic_id_partition(log))] == copied
        read = log.read(0, 1 << 20)
        assert read.records is not None
        first = next(iter(read.records.batches()))
        assert [r.value for r in first.records()][:2] == [b"v0", b"v1"]


def test_a_missing_leader_epoch_checkpoint_is_rebuilt_from_the_batches(tmp_path: Path) -> None:
    """Kafka starts such a cache empty; it is derived data, and the batches carry their partition leader epochs."""
    from local import LogManager

    config = LogConfig.from_properties({"log.dirs": str(tmp_path / "data")})
    with LogManager(config, start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0)
        for epoch in (0, 3, 7):
            log.assign_epoch_start_offset(epoch)
            _segments(log, None, 2)
        before = [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()]
    assert before == [(0, 0), (3, 200), (7, 400)]
    checkpoint = tmp_path / "data" / f"{TOPIC}-0" / "leader-epoch-checkpoint"
    checkpoint.unlink()
    with LogManager(config, start_scheduler=False) as manager:
        log = manager.get_log(TOPIC, 0)
        assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()] == before
    assert checkpoint.exists()


def test_a_tiered_segments_log_deleted_by_hand_is_read_from_its_remote_copy_not_a_fenced_partition(
    tmp_path: Path
) -> None:
    """The same removal on a tiered topic whose copy of that segment is whole (a helper's pass) took the partition
    for another data dir's writing under its claim: every read and write refused, "a cloned machine?", the missing
    file never named. The hole is recorded, the content check leaves its copy be, and its offsets are read from
    the remote tier."""
    from tiered.ownership import OWNER

    config = LogConfig.from_properties(local_tier_props(tmp_path, **{
        "remote.log.manager.copier.process.enable": "false"}))
    with open_log_manager(config, start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "true"})
        _segments(log, None, 4)
        log, rlm = _pass(manager)
        assert len(rlm.finished_segments(rlm.topic_id_partition(log))) == 4 and log.local_log_start_offset == 0
    (tmp_path / "data" / f"{TOPIC}-0" / f"{200:020d}.log").unlink()
    with open_log_manager(config, start_scheduler=False) as manager:
        log, rlm = _pass(manager)
        state = rlm.ownership.state_of(rlm.topic_id_partition(log))
        assert state is not None and state.state == OWNER, state
        assert log.lost_offsets.find(250) is not None
        values = [r.value for b in log.read(250, 1 << 20).records.batches() for r in b.records()]
        assert values[0] == b"v200" and b"v250" in values  # (the remote segment's batch, 200..299)


def test_copies_in_an_epoch_whose_claim_failed_to_land_are_not_taken_for_outside_the_lineage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start's claim whose write failed (S3 503) leaves the log appending in the new epoch while the newest owner
    record stays at the old one; the first cut of the expiration's lineage rule took the owner record's epochs for
    the lineage and deleted those copies, moving the log start past them (a review's repro). With an owner record
    the readers' rule (within_lineage: its last epoch goes on) decides, through foreign_segments."""
    import tiered.ownership as ownership
    from tiered.errors import TieredStorageError

    config = LogConfig.from_properties(local_tier_props(tmp_path, **{
        "remote.log.manager.copier.process.enable": "false"}))
    with open_log_manager(config, start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
        _segments(log, None, 2)
        _pass(manager)
    with open_log_manager(config, start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        assert rlm is not None
        put_claim = ownership.put_claim

        def unavailable(*args: Any, **kwargs: Any) -> None:
            raise TieredStorageError("S3 503 SlowDown")

        monkeypatch.setattr(ownership, "put_claim", unavailable)
        assert rlm.renew_ownership(manager.all_logs()) == 0
        monkeypatch.setattr(ownership, "put_claim", put_claim)
        log = manager.get_log(TOPIC, 0)
        _segments(log, rlm, 2)
        log, rlm = _pass(manager)
        log.delete_records(200)  # (the epoch-0 copies go: below the log start)
        log, rlm = _pass(manager)
        left = [(m.start_offset, m.end_offset) for m in rlm.finished_segments(rlm.topic_id_partition(log))]
        assert left == [(200, 299), (300, 399)] and log.log_start_offset == 200


def test_a_hole_whose_neighbour_was_copied_after_it_was_recorded_is_not_skipped_by_a_remote_read(
    tmp_path: Path
) -> None:
    """The copy of the segment before a recorded hole names the hole's offsets as its own (its end is the next
    segment's base - 1) and holds none of them: a read in the hole fell to the remote tier and silently answered the
    records after it (a review's repro). Only a remote read that holds the offsets answers; else the hole is said."""
    from local.errors import LostOffsetsError

    config = LogConfig.from_properties(local_tier_props(tmp_path, **{
        "remote.log.manager.copier.process.enable": "false"}))
    with open_log_manager(config, start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "true"})
        _segments(log, None, 4)  # nothing copied yet
    (tmp_path / "data" / f"{TOPIC}-0" / f"{200:020d}.log").unlink()
    with open_log_manager(config, start_scheduler=False) as manager:
        log, _ = _pass(manager)
        assert log.lost_offsets.find(250) is not None
        with pytest.raises(LostOffsetsError):
            log.read(250, 1 << 20)


def test_a_partition_never_written_has_an_empty_checkpoint_and_is_loaded_without_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Kafka creates a partition's leader-epoch-checkpoint with the log. A partition never written here had none, and
    every load said "its leader-epoch-checkpoint was missing: rebuilt ... (no epoch)": about 94 warnings at each start
    of a data dir that had served Kafka clients (the internal topics' partitions; a helper's pass). A new log has an
    empty checkpoint now, a log whose file is missing and which holds nothing gets one without a word, and one
    whose file was lost while it holds batches is still rebuilt and said."""
    import logging

    from local import LogManager

    config = LogConfig.from_properties({"log.dirs": str(tmp_path / "data")})
    with LogManager(config, start_scheduler=False) as manager:
        manager.get_or_create_log("empty", 0)
        manager.get_or_create_log("written", 0).append(MemoryRecords.build([SimpleRecord(b"v")]))
    checkpoint = tmp_path / "data" / "empty-0" / "leader-epoch-checkpoint"
    assert checkpoint.read_text() == "0\n0\n"  # version 0, no entry: Kafka's empty checkpoint
    checkpoint.unlink()
    (tmp_path / "data" / "written-0" / "leader-epoch-checkpoint").unlink()
    for said in (["written-0"], []):  # (the rebuilt checkpoint is written: the next load has it)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="local"), LogManager(config, start_scheduler=False):
            pass
        missing = [r.getMessage().split(":")[0] for r in caplog.records if "was missing" in r.getMessage()]
        assert missing == said
    assert checkpoint.read_text() == "0\n0\n"
    assert (tmp_path / "data" / "written-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
