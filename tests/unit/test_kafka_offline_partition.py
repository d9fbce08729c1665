"""Produce, Fetch and ListOffsets to a partition in an offline data dir answer KAFKA_STORAGE_ERROR, as Kafka's
ReplicaManager does for HostedPartition.Offline (and as Metadata here says), not UNKNOWN_TOPIC_OR_PARTITION: with that,
kafka-python's producer refreshed metadata until its batches expired (120 s), and the answers disagreed."""

from __future__ import annotations

from pathlib import Path

from kio.schema.errors import ErrorCode

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from tests.kafkautil import RawClient, fetch_request, list_offsets_request, listener, produce_request


def test_a_partition_of_an_offline_dir_answers_kafka_storage_error(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False) as manager:
        manager.get_or_create_log("t", 0)
        manager.get_or_create_log("t", 1)
    # t-1 cannot load (its stored config pairs compact with remote storage): offline, t-0 served
    (data / "t-1" / "tiered-topic.properties").write_text("cleanup.policy=compact\nremote.storage.enable=true\n")
    records = bytes(MemoryRecords.build([SimpleRecord(b"k", b"v")]))
    with listener(tmp_path) as kafka, RawClient(kafka.address) as client:
        assert ("t", 1) in kafka.broker.manager.offline_partitions
        (ok,) = client.call(0, 9, produce_request(9, "t", 0, records)).responses[0].partition_responses
        assert ok.error_code == ErrorCode.none
        (produced,) = client.call(0, 9, produce_request(9, "t", 1, records)).responses[0].partition_responses
        assert produced.error_code == ErrorCode.kafka_storage_error, produced
        (fetched,) = client.call(1, 12, fetch_request(12, {"t": {1: 0}})).responses[0].partitions
        assert fetched.error_code == ErrorCode.kafka_storage_error, fetched
        (listed,) = client.call(2, 7, list_offsets_request(7, "t", 1, -1)).topics[0].partitions
        assert listed.error_code == ErrorCode.kafka_storage_error, listed
        (unknown,) = client.call(0, 9, produce_request(9, "t", 7, records)).responses[0].partition_responses
        assert unknown.error_code == ErrorCode.unknown_topic_or_partition
