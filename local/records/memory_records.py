"""MemoryRecords: a buffer of zero or more batches exactly as a client sends them."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence

from local.errors import CorruptRecordError
from local.records.batch import (
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    RECORD_BATCH_OVERHEAD,
    ControlRecordType,
    EndTransactionMarker,
    RecordBatch,
    TimestampType,
    build_batch,
)
from local.records.compression import CompressionType
from local.records.legacy import MIN_V0_SIZE, LegacyRecordBatch
from local.records.record import Record, SimpleRecord

AnyBatch = RecordBatch | LegacyRecordBatch
_I32 = struct.Struct(">i")


def batch_from_buffer(buffer: bytes | bytearray | memoryview) -> AnyBatch:
    """The batch in ``buffer`` (exactly one), v2 or legacy by its magic byte."""
    view = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
    if len(view) < HEADER_SIZE_UP_TO_MAGIC:
        raise CorruptRecordError(f"batch of {len(view)} bytes is too short to hold a magic byte", size=len(view))
    magic = view[MAGIC_OFFSET]
    if magic == MAGIC_V2:
        return RecordBatch(view)
    if magic in (0, 1):
        return LegacyRecordBatch(view)
    raise CorruptRecordError(f"unknown record batch magic {magic}", magic=magic)


class MemoryRecords:
    """Batches in memory. ``bytes(mr)`` returns them; :meth:`batches` yields views (no copy)."""

    __slots__ = ("_buf",)

    def __init__(self, buffer: bytes | bytearray | memoryview = b"") -> None:
        self._buf = buffer if isinstance(buffer, memoryview) else memoryview(buffer)

    @property
    def buffer(self) -> memoryview:
        return self._buf

    @property
    def size_in_bytes(self) -> int:
        return len(self._buf)

    def __len__(self) -> int:
        return len(self._buf)

    def __bytes__(self) -> bytes:
        return self._buf.tobytes()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MemoryRecords) and bytes(self) == bytes(other)

    def __repr__(self) -> str:
        return f"MemoryRecords({len(self._buf)} bytes)"

    def batches(self, strict: bool = False) -> Iterator[AnyBatch]:
        """Each batch in order. A trailing partial batch ends iteration quietly, or raises when ``strict``."""
        view = self._buf
        pos = 0
        end = len(view)
        while pos < end:
            if end - pos < LOG_OVERHEAD:
                if strict:
                    raise CorruptRecordError(f"truncated batch header at position {pos}", position=pos)
                return
            (length,) = _I32.unpack_from(view, pos + 8)
            size = length + LOG_OVERHEAD
            if end - pos >= HEADER_SIZE_UP_TO_MAGIC:
                magic = view[pos + MAGIC_OFFSET]
                minimum = RECORD_BATCH_OVERHEAD if magic == MAGIC_V2 else LOG_OVERHEAD + MIN_V0_SIZE
            else:
                minimum = LOG_OVERHEAD + MIN_V0_SIZE
            if size < minimum:
                raise CorruptRecordError(
                    f"batch at position {pos} declares size {size}, below the minimum {minimum}", position=pos, size=size)
            if pos + size > end:
                if strict:
                    raise CorruptRecordError(
                        f"truncated batch at position {pos}: declares {size} bytes, {end - pos} present", position=pos)
                return
            batch = batch_from_buffer(view[pos : pos + size])
            if strict:
                try:
                    batch.ensure_valid()
                except CorruptRecordError as exc:
                    raise CorruptRecordError(f"{exc} at position {pos}", position=pos) from exc
            yield batch
            pos += size

    def next_offset(self) -> int | None:
        """The offset after the last whole batch (what a sequential reader fetches next); None when there is no
        whole batch. Walks the batch lengths only: no batch is parsed or checked."""
        view = self._buf
        end = len(view)
        pos, last = 0, -1
        unpack_length = _I32.unpack_from
        while end - pos >= LOG_OVERHEAD:
            size = unpack_length(view, pos + 8)[0] + LOG_OVERHEAD
            if size <= LOG_OVERHEAD or pos + size > end:
                break
            last = pos
            pos += size
        if last < 0:
            return None
        return batch_from_buffer(view[last:pos]).next_offset

    def validate(self) -> None:
        """Raise CorruptRecordError naming the position of the first bad or truncated batch."""
        for _ in self.batches(strict=True):
            pass

    @property
    def valid_bytes(self) -> int:
        total = 0
        for b in self.batches():
            if not b.is_valid():
                break
            total += b.size_in_bytes
        return total

    def records(self) -> Iterator[Record]:
        for batch in self.batches():
            yield from batch.records()

    # builders -----------------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        records: Sequence[SimpleRecord],
        compression: CompressionType | str | None = CompressionType.NONE,
        *,
        base_offset: int = 0,
        magic: int = MAGIC_V2,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        log_append_time: int | None = None,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        compression_level: int | None = None,
        delete_horizon_ms: int | None = None,
    ) -> MemoryRecords:
        """One v2 batch of ``records`` (Kafka's ``MemoryRecords.withRecords``)."""
        if magic != MAGIC_V2:
            raise ValueError(f"only magic v2 batches are built, got magic {magic}")
        return cls(build_batch(
            list(records), CompressionType.from_name(compression), base_offset=base_offset,
            timestamp_type=timestamp_type, log_append_time=log_append_time, producer_id=producer_id,
            producer_epoch=producer_epoch, base_sequence=base_sequence, is_transactional=is_transactional,
            partition_leader_epoch=partition_leader_epoch, compression_level=compression_level,
            delete_horizon_ms=delete_horizon_ms,
        ))

    with_records = build

    @classmethod
    def end_transaction_marker(
        cls, producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int = 0,
        base_offset: int = 0, partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH, timestamp: int | None = None,
    ) -> MemoryRecords:
        """A COMMIT or ABORT control batch (78 bytes)."""
        import time

        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        ts = int(time.time() * 1000) if timestamp is None else timestamp
        rec = SimpleRecord(ts, kind.key_bytes(), EndTransactionMarker(kind, coordinator_epoch).encode())
        return cls(build_batch(
            [rec], base_offset=base_offset, producer_id=producer_id, producer_epoch=producer_epoch,
            is_transactional=True, is_control=True, partition_leader_epoch=partition_leader_epoch,
        ))

    @classmethod
    def from_batches(cls, batches: Iterable[bytes | bytearray | memoryview | AnyBatch]) -> MemoryRecords:
        return cls(b"".join(bytes(b) for b in batches))

    @classmethod
    def empty(cls) -> MemoryRecords:
        return cls(b"")


MemoryRecords.EMPTY = MemoryRecords(b"")  # type: ignore[attr-defined]
