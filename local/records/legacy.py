"""Legacy message sets, magic v0 and v1 (read only: iterate and CRC-check, so old logs can be dumped and recovered).

Entry: ``offset i64 | size i32 | crc u32 | magic i8 | attributes i8 | [timestamp i64 if v1] | key (i32 len, -1 null)
| value (i32 len, -1 null)``; the CRC is CRC-32 (zlib) over ``magic..end``. A compressed entry (attributes bits
0-2) is a wrapper whose value is a compressed inner message set; its offset is the last inner offset.

Rules of a wrapper (Kafka's ``AbstractLegacyRecordBatch``), enforced when its records are decoded: it nests one
level only (an inner message is never itself compressed), it holds at least one inner message, its inner set is
whole messages with valid CRCs, and it decompresses within ``MAX_DECOMPRESSED_BATCH_BYTES``. Any malformed entry
raises ``CorruptRecordError`` or ``InvalidRecordError``, never a ``struct.error`` or a ``RecursionError``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

from local.errors import CorruptRecordError, InvalidRecordError
from local.records.batch import LOG_OVERHEAD, NO_TIMESTAMP, TimestampType
from local.records.compression import MAX_DECOMPRESSED_BATCH_BYTES, CompressionType
from local.records.constants import RECORD_OVERHEAD_V0, RECORD_OVERHEAD_V1
from local.records.record import Record
from local.records.walk import walk_batches

_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
MIN_V0_SIZE = RECORD_OVERHEAD_V0  # crc + magic + attributes + key len + value len
MIN_V1_SIZE = RECORD_OVERHEAD_V1


class LegacyRecordBatch:
    """A v0/v1 message-set entry viewed as a batch (same read-only names as RecordBatch where they apply)."""

    partition_leader_epoch = -1
    producer_id = -1
    producer_epoch = -1
    base_sequence = -1
    last_sequence = -1
    is_transactional = False
    is_control_batch = False
    has_producer_id = False
    has_delete_horizon = False

    def __init__(self, buffer: bytes | bytearray | memoryview) -> None:
        buf = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
        if len(buf) < LOG_OVERHEAD + MIN_V0_SIZE:
            raise CorruptRecordError(f"legacy message of {len(buf)} bytes is too short", size=len(buf))
        self.offset, size, self.crc, self.magic, self.attributes = _HEAD.unpack_from(buf, 0)
        if self.magic not in (0, 1):
            raise CorruptRecordError(f"legacy message at offset {self.offset} has magic {self.magic}", offset=self.offset)
        if size + LOG_OVERHEAD != len(buf) or size < (MIN_V0_SIZE if self.magic == 0 else MIN_V1_SIZE):
            raise CorruptRecordError(f"legacy message at offset {self.offset} has a bad size {size}", offset=self.offset)
        self._buf = buf
        self.timestamp = _I64.unpack_from(buf, 18)[0] if self.magic == 1 else NO_TIMESTAMP

    @property
    def buffer(self) -> memoryview:
        return self._buf

    @property
    def size_in_bytes(self) -> int:
        return len(self._buf)

    def __len__(self) -> int:
        return len(self._buf)

    @property
    def last_offset(self) -> int:
        return self.offset

    @property
    def next_offset(self) -> int:
        return self.offset + 1

    @property
    def base_offset(self) -> int:
        if self.compression_type is CompressionType.NONE:
            return self.offset
        return next(iter(self.records())).offset

    @property
    def records_count(self) -> int:
        return sum(1 for _ in self.records())

    @property
    def last_offset_delta(self) -> int:
        return self.last_offset - self.base_offset

    @property
    def compression_type(self) -> CompressionType:
        return CompressionType.from_id(self.attributes & 0x07)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE
        return TimestampType.LOG_APPEND_TIME if self.attributes & 0x08 else TimestampType.CREATE_TIME

    @property
    def max_timestamp(self) -> int:
        return self.timestamp

    @property
    def base_timestamp(self) -> int:
        return self.timestamp

    def compute_checksum(self) -> int:
        return zlib.crc32(self._buf[16:]) & 0xFFFFFFFF

    def is_valid(self) -> bool:
        return self.compute_checksum() == self.crc

    def ensure_valid(self) -> None:
        computed = self.compute_checksum()
        if computed != self.crc:
            raise CorruptRecordError(
                f"legacy message at offset {self.offset} is corrupt: stored crc {self.crc:#010x}, computed {computed:#010x}",
                offset=self.offset)

    def _key_value(self) -> tuple[bytes | None, bytes | None]:
        pos = 18 + (8 if self.magic == 1 else 0)
        buf = self._buf
        end = len(buf)
        out: list[bytes | None] = []
        for field in ("key", "value"):
            if pos + 4 > end:
                raise CorruptRecordError(
                    f"legacy message at offset {self.offset} ends before its {field} length", offset=self.offset)
            (n,) = _I32.unpack_from(buf, pos)
            pos += 4
            if n < 0:
                out.append(None)
            else:
                if pos + n > end:
                    raise CorruptRecordError(
                        f"legacy message at offset {self.offset}: its {field} of {n} bytes runs past its end",
                        offset=self.offset)
                out.append(buf[pos : pos + n].tobytes())
                pos += n
        if pos != end:
            raise CorruptRecordError(
                f"legacy message at offset {self.offset} has {end - pos} bytes after its value", offset=self.offset)
        return out[0], out[1]

    def records(self) -> Iterator[Record]:
        key, value = self._key_value()
        codec = self.compression_type
        if codec is CompressionType.NONE:
            return iter([Record(self.offset, self.timestamp, key, value)])
        return iter(self._inner_records(codec, value))

    def _inner_records(self, codec: CompressionType, value: bytes | None) -> list[Record]:
        """The messages of a wrapper, one level deep (see the module docstring for the rules)."""
        if value is None:
            raise InvalidRecordError(
                f"compressed legacy message at offset {self.offset} has a null value", offset=self.offset)
        try:
            inner = codec.decompress(value, MAX_DECOMPRESSED_BATCH_BYTES)
            recs: list[Record] = []
            for entry in iter_legacy(memoryview(inner), strict=True):
                if entry.attributes & 0x07:
                    raise InvalidRecordError("an inner message is compressed: legacy wrappers nest one level only")
                entry.ensure_valid()
                recs.extend(entry.records())
        except (CorruptRecordError, InvalidRecordError) as exc:
            raise type(exc)(
                f"compressed legacy message at offset {self.offset}: {exc}", offset=self.offset) from exc
        if not recs:
            raise InvalidRecordError(
                f"compressed legacy message at offset {self.offset} holds no inner messages", offset=self.offset)
        if self.magic == 1:
            # v1 wrappers use relative inner offsets: the wrapper's offset is the last one's absolute offset.
            shift = self.offset - recs[-1].offset
            ts_append = self.attributes & 0x08
            recs = [Record(r.offset + shift, self.timestamp if ts_append else r.timestamp, r.key, r.value) for r in recs]
        return recs

    def __bytes__(self) -> bytes:
        return self._buf.tobytes()

    def __repr__(self) -> str:
        return f"LegacyRecordBatch(magic={self.magic}, offset={self.offset}, size={len(self._buf)})"


def iter_legacy(view: memoryview, strict: bool = False) -> Iterator[LegacyRecordBatch]:
    """The entries of a message set; a partial entry at the end ends it quietly, or raises when ``strict``."""
    end = 0
    for pos, size, _, _ in walk_batches(view):
        end = pos + size
        yield LegacyRecordBatch(view[pos:end])
    if strict and end != len(view):
        raise CorruptRecordError(f"partial legacy message at position {end} of a message set", position=end)


def build_legacy_message(offset: int, key: bytes | None, value: bytes | None, *, magic: int = 1,
                         timestamp: int = NO_TIMESTAMP, attributes: int = 0) -> bytes:
    """One v0/v1 message entry (for tests and tools; the log never writes legacy formats)."""
    body = bytearray(struct.pack(">bb", magic, attributes))
    if magic == 1:
        body += _I64.pack(timestamp)
    for part in (key, value):
        if part is None:
            body += _I32.pack(-1)
        else:
            body += _I32.pack(len(part)) + part
    crc = zlib.crc32(body) & 0xFFFFFFFF
    return _I64.pack(offset) + _I32.pack(len(body) + 4) + struct.pack(">I", crc) + bytes(body)
