"""CreateTopics, DeleteTopics, DescribeConfigs and IncrementalAlterConfigs: topics and their configs.

They do what ``tiered topics create|alter|describe`` do (the same checks, the same files): a topic's overrides are
validated by the engine's config definitions (INVALID_CONFIG naming the key and the allowed values),
``remote.storage.enable=true`` needs the broker's remote storage system, turning it off over remote data needs
``remote.log.delete.on.disable``.

- CreateTopics: ``num_partitions`` -1 means ``num.partitions``; a request that would take a KRaft controller more
  than 10,000 records (one per topic, partition and config) is refused as a whole with POLICY_VIOLATION, as Kafka's
  is, before a partition dir is made; a replication factor other than 1 (or -1) is
  INVALID_REPLICATION_FACTOR (one broker), manual assignments must put every partition on this node; existing
  topics TOPIC_ALREADY_EXISTS; ``validate_only`` checks without creating. From v5 the answer carries the topic's
  effective configs.
- DeleteTopics: ``delete.topic.enable``; internal topics cannot be deleted; a topic holding remote data is refused
  with POLICY_VIOLATION (the engine would delete its local data only); the groups' committed offsets of a deleted topic are
  removed (tombstones in ``__consumer_offsets``), as Kafka's group coordinator does.
- DescribeConfigs: TOPIC resources (every topic key with its value and source: DYNAMIC_TOPIC_CONFIG for an
  override, STATIC_BROKER_CONFIG for a broker key, DEFAULT_CONFIG for Kafka's default; synonyms when asked) and
  BROKER resources (the broker config, read-only).
- IncrementalAlterConfigs: TOPIC resources, SET, DELETE, APPEND and SUBTRACT (the last two on list keys only,
  as in Kafka); BROKER resources are refused (the broker config is a file here).
- CreatePartitions: a topic grows to ``count`` partitions, the new ones with its id and overrides, all or none;
  INVALID_PARTITIONS unless ``count`` is more than it has, assignments as CreateTopics takes them (each new
  partition on this node), POLICY_VIOLATION for an internal topic and past 10,000 new partitions in one request
  (as CreateTopics), INVALID_REQUEST for a topic named twice; ``validate_only`` checks without creating.
- DeleteRecords: the log start offset moved up to each partition's offset (-1: the high watermark), as Kafka's
  ``Partition.deleteRecordsOnLeader`` moves it: OFFSET_OUT_OF_RANGE above the high watermark or below 0,
  POLICY_VIOLATION where ``cleanup.policy`` has no ``delete``, INVALID_TOPIC_EXCEPTION for an internal topic; the
  low watermark answered is the log start after it. Local retention removes the local segments below it and the
  remote tier's expiration task the remote ones (both tiers: the records are gone for readers at once).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from local.errors import OffsetOutOfRangeError
from tiered.internal_topics import INTERNAL_TOPICS
from tiered.kafka.broker import DELETE_WAIT_S, KafkaBroker, TopicError
from tiered.kafka.errors import error_code
from tiered.kafka.protocol import NO_THROTTLE, Request, make

# Kafka's QuorumController.MAX_RECORDS_PER_USER_OP: more records in one operation is POLICY_VIOLATION
MAX_RECORDS_PER_USER_OP = 10_000
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
# Kafka's ConfigSource
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
# Kafka's ConfigType
_BOOLEAN, _STRING, _LONG, _LIST = 1, 2, 5, 7
_LIST_KEYS = frozenset({"cleanup.policy"})
# IncrementalAlterConfigs operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


# CreateTopics ---------------------------------------------------------------------------------------------------


def handle_create_topics(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    module = request.response_module
    names = Counter(t.name for t in body.topics)
    if _records_needed(broker, body.topics) > MAX_RECORDS_PER_USER_OP:
        return make(module, "CreateTopicsResponse", throttle_time=NO_THROTTLE, topics=tuple(
            _created(module, t.name, ErrorCode.policy_violation, "Unable to perform excessively large batch operation.")
            for t in body.topics))
    # Kafka's controller (ControllerApis.createTopics): a name given twice is answered once, INVALID_REQUEST, and
    # created by neither; clients refuse an answer that names a topic twice (librdkafka: a parse failure).
    results = [_created(module, name, ErrorCode.invalid_request, "Duplicate topic name.")
               for name, count in names.items() if count > 1]
    for topic in body.topics:
        if names[topic.name] > 1:
            continue
        try:
            partitions = _partition_count(broker, topic)
            nulls = [c.name for c in topic.configs if c.value is None]
            if nulls:  # (Kafka's ControllerConfigurationValidator: never taken for "the default")
                raise TopicError(ErrorCode.invalid_config,
                                 f"Null value not supported for topic configs: {', '.join(nulls)}")
            overrides = {c.name: c.value for c in topic.configs}
            topic_id = broker.create_topic(topic.name, partitions, overrides, validate_only=body.validate_only)
        except TopicError as exc:
            results.append(_created(module, topic.name, exc.code, str(exc)))
            continue
        configs = None
        if hasattr(module, "CreatableTopicConfigs"):  # v5+: the topic's effective configs
            configs = tuple(make(module, "CreatableTopicConfigs", name=c["name"], value=c["value"], read_only=False,
                                 config_source=_source(c["source"]), is_sensitive=False)
                            for c in _describe_topic(broker, topic.name, overrides))
        results.append(make(module, "CreatableTopicResult", name=topic.name, topic_id=topic_id,
                            error_code=ErrorCode.none, error_message=None, num_partitions=partitions,
                            replication_factor=1, configs=configs))
    return make(module, "CreateTopicsResponse", throttle_time=NO_THROTTLE, topics=tuple(results))


def _records_needed(broker: KafkaBroker, topics: Any) -> int:
    """The metadata records a KRaft controller would write for these topics (one per topic, partition and config);
    Kafka refuses a request above ``MAX_RECORDS_PER_USER_OP`` as a whole, before creating anything."""
    total = 0
    for topic in topics:
        try:
            total += 1 + _partition_count(broker, topic) + len(topic.configs)
        except TopicError:
            total += 1
    return total


def _partition_count(broker: KafkaBroker, topic: Any) -> int:
    if topic.replication_factor not in (-1, 1):
        raise TopicError(ErrorCode.invalid_replication_factor,
                         f"Replication factor: {topic.replication_factor} larger than available brokers: 1.")
    if topic.assignments:
        indexes = sorted(a.partition_index for a in topic.assignments)
        if indexes != list(range(len(indexes))) or any(tuple(a.broker_ids) != (broker.node_id,)
                                                       for a in topic.assignments):
            raise TopicError(ErrorCode.invalid_replica_assignment,
                             f"every partition must be assigned to this broker alone ([{broker.node_id}]), "
                             "numbered from 0 without gaps")
        return len(indexes)
    return broker.config.num_partitions if topic.num_partitions == -1 else int(topic.num_partitions)


def _created(module: Any, name: str, code: ErrorCode, message: str) -> Any:
    return make(module, "CreatableTopicResult", name=name, topic_id=None, error_code=code, error_message=message,
                num_partitions=-1, replication_factor=-1, configs=None)


# DeleteTopics ---------------------------------------------------------------------------------------------------


def handle_delete_topics(broker: KafkaBroker, request: Request) -> Any:
    module = request.response_module
    results: list[Any] = []
    # One deadline for the request (its timeout, at most DELETE_WAIT_S): Kafka answers REQUEST_TIMED_OUT past it.
    deadline = time.monotonic() + min(DELETE_WAIT_S, max(0.0, request.body.timeout.total_seconds()))
    names = Counter(request.body.topic_names)
    # A name given twice: answered once, INVALID_REQUEST, and deleted by neither (ControllerApis.deleteTopics).
    results.extend(make(module, "DeletableTopicResult", name=name, error_code=ErrorCode.invalid_request,
                        error_message="Duplicate topic name.") for name, count in names.items() if count > 1)
    for name in request.body.topic_names:
        if names[name] > 1:
            continue
        try:
            broker.delete_topic(name, deadline)
            results.append(make(module, "DeletableTopicResult", name=name, error_code=ErrorCode.none,
                                error_message=None))
        except TopicError as exc:
            results.append(make(module, "DeletableTopicResult", name=name, error_code=exc.code, error_message=str(exc)))
    return make(module, "DeleteTopicsResponse", throttle_time=NO_THROTTLE, responses=tuple(results))


# CreatePartitions -----------------------------------------------------------------------------------------------


def handle_create_partitions(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    module = request.response_module
    names = Counter(t.name for t in body.topics)
    added = sum(max(0, int(t.count) - len(broker.known_partitions({t.name}))) for t in body.topics)
    # A name given twice: answered once, INVALID_REQUEST, and grown by neither (ControllerApis.createPartitions).
    results = [make(module, "CreatePartitionsTopicResult", name=name, error_code=ErrorCode.invalid_request,
                    error_message="Duplicate topic name.") for name, count in names.items() if count > 1]
    for topic in body.topics:
        if names[topic.name] > 1:
            continue
        try:
            if added > MAX_RECORDS_PER_USER_OP:
                raise TopicError(ErrorCode.policy_violation, "Unable to perform excessively large batch operation.")
            if topic.assignments is not None:  # (Kafka's order: the topic and its count, then the assignments)
                broker.add_partitions(topic.name, int(topic.count), validate_only=True)
                _check_new_assignments(broker, topic)
            broker.add_partitions(topic.name, int(topic.count), validate_only=body.validate_only)
            code, message = ErrorCode.none, None
        except TopicError as exc:
            code, message = exc.code, str(exc)
        results.append(make(module, "CreatePartitionsTopicResult", name=topic.name, error_code=code,
                            error_message=message))
    return make(module, "CreatePartitionsResponse", throttle_time=NO_THROTTLE, results=tuple(results))


def _check_new_assignments(broker: KafkaBroker, topic: Any) -> None:
    """Kafka's checks of the new partitions' replica assignments, where the request has any: one per new partition,
    each on this node alone."""
    additional = int(topic.count) - len(broker.known_partitions({topic.name}))
    if additional > 0 and len(topic.assignments) != additional:
        raise TopicError(ErrorCode.invalid_replica_assignment,
                         f"Attempted to add {additional} additional partition(s), but only {len(topic.assignments)} "
                         "assignment(s) were specified.")
    if any(tuple(a.broker_ids) != (broker.node_id,) for a in topic.assignments):
        raise TopicError(ErrorCode.invalid_replica_assignment,
                         f"every new partition must be assigned to this broker alone ([{broker.node_id}])")


# DeleteRecords --------------------------------------------------------------------------------------------------

HIGH_WATERMARK = -1  # Kafka's DeleteRecordsRequest.HIGH_WATERMARK


def handle_delete_records(broker: KafkaBroker, request: Request) -> Any:
    module = request.response_module
    # Kafka keeps the request's partitions in a map (KafkaApis.handleDeleteRecordsRequest): a partition named twice
    # is deleted to its last offset, and answered once.
    wanted: dict[str, dict[int, int]] = {}
    for topic in request.body.topics:
        for p in topic.partitions:
            wanted.setdefault(topic.name, {})[p.partition_index] = int(p.offset)
    topics = tuple(
        make(module, "DeleteRecordsTopicResult", name=name, partitions=tuple(
            make(module, "DeleteRecordsPartitionResult", partition_index=partition,
                 **_delete_records(broker, name, partition, offset))
            for partition, offset in offsets.items()))
        for name, offsets in wanted.items())
    return make(module, "DeleteRecordsResponse", throttle_time=NO_THROTTLE, topics=topics)


def _delete_records(broker: KafkaBroker, topic: str, partition: int, offset: int) -> dict[str, Any]:
    """One partition's deletion: its low watermark and error code, as Kafka answers them (-1 with an error)."""
    refused = {"low_watermark": -1}
    if topic in INTERNAL_TOPICS:
        return {**refused, "error_code": ErrorCode.invalid_topic_exception}
    log, error = broker.led_log(topic, partition, -1)
    if log is None:
        return {**refused, "error_code": error}
    if not log.config.delete:
        return {**refused, "error_code": ErrorCode.policy_violation}
    try:
        if offset == HIGH_WATERMARK:
            offset = log.high_watermark
        if offset < 0:
            raise OffsetOutOfRangeError(f"the offset {offset} for partition {log.name} is not valid", offset=offset)
        return {"low_watermark": log.delete_records(offset), "error_code": ErrorCode.none}
    except Exception as exc:
        return {**refused, "error_code": error_code(exc)}


