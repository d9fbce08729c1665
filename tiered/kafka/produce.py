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

Refused before any append: what Kafka's ``ProduceRequest.validateRecords`` refuses (a partition's records must be
exactly one batch of magic 2: INVALID_RECORD; zstd before v7: UNSUPPORTED_COMPRESSION_TYPE), writes to the
internal topics (INVALID_TOPIC_EXCEPTION: they are the coordinators'),
control batches (INVALID_RECORD: only the transaction coordinator writes markers), and a transactional batch to a
partition that is not in its producer's ongoing transaction (INVALID_TXN_STATE; INVALID_PRODUCER_EPOCH for a fenced
producer; INVALID_PRODUCER_ID_MAPPING for an unknown one), so no batch opens a transaction the coordinator would
never close.
"""

from __future__ import annotations

import datetime
import struct
from typing import Any

from kio.schema.errors import ErrorCode

from local.records import MemoryRecords
from tiered.internal_topics import INTERNAL_TOPICS
from tiered.kafka.broker import KafkaBroker
from tiered.kafka.errors import error_code, error_message
from tiered.kafka.protocol import NO_THROTTLE, ProtocolError, Request, make
from tiered.kafka.server import NO_RESPONSE

_UTC = datetime.UTC
# A record batch's header: base offset i64 | length i32 | leader epoch i32 | magic i8 | crc u32 | attributes i16
_LENGTH = struct.Struct(">i")
_LENGTH_AT = 8
_MAGIC_AT = 16
_ATTRIBUTES = struct.Struct(">h")
_ATTRIBUTES_AT = 21
_CODEC_MASK = 0x07
_ZSTD = 4


def handle_produce(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    module = request.response_module
    acks = int(body.acks)
    topics = []
    failed: list[str] = []
    for topic_data in body.topic_data:
        partitions = []
        for data in topic_data.partition_data:
            if acks not in (-1, 0, 1):
                answer = _error(module, data.index, ErrorCode.invalid_required_acks,
                                f"acks must be -1, 0 or 1, got {acks}")
            else:
                answer = _append(broker, module, request.api_version, topic_data.name, data.index, data.records,
                                 acks)
            if answer.error_code != ErrorCode.none:
                failed.append(f"{topic_data.name}-{data.index}: {answer.error_code.name}")
            partitions.append(answer)
        topics.append(make(module, "TopicProduceResponse", name=topic_data.name, partition_responses=tuple(partitions)))
    if acks == 0:
        if failed:
            raise ProtocolError(f"a produce request with acks=0 failed ({'; '.join(failed)})")
        return NO_RESPONSE
    return make(module, "ProduceResponse", responses=tuple(topics), throttle_time=NO_THROTTLE)


def _append(broker: KafkaBroker, module: Any, version: int, topic: str, partition: int,
            records: bytes | None, acks: int = 1) -> Any:
    if topic in INTERNAL_TOPICS:
        return _error(module, partition, ErrorCode.invalid_topic_exception,
                      f"{topic} is an internal topic: clients cannot write to it")
    log = broker.log(topic, partition)
    if log is None:
        code = broker.absent_log_error(topic, partition)
        return _error(module, partition, code,
                      f"{topic}-{partition} is in an offline data dir" if code is ErrorCode.kafka_storage_error
                      else f"This server does not host this topic-partition: {topic}-{partition}")
    if records is None or len(records) == 0:
        return _error(module, partition, ErrorCode.invalid_record, "the produce request holds no record batch")
    lost = broker.lost_ownership(log) or broker.awaiting_claim(log)
    if lost is not None:
        return _error(module, partition, ErrorCode.not_leader_or_follower, lost)
    refused = _version_refusal(version, records) or _refused_batches(broker, topic, partition, records)
    if refused is not None:
        return _error(module, partition, *refused)
    if acks == -1 and log.config.min_insync_replicas > 1:
        # Kafka's Partition.appendRecordsToLeader: acks=all needs min.insync.replicas in the ISR, which is this
        # node alone; nothing is appended.
        return _error(module, partition, ErrorCode.not_enough_replicas,
                      f"The size of the current ISR Set({broker.node_id}) is insufficient to satisfy the min.isr "
                      f"requirement of {log.config.min_insync_replicas} for partition {topic}-{partition}")
    try:
        info = log.append(records)
    except Exception as exc:
        return _error(module, partition, error_code(exc), error_message(exc))
    append_time = (datetime.datetime.fromtimestamp(info.log_append_time / 1000, _UTC)
                   if info.log_append_time >= 0 else None)
    return make(module, "PartitionProduceResponse", index=partition, error_code=ErrorCode.none,
                base_offset=info.first_offset, log_append_time=append_time, log_start_offset=info.log_start_offset,
                record_errors=(), error_message=None)


def _version_refusal(version: int, records: bytes) -> tuple[ErrorCode, str] | None:
    """Kafka's ``ProduceRequest.validateRecords``: from v3 a partition's records are exactly one batch of magic 2,
    not zstd-compressed before v7. Only the batch headers are read; bytes that are not batches are left for the
    engine's validation to name."""
    if len(records) < _MAGIC_AT + 1:
        return None
    magic = records[_MAGIC_AT]
    if magic != 2:
        return ErrorCode.invalid_record, (f"Produce requests with version {version} are only allowed to contain "
                                          "record batches with magic version 2")
    if len(records) >= _ATTRIBUTES.size + _ATTRIBUTES_AT and version < 7:
        (attributes,) = _ATTRIBUTES.unpack_from(records, _ATTRIBUTES_AT)
        if attributes & _CODEC_MASK == _ZSTD:
            return ErrorCode.unsupported_compression_type, (f"Produce requests with version {version} are not "
                                                            "allowed to use ZStandard compression")
    (length,) = _LENGTH.unpack_from(records, _LENGTH_AT)
    second = _LENGTH_AT + _LENGTH.size + length  # where a second batch would start
    if length >= 0 and len(records) - second > _MAGIC_AT:
        (next_length,) = _LENGTH.unpack_from(records, second + _LENGTH_AT)
        if 0 <= next_length <= len(records) - second - _LENGTH_AT - _LENGTH.size:
            return ErrorCode.invalid_record, (f"Produce requests with version {version} are only allowed to "
                                              "contain exactly one record batch per partition")
    return None


