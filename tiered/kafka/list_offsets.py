"""ListOffsets: an offset by timestamp, or one of Kafka's special positions, for each partition asked.

Special timestamps (Kafka's ``ListOffsetsRequest``): -1 latest (the high watermark under READ_UNCOMMITTED, the last
stable offset under READ_COMMITTED), -2 earliest (the log start offset, which may be in the remote tier), -3 the
offset of the largest timestamp (v7+), -4 earliest-local (the local log start offset, v8+), -5 latest-tiered (the
highest offset copied to the remote tier, -1 when none, v9+). A special value the request's version does not know
is UNSUPPORTED_VERSION, as in Kafka; any other negative value INVALID_REQUEST.

A timestamp >= 0 finds the first offset whose record timestamp is at or after it, in either tier; none (or one
past what the isolation level may see: the high watermark, or the last stable offset under READ_COMMITTED, which
bounds -3 and -5 too, as Kafka's ``lastFetchableOffset`` does) is answered ``offset -1, timestamp -1`` with no
error, as Kafka does.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from local.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from tiered.kafka.broker import KafkaBroker, leader_epoch
from tiered.kafka.errors import error_code
from tiered.kafka.protocol import NO_THROTTLE, Request, make

READ_COMMITTED = 1
# The first ListOffsets version that knows each special timestamp.
_SINCE_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9}


def handle_list_offsets(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    module = request.response_module
    committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
    topics = []
    for topic in body.topics:
        partitions = tuple(_one(broker, module, request.api_version, topic.name, p, committed) for p in topic.partitions)
        topics.append(make(module, "ListOffsetsTopicResponse", name=topic.name, partitions=partitions))
    return make(module, "ListOffsetsResponse", throttle_time=NO_THROTTLE, topics=tuple(topics))


def _one(broker: KafkaBroker, module: Any, version: int, topic: str, wanted: Any, committed: bool) -> Any:
    partition = wanted.partition_index
    timestamp = int(wanted.timestamp)
    log, refused = broker.led_log(topic, partition, getattr(wanted, "current_leader_epoch", -1))
    if log is None:
        return _answer(module, partition, refused)
    if timestamp < 0 and timestamp not in (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, *_SINCE_VERSION):
        return _answer(module, partition, ErrorCode.invalid_request)
    if version < _SINCE_VERSION.get(timestamp, 0):
        return _answer(module, partition, ErrorCode.unsupported_version)
    bound = log.last_stable_offset if committed else log.high_watermark
    try:
        if timestamp == LATEST_TIMESTAMP:
            return _answer(module, partition, ErrorCode.none, -1, bound, leader_epoch(log))
        found = log.offset_for_timestamp(timestamp)
    except Exception as exc:
        return _answer(module, partition, error_code(exc))
    if found is None or (timestamp not in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP) and found.offset >= bound):
        return _answer(module, partition, ErrorCode.none)
    epoch = found.leader_epoch if found.leader_epoch is not None else -1
    return _answer(module, partition, ErrorCode.none, found.timestamp, found.offset, epoch)


def _answer(module: Any, partition: int, code: ErrorCode, timestamp: int = -1, offset: int = -1,
            epoch: int = -1) -> Any:
    return make(module, "ListOffsetsPartitionResponse", partition_index=partition, error_code=code,
                timestamp=timestamp, offset=offset, leader_epoch=epoch)
