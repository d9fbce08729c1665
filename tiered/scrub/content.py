"""The contents of a segment's records as one digest, for ``tiered verify`` to compare a columnar copy with the log.

Both sides fold the same fields of each data record, in offset order, into a BLAKE2b digest: the offset, the
timestamp (milliseconds; a LogAppendTime batch's max timestamp, as consumers see it), the timestamp type, the batch's
leader epoch, the key, the value and the headers. The log's side decodes its batches with the engine's own decoder
(:mod:`local.records`), not the Spark source's (:mod:`tiered.spark.arrow_records`) that wrote the copy: a decoding
bug in either shows as a difference. The copy's side reads the same fields from the Parquet columns.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence
from typing import Any

_ROW = struct.Struct(">qqbi")  # offset, timestamp (ms), timestamp type, leader epoch
_LEN = struct.Struct(">i")
_NULL = _LEN.pack(-1)


def new_digest() -> Any:
    return hashlib.blake2b(digest_size=16)


def _blob(data: bytes | None) -> bytes:
    return _NULL if data is None else _LEN.pack(len(data)) + data


def _row(offset: int, timestamp: int, timestamp_type: int, epoch: int | None, key: bytes | None, value: bytes | None,
         headers: Iterable[tuple[str, bytes | None]]) -> bytes:
    # (a batch's leader epoch -1 is a null leaderEpoch in the copy, as the source gives it)
    parts = [_ROW.pack(offset, timestamp, timestamp_type, -1 if epoch is None or epoch < 0 else epoch), _blob(key),
             _blob(value)]
    pairs = list(headers)
    parts.append(_LEN.pack(len(pairs)))
    for name, data in pairs:
        parts.append(_blob(name.encode()))
        parts.append(_blob(data))
    return b"".join(parts)


def fold_records(digest: Any, records: Iterable[Any], timestamp_type: int, epoch: int) -> None:
    """Fold one batch's decoded records (:class:`local.records.Record`) into ``digest``."""
    digest.update(b"".join(_row(r.offset, r.timestamp, timestamp_type, epoch, r.key, r.value, r.headers)
                           for r in records))


def rows_digest(columns: dict[str, Sequence[Any]], start: int, end: int) -> bytes:
    """The digest of rows ``[start, end)`` of a columnar file's columns (``offset``, ``timestamp`` in
    microseconds, ``timestampType``, ``leaderEpoch``, ``key``, ``value``, ``headers`` as Python lists)."""
    digest = new_digest()
    offsets, stamps, types, epochs = (columns[c] for c in ("offset", "timestamp", "timestampType", "leaderEpoch"))
    keys, values, headers = columns["key"], columns["value"], columns["headers"]
    digest.update(b"".join(
        _row(offsets[i], -1 if stamps[i] is None else stamps[i] // 1000, types[i], epochs[i], keys[i], values[i],
             ((h["key"], h["value"]) for h in headers[i] or ()))
        for i in range(start, end)))
    return digest.digest()
