"""The transactional producer's APIs, as requests to and answers from the transaction coordinator
(:mod:`tiered.kafka.txn_coordinator`): InitProducerId (with a transactional id), AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit and EndTxn."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from tiered.kafka.broker import KafkaBroker
from tiered.kafka.groups import split_unknown_partitions
from tiered.kafka.internal_topic import Producer
from tiered.kafka.protocol import NO_THROTTLE, Request, make
from tiered.kafka.txn_coordinator import TxnCoordinator

# The first version of each API whose clients know PRODUCER_FENCED; older ones get INVALID_PRODUCER_EPOCH (KafkaApis)
_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2}


def _for_version(request: Request, code: ErrorCode) -> ErrorCode:
    if code is ErrorCode.producer_fenced and request.api_version < _FENCED_SINCE.get(request.api_key, 1 << 15):
        return ErrorCode.invalid_producer_epoch
    return code


def _txn(broker: KafkaBroker) -> TxnCoordinator:
    assert broker.txn_coordinator is not None, "the transaction coordinator was not started"
    return broker.txn_coordinator


def init_transactional_producer(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    error, producer_id, epoch = _txn(broker).init_producer_id(
        body.transactional_id, round(body.transaction_timeout.total_seconds() * 1000),
        int(getattr(body, "producer_id", -1)), int(getattr(body, "producer_epoch", -1)))
    return make(request.response_module, "InitProducerIdResponse", throttle_time=NO_THROTTLE,
                error_code=_for_version(request, error),
                producer_id=producer_id, producer_epoch=epoch)


def handle_add_partitions_to_txn(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    module = request.response_module
    wanted = [(t.name, int(p)) for t in body.v3_and_below_topics for p in t.partitions]
    results = _txn(broker).add_partitions(body.v3_and_below_transactional_id, int(body.v3_and_below_producer_id),
                                          int(body.v3_and_below_producer_epoch), wanted)
    topics = tuple(make(module, "AddPartitionsToTxnTopicResult", name=t.name, results_by_partition=tuple(
        make(module, "AddPartitionsToTxnPartitionResult", partition_index=p,
             partition_error_code=_for_version(request, results[(t.name, int(p))])) for p in t.partitions))
        for t in body.v3_and_below_topics)
    return make(module, "AddPartitionsToTxnResponse", throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=topics)


def handle_add_offsets_to_txn(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    error = _txn(broker).add_offsets(body.transactional_id, int(body.producer_id), int(body.producer_epoch),
                                     body.group_id)
    return make(request.response_module, "AddOffsetsToTxnResponse", throttle_time=NO_THROTTLE,
                error_code=_for_version(request, error))


def handle_txn_offset_commit(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    module = request.response_module
    offsets = {(t.name, p.partition_index): (int(p.committed_offset), int(getattr(p, "committed_leader_epoch", -1)),
                                             p.committed_metadata)
               for t in body.topics for p in t.partitions}
    offsets, unknown = split_unknown_partitions(broker, offsets)
    error = _txn(broker).check_txn_offset_commit(body.transactional_id, int(body.producer_id),
                                                 int(body.producer_epoch), body.group_id)
    if error is ErrorCode.none:
        assert broker.coordinator is not None
        results = broker.coordinator.txn_commit_offsets(
            body.group_id, Producer(int(body.producer_id), int(body.producer_epoch)),
            int(getattr(body, "generation_id", -1)), getattr(body, "member_id", ""), offsets)
    else:  # a fenced producer's commit: the engine's INVALID_PRODUCER_EPOCH, as Kafka's group coordinator answers
        results = dict.fromkeys(offsets, ErrorCode.invalid_producer_epoch
                                if error is ErrorCode.producer_fenced else error)
    results.update(unknown)
    topics = tuple(make(module, "TxnOffsetCommitResponseTopic", name=t.name, partitions=tuple(
        make(module, "TxnOffsetCommitResponsePartition", partition_index=p.partition_index,
             error_code=results[(t.name, p.partition_index)]) for p in t.partitions)) for t in body.topics)
    return make(module, "TxnOffsetCommitResponse", throttle_time=NO_THROTTLE, topics=topics)


def handle_end_txn(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    error = _txn(broker).end_txn(body.transactional_id, int(body.producer_id), int(body.producer_epoch),
                                 bool(body.committed))
    return make(request.response_module, "EndTxnResponse", throttle_time=NO_THROTTLE,
                error_code=_for_version(request, error))
