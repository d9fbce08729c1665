"""The group coordinator of the classic consumer group protocol (Kafka's ``GroupCoordinator`` and
``GroupMetadata``), for every group, on this node.

States: Empty -> PreparingRebalance -> CompletingRebalance -> Stable, and back to PreparingRebalance whenever a member
joins, leaves, changes its protocols, or misses its session timeout. A rebalance (Kafka's ``DelayedJoin``) completes
once every known member has sent its JoinGroup again, or at the largest rebalance timeout of its members, dropping
those that did not; the first rebalance of an empty group waits ``group.initial.rebalance.delay.ms`` first, longer
while new members keep coming (up to the rebalance timeout), so that a starting fleet lands in one generation. The
generation then increments, the protocol all members support with the most first-choice votes is chosen, the leader
(kept if it stayed) gets every member's metadata to compute the assignment, and SyncGroup hands each member its
part once the leader sent them. From JoinGroup v4 on, a member without an id is first given one with
MEMBER_ID_REQUIRED (KIP-394). Static membership (``group.instance.id``, KIP-345) is not implemented: such members
are treated as dynamic ones.

Durability: committed offsets and each generation's group metadata (members and assignments) are appended to
``__consumer_offsets`` (:mod:`tiered.kafka.offsets_topic`) before they are acknowledged or applied; :meth:`load`
replays the topic, so after a restart OffsetFetch answers what was committed, and a group that was Stable comes back
Stable with its members (their session timers restart at the load), so consumers that keep heartbeating go on
without a rebalance. Offsets of a group that stays Empty expire ``offsets.retention.minutes`` after the later of
their commit and the group becoming empty (tombstones are written; the group's metadata too once it has no
offsets left), checked every ``offsets.retention.check.interval.ms``; an Empty group without offsets is removed
then. A member id handed out with MEMBER_ID_REQUIRED and not used within the session timeout is forgotten.

Concurrency: one lock over every group; JoinGroup and SyncGroup answer through ``concurrent.futures.Future`` objects
completed after the lock is released, so no request thread waits for a rebalance.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from tiered.kafka.errors import error_code
from tiered.kafka.group_model import Group, GroupState, JoinResult, Member, SyncResult, select_protocol
from tiered.kafka.internal_topic import Producer
from tiered.kafka.offsets_schema import GroupMetadataValueV3, MemberMetadataV3
from tiered.kafka.offsets_topic import (
    CommittedOffset,
    OffsetsLog,
    group_key,
    group_value,
    offset_key,
    offset_value,
)
from tiered.kafka.timers import Timer, Timers

if TYPE_CHECKING:
    from tiered.kafka.broker import KafkaBroker

logger = logging.getLogger(__name__)


_Completion = tuple[Future[Any], Any]


class GroupCoordinator:
    """See the module docstring."""

    def __init__(self, broker: KafkaBroker) -> None:
        config = broker.config
        self._broker = broker
        self._lock = threading.RLock()
        self._groups: dict[str, Group] = {}
        self._timers = Timers()
        self._offsets_log: OffsetsLog | None = None
        self.min_session_timeout_ms = config.group_min_session_timeout_ms
        self.max_session_timeout_ms = config.group_max_session_timeout_ms
        self.initial_delay_ms = config.group_initial_rebalance_delay_ms
        self.retention_ms = config.offsets_retention_minutes * 60_000
        self.retention_check_ms = config.offsets_retention_check_interval_ms
        self.max_metadata_bytes = config.offset_metadata_max_bytes

    # Life cycle ---------------------------------------------------------------------------------------------------

    def load(self) -> None:
        """Replay ``__consumer_offsets`` if it exists and restore the groups; start the offset expiration."""
        self._offsets_log = OffsetsLog.existing_offsets(self._broker)
        if self._offsets_log is None:
            self._timers.schedule(self.retention_check_ms / 1000, self._expire_offsets_task)
            return
        replayed = self._offsets_log.replay()
        with self._lock:
            for group_id, offsets in replayed.offsets.items():
                self._group(group_id).offsets.update(offsets)
            for group_id, value in replayed.groups.items():
                self._restore(self._group(group_id), value)
            for producer_id, by_group in replayed.pending.items():
                for group_id, offsets in by_group.items():
                    self._group(group_id).pending_txn.setdefault(producer_id, {}).update(offsets)
            for group_id in [g for g, group in self._groups.items() if not group.offsets and not group.members
                             and group.generation_id == 0 and not group.pending_txn]:
                del self._groups[group_id]
        logger.info("loaded %d consumer group(s) from %s", len(self._groups), self._offsets_log.topic)
        self._timers.schedule(self.retention_check_ms / 1000, self._expire_offsets_task)

    def close(self) -> None:
        self._timers.close()
        completions: list[_Completion] = []
        with self._lock:
            for group in self._groups.values():
                for member in group.members.values():
                    if member.join_future is not None:
                        completions.append((member.join_future, JoinResult(ErrorCode.coordinator_not_available, "")))
                    if member.sync_future is not None:
                        completions.append((member.sync_future, SyncResult(ErrorCode.coordinator_not_available)))
        _complete(completions)

    def _restore(self, group: Group, value: GroupMetadataValueV3) -> None:
        group.generation_id = int(value.generation)
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        for m in value.members:
            member = Member(m.member_id, m.client_id, m.client_host, int(m.session_timeout),
                            int(m.rebalance_timeout), value.protocol_type, [(value.protocol or "", m.subscription)],
                            m.group_instance_id, m.assignment)
            group.members[member.member_id] = member
            self._schedule_heartbeat(group, member)
        group.set_state(GroupState.STABLE if group.members else GroupState.EMPTY)

    def _group(self, group_id: str) -> Group:
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = Group(group_id)
        return group

    @property
    def offsets_log(self) -> OffsetsLog:
        """``__consumer_offsets``, created on first use."""
        with self._lock:
            if self._offsets_log is None:
                self._offsets_log = OffsetsLog.open_offsets(self._broker)
            return self._offsets_log

    # JoinGroup ----------------------------------------------------------------------------------------------------

    def join(self, group_id: str, member_id: str, *, client_id: str, client_host: str, session_timeout_ms: int,
             rebalance_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
             require_known_member_id: bool, group_instance_id: str | None = None) -> Future[JoinResult]:
        future: Future[JoinResult] = Future()
        completions: list[_Completion] = []
        with self._lock:
            error = self._check_join(group_id, session_timeout_ms, protocol_type, protocols)
            if error is not ErrorCode.none:
                completions.append((future, JoinResult(error, member_id)))
            elif not member_id:
                new_id = f"{client_id}-{uuid.uuid4()}"
                group = self._group(group_id)
                if require_known_member_id:
                    group.pending_members.add(new_id)
                    self._expire_pending_member(group, new_id, session_timeout_ms)
                    completions.append((future, JoinResult(ErrorCode.member_id_required, new_id)))
                else:
                    self._add_member(group, new_id, future, client_id, client_host, session_timeout_ms,
                                     rebalance_timeout_ms, protocol_type, protocols, group_instance_id, completions)
            else:
                known = self._groups.get(group_id)
                if known is not None and member_id in known.pending_members:
                    known.pending_members.discard(member_id)
                    self._add_member(known, member_id, future, client_id, client_host, session_timeout_ms,
                                     rebalance_timeout_ms, protocol_type, protocols, group_instance_id, completions)
                elif known is None or member_id not in known.members:
                    completions.append((future, JoinResult(ErrorCode.unknown_member_id, member_id)))
                else:
                    self._rejoin(known, known.members[member_id], future, protocols, session_timeout_ms,
                                 rebalance_timeout_ms, completions)
        _complete(completions)
        return future

    def _check_join(self, group_id: str, session_timeout_ms: int, protocol_type: str,
                    protocols: list[tuple[str, bytes]]) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return ErrorCode.invalid_session_timeout
        if not protocols or not protocol_type:
            return ErrorCode.inconsistent_group_protocol
        group = self._groups.get(group_id)
        if group is not None and group.members:
            if protocol_type != group.protocol_type:
                return ErrorCode.inconsistent_group_protocol
            shared = set.intersection(*({n for n, _ in m.protocols} for m in group.members.values()))
            if not shared & {name for name, _ in protocols}:
                return ErrorCode.inconsistent_group_protocol
        return ErrorCode.none

    def _add_member(self, group: Group, member_id: str, future: Future[JoinResult], client_id: str, client_host: str,
                    session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                    protocols: list[tuple[str, bytes]], group_instance_id: str | None,
                    completions: list[_Completion]) -> None:
        member = Member(member_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms, protocol_type,
                        protocols, group_instance_id, join_future=future)
        if not group.members:
            group.protocol_type = protocol_type
        group.members[member_id] = member
        if group.initial_delay_until is not None:
            group.joined_during_delay = True
        self._rebalance_or_try_complete(group, completions)

    def _expire_pending_member(self, group: Group, member_id: str, session_timeout_ms: int) -> None:
        """Kafka's ``addPendingMemberExpiration``: a member given an id by MEMBER_ID_REQUIRED that does not join
        with it within its session timeout is forgotten (a rebalance stops waiting for it), and a group it alone
        created goes with it, so JoinGroups that never come back hold no memory."""

        def expire() -> None:
            completions: list[_Completion] = []
            with self._lock:
                if member_id not in group.pending_members or self._groups.get(group.group_id) is not group:
                    return
                group.pending_members.discard(member_id)
                if group.state is GroupState.PREPARING_REBALANCE:
                    self._try_complete_join(group, completions)
                elif _unused(group):
                    del self._groups[group.group_id]
            _complete(completions)

        self._timers.schedule(session_timeout_ms / 1000, expire)

    def _rejoin(self, group: Group, member: Member, future: Future[JoinResult], protocols: list[tuple[str, bytes]],
                session_timeout_ms: int, rebalance_timeout_ms: int, completions: list[_Completion]) -> None:
        if member.join_future is not None:  # a retried JoinGroup replaces the one waiting
            completions.append((member.join_future, JoinResult(ErrorCode.unknown_member_id, member.member_id)))
        changed = protocols != member.protocols
        member.protocols = protocols
        member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        member.join_future = future
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group, completions)
        elif group.state is not GroupState.EMPTY and not changed and member.member_id != group.leader_id:
            # nothing changed for a follower: answer with the current generation (Kafka does the same)
            member.join_future = None
            completions.append((future, self._join_result(group, member)))
            self._schedule_heartbeat(group, member)
        else:
            self._prepare_rebalance(group, completions)

    def _rebalance_or_try_complete(self, group: Group, completions: list[_Completion]) -> None:
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group, completions)
        else:
            self._prepare_rebalance(group, completions)

    def _prepare_rebalance(self, group: Group, completions: list[_Completion]) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                member.assignment = b""
                if member.sync_future is not None:
                    completions.append((member.sync_future, SyncResult(ErrorCode.rebalance_in_progress)))
                    member.sync_future = None
        initial = group.state is GroupState.EMPTY
        group.set_state(GroupState.PREPARING_REBALANCE)
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
        timeout_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        if initial and self.initial_delay_ms > 0:
            group.initial_delay_until = time.monotonic() + timeout_ms / 1000
            group.joined_during_delay = False
            delay_ms = min(self.initial_delay_ms, timeout_ms)
        else:
            group.initial_delay_until = None
            delay_ms = timeout_ms
        group.rebalance_timer = self._timers.schedule(delay_ms / 1000, lambda: self._on_rebalance_timer(group))
        if group.initial_delay_until is None:
            self._try_complete_join(group, completions)

    def _on_rebalance_timer(self, group: Group) -> None:
        completions: list[_Completion] = []
        with self._lock:
            if group.state is not GroupState.PREPARING_REBALANCE or self._groups.get(group.group_id) is not group:
                return
            until = group.initial_delay_until
            if until is not None and group.joined_during_delay and time.monotonic() < until:
                # Kafka's InitialDelayedJoin: more members came; wait another delay, within the rebalance timeout
                group.joined_during_delay = False
                delay_s = min(self.initial_delay_ms / 1000, until - time.monotonic())
                group.rebalance_timer = self._timers.schedule(delay_s, lambda: self._on_rebalance_timer(group))
                return
            group.initial_delay_until = None
            self._complete_join(group, completions)
        _complete(completions)

    def _try_complete_join(self, group: Group, completions: list[_Completion]) -> None:
        if (group.state is GroupState.PREPARING_REBALANCE and group.initial_delay_until is None
                and not group.pending_members
                and all(m.join_future is not None for m in group.members.values())):
            if group.rebalance_timer is not None:
                group.rebalance_timer.cancel()
            self._complete_join(group, completions)

    def _complete_join(self, group: Group, completions: list[_Completion]) -> None:
        for member in [m for m in group.members.values() if m.join_future is None]:
            logger.info("group %s: member %s did not rejoin in time: removed", group.group_id, member.member_id)
            self._drop_member(group, member)
        group.pending_members.clear()
        group.generation_id += 1
        if not group.members:
            group.protocol_name = group.leader_id = None
            group.set_state(GroupState.EMPTY)
            self._store_group(group)
            return
        group.protocol_name = select_protocol(group.members.values())
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.set_state(GroupState.COMPLETING_REBALANCE)
        logger.info("group %s: generation %d with %d member(s), protocol %s", group.group_id, group.generation_id,
                    len(group.members), group.protocol_name)
        for member in group.members.values():
            assert member.join_future is not None
            completions.append((member.join_future, self._join_result(group, member)))
            member.join_future = None
            self._schedule_heartbeat(group, member)

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member.member_id == group.leader_id:
            members = tuple((m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                            for m in group.members.values())
        return JoinResult(ErrorCode.none, member.member_id, group.generation_id, group.protocol_type,
                          group.protocol_name, group.leader_id or "", members)

    # SyncGroup ----------------------------------------------------------------------------------------------------

    def sync(self, group_id: str, generation_id: int, member_id: str, assignments: dict[str, bytes], *,
             protocol_type: str | None = None, protocol_name: str | None = None) -> Future[SyncResult]:
        future: Future[SyncResult] = Future()
        completions: list[_Completion] = []
        with self._lock:
            group = self._groups.get(group_id)
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None:
                completions.append((future, SyncResult(ErrorCode.unknown_member_id)))
            elif generation_id != group.generation_id:
                completions.append((future, SyncResult(ErrorCode.illegal_generation)))
            elif (protocol_type is not None and protocol_type != group.protocol_type) or (
                    protocol_name is not None and protocol_name != group.protocol_name):
                completions.append((future, SyncResult(ErrorCode.inconsistent_group_protocol)))
            elif group.state is GroupState.PREPARING_REBALANCE:
                completions.append((future, SyncResult(ErrorCode.rebalance_in_progress)))
            elif group.state is GroupState.STABLE:
                completions.append((future, self._sync_result(group, member)))
                self._schedule_heartbeat(group, member)
            else:  # CompletingRebalance
                if member.sync_future is not None:
                    completions.append((member.sync_future, SyncResult(ErrorCode.rebalance_in_progress)))
                member.sync_future = future
                self._schedule_heartbeat(group, member)
                if member_id == group.leader_id:
                    self._apply_assignments(group, assignments, completions)
        _complete(completions)
        return future

    def _apply_assignments(self, group: Group, assignments: dict[str, bytes], completions: list[_Completion]) -> None:
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        try:
            self._store_group(group)
        except Exception as exc:
            logger.error("group %s: storing generation %d failed: %r", group.group_id, group.generation_id, exc,
                         exc_info=exc)
            for member in group.members.values():
                member.assignment = b""
                if member.sync_future is not None:
                    completions.append((member.sync_future, SyncResult(ErrorCode.coordinator_not_available)))
                    member.sync_future = None
            self._prepare_rebalance(group, completions)
            return
        group.set_state(GroupState.STABLE)
        for member in group.members.values():
            if member.sync_future is not None:
                completions.append((member.sync_future, self._sync_result(group, member)))
                member.sync_future = None

    @staticmethod
    def _sync_result(group: Group, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment)

    # Heartbeat and LeaveGroup -------------------------------------------------------------------------------------

    def heartbeat(self, group_id: str, generation_id: int, member_id: str) -> ErrorCode:
        with self._lock:
            group = self._groups.get(group_id)
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None:
                return ErrorCode.unknown_member_id
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
            self._schedule_heartbeat(group, member)
            if group.state is GroupState.PREPARING_REBALANCE:
                return ErrorCode.rebalance_in_progress
            return ErrorCode.none

    def leave(self, group_id: str, member_ids: list[str]) -> tuple[ErrorCode, dict[str, ErrorCode]]:
        completions: list[_Completion] = []
        per_member: dict[str, ErrorCode] = {}
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                return ErrorCode.unknown_member_id, dict.fromkeys(member_ids, ErrorCode.unknown_member_id)
            left = False
            for member_id in member_ids:
                member = group.members.get(member_id)
                if member is None:
                    per_member[member_id] = ErrorCode.unknown_member_id
                    continue
                per_member[member_id] = ErrorCode.none
                logger.info("group %s: member %s left", group.group_id, member_id)
                if member.join_future is not None:
                    completions.append((member.join_future, JoinResult(ErrorCode.unknown_member_id, member_id)))
                    member.join_future = None
                self._drop_member(group, member)
                left = True
            if left:
                self._members_changed(group, completions)
        _complete(completions)
        top = ErrorCode.unknown_member_id if len(member_ids) == 1 and per_member.get(member_ids[0]) else ErrorCode.none
        return top, per_member

    def _drop_member(self, group: Group, member: Member) -> None:
        if member.heartbeat is not None:
            member.heartbeat.cancel()
        group.members.pop(member.member_id, None)
        if group.leader_id == member.member_id:
            group.leader_id = next(iter(group.members), None)

    def _members_changed(self, group: Group, completions: list[_Completion]) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, completions)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group, completions)

    def _schedule_heartbeat(self, group: Group, member: Member) -> None:
        if member.heartbeat is not None:
            member.heartbeat.cancel()
        timer: list[Timer] = []

        def expire() -> None:
            completions: list[_Completion] = []
            with self._lock:
                if group.members.get(member.member_id) is not member or member.heartbeat is not timer[0]:
                    return
                if member.join_future is not None or member.sync_future is not None:
                    self._schedule_heartbeat(group, member)  # awaiting a rebalance: kept alive (Kafka's rule)
                    return
                logger.info("group %s: member %s missed its session timeout (%d ms): removed", group.group_id,
                            member.member_id, member.session_timeout_ms)
                self._drop_member(group, member)
                self._members_changed(group, completions)
            _complete(completions)

        timer.append(self._timers.schedule(member.session_timeout_ms / 1000, expire))
        member.heartbeat = timer[0]

    # Offsets ------------------------------------------------------------------------------------------------------

    def commit_offsets(self, group_id: str, generation_id: int, member_id: str,
                       offsets: dict[tuple[str, int], tuple[int, int, str | None]]) -> dict[tuple[str, int], ErrorCode]:
        """Store ``offsets`` ((topic, partition) -> (offset, leader epoch, metadata)); the code of each."""
        with self._lock:
            error = self._check_commit(group_id, generation_id, member_id)
            if error is not ErrorCode.none:
                return dict.fromkeys(offsets, error)
            group = self._group(group_id)
            results, accepted = self._split_by_metadata_size(offsets)
            try:
                self.offsets_log.append(group_id, [(offset_key(group_id, t, p), offset_value(c))
                                                   for (t, p), c in accepted.items()])
            except Exception as exc:
                logger.error("group %s: storing committed offsets failed: %s", group_id, exc)
                results.update(dict.fromkeys(accepted, ErrorCode.coordinator_not_available))
                return results
            group.offsets.update(accepted)
            results.update(dict.fromkeys(accepted, ErrorCode.none))
            return results

    def _split_by_metadata_size(
        self, offsets: Mapping[tuple[str, int], tuple[int, int, str | None]]
    ) -> tuple[dict[tuple[str, int], ErrorCode], dict[tuple[str, int], CommittedOffset]]:
        """The commits whose metadata is above ``offset.metadata.max.bytes`` (OFFSET_METADATA_TOO_LARGE each) and the
        others, stamped now."""
        now = int(time.time() * 1000)
        results: dict[tuple[str, int], ErrorCode] = {}
        accepted: dict[tuple[str, int], CommittedOffset] = {}
        for tp, (offset, epoch, metadata) in offsets.items():
            text = metadata or ""
            # Kafka compares metadata.length(): UTF-16 code units of the Java string, not its UTF-8 bytes
            if len(text.encode("utf-16-le")) // 2 > self.max_metadata_bytes:
                results[tp] = ErrorCode.offset_metadata_too_large
            else:
                accepted[tp] = CommittedOffset(offset, epoch, text, now)
        return results, accepted

    def _check_commit(self, group_id: str, generation_id: int, member_id: str, *,
                      transactional: bool = False) -> ErrorCode:
        """Kafka's ``validateOffsetCommit`` (``OffsetMetadataManager`` and ``ClassicGroup``): a commit outside any
        generation (-1) creates or uses an Empty group; a member's commit needs its member id and the current
        generation, and is accepted while the group is Stable or PreparingRebalance (so a consumer's commit in
        ``onPartitionsRevoked`` counts), refused with REBALANCE_IN_PROGRESS only in CompletingRebalance (not for a
        transactional commit, whose group state is not enforced)."""
        if not group_id:
            return ErrorCode.invalid_group_id
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.none if generation_id < 0 else ErrorCode.illegal_generation
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return ErrorCode.none
        member = None
        if generation_id >= 0 or member_id:
            member = group.members.get(member_id)
            if member is None:
                return ErrorCode.unknown_member_id
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
        elif not transactional and group.state is not GroupState.EMPTY:
            return ErrorCode.unknown_member_id  # no member id nor generation: only an Empty group takes it
        if not transactional and group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        if member is not None:
            self._schedule_heartbeat(group, member)
        return ErrorCode.none

    def txn_commit_offsets(self, group_id: str, producer: Producer, generation_id: int, member_id: str,
                           offsets: dict[tuple[str, int], tuple[int, int, str | None]]) -> dict[tuple[str, int], ErrorCode]:
        """TxnOffsetCommit: store ``offsets`` in a transactional batch of ``producer``; they count once the
        transaction commits (:meth:`complete_txn`). A generation and member (v3+, KIP-447) are checked as an
        OffsetCommit's are; without them (-1, ""), none is."""
        with self._lock:
            error = self._check_commit(group_id, generation_id, member_id, transactional=True)
            if error is not ErrorCode.none:
                return dict.fromkeys(offsets, error)
            results, accepted = self._split_by_metadata_size(offsets)
            try:
                self.offsets_log.append(group_id, [(offset_key(group_id, t, p), offset_value(c))
                                                   for (t, p), c in accepted.items()], producer)
            except Exception as exc:
                logger.error("group %s: storing transactional offsets failed: %s", group_id, exc)
                results.update(dict.fromkeys(accepted, error_code(exc)))
                return results
            self._group(group_id).pending_txn.setdefault(producer.producer_id, {}).update(accepted)
            results.update(dict.fromkeys(accepted, ErrorCode.none))
            return results

    def complete_txn(self, producer_id: int, partitions: set[int], commit: bool) -> None:
        """The COMMIT or ABORT marker of ``producer_id`` was written to these partitions of ``__consumer_offsets``:
        its pending offsets of the groups placed there are applied or dropped."""
        with self._lock:
            if self._offsets_log is None:
                return
            for group in self._groups.values():
                if self._offsets_log.partition_of(group.group_id) in partitions:
                    pending = group.pending_txn.pop(producer_id, None)
                    if pending and commit:
                        group.offsets.update(pending)

    def on_partitions_deleted(self, topic: str, partitions: Iterable[int]) -> int:
        """Kafka's ``onPartitionsDeleted``: a tombstone for every group's committed offset (pending transactional
        ones included) of these partitions of a deleted topic, so a topic created again under the name starts
        with no commit; how many."""
        deleted = {(topic, p) for p in partitions}
        removed = 0
        with self._lock:
            if self._offsets_log is None:
                return 0
            for group in list(self._groups.values()):
                committed = [tp for tp in group.offsets if tp in deleted]
                pending = {tp for offsets in group.pending_txn.values() for tp in offsets if tp in deleted}
                gone = sorted(set(committed) | pending)
                if not gone:
                    continue
                try:
                    self._offsets_log.append(group.group_id, [(offset_key(group.group_id, t, p), None) for t, p in gone])
                except Exception as exc:
                    logger.error("group %s: removing the offsets of deleted topic %s failed: %s", group.group_id,
                                 topic, exc)
                    continue
                for tp in committed:
                    del group.offsets[tp]
                for offsets in group.pending_txn.values():
                    for tp in pending:
                        offsets.pop(tp, None)
                removed += len(gone)
        return removed

    def has_pending_txn_offsets(self, group_id: str, tp: tuple[str, int]) -> bool:
        with self._lock:
            group = self._groups.get(group_id)
            return group is not None and any(tp in offsets for offsets in group.pending_txn.values())

    def fetch_offsets(self, group_id: str,
                      partitions: Iterable[tuple[str, int]] | None) -> dict[tuple[str, int], CommittedOffset | None]:
        with self._lock:
            group = self._groups.get(group_id)
            committed = dict(group.offsets) if group is not None else {}
        if partitions is None:
            return dict(sorted(committed.items()))
        return {tp: committed.get(tp) for tp in partitions}

    def _expire_offsets_task(self) -> None:
        try:
            self.expire_offsets(int(time.time() * 1000))
        finally:
            self._timers.schedule(self.retention_check_ms / 1000, self._expire_offsets_task)

    def expire_offsets(self, now_ms: int) -> int:
        """Write tombstones for the expired offsets of Empty groups (see the module docstring); how many."""
        expired_count = 0
        with self._lock:
            for group in list(self._groups.values()):
                if group.state is not GroupState.EMPTY:
                    continue
                expired = [tp for tp, c in group.offsets.items()
                           if max(c.commit_timestamp, group.state_since_ms) + self.retention_ms <= now_ms]
                records: list[tuple[bytes, bytes | None]] = [(offset_key(group.group_id, t, p), None) for t, p in expired]
                # Kafka's cleanupGroupMetadata: an Empty group left without offsets is removed (Dead), with a
                # tombstone for its metadata when it ever had some
                drop_group = (len(expired) == len(group.offsets) and not group.pending_members
                              and not group.pending_txn)
                if drop_group and (expired or group.generation_id > 0):
                    records.append((group_key(group.group_id), None))
                if records:
                    try:
                        self.offsets_log.append(group.group_id, records)
                    except Exception as exc:
                        logger.error("group %s: expiring offsets failed: %s", group.group_id, exc)
                        continue
                for tp in expired:
                    del group.offsets[tp]
                expired_count += len(expired)
                if drop_group:
                    del self._groups[group.group_id]
                if expired:
                    logger.info("group %s: %d committed offset(s) expired", group.group_id, len(expired))
        return expired_count

    def _store_group(self, group: Group) -> None:
        members = tuple(MemberMetadataV3(
            member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
            client_host=m.client_host, rebalance_timeout=i32(m.rebalance_timeout_ms), session_timeout=i32(m.session_timeout_ms),
            subscription=m.metadata_for(group.protocol_name), assignment=m.assignment) for m in group.members.values())
        value = GroupMetadataValueV3(protocol_type=group.protocol_type or "", generation=i32(group.generation_id),
                                     protocol=group.protocol_name, leader=group.leader_id,
                                     current_state_timestamp=i64(int(time.time() * 1000)), members=members)
        self.offsets_log.append(group.group_id, [(group_key(group.group_id), group_value(value))])

    # ListGroups and DescribeGroups --------------------------------------------------------------------------------

    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group."""
        with self._lock:
            return sorted((g.group_id, g.protocol_type or "", g.state.value) for g in self._groups.values())

    def describe_group(self, group_id: str) -> dict[str, Any]:
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                return {"state": GroupState.DEAD.value, "protocol_type": "", "protocol": "", "members": []}
            stable = group.state is GroupState.STABLE
            members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                        "client_host": m.client_host,
                        "metadata": m.metadata_for(group.protocol_name) if stable else b"",
                        "assignment": m.assignment if stable else b""} for m in group.members.values()]
            return {"state": group.state.value, "protocol_type": group.protocol_type or "",
                    "protocol": group.protocol_name or "", "members": members}


def _unused(group: Group) -> bool:
    """An Empty group that never completed a rebalance and holds nothing: nothing of it was written."""
    return (group.state is GroupState.EMPTY and group.generation_id == 0 and not group.members
            and not group.pending_members and not group.offsets and not group.pending_txn)


def _complete(completions: list[_Completion]) -> None:
    for future, result in completions:
        if not future.done():
            future.set_result(result)
