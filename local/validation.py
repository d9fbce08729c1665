"""Kafka's LogValidator: the rules a batch must pass before the log appends it, one home per rule.

Both append paths of :class:`local.log.Log` ask this module: the fast path (one plain batch from a client) calls
:func:`plain_client_batch`, a yes/no over the same rules without building a message; anything else, and anything the
fast path declines, goes through :func:`analyze_and_validate`, which raises the error that says what is wrong.
A batch that breaks a rule raises before anything is written, so a rejected append leaves no trace. The fast
path's walk over the records of a plain batch runs in C where the build had a compiler (``local/records/_fastwalk.c``,
held to the same answers as :func:`_walk_simple_records` by ``tests/property/test_fastwalk.py``).

Every appended buffer (leader and follower appends):
  * whole v2 batches only: magic 2 (legacy v0/v1 is read, never appended), a length of at least the 61-byte header
    that stays inside the buffer, a CRC-32C that matches (``CorruptRecordError``);
  * each batch within ``max.message.bytes`` and the whole append within ``segment.bytes``;
  * from a client, base offset 0; from a follower, base offsets that increase.

A leader append (offsets assigned here, Kafka's ``appendAsLeader``), per batch:
  * a known codec (``CorruptRecordError``);
  * ``recordsCount`` >= 1 and equal to ``lastOffsetDelta + 1`` (``InvalidRecordError``): the log end moves by the
    number of records the batch really holds;
  * from a client, a data batch with a producer id has a base sequence >= 0;
  * every record is whole and well formed (lengths, varints of at most 5 / 10 bytes, UTF-8 header keys, fields that
    fill exactly the record's declared length), its offset delta is its index (0..n-1 in order), the records fill
    the batch exactly; on a compacted topic every record has a key;
  * every record of a control batch has a control key; a COMMIT/ABORT marker batch holds one record whose value
    decodes (KRaft control batches may hold several records);
  * a compressed batch is decompressed as a stream and checked record by record as the bytes come: it may inflate
    to at most :func:`max_decompressed_bytes` (``DECOMPRESSED_SIZE_MULTIPLE`` x ``max.message.bytes``, at least
    ``DECOMPRESSED_SIZE_FLOOR``, at most ``MAX_DECOMPRESSED_BATCH_BYTES``), and the checker never holds more than
    one record plus one decompressed chunk, so a 64 KiB batch that claims 2 GiB is refused in bounded memory.
  * CreateTime timestamps within ``message.timestamp.before/after.max.ms`` (:func:`validate_timestamps`).

Follower appends keep Kafka's follower contract: their batches were validated by the leader, and a compacted
batch legitimately holds fewer records than its offset range, so only the structural rules above apply.

Legacy (v0/v1) wrappers: :func:`validate_legacy_batch` checks the CRC and decodes the wrapper, whose decoder
enforces one level of nesting and at least one inner message (``local.records.legacy``).

Kafka deviation: control batches are accepted from clients (``Log.append`` is also how a transaction coordinator
writes its markers here), but they must be well formed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any, NoReturn

from local.crc import crc32c
from local.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from local.extensions import fresh_extension
from local.records.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    ControlRecordType,
    EndTransactionMarker,
    RecordBatch,
    build_batch,
)
from local.records.compression import (
    MAX_DECOMPRESSED_BATCH_BYTES,
    CompressionType,
    stream_decompress,
)
from local.records.legacy import LegacyRecordBatch
from local.records.memory_records import MemoryRecords, corrupt_batch_error
from local.records.record import SimpleRecord
from local.records.varint import decode_varint

# the same walk in C (local/records/_fastwalk.c), built where a compiler exists (and not from an older source); the
# Python walk otherwise
_fastwalk: Any = fresh_extension("local.records._fastwalk")

DECOMPRESSED_SIZE_MULTIPLE = 32
"""A compressed batch may inflate to this many times ``max.message.bytes``..."""
DECOMPRESSED_SIZE_FLOOR = 1 << 20
"""...but never less than this (1 MiB), and never more than ``MAX_DECOMPRESSED_BATCH_BYTES`` (256 MiB)."""

_I32 = struct.Struct(">i")
_CODECS = tuple(CompressionType)


def max_decompressed_bytes(max_message_bytes: int) -> int:
    """The most a compressed batch appended to a log with this ``max.message.bytes`` may decompress to."""
    return min(MAX_DECOMPRESSED_BATCH_BYTES, max(DECOMPRESSED_SIZE_FLOOR, DECOMPRESSED_SIZE_MULTIPLE * max_message_bytes))


# The whole append ---------------------------------------------------------------------------------------------

def analyze_and_validate(
    buffer: bytearray,
    log_name: str,
    *,
    max_message_bytes: int,
    segment_bytes: int,
    from_client: bool,
    assign_offsets: bool,
    compacted: bool = False,
) -> tuple[list[RecordBatch], bool]:
    """Check every batch of an append; returns the batch views and whether any carries a producer id.

    One header unpack and one CRC-32C per batch, then (for a leader append) the record rules of
    :func:`validate_batch`. Raises the error that says what is wrong and at which position.
    """
    total = len(buffer)
    if total > segment_bytes:
        raise RecordBatchTooLargeError(
            f"append of {total} bytes to {log_name} exceeds segment.bytes {segment_bytes}", size=total)
    view = memoryview(buffer)
    batches: list[RecordBatch] = []
    has_producer_ids = False
    expected_next = 0  # a follower's offsets are never negative, and never go back
    position = 0
    limit = max_decompressed_bytes(max_message_bytes)
    while position < total:
        if total - position < RECORD_BATCH_OVERHEAD or buffer[position + MAGIC_OFFSET] != MAGIC_V2:
            reject_partial(view, position, log_name)
        size = _I32.unpack_from(buffer, position + LENGTH_OFFSET)[0] + LOG_OVERHEAD
        if size < RECORD_BATCH_OVERHEAD or position + size > total:
            reject_partial(view, position, log_name)
        batch = RecordBatch(view[position : position + size])
        if crc32c(view[position + ATTRIBUTES_OFFSET : position + size]) != batch.crc:
            raise corrupt_batch_error(batch, f"an append to {log_name}", position)
        if size > max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {size} bytes at position {position} exceeds max.message.bytes {max_message_bytes} "
                f"for {log_name}", position=position, size=size)
        if from_client and batch.base_offset != 0:
            raise InvalidRecordError(
                f"the base offset of a batch appended by a client to {log_name} must be 0, "
                f"got {batch.base_offset} at position {position}", position=position, offset=batch.base_offset)
        if assign_offsets:
            validate_batch(batch, position, log_name, from_client=from_client, max_decompressed=limit,
                           compacted=compacted)
        else:
            if batch.base_offset < expected_next:
                raise InvalidRecordError(
                    f"out of order offsets in append to {log_name}: batch at position {position} starts at "
                    f"{batch.base_offset}, expected at least {expected_next}", position=position,
                    offset=batch.base_offset)
            expected_next = batch.base_offset + batch.last_offset_delta + 1
        if batch.producer_id >= 0:
            has_producer_ids = True
        batches.append(batch)
        position += size
    return batches, has_producer_ids


def target_codec(compression_type: str) -> CompressionType | None:
    """The codec a topic's ``compression.type`` makes its appended batches take: None for ``producer`` (the
    producer's own is kept)."""
    if compression_type == "producer":
        return None
    return CompressionType.NONE if compression_type == "uncompressed" else CompressionType.from_name(compression_type)


