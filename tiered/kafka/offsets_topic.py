"""``__consumer_offsets``: the records of committed offsets and group metadata, in Kafka's own formats.

The topic is compacted (``cleanup.policy=compact``): each record's key says what it is about, and the latest value
of a key is its state; a record with a null value (a tombstone) removes it. Key and value are each a version
``int16`` followed by a struct, as Kafka's group coordinator writes them (the schemas in apache/kafka
``group-coordinator/src/main/resources/common/message``). They are declared as ``kio`` entities in
:mod:`tiered.kafka.offsets_schema` and encoded and decoded by ``kio``, the codec of the whole protocol::

    key version 0, 1: OffsetCommitKey     group string | topic string | partition int32
    key version 2:    GroupMetadataKey    group string
    OffsetCommitValue v0: offset int64 | metadata string | commitTimestamp int64
                      v1: offset | metadata | commitTimestamp | expireTimestamp int64
                      v3: offset | leaderEpoch int32 | metadata | commitTimestamp   (what is written)
    GroupMetadataValue v3: protocolType string | generation int32 | protocol nullable string |
                      leader nullable string | currentStateTimestamp int64 | members [MemberMetadata]
        MemberMetadata v3: memberId string | groupInstanceId nullable string | clientId string |
                      clientHost string | rebalanceTimeout int32 | sessionTimeout int32 | subscription bytes |
                      assignment bytes

Only these versions are read (what Kafka 2.x-4.x brokers write for classic groups); a record of another version (a
KIP-848 consumer group's, flexible v4 values) is skipped with a warning when the topic is replayed.

:class:`OffsetsLog` appends the records of one coordinator operation as one batch to the group's partition
(``abs(hashCode(group)) % partitions``, Kafka's rule with Java's ``String.hashCode``) and replays every partition
at start. Offsets and group metadata are in memory only after their batch was appended, so what a client was told
is committed is in the log.
"""

from __future__ import annotations

import io
import logging
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.primitive import i32, i64

from local.records import MemoryRecords, SimpleRecord
from tiered.kafka.offsets_schema import (
    GroupMetadataKey,
    GroupMetadataValueV3,
    OffsetCommitKey,
    OffsetCommitValueV0,
    OffsetCommitValueV1,
    OffsetCommitValueV3,
)

if TYPE_CHECKING:
    from tiered.kafka.broker import KafkaBroker

logger = logging.getLogger(__name__)

_VERSION = struct.Struct(">h")
OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3


