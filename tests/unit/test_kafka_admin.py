"""Topics and their configs over the Kafka protocol: CreateTopics, DeleteTopics, DescribeConfigs,
IncrementalAlterConfigs, CreatePartitions and DeleteRecords, spoken with kio requests at every version served, and through librdkafka's
AdminClient."""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from local.records import MemoryRecords, SimpleRecord
from tests.kafkautil import RawClient, build, fetch_request, list_offsets_request, listener, ms
from tiered.kafka.dispatcher import SUPPORTED


@pytest.fixture
def kafka(tmp_path: Path):
    with listener(tmp_path) as k:
        yield k


def _create(client: RawClient, version: int, name: str, partitions: int = 2, replication: int = 1,
            configs: dict[str, str] | None = None, validate_only: bool = False):
    cfg = tuple(build(19, version, "CreatableTopicConfig", name=k, value=v) for k, v in (configs or {}).items())
    topic = build(19, version, "CreatableTopic", name=name, num_partitions=partitions, replication_factor=replication,
                  assignments=(), configs=cfg)
    response = client.call(19, version, build(19, version, topics=(topic,), timeout=ms(30_000),
                                              validate_only=validate_only))
    return response.topics[0]


def _describe(client: RawClient, version: int, resource_type: int, name: str, keys: tuple[str, ...] | None = None):
    resource = build(32, version, "DescribeConfigsResource", resource_type=resource_type, resource_name=name,
                     configuration_keys=keys)
    return client.call(32, version, build(32, version, resources=(resource,), include_synonyms=True,
                                          include_documentation=False)).results[0]


def _alter(client: RawClient, version: int, topic: str, changes: list[tuple[str, int, str | None]],
           validate_only: bool = False):
    configs = tuple(build(44, version, "AlterableConfig", name=n, config_operation=op, value=v) for n, op, v in changes)
    resource = build(44, version, "AlterConfigsResource", resource_type=2, resource_name=topic, configs=configs)
    return client.call(44, version, build(44, version, resources=(resource,), validate_only=validate_only)).responses[0]


@pytest.mark.parametrize("version", range(SUPPORTED[19][0], SUPPORTED[19][1] + 1))
def test_create_topics_at_every_version(kafka, version):
    with RawClient(kafka.address) as client:
        result = _create(client, version, "t", configs={"retention.ms": "1000"})
        assert (result.name, result.error_code) == ("t", ErrorCode.none)
        if hasattr(result, "configs") and result.configs is not None:
            assert {c.name: c.value for c in result.configs}["retention.ms"] == "1000"
            assert result.num_partitions == 2
        again = _create(client, version, "t")
        assert again.error_code == ErrorCode.topic_already_exists
    assert kafka.broker.partitions_of("t") == [0, 1]
    assert kafka.broker.topic_overrides("t") == {"retention.ms": "1000"}
    assert kafka.broker.log("t", 1).config.retention_ms == 1000


def test_create_topics_refusals_and_validate_only(kafka):
    with RawClient(kafka.address) as client:
        assert _create(client, 7, "r3", replication=3).error_code == ErrorCode.invalid_replication_factor
        assert _create(client, 7, "zero", partitions=0).error_code == ErrorCode.invalid_partitions
        assert _create(client, 7, "bad/name").error_code == ErrorCode.invalid_topic_exception
        bad = _create(client, 7, "cfg", configs={"retention.ms": "soon"})
        assert bad.error_code == ErrorCode.invalid_config and "retention.ms" in bad.error_message
        assert _create(client, 7, "cfg", configs={"no.such.key": "1"}).error_code == ErrorCode.invalid_config
        null = _create(client, 7, "cfg", configs={"retention.ms": None, "segment.ms": "1000"})
        assert (null.error_code, null.error_message) == (ErrorCode.invalid_config,
                                                         "Null value not supported for topic configs: retention.ms")
        remote = _create(client, 7, "remote", configs={"remote.storage.enable": "true"})
        assert remote.error_code == ErrorCode.invalid_config  # the broker has no remote storage system
        assert _create(client, 7, "dry", validate_only=True).error_code == ErrorCode.none
        default = _create(client, 7, "dflt", partitions=-1, replication=-1)
        assert (default.error_code, default.num_partitions) == (ErrorCode.none, 1)
    assert sorted(kafka.broker.topics()) == ["dflt"]