def recompressed(batches: list[RecordBatch], codec: CompressionType, level: int | None = None) -> bytearray | None:
    """Kafka's LogValidator for a topic whose ``compression.type`` is a codec: each client batch in another codec
    (or uncompressed) is built again in ``codec`` (at ``level``: the topic's ``compression.<codec>.level``, None for
    the codec's default), its records' timestamps, keys, values and headers as they were,
    and its producer id, epoch, base sequence and transactional flag (an idempotent retry still matches). The
    append's new bytes, or None when every batch is in ``codec`` already (the bytes are kept as sent)."""
    if all(batch.compression_type is codec or batch.attributes & CONTROL_FLAG_MASK for batch in batches):
        return None
    out = bytearray()
    for batch in batches:
        if batch.compression_type is codec or batch.attributes & CONTROL_FLAG_MASK:
            out += batch.buffer  # (a control batch, a transaction marker, is never rebuilt: Kafka's neither)
            continue
        records = [SimpleRecord(r.timestamp, r.key, r.value, headers=r.headers) for r in batch.records()]
        out += build_batch(records, codec, timestamp_type=batch.timestamp_type, producer_id=batch.producer_id,
                           producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
                           is_transactional=batch.is_transactional, compression_level=level)
    return out


def reject_partial(view: memoryview, position: int, log_name: str) -> NoReturn:
    """Raise the error that describes the bytes at ``position`` of an append, which are not a whole v2 batch."""
    at, whole = 0, None
    try:
        # The batches before ``position`` are whole v2 batches (the caller walked them); at ``position``, strict
        # iteration raises for a torn, undersized or unknown batch, so what it yields there is a whole batch.
        for batch in MemoryRecords(view).batches(strict=True):
            if at == position:
                whole = batch
                break
            at += batch.size_in_bytes
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"append to {log_name}: {exc}", position=position) from exc
    assert whole is not None and whole.magic != MAGIC_V2, f"a whole v2 batch at position {position} of {log_name}"
    raise InvalidRecordError(f"only magic v2 batches can be appended to {log_name}; got magic {whole.magic} at "
                             f"position {position}", position=position)


