"""The per-record work of a cleaning, on the uncompressed records of one v2 batch: a pure codec (no I/O).

A cleaning looks at every record twice (Kafka's ``Cleaner``): once to put its key's hash and offset in the offset
map, once to decide whether it survives. Both need the same facts of each record, found in one walk:

``scan_records(body, count, hash_key) -> (fields, hashes)``: ``fields`` an int64 array of shape ``(count, FIELDS)``,
one row a record (see the ``F_*`` column numbers), ``hashes`` the digests of the keys (:func:`key_digest` under
``hash_key``), 16 bytes a record (zeros for a null key, which the map never stores: Kafka's cleaner drops a record
without a key). Raises ``InvalidRecordError`` on
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

import numpy as np

from local.errors import InvalidRecordError
from local.records.varint import decode_varint, encode_varint

# Columns of ``fields``: where the record starts (its length varint) and ends, its offset and timestamp deltas, where
# its key starts and how long it is (-1: null), its value's length (-1: null), where its key length varint starts
# (the part kept as it is when the record is re-encoded).
F_START, F_END, F_OFFSET_DELTA, F_TIMESTAMP_DELTA, F_KEY_START, F_KEY_LEN, F_VALUE_LEN, F_REST = range(8)
FIELDS = 8
HASH_SIZE = 16  # as Kafka's SkimpyOffsetMap (its MD5's size; see key_digest)
HASH_KEY_SIZE = 16

_M64 = (1 << 64) - 1


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _M64


def key_digest(hash_key: bytes, data: bytes | bytearray | memoryview) -> bytes:
    """The offset map's 16-byte digest of a record key: SipHash-2-4 with its 128-bit output under the 16-byte
    ``hash_key`` (Aumasson and Bernstein's definition; its reference vectors are in tests/property/test_cleancore.py).

    Kafka's ``SkimpyOffsetMap`` takes the key's MD5. Nothing keeps these digests past one cleaning (the map lives in
    memory), so any 128-bit hash does as long as two keys rarely share a digest: the map cannot tell such keys
    apart and keeps only the later one's records. SipHash is a keyed pseudo-random function: with a key drawn at
    random for each map (:class:`local.cleaner.offset_map.SkimpyOffsetMap`), nobody who produces records can craft two
    keys of one digest (MD5 collisions are computed in seconds), and it is several times cheaper than MD5 on the
    short keys records carry. The C loops compute the same (``local/cleaner/_cleancore.c``)."""
    k0 = int.from_bytes(hash_key[:8], "little")
    k1 = int.from_bytes(hash_key[8:16], "little")
    v0, v1 = k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D ^ 0xEE
    v2, v3 = k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573
    data = bytes(data)
    n = len(data)
    full = n - n % 8
    words = [int.from_bytes(data[i : i + 8], "little") for i in range(0, full, 8)]
    words.append(((n & 0xFF) << 56) | int.from_bytes(data[full:], "little"))
    out = []
    for step, m in enumerate([*words, None, None]):
        if m is not None:
            v3 ^= m
            rounds = 2
        else:  # the two finalizations of the 128-bit output
            if step == len(words):
                v2 ^= 0xEE
            else:
                v1 ^= 0xDD
            rounds = 4
        for _ in range(rounds):
            v0 = (v0 + v1) & _M64
            v1 = _rotl(v1, 13) ^ v0
            v0 = _rotl(v0, 32)
            v2 = (v2 + v3) & _M64
            v3 = _rotl(v3, 16) ^ v2
            v0 = (v0 + v3) & _M64
            v3 = _rotl(v3, 21) ^ v0
            v2 = (v2 + v1) & _M64
            v1 = _rotl(v1, 17) ^ v2
            v2 = _rotl(v2, 32)
        if m is not None:
            v0 ^= m
        else:
            out.append((v0 ^ v1 ^ v2 ^ v3).to_bytes(8, "little"))
    return b"".join(out)


def scan_records(body: bytes | bytearray | memoryview, count: int, hash_key: bytes) -> tuple[np.ndarray, bytes]:
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
                hashes[i * HASH_SIZE : (i + 1) * HASH_SIZE] = key_digest(hash_key, view[key_start : key_start + key_len])
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
