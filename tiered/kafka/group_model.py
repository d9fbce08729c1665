"""The state the group coordinator keeps (Kafka's ``GroupMetadata`` and ``MemberMetadata``): a group, its members,
the results of JoinGroup and SyncGroup, and the choice of the group's protocol. No behaviour beyond that: the state
machine is :mod:`tiered.kafka.group_coordinator`'s."""

from __future__ import annotations

import enum
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from tiered.kafka.offsets_topic import CommittedOffset
from tiered.kafka.timers import Timer


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # (member id, instance id, metadata), leader only


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(eq=False)
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    group_instance_id: str | None = None
    assignment: bytes = b""
    join_future: Future[JoinResult] | None = None
    sync_future: Future[SyncResult] | None = None
    heartbeat: Timer | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    # offsets committed inside open transactions: producer id -> offsets (applied by the COMMIT marker)
    pending_txn: dict[int, dict[tuple[str, int], CommittedOffset]] = field(default_factory=dict)
    state_since_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    rebalance_timer: Timer | None = None
    initial_delay_until: float | None = None  # monotonic end of the initial rebalance delay's longest extension
    joined_during_delay: bool = False

    def set_state(self, state: GroupState) -> None:
        self.state = state
        self.state_since_ms = int(time.time() * 1000)


def select_protocol(members: Iterable[Member]) -> str:
    """The protocol every member supports with the most first-choice votes (Kafka's ``selectProtocol``)."""
    members = list(members)
    candidates = set.intersection(*({name for name, _ in m.protocols} for m in members))
    if not candidates:  # JoinGroup refuses a member sharing no protocol with the others; a restored group may not
        return members[0].protocols[0][0]
    votes = Counter(next(name for name, _ in m.protocols if name in candidates) for m in members)
    order = [name for name, _ in members[0].protocols if name in candidates]
    return max(order, key=lambda name: (votes[name], -order.index(name)))