def test_create_topics_refuses_an_excessively_large_request_as_a_whole(kafka):
    """Kafka's controller refuses an operation of more than 10,000 records (POLICY_VIOLATION) before it creates
    anything: a careless --partitions 10001 makes no partition dir; many duplicate names are answered quickly."""
    with RawClient(kafka.address) as client:
        huge = _create(client, 7, "huge", partitions=10_001)
        assert (huge.error_code, huge.error_message) == (ErrorCode.policy_violation,
                                                         "Unable to perform excessively large batch operation.")
        topics = tuple(build(19, 7, "CreatableTopic", name=name, num_partitions=1, replication_factor=1,
                             assignments=(), configs=()) for name in ("small", "big"))
        topics += (build(19, 7, "CreatableTopic", name="big", num_partitions=9_999, replication_factor=1,
                         assignments=(), configs=()),)
        response = client.call(19, 7, build(19, 7, topics=topics, timeout=ms(30_000), validate_only=False))
        assert {t.error_code for t in response.topics} == {ErrorCode.policy_violation}
        many = tuple(build(19, 7, "CreatableTopic", name="dup", num_partitions=1, replication_factor=1,
                           assignments=(), configs=()) for _ in range(5_000))
        response = client.call(19, 7, build(19, 7, topics=many, timeout=ms(30_000), validate_only=False))
        assert {t.error_code for t in response.topics} == {ErrorCode.invalid_request}
    assert kafka.broker.topics() == {}


def test_create_topics_refuses_a_name_that_collides_with_an_existing_topic(kafka):
    """Kafka refuses 'a_b' beside 'a.b' (Topic.hasCollision: the metric names of the two would be one)."""
    with RawClient(kafka.address) as client:
        assert _create(client, 7, "clash.a1").error_code == ErrorCode.none
        clash = _create(client, 7, "clash_a1")
        assert (clash.error_code, clash.error_message) == (
            ErrorCode.invalid_topic_exception, "Topic 'clash_a1' collides with existing topic: clash.a1")
        assert _create(client, 7, "clash-a1").error_code == ErrorCode.none  # '-' is not unified
    assert sorted(kafka.broker.topics()) == ["clash-a1", "clash.a1"]


