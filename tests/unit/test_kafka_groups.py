"""Consumer groups of the classic protocol through the listener (kio requests over a real socket), and the records
they leave in ``__consumer_offsets`` (Kafka's key and value layouts, checked against ``struct`` packings of the
schemas)."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from local.fetch import FetchIsolation
from tests.kafkautil import RawClient, build, listener, ms
from tiered.kafka.internal_topic import java_string_hash, partition_for
from tiered.kafka.offsets_topic import (
    CommittedOffset,
    decode_key,
    decode_offset_value,
    group_key,
    offset_key,
    offset_value,
)

LIMIT = 60.0


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text.encode())) + text.encode()


# Record formats --------------------------------------------------------------------------------------------------


def test_offset_commit_records_have_kafkas_layout():
    assert offset_key("g", "t", 3) == struct.pack(">h", 1) + _s("g") + _s("t") + struct.pack(">i", 3)
    assert group_key("grp") == struct.pack(">h", 2) + _s("grp")
    value = offset_value(CommittedOffset(42, 7, "meta", 1_700_000_000_000))
    assert value == struct.pack(">hqi", 3, 42, 7) + _s("meta") + struct.pack(">q", 1_700_000_000_000)


def test_older_offset_values_are_read():
    v0 = struct.pack(">hq", 0, 5) + _s("m") + struct.pack(">q", 99)
    v1 = struct.pack(">hq", 1, 6) + _s("") + struct.pack(">qq", 100, 200)
    assert decode_offset_value(v0) == CommittedOffset(5, -1, "m", 99)
    assert decode_offset_value(v1) == CommittedOffset(6, -1, "", 100)
    v2 = struct.pack(">hq", 2, 7) + _s("x") + struct.pack(">q", 101)  # Kafka 2.1-IV0's, v0's fields
    assert decode_offset_value(v2) == CommittedOffset(7, -1, "x", 101)
    with pytest.raises(ValueError, match="version 9"):
        decode_offset_value(struct.pack(">h", 9) + b"\0" * 20)
    with pytest.raises(ValueError, match="cannot be decoded"):
        decode_offset_value(v0[:-3])


@given(st.text(max_size=40), st.text(max_size=40), st.integers(0, 2**31 - 1), st.integers(-1, 2**63 - 1),
       st.integers(-1, 2**31 - 1), st.text(max_size=100), st.integers(0, 2**62))
def test_offset_records_round_trip(group, topic, partition, offset, epoch, metadata, ts):
    key = decode_key(offset_key(group, topic, partition))
    assert (key.group, key.topic, key.partition) == (group, topic, partition)
    committed = CommittedOffset(offset, epoch, metadata, ts)
    assert decode_offset_value(offset_value(committed)) == committed


def test_group_partition_is_kafkas_hash():
    assert java_string_hash("hello") == 99162322  # Java's "hello".hashCode()
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("") == 0
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # Java hashes the UTF-16 surrogate pair
    assert partition_for("hello", 50) == 99162322 % 50


# The protocol -----------------------------------------------------------------------------------------------------


def _join(client: RawClient, group: str, member_id: str = "", version: int = 5, session_ms: int = 30_000,
          protocols: tuple[tuple[str, bytes], ...] = (("range", b"sub"),)):
    ps = tuple(build(11, version, "JoinGroupRequestProtocol", name=n, metadata=m) for n, m in protocols)
    body = build(11, version, group_id=group, session_timeout=ms(session_ms), rebalance_timeout=ms(60_000),
                 member_id=member_id, group_instance_id=None, protocol_type="consumer", protocols=ps, reason=None)
    return client.call(11, version, body)


def _join_new(client: RawClient, group: str, **kwargs):
    first = _join(client, group, **kwargs)
    assert first.error_code == ErrorCode.member_id_required and first.member_id
    return _join(client, group, member_id=first.member_id, **kwargs)


def _sync(client: RawClient, group: str, generation: int, member_id: str, assignments: dict[str, bytes]):
    items = tuple(build(14, 5, "SyncGroupRequestAssignment", member_id=m, assignment=a) for m, a in assignments.items())
    return client.call(14, 5, build(14, 5, group_id=group, generation_id=generation, member_id=member_id,
                                    group_instance_id=None, protocol_type="consumer", protocol_name="range",
                                    assignments=items))


def _heartbeat(client: RawClient, group: str, generation: int, member_id: str):
    return client.call(12, 4, build(12, 4, group_id=group, generation_id=generation, member_id=member_id,
                                    group_instance_id=None)).error_code


def _commit(client: RawClient, group: str, generation: int, member_id: str, offsets: dict[tuple[str, int], int],
            metadata: str = ""):
    topics: dict[str, list] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(build(8, 8, "OffsetCommitRequestPartition", partition_index=p,
                                              committed_offset=o, committed_leader_epoch=-1,
                                              committed_metadata=metadata))
    body = build(8, 8, group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
                 group_instance_id=None, topics=tuple(build(8, 8, "OffsetCommitRequestTopic", name=t, partitions=tuple(ps))
                                                      for t, ps in topics.items()))
    response = client.call(8, 8, body)
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


def _topic(client: RawClient, name: str = "t", partitions: int = 2) -> None:
    topic = build(19, 7, "CreatableTopic", name=name, num_partitions=partitions, replication_factor=1, assignments=(),
                  configs=())
    response = client.call(19, 7, build(19, 7, topics=(topic,), timeout=ms(30_000), validate_only=False))
    assert response.topics[0].error_code in (ErrorCode.none, ErrorCode.topic_already_exists)


def _fetch_offsets(client: RawClient, group: str, version: int = 7):
    response = client.call(9, version, build(9, version, group_id=group, topics=None, require_stable=False))
    return {(t.name, p.partition_index): (p.committed_offset, p.metadata) for t in response.topics for p in t.partitions}


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + LIMIT
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


def test_find_coordinator_names_this_node_and_creates_the_offsets_topic(tmp_path: Path):
    with listener(tmp_path) as kafka, RawClient(kafka.address) as client:
        old = client.call(10, 0, build(10, 0, key="g"))
        new = client.call(10, 4, build(10, 4, key_type=0, coordinator_keys=("g", "h")))
        assert (old.error_code, old.node_id, old.port) == (ErrorCode.none, 0, kafka.server.port)
        assert [(c.key, c.node_id, c.error_code) for c in new.coordinators] == [("g", 0, ErrorCode.none),
                                                                              ("h", 0, ErrorCode.none)]
        assert kafka.broker.partitions_of("__consumer_offsets") == [0, 1, 2]
        log = kafka.broker.log("__consumer_offsets", 0)
        assert log.config.cleanup_policy == "compact"


def test_join_sync_heartbeat_rebalance_and_leave(tmp_path: Path):
    with listener(tmp_path) as kafka, RawClient(kafka.address) as a, RawClient(kafka.address) as b:
        _topic(a)
        joined = _join_new(a, "g")
        assert joined.error_code == ErrorCode.none and joined.generation_id == 1
        assert joined.leader == joined.member_id
        assert [(m.member_id, m.metadata) for m in joined.members] == [(joined.member_id, b"sub")]
        synced = _sync(a, "g", 1, joined.member_id, {joined.member_id: b"all of it"})
        assert (synced.error_code, synced.assignment, synced.protocol_name) == (ErrorCode.none, b"all of it", "range")
        assert _heartbeat(a, "g", 1, joined.member_id) == ErrorCode.none
        assert _heartbeat(a, "g", 0, joined.member_id) == ErrorCode.illegal_generation
        assert _heartbeat(a, "g", 1, "nobody") == ErrorCode.unknown_member_id

        # a second member: the group rebalances; the first learns it from its heartbeat and rejoins
        first = _join(b, "g")
        assert first.error_code == ErrorCode.member_id_required
        from tests.kafkautil import encode_request

        body = build(11, 5, group_id="g", session_timeout=ms(30_000), rebalance_timeout=ms(60_000),
                     member_id=first.member_id, group_instance_id=None, protocol_type="consumer",
                     protocols=(build(11, 5, "JoinGroupRequestProtocol", name="range", metadata=b"sub-b"),))
        b.send(encode_request(11, 5, body, 99))  # waits for the rebalance
        # (its join taken in first: on a busy machine the heartbeat below could overtake it)
        _wait_for(lambda: kafka.broker.coordinator.describe_group("g")["state"] == "PreparingRebalance",
                  "the second member's join starts a rebalance")
        assert _heartbeat(a, "g", 1, joined.member_id) == ErrorCode.rebalance_in_progress
        # PreparingRebalance takes the current generation's commits (a consumer commits in onPartitionsRevoked)
        assert _commit(a, "g", 1, joined.member_id, {("t", 0): 5}) == {("t", 0): ErrorCode.none}
        rejoined = _join(a, "g", member_id=joined.member_id)
        from tests.kafkautil import decode_response

        frame = b.read_frame()
        assert frame is not None
        _, b_joined = decode_response(11, 5, frame)
        assert rejoined.generation_id == b_joined.generation_id == 2
        assert rejoined.leader == joined.member_id  # the leader stays
        assert sorted(m.metadata for m in rejoined.members) == [b"sub", b"sub-b"]
        assert b_joined.members == ()  # followers get no member list
        # CompletingRebalance: the new generation's assignment is not known yet
        assert _commit(a, "g", 2, joined.member_id, {("t", 0): 6}) == {("t", 0): ErrorCode.rebalance_in_progress}
        assert _fetch_offsets(a, "g") == {("t", 0): (5, "")}
        assert _sync(a, "g", 2, joined.member_id, {joined.member_id: b"A", first.member_id: b"B"}).assignment == b"A"
        assert _sync(b, "g", 2, first.member_id, {}).assignment == b"B"

        described = a.call(15, 5, build(15, 5, groups=("g", "unknown"), include_authorized_operations=False)).groups
        assert (described[0].group_state, described[0].protocol_data) == ("Stable", "range")
        assert sorted(m.member_assignment for m in described[0].members) == [b"A", b"B"]
        assert described[1].group_state == "Dead"
        listed = a.call(16, 4, build(16, 4, states_filter=())).groups
        assert [(g.group_id, g.protocol_type, g.group_state) for g in listed] == [("g", "consumer", "Stable")]

        leave = a.call(13, 5, build(13, 5, group_id="g", members=(
            build(13, 5, "MemberIdentity", member_id=first.member_id, group_instance_id=None, reason=None),)))
        assert [m.error_code for m in leave.members] == [ErrorCode.none]
        assert _heartbeat(a, "g", 2, joined.member_id) == ErrorCode.rebalance_in_progress
        old_leave = a.call(13, 0, build(13, 0, group_id="g", member_id=joined.member_id))
        assert old_leave.error_code == ErrorCode.none
        assert kafka.broker.coordinator.describe_group("g")["state"] == "Empty"


def test_join_refusals(tmp_path: Path):
    with listener(tmp_path) as kafka, RawClient(kafka.address) as client:
        assert _join(client, "").error_code == ErrorCode.invalid_group_id
        assert _join(client, "g", session_ms=10).error_code == ErrorCode.invalid_session_timeout
        assert _join(client, "g", member_id="made-up").error_code == ErrorCode.unknown_member_id
        v3 = _join(client, "g", version=3)  # before v4, no MEMBER_ID_REQUIRED round
        assert v3.error_code == ErrorCode.none and v3.member_id
        other = _join(client, "g", version=3, protocols=(("other", b""),))  # shares no protocol with the member
        assert other.error_code == ErrorCode.inconsistent_group_protocol


def test_commit_and_fetch_offsets_survive_a_restart(tmp_path: Path):
    with listener(tmp_path) as kafka, RawClient(kafka.address) as client:
        _topic(client)
        joined = _join_new(client, "g")
        _sync(client, "g", joined.generation_id, joined.member_id, {joined.member_id: b"x"})
        result = _commit(client, "g", joined.generation_id, joined.member_id, {("t", 0): 10, ("t", 1): 20}, "m")
        assert set(result.values()) == {ErrorCode.none}
        assert _commit(client, "g", 9, joined.member_id, {("t", 0): 11}) == {("t", 0): ErrorCode.illegal_generation}
        assert _commit(client, "g", joined.generation_id, "stranger", {("t", 0): 11}) == {
            ("t", 0): ErrorCode.unknown_member_id}
        too_long = "x" * 5000
        assert _commit(client, "g", joined.generation_id, joined.member_id, {("t", 0): 12}, too_long) == {
            ("t", 0): ErrorCode.offset_metadata_too_large}
        # the limit counts characters as Java's String.length() does (UTF-16 units), not UTF-8 bytes: 2000 "✓" are
        # 6000 bytes but 2000 characters, which Kafka accepts (a helper's pass); 2049 emoji are 4098 units
        assert _commit(client, "unicode", -1, "", {("t", 1): 4}, "\u2713" * 2000) == {("t", 1): ErrorCode.none}
        assert _commit(client, "unicode", -1, "", {("t", 1): 5}, "\U0001F600" * 2049) == {
            ("t", 1): ErrorCode.offset_metadata_too_large}
        # a consumer that assigns its own partitions commits outside any generation
        assert _commit(client, "solo", -1, "", {("t", 0): 3}) == {("t", 0): ErrorCode.none}
        assert _fetch_offsets(client, "g") == {("t", 0): (10, "m"), ("t", 1): (20, "m")}
        member_id, generation = joined.member_id, joined.generation_id
        # the records are in the group's partition of __consumer_offsets, in Kafka's formats
        log = kafka.broker.log("__consumer_offsets", partition_for("g", 3))
        keys = [decode_key(bytes(r.key)) for b in log.batches_from(0, FetchIsolation.HIGH_WATERMARK)
                for r in b.records()]
        assert ("g", "t", 0) in [(k.group, getattr(k, "topic", None), getattr(k, "partition", None)) for k in keys]
    with listener(tmp_path) as kafka, RawClient(kafka.address) as client:
        assert _fetch_offsets(client, "g") == {("t", 0): (10, "m"), ("t", 1): (20, "m")}
        assert _fetch_offsets(client, "g", version=1) == {("t", 0): (10, "m"), ("t", 1): (20, "m")}
        assert _fetch_offsets(client, "solo") == {("t", 0): (3, "")}
        # the Stable group came back with its member: it heartbeats on without a rebalance
        assert _heartbeat(client, "g", generation, member_id) == ErrorCode.none
        assert kafka.broker.coordinator.describe_group("g")["state"] == "Stable"
        response = client.call(9, 7, build(9, 7, group_id="g", topics=(
            build(9, 7, "OffsetFetchRequestTopic", name="t", partition_indexes=(0, 5)),), require_stable=False))
        got = {(p.partition_index): p.committed_offset for t in response.topics for p in t.partitions}
        assert got == {0: 10, 5: -1}


def test_commit_refusals_follow_kafkas_validate_offset_commit(tmp_path: Path):
    """OffsetMetadataManager.validateOffsetCommit and ClassicGroup.validateOffsetCommit, case by case."""
    with listener(tmp_path) as kafka, RawClient(kafka.address) as client:
        _topic(client)
        # no such group: a commit outside any generation creates it; one naming a generation is stale
        assert _commit(client, "nobody", 3, "m-1", {("t", 0): 1}) == {("t", 0): ErrorCode.illegal_generation}
        assert _fetch_offsets(client, "nobody") == {}
        joined = _join_new(client, "g")
        _sync(client, "g", joined.generation_id, joined.member_id, {joined.member_id: b"x"})
        # a group with members takes no commit without a member id
        assert _commit(client, "g", -1, "", {("t", 0): 1}) == {("t", 0): ErrorCode.unknown_member_id}
        assert _commit(client, "g", joined.generation_id, "", {("t", 0): 1}) == {("t", 0): ErrorCode.unknown_member_id}
        assert _commit(client, "g", joined.generation_id, joined.member_id, {("t", 0): 2}) == {("t", 0): ErrorCode.none}
        # KafkaApis: a partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION, the others are committed
        assert _commit(client, "g", joined.generation_id, joined.member_id,
                       {("t", 1): 4, ("t", 7): 4, ("gone", 0): 4}) == {
            ("t", 1): ErrorCode.none, ("t", 7): ErrorCode.unknown_topic_or_partition,
            ("gone", 0): ErrorCode.unknown_topic_or_partition}
        assert _fetch_offsets(client, "g") == {("t", 0): (2, ""), ("t", 1): (4, "")}


def test_member_ids_never_used_are_forgotten_with_their_groups(tmp_path: Path):
    """Kafka's pending member expiration: JoinGroups that stop at MEMBER_ID_REQUIRED hold no group, and a pending
    member that never joins does not hold a rebalance until its rebalance timeout."""
    props = {"group.min.session.timeout.ms": "50"}
    with listener(tmp_path, **props) as kafka, RawClient(kafka.address) as a, RawClient(kafka.address) as b:
        coordinator = kafka.broker.coordinator
        for i in range(20):
            assert _join(a, f"probe-{i}", session_ms=100).error_code == ErrorCode.member_id_required
        joined = _join_new(a, "g", session_ms=10_000)
        _sync(a, "g", joined.generation_id, joined.member_id, {joined.member_id: b"x"})
        assert _join(b, "g", session_ms=100).error_code == ErrorCode.member_id_required  # and never comes back
        # the leader rejoins: the rebalance waits for the pending member only until its session timeout (the
        # rebalance timeout is far longer than the client's read bound)
        ps = (build(11, 5, "JoinGroupRequestProtocol", name="range", metadata=b"sub"),)
        body = build(11, 5, group_id="g", session_timeout=ms(10_000), rebalance_timeout=ms(3_600_000),
                     member_id=joined.member_id, group_instance_id=None, protocol_type="consumer", protocols=ps)
        rejoined = a.call(11, 5, body)
        assert (rejoined.error_code, rejoined.generation_id) == (ErrorCode.none, 2)
        assert [m.member_id for m in rejoined.members] == [joined.member_id]
        _wait_for(lambda: [g for g, _, _ in coordinator.list_groups()] == ["g"], "the probes' groups are gone")


def test_an_empty_group_without_offsets_is_removed_at_the_cleanup(tmp_path: Path):
    with listener(tmp_path) as kafka, RawClient(kafka.address) as client:
        joined = _join_new(client, "left")
        _sync(client, "left", joined.generation_id, joined.member_id, {joined.member_id: b"x"})
        client.call(13, 0, build(13, 0, group_id="left", member_id=joined.member_id))
        coordinator = kafka.broker.coordinator
        assert coordinator.describe_group("left")["state"] == "Empty"
        assert coordinator.expire_offsets(int(time.time() * 1000)) == 0
        assert coordinator.list_groups() == []
        log = kafka.broker.log("__consumer_offsets", partition_for("left", 3))
        last = [r for b in log.batches_from(0, FetchIsolation.HIGH_WATERMARK) for r in b.records()][-1]
        assert (decode_key(bytes(last.key)).group, last.value) == ("left", None)  # its metadata's tombstone
    with listener(tmp_path) as kafka:
        assert kafka.broker.coordinator.list_groups() == []


def test_a_member_that_stops_heartbeating_is_removed(tmp_path: Path):
    with listener(tmp_path, **{"group.min.session.timeout.ms": "50"}) as kafka, RawClient(kafka.address) as client:
        joined = _join_new(client, "g", session_ms=100)
        _sync(client, "g", joined.generation_id, joined.member_id, {joined.member_id: b"x"})
        coordinator = kafka.broker.coordinator
        _wait_for(lambda: coordinator.describe_group("g")["state"] == "Empty", "the silent member was removed")
        assert _heartbeat(client, "g", joined.generation_id, joined.member_id) == ErrorCode.unknown_member_id


def test_offsets_of_an_empty_group_expire_with_tombstones(tmp_path: Path):
    with listener(tmp_path) as kafka, RawClient(kafka.address) as client:
        _topic(client)
        assert _commit(client, "old", -1, "", {("t", 0): 3}) == {("t", 0): ErrorCode.none}
        coordinator = kafka.broker.coordinator
        assert coordinator.expire_offsets(int(time.time() * 1000)) == 0  # not yet
        week = 7 * 24 * 3600 * 1000
        assert coordinator.expire_offsets(int(time.time() * 1000) + week + 60_000) == 1
        assert _fetch_offsets(client, "old") == {}
        log = kafka.broker.log("__consumer_offsets", partition_for("old", 3))
        tombstones = [r for b in log.batches_from(0, FetchIsolation.HIGH_WATERMARK) for r in b.records()
                      if r.value is None]
        assert len(tombstones) == 2  # the offset and the group
    with listener(tmp_path) as kafka, RawClient(kafka.address) as client:
        assert _fetch_offsets(client, "old") == {}
        assert kafka.broker.coordinator.list_groups() == []


def test_join_waits_without_holding_a_thread(tmp_path: Path):
    """More members waiting for a rebalance than there are request threads: all get their answer."""
    from tests.kafkautil import decode_response, encode_request

    with listener(tmp_path, **{"num.io.threads": "2"}) as kafka:
        clients = [RawClient(kafka.address) for _ in range(5)]
        try:
            ids = [_join(c, "many").member_id for c in clients]  # MEMBER_ID_REQUIRED: all five are pending
            for c, member_id in zip(clients, ids):
                body = build(11, 5, group_id="many", session_timeout=ms(30_000), rebalance_timeout=ms(60_000),
                             member_id=member_id, group_instance_id=None, protocol_type="consumer",
                             protocols=(build(11, 5, "JoinGroupRequestProtocol", name="range", metadata=b""),))
                c.send(encode_request(11, 5, body, 7))  # each waits until the last one joined
            answers = []
            for c in clients:
                frame = c.read_frame()
                assert frame is not None
                answers.append(decode_response(11, 5, frame)[1])
            assert {(a.error_code, a.generation_id) for a in answers} == {(ErrorCode.none, 1)}
            assert sorted(len(a.members) for a in answers) == [0, 0, 0, 0, 5]
        finally:
            for c in clients:
                c.close()
