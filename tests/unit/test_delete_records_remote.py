"""DeleteRecords over the Kafka protocol on a tiered topic whose older records are in the remote tier only: the log
start moves into the remote tier, the remote segments wholly below it are deleted by the expiration task (Kafka's
log-start-offset breach in the RemoteLogManager), and what is left is read from both tiers from the new start."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from tests.kafkautil import RawClient, build, fetch_request, list_offsets_request, ms
from tests.logutil import local_tier_props
from tiered.composition import remote_log_manager_of
from tiered.kafka import start_listener

TOPIC = "t"
PER_SEGMENT = 10


@pytest.fixture
def tiered(tmp_path: Path) -> Iterator[tuple[LogManager, Any, Any]]:
    """Tiered topic ``t``: three closed segments of 10 records copied and gone from the local tier, and an active
    one of 10 more; a Kafka listener in front (the manager's tasks not scheduled: each pass is run here)."""
    config = LogConfig.from_properties(local_tier_props(tmp_path, **{
        "remote.log.manager.copier.process.enable": "false"}))
    with LogManager(config, start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
        for segment in range(4):
            log.append(MemoryRecords.build([SimpleRecord(b"v%d" % (segment * PER_SEGMENT + i))
                                            for i in range(PER_SEGMENT)]))
            if segment < 3:
                log.roll()
        rlm = remote_log_manager_of(manager)
        assert rlm is not None
        rlm.run_once(manager.all_logs())
        log.delete_old_segments()
        assert log.local_log_start_offset == 3 * PER_SEGMENT and len(rlm.finished_segments(rlm.topic_id_partition(log))) == 3
        kafka = start_listener(manager, config, "127.0.0.1", 0)
        try:
            yield manager, rlm, kafka
        finally:
            kafka.stop()


def test_delete_records_into_the_remote_tier_deletes_the_remote_segments_below_it(
    tiered: tuple[LogManager, Any, Any]
) -> None:
    manager, rlm, kafka = tiered
    log = manager.get_log(TOPIC, 0)
    assert log is not None
    tip = rlm.topic_id_partition(log)
    with RawClient(kafka.address) as client:
        part = build(21, 2, "DeleteRecordsPartition", partition_index=0, offset=PER_SEGMENT + 5)
        body = build(21, 2, topics=(build(21, 2, "DeleteRecordsTopic", name=TOPIC, partitions=(part,)),),
                     timeout=ms(30_000))
        (answer,) = client.call(21, 2, body).topics[0].partitions
        assert (answer.error_code, answer.low_watermark) == (ErrorCode.none, PER_SEGMENT + 5)
        rlm.run_once(manager.all_logs())  # the expiration task: the first segment (0..9) is wholly below the start
        assert [md.start_offset for md in rlm.finished_segments(tip)] == [PER_SEGMENT, 2 * PER_SEGMENT]
        earliest = client.call(2, 9, list_offsets_request(9, TOPIC, 0, -2)).topics[0].partitions[0]
        assert (earliest.error_code, earliest.offset) == (ErrorCode.none, PER_SEGMENT + 5)
        below = client.call(1, 12, fetch_request(12, {TOPIC: {0: PER_SEGMENT + 4}})).responses[0].partitions[0]
        assert below.error_code == ErrorCode.offset_out_of_range
        read = client.call(1, 12, fetch_request(12, {TOPIC: {0: PER_SEGMENT + 5}})).responses[0].partitions[0]
        assert read.error_code == ErrorCode.none and read.log_start_offset == PER_SEGMENT + 5
        values = [r.value for batch in MemoryRecords(bytes(read.records)).batches() for r in batch.records()
                  if r.offset >= PER_SEGMENT + 5]
        assert values[:5] == [b"v%d" % i for i in range(PER_SEGMENT + 5, 2 * PER_SEGMENT)]  # from the remote tier
