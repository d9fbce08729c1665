"""OffsetForLeaderEpoch (API 23): where a leader epoch ends in each partition asked (KIP-101, KIP-320).

A consumer that learns of a new leader epoch (every ``tiered run`` claims its partitions at a new one, as a
re-elected Kafka leader does) checks its position with it before it fetches on: clients that find the API missing
may retry it for ever (kafka-python did, silently, after each restart). The answer is Kafka's
``Partition.lastOffsetForLeaderEpoch`` from the partition's leader-epoch cache (``LeaderEpochFileCache.endOffsetFor``):
the requested epoch, or the largest below it, and the first offset of the next higher epoch (the log end offset
for the latest); ``leader_epoch -1, end_offset -1`` with no error for an epoch above every known one, or for
``-1``. ``current_leader_epoch`` is checked as a fetch checks it (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from local.epoch import UNDEFINED_EPOCH_OFFSET
from tiered.kafka.broker import KafkaBroker
from tiered.kafka.errors import error_code
from tiered.kafka.protocol import NO_THROTTLE, Request, make


def handle_offset_for_leader_epoch(broker: KafkaBroker, request: Request) -> Any:
    module = request.response_module
    topics = []
    for topic in request.body.topics:
        partitions = tuple(_one(broker, module, topic.topic, p) for p in topic.partitions)
        topics.append(make(module, "OffsetForLeaderTopicResult", topic=topic.topic, partitions=partitions))
    return make(module, "OffsetForLeaderEpochResponse", throttle_time=NO_THROTTLE, topics=tuple(topics))


def _one(broker: KafkaBroker, module: Any, topic: str, wanted: Any) -> Any:
    partition = wanted.partition
    log, refused = broker.led_log(topic, partition, getattr(wanted, "current_leader_epoch", -1))
    if log is None:
        return _answer(module, partition, refused)
    try:
        epoch, end = log.end_offset_for_epoch(int(wanted.leader_epoch))
    except Exception as exc:
        return _answer(module, partition, error_code(exc))
    if end == UNDEFINED_EPOCH_OFFSET:
        return _answer(module, partition, ErrorCode.none)
    return _answer(module, partition, ErrorCode.none, epoch, end)


def _answer(module: Any, partition: int, code: ErrorCode, epoch: int = -1, end: int = -1) -> Any:
    return make(module, "EpochEndOffset", error_code=code, partition=partition, leader_epoch=epoch, end_offset=end)