def test_create_topics_past_the_open_files_limit_is_refused_before_any_partition(kafka):
    """A CreateTopics of 9,000 partitions (under Kafka's 10,000) ran the process out of descriptors part way: the
    data dir went offline with every topic in it, and the broker could not start again. Now a topic whose
    partitions would not fit under the open-files limit is refused (POLICY_VIOLATION, naming the limit) before any
    is made; the broker goes on serving."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    open_now = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 300, hard))
    try:
        with RawClient(kafka.address) as client:
            wide = _create(client, 7, "wide", partitions=200)
            assert wide.error_code == ErrorCode.policy_violation
            assert "cannot create 200 partition(s)" in wide.error_message and "ulimit -n" in wide.error_message
            assert _create(client, 7, "narrow", partitions=5).error_code == ErrorCode.none
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert sorted(kafka.broker.topics()) == ["narrow"]
    assert not list(Path(kafka.broker.manager.config.log_dirs[0]).glob("wide-*"))


@pytest.mark.parametrize("version", range(SUPPORTED[20][0], SUPPORTED[20][1] + 1))
def test_delete_topics(kafka, version):
    with RawClient(kafka.address) as client:
        _create(client, 7, "gone")
        response = client.call(20, version, build(20, version, topic_names=("gone", "never"), timeout=ms(30_000)))
    codes = {r.name: r.error_code for r in response.responses}
    assert codes == {"gone": ErrorCode.none, "never": ErrorCode.unknown_topic_or_partition}
    assert kafka.broker.partitions_of("gone") == []


def test_deleting_a_topic_removes_its_committed_offsets(tmp_path):
    """Kafka's onPartitionsDeleted: a topic created again under the name does not resume at the old commits."""
    def commit(client: RawClient, topic: str) -> None:
        part = build(8, 8, "OffsetCommitRequestPartition", partition_index=0, committed_offset=42,
                     committed_leader_epoch=-1, committed_metadata="")
        body = build(8, 8, group_id="g", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                     topics=(build(8, 8, "OffsetCommitRequestTopic", name=topic, partitions=(part,)),))
        assert client.call(8, 8, body).topics[0].partitions[0].error_code == ErrorCode.none

    def committed(client: RawClient) -> dict[tuple[str, int], int]:
        response = client.call(9, 7, build(9, 7, group_id="g", topics=None, require_stable=False))
        return {(t.name, p.partition_index): p.committed_offset for t in response.topics for p in t.partitions}

    with listener(tmp_path) as kafka, RawClient(kafka.address) as client:
        client.call(10, 4, build(10, 4, key_type=0, coordinator_keys=("g",)))
        _create(client, 7, "gone")
        _create(client, 7, "kept")
        commit(client, "gone")
        commit(client, "kept")
        response = client.call(20, 5, build(20, 5, topic_names=("gone",), timeout=ms(30_000)))
        assert response.responses[0].error_code == ErrorCode.none
        assert committed(client) == {("kept", 0): 42}
    with listener(tmp_path) as kafka, RawClient(kafka.address) as client:
        assert committed(client) == {("kept", 0): 42}  # the tombstone is in __consumer_offsets


def test_delete_topic_disabled_and_internal(tmp_path):
    with listener(tmp_path, **{"delete.topic.enable": "false"}) as kafka, RawClient(kafka.address) as client:
        _create(client, 7, "kept")
        response = client.call(20, 5, build(20, 5, topic_names=("kept", "__consumer_offsets"), timeout=ms(1000)))
        assert {r.name: r.error_code for r in response.responses} == {
            "kept": ErrorCode.topic_deletion_disabled, "__consumer_offsets": ErrorCode.topic_deletion_disabled}


def _grow(client: RawClient, version: int, counts: list[tuple[str, int]], validate_only: bool = False,
          assignments: tuple[tuple[int, ...], ...] | None = None) -> dict[str, tuple]:
    """CreatePartitions of ``counts``: (error code, message) per topic."""
    topics = tuple(build(37, version, "CreatePartitionsTopic", name=name, count=count, assignments=None if assignments
                         is None else tuple(build(37, version, "CreatePartitionsAssignment", broker_ids=ids)
                                            for ids in assignments))
                   for name, count in counts)
    response = client.call(37, version, build(37, version, topics=topics, timeout=ms(30_000),
                                              validate_only=validate_only))
    return {r.name: (r.error_code, r.error_message) for r in response.results}


