"""Metadata: this node as the only broker and controller, and every topic with its partitions led by it.

Which topics: v0 answers every topic for an empty list; from v1 on a null list means every topic and an empty one
none. A topic that does not exist is created when the request allows it (v4+; always before) and
``auto.create.topics.enable`` is on, with ``num.partitions`` partitions, and answered at once (Kafka answers
LEADER_NOT_AVAILABLE until its controller has created it; here creation is synchronous). Otherwise
UNKNOWN_TOPIC_OR_PARTITION, or INVALID_TOPIC_EXCEPTION for a name no topic can have. From v10 topics carry their
id, and a request may name topics by id (UNKNOWN_TOPIC_ID when none has it). A partition whose data dir is offline
is answered with KAFKA_STORAGE_ERROR, no leader, and this node as its offline replica.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from local import filenames
from tiered.internal_topics import INTERNAL_TOPICS
from tiered.kafka.broker import KafkaBroker, leader_epoch
from tiered.kafka.protocol import NO_THROTTLE, Request, make

_NO_ID = None  # kio writes a null topic id as the zero UUID


def handle_metadata(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    version = request.api_version
    module = request.response_module
    existing = broker.topics()
    offline = sorted(broker.manager.offline_partitions)
    for topic, _ in offline:
        existing.setdefault(topic, [])
    wanted: list[tuple[str | None, Any]]  # (name, topic id asked for)
    if body.topics is None or (version == 0 and not body.topics):
        wanted = [(name, None) for name in existing]
    else:
        wanted = [(t.name, getattr(t, "topic_id", None)) for t in body.topics]
    allow_create = getattr(body, "allow_auto_topic_creation", True)
    topics = []
    for name, topic_id in wanted:
        if name is None:
            name = _name_of_id(broker, existing, topic_id)
            if name is None:
                topics.append(make(module, "MetadataResponseTopic", error_code=ErrorCode.unknown_topic_id, name=None,
                                   topic_id=topic_id, is_internal=False, partitions=()))
                continue
        if name not in existing:
            error = _create_or_error(broker, name, allow_create)
            if error is not ErrorCode.none:
                topics.append(make(module, "MetadataResponseTopic", error_code=error, name=name, topic_id=_NO_ID,
                                   is_internal=False, partitions=()))
                continue
            existing[name] = broker.partitions_of(name)
        topics.append(_topic(broker, module, name, existing[name], offline))
    node = make(module, "MetadataResponseBroker", node_id=broker.node_id, host=broker.host, port=broker.port,
                rack=None)
    return make(module, "MetadataResponse", throttle_time=NO_THROTTLE, brokers=(node,), cluster_id=broker.cluster_id,
                controller_id=broker.node_id, topics=tuple(topics))


def _create_or_error(broker: KafkaBroker, name: str, allow_create: bool) -> ErrorCode:
    try:
        filenames.validate_topic(name)
    except ValueError:
        return ErrorCode.invalid_topic_exception
    if allow_create and broker.auto_create_topic(name):
        return ErrorCode.none
    return ErrorCode.unknown_topic_or_partition


def _name_of_id(broker: KafkaBroker, existing: dict[str, list[int]], topic_id: Any) -> str | None:
    for name in existing:
        if topic_id is not None and broker.topic_id(name) == topic_id:
            return name
    return None


def _topic(broker: KafkaBroker, module: Any, name: str, partitions: list[int],
           offline: list[tuple[str, int]]) -> Any:
    node = broker.node_id
    answers = []
    for partition in partitions:
        log = broker.log(name, partition)
        epoch = leader_epoch(log) if log is not None else 0
        answers.append(make(module, "MetadataResponsePartition", error_code=ErrorCode.none, partition_index=partition,
                            leader_id=node, leader_epoch=epoch, replica_nodes=(node,), isr_nodes=(node,),
                            offline_replicas=()))
    for topic, partition in offline:
        if topic == name and partition not in partitions:
            answers.append(make(module, "MetadataResponsePartition", error_code=ErrorCode.kafka_storage_error,
                                partition_index=partition, leader_id=-1, leader_epoch=-1, replica_nodes=(node,),
                                isr_nodes=(), offline_replicas=(node,)))
    answers.sort(key=lambda p: p.partition_index)
    return make(module, "MetadataResponseTopic", error_code=ErrorCode.none, name=name,
                topic_id=broker.topic_id(name) or _NO_ID, is_internal=name in INTERNAL_TOPICS,
                partitions=tuple(answers))
