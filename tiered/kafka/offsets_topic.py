"""``__consumer_offsets``: the records of committed offsets and group metadata, in Kafka's own formats.

The topic is compacted (``cleanup.policy=compact``): each record's key says what it is about, and the latest value
of a key is its state; a record with a null value (a tombstone) removes it. Key and value are each a version
``int16`` followed by a struct, as Kafka's group coordinator writes them (the schemas in apache/kafka
``group-coordinator/src/main/resources/common/message``). They are declared as ``kio`` entities in
:mod:`tiered.kafka.offsets_schema` and encoded and decoded by ``kio``, the codec of the whole protocol::

    key version 0, 1: OffsetCommitKey     group string | topic string | partition int32
    key version 2:    GroupMetadataKey    group string
    OffsetCommitValue v0, v2: offset int64 | metadata string | commitTimestamp int64
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
(:mod:`tiered.kafka.internal_topic`: Kafka's placement) and replays every partition at start. Offsets and group
metadata are in memory only after their batch was appended, so what a client was told is committed is in the log.
Offsets committed inside a transaction (TxnOffsetCommit) are written in a transactional batch of the producer and
count only once the transaction's COMMIT marker follows them in the partition; an ABORT marker drops them.
"""

from __future__ import annotations

import io
import logging
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.primitive import i32, i64

from tiered.kafka.internal_topic import InternalTopicLog
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
# v2 has v0's fields (Kafka 2.1's inter-broker protocol 2.1-IV0 wrote it)
_OFFSET_VALUES: dict[int, type] = {0: OffsetCommitValueV0, 1: OffsetCommitValueV1, 2: OffsetCommitValueV0,
                                   3: OffsetCommitValueV3}
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


@dataclass(frozen=True, slots=True)
class Replayed:
    """What replaying the topic found: the latest committed offsets and group metadata per group, and the offsets
    committed inside transactions still open (producer id -> group -> offsets)."""

    offsets: dict[str, dict[tuple[str, int], CommittedOffset]]
    groups: dict[str, GroupMetadataValueV3]
    pending: dict[int, dict[str, dict[tuple[str, int], CommittedOffset]]]


class OffsetsLog(InternalTopicLog):
    """``__consumer_offsets`` (see the module docstring), created when a client first looks for a group coordinator
    (as Kafka creates it) with ``offsets.topic.num.partitions`` partitions and ``offsets.topic.segment.bytes``."""

    @classmethod
    def open_offsets(cls, broker: KafkaBroker) -> OffsetsLog:
        from tiered.internal_topics import OFFSETS_TOPIC

        log = InternalTopicLog.open(broker, OFFSETS_TOPIC, broker.config.offsets_topic_num_partitions,
                                    broker.config.offsets_topic_segment_bytes)
        return cls(broker, log.topic, log.partitions)

    @classmethod
    def existing_offsets(cls, broker: KafkaBroker) -> OffsetsLog | None:
        from tiered.internal_topics import OFFSETS_TOPIC

        log = InternalTopicLog.existing(broker, OFFSETS_TOPIC)
        return None if log is None else cls(broker, log.topic, log.partitions)

    def replay(self) -> Replayed:
        offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        groups: dict[str, GroupMetadataValueV3] = {}
        # offsets committed in a transaction wait for its marker: (partition, producer id) -> [(group, tp, value)]
        open_txns: dict[tuple[int, int], list[tuple[str, tuple[str, int], CommittedOffset]]] = {}
        for stored in self.records():
            if stored.marker is not None:
                done = open_txns.pop((stored.partition, stored.producer_id), [])
                if stored.marker == "commit":
                    for group, tp, committed in done:
                        offsets.setdefault(group, {})[tp] = committed
                continue
            assert stored.key is not None
            try:
                key = decode_key(stored.key)
                if isinstance(key, OffsetCommitKey):
                    tp = (key.topic, int(key.partition))
                    if stored.value is None:
                        offsets.get(key.group, {}).pop(tp, None)
                        for entries in open_txns.values():  # a deleted topic's pending commits go too
                            entries[:] = [e for e in entries if (e[0], e[1]) != (key.group, tp)]
                    elif stored.producer_id >= 0:
                        open_txns.setdefault((stored.partition, stored.producer_id), []).append(
                            (key.group, tp, decode_offset_value(stored.value)))
                    else:
                        offsets.setdefault(key.group, {})[tp] = decode_offset_value(stored.value)
                elif stored.value is None:
                    groups.pop(key.group, None)
                else:
                    groups[key.group] = decode_group_value(stored.value)
            except ValueError as exc:
                logger.warning("skipping a record of %s: %s", self.topic, exc)
        pending: dict[int, dict[str, dict[tuple[str, int], CommittedOffset]]] = {}
        for (_, producer_id), entries in open_txns.items():
            for group, tp, committed in entries:
                pending.setdefault(producer_id, {}).setdefault(group, {})[tp] = committed
        return Replayed(offsets, groups, pending)