# One batch ----------------------------------------------------------------------------------------------------

def _plain_client_batch(buffer: bytes | bytearray | memoryview, max_message_bytes: int, segment_bytes: int,
                        compacted: bool = False) -> tuple[int, int, int, int] | None:
    """The append fast path's question: is ``buffer`` exactly one valid, plain batch from a client (v2, base offset
    0, no producer id, uncompressed, not control, within the size limits, its CRC and records right)? Its
    (batchLength, lastOffsetDelta, baseTimestamp, maxTimestamp) if so, from one header unpack; None otherwise,
    and the caller goes the general way (:func:`analyze_and_validate`), which says what is wrong if anything is."""
    size = len(buffer)
    if size < RECORD_BATCH_OVERHEAD or buffer[MAGIC_OFFSET] != MAGIC_V2:
        return None
    (base_offset, length, _, _, crc, attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
     _, _, records_count) = BATCH_HEADER.unpack_from(buffer)
    if (
        length + LOG_OVERHEAD != size
        or base_offset != 0
        or producer_id >= 0
        or size > max_message_bytes
        or size > segment_bytes
        or crc32c(memoryview(buffer)[ATTRIBUTES_OFFSET:]) != crc
        or not plain_batch_ok(buffer, size, attributes, last_offset_delta, records_count, compacted)
    ):
        return None
    return length, last_offset_delta, base_timestamp, max_timestamp


def plain_batch_ok(buffer: bytes | bytearray | memoryview, size: int, attributes: int, last_offset_delta: int,
                   records_count: int, compacted: bool = False) -> bool:
    """The rules of :func:`validate_batch` for an uncompressed, non-control batch without a producer id, as a yes
    or no and fast (the append fast path). False also when the batch is merely unusual: the caller then goes the
    general way, which says what is wrong if anything is."""
    if attributes & (COMPRESSION_CODEC_MASK | CONTROL_FLAG_MASK) or records_count != last_offset_delta + 1:
        return False
    return records_count > 0 and plain_records_ok(buffer, RECORD_BATCH_OVERHEAD, size, records_count, compacted)