@pytest.mark.parametrize("version", range(SUPPORTED[37][0], SUPPORTED[37][1] + 1))
def test_create_partitions_grows_a_topic_as_kafkas_controller_does(kafka, version):
    """The new partitions have the topic's id and overrides; a count that is no increase is INVALID_PARTITIONS with
    Kafka's words, assignments must put each new partition on this node, an internal topic is refused, a topic named
    twice is INVALID_REQUEST, and validate_only creates nothing."""
    with RawClient(kafka.address) as client:
        _create(client, 7, "t", partitions=2, configs={"retention.ms": "60000"})
        assert _grow(client, version, [("t", 4)], validate_only=True) == {"t": (ErrorCode.none, None)}
        assert kafka.broker.partitions_of("t") == [0, 1]
        assert _grow(client, version, [("t", 4), ("none", 3)]) == {
            "t": (ErrorCode.none, None), "none": (ErrorCode.unknown_topic_or_partition, "no topic 'none'")}
        assert _grow(client, version, [("t", 4)]) == {"t": (ErrorCode.invalid_partitions,
                                                            "Topic already has 4 partition(s).")}
        assert _grow(client, version, [("t", 3)])["t"] == (
            ErrorCode.invalid_partitions, "The topic t currently has 4 partition(s); 3 would not be an increase.")
        assert _grow(client, version, [("t", 6)], assignments=((kafka.broker.node_id,),))["t"][0] == \
            ErrorCode.invalid_replica_assignment
        assert _grow(client, version, [("t", 5)], assignments=((kafka.broker.node_id + 1,),))["t"][0] == \
            ErrorCode.invalid_replica_assignment
        assert _grow(client, version, [("t", 5)], assignments=((kafka.broker.node_id,),)) == {
            "t": (ErrorCode.none, None)}
        assert _grow(client, version, [("__consumer_offsets", 10)])["__consumer_offsets"][0] == \
            ErrorCode.policy_violation
        assert _grow(client, version, [("t", 6), ("t", 7)]) == {"t": (ErrorCode.invalid_request, "Duplicate topic name.")}
        assert _grow(client, version, [("t", 20_000)])["t"][0] == ErrorCode.policy_violation
    assert kafka.broker.partitions_of("t") == [0, 1, 2, 3, 4]
    first, added = kafka.broker.log("t", 0), kafka.broker.log("t", 4)
    assert added.topic_id == first.topic_id and added.config.retention_ms == 60_000


def _delete_records(client: RawClient, version: int, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], tuple]:
    """DeleteRecords of ``offsets``: (error code, low watermark) per partition."""
    topics = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(build(21, version, "DeleteRecordsPartition", partition_index=partition,
                                                  offset=offset))
    body = build(21, version, topics=tuple(build(21, version, "DeleteRecordsTopic", name=t, partitions=tuple(ps))
                                           for t, ps in topics.items()), timeout=ms(30_000))
    return {(t.name, p.partition_index): (p.error_code, p.low_watermark)
            for t in client.call(21, version, body).topics for p in t.partitions}


def _append(kafka, topic: str, partition: int, count: int) -> None:
    log = kafka.broker.log(topic, partition)
    for i in range(count):
        log.append(MemoryRecords.build([SimpleRecord(b"v%d" % i, key=b"k%d" % i)]))


@pytest.mark.parametrize("version", range(SUPPORTED[21][0], SUPPORTED[21][1] + 1))
def test_delete_records_moves_the_log_start_as_kafka_does(kafka, version):
    """Kafka's Partition.deleteRecordsOnLeader: the log start moves up to the offset (-1: the high watermark) and is
    answered as the low watermark; above the high watermark or below 0 is OFFSET_OUT_OF_RANGE, a topic without the
    delete policy POLICY_VIOLATION, an internal topic INVALID_TOPIC_EXCEPTION; a read below the new start is out of
    range, and ListOffsets' earliest is the new start."""
    with RawClient(kafka.address) as client:
        _create(client, 7, "t", partitions=2)
        _create(client, 7, "keys", partitions=1, configs={"cleanup.policy": "compact"})
        _append(kafka, "t", 0, 10)
        _append(kafka, "t", 1, 10)
        _append(kafka, "keys", 0, 3)
        answered = _delete_records(client, version, {("t", 0): 4, ("t", 1): -1, ("keys", 0): 1, ("none", 0): 1})
        assert answered == {("t", 0): (ErrorCode.none, 4), ("t", 1): (ErrorCode.none, 10),
                            ("keys", 0): (ErrorCode.policy_violation, -1),
                            ("none", 0): (ErrorCode.unknown_topic_or_partition, -1)}
        assert _delete_records(client, version, {("t", 0): 2}) == {("t", 0): (ErrorCode.none, 4)}  # never back
        assert _delete_records(client, version, {("t", 0): 11, ("t", 1): -2}) == {
            ("t", 0): (ErrorCode.offset_out_of_range, -1), ("t", 1): (ErrorCode.offset_out_of_range, -1)}
        assert _delete_records(client, version, {("__consumer_offsets", 0): 0}) == {
            ("__consumer_offsets", 0): (ErrorCode.invalid_topic_exception, -1)}
        earliest = client.call(2, 9, list_offsets_request(9, "t", 0, -2)).topics[0].partitions[0]
        assert (earliest.error_code, earliest.offset) == (ErrorCode.none, 4)
        fetched = client.call(1, 12, fetch_request(12, {"t": {0: 3}})).responses[0].partitions[0]
        assert (fetched.error_code, fetched.log_start_offset) == (ErrorCode.offset_out_of_range, 4)
        fetched = client.call(1, 12, fetch_request(12, {"t": {0: 4}})).responses[0].partitions[0]
        assert fetched.error_code == ErrorCode.none and fetched.records
    assert kafka.broker.log("t", 0).log_start_offset == 4


