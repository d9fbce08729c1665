"""The per-record work of a cleaning, on the uncompressed records of one v2 batch: a pure codec (no I/O).

A cleaning looks at every record twice (Kafka's ``Cleaner``): once to put its key's hash and offset in the offset
map, once to decide whether it survives. Both need the same facts of each record, found in one walk:

``scan_records(body, count) -> (fields, hashes)``: ``fields`` an int64 array of shape ``(count, FIELDS)``, one row a
record (see the ``F_*`` column numbers), ``hashes`` the MD5 digests of the keys, 16 bytes a record (zeros for a null
key, which the map never stores: Kafka's cleaner drops a record without a key). Raises ``InvalidRecordError`` on
records that do not fill their lengths (the batch's CRC passed, so the writer was wrong).

``rebuild_records(body, fields, keep, timestamps, new_base_timestamp) -> (records, max_timestamp)``: the kept
records re-encoded as Kafka's ``MemoryRecordsBuilder`` writes the records of a batch ``MemoryRecords.filterTo``
rebuilt: each record's offset delta kept (the batch keeps its base offset), its timestamp delta taken from the new
base timestamp (the first kept record's timestamp, or the delete horizon), attributes 0, key, value and headers as
they were. ``timestamps`` holds each record's timestamp (the batch's max timestamp for every record of a
LogAppendTime batch, as Kafka's reader gives them).

These Python definitions are the reference; ``local/cleaner/_cleancore.c`` is the same at native speed where the
build had a C compiler, held to the same answers by ``tests/property/test_cleancore.py``.
"""

from __future__ import annotations

import hashlib

import numpy as np

from local.errors import InvalidRecordError
from local.records.varint import decode_varint, encode_varint

# Columns of ``fields``: where the record starts (its length varint) and ends, its offset and timestamp deltas, where
# its key starts and how long it is (-1: null), its value's length (-1: null), where its key length varint starts
# (the part kept as it is when the record is re-encoded).
F_START, F_END, F_OFFSET_DELTA, F_TIMESTAMP_DELTA, F_KEY_START, F_KEY_LEN, F_VALUE_LEN, F_REST = range(8)
FIELDS = 8
HASH_SIZE = 16  # MD5, as Kafka's SkimpyOffsetMap


def scan_records(body: bytes | bytearray | memoryview, count: int) -> tuple[np.ndarray, bytes]:
    """See the module docstring."""
    view = memoryview(body)
    fields = np.empty((count, FIELDS), dtype=np.int64)
    hashes = bytearray(HASH_SIZE * count)
    pos, end = 0, len(view)
    try:
        for i in range(count):
            start = pos
            length, pos = decode_varint(view, pos, 5)
            record_end = pos + length
            if length <= 0 or record_end > end:
                raise InvalidRecordError(f"record {i} declares {length} bytes, {end - pos} left in the batch")
            pos += 1  # attributes
            ts_delta, pos = decode_varint(view, pos, 10)
            offset_delta, pos = decode_varint(view, pos, 5)
            rest = pos
            key_len, pos = decode_varint(view, pos, 5)
            key_start = pos if key_len >= 0 else -1
            if key_len > 0:
                pos += key_len
            value_len, pos = decode_varint(view, pos, 5)
            if value_len > 0:
                pos += value_len
            if pos > record_end:
                raise InvalidRecordError(f"record {i}'s key and value run past its {length} bytes")
            # Kafka reads any negative length as null
            fields[i] = (start, record_end, offset_delta, ts_delta, key_start, max(key_len, -1), max(value_len, -1), rest)
            if key_len >= 0:
                hashes[i * HASH_SIZE : (i + 1) * HASH_SIZE] = hashlib.md5(view[key_start : key_start + key_len]).digest()
            pos = record_end
    except IndexError:
        raise InvalidRecordError(f"a record of the batch runs past its {end} bytes") from None
    return fields, bytes(hashes)


def rebuild_records(
    body: bytes | bytearray | memoryview, fields: np.ndarray, keep: np.ndarray, timestamps: np.ndarray,
    new_base_timestamp: int,
) -> tuple[bytes, int]:
    """See the module docstring. ``keep`` is a bool array (a record kept or not)."""
    view = memoryview(body)
    out = bytearray()
    max_timestamp = -1
    record = bytearray()
    for i in np.flatnonzero(keep).tolist():
        row = fields[i]
        ts = int(timestamps[i])
        max_timestamp = max(max_timestamp, ts)
        record.clear()
        record.append(0)  # attributes (none are used)
        encode_varint(ts - new_base_timestamp, record)
        encode_varint(int(row[F_OFFSET_DELTA]), record)
        record += view[int(row[F_REST]) : int(row[F_END])]
        encode_varint(len(record), out)
        out += record
    return bytes(out), max_timestamp


def md5_keys(keys: list[bytes]) -> bytes:
    """The map's hash of each key, concatenated (for callers holding keys, not batches)."""
    return b"".join(hashlib.md5(k).digest() for k in keys)
