"""Transactions through the listener (kio requests over a real socket): the coordinator's state machine and its
errors, markers and the last stable offset, fencing, timeouts, offsets committed in a transaction, and recovery of
a transaction left prepared by a crash."""

from __future__ import annotations

import datetime
import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from local.fetch import FetchIsolation
from local.records import MemoryRecords, SimpleRecord
from tests.kafkautil import RawClient, build, listener, metadata_request, produce_request
from tiered.kafka.txn_coordinator import TxnState


def _init(client: RawClient, txn_id: str, timeout_ms: int = 60_000):
    r = client.call(22, 4, build(22, 4, transactional_id=txn_id,
                                 transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
                                 producer_id=-1, producer_epoch=-1))
    return r.error_code, r.producer_id, r.producer_epoch


def _add(client: RawClient, txn_id: str, pid: int, epoch: int, topic: str, *partitions: int):
    t = build(24, 3, "AddPartitionsToTxnTopic", name=topic, partitions=partitions)
    r = client.call(24, 3, build(24, 3, v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
                                 v3_and_below_producer_epoch=epoch, v3_and_below_topics=(t,)))
    return {p.partition_index: p.partition_error_code for t in r.results_by_topic_v3_and_below
            for p in t.results_by_partition}


def _end(client: RawClient, txn_id: str, pid: int, epoch: int, commit: bool) -> ErrorCode:
    return client.call(26, 3, build(26, 3, transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                                    committed=commit)).error_code


def _send(client: RawClient, topic: str, pid: int, epoch: int, seq: int, *values: bytes) -> ErrorCode:
    batch = MemoryRecords.build([SimpleRecord(v) for v in values], producer_id=pid, producer_epoch=epoch,
                                base_sequence=seq, is_transactional=True)
    response = client.call(0, 9, produce_request(9, topic, 0, bytes(batch)))
    return response.responses[0].partition_responses[0].error_code


