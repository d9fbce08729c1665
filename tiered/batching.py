"""Records cut into batches a topic takes: every v2 batch at most ``max.message.bytes`` (Kafka's limit on one batch),
and the batches grouped into appends of at most ``segment.bytes`` (the most one append may carry).

Records are packed in order by their exact encoded size (:class:`PendingBatch`), so a batch built without
compression is never above the limit; a compressed batch that came out above it (incompressible data grows a little)
is split in two and built again (:func:`build_within`). A record that is above the limit alone is refused, naming
it. The HTTP endpoint and the Spark writer (tiered.spark.writer) both cut batches so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from local.errors import RecordTooLargeError
from local.records import CompressionType, MemoryRecords, SimpleRecord
from local.records.constants import RECORD_BATCH_OVERHEAD
from local.records.record import record_size


class PendingBatch:
    """Records gathered for one v2 batch, with the exact size the batch takes uncompressed (its header included):
    Kafka's ``DefaultRecord.sizeInBytes`` of each record at its offset and timestamp deltas."""

    __slots__ = ("records", "size")

    def __init__(self) -> None:
        self.records: list[SimpleRecord] = []
        self.size = 0

    def size_with(self, record: SimpleRecord) -> int:
        """The batch's size with ``record`` added."""
        if not self.records:
            return RECORD_BATCH_OVERHEAD + record_size(0, 0, record.key, record.value, record.headers)
        return self.size + record_size(len(self.records), record.timestamp - self.records[0].timestamp, record.key,
                                       record.value, record.headers)

    def add(self, record: SimpleRecord, size: int) -> None:
        """Add ``record``; ``size`` is :meth:`size_with` of it."""
        self.records.append(record)
        self.size = size

    def take(self) -> list[SimpleRecord]:
        """The records gathered, leaving the batch empty."""
        records, self.records, self.size = self.records, [], 0
        return records


def build_within(records: Sequence[SimpleRecord], limit: int, compression: str | CompressionType,
                 too_large: Callable[[int, int], Exception]) -> list[MemoryRecords]:
    """``records`` as one batch, or as more when compression made it larger than ``limit`` (incompressible data grows
    a little): halves built again until each fits. ``too_large(index, size)`` makes the error for a record (its index
    in ``records``) whose batch alone is above ``limit``."""
    out: list[MemoryRecords] = []

    def build(start: int, end: int) -> None:
        batch = MemoryRecords.build(records[start:end], compression=compression)
        if batch.size_in_bytes <= limit:
            out.append(batch)
        elif end - start == 1:
            raise too_large(start, batch.size_in_bytes)
        else:
            middle = (start + end) // 2
            build(start, middle)
            build(middle, end)

    build(0, len(records))
    return out


def build_batches(records: Sequence[SimpleRecord], max_batch_bytes: int, compression: str = "none",
                  what: str = "the request", limit_name: str = "max.message.bytes",
                  first_index: int = 0) -> list[MemoryRecords]:
    """``records`` in order, as batches of at most ``max_batch_bytes`` each, each closed before the record that would
    take it above. RecordTooLargeError naming the first record (its index within ``what``, counted from
    ``first_index``) whose batch alone is larger, and the limit (``limit_name``: the topic config it is)."""
    out: list[MemoryRecords] = []
    pending = PendingBatch()
    first = first_index  # the index of the pending batch's first record

    def close() -> None:
        nonlocal first
        offset = first
        group = pending.take()
        out.extend(build_within(group, max_batch_bytes, compression, lambda i, size: RecordTooLargeError(
            f"record {offset + i} of {what} takes a batch of {size} bytes, above the topic's {limit_name} "
            f"{max_batch_bytes}", size=size)))
        first += len(group)

    for record in records:
        size = pending.size_with(record)
        if pending.records and size > max_batch_bytes:
            close()
            size = pending.size_with(record)
        pending.add(record, size)
    if pending.records:
        close()
    return out


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
