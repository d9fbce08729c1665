"""Records cut into batches a topic takes: every v2 batch at most ``max.message.bytes`` (Kafka's limit on one batch),
and the batches grouped into appends of at most ``segment.bytes`` (the most one append may carry).

Records are packed in order by an upper bound of their encoded size, so a batch built without compression is never
above the limit; a compressed batch that came out above it (incompressible data grows a little) is split in two
and built again. A record that is above the limit alone is refused, naming it.
"""

from __future__ import annotations

from collections.abc import Sequence

from local.errors import RecordTooLargeError
from local.records import MemoryRecords, SimpleRecord
from local.records.constants import RECORD_BATCH_OVERHEAD

# length prefix, timestamp delta (a varlong) and offset delta, key and value lengths, header count, attributes
_RECORD_OVERHEAD_BOUND = 5 + 10 + 5 + 5 + 5 + 5 + 1
_HEADER_OVERHEAD_BOUND = 5 + 5


def record_size_bound(record: SimpleRecord) -> int:
    """At least the bytes ``record`` takes inside an uncompressed v2 batch."""
    size = _RECORD_OVERHEAD_BOUND + len(record.key or b"") + len(record.value or b"")
    for key, value in record.headers:
        size += _HEADER_OVERHEAD_BOUND + len(key.encode()) + len(value or b"")
    return size


def build_batches(records: Sequence[SimpleRecord], max_batch_bytes: int, compression: str = "none",
                  what: str = "the request") -> list[MemoryRecords]:
    """``records`` in order, as batches of at most ``max_batch_bytes`` each. RecordTooLargeError naming the first
    record (0-based, within ``what``) whose batch alone is larger."""
    out: list[MemoryRecords] = []
    start, size = 0, RECORD_BATCH_OVERHEAD
    for i, record in enumerate(records):
        bound = record_size_bound(record)
        if i > start and size + bound > max_batch_bytes:
            _build(records, start, i, max_batch_bytes, compression, what, out)
            start, size = i, RECORD_BATCH_OVERHEAD
        size += bound
    if start < len(records):
        _build(records, start, len(records), max_batch_bytes, compression, what, out)
    return out


def _build(records: Sequence[SimpleRecord], start: int, end: int, limit: int, compression: str, what: str,
           out: list[MemoryRecords]) -> None:
    batch = MemoryRecords.build(records[start:end], compression=compression)
    if batch.size_in_bytes <= limit:
        out.append(batch)
    elif end - start == 1:
        raise RecordTooLargeError(
            f"record {start} of {what} takes a batch of {batch.size_in_bytes} bytes, above the topic's "
            f"max.message.bytes {limit}", size=batch.size_in_bytes)
    else:
        middle = (start + end) // 2
        _build(records, start, middle, limit, compression, what, out)
        _build(records, middle, end, limit, compression, what, out)


def group_appends(batches: Sequence[MemoryRecords], max_append_bytes: int) -> list[bytes]:
    """Whole batches joined into appends of at most ``max_append_bytes`` (a batch is never larger: each is within
    ``max.message.bytes``, which a segment always holds), in order."""
    appends: list[bytes] = []
    pending: list[bytes] = []
    size = 0
    for batch in batches:
        data = bytes(batch.buffer)
        if pending and size + len(data) > max_append_bytes:
            appends.append(b"".join(pending))
            pending, size = [], 0
        pending.append(data)
        size += len(data)
    if pending:
        appends.append(b"".join(pending))
    return appends