def validate_batch(batch: RecordBatch, position: int, log_name: str, *, from_client: bool, max_decompressed: int,
                   compacted: bool = False) -> None:
    """Every leader-append rule for one v2 batch whose header and CRC were checked (see the module docstring)."""
    where = f"batch at position {position} of an append to {log_name}"
    codec_id = batch.attributes & COMPRESSION_CODEC_MASK
    if codec_id >= len(_CODECS):
        raise CorruptRecordError(f"{where} names an unknown compression codec {codec_id}", position=position)
    count = batch.records_count
    if count <= 0:
        raise InvalidRecordError(f"{where} declares {count} records", position=position)
    if count != batch.last_offset_delta + 1:
        raise InvalidRecordError(
            f"{where} declares {count} records but the offset range [0, {batch.last_offset_delta}]: the record count "
            f"must be lastOffsetDelta + 1", position=position)
    control = bool(batch.attributes & CONTROL_FLAG_MASK)
    if from_client and not control and batch.producer_id >= 0 and batch.base_sequence < 0:
        raise InvalidRecordError(
            f"{where} has producer id {batch.producer_id} but base sequence {batch.base_sequence}", position=position)
    codec = _CODECS[codec_id]
    body = batch.buffer[RECORD_BATCH_OVERHEAD:]
    if codec is CompressionType.NONE:
        if not plain_records_ok(body, 0, len(body), count, compacted):
            _raise_in(where, position, lambda: check_records([body], count, max_decompressed, compacted))
    else:
        _raise_in(where, position,
                  lambda: check_records(stream_decompress(codec, body, max_decompressed), count, max_decompressed,
                                        compacted))
    if control:
        _raise_in(where, position, lambda: _check_control(batch))


def _raise_in(where: str, position: int, check: object) -> None:
    """Run ``check`` and prefix what it raises with the batch's place (keeping the error's class)."""
    try:
        check()  # type: ignore[operator]
    except (CorruptRecordError, InvalidRecordError) as exc:
        raise type(exc)(f"{where}: {exc}", **{**exc.context, "position": position}) from exc


def _check_control(batch: RecordBatch) -> None:
    """Every record of a control batch has a control key; a COMMIT/ABORT marker batch is one decodable marker."""
    records = list(batch.records())
    for record in records:
        kind = ControlRecordType.parse(record.key)
        if kind in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            if len(records) != 1:
                raise InvalidRecordError(f"a {kind.name} marker batch holds {len(records)} records; it must hold one")
            EndTransactionMarker.decode(kind, record.value)


def validate_legacy_batch(batch: LegacyRecordBatch) -> None:
    """A v0/v1 entry: its CRC, and (for a wrapper) the rules its decoder enforces on the inner messages."""
    batch.ensure_valid()
    for _ in batch.records():
        pass


def timestamps_within_bounds(base_timestamp: int, max_timestamp: int, now: int, before_max_ms: int,
                             after_max_ms: int) -> bool:
    """Kafka's CreateTime bounds, the one home of the rule: the batch's max timestamp at most
    ``message.timestamp.after.max.ms`` ahead of the broker's time, its base timestamp at most
    ``message.timestamp.before.max.ms`` behind (a negative timestamp means none and passes)."""
    return not ((max_timestamp >= 0 and max_timestamp - now > after_max_ms)
                or (base_timestamp >= 0 and now - base_timestamp > before_max_ms))


def validate_timestamps(batch: RecordBatch, now: int, before_max_ms: int, after_max_ms: int, log_name: str) -> None:
    """:func:`timestamps_within_bounds` for a batch (control batches are exempt), raising the error that says which
    bound was broken."""
    if batch.is_control_batch or timestamps_within_bounds(batch.base_timestamp, batch.max_timestamp, now,
                                                          before_max_ms, after_max_ms):
        return
    if batch.max_timestamp >= 0 and batch.max_timestamp - now > after_max_ms:
        raise InvalidTimestampError(
            f"timestamp {batch.max_timestamp} of a batch appended to {log_name} is more than "
            f"message.timestamp.after.max.ms={after_max_ms} ahead of the broker time {now}",
            timestamp=batch.max_timestamp)
    raise InvalidTimestampError(
        f"timestamp {batch.base_timestamp} of a batch appended to {log_name} is more than "
        f"message.timestamp.before.max.ms={before_max_ms} behind the broker time {now}",
        timestamp=batch.base_timestamp)


# Records ------------------------------------------------------------------------------------------------------

def plain_records_ok(buf: bytes | bytearray | memoryview, pos: int, end: int, count: int,
                     require_key: bool = False) -> bool:
    """True when ``buf[pos:end]`` is exactly ``count`` well-formed records, offset deltas 0..n-1 (the fast walk;
    records with headers, or anything odd, answer False and are left to :func:`check_records`, which accepts what
    this accepts and says why it refuses the rest)."""
    checked, pos = walk_simple_records(buf, pos, end, 0, count, require_key)
    return checked == count and pos == end


