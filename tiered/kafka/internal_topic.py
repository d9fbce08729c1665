"""A compacted internal topic of the coordinators (``__consumer_offsets``, ``__transaction_state``): its creation,
the placement of a coordinator key on a partition, appends, and the walk of every record for a replay.

The topic is created when first needed with ``cleanup.policy=compact`` (the latest value of a key is its state; a
null value is a tombstone) and is correct without compaction running: a replay applies every record in offset
order. A key is placed on ``abs(hashCode(key)) % partitions`` with Java's ``String.hashCode``, as Kafka places group
ids and transactional ids.

Appends of the coordinators go through :meth:`local.log.Log.append` with the coordinator origin; a transactional
one (an offset commit inside a transaction) carries its producer id and epoch and the next sequence of that
producer on the partition, so a later batch of the same producer is never taken for a retry of an earlier one.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from local.producer_state import AppendOrigin
from local.records import MemoryRecords, SimpleRecord

if TYPE_CHECKING:
    from tiered.kafka.broker import KafkaBroker


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    encoded = text.encode("utf-16-be")
    h = 0
    for unit in struct.unpack(f">{len(encoded) // 2}H", encoded):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(key.hashCode) % partitions`` (``abs`` of MIN_VALUE is 0 there)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(frozen=True, slots=True)
class Producer:
    """The transactional producer an append belongs to."""

    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record of the topic as a replay sees it: its key and value, and the producer of its batch when the batch
    is transactional; ``marker`` is "commit" or "abort" for a transaction marker (key and value are then None)."""

    partition: int
    key: bytes | None
    value: bytes | None
    producer_id: int = -1
    marker: str | None = None


class InternalTopicLog:
    """See the module docstring."""

    def __init__(self, broker: KafkaBroker, topic: str, partitions: int) -> None:
        self._broker = broker
        self.topic = topic
        self.partitions = partitions

    @classmethod
    def existing(cls, broker: KafkaBroker, topic: str) -> InternalTopicLog | None:
        partitions = broker.partitions_of(topic)
        return cls(broker, topic, len(partitions)) if partitions else None

    @classmethod
    def open(cls, broker: KafkaBroker, topic: str, partitions: int, segment_bytes: int) -> InternalTopicLog:
        found = cls.existing(broker, topic)
        if found is not None:
            return found
        broker.create_topic(topic, partitions, {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)})
        return cls(broker, topic, partitions)

    def partition_of(self, key: str) -> int:
        return partition_for(key, self.partitions)

    def log(self, partition: int) -> Any:
        log = self._broker.manager.get_log(self.topic, partition)
        if log is None:
            raise RuntimeError(f"partition {partition} of {self.topic} is not online")
        return log

    def append(self, key: str, records: Sequence[tuple[bytes, bytes | None]], producer: Producer | None = None) -> None:
        """Append ``(key, value)`` records (value None: a tombstone) as one batch to ``key``'s partition; raises what
        the engine raises (nothing is then written)."""
        if not records:
            return
        log = self.log(self.partition_of(key))
        now = int(time.time() * 1000)
        simple = [SimpleRecord(now, k, v) for k, v in records]
        if producer is None:
            batch = MemoryRecords.build(simple)
        else:
            entry = log.producer_state_manager.last_entry(producer.producer_id)
            sequence = (entry.last_seq + 1 if entry is not None and not entry.is_empty()
                        and entry.producer_epoch == producer.producer_epoch else 0)
            batch = MemoryRecords.build(simple, producer_id=producer.producer_id,
                                        producer_epoch=producer.producer_epoch, base_sequence=sequence,
                                        is_transactional=True)
        log.append(batch, origin=AppendOrigin.COORDINATOR)

    def records(self) -> Iterator[StoredRecord]:
        """Every record of every partition, in offset order per partition, markers included."""
        from local.fetch import FetchIsolation
        from local.records.batch import ControlRecordType

        for partition in range(self.partitions):
            log = self._broker.manager.get_log(self.topic, partition)
            if log is None:
                continue
            for batch in log.batches_from(log.log_start_offset, FetchIsolation.HIGH_WATERMARK):
                producer_id = batch.producer_id if batch.is_transactional else -1
                if batch.is_control_batch:
                    kind, _ = batch.control_record()
                    if kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                        yield StoredRecord(partition, None, None, producer_id,
                                           "commit" if kind is ControlRecordType.COMMIT else "abort")
                    continue
                for record in batch.records():
                    if record.key is not None:
                        yield StoredRecord(partition, bytes(record.key),
                                           None if record.value is None else bytes(record.value), producer_id)
