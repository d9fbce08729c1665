"""acks=-1 to a partition whose min.insync.replicas exceeds its ISR (this one node) is NOT_ENOUGH_REPLICAS and
appends nothing, as Kafka's Partition.appendRecordsToLeader answers; acks=1 and acks=0 are not concerned."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from local.records import MemoryRecords, SimpleRecord
from tests.kafkautil import RawClient, listener, produce_request


@pytest.fixture
def kafka(tmp_path: Path):
    with listener(tmp_path) as k:
        yield k


def _batch(value: bytes) -> bytes:
    return bytes(MemoryRecords.build([SimpleRecord(int(time.time() * 1000), None, value)]))


def test_acks_all_below_min_insync_replicas_is_not_enough_replicas(kafka):
    kafka.broker.create_topic("m", 1, {"min.insync.replicas": "2"})
    with RawClient(kafka.address) as client:
        (p,) = client.call(0, 9, produce_request(9, "m", 0, _batch(b"x"), acks=-1)).responses[0].partition_responses
        assert p.error_code == ErrorCode.not_enough_replicas
        assert "min.isr requirement of 2" in p.error_message
        assert kafka.broker.log("m", 0).log_end_offset == 0
        (p,) = client.call(0, 9, produce_request(9, "m", 0, _batch(b"y"), acks=1)).responses[0].partition_responses
        assert p.error_code == ErrorCode.none
    assert kafka.broker.log("m", 0).log_end_offset == 1