_ZIGZAG = tuple((b >> 1) ^ -(b & 1) for b in range(0x80))  # the value of each one-byte varint


def _walk_simple_records(buf: bytes | bytearray | memoryview, pos: int, end: int, index: int, count: int,
                         require_key: bool) -> tuple[int, int]:
    """Check whole records without headers from ``pos`` while they lie within ``end``, starting at record ``index``
    and stopping at ``count``; returns (the next record's index, its position). No object per record, no message,
    one- and two-byte varints inline: the first record that is unusual, incomplete or wrong stops the walk, and the
    caller looks at it closely."""
    dv = decode_varint
    zz = _ZIGZAG
    i = index
    try:
        while i < count and pos < end:
            b = buf[pos]
            if b < 0x80:
                length, start = zz[b], pos + 1
            else:
                c = buf[pos + 1]
                if c < 0x80:
                    length, start = (((b & 0x7F) | (c << 7)) >> 1) ^ -(b & 1), pos + 2
                else:
                    length, start = dv(buf, pos)
            rec_end = start + length
            if length <= 0 or rec_end > end:
                break
            q = start + 1  # past the attributes
            while buf[q] >= 0x80:  # the timestamp delta, a varlong
                q += 1
            if q - start > 10:
                break
            b = buf[q + 1]  # the offset delta
            if b < 0x80:
                if b != i << 1:
                    break
                q += 2
            else:
                delta, q = dv(buf, q + 1)
                if delta != i:
                    break
            b = buf[q]  # the key length
            if b < 0x80:
                k = zz[b]
                if k > 0:
                    q += 1 + k
                elif k and require_key:
                    break
                else:
                    q += 1
            else:
                k, q = dv(buf, q)
                if k > 0:
                    q += k
                elif require_key:
                    break
            b = buf[q]  # the value length
            if b < 0x80:
                v = zz[b]
                q += 1 + v if v > 0 else 1
            else:
                c = buf[q + 1]
                if c < 0x80:
                    v = (((b & 0x7F) | (c << 7)) >> 1) ^ -(b & 1)
                    q += 2 + v if v > 0 else 2
                else:
                    v, q = dv(buf, q)
                    if v > 0:
                        q += v
            if q + 1 != rec_end or buf[q]:  # no headers, and the fields fill the record exactly
                break
            pos = rec_end
            i += 1
    except (IndexError, InvalidRecordError):
        pass
    return i, pos


walk_simple_records = _walk_simple_records if _fastwalk is None else _fastwalk.walk_simple_records
"""The record walk the validator uses: the C build when it was built, else :func:`_walk_simple_records`."""

plain_client_batch = getattr(_fastwalk, "plain_client_batch", _plain_client_batch)
"""The append fast path's question (:func:`_plain_client_batch`): the C build when it was built (and is not an
older build without it)."""


class _Records:
    """Bytes arriving in chunks, consumed record by record: at most one record plus one chunk is held."""

    __slots__ = ("buf", "chunks", "done", "pos")

    def __init__(self, chunks: Iterable[bytes | memoryview]) -> None:
        self.chunks = iter(chunks)
        self.buf = bytearray()
        self.pos = 0
        self.done = False

    def need(self, n: int) -> bool:
        """Make ``n`` bytes from ``pos`` available; False when the data ends first."""
        while len(self.buf) - self.pos < n:
            if self.done:
                return False
            chunk = next(self.chunks, None)
            if chunk is None:
                self.done = True
                return False
            if self.pos:
                del self.buf[: self.pos]
                self.pos = 0
            self.buf += chunk
        return True

    def at_end(self) -> bool:
        return not self.need(1)


