"""Kafka record batches, magic v2: the header layout, the batch view, in-place patches and the builder.

Header (61 bytes, big-endian), parsed with ONE ``unpack_from``::

    0  baseOffset            i64   assigned by the log on append (outside the CRC)
    8  batchLength           i32   total size - 12
    12 partitionLeaderEpoch  i32   stamped by the log on append (outside the CRC)
    16 magic                 i8    2
    17 crc                   u32   CRC-32C of bytes [21, end)
    21 attributes            i16   bits 0-2 codec; 0x08 LOG_APPEND_TIME; 0x10 transactional; 0x20 control;
                                   0x40 has delete horizon
    23 lastOffsetDelta       i32
    27 baseTimestamp         i64   the delete horizon when 0x40 is set
    35 maxTimestamp          i64
    43 producerId            i64
    51 producerEpoch         i16
    53 baseSequence          i32
    57 recordsCount          i32
    61 records               (one compressed blob when the codec is not none)
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator, Sequence

from local.crc import crc32c
from local.errors import CorruptRecordError, InvalidRecordError
from local.records.compression import CompressionType

# The layout's constants are defined once, in local.records.constants; the ``X as X`` ones are re-exported here.
from local.records.constants import CURRENT_MAGIC as CURRENT_MAGIC
from local.records.constants import HEADER_SIZE_UP_TO_MAGIC as HEADER_SIZE_UP_TO_MAGIC
from local.records.constants import (
    INT32_MAX,
    LOG_OVERHEAD,
    MAGIC_V2,
    OFFSET_OFFSET,
    RECORD_BATCH_OVERHEAD,
    SIZE_OFFSET,
)
from local.records.constants import LAST_OFFSET_DELTA_OFFSET as LAST_OFFSET_DELTA_OFFSET
from local.records.constants import MAGIC_OFFSET as MAGIC_OFFSET
from local.records.constants import MAGIC_V0 as MAGIC_V0
from local.records.constants import MAGIC_V1 as MAGIC_V1
from local.records.record import Record, SimpleRecord, decode_records, encode_record

BATCH_HEADER = struct.Struct(
    ">q"  # baseOffset
    "i"  # batchLength
    "i"  # partitionLeaderEpoch
    "b"  # magic
    "I"  # crc
    "h"  # attributes
    "i"  # lastOffsetDelta
    "q"  # baseTimestamp
    "q"  # maxTimestamp
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordsCount
)
assert BATCH_HEADER.size == RECORD_BATCH_OVERHEAD

BASE_OFFSET_OFFSET = OFFSET_OFFSET
LENGTH_OFFSET = SIZE_OFFSET
PARTITION_LEADER_EPOCH_OFFSET = 12
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
RECORDS_COUNT_OFFSET = 57

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


class TimestampType(enum.IntEnum):
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @classmethod
    def from_name(cls, name: str) -> TimestampType:
        normalized = name.replace("_", "").lower()
        if normalized == "createtime":
            return cls.CREATE_TIME
        if normalized == "logappendtime":
            return cls.LOG_APPEND_TIME
        raise ValueError(f"unknown timestamp type {name!r}: CreateTime or LogAppendTime")


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: wraps at Integer.MAX_VALUE."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


class RecordBatch:
    """A view of exactly one v2 batch (no copy). See the module docstring for the layout."""

    __slots__ = (
        "_buf", "attributes", "base_offset", "base_sequence", "base_timestamp", "batch_length", "crc",
        "last_offset_delta", "magic", "max_timestamp", "partition_leader_epoch", "producer_epoch", "producer_id",
        "records_count",
    )

    def __init__(self, buffer: bytes | bytearray | memoryview) -> None:
        buf = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
        if len(buf) < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"record batch of {len(buf)} bytes is shorter than the {RECORD_BATCH_OVERHEAD}-byte header", size=len(buf)
            )
        (self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic, self.crc, self.attributes,
         self.last_offset_delta, self.base_timestamp, self.max_timestamp, self.producer_id, self.producer_epoch,
         self.base_sequence, self.records_count) = BATCH_HEADER.unpack_from(buf, 0)
        if self.magic != MAGIC_V2:
            raise CorruptRecordError(
                f"batch at offset {self.base_offset} has magic {self.magic}, expected 2", offset=self.base_offset)
        if self.batch_length + LOG_OVERHEAD != len(buf):
            raise CorruptRecordError(
                f"batch at offset {self.base_offset} declares {self.batch_length + LOG_OVERHEAD} bytes but "
                f"{len(buf)} were given", offset=self.base_offset)
        self._buf = buf

    # header-derived properties ------------------------------------------------------------------------
    @property
    def buffer(self) -> memoryview:
        return self._buf

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    def __len__(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression_type(self) -> CompressionType:
        return CompressionType.from_id(self.attributes & COMPRESSION_CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control_batch(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    # validation ---------------------------------------------------------------------------------------
    def compute_checksum(self) -> int:
        return crc32c(self._buf[ATTRIBUTES_OFFSET:])

    def is_valid(self) -> bool:
        return self.compute_checksum() == self.crc

    def ensure_valid(self) -> None:
        computed = self.compute_checksum()
        if computed != self.crc:
            raise CorruptRecordError(
                f"record batch at offset {self.base_offset} is corrupt: stored crc {self.crc:#010x}, computed "
                f"{computed:#010x} ({self.size_in_bytes} bytes)", offset=self.base_offset, crc=self.crc, computed=computed)

    # records ------------------------------------------------------------------------------------------
    def records(self) -> Iterator[Record]:
        """Decode every record (decompressing once). InvalidRecordError on malformed contents."""
        body = self._buf[RECORD_BATCH_OVERHEAD:]
        codec = self.compression_type
        data = body.tobytes() if codec is CompressionType.NONE else codec.decompress(body)
        if self.records_count < 0:
            raise InvalidRecordError(
                f"batch at offset {self.base_offset} declares {self.records_count} records", offset=self.base_offset)
        lat = self.max_timestamp if self.attributes & TIMESTAMP_TYPE_MASK else None
        try:
            recs = decode_records(data, self.records_count, self.base_offset, self.base_timestamp, lat, self.base_sequence)
        except InvalidRecordError as exc:
            raise InvalidRecordError(f"invalid batch at offset {self.base_offset}: {exc}", offset=self.base_offset) from exc
        except (IndexError, UnicodeDecodeError) as exc:
            raise InvalidRecordError(
                f"invalid batch at offset {self.base_offset}: truncated or malformed record ({exc})", offset=self.base_offset
            ) from exc
        return iter(recs)

    def control_record(self) -> tuple[ControlRecordType, bytes | None]:
        """For a control batch: the type from its record's key and the raw value."""
        if not self.is_control_batch:
            raise InvalidRecordError(f"batch at offset {self.base_offset} is not a control batch", offset=self.base_offset)
        rec = next(self.records(), None)
        if rec is None:
            raise InvalidRecordError(f"control batch at offset {self.base_offset} holds no record", offset=self.base_offset)
        return ControlRecordType.parse(rec.key), rec.value

    def __bytes__(self) -> bytes:
        return self._buf.tobytes()

    def __repr__(self) -> str:
        return (f"RecordBatch(magic=2, offsets={self.base_offset}..{self.last_offset}, size={self.size_in_bytes}, "
                f"compression={self.compression_type.name_lower}, producer_id={self.producer_id}, "
                f"control={self.is_control_batch}, transactional={self.is_transactional})")