@pytest.mark.parametrize("version", range(SUPPORTED[32][0], SUPPORTED[32][1] + 1))
def test_describe_configs_of_a_topic_and_the_broker(kafka, version):
    with RawClient(kafka.address) as client:
        _create(client, 7, "t", configs={"cleanup.policy": "delete", "segment.bytes": str(2 * 1024 * 1024)})
        result = _describe(client, version, 2, "t")
        assert result.error_code == ErrorCode.none
        configs = {c.name: c for c in result.configs}
        assert configs["segment.bytes"].value == str(2 * 1024 * 1024)
        assert configs["segment.bytes"].config_source == 1  # DYNAMIC_TOPIC_CONFIG
        assert configs["retention.ms"].value == str(7 * 24 * 3600 * 1000)
        assert configs["retention.ms"].config_source == 5  # DEFAULT_CONFIG
        assert configs["remote.storage.enable"].value == "false"
        only = _describe(client, version, 2, "t", keys=("retention.ms",))
        assert [c.name for c in only.configs] == ["retention.ms"]
        assert _describe(client, version, 2, "nope").error_code == ErrorCode.unknown_topic_or_partition
        broker = _describe(client, version, 4, "0")
        assert broker.error_code == ErrorCode.none
        assert {c.name for c in broker.configs} >= {"log.dirs", "broker.id", "num.io.threads"}
        assert all(c.read_only for c in broker.configs)


@pytest.mark.parametrize("version", [0, 1])
def test_incremental_alter_configs(kafka, version):
    with RawClient(kafka.address) as client:
        _create(client, 7, "t", configs={"retention.ms": "1000", "segment.bytes": str(2 * 1024 * 1024)})
        set_delete = _alter(client, version, "t", [("retention.ms", 0, "5000"), ("segment.bytes", 1, None)])
        assert set_delete.error_code == ErrorCode.none
        assert kafka.broker.topic_overrides("t") == {"retention.ms": "5000"}
        assert kafka.broker.log("t", 0).config.retention_ms == 5000
        appended = _alter(client, version, "t", [("cleanup.policy", 2, "compact")])
        assert appended.error_code == ErrorCode.none
        assert kafka.broker.topic_overrides("t")["cleanup.policy"] == "delete,compact"
        assert _alter(client, version, "t", [("cleanup.policy", 3, "delete")]).error_code == ErrorCode.none
        assert kafka.broker.topic_overrides("t")["cleanup.policy"] == "compact"
        assert _alter(client, version, "t", [("retention.ms", 2, "1")]).error_code == ErrorCode.invalid_config
        bad = _alter(client, version, "t", [("retention.ms", 0, "-9")])
        assert bad.error_code == ErrorCode.invalid_config and "retention.ms" in bad.error_message
        assert _alter(client, version, "t", [("retention.ms", 0, "1")], validate_only=True).error_code == ErrorCode.none
        assert _alter(client, version, "missing", [("retention.ms", 0, "1")]).error_code == (
            ErrorCode.unknown_topic_or_partition)
    assert kafka.broker.topic_overrides("t") == {"retention.ms": "5000", "cleanup.policy": "compact"}


