"""Which batches and records of a segment a cleaning keeps, and the bytes it writes for them: Kafka's
``MemoryRecords.filterTo`` with the ``RecordFilter`` of its ``Cleaner.cleanInto``. A pure function of one batch (and
the cleaning's state), no I/O.

Per batch (its header read with one unpack, its CRC checked: a cleaning never launders a damaged batch into a valid
one, it stops with ``CorruptRecordError``):

1. the transaction state says whether the batch may be discarded (an aborted transaction's data; a marker whose
   transaction left nothing, once its delete horizon passed), see :mod:`local.cleaner.transactions`;
2. the batch is kept even when emptied ("retain empty", a 61-byte header with no records) when it is an active
   producer's last batch (its sequence and epoch must survive) or the last batch of the cleaning round (the log's
   last offset must survive); else an emptied batch goes;
3. a record is kept when it lies past the offset map's latest offset, or holds the latest offset of its key and
   either a value or a tombstone whose delete horizon has not passed (a batch's delete horizon is set by the
   cleaning that first keeps its tombstones, ``delete.retention.ms`` after it); a record without a key goes;
4. a batch keeping every record and needing no delete horizon is written as it is (its bytes copied, nothing
   decoded but its records' keys); otherwise the kept records are re-encoded into a batch with the same base
   offset, last offset delta, producer fields, codec and timestamp type (``MemoryRecordsBuilder``, see
   :func:`local.cleaner.records.rebuild_records`).

Batches of magic 0 and 1 (before Kafka 0.11) are kept as they are: their keys are not deduplicated.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from local.cleaner.offset_map import SkimpyOffsetMap
from local.cleaner.records import F_KEY_LEN, F_OFFSET_DELTA, F_TIMESTAMP_DELTA, F_VALUE_LEN, FIELDS
from local.cleaner.records import rebuild_records as py_rebuild_records
from local.cleaner.records import scan_records as py_scan_records
from local.cleaner.transactions import CleanedTransactionMetadata
from local.crc import crc32c
from local.errors import CorruptRecordError, InvalidRecordError
from local.extensions import fresh_extension
from local.records.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_FLAG_MASK,
    MAGIC_V2,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    ControlRecordType,
)
from local.records.compression import CompressionType
from local.records.constants import LOG_OVERHEAD, MAGIC_OFFSET

# the record walk and re-encoding in C (local/cleaner/_cleancore.c), where built (and not from an older source)
_cleancore: Any = fresh_extension("local.cleaner._cleancore")


def c_scan_records(body: bytes | bytearray | memoryview, count: int, hash_key: bytes) -> tuple[np.ndarray, bytes]:
    """:func:`local.cleaner.records.scan_records` in C."""
    try:
        raw, hashes = _cleancore.scan_records(body, count, hash_key)
    except ValueError as exc:
        raise InvalidRecordError(str(exc)) from None
    return np.frombuffer(raw, dtype=np.int64).reshape(count, FIELDS), hashes


def c_rebuild_records(body: bytes | bytearray | memoryview, fields: np.ndarray, keep: np.ndarray,
                      timestamps: np.ndarray, new_base_timestamp: int) -> tuple[bytes, int]:
    """:func:`local.cleaner.records.rebuild_records` in C."""
    out, max_ts = _cleancore.rebuild_records(body, np.ascontiguousarray(fields, np.int64),
                                             np.ascontiguousarray(keep, np.bool_), np.ascontiguousarray(timestamps, np.int64),
                                             new_base_timestamp)
    return out, int(max_ts)


scan_records = py_scan_records if _cleancore is None else c_scan_records
rebuild_records = py_rebuild_records if _cleancore is None else c_rebuild_records

_U32 = struct.Struct(">I")
_NO_HASH_KEY = bytes(16)  # a control record's key is read, not looked up
_CONTROL_KEY = struct.Struct(">hh")
_unpack_header = BATCH_HEADER.unpack_from


@dataclass(frozen=True, slots=True)
class LastRecord:
    """An active producer's last data offset (None when its last entry is a marker) and epoch (Kafka's
    ``LastRecord``): the batch holding it survives every cleaning."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass(slots=True)
class FilterStats:
    messages_read: int = 0
    bytes_read: int = 0
    messages_retained: int = 0
    bytes_retained: int = 0
    invalid_messages: int = 0