class ControlRecordType(enum.IntEnum):
    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6

    @classmethod
    def parse(cls, key: bytes | None) -> ControlRecordType:
        if key is None or len(key) < 4:
            raise InvalidRecordError(f"control record key must be at least 4 bytes, got {key!r}")
        version, kind = struct.unpack_from(">hh", key)
        if version < 0:
            raise InvalidRecordError(f"invalid control record key version {version}")
        try:
            return cls(kind)
        except ValueError:
            return cls.UNKNOWN

    def key_bytes(self) -> bytes:
        return struct.pack(">hh", 0, int(self))


class EndTransactionMarker:
    """The value of a COMMIT/ABORT control record: ``version i16 (0) | coordinatorEpoch i32``."""

    _VALUE = struct.Struct(">hi")

    def __init__(self, control_type: ControlRecordType, coordinator_epoch: int) -> None:
        if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            raise ValueError(f"an end transaction marker is COMMIT or ABORT, not {control_type.name}")
        self.control_type = control_type
        self.coordinator_epoch = coordinator_epoch

    def encode(self) -> bytes:
        return self._VALUE.pack(0, self.coordinator_epoch)

    @classmethod
    def decode(cls, control_type: ControlRecordType, value: bytes | None) -> EndTransactionMarker:
        if value is None or len(value) < cls._VALUE.size:
            raise InvalidRecordError(f"end transaction marker value too short: {value!r}")
        version, epoch = cls._VALUE.unpack_from(value)
        if version < 0:
            raise InvalidRecordError(f"invalid end transaction marker version {version}")
        return cls(control_type, epoch)

    def __repr__(self) -> str:
        return f"EndTransactionMarker({self.control_type.name}, coordinator_epoch={self.coordinator_epoch})"