def test_a_name_given_twice_is_answered_once_and_acted_on_by_neither(kafka):
    """Kafka's controller answers a topic named twice in CreateTopics, DeleteTopics or CreatePartitions once, with
    INVALID_REQUEST "Duplicate topic name.", and acts on neither; DeleteRecords keeps its partitions in a map, so a
    partition named twice is deleted to its last offset and answered once. The answers named the topic twice, and
    librdkafka's AdminClient failed to parse them ("Broker returned topic t multiple times": _BAD_MSG)."""
    import confluent_kafka.admin as admin

    dup = (ErrorCode.invalid_request, "Duplicate topic name.")
    with RawClient(kafka.address) as client:
        _create(client, 7, "t", partitions=2)
        _append(kafka, "t", 0, 10)
        topics = tuple(build(19, 7, "CreatableTopic", name=name, num_partitions=1, replication_factor=1,
                             assignments=(), configs=()) for name in ("d", "d", "e"))
        created = client.call(19, 7, build(19, 7, topics=topics, timeout=ms(30_000), validate_only=False)).topics
        assert sorted((t.name, t.error_code, t.error_message) for t in created) == [
            ("d", *dup), ("e", ErrorCode.none, None)]
        grown = client.call(37, 3, build(37, 3, topics=tuple(
            build(37, 3, "CreatePartitionsTopic", name="t", count=count, assignments=None) for count in (3, 4)),
            timeout=ms(30_000), validate_only=False)).results
        assert [(r.name, r.error_code, r.error_message) for r in grown] == [("t", *dup)]
        deleted = client.call(20, 5, build(20, 5, topic_names=("e", "e"), timeout=ms(30_000))).responses
        assert [(r.name, r.error_code, r.error_message) for r in deleted] == [("e", *dup)]
        body = build(21, 2, topics=tuple(build(21, 2, "DeleteRecordsTopic", name="t", partitions=(
            build(21, 2, "DeleteRecordsPartition", partition_index=0, offset=offset),)) for offset in (3, 5)),
            timeout=ms(30_000))
        answered = [(t.name, p.partition_index, p.error_code, p.low_watermark)
                    for t in client.call(21, 2, body).topics for p in t.partitions]
        assert answered == [("t", 0, ErrorCode.none, 5)]
    assert kafka.broker.partitions_of("t") == [0, 1] and sorted(kafka.broker.topics()) == ["e", "t"]
    assert kafka.broker.log("t", 0).log_start_offset == 5
    client = admin.AdminClient({"bootstrap.servers": kafka.address})
    (future,) = client.create_partitions([admin.NewPartitions("t", 3), admin.NewPartitions("t", 4)]).values()
    with pytest.raises(Exception) as refused:
        future.result(30)
    assert "Duplicate topic name" in str(refused.value)
    assert kafka.broker.partitions_of("t") == [0, 1]


