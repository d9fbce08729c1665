"""MemoryRecords: a buffer of zero or more batches exactly as a client sends them (or as a read returns them).

Reads are verified: :meth:`MemoryRecords.batches` (and so :meth:`MemoryRecords.records`) checks each batch's CRC
before yielding it, as Kafka's consumer does with ``check.crcs=true``, and raises :class:`CorruptRecordError`
naming where the bytes came from (``origin``: a file or a remote segment), the position and the offset. A caller
that only walks headers, or has checked the CRCs already (the log's append path), passes ``verify=False``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

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
    ControlRecordType,
    EndTransactionMarker,
    RecordBatch,
    TimestampType,
    build_batch,
)
from local.records.compression import CompressionType
from local.records.legacy import LegacyRecordBatch
from local.records.record import Record, SimpleRecord
from local.records.walk import walk_batches

AnyBatch = RecordBatch | LegacyRecordBatch
_I32 = struct.Struct(">i")


def corrupt_batch_error(
    batch: AnyBatch, origin: str | None, position: int, context: dict[str, Any] | None = None
) -> CorruptRecordError:
    """The error for a batch whose CRC does not match: names ``origin`` (a file or a remote segment), the
    position of the batch there and its offset."""
    computed = batch.compute_checksum()
    if isinstance(batch, RecordBatch):
        kind, offset = "record batch", batch.base_offset
    else:
        kind, offset = "legacy message", batch.offset
    where = f" of {origin}" if origin else ""
    return CorruptRecordError(
        f"{kind} at offset {offset} is corrupt: position {position}{where}, stored crc {batch.crc:#010x}, "
        f"computed {computed:#010x} over {batch.size_in_bytes} bytes",
        **(context or {}), position=position, offset=offset, crc=batch.crc, computed=computed,
    )


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


def check_offset_order(
    batch: AnyBatch, previous_last: int, origin: str | None, position: int, context: dict[str, Any] | None = None
) -> int:
    """The last offset of ``batch``, after checking that its offsets come after ``previous_last`` (the last offset
    of the batch before it in the same file or answer) and do not run backwards. Base offsets are outside the
    CRC: a damaged one shows as batches that overlap, which no log (compacted or not) ever holds."""
    if isinstance(batch, RecordBatch):
        first, last = batch.base_offset, batch.base_offset + batch.last_offset_delta
    else:
        first = last = batch.offset  # a legacy wrapper's offset is its last inner offset
    if first <= previous_last or last < first:
        where = f" of {origin}" if origin else ""
        raise CorruptRecordError(
            f"batch at position {position}{where} holds offsets {first}..{last}, not after the offset {previous_last} "
            "of the batch before it: its base offset is damaged",
            **(context or {}), position=position, offset=first)
    return last


class MemoryRecords:
    """Batches in memory. ``bytes(mr)`` returns them; :meth:`batches` yields views (no copy), CRC-checked.

    ``origin`` says where the bytes came from (e.g. ``"remote segment <id>"``) and ``position`` where they start
    there, so that a corrupt batch's error can name them; ``context`` adds attributes to that error (e.g.
    ``segment_id``). Records with an ``origin`` were read from a log: their batches' offsets are also checked to
    increase (a client's batches, not yet given offsets, may all start at 0).
    """

    __slots__ = ("_buf", "_context", "origin", "position")

    def __init__(
        self, buffer: bytes | bytearray | memoryview = b"", *, origin: str | None = None, position: int = 0,
        context: dict[str, Any] | None = None,
    ) -> None:
        self._buf = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
        self.origin = origin
        self.position = position
        self._context = context

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
        where = f" from {self.origin} at position {self.position}" if self.origin else ""
        return f"MemoryRecords({len(self._buf)} bytes{where})"

    def _where(self) -> str:
        return f" of {self.origin}" if self.origin else ""

    def batches(self, strict: bool = False, verify: bool = True) -> Iterator[AnyBatch]:
        """Each batch in order, its CRC checked first unless ``verify=False`` (CorruptRecordError naming the
        origin, position and offset), and, for batches read from a log (``origin`` set), its offsets after the
        previous batch's. A trailing partial batch ends iteration quietly (a read clipped at
        ``max_bytes`` ends so), or raises when ``strict``."""
        view = self._buf
        end = len(view)
        base = self.position
        previous_last = -(2**63)
        done = 0
        for pos, size, _, _ in walk_batches(view, origin=self.origin, base_position=base, context=self._context):
            batch = batch_from_buffer(view[pos : pos + size])
            if verify or strict:
                if not batch.is_valid():
                    raise corrupt_batch_error(batch, self.origin, base + pos, self._context)
                if self.origin is not None:  # read from a log (a client's batches may all start at offset 0)
                    previous_last = check_offset_order(batch, previous_last, self.origin, base + pos, self._context)
            yield batch
            done = pos + size
        if strict and done < end:
            raise self._truncated(done)

    def _truncated(self, pos: int) -> CorruptRecordError:
        view, position = self._buf, self.position + pos
        if len(view) - pos < LOG_OVERHEAD:
            what = f"truncated batch header at position {position}{self._where()}"
        else:
            what = (f"truncated batch at position {position}{self._where()}: declares "
                    f"{_I32.unpack_from(view, pos + 8)[0] + LOG_OVERHEAD} bytes, {len(view) - pos} present")
        return CorruptRecordError(what, **(self._context or {}), position=position)

    def next_offset(self) -> int | None:
        """The offset after the last whole batch (what a sequential reader fetches next); None when there is no
        whole batch. Walks the batch lengths only: no batch is parsed or checked."""
        last = None
        for pos, size, _, _ in walk_batches(self._buf):
            last = (pos, size)
        if last is None:
            return None
        return batch_from_buffer(self._buf[last[0] : last[0] + last[1]]).next_offset

    def validate(self) -> None:
        """Raise CorruptRecordError naming the position of the first bad or truncated batch."""
        for _ in self.batches(strict=True):
            pass

    @property
    def valid_bytes(self) -> int:
        total = 0
        for b in self.batches(verify=False):
            if not b.is_valid():
                break
            total += b.size_in_bytes
        return total

    def records(self, verify: bool = True) -> Iterator[Record]:
        """Every record of every batch (CRC-checked unless ``verify=False``)."""
        for batch in self.batches(verify=verify):
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
