"""The record schemas of ``__transaction_state`` as ``kio`` entities (Kafka's ``TransactionLogKey`` v0 and
``TransactionLogValue`` v0, apache/kafka ``transaction-coordinator/src/main/resources/common/message``)::

    key   version int16 (0) | transactionalId string
    value version int16 (0) | producerId int64 | producerEpoch int16 | transactionTimeoutMs int32 |
          transactionStatus int8 | transactionPartitions nullable [topic string | partitionIds [int32]] |
          transactionLastUpdateTimestampMs int64 | transactionStartTimestampMs int64

No ``from __future__ import annotations`` here: ``kio`` reads the field types at run time.
"""

from dataclasses import dataclass, field
from typing import ClassVar

from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i64


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionLogKey:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    transactional_id: str = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionsSchema:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    topic: str = field(metadata={"kafka_type": "string"})
    partition_ids: tuple[i32, ...] = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionLogValueV0:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    producer_id: i64 = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    transaction_timeout_ms: i32 = field(metadata={"kafka_type": "int32"})
    transaction_status: i8 = field(metadata={"kafka_type": "int8"})
    transaction_partitions: tuple[PartitionsSchema, ...] | None
    transaction_last_update_timestamp_ms: i64 = field(metadata={"kafka_type": "int64"})
    transaction_start_timestamp_ms: i64 = field(metadata={"kafka_type": "int64"})
