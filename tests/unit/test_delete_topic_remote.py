"""DeleteTopics of a tiered topic beside the remote tier's tasks (a helper's pass on a shared bucket): the check that
the topic holds no remote data raced a first copy under way, which then finished into the store of a deleted topic;
and the claims a deleted topic's partitions had made stayed in the bucket, naming a second topic id to a later
attach of a topic created again under the name."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from tests.gated_rsm import LIMIT, Gate
from tests.logutil import local_tier_props
from tiered.composition import remote_log_manager_of
from tiered.kafka.broker import KafkaBroker, TopicError
from tiered.layout import topic_ids_in_store

TOPIC = "t"


@pytest.fixture
def tiered(tmp_path: Path) -> Iterator[tuple[LogManager, KafkaBroker, Any]]:
    """A manager (no scheduled tasks, copies in this process) with tiered topic ``t`` holding one closed segment."""
    config = LogConfig.from_properties(local_tier_props(tmp_path, **{
        "remote.log.manager.copier.process.enable": "false"}))
    with LogManager(config, start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "true"})
        log.append(MemoryRecords.build([SimpleRecord(b"v%d" % i) for i in range(100)]))
        log.roll()
        rlm = remote_log_manager_of(manager)
        assert rlm is not None
        yield manager, KafkaBroker(manager, config, "127.0.0.1", 9092), rlm


def _stop_after_the_first_upload(task: Any, monkeypatch: pytest.MonkeyPatch) -> Gate:
    """The copy task's first segment stops once its objects are in the store (COPY_SEGMENT_FINISHED is not), at the
    gate returned; later segments pass."""
    upload, gate = task._copy_data, Gate()

    def uploads_then_stops(*args: Any) -> Any:
        done = upload(*args)
        gate.reach()
        return done

    monkeypatch.setattr(task, "_copy_data", uploads_then_stops)
    return gate


def _a_pass_at_the_gate(manager: LogManager, rlm: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Gate, Any]:
    """A remote pass started in a thread and stopped after its first upload: (the log, the gate, the thread)."""
    log = manager.get_log(TOPIC, 0)
    gate = _stop_after_the_first_upload(rlm.copy_task(log), monkeypatch)
    copying = threading.Thread(target=rlm.run_once, args=(manager.all_logs(),))
    copying.start()
    assert gate.arrived.wait(LIMIT)
    return log, gate, copying


def test_a_deletion_waits_for_a_copy_under_way_and_is_refused_once_it_finished(
    tiered: tuple[LogManager, KafkaBroker, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    manager, broker, rlm = tiered
    log, gate, copying = _a_pass_at_the_gate(manager, rlm, monkeypatch)
    with pytest.raises(TopicError) as refused:
        broker.delete_topic(TOPIC, deadline=time.monotonic() + 0.2)  # it waits for the copy under way, in vain
    assert refused.value.code == ErrorCode.request_timed_out and "retry" in str(refused.value)
    assert broker.partitions_of(TOPIC) == [0]
    gate.release()
    copying.join(LIMIT)
    assert log.has_remote_data  # the copy finished into a topic that still exists
    with pytest.raises(TopicError) as refused:
        broker.delete_topic(TOPIC)
    assert refused.value.code == ErrorCode.policy_violation


def test_a_deleted_topic_without_remote_data_leaves_no_claim_in_the_bucket(
    tiered: tuple[LogManager, KafkaBroker, Any], tmp_path: Path
) -> None:
    manager, broker, rlm = tiered
    log = manager.get_log(TOPIC, 0)
    assert log is not None
    rlm.ownership.ensure_owner(log, rlm.topic_id_partition(log))  # the claim a first pass makes
    store, prefix = rlm.parts.metadata.store, rlm.parts.metadata.prefix
    assert list(topic_ids_in_store(store, prefix, TOPIC)) == [log.topic_id]
    broker.delete_topic(TOPIC)
    assert broker.partitions_of(TOPIC) == []
    assert topic_ids_in_store(store, prefix, TOPIC) == {}
    assert [p for p in (tmp_path / "remote").rglob("*") if p.is_file() and f"{TOPIC}-" in str(p)] == []


def test_a_claim_another_data_dir_made_after_the_deletions_check_is_not_purged(
    tiered: tuple[LogManager, KafkaBroker, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deleted partition's objects are purged only while its newest claim is this data dir's: one made by another
    data dir between that check and the purge's listing (an attach of the topic id elsewhere) is kept, and so is
    everything else there."""
    from dataclasses import replace

    from tiered.metadata import RemoteLogMetadataStore
    from tiered.ownership import put_claim

    manager, broker, rlm = tiered
    log = manager.get_log(TOPIC, 0)
    assert log is not None
    tip = rlm.topic_id_partition(log)
    mine = rlm.ownership.ensure_owner(log, tip).owner
    assert mine is not None
    metadata = rlm.parts.metadata
    listed = metadata.list_remote_log_segments

    def claimed_elsewhere_after_the_check(t: Any, *args: Any) -> Any:
        found = listed(t, *args)
        if t == tip:  # (the deletion's check: no segment, the newest claim ours) - then another data dir claims it
            put_claim(RemoteLogMetadataStore(metadata.store, metadata.prefix), tip,
                      replace(mine, owner_epoch=mine.owner_epoch + 1, owner_id="b" * 32,
                              lineage=(*mine.lineage[:-1], (mine.owner_epoch + 1, mine.lineage[-1][1]))))
        return found

    monkeypatch.setattr(metadata, "list_remote_log_segments", claimed_elsewhere_after_the_check)
    broker.delete_topic(TOPIC)
    assert broker.partitions_of(TOPIC) == []
    store = RemoteLogMetadataStore(metadata.store, metadata.prefix)
    assert [(r.owner_epoch, r.owner_id) for r in store.owner_records(tip)] == [
        (mine.owner_epoch, mine.owner_id), (mine.owner_epoch + 1, "b" * 32)]