class BatchFilter:
    """One cleaning's decisions for the batches of the segments it rewrites (Kafka's ``RecordFilter``)."""

    def __init__(
        self, offset_map: SkimpyOffsetMap, transactions: CleanedTransactionMetadata,
        last_records: dict[int, LastRecord], upper_bound_offset: int, now: int, delete_retention_ms: int,
        stats: FilterStats, source: str,
    ) -> None:
        self.map = offset_map
        self.transactions = transactions
        self.last_records = last_records
        self.upper_bound_offset = upper_bound_offset  # the next offset of the cleaning round's last batch
        self.now = now
        self.delete_retention_ms = delete_retention_ms
        self.stats = stats
        self.source = source  # the segment file, for errors

    def filter(self, view: memoryview, at: int, size: int, position: int) -> tuple[bytes | memoryview, int, int] | None:
        """The batch ``view[at:at+size]`` (at ``position`` of its file): None when it goes, else the bytes to write
        and their last offset and max timestamp."""
        stats = self.stats
        stats.bytes_read += size
        if view[at + MAGIC_OFFSET] != MAGIC_V2:
            stats.messages_read += 1
            stats.messages_retained += 1
            stats.bytes_retained += size
            return view[at : at + size], -1, NO_TIMESTAMP  # a legacy entry: kept as it is (the caller indexes it)
        (base, _, epoch, _, crc, attributes, last_delta, base_ts, max_ts, producer_id, producer_epoch, base_seq,
         count) = _unpack_header(view, at)
        if crc32c(view[at + ATTRIBUTES_OFFSET : at + size]) != crc:
            raise CorruptRecordError(
                f"the cleaner found a corrupt batch at position {position} of {self.source} (offset {base}): its CRC "
                "does not match", offset=base, position=position, path=self.source)
        last_offset = base + last_delta
        stats.messages_read += count
        is_control = bool(attributes & CONTROL_FLAG_MASK)
        horizon = base_ts if attributes & DELETE_HORIZON_FLAG_MASK else None
        codec = CompressionType.from_id(attributes & COMPRESSION_CODEC_MASK)
        body = view[at + RECORD_BATCH_OVERHEAD : at + size]
        records = body if codec is CompressionType.NONE else codec.decompress(body)
        if is_control:
            ctype = control_type(records, count)
            discard = self.transactions.on_control_batch_read(_Header(last_offset, producer_id, attributes), ctype)
            discard_records = discard and horizon is not None and horizon <= self.now
        else:
            discard = self.transactions.on_batch_read(_Header(last_offset, producer_id, attributes))
            discard_records = discard
        last = self.last_records.get(producer_id) if producer_id >= 0 else None
        if last is not None and (last_offset == last.last_data_offset if last.last_data_offset is not None
                                 else is_control and producer_epoch == last.producer_epoch):
            retain_empty = True  # the producer's last batch: its sequence and epoch survive
        elif last_offset + 1 == self.upper_bound_offset:
            retain_empty = True  # the round's last batch: the log's last offset survives
        elif discard_records:
            return None  # Kafka's BatchRetention.DELETE
        else:
            retain_empty = False
        if discard_records:
            keep = np.zeros(count, dtype=bool)
            fields = None
        elif is_control:
            keep = np.ones(count, dtype=bool)
            fields = None
        else:
            fields, keep = self._keep(records, count, base, last_offset, horizon)
        kept = int(keep.sum())
        if kept == 0:
            if not retain_empty:
                return None
            out = _empty_batch(base, last_delta, epoch, attributes, max_ts, producer_id, producer_epoch, base_seq)
            stats.bytes_retained += len(out)
            return out, last_offset, max_ts
        tombstones = fields is not None and bool((fields[keep, F_VALUE_LEN] < 0).any())
        set_horizon = (tombstones or (discard and is_control)) and horizon is None
        stats.messages_retained += kept
        if kept == count and not set_horizon:
            stats.bytes_retained += size
            return view[at : at + size], last_offset, max_ts
        new_horizon = self.now + self.delete_retention_ms if set_horizon else horizon
        out, new_max_ts = self._rebuild(records, count, fields, keep, base, last_delta, epoch, attributes, base_ts,
                                        max_ts, producer_id, producer_epoch, base_seq, kept, codec, new_horizon)
        stats.bytes_retained += len(out)
        return out, last_offset, new_max_ts

    def _keep(self, records: bytes | memoryview, count: int, base: int, last_offset: int,
              horizon: int | None) -> tuple[np.ndarray, np.ndarray]:
        fields, hashes = scan_records(records, count, self.map.hash_key)
        offsets = base + fields[:, F_OFFSET_DELTA]
        latest = self.map.latest_offset
        if base > latest:  # every record past what the map saw: all kept (Kafka: pastLatestOffset)
            return fields, np.ones(count, dtype=bool)
        has_key = fields[:, F_KEY_LEN] >= 0
        past = offsets > latest
        self.stats.invalid_messages += int((~has_key & ~past).sum())  # Kafka counts a keyless record it looks at
        found = self.map.get_many(hashes, count)
        retain_deletes = horizon is None or self.now < horizon
        keep = past | (has_key & (offsets >= found) & ((fields[:, F_VALUE_LEN] >= 0) | retain_deletes))
        return fields, keep

    def _rebuild(self, records: bytes | memoryview, count: int, fields: np.ndarray | None, keep: np.ndarray,
                 base: int, last_delta: int, epoch: int, attributes: int, base_ts: int, max_ts: int, producer_id: int,
                 producer_epoch: int, base_seq: int, kept: int, codec: CompressionType,
                 horizon: int | None) -> tuple[bytes, int]:
        if fields is None:
            fields = scan_records(records, count, self.map.hash_key)[0]
        if attributes & TIMESTAMP_TYPE_MASK:  # LogAppendTime: every record's timestamp is the batch's
            timestamps = np.full(count, max_ts, dtype=np.int64)
        else:
            timestamps = base_ts + fields[:, F_TIMESTAMP_DELTA]
        first_kept = int(np.argmax(keep))
        new_base_ts = horizon if horizon is not None else int(timestamps[first_kept])
        body, new_max_ts = rebuild_records(records, fields, keep, timestamps, new_base_ts)
        if attributes & TIMESTAMP_TYPE_MASK:
            new_max_ts = max_ts
        if codec is not CompressionType.NONE:
            body = codec.compress(body)
        new_attributes = attributes & ~DELETE_HORIZON_FLAG_MASK | (DELETE_HORIZON_FLAG_MASK if horizon is not None else 0)
        out = bytearray(RECORD_BATCH_OVERHEAD + len(body))
        BATCH_HEADER.pack_into(out, 0, base, len(out) - LOG_OVERHEAD, epoch, MAGIC_V2, 0, new_attributes, last_delta,
                               new_base_ts, new_max_ts, producer_id, producer_epoch, base_seq, kept)
        out[RECORD_BATCH_OVERHEAD:] = body
        _U32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
        return bytes(out), new_max_ts


