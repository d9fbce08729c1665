"""The consumer group APIs of the classic protocol, as requests to and answers from the group coordinator
(:mod:`tiered.kafka.group_coordinator`): FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups.

FindCoordinator names this node for any key (group ids and transactional ids alike); for a group it also creates
``__consumer_offsets`` when missing, as Kafka does. JoinGroup and SyncGroup answer through the coordinator's futures
(a rebalance waits without a request thread).
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from kio.schema.errors import ErrorCode

from tiered.kafka.broker import KafkaBroker
from tiered.kafka.group_coordinator import GroupCoordinator, JoinResult, SyncResult
from tiered.kafka.protocol import NO_THROTTLE, Request, make


def _coordinator(broker: KafkaBroker) -> GroupCoordinator:
    assert broker.coordinator is not None, "the group coordinator was not started"
    return broker.coordinator


def _ms(value: Any) -> int:
    return round(value.total_seconds() * 1000)


def _then(future: Future[Any], fn: Any) -> Future[Any]:
    out: Future[Any] = Future()

    def done(f: Future[Any]) -> None:
        if out.done():  # cancelled: nobody waits for the answer any more
            return
        try:
            out.set_result(fn(f.result()))
        except BaseException as exc:
            out.set_exception(exc)

    future.add_done_callback(done)
    return out


# FindCoordinator ------------------------------------------------------------------------------------------------


def handle_find_coordinator(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    module = request.response_module
    if getattr(body, "key_type", 0) == 0:
        _coordinator(broker).offsets_log  # noqa: B018 - Kafka creates __consumer_offsets when a client first asks
    if hasattr(body, "coordinator_keys"):  # v4+: a batch of keys
        coordinators = tuple(make(module, "Coordinator", key=key, node_id=broker.node_id, host=broker.host,
                                  port=broker.port, error_code=ErrorCode.none, error_message=None)
                             for key in body.coordinator_keys)
        return make(module, "FindCoordinatorResponse", throttle_time=NO_THROTTLE, coordinators=coordinators)
    return make(module, "FindCoordinatorResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                error_message=None, node_id=broker.node_id, host=broker.host, port=broker.port)


# JoinGroup and SyncGroup ----------------------------------------------------------------------------------------


def handle_join_group(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    module = request.response_module
    session_ms = _ms(body.session_timeout)
    rebalance_ms = _ms(body.rebalance_timeout) if hasattr(body, "rebalance_timeout") else session_ms
    future = _coordinator(broker).join(
        body.group_id, body.member_id, client_id=request.client_id or "", client_host=request.client_host,
        session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms, protocol_type=body.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
        require_known_member_id=request.api_version >= 4, group_instance_id=getattr(body, "group_instance_id", None))
    return _then(future, lambda result: _join_response(module, result))


def _join_response(module: Any, result: JoinResult) -> Any:
    members = tuple(make(module, "JoinGroupResponseMember", member_id=member_id, group_instance_id=instance_id,
                         metadata=metadata) for member_id, instance_id, metadata in result.members)
    nullable = "protocol_type" in module.JoinGroupResponse.__dataclass_fields__  # v7+: protocol name nullable too
    protocol = result.protocol_name if nullable else (result.protocol_name or "")
    return make(module, "JoinGroupResponse", throttle_time=NO_THROTTLE, error_code=result.error,
                generation_id=result.generation_id, protocol_type=result.protocol_type, protocol_name=protocol,
                leader=result.leader, skip_assignment=False, member_id=result.member_id, members=members)


def handle_sync_group(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    module = request.response_module
    assignments = {a.member_id: bytes(a.assignment) for a in body.assignments}
    future = _coordinator(broker).sync(body.group_id, body.generation_id, body.member_id, assignments,
                                       protocol_type=getattr(body, "protocol_type", None),
                                       protocol_name=getattr(body, "protocol_name", None))
    return _then(future, lambda result: _sync_response(module, result))


def _sync_response(module: Any, result: SyncResult) -> Any:
    return make(module, "SyncGroupResponse", throttle_time=NO_THROTTLE, error_code=result.error,
                protocol_type=result.protocol_type, protocol_name=result.protocol_name, assignment=result.assignment)


# Heartbeat and LeaveGroup ---------------------------------------------------------------------------------------


def handle_heartbeat(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    error = _coordinator(broker).heartbeat(body.group_id, body.generation_id, body.member_id)
    return make(request.response_module, "HeartbeatResponse", throttle_time=NO_THROTTLE, error_code=error)


def handle_leave_group(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    module = request.response_module
    if hasattr(body, "members"):  # v3+: a batch of members
        ids = [m.member_id for m in body.members]
        _, per_member = _coordinator(broker).leave(body.group_id, ids)
        members = tuple(make(module, "MemberResponse", member_id=m.member_id, group_instance_id=m.group_instance_id,
                             error_code=per_member[m.member_id]) for m in body.members)
        return make(module, "LeaveGroupResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                    members=members)
    error, _ = _coordinator(broker).leave(body.group_id, [body.member_id])
    return make(module, "LeaveGroupResponse", throttle_time=NO_THROTTLE, error_code=error, members=())


# OffsetCommit and OffsetFetch -----------------------------------------------------------------------------------


def handle_offset_commit(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    module = request.response_module
    offsets = {(t.name, p.partition_index): (int(p.committed_offset), int(getattr(p, "committed_leader_epoch", -1)),
                                             p.committed_metadata)
               for t in body.topics for p in t.partitions}
    offsets, results = split_unknown_partitions(broker, offsets)
    results.update(_coordinator(broker).commit_offsets(body.group_id, int(body.generation_id_or_member_epoch),
                                                       body.member_id, offsets))
    topics = tuple(make(module, "OffsetCommitResponseTopic", name=t.name, partitions=tuple(
        make(module, "OffsetCommitResponsePartition", partition_index=p.partition_index,
             error_code=results[(t.name, p.partition_index)]) for p in t.partitions)) for t in body.topics)
    return make(module, "OffsetCommitResponse", throttle_time=NO_THROTTLE, topics=topics)


def split_unknown_partitions(broker: KafkaBroker, offsets: dict[tuple[str, int], Any]) -> tuple[
        dict[tuple[str, int], Any], dict[tuple[str, int], ErrorCode]]:
    """KafkaApis' check before a commit reaches the coordinator: a partition that does not exist is answered
    UNKNOWN_TOPIC_OR_PARTITION (so a consumer of a deleted topic does not commit its offsets back); the others go on."""
    known = broker.known_partitions({topic for topic, _ in offsets})
    return ({tp: v for tp, v in offsets.items() if tp in known},
            {tp: ErrorCode.unknown_topic_or_partition for tp in offsets if tp not in known})


def handle_offset_fetch(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    module = request.response_module
    wanted = None if body.topics is None else [(t.name, p) for t in body.topics for p in t.partition_indexes]
    coordinator = _coordinator(broker)
    committed = coordinator.fetch_offsets(body.group_id, wanted)
    require_stable = getattr(body, "require_stable", False)  # v7 (KIP-447): refuse while a transaction commits one
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), c in committed.items():
        unstable = require_stable and coordinator.has_pending_txn_offsets(body.group_id, (topic, partition))
        by_topic.setdefault(topic, []).append(make(
            module, "OffsetFetchResponsePartition", partition_index=partition,
            committed_offset=c.offset if c is not None and not unstable else -1,
            committed_leader_epoch=c.leader_epoch if c is not None else -1,
            metadata=c.metadata if c is not None else "",
            error_code=ErrorCode.unstable_offset_commit if unstable else ErrorCode.none))
    topics = tuple(make(module, "OffsetFetchResponseTopic", name=name, partitions=tuple(ps))
                   for name, ps in by_topic.items())
    return make(module, "OffsetFetchResponse", throttle_time=NO_THROTTLE, topics=topics, error_code=ErrorCode.none)


# ListGroups and DescribeGroups ----------------------------------------------------------------------------------


def handle_list_groups(broker: KafkaBroker, request: Request) -> Any:
    module = request.response_module
    states = set(getattr(request.body, "states_filter", None) or ())
    groups = tuple(make(module, "ListedGroup", group_id=group_id, protocol_type=protocol_type, group_state=state)
                   for group_id, protocol_type, state in _coordinator(broker).list_groups()
                   if not states or state in states)
    return make(module, "ListGroupsResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=groups)


def handle_describe_groups(broker: KafkaBroker, request: Request) -> Any:
    module = request.response_module
    described = []
    for group_id in request.body.groups:
        d = _coordinator(broker).describe_group(group_id)
        members = tuple(make(module, "DescribedGroupMember", member_id=m["member_id"],
                             group_instance_id=m["group_instance_id"], client_id=m["client_id"],
                             client_host=m["client_host"], member_metadata=m["metadata"],
                             member_assignment=m["assignment"]) for m in d["members"])
        described.append(make(module, "DescribedGroup", error_code=ErrorCode.none, group_id=group_id,
                              group_state=d["state"], protocol_type=d["protocol_type"], protocol_data=d["protocol"],
                              members=members))
    return make(module, "DescribeGroupsResponse", throttle_time=NO_THROTTLE, groups=tuple(described))
