"""The node behind the Kafka listener: one broker, the controller and the leader of every partition.

:class:`KafkaBroker` is what every handler is given: the running :class:`local.LogManager`, the broker config, this
node's id (``broker.id``) and the address it advertises, and the shared parts (the append notifier that wakes
long-polling fetches, the group coordinator, the producer id allocator). It also owns the topic operations the
protocol needs (list, create, delete), with the rules of ``tiered topics``: a topic is its partition dirs, one topic
id for all of them, its config overrides stored beside each partition.

Leader epoch: a single node never changes leadership, so a partition's leader epoch is the latest one of its
leader-epoch cache (0 for a new partition: the epoch the engine stamps on client appends); responses give it where
Kafka's carry one, and requests that name a current leader epoch are checked against it (FENCED_LEADER_EPOCH
below, UNKNOWN_LEADER_EPOCH above).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from local import filenames
from local.errors import ConfigError, KafkaStorageError, TooManyPartitionsError
from local.manager import open_files_refusal
from tiered.composition import remote_log_manager_of
from tiered.internal_topics import HIDDEN_TOPICS, INTERNAL_TOPICS
from tiered.remote_tier_parts import topic_id_partition

if TYPE_CHECKING:
    from local.config import LogConfig
    from local.log import Log
    from local.manager import LogManager
    from tiered.kafka.group_coordinator import GroupCoordinator
    from tiered.kafka.producer_ids import ProducerIdManager
    from tiered.kafka.txn_coordinator import TxnCoordinator

logger = logging.getLogger(__name__)

DELETE_WAIT_S = 30.0  # the longest DeleteTopics waits for the remote copies under way of a topic's partitions


class TopicError(Exception):
    """A topic operation refused with Kafka's ``code`` and a message for the response."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class AppendNotifier:
    """Wakes fetches waiting for data (Kafka's delayed fetch purgatory, reduced to "something was appended").

    :meth:`notify` is the LogManager's append listener: every append to any log calls it (the listener's produce,
    a transaction marker, the HTTP endpoint, ``tiered produce`` in this process), on the appending thread.
    Waiters are coroutines on the server's event loop. ``version`` counts the appends notified so far: a fetch reads
    it before it reads the log, and waits only while it is unchanged, so an append between the read and the wait is
    never missed. The loop is woken only when a fetch waits (the version check and the waiter's registration are
    under the same lock as the version's increment and the check for waiters), so appends cost no wake-up then.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: set[asyncio.Future[None]] = set()

    @property
    def version(self) -> int:
        return self._version

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def notify(self, _log: object = None) -> None:
        with self._lock:
            self._version += 1
            waiting = bool(self._waiters)
        loop = self._loop
        if waiting and loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._wake)
            except RuntimeError:  # the loop closed meanwhile: nobody waits any more
                pass

    def _wake(self) -> None:
        with self._lock:
            waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_past(self, version: int, timeout_s: float) -> None:
        """Return once an append after ``version`` was notified, or after ``timeout_s``. On the loop thread only."""
        assert self._loop is not None
        waiter: asyncio.Future[None] = self._loop.create_future()
        with self._lock:
            if self._version != version or timeout_s <= 0:
                return
            self._waiters.add(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout_s)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                self._waiters.discard(waiter)


class UnsentBytes:
    """A count of response bytes held for clients that have not read them yet, against a bound (thread-safe: the
    listener's loop charges and releases, the fetch handlers read :meth:`room` on the pool)."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.held = 0
        self._lock = threading.Lock()

    def reserve(self, size: int) -> int:
        """Charge up to ``size`` bytes, at most what is left of the bound (0 when nothing is): the bytes charged.
        Taken at once, so concurrent fetches see each other's."""
        with self._lock:
            granted = max(0, min(size, self.bound - self.held))
            self.held += granted
            return granted

    def settle(self, reserved: int, size: int) -> None:
        """A reservation of ``reserved`` bytes turned out to hold ``size`` (more by one first batch at most)."""
        with self._lock:
            self.held += size - reserved

    def release(self, size: int) -> None:
        with self._lock:
            self.held -= size

    def room(self) -> int:
        """Bytes a new answer may take before the bound is reached (0 at or past it)."""
        with self._lock:
            return max(0, self.bound - self.held)


class KafkaBroker:
    """See the module docstring."""

    def __init__(self, manager: LogManager, config: LogConfig, host: str, port: int) -> None:
        self.manager = manager
        self.config = config
        self.node_id = max(config.broker_id, 0)
        self.host = host
        self.port = port
        self.cluster_id = _cluster_id(config)
        self.appends = AppendNotifier()
        # Bytes of answers encoded and not yet taken by their clients, over every connection (the listener charges
        # and releases them): a fetch asks for no more than what is left of queued.max.request.bytes, so clients
        # that send fetches and never read hold one answer each up to that bound, then one batch each.
        self.unsent = UnsentBytes(config.queued_max_request_bytes)
        self._topics_lock = threading.RLock()
        self.coordinator: GroupCoordinator | None = None
        self.txn_coordinator: TxnCoordinator | None = None
        self.producer_ids: ProducerIdManager | None = None

    # Topics -------------------------------------------------------------------------------------------------------

    def topics(self) -> dict[str, list[int]]:
        """Every topic of the live data dirs with its partitions, in order."""
        out: dict[str, list[int]] = {}
        for topic, partition in self.manager.partitions():
            if topic not in HIDDEN_TOPICS:
                out.setdefault(topic, []).append(partition)
        return {t: sorted(ps) for t, ps in sorted(out.items())}

    def partitions_of(self, topic: str) -> list[int]:
        if topic in HIDDEN_TOPICS:
            return []
        return sorted(p for t, p in self.manager.partitions() if t == topic)

    def require_topic(self, topic: str) -> list[int]:
        """The topic's partitions served here; TopicError when there are none: KAFKA_STORAGE_ERROR naming why when all
        of them are offline (the topic exists: "no topic" would send an operator looking for a typo), else
        UNKNOWN_TOPIC_OR_PARTITION."""
        partitions = self.partitions_of(topic)
        if partitions:
            return partitions
        offline = sorted((p, o) for (t, p), o in self.manager.offline_partitions.items() if t == topic)
        if offline and topic not in HIDDEN_TOPICS:
            raise TopicError(ErrorCode.kafka_storage_error,
                             f"topic {topic!r} is offline here: {offline[0][1].error()}")
        raise TopicError(ErrorCode.unknown_topic_or_partition, f"no topic {topic!r}")

    def known_partitions(self, topics: set[str]) -> set[tuple[str, int]]:
        """The partitions of these topics that exist, online or in an offline data dir (Kafka's metadata cache)."""
        known = {(t, p) for t, p in self.manager.partitions() if t in topics and t not in HIDDEN_TOPICS}
        known.update((t, p) for t, p in self.manager.offline_partitions if t in topics)
        return known

    def log(self, topic: str, partition: int) -> Log | None:
        return None if topic in HIDDEN_TOPICS else self.manager.get_log(topic, partition)

    def absent_log_error(self, topic: str, partition: int) -> ErrorCode:
        """What Kafka answers for a partition whose log is not served: KAFKA_STORAGE_ERROR where it is in an offline
        data dir (ReplicaManager's HostedPartition.Offline), else UNKNOWN_TOPIC_OR_PARTITION."""
        if topic not in HIDDEN_TOPICS and (topic, partition) in self.manager.offline_partitions:
            return ErrorCode.kafka_storage_error
        return ErrorCode.unknown_topic_or_partition

    def led_log(self, topic: str, partition: int, current_leader_epoch: int) -> tuple[Log | None, ErrorCode]:
        """The partition's log for a request that names it and the leader epoch it knows (-1: none), or the error
        Kafka answers: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER where another data dir owns the partition
        (a deposed leader: its offsets past the handover are not the partition's, as for Fetch), or the
        :func:`current_leader_epoch_error`."""
        log = self.log(topic, partition)
        if log is None:
            return None, self.absent_log_error(topic, partition)
        if self.lost_ownership(log) is not None or self.awaiting_claim(log) is not None:
            return None, ErrorCode.not_leader_or_follower
        error = current_leader_epoch_error(current_leader_epoch, log)
        return (log, error) if error is ErrorCode.none else (None, error)

    def lost_ownership(self, log: Log) -> str | None:
        """Why this data dir may no longer take writes to ``log`` (:func:`tiered.composition.lost_ownership`)."""
        from tiered.composition import lost_ownership

        return lost_ownership(self.manager, log)

    def awaiting_claim(self, log: Log) -> str | None:
        """Why ``log`` is not served yet (:func:`tiered.composition.awaiting_claim`: the start's claim of it at a new
        owner epoch is under way), answered NOT_LEADER_OR_FOLLOWER, as a partition whose leader is being elected."""
        from tiered.composition import awaiting_claim

        return awaiting_claim(self.manager, log)

    def topic_id(self, topic: str) -> uuid.UUID | None:
        for partition in self.partitions_of(topic):
            log = self.manager.get_log(topic, partition)
            if log is not None and log.topic_id is not None:
                return log.topic_id
        return None

    def topic_overrides(self, topic: str) -> dict[str, str]:
        """The topic's config overrides as stored beside its first partition."""
        from tiered.commands.topics import topic_overrides

        for partition in self.partitions_of(topic):
            pdir = self.manager.data_dir_of(topic, partition)
            if pdir is not None:
                return topic_overrides(Path(pdir) / filenames.partition_dir_name(topic, partition))
        return {}

    def create_topic(self, topic: str, partitions: int, overrides: Mapping[str, str], *,
                     validate_only: bool = False) -> uuid.UUID | None:
        """Create ``topic`` with ``partitions`` partitions and ``overrides``; raises :class:`TopicError`."""
        from tiered.commands.topics import _check_remote_allowed

        try:
            filenames.validate_topic(topic)
        except ValueError as exc:
            raise TopicError(ErrorCode.invalid_topic_exception, str(exc)) from None
        if topic in HIDDEN_TOPICS:
            raise TopicError(ErrorCode.invalid_topic_exception, f"{topic} is a KRaft broker's metadata log, not a topic")
        if partitions < 1:
            raise TopicError(ErrorCode.invalid_partitions, f"number of partitions must be at least 1, got {partitions}")
        try:
            self.config.topic_config(dict(overrides))
            _check_remote_allowed(self.config, dict(overrides))
        except ConfigError as exc:
            raise TopicError(ErrorCode.invalid_config, str(exc)) from None
        with self._topics_lock:
            if self.known_partitions({topic}):  # (offline ones too: the topic exists)
                raise TopicError(ErrorCode.topic_already_exists, f"Topic '{topic}' already exists.")
            other = filenames.colliding_topic(topic, self.topics())
            if other is not None:
                raise TopicError(ErrorCode.invalid_topic_exception,
                                 f"Topic '{topic}' collides with existing topic: {other}")
            refusal = open_files_refusal(partitions)
            if refusal is not None:
                raise TopicError(ErrorCode.policy_violation, f"cannot create {partitions} partition(s): {refusal}")
            if validate_only:
                return None
            topic_id = uuid.uuid4()
            try:
                self.manager.create_partitions(topic, range(partitions), dict(overrides), topic_id=topic_id)
            except TooManyPartitionsError as exc:
                raise TopicError(ErrorCode.policy_violation, str(exc)) from None
            except KafkaStorageError as exc:  # every data dir offline: an answer, not a dropped connection
                raise TopicError(ErrorCode.kafka_storage_error, str(exc)) from None
            logger.info("created topic %s with %d partition(s)", topic, partitions)
            return topic_id

    def add_partitions(self, topic: str, count: int, *, validate_only: bool = False) -> None:
        """Grow ``topic`` to ``count`` partitions (Kafka's CreatePartitions), the new ones with the topic's id and
        overrides, all or none; raises :class:`TopicError` as Kafka's controller refuses: INVALID_PARTITIONS unless
        ``count`` is more than the topic has, POLICY_VIOLATION for an internal topic (its partition count is the
        broker's ``offsets.topic.num.partitions``, which its coordinator hashes keys by) or past the open-files limit."""
        if topic in INTERNAL_TOPICS:
            raise TopicError(ErrorCode.policy_violation,
                             f"{topic} is an internal topic: its partition count is set by the broker config")
        with self._topics_lock:
            self.require_topic(topic)
            have = len(self.known_partitions({topic}))
            if count == have:
                raise TopicError(ErrorCode.invalid_partitions, f"Topic already has {have} partition(s).")
            if count < have:
                raise TopicError(ErrorCode.invalid_partitions,
                                 f"The topic {topic} currently has {have} partition(s); {count} would not be an "
                                 "increase.")
            refusal = open_files_refusal(count - have)
            if refusal is not None:
                raise TopicError(ErrorCode.policy_violation,
                                 f"cannot add {count - have} partition(s) to {topic}: {refusal}")
            if validate_only:
                return
            try:
                self.manager.create_partitions(topic, range(count), self.topic_overrides(topic),
                                               topic_id=self.topic_id(topic))
            except TooManyPartitionsError as exc:
                raise TopicError(ErrorCode.policy_violation, str(exc)) from None
            except KafkaStorageError as exc:
                raise TopicError(ErrorCode.kafka_storage_error, str(exc)) from None
            logger.info("added %d partition(s) to topic %s: %d in all", count - have, topic, count)

    def auto_create_topic(self, topic: str) -> bool:
        """Kafka's auto topic creation on Metadata: ``num.partitions`` partitions, no overrides. False when the
        name is not valid or auto creation is off."""
        if not self.config.auto_create_topics_enable or topic in INTERNAL_TOPICS | HIDDEN_TOPICS:
            return False
        try:
            self.create_topic(topic, self.config.num_partitions, {})
        except TopicError as exc:
            return exc.code == ErrorCode.topic_already_exists
        return True

    def delete_topic(self, topic: str, deadline: float | None = None) -> None:
        """Delete ``topic`` (TopicError when refused); a remote copy of one of its partitions under way is waited for
        until ``deadline`` (``time.monotonic()``; default: :data:`DELETE_WAIT_S` from now)."""
        if not self.config.delete_topic_enable:
            raise TopicError(ErrorCode.topic_deletion_disabled, "Topic deletion is disabled (delete.topic.enable)")
        if topic in INTERNAL_TOPICS:
            raise TopicError(ErrorCode.invalid_topic_exception, f"Topic {topic} is internal: it cannot be deleted")
        with self._topics_lock:
            partitions = self.require_topic(topic)
            logs = [log for p in partitions if (log := self.manager.get_log(topic, p)) is not None]
            rlm = remote_log_manager_of(self.manager)
            # A copy under way finishes before the check, and none starts until the partitions are gone: checked
            # alone, a first copy finishing just after it left a whole segment in the store for good.
            if deadline is None:
                deadline = time.monotonic() + DELETE_WAIT_S
            held_tasks = rlm.tasks_held(logs, deadline) if rlm is not None else contextlib.nullcontext()
            try:
                with held_tasks:
                    held = [log.name for log in logs if log.has_remote_data]
                    if held:
                        # The engine's delete_log removes local data only: the remote segments would be left behind.
                        raise TopicError(ErrorCode.policy_violation,
                                         f"topic {topic} has data in remote storage ({', '.join(held)}): deleting it "
                                         "over the Kafka protocol would leave the remote segments behind, so it is "
                                         "refused")
                    deleted = [(topic_id_partition(log), log.name, log.remote_log_state.owner_id) for log in logs]
                    self.manager.delete_partitions(topic, partitions)  # (all or none across a crash)
            except TimeoutError as exc:
                raise TopicError(ErrorCode.request_timed_out, f"topic {topic} is not deleted: {exc}; retry") from None
            logger.info("deleted topic %s", topic)
            if rlm is not None:
                for tip, name, claim_id in deleted:
                    rlm.forget_deleted_partition(tip, name, claim_id)
            if self.coordinator is not None:
                self.coordinator.on_partitions_deleted(topic, partitions)

    def alter_topic_config(self, topic: str, overrides: Mapping[str, str], *, validate_only: bool = False) -> None:
        """Replace the topic's overrides by ``overrides`` (validated first, every partition checked first)."""
        from local.manager import _validate_turning_off_remote_storage
        from tiered.commands.topics import _check_remote_allowed

        with self._topics_lock:
            partitions = self.require_topic(topic)
            try:
                new_config = self.config.topic_config(dict(overrides))
                _check_remote_allowed(self.config, dict(overrides))
                for partition in partitions:
                    log = self.manager.get_log(topic, partition)
                    if log is not None:
                        _validate_turning_off_remote_storage(log, new_config)
            except ConfigError as exc:
                raise TopicError(ErrorCode.invalid_config, str(exc)) from None
            except Exception as exc:
                raise TopicError(ErrorCode.invalid_config, str(exc)) from None
            if validate_only:
                return
            for partition in partitions:
                self.manager.get_or_create_log(topic, partition, dict(overrides))


def _cluster_id(config: LogConfig) -> str:
    """Kafka's ``cluster.id`` from a ``meta.properties`` a Kafka broker left in the first data dir; otherwise one
    derived from that dir's path (stable while the dir stays where it is; clients only show it)."""
    from local.config import read_properties

    first = Path(config.log_dirs[0])
    meta = first / "meta.properties"
    if meta.exists():
        try:
            cluster_id = read_properties(meta).get("cluster.id")
        except (OSError, ValueError):
            cluster_id = None
        if cluster_id:
            return str(cluster_id)
    raw = uuid.uuid5(uuid.NAMESPACE_URL, f"tiered:{first.resolve()}").bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def leader_epoch(log: Log) -> int:
    """The partition's leader epoch: the latest of its leader-epoch cache, 0 when it has none yet."""
    return log.latest_epoch or 0


def current_leader_epoch_error(requested: int, log: Log) -> ErrorCode:
    """Kafka's check of a request's ``current_leader_epoch`` against the partition's (-1: not checked)."""
    current = leader_epoch(log)
    if requested < 0 or requested == current:
        return ErrorCode.none
    return ErrorCode.fenced_leader_epoch if requested < current else ErrorCode.unknown_leader_epoch