def test_a_copy_under_way_when_tiering_is_turned_off_is_still_waited_for_by_a_deletion(
    tiered: tuple[LogManager, KafkaBroker, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The deletion held only the tasks of partitions tiered by their config now: a first copy under way, then
    remote storage turned off (nothing remote yet), then DeleteTopics, and the copy finished into the store of a
    deleted topic (a review's pass: 13 objects left). Its tasks are held whatever the config says; once the copy
    lands, the KIP-950 pass deletes it, and the topic goes with nothing left in the bucket."""
    manager, broker, rlm = tiered
    log, gate, copying = _a_pass_at_the_gate(manager, rlm, monkeypatch)
    broker.alter_topic_config(TOPIC, {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
    with pytest.raises(TopicError) as refused:
        broker.delete_topic(TOPIC, deadline=time.monotonic() + 0.2)
    assert refused.value.code == ErrorCode.request_timed_out
    gate.release()
    copying.join(LIMIT)
    assert not log.has_remote_data  # the copy landed, and the same pass's expiration task deleted it (KIP-950)
    broker.delete_topic(TOPIC)
    assert [p for p in (tmp_path / "remote").rglob("*") if p.is_file()] == []


def test_a_copy_run_stops_at_the_next_segment_once_tiering_is_turned_off(
    tiered: tuple[LogManager, KafkaBroker, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy run went on copying segment after segment once remote storage was turned off, each to be deleted again
    by the KIP-950 pass (a helper's pass saw copies land after the deletion began). It stops at the next segment."""
    manager, broker, rlm = tiered
    log = manager.get_log(TOPIC, 0)
    for n in range(3):  # three more closed segments
        log.append(MemoryRecords.build([SimpleRecord(b"w%d" % n)]))
        log.roll()
    task = rlm.copy_task(log)
    gate = _stop_after_the_first_upload(task, monkeypatch)
    results: list[Any] = []
    copying = threading.Thread(target=lambda: results.append(task.copy_log_segments(log)))
    copying.start()
    assert gate.arrived.wait(LIMIT)
    broker.alter_topic_config(TOPIC, {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
    gate.release()
    copying.join(LIMIT)
    assert results[0].segments_copied == 1
