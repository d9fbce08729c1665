"""Produce: a client's record batches appended as they arrive, with the engine's leader-append rules.

Each partition's records go to :meth:`local.log.Log.append` unchanged (Kafka's ``appendAsLeader``: offsets and the
leader epoch assigned, every batch through the LogValidator rules, idempotent producers' sequences checked and a
retried batch answered with its first append's offsets). The answer per partition is Kafka's: the base offset, the
log append time (-1 under CreateTime), the log start offset, or the error code of what the engine refused with its
one-line message (v8+).

``acks``: 0 (no answer at all; an error closes the connection, as Kafka does, so the producer notices and
refreshes its metadata), 1 and -1 (all). One node is the whole ISR, so "all" holds once the append returned: the
records are as durable as the topic's flush policy (``flush.messages``/``flush.ms``) makes them, as they would be
on every replica of a Kafka cluster. Other values: INVALID_REQUIRED_ACKS.

Refused before any append: writes to ``__consumer_offsets`` (INVALID_TOPIC_EXCEPTION, it is the group
coordinator's), control batches (INVALID_RECORD: only the broker writes markers), and transactional batches
(this node has no transaction coordinator: see docs/kafka-protocol.md).
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from local.records.batch import ATTRIBUTES_OFFSET, CONTROL_FLAG_MASK, LENGTH_OFFSET, TRANSACTIONAL_FLAG_MASK
from local.records.constants import LOG_OVERHEAD
from tiered.kafka.broker import INTERNAL_TOPICS, KafkaBroker
from tiered.kafka.errors import error_code, error_message
from tiered.kafka.protocol import NO_THROTTLE, ProtocolError, Request, make
from tiered.kafka.server import NO_RESPONSE

_UTC = datetime.UTC


def handle_produce(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    module = request.response_module
    acks = int(body.acks)
    topics = []
    appended = False
    failed: list[str] = []
    for topic_data in body.topic_data:
        partitions = []
        for data in topic_data.partition_data:
            if acks not in (-1, 0, 1):
                answer = _error(module, data.index, ErrorCode.invalid_required_acks,
                                f"acks must be -1, 0 or 1, got {acks}")
            else:
                answer = _append(broker, module, topic_data.name, data.index, data.records)
                appended |= answer.error_code == ErrorCode.none
            if answer.error_code != ErrorCode.none:
                failed.append(f"{topic_data.name}-{data.index}: {answer.error_code.name}")
            partitions.append(answer)
        topics.append(make(module, "TopicProduceResponse", name=topic_data.name, partition_responses=tuple(partitions)))
    if appended:
        broker.appends.notify()
    if acks == 0:
        if failed:
            raise ProtocolError(f"a produce request with acks=0 failed ({'; '.join(failed)})")
        return NO_RESPONSE
    return make(module, "ProduceResponse", responses=tuple(topics), throttle_time=NO_THROTTLE)


def _append(broker: KafkaBroker, module: Any, topic: str, partition: int, records: bytes | None) -> Any:
    if topic in INTERNAL_TOPICS:
        return _error(module, partition, ErrorCode.invalid_topic_exception,
                      f"{topic} is an internal topic: clients cannot write to it")
    log = broker.log(topic, partition)
    if log is None:
        return _error(module, partition, ErrorCode.unknown_topic_or_partition,
                      f"This server does not host this topic-partition: {topic}-{partition}")
    if records is None or len(records) == 0:
        return _error(module, partition, ErrorCode.invalid_record, "the produce request holds no record batch")
    refused = _refused_batches(records)
    if refused is not None:
        return _error(module, partition, ErrorCode.invalid_record, refused)
    try:
        info = log.append(records)
    except Exception as exc:
        return _error(module, partition, error_code(exc), error_message(exc))
    append_time = (datetime.datetime.fromtimestamp(info.log_append_time / 1000, _UTC)
                   if info.log_append_time >= 0 else None)
    return make(module, "PartitionProduceResponse", index=partition, error_code=ErrorCode.none,
                base_offset=info.first_offset, log_append_time=append_time, log_start_offset=info.log_start_offset,
                record_errors=(), error_message=None)


def _refused_batches(records: bytes) -> str | None:
    """Why these batches are refused before the engine sees them (control or transactional), or None. Only the
    headers' attributes are read; a batch header cut short is left for the engine's validation to name."""
    position = 0
    view = memoryview(records)
    while position + ATTRIBUTES_OFFSET + 2 <= len(view):
        length = int.from_bytes(view[position + LENGTH_OFFSET:position + LENGTH_OFFSET + 4], "big", signed=True)
        attributes = int.from_bytes(view[position + ATTRIBUTES_OFFSET:position + ATTRIBUTES_OFFSET + 2], "big")
        if attributes & CONTROL_FLAG_MASK:
            return "clients may not write control batches (transaction markers are written by the broker)"
        if attributes & TRANSACTIONAL_FLAG_MASK:
            return ("transactional batches are not supported: this node has no transaction coordinator "
                    "(see docs/kafka-protocol.md)")
        if length <= 0:
            break
        position += LOG_OVERHEAD + length
    return None


def _error(module: Any, partition: int, code: ErrorCode, message: str) -> Any:
    return make(module, "PartitionProduceResponse", index=partition, error_code=code, base_offset=-1,
                log_append_time=None, log_start_offset=-1, record_errors=(), error_message=message)