# DescribeConfigs ------------------------------------------------------------------------------------------------


def handle_describe_configs(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    module = request.response_module
    synonyms = getattr(body, "include_synonyms", False)
    results = []
    for resource in body.resources:
        keys = set(resource.configuration_keys) if resource.configuration_keys is not None else None
        if resource.resource_type == TOPIC_RESOURCE:
            try:
                broker.require_topic(resource.resource_name)
            except TopicError as exc:
                results.append(_described(module, resource, exc.code, str(exc), ()))
                continue
            entries = _describe_topic(broker, resource.resource_name, broker.topic_overrides(resource.resource_name))
        elif resource.resource_type == BROKER_RESOURCE:
            if resource.resource_name not in ("", str(broker.node_id)):
                results.append(_described(module, resource, ErrorCode.invalid_request,
                                          f"no broker {resource.resource_name!r}: this node is {broker.node_id}", ()))
                continue
            entries = [{"name": k, "value": _text(v), "source": "broker"} for k, v in broker.config.describe().items()]
        else:
            results.append(_described(module, resource, ErrorCode.invalid_request,
                                       f"resource type {resource.resource_type} is not supported", ()))
            continue
        configs = tuple(_config_entry(module, entry, synonyms, resource.resource_type == BROKER_RESOURCE)
                        for entry in entries if keys is None or entry["name"] in keys)
        results.append(_described(module, resource, ErrorCode.none, None, configs))
    return make(module, "DescribeConfigsResponse", throttle_time=NO_THROTTLE, results=tuple(results))


def _describe_topic(broker: KafkaBroker, topic: str, overrides: dict[str, str]) -> list[dict[str, Any]]:
    """Every topic key of ``topic`` with its effective value and where it comes from (``tiered topics describe``)."""
    from local.config import topic_config_keys

    effective = broker.config.topic_config(overrides, persisted=True).to_properties()
    out = []
    for key, broker_key in topic_config_keys().items():
        if key in overrides:
            source = "topic"
        elif broker_key is not None and broker_key in broker.config.originals:
            source = f"broker {broker_key}"
        else:
            source = "default"
        out.append({"name": key, "value": _text(effective[key]), "source": source, "broker_key": broker_key})
    return out


def _config_entry(module: Any, entry: dict[str, Any], synonyms: bool, read_only: bool) -> Any:
    source = _source(entry["source"])
    synonym_list: tuple[Any, ...] = ()
    if synonyms:
        synonym_list = (make(module, "DescribeConfigsSynonym", name=entry["name"], value=entry["value"], source=source),)
    return make(module, "DescribeConfigsResourceResult", name=entry["name"], value=entry["value"], read_only=read_only,
                config_source=source, is_default=source == DEFAULT_CONFIG, is_sensitive=False, synonyms=synonym_list,
                config_type=_type_of(entry["name"], entry["value"]), documentation=None)


def _described(module: Any, resource: Any, code: ErrorCode, message: str | None, configs: tuple[Any, ...]) -> Any:
    return make(module, "DescribeConfigsResult", error_code=code, error_message=message,
                resource_type=resource.resource_type, resource_name=resource.resource_name, configs=configs)


def _source(text: str) -> int:
    if text == "topic":
        return DYNAMIC_TOPIC_CONFIG
    return STATIC_BROKER_CONFIG if text.startswith("broker") else DEFAULT_CONFIG


def _type_of(name: str, value: str) -> int:
    if name in _LIST_KEYS:
        return _LIST
    if value in ("true", "false"):
        return _BOOLEAN
    return _LONG if value.lstrip("-").isdigit() else _STRING


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# IncrementalAlterConfigs ----------------------------------------------------------------------------------------


def handle_incremental_alter_configs(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    module = request.response_module
    results = []
    for resource in body.resources:
        try:
            if resource.resource_type != TOPIC_RESOURCE:
                raise TopicError(ErrorCode.invalid_request,
                                 "only TOPIC configs can be altered: the broker config is a file here")
            topic = resource.resource_name
            broker.require_topic(topic)
            overrides = _apply(broker, broker.topic_overrides(topic), resource.configs)
            broker.alter_topic_config(topic, overrides, validate_only=body.validate_only)
            code, message = ErrorCode.none, None
        except TopicError as exc:
            code, message = exc.code, str(exc)
        results.append(make(module, "AlterConfigsResourceResponse", error_code=code, error_message=message,
                            resource_type=resource.resource_type, resource_name=resource.resource_name))
    return make(module, "IncrementalAlterConfigsResponse", throttle_time=NO_THROTTLE, responses=tuple(results))


def _apply(broker: KafkaBroker, current: dict[str, str], changes: Any) -> dict[str, str]:
    from local.config import topic_config_keys

    known = topic_config_keys()
    new = dict(current)
    for change in changes:
        name, op, value = change.name, change.config_operation, change.value
        if name not in known:
            raise TopicError(ErrorCode.invalid_config, f"Unknown topic config name: {name}")
        if op == SET:
            if value is None:
                raise TopicError(ErrorCode.invalid_request, f"Null value not supported for: {name}")
            new[name] = value
        elif op == DELETE:
            new.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            if name not in _LIST_KEYS:
                raise TopicError(ErrorCode.invalid_config,
                                 f"Config value append/subtract is not allowed for config key {name}: not a list")
            effective = broker.config.topic_config(new).to_properties()[name]
            items = [i for i in str(effective).split(",") if i]
            given = [i.strip() for i in (value or "").split(",") if i.strip()]
            if op == APPEND:
                items += [i for i in given if i not in items]
            else:
                items = [i for i in items if i not in given]
            new[name] = ",".join(items)
        else:
            raise TopicError(ErrorCode.invalid_request, f"unknown config operation {op}")
    return new