def _refused_batches(broker: KafkaBroker, topic: str, partition: int, records: bytes) -> tuple[ErrorCode, str] | None:
    """Why these batches are refused before the engine sees them, or None: a control batch (markers are the
    coordinator's), or a transactional batch outside its producer's ongoing transaction on this partition. Only the
    headers are read; a batch cut short is left for the engine's validation to name."""
    try:
        batches = list(MemoryRecords(records).batches(verify=False))
    except Exception:
        return None
    for batch in batches:
        if batch.is_control_batch:
            return ErrorCode.invalid_record, ("clients may not write control batches (transaction markers are "
                                              "written by the transaction coordinator)")
        if batch.is_transactional:
            txn = broker.txn_coordinator
            code = (txn.check_produce(batch.producer_id, batch.producer_epoch, topic, partition) if txn is not None
                    else ErrorCode.invalid_txn_state)
            if code is not ErrorCode.none:
                return code, (f"transactional batch of producer {batch.producer_id} epoch {batch.producer_epoch} to "
                              f"{topic}-{partition}: not in an ongoing transaction of this producer "
                              "(AddPartitionsToTxn first)")
    return None


def _error(module: Any, partition: int, code: ErrorCode, message: str) -> Any:
    return make(module, "PartitionProduceResponse", index=partition, error_code=code, base_offset=-1,
                log_append_time=None, log_start_offset=-1, record_errors=(), error_message=message)