class _Header:
    """What the transaction state reads of a batch."""

    __slots__ = ("is_transactional", "last_offset", "producer_id")

    def __init__(self, last_offset: int, producer_id: int, attributes: int) -> None:
        self.last_offset = last_offset
        self.producer_id = producer_id
        self.is_transactional = bool(attributes & TRANSACTIONAL_FLAG_MASK)


def control_type(records: bytes | memoryview, count: int) -> ControlRecordType | None:
    """The type of a control batch's record (None when a cleaning emptied it)."""
    if count == 0:
        return None
    fields, _ = py_scan_records(records, 1, _NO_HASH_KEY)
    key_start, key_len = int(fields[0][4]), int(fields[0][5])
    if key_len < _CONTROL_KEY.size:
        return ControlRecordType.UNKNOWN
    return ControlRecordType.parse(bytes(memoryview(records)[key_start : key_start + key_len]))


def _empty_batch(base: int, last_delta: int, epoch: int, attributes: int, max_ts: int, producer_id: int,
                 producer_epoch: int, base_seq: int) -> bytes:
    """Kafka's ``DefaultRecordBatch.writeEmptyHeader``: no records, no codec, no base timestamp, no delete horizon."""
    out = bytearray(RECORD_BATCH_OVERHEAD)
    kept_attributes = attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK)
    BATCH_HEADER.pack_into(out, 0, base, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD, epoch, MAGIC_V2, 0, kept_attributes,
                           last_delta, NO_TIMESTAMP, max_ts, producer_id, producer_epoch, base_seq, 0)
    _U32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)