def check_records(chunks: Iterable[bytes | memoryview], count: int, limit: int, require_key: bool = False) -> None:
    """Check that ``chunks`` (the records of one batch, in pieces) are exactly ``count`` well-formed records with
    offset deltas 0..n-1; InvalidRecordError naming the record and what is wrong with it. ``limit`` bounds a
    record's declared length (the stream itself is bounded by whoever produces the chunks)."""
    src = _Records(chunks)
    index = 0
    while index < count:
        index, src.pos = walk_simple_records(src.buf, src.pos, len(src.buf), index, count, require_key)
        if index == count:
            break
        if not src.need(1):
            raise InvalidRecordError(f"the batch declares {count} records but its data ends after {index}",
                                     record=index)
        src.need(5)
        head_end = min(len(src.buf), src.pos + 5)
        length, after = _varint(src.buf, src.pos, head_end, 5, index, "length")
        if length < 0 or length > limit:
            raise InvalidRecordError(f"record {index} declares a length of {length} bytes", record=index)
        head = after - src.pos
        if not src.need(head + length):  # (which may move the record to the front of the buffer)
            raise InvalidRecordError(
                f"record {index} declares {length} bytes but the batch's data ends first", record=index)
        after = src.pos + head
        src.pos = _check_record(src.buf, after, after + length, index, require_key)
        index += 1
    if not src.at_end():
        raise InvalidRecordError(f"the batch declares {count} records but more bytes follow the last one",
                                 record=count)


def _varint(buf: bytes | bytearray | memoryview, pos: int, end: int, max_bytes: int, index: int,
            field: str) -> tuple[int, int]:
    """The zigzag varint at ``pos``, which must end before ``end``."""
    result = shift = 0
    for i in range(pos, min(end, pos + max_bytes)):
        b = buf[i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), i + 1
        shift += 7
    if end - pos >= max_bytes:
        raise InvalidRecordError(f"record {index}: its {field} is a varint longer than {max_bytes} bytes",
                                 record=index)
    raise InvalidRecordError(f"record {index} ends inside its {field}", record=index)


def _check_record(buf: bytearray, pos: int, end: int, index: int, require_key: bool) -> int:
    """Check the fields of record ``index`` (after its length varint) in ``buf[pos:end]``; returns ``end``."""
    if pos >= end:
        raise InvalidRecordError(f"record {index} is empty", record=index)
    pos += 1  # attributes (unused in v2)
    _, pos = _varint(buf, pos, end, 10, index, "timestamp delta")
    delta, pos = _varint(buf, pos, end, 5, index, "offset delta")
    if delta != index:
        raise InvalidRecordError(
            f"record {index} has offset delta {delta}: offset deltas must run 0..n-1 in order", record=index)
    klen, pos = _varint(buf, pos, end, 5, index, "key length")
    if klen < 0 and require_key:
        raise InvalidRecordError(f"record {index} has no key, which a compacted topic requires", record=index)
    pos += max(klen, 0)
    if pos > end:
        raise InvalidRecordError(f"record {index}: its key of {klen} bytes runs past the record", record=index)
    vlen, pos = _varint(buf, pos, end, 5, index, "value length")
    pos += max(vlen, 0)
    if pos > end:
        raise InvalidRecordError(f"record {index}: its value of {vlen} bytes runs past the record", record=index)
    headers, pos = _varint(buf, pos, end, 5, index, "header count")
    if headers < 0:
        raise InvalidRecordError(f"record {index} declares {headers} headers", record=index)
    for h in range(headers):
        hklen, pos = _varint(buf, pos, end, 5, index, f"header {h} key length")
        if hklen < 0 or pos + hklen > end:
            raise InvalidRecordError(f"record {index}: header {h} has a key of {hklen} bytes", record=index)
        try:
            bytes(buf[pos : pos + hklen]).decode()
        except UnicodeDecodeError:
            raise InvalidRecordError(f"record {index}: header {h}'s key is not UTF-8", record=index) from None
        pos += hklen
        hvlen, pos = _varint(buf, pos, end, 5, index, f"header {h} value length")
        pos += max(hvlen, 0)
        if pos > end:
            raise InvalidRecordError(f"record {index}: header {h}'s value runs past the record", record=index)
    if pos != end:
        raise InvalidRecordError(
            f"record {index} declares {end - pos} bytes more than its fields take", record=index)
    return end


__all__ = [
    "DECOMPRESSED_SIZE_FLOOR", "DECOMPRESSED_SIZE_MULTIPLE", "analyze_and_validate",
    "check_records", "max_decompressed_bytes", "plain_batch_ok", "plain_client_batch", "plain_records_ok", "reject_partial", "timestamps_within_bounds",
    "validate_batch", "validate_legacy_batch", "validate_timestamps",
]