_KEYS: dict[int, type] = {0: OffsetCommitKey, 1: OffsetCommitKey, 2: GroupMetadataKey}
_OFFSET_VALUES: dict[int, type] = {0: OffsetCommitValueV0, 1: OffsetCommitValueV1, 3: OffsetCommitValueV3}
_GROUP_VALUES: dict[int, type] = {3: GroupMetadataValueV3}


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """A committed offset as the coordinator keeps it (Kafka's ``OffsetAndMetadata``)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


# Encoding -------------------------------------------------------------------------------------------------------


def _encode(version: int, entity: Any) -> bytes:
    buffer = io.BytesIO()
    buffer.write(_VERSION.pack(version))
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _encode(OFFSET_COMMIT_KEY_VERSION, OffsetCommitKey(group=group, topic=topic, partition=i32(partition)))


def group_key(group: str) -> bytes:
    return _encode(GROUP_METADATA_KEY_VERSION, GroupMetadataKey(group=group))


def offset_value(committed: CommittedOffset) -> bytes:
    return _encode(OFFSET_COMMIT_VALUE_VERSION, OffsetCommitValueV3(
        offset=i64(committed.offset), leader_epoch=i32(committed.leader_epoch), metadata=committed.metadata,
        commit_timestamp=i64(committed.commit_timestamp)))


def group_value(value: GroupMetadataValueV3) -> bytes:
    return _encode(GROUP_METADATA_VALUE_VERSION, value)


# Decoding -------------------------------------------------------------------------------------------------------


def _decode(data: bytes, schemas: dict[int, type], what: str) -> tuple[int, Any]:
    if len(data) < _VERSION.size:
        raise ValueError(f"a {what} of {len(data)} bytes has no version")
    (version,) = _VERSION.unpack_from(data)
    schema = schemas.get(version)
    if schema is None:
        raise ValueError(f"{what} version {version} is not one this node reads ({sorted(schemas)})")
    try:
        entity: Any = entity_reader(schema)(data, _VERSION.size)[0]
    except SerialError as exc:
        raise ValueError(f"a {what} of version {version} cannot be decoded: {exc}") from None
    return version, entity


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey:
    return _decode(data, _KEYS, "__consumer_offsets key")[1]


def decode_offset_value(data: bytes) -> CommittedOffset:
    _, value = _decode(data, _OFFSET_VALUES, "offset commit value")
    return CommittedOffset(int(value.offset), int(getattr(value, "leader_epoch", -1)), value.metadata,
                           int(value.commit_timestamp))


def decode_group_value(data: bytes) -> GroupMetadataValueV3:
    return _decode(data, _GROUP_VALUES, "group metadata value")[1]


# The log --------------------------------------------------------------------------------------------------------


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    for unit in struct.unpack(f">{len(text.encode('utf-16-be')) // 2}H", text.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % partitions`` (``abs`` of MIN_VALUE is 0 there)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(frozen=True, slots=True)
class Replayed:
    """What replaying the topic found: the latest committed offsets and group metadata per group."""

    offsets: dict[str, dict[tuple[str, int], CommittedOffset]]
    groups: dict[str, GroupMetadataValueV3]


class OffsetsLog:
    """Appends to and replays ``__consumer_offsets`` (see the module docstring). :meth:`open` creates the topic
    when it does not exist (Kafka creates it when a client first looks for a group coordinator), with
    ``offsets.topic.num.partitions`` partitions, ``cleanup.policy=compact`` and ``offsets.topic.segment.bytes``."""

    def __init__(self, broker: KafkaBroker, partitions: int) -> None:
        from tiered.kafka.broker import OFFSETS_TOPIC

        self._broker = broker
        self.topic = OFFSETS_TOPIC
        self.partitions = partitions

    @classmethod
    def existing(cls, broker: KafkaBroker) -> OffsetsLog | None:
        from tiered.kafka.broker import OFFSETS_TOPIC

        partitions = broker.partitions_of(OFFSETS_TOPIC)
        return cls(broker, len(partitions)) if partitions else None

    @classmethod
    def open(cls, broker: KafkaBroker) -> OffsetsLog:
        from tiered.kafka.broker import OFFSETS_TOPIC

        found = cls.existing(broker)
        if found is not None:
            return found
        overrides = {"cleanup.policy": "compact", "segment.bytes": str(broker.config.offsets_topic_segment_bytes)}
        count = broker.config.offsets_topic_num_partitions
        broker.create_topic(OFFSETS_TOPIC, count, overrides)
        return cls(broker, count)

    def partition_of(self, group: str) -> int:
        return partition_for(group, self.partitions)

    def append(self, group: str, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Append ``(key, value)`` records (value None: a tombstone) of ``group`` as one batch; raises what the
        engine raises (nothing is then written)."""
        if not records:
            return
        now = int(time.time() * 1000)
        batch = MemoryRecords.build([SimpleRecord(now, key, value) for key, value in records])
        log = self._broker.manager.get_log(self.topic, self.partition_of(group))
        if log is None:
            raise RuntimeError(f"partition {self.partition_of(group)} of {self.topic} is not online")
        log.append(batch)

    def replay(self) -> Replayed:
        offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        groups: dict[str, GroupMetadataValueV3] = {}
        for key_bytes, value in self._records():
            try:
                key = decode_key(key_bytes)
                if isinstance(key, OffsetCommitKey):
                    tp = (key.topic, int(key.partition))
                    if value is None:
                        offsets.get(key.group, {}).pop(tp, None)
                    else:
                        offsets.setdefault(key.group, {})[tp] = decode_offset_value(value)
                elif value is None:
                    groups.pop(key.group, None)
                else:
                    groups[key.group] = decode_group_value(value)
            except ValueError as exc:
                logger.warning("skipping a record of %s: %s", self.topic, exc)
        return Replayed(offsets, groups)

    def _records(self) -> Iterator[tuple[bytes, bytes | None]]:
        from local.fetch import FetchIsolation

        for partition in range(self.partitions):
            log = self._broker.manager.get_log(self.topic, partition)
            if log is None:
                continue
            for batch in log.batches_from(log.log_start_offset, FetchIsolation.HIGH_WATERMARK):
                if batch.is_control_batch:
                    continue
                for record in batch.records():
                    if record.key is not None:
                        yield bytes(record.key), None if record.value is None else bytes(record.value)