def test_librdkafka_admin_client(kafka):
    import confluent_kafka.admin as admin

    client = admin.AdminClient({"bootstrap.servers": kafka.address})
    for future in client.create_topics([admin.NewTopic("ck", 3, 1, config={"retention.ms": "60000"})]).values():
        future.result(30)
    resource = admin.ConfigResource(admin.ResourceType.TOPIC, "ck")
    described = client.describe_configs([resource])[resource].result(30)
    assert described["retention.ms"].value == "60000"
    change = admin.ConfigResource(admin.ResourceType.TOPIC, "ck", incremental_configs=[
        admin.ConfigEntry("retention.ms", "120000", incremental_operation=admin.AlterConfigOpType.SET)])
    client.incremental_alter_configs([change])[change].result(30)
    assert kafka.broker.topic_overrides("ck") == {"retention.ms": "120000"}
    assert sorted(client.list_topics(timeout=30).topics) == ["ck"]
    log = kafka.broker.log("ck", 1)
    for i in range(5):
        log.append(MemoryRecords.build([SimpleRecord(b"v%d" % i)]))
    from confluent_kafka import TopicPartition

    deleted = client.delete_records([TopicPartition("ck", 1, 3)])
    (future,) = deleted.values()
    assert future.result(30).low_watermark == 3 and log.log_start_offset == 3
    for future in client.create_partitions([admin.NewPartitions("ck", 5)]).values():
        future.result(30)
    assert kafka.broker.partitions_of("ck") == [0, 1, 2, 3, 4]
    assert kafka.broker.log("ck", 4).config.retention_ms == 120_000
    for future in client.delete_topics(["ck"]).values():
        future.result(30)
    assert kafka.broker.topics() == {}


def test_a_topic_whose_partitions_are_offline_is_named_offline_not_missing(tmp_path, capsys):
    """A partition taken offline at load (its stored config pairs compact with remote storage) was listed by
    Metadata, yet DescribeConfigs, IncrementalAlterConfigs and `tiered compact -t` answered "no topic" (a helper's
    pass): an operator looked for a typo. They name the partition offline and why; CreateTopics says it exists."""
    from local import LogConfig, LogManager
    from tiered.cli import main

    data = tmp_path / "data"
    with LogManager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False) as manager:
        manager.get_or_create_log("rc3", 0)
    (data / "rc3-0" / "tiered-topic.properties").write_text("cleanup.policy=compact\nremote.storage.enable=true\n")
    with listener(tmp_path) as kafka, RawClient(kafka.address) as client:
        described = _describe(client, 4, 2, "rc3")
        assert described.error_code == ErrorCode.kafka_storage_error, described
        assert "rc3-0 is offline" in described.error_message and "compacted" in described.error_message
        altered = _alter(client, 1, "rc3", [("cleanup.policy", 0, "delete")])
        assert altered.error_code == ErrorCode.kafka_storage_error and "rc3-0 is offline" in altered.error_message
        assert _create(client, 7, "rc3", 1).error_code == ErrorCode.topic_already_exists
    assert main(["compact", "--log-dirs", str(data), "-t", "rc3"]) == 1
    err = capsys.readouterr().err
    assert "rc3-0 is offline" in err and "no topic" not in err, err


def test_creating_a_topic_with_every_data_dir_offline_is_answered_not_a_dropped_connection(tmp_path, monkeypatch):
    """With every data dir offline, a Metadata that auto-created a topic made the server close the connection, and
    librdkafka reconnected ~20 times a second, an ERROR logged each time (a helper's pass). CreateTopics answers
    KAFKA_STORAGE_ERROR; Metadata answers for the topic, on the same connection."""
    from local.errors import LogDirOfflineError
    from tests.kafkautil import metadata_request

    with listener(tmp_path) as kafka, RawClient(kafka.address) as client:
        def offline(*args, **kwargs):
            raise LogDirOfflineError("cannot create newtopic-0: every data dir is offline")

        monkeypatch.setattr(kafka.broker.manager, "create_partitions", offline)
        created = _create(client, 7, "newtopic", 1)
        assert created.error_code == ErrorCode.kafka_storage_error and "offline" in created.error_message
        answer = client.call(3, 12, metadata_request(12, ["newtopic"], allow_auto_topic_creation=True))
        (topic,) = answer.topics
        assert topic.error_code != ErrorCode.none and not topic.partitions
        assert _create(client, 7, "newtopic", 1).error_code == ErrorCode.kafka_storage_error  # the same connection
