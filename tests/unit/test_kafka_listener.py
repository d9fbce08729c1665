"""The Kafka listener in this process, spoken to with ``kio``'s message classes over a real socket: ApiVersions,
Metadata, Produce, Fetch and ListOffsets, their answers and their errors. The real clients' view is in
tests/integration/test_kafka_clients.py; hostile input in test_kafka_hostile.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from local.producer_state import AppendOrigin
from local.records import MemoryRecords, SimpleRecord
from tests.kafkautil import (
    RawClient,
    build,
    fetch_request,
    list_offsets_request,
    listener,
    metadata_request,
    offset_for_leader_epoch_request,
    produce_request,
)
from tiered.kafka.dispatcher import SUPPORTED


@pytest.fixture
def kafka(tmp_path: Path):
    with listener(tmp_path) as k:
        yield k


def _batch(*values: bytes, timestamp: int | None = None, **kwargs) -> bytes:
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    return bytes(MemoryRecords.build([SimpleRecord(ts, b"k" + v, v) for v in values], **kwargs))


def _create(client: RawClient, topic: str) -> None:
    topics = client.call(3, 12, metadata_request(12, [topic])).topics
    assert topics[0].error_code == ErrorCode.none


# ApiVersions -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_advertises_exactly_the_dispatch_table(kafka, version):
    with RawClient(kafka.address) as client:
        body = build(18, version, client_software_name="test", client_software_version="1")
        response = client.call(18, version, body)
    assert response.error_code == ErrorCode.none
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert advertised == SUPPORTED
    assert advertised[0][1] >= 9 and advertised[1][1] >= 12  # produce and fetch of current clients


def test_api_versions_above_ours_is_answered_in_v0_with_unsupported_version(kafka):
    import struct

    from tests.kafkautil import decode_response

    with RawClient(kafka.address) as client:
        # v99 does not exist: header v2 (api key, version, correlation id, client id, no tags) and an empty body
        payload = struct.pack(">hhih", 18, 99, 7, 1) + b"x" + b"\x00"
        client.send(struct.pack(">i", len(payload)) + payload)
        frame = client.read_frame()
    assert frame is not None
    correlation, response = decode_response(18, 0, frame)
    assert correlation == 7
    assert response.error_code == ErrorCode.unsupported_version
    # KIP-511: ApiVersions' own range only, from which the client picks the version to retry with
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [(18, *SUPPORTED[18])]


@pytest.mark.parametrize("name,version", [("", "1"), ("bad name", "1"), ("ok", "1.0-"), ("-x", "1")])
def test_api_versions_refuses_a_client_software_name_kafka_refuses(kafka, name, version):
    with RawClient(kafka.address) as client:
        body = build(18, 3, client_software_name=name, client_software_version=version)
        response = client.call(18, 3, body)
        assert (response.error_code, response.api_keys) == (ErrorCode.invalid_request, ())
        good = client.call(18, 3, build(18, 3, client_software_name="librdkafka", client_software_version="2.6.1"))
        assert good.error_code == ErrorCode.none and good.api_keys


# Metadata ----------------------------------------------------------------------------------------------------


def test_metadata_names_this_node_and_auto_creates_topics(kafka):
    with RawClient(kafka.address) as client:
        response = client.call(3, 12, metadata_request(12, ["events"]))
        host, port = kafka.address.rsplit(":", 1)
        assert [(b.node_id, b.host, b.port) for b in response.brokers] == [(0, host, int(port))]
        assert response.controller_id == 0 and response.cluster_id
        (topic,) = response.topics
        assert (topic.error_code, topic.name, topic.is_internal) == (ErrorCode.none, "events", False)
        assert topic.topic_id is not None and topic.topic_id == kafka.broker.topic_id("events")
        (partition,) = topic.partitions
        assert (partition.partition_index, partition.leader_id, partition.replica_nodes, partition.isr_nodes) == (
            0, 0, (0,), (0,))
        # v1+: null = every topic; v0: empty = every topic; v1+: empty = none
        assert [t.name for t in client.call(3, 1, metadata_request(1, None)).topics] == ["events"]
        assert [t.name for t in client.call(3, 0, metadata_request(0, [])).topics] == ["events"]
        assert client.call(3, 12, metadata_request(12, [])).topics == ()


def test_metadata_without_auto_create_and_bad_names(kafka):
    with RawClient(kafka.address) as client:
        response = client.call(3, 12, metadata_request(12, ["missing", "bad/name"], allow_auto_topic_creation=False))
    codes = {t.name: t.error_code for t in response.topics}
    assert codes == {"missing": ErrorCode.unknown_topic_or_partition, "bad/name": ErrorCode.invalid_topic_exception}
    assert kafka.broker.topics() == {}


def test_auto_create_off_by_config(tmp_path):
    with listener(tmp_path, **{"auto.create.topics.enable": "false"}) as k, RawClient(k.address) as client:
        (topic,) = client.call(3, 12, metadata_request(12, ["events"])).topics
    assert topic.error_code == ErrorCode.unknown_topic_or_partition


# Produce and Fetch -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("produce_version,fetch_version", [(3, 4), (7, 11), (9, 12)])
def test_produce_then_fetch_returns_the_stored_bytes(kafka, produce_version, fetch_version):
    with RawClient(kafka.address) as client:
        _create(client, "t")
        offsets = []
        for i in range(3):
            response = client.call(0, produce_version, produce_request(produce_version, "t", 0, _batch(b"a%d" % i, b"b")))
            (p,) = response.responses[0].partition_responses
            assert p.error_code == ErrorCode.none
            offsets.append(p.base_offset)
        assert offsets == [0, 2, 4]
        log = kafka.broker.log("t", 0)
        stored = bytes(log.read(0, 1 << 20).records)
        response = client.call(1, fetch_version, fetch_request(fetch_version, {"t": {0: 0}}))
    (partition,) = response.responses[0].partitions
    assert partition.error_code == ErrorCode.none
    assert partition.high_watermark == 6
    assert getattr(partition, "log_start_offset", 0) == 0  # v5+
    assert bytes(partition.records) == stored  # the log's bytes, not a re-encoding
    values = [r.value for b in MemoryRecords(bytes(partition.records)).batches() for r in b.records()]
    assert values == [b"a0", b"b", b"a1", b"b", b"a2", b"b"]


def test_produce_errors_are_per_partition_and_append_nothing(kafka):
    good = _batch(b"x")
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF  # a record byte: the CRC no longer matches
    txn = _batch(b"t", producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)
    marker = bytes(MemoryRecords.end_transaction_marker(5, 0, commit=True))
    with RawClient(kafka.address) as client:
        _create(client, "t")
        cases = {
            ("t", 0, bytes(corrupt)): ErrorCode.corrupt_message,
            ("t", 0, txn): ErrorCode.invalid_producer_id_mapping,  # no transaction of producer 5
            ("t", 0, marker): ErrorCode.invalid_record,
            ("t", 7, good): ErrorCode.unknown_topic_or_partition,
            ("nope", 0, good): ErrorCode.unknown_topic_or_partition,
            ("__consumer_offsets", 0, good): ErrorCode.invalid_topic_exception,
        }
        for (topic, partition, records), code in cases.items():
            (p,) = client.call(0, 9, produce_request(9, topic, partition, records)).responses[0].partition_responses
            assert p.error_code == code, (topic, partition, code)
            assert p.error_message
        (p,) = client.call(0, 9, produce_request(9, "t", 0, good, acks=2)).responses[0].partition_responses
        assert p.error_code == ErrorCode.invalid_required_acks
    assert kafka.broker.log("t", 0).log_end_offset == 0


def test_produce_request_rules_of_kafkas_validate_records(kafka):
    """ProduceRequest.validateRecords: one batch per partition; zstd needs v7; what is refused appends nothing."""
    zstd = _batch(b"z" * 100, compression="zstd")
    with RawClient(kafka.address) as client:
        _create(client, "t")
        cases = {
            (9, _batch(b"a") + _batch(b"b")): ErrorCode.invalid_record,
            (3, _batch(b"a") + _batch(b"b")): ErrorCode.invalid_record,
            (3, zstd): ErrorCode.unsupported_compression_type,
            (6, zstd): ErrorCode.unsupported_compression_type,
        }
        for (version, records), code in cases.items():
            (p,) = client.call(0, version, produce_request(version, "t", 0, records)).responses[0].partition_responses
            assert p.error_code == code, (version, code)
        assert kafka.broker.log("t", 0).log_end_offset == 0
        for version in (7, 9):  # zstd from v7 on
            (p,) = client.call(0, version, produce_request(version, "t", 0, zstd)).responses[0].partition_responses
            assert p.error_code == ErrorCode.none
    assert kafka.broker.log("t", 0).log_end_offset == 2


def test_produce_acks_zero_sends_no_response_and_closes_on_error(kafka):
    with RawClient(kafka.address) as client:
        _create(client, "t")
        from tests.kafkautil import encode_request

        client.send(encode_request(0, 9, produce_request(9, "t", 0, _batch(b"fire"), acks=0), 41))
        # the next request's answer is the first frame back: acks=0 got none
        response = client.call(1, 12, fetch_request(12, {"t": {0: 0}}))
        assert bytes(response.responses[0].partitions[0].records)
        client.send(encode_request(0, 9, produce_request(9, "missing", 0, _batch(b"x"), acks=0), 42))
        assert client.closed_by_server()


def test_idempotent_retry_gets_the_first_offsets(kafka):
    with RawClient(kafka.address) as client:
        _create(client, "t")
        init = client.call(22, 4, build(22, 4, transactional_id=None, transaction_timeout=__import__("datetime").timedelta(0),
                                        producer_id=-1, producer_epoch=-1))
        assert init.error_code == ErrorCode.none and init.producer_id >= 0
        batch = _batch(b"once", producer_id=init.producer_id, producer_epoch=init.producer_epoch, base_sequence=0)
        first = client.call(0, 9, produce_request(9, "t", 0, batch)).responses[0].partition_responses[0]
        again = client.call(0, 9, produce_request(9, "t", 0, batch)).responses[0].partition_responses[0]
        gap = _batch(b"gap", producer_id=init.producer_id, producer_epoch=init.producer_epoch, base_sequence=5)
        skipped = client.call(0, 9, produce_request(9, "t", 0, gap)).responses[0].partition_responses[0]
        second = client.call(22, 4, build(22, 4, transactional_id=None,
                                          transaction_timeout=__import__("datetime").timedelta(0),
                                          producer_id=-1, producer_epoch=-1))
    assert (first.error_code, again.error_code) == (ErrorCode.none, ErrorCode.none)
    assert first.base_offset == again.base_offset == 0
    assert skipped.error_code == ErrorCode.out_of_order_sequence_number
    assert kafka.broker.log("t", 0).log_end_offset == 1
    assert second.producer_id != init.producer_id


def test_producer_ids_are_never_reused_across_restarts(tmp_path):
    import datetime

    seen = set()
    for _ in range(3):
        with listener(tmp_path) as k, RawClient(k.address) as client:
            for _ in range(2):
                r = client.call(22, 4, build(22, 4, transactional_id=None, transaction_timeout=datetime.timedelta(0),
                                             producer_id=-1, producer_epoch=-1))
                assert r.producer_id not in seen
                seen.add(r.producer_id)
    assert len(seen) == 6


def test_fetch_errors(kafka):
    with RawClient(kafka.address) as client:
        _create(client, "t")
        client.call(0, 9, produce_request(9, "t", 0, _batch(b"a", b"b")))
        response = client.call(1, 12, fetch_request(12, {"t": {0: 3, 1: 0}, "nope": {0: 0}}))
        at_end = client.call(1, 12, fetch_request(12, {"t": {0: 2}}))
        session = client.call(1, 12, fetch_request(12, {"t": {0: 0}}, session_id=9))
    codes = {(t.topic, p.partition_index): p.error_code for t in response.responses for p in t.partitions}
    assert codes == {("t", 0): ErrorCode.offset_out_of_range, ("t", 1): ErrorCode.unknown_topic_or_partition,
                     ("nope", 0): ErrorCode.unknown_topic_or_partition}
    (p,) = at_end.responses[0].partitions
    assert (p.error_code, bytes(p.records), p.high_watermark) == (ErrorCode.none, b"", 2)
    assert session.error_code == ErrorCode.fetch_session_id_not_found


def test_a_fetch_answered_corrupt_message_is_logged_once_naming_the_partition(kafka, tmp_path, caplog):
    """A read that fails on damage was answered CORRUPT_MESSAGE and logged nowhere (a helper's pass): the operator
    never learnt of it. It is logged as Kafka's fetch logs it, once however often a consumer retries the offset."""
    import logging

    with RawClient(kafka.address) as client:
        _create(client, "t")
        client.call(0, 9, produce_request(9, "t", 0, _batch(b"a", b"b")))
        (segment,) = (tmp_path / "data" / "t-0").glob("*.log")
        with open(segment, "r+b") as f:  # the first batch's length now runs past the file's end
            f.seek(8)
            f.write((1 << 20).to_bytes(4, "big"))
        with caplog.at_level(logging.ERROR, logger="tiered.kafka.fetch"):
            answers = [client.call(1, 12, fetch_request(12, {"t": {0: 0}})) for _ in range(3)]
    assert {a.responses[0].partitions[0].error_code for a in answers} == {ErrorCode.corrupt_message}
    logged = [r.getMessage() for r in caplog.records if r.name == "tiered.kafka.fetch"]
    assert len(logged) == 1 and "t-0 at offset 0 is answered CORRUPT_MESSAGE" in logged[0], logged
    assert str(segment) in logged[0]


def test_a_partition_another_data_dir_owns_answers_fetch_as_a_deposed_leader(kafka, monkeypatch):
    """A data dir that lost the partition (tiered.ownership) refused produce with NOT_LEADER_OR_FOLLOWER but served
    fetches of its own records, which past the handover are not the partition's (a helper's consumer read them)."""
    with RawClient(kafka.address) as client:
        _create(client, "t")
        client.call(0, 9, produce_request(9, "t", 0, _batch(b"a")))
        monkeypatch.setattr(kafka.broker, "lost_ownership", lambda log: "t-0: this data dir lost ownership")
        response = client.call(1, 12, fetch_request(12, {"t": {0: 0}}))
        # ListOffsets too: its log end is not the partition's (a helper's client still got an answer there)
        offsets = client.call(2, 7, list_offsets_request(7, "t", 0, -1))
    (partition,) = response.responses[0].partitions
    assert partition.error_code == ErrorCode.not_leader_or_follower and not partition.records
    (listed,) = offsets.topics[0].partitions
    assert listed.error_code == ErrorCode.not_leader_or_follower and listed.offset == -1


def test_fetch_respects_max_bytes_but_returns_one_whole_batch(kafka):
    big = _batch(b"x" * 5000)
    with RawClient(kafka.address) as client:
        _create(client, "t")
        for _ in range(3):
            client.call(0, 9, produce_request(9, "t", 0, big))
        response = client.call(1, 12, fetch_request(12, {"t": {0: 0}}, partition_max_bytes=100, max_bytes=100))
    records = bytes(response.responses[0].partitions[0].records)
    assert len(list(MemoryRecords(records).batches())) == 1 and len(records) == len(big)


def test_fetch_answers_are_capped_by_fetch_max_bytes(tmp_path):
    """Kafka caps a consumer's max_bytes by the broker's fetch.max.bytes: one answer's memory is the broker's."""
    batch = _batch(b"x" * 3000)
    with listener(tmp_path, **{"fetch.max.bytes": "8192"}) as kafka, RawClient(kafka.address) as client:
        _create(client, "t")
        for _ in range(5):
            client.call(0, 9, produce_request(9, "t", 0, batch))
        everything = 1 << 30
        response = client.call(1, 12, fetch_request(12, {"t": {0: 0}}, max_bytes=everything,
                                                    partition_max_bytes=everything))
        records = bytes(response.responses[0].partitions[0].records)
        assert len(records) == 8192  # one whole batch and the start of the next, as Kafka's file slice
        assert [b.base_offset for b in MemoryRecords(records).batches()] == [0]
        # a min_bytes the limits cannot reach while more data waits is answered at once, not at max_wait
        for partition_max_bytes in (everything, 7000):
            response = client.call(1, 12, fetch_request(12, {"t": {0: 1}}, max_bytes=everything, min_bytes=1 << 20,
                                                        partition_max_bytes=partition_max_bytes,
                                                        max_wait_ms=3_600_000))
            records = bytes(response.responses[0].partitions[0].records)
            assert [b.base_offset for b in MemoryRecords(records).batches()] == [1]


def test_fetch_long_poll_is_woken_by_an_append(kafka):
    with RawClient(kafka.address) as client:
        _create(client, "t")
    result: dict[str, object] = {}

    def fetch() -> None:
        with RawClient(kafka.address) as consumer:
            started = time.monotonic()
            result["response"] = consumer.call(1, 12, fetch_request(12, {"t": {0: 0}}, max_wait_ms=120_000))
            result["elapsed"] = time.monotonic() - started

    waiting = threading.Thread(target=fetch)
    waiting.start()
    # the fetch is parked once the server has read it and found nothing: wait for the waiter to exist
    deadline = time.monotonic() + 60
    while not kafka.broker.appends._waiters and time.monotonic() < deadline:
        time.sleep(0.01)
    assert kafka.broker.appends._waiters, "the fetch never waited"
    with RawClient(kafka.address) as producer:
        producer.call(0, 9, produce_request(9, "t", 0, _batch(b"wake")))
    waiting.join(120)
    response = result["response"]
    assert bytes(response.responses[0].partitions[0].records)  # type: ignore[attr-defined]
    assert result["elapsed"] < 120  # woken by the append, not by max_wait_ms


def test_fetch_long_poll_is_woken_by_an_append_of_any_path(tmp_path):
    """An append that does not come through the listener (the HTTP endpoint's, ``tiered produce``'s: Log.append in
    this process) wakes a waiting fetch too, on a log loaded at start as on one created since."""
    with listener(tmp_path) as kafka, RawClient(kafka.address) as client:
        _create(client, "loaded")
    with listener(tmp_path) as kafka:
        manager = kafka.broker.manager
        for topic in ("loaded", "created"):
            log = manager.get_or_create_log(topic, 0)
            with RawClient(kafka.address) as consumer:
                from tests.kafkautil import encode_request

                consumer.send(encode_request(1, 12, fetch_request(12, {topic: {0: 0}}, max_wait_ms=3_600_000)))
                deadline = time.monotonic() + 60
                while not kafka.broker.appends._waiters and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert kafka.broker.appends._waiters, "the fetch never waited"
                log.append(_batch(b"from elsewhere"))
                frame = consumer.read_frame()  # within the client's read bound, far below max_wait_ms
                assert frame is not None
                from tests.kafkautil import decode_response

                (p,) = decode_response(1, 12, frame)[1].responses[0].partitions
                assert [r.value for b in MemoryRecords(bytes(p.records)).batches() for r in b.records()] == [
                    b"from elsewhere"]
        listener_count = len(manager._append_listeners)
        kafka.stop()
        assert len(manager._append_listeners) == listener_count - 1


def test_fetch_long_poll_ends_empty_at_max_wait(kafka):
    with RawClient(kafka.address) as client:
        _create(client, "t")
        started = time.monotonic()
        response = client.call(1, 12, fetch_request(12, {"t": {0: 0}}, max_wait_ms=200))
        assert time.monotonic() - started >= 0.2
    (p,) = response.responses[0].partitions
    assert (p.error_code, bytes(p.records)) == (ErrorCode.none, b"")


def test_read_committed_fetch_lists_aborted_transactions_and_stops_at_the_lso(kafka):
    with RawClient(kafka.address) as client:
        _create(client, "t")
    log = kafka.broker.log("t", 0)
    log.append(MemoryRecords.build([SimpleRecord(b"k", b"aborted")], producer_id=9, producer_epoch=0,
                                   base_sequence=0, is_transactional=True))
    log.append(MemoryRecords.end_transaction_marker(9, 0, commit=False), origin=AppendOrigin.COORDINATOR)
    later = int(time.time() * 1000) + 60_000  # the open transaction's record has the largest timestamp
    log.append(MemoryRecords.build([SimpleRecord(later, b"k", b"open")], producer_id=10, producer_epoch=0,
                                   base_sequence=0, is_transactional=True))
    with RawClient(kafka.address) as client:
        committed = client.call(1, 12, fetch_request(12, {"t": {0: 0}}, isolation_level=1))
        uncommitted = client.call(1, 12, fetch_request(12, {"t": {0: 0}}, isolation_level=0))
        latest_committed = client.call(2, 9, list_offsets_request(9, "t", 0, -1, isolation_level=1))
        # -3 and a timestamp are found only below what the isolation level may read (Kafka's lastFetchableOffset)
        for timestamp in (-3, later):
            (found,) = client.call(2, 9, list_offsets_request(9, "t", 0, timestamp, isolation_level=1)).topics[0].partitions
            assert (found.error_code, found.offset, found.timestamp) == (ErrorCode.none, -1, -1)
            (found,) = client.call(2, 9, list_offsets_request(9, "t", 0, timestamp, isolation_level=0)).topics[0].partitions
            assert (found.offset, found.timestamp) == (2, later)
    (c,) = committed.responses[0].partitions
    assert [(a.producer_id, a.first_offset) for a in c.aborted_transactions] == [(9, 0)]
    assert c.last_stable_offset == 2
    offsets = [r.offset for b in MemoryRecords(bytes(c.records)).batches() for r in b.records()]
    assert max(offsets) < 2  # not the open transaction's record
    (u,) = uncommitted.responses[0].partitions
    assert u.aborted_transactions is None and u.high_watermark == 3
    assert latest_committed.topics[0].partitions[0].offset == 2


# OffsetForLeaderEpoch ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 3, 4])
def test_offset_for_leader_epoch_answers_where_each_epoch_ends(kafka, version):
    """Not served before: kafka-python consumers retried it for ever after a restart's new leader epoch, and their
    partitions were never fetched again (a helper's pass). Kafka's answers, from the leader-epoch cache."""
    with RawClient(kafka.address) as client:
        _create(client, "t")
        client.call(0, 9, produce_request(9, "t", 0, _batch(b"a", b"b")))  # offsets 0-1 in epoch 0
        log = kafka.broker.log("t", 0)
        log.assign_epoch_start_offset(3)  # a restart's claim: a new leader epoch from offset 2
        client.call(0, 9, produce_request(9, "t", 0, _batch(b"c")))

        def ask(epoch: int, current: int = -1, topic: str = "t") -> tuple[int, int, int]:
            body = offset_for_leader_epoch_request(version, topic, 0, epoch, current)
            (p,) = client.call(23, version, body).topics[0].partitions
            return p.error_code, p.leader_epoch, p.end_offset

        assert ask(0) == (ErrorCode.none, 0, 2)  # epoch 0 ends where epoch 3 starts
        assert ask(1) == (ErrorCode.none, 0, 2)  # an epoch never led: the largest below it, and the same end
        assert ask(3) == (ErrorCode.none, 3, 3)  # the latest: the log end offset
        assert ask(7) == (ErrorCode.none, -1, -1)  # above every known epoch
        assert ask(3, current=3) == (ErrorCode.none, 3, 3)
        assert ask(0, current=2)[0] == ErrorCode.fenced_leader_epoch
        assert ask(0, current=4)[0] == ErrorCode.unknown_leader_epoch
        assert ask(0, topic="nope")[0] == ErrorCode.unknown_topic_or_partition


# ListOffsets -------------------------------------------------------------------------------------------------


def test_list_offsets_special_and_by_timestamp(kafka):
    with RawClient(kafka.address) as client:
        _create(client, "t")
        for i, ts in enumerate([1000, 5000, 3000]):
            client.call(0, 9, produce_request(9, "t", 0, _batch(b"v%d" % i, timestamp=ts)))

        def ask(timestamp: int, version: int = 9):
            (p,) = client.call(2, version, list_offsets_request(version, "t", 0, timestamp)).topics[0].partitions
            return p.error_code, p.offset, p.timestamp

        assert ask(-2) == (ErrorCode.none, 0, -1)
        assert ask(-1) == (ErrorCode.none, 3, -1)
        assert ask(-3) == (ErrorCode.none, 1, 5000)
        assert ask(-4) == (ErrorCode.none, 0, -1)
        assert ask(-5) == (ErrorCode.none, -1, -1)  # nothing tiered
        assert ask(2000) == (ErrorCode.none, 1, 5000)
        assert ask(6000) == (ErrorCode.none, -1, -1)
        assert ask(-4, version=7)[0] == ErrorCode.unsupported_version
        assert ask(-5, version=8)[0] == ErrorCode.unsupported_version
        assert ask(-9)[0] == ErrorCode.invalid_request
        (p,) = client.call(2, 9, list_offsets_request(9, "t", 3, -1)).topics[0].partitions
        assert p.error_code == ErrorCode.unknown_topic_or_partition


def test_engine_errors_map_to_kafkas_codes():
    from local import errors as local_errors
    from tiered import errors as tiered_errors
    from tiered.kafka.errors import error_code

    assert error_code(local_errors.OffsetOutOfRangeError("x")) == ErrorCode.offset_out_of_range
    assert error_code(local_errors.RecordBatchTooLargeError("x")) == ErrorCode.record_list_too_large
    assert error_code(local_errors.RecordTooLargeError("x")) == ErrorCode.message_too_large
    assert error_code(local_errors.LogDirOfflineError("x")) == ErrorCode.kafka_storage_error
    assert error_code(tiered_errors.RemoteChecksumError("x")) == ErrorCode.corrupt_message
    assert error_code(tiered_errors.RemoteStorageTimeoutError("x")) == ErrorCode.request_timed_out
    assert error_code(tiered_errors.RemoteStorageError("x")) == ErrorCode.kafka_storage_error
    assert error_code(RuntimeError("a bug")) == ErrorCode.unknown_server_error


def test_a_real_kafka_brokers_data_dir_is_served(tmp_path):
    """Kafka 4.0's own log dir (tests/fixtures): its cluster id, its topic, its records to kafka-python; the KRaft
    metadata log stays hidden, as Kafka hides it."""
    import shutil

    from kafka import KafkaConsumer, TopicPartition

    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "kafka-4.0-kraft-logs", tmp_path / "data")
    with listener(tmp_path) as kafka, RawClient(kafka.address) as client:
        response = client.call(3, 12, metadata_request(12, None))
        assert response.cluster_id == "rwd2jqiwRaCycLq7mKVHXA"  # its meta.properties
        assert [t.name for t in response.topics] == ["foo"]
        (hidden,) = client.call(3, 12, metadata_request(12, ["__cluster_metadata"])).topics  # not auto-created
        assert hidden.error_code == ErrorCode.unknown_topic_or_partition
        assert not (tmp_path / "data" / "__cluster_metadata-0" / "tiered-topic.properties").exists()
        consumer = KafkaConsumer(bootstrap_servers=kafka.address, group_id=None, enable_auto_commit=False)
        tp = TopicPartition("foo", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values = []
        deadline = time.monotonic() + 60
        while len(values) < 3 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend((r.offset, r.value) for r in records)
        consumer.close()
    assert values == [(0, b"m1"), (1, b"m2"), (2, b"m3")]