# In-place patches --------------------------------------------------------------------------------------

def set_base_offset(buf: bytearray | memoryview, position: int, offset: int) -> None:
    _I64.pack_into(buf, position + BASE_OFFSET_OFFSET, offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    _I32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_max_timestamp(buf: bytearray | memoryview, position: int, timestamp_type: TimestampType, max_timestamp: int) -> None:
    """Set the timestamp type bit and the max timestamp, then recompute the CRC (how LogAppendTime is stamped)."""
    view = memoryview(buf)
    (attributes,) = _I16.unpack_from(view, position + ATTRIBUTES_OFFSET)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    else:
        attributes &= ~TIMESTAMP_TYPE_MASK
    _I16.pack_into(view, position + ATTRIBUTES_OFFSET, attributes)
    _I64.pack_into(view, position + MAX_TIMESTAMP_OFFSET, max_timestamp)
    (length,) = _I32.unpack_from(view, position + LENGTH_OFFSET)
    end = position + LOG_OVERHEAD + length
    _U32.pack_into(view, position + CRC_OFFSET, crc32c(view[position + ATTRIBUTES_OFFSET : end]))


# Building ----------------------------------------------------------------------------------------------

def build_batch(
    records: Sequence[SimpleRecord],
    compression: CompressionType = CompressionType.NONE,
    *,
    base_offset: int = 0,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression_level: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """One v2 batch holding ``records`` (relative offsets 0..n-1), built in one buffer with one CRC."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    if log_append_time is not None:
        timestamp_type = TimestampType.LOG_APPEND_TIME
    first_ts = records[0].timestamp
    base_ts = delete_horizon_ms if delete_horizon_ms is not None else first_ts
    max_ts = max(r.timestamp for r in records)
    body = bytearray()
    for i, rec in enumerate(records):
        encode_record(body, i, rec.timestamp - base_ts, rec.key, rec.value, rec.headers)
    if compression is not CompressionType.NONE:
        body = bytearray(compression.compress(body, compression_level))
    attributes = int(compression) & COMPRESSION_CODEC_MASK
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
        max_ts = log_append_time if log_append_time is not None else max_ts
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_FLAG_MASK
    out = bytearray(RECORD_BATCH_OVERHEAD)
    out += body
    BATCH_HEADER.pack_into(
        out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, MAGIC_V2, 0, attributes,
        len(records) - 1, base_ts, max_ts, producer_id, producer_epoch, base_sequence, len(records),
    )
    _U32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)