def _committed_values(kafka, topic: str) -> list[bytes]:
    """What a READ_COMMITTED consumer (kafka-python's: the client is the oracle) reads from offset 0."""
    from kafka import KafkaConsumer, TopicPartition

    log = kafka.broker.log(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=kafka.address, isolation_level="read_committed", group_id=None,
                             enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while consumer.position(tp) < log.last_stable_offset:
        assert time.monotonic() < deadline, f"read only {values}"
        for records in consumer.poll(timeout_ms=200).values():
            values.extend(r.value for r in records)
    consumer.close()
    return values


@pytest.fixture
def kafka(tmp_path: Path):
    with listener(tmp_path, **{"transaction.state.log.num.partitions": "2"}) as k:
        with RawClient(k.address) as client:
            client.call(3, 12, metadata_request(12, ["t"]))
        yield k


def test_commit_and_abort(kafka):
    with RawClient(kafka.address) as client:
        error, pid, epoch = _init(client, "tx")
        assert (error, epoch) == (ErrorCode.none, 0)
        assert _send(client, "t", pid, epoch, 0, b"early") == ErrorCode.invalid_txn_state  # not added yet
        assert _add(client, "tx", pid, epoch, "t", 0) == {0: ErrorCode.none}
        assert _send(client, "t", pid, epoch, 0, b"a", b"b") == ErrorCode.none
        log = kafka.broker.log("t", 0)
        assert log.last_stable_offset == 0  # the transaction is open
        # a batch claiming a later epoch than the coordinator's would fence the producer's own markers
        assert _send(client, "t", pid, epoch + 1, 0, b"forged") == ErrorCode.invalid_producer_epoch
        assert _end(client, "tx", pid, epoch, True) == ErrorCode.none
        assert log.last_stable_offset == log.log_end_offset == 3  # two records and the COMMIT marker
        assert _end(client, "tx", pid, epoch, True) == ErrorCode.none  # a retry
        assert _end(client, "tx", pid, epoch, False) == ErrorCode.invalid_txn_state

        assert _add(client, "tx", pid, epoch, "t", 0) == {0: ErrorCode.none}
        assert _send(client, "t", pid, epoch, 2, b"gone") == ErrorCode.none
        assert _end(client, "tx", pid, epoch, False) == ErrorCode.none
    assert _committed_values(kafka, "t") == [b"a", b"b"]
    markers = [b.is_control_batch for b in kafka.broker.log("t", 0).batches_from(0, FetchIsolation.LOG_END)]
    assert markers == [False, True, False, True]
    state = kafka.broker.txn_coordinator.describe("tx")
    assert (state.state, state.partitions) == (TxnState.COMPLETE_ABORT, frozenset())


def test_coordinator_errors(kafka):
    with RawClient(kafka.address) as client:
        assert _init(client, "tx", timeout_ms=10**9)[0] == ErrorCode.invalid_transaction_timeout
        _, pid, epoch = _init(client, "tx")
        assert _add(client, "tx", pid + 100, epoch, "t", 0) == {0: ErrorCode.invalid_producer_id_mapping}
        assert _add(client, "tx", pid, epoch + 1, "t", 0) == {0: ErrorCode.producer_fenced}
        assert _add(client, "tx", pid, epoch, "t", 0, 9) == {0: ErrorCode.operation_not_attempted,
                                                            9: ErrorCode.unknown_topic_or_partition}
        assert _end(client, "tx", pid, epoch, True) == ErrorCode.invalid_txn_state  # nothing begun
        assert _end(client, "nope", pid, epoch, True) == ErrorCode.invalid_producer_id_mapping


def test_a_new_producer_fences_the_old_one_and_aborts_its_transaction(kafka):
    with RawClient(kafka.address) as old, RawClient(kafka.address) as new:
        _, pid, epoch = _init(old, "tx")
        _add(old, "tx", pid, epoch, "t", 0)
        assert _send(old, "t", pid, epoch, 0, b"zombie") == ErrorCode.none
        error, pid2, epoch2 = _init(new, "tx")
        assert (error, pid2, epoch2) == (ErrorCode.none, pid, epoch + 1)
        assert kafka.broker.log("t", 0).last_stable_offset == kafka.broker.log("t", 0).log_end_offset
        assert _send(old, "t", pid, epoch, 1, b"late") == ErrorCode.invalid_producer_epoch
        assert _end(old, "tx", pid, epoch, True) == ErrorCode.producer_fenced
        # versions older than PRODUCER_FENCED get INVALID_PRODUCER_EPOCH (KafkaApis' rule)
        assert old.call(26, 1, build(26, 1, transactional_id="tx", producer_id=pid, producer_epoch=epoch,
                                     committed=True)).error_code == ErrorCode.invalid_producer_epoch
        for version, code in ((4, ErrorCode.producer_fenced), (3, ErrorCode.invalid_producer_epoch)):
            bump = old.call(22, version, build(22, version, transactional_id="tx", producer_id=pid + 1,
                                               producer_epoch=epoch,
                                               transaction_timeout=datetime.timedelta(milliseconds=60_000)))
            assert bump.error_code == code  # a bump by a producer id that is not the transactional id's
        _add(new, "tx", pid2, epoch2, "t", 0)
        assert _send(new, "t", pid2, epoch2, 0, b"fresh") == ErrorCode.none
        assert _end(new, "tx", pid2, epoch2, True) == ErrorCode.none
    assert _committed_values(kafka, "t") == [b"fresh"]


def test_a_transaction_open_past_its_timeout_is_aborted(kafka):
    with RawClient(kafka.address) as client:
        _, pid, epoch = _init(client, "tx", timeout_ms=1000)
        _add(client, "tx", pid, epoch, "t", 0)
        _send(client, "t", pid, epoch, 0, b"slow")
        txn = kafka.broker.txn_coordinator
        assert txn.abort_timed_out(int(time.time() * 1000)) == 0
        assert txn.abort_timed_out(int(time.time() * 1000) + 1001) == 1
        assert _end(client, "tx", pid, epoch, True) == ErrorCode.producer_fenced  # fenced by the abort
    assert _committed_values(kafka, "t") == []
    assert kafka.broker.log("t", 0).last_stable_offset == kafka.broker.log("t", 0).log_end_offset


def _txn_commit(client: RawClient, txn_id: str, group: str, pid: int, epoch: int, offset: int, topic: str = "t"):
    p = build(28, 3, "TxnOffsetCommitRequestPartition", partition_index=0, committed_offset=offset,
              committed_leader_epoch=-1, committed_metadata="m")
    t = build(28, 3, "TxnOffsetCommitRequestTopic", name=topic, partitions=(p,))
    r = client.call(28, 3, build(28, 3, transactional_id=txn_id, group_id=group, producer_id=pid, producer_epoch=epoch,
                                 generation_id=-1, member_id="", group_instance_id=None, topics=(t,)))
    return r.topics[0].partitions[0].error_code


def _fetch_offset(client: RawClient, group: str, stable: bool = False):
    t = build(9, 7, "OffsetFetchRequestTopic", name="t", partition_indexes=(0,))
    r = client.call(9, 7, build(9, 7, group_id=group, topics=(t,), require_stable=stable))
    p = r.topics[0].partitions[0]
    return p.error_code, p.committed_offset


@pytest.mark.parametrize("commit", [True, False])
def test_offsets_committed_in_a_transaction(tmp_path, commit):
    with listener(tmp_path) as kafka, RawClient(kafka.address) as client:
        client.call(3, 12, metadata_request(12, ["t"]))
        _, pid, epoch = _init(client, "tx")
        assert _txn_commit(client, "tx", "g", pid, epoch, 7) == ErrorCode.invalid_txn_state  # AddOffsetsToTxn first
        added = client.call(25, 3, build(25, 3, transactional_id="tx", producer_id=pid, producer_epoch=epoch,
                                         group_id="g"))
        assert added.error_code == ErrorCode.none
        assert _txn_commit(client, "tx", "g", pid, epoch, 7) == ErrorCode.none
        assert _txn_commit(client, "tx", "g", pid, epoch, 7, topic="nope") == ErrorCode.unknown_topic_or_partition
        assert _fetch_offset(client, "g") == (ErrorCode.none, -1)  # not before the transaction commits
        assert _fetch_offset(client, "g", stable=True) == (ErrorCode.unstable_offset_commit, -1)
        assert _end(client, "tx", pid, epoch, commit) == ErrorCode.none
        expected = 7 if commit else -1
        assert _fetch_offset(client, "g") == (ErrorCode.none, expected)
    with listener(tmp_path) as kafka, RawClient(kafka.address) as client:  # the replay agrees
        assert _fetch_offset(client, "g") == (ErrorCode.none, expected)


def test_a_transaction_prepared_when_the_process_died_is_completed_at_start(tmp_path, monkeypatch):
    from tiered.kafka import txn_coordinator

    with listener(tmp_path) as kafka, RawClient(kafka.address) as client:
        client.call(3, 12, metadata_request(12, ["t"]))
        _, pid, epoch = _init(client, "tx")
        _add(client, "tx", pid, epoch, "t", 0)
        _send(client, "t", pid, epoch, 0, b"durable")

        def crash(self, meta, commit):  # the PrepareCommit record is written, then the process dies
            raise OSError("simulated crash before the markers")

        monkeypatch.setattr(txn_coordinator.TxnCoordinator, "_complete", crash)
        assert _end(client, "tx", pid, epoch, True) == ErrorCode.coordinator_not_available
        assert kafka.broker.log("t", 0).last_stable_offset == 0
    monkeypatch.undo()
    with listener(tmp_path) as kafka:
        log = kafka.broker.log("t", 0)
        assert log.last_stable_offset == log.log_end_offset == 2
        assert kafka.broker.txn_coordinator.describe("tx").state is TxnState.COMPLETE_COMMIT
        assert _committed_values(kafka, "t") == [b"durable"]
        with RawClient(kafka.address) as client:
            assert _init(client, "tx")[1:] == (pid, epoch + 1)  # the id and its epoch survived the restart
