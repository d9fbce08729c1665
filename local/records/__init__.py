"""Kafka's record format: v2 record batches (and legacy v0/v1 message sets, read only), as a pure codec.

Bytes or memoryviews in, values or bytes out; no file I/O here.
"""

from local.records.batch import (
    BATCH_HEADER,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    ControlRecordType,
    EndTransactionMarker,
    RecordBatch,
    TimestampType,
    set_base_offset,
    set_max_timestamp,
    set_partition_leader_epoch,
)
from local.records.compression import CompressionType
from local.records.legacy import LegacyRecordBatch
from local.records.memory_records import MemoryRecords, batch_from_buffer
from local.records.record import Record, SimpleRecord

__all__ = [
    "BATCH_HEADER", "CURRENT_MAGIC", "LOG_OVERHEAD", "RECORD_BATCH_OVERHEAD", "CompressionType", "ControlRecordType",
    "EndTransactionMarker", "LegacyRecordBatch", "MemoryRecords", "Record", "RecordBatch", "SimpleRecord",
    "TimestampType", "batch_from_buffer", "set_base_offset", "set_max_timestamp", "set_partition_leader_epoch",
]
