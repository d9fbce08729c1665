"""Records inside a v2 batch, and what callers pass to build one (:class:`SimpleRecord`).

Record layout: ``length varint | attributes i8 (0) | timestampDelta varlong | offsetDelta varint | keyLen varint
(-1 null) | key | valueLen varint (-1 null) | value | headerCount varint | headers``; a header is ``keyLen varint |
utf-8 key | valueLen varint (-1 null) | value``. Varints are zigzag.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from local.errors import InvalidRecordError
from local.records.varint import decode_varint, encode_varint, size_of_varint

NO_TIMESTAMP = -1

Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Record:
    """One record read from a batch, with its absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    sequence: int = -1


def _check_bytes(name: str, value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"SimpleRecord {name} must be bytes or None, got {type(value).__name__}")


class SimpleRecord:
    """A record to append: Kafka's ``SimpleRecord`` overloads, positionally or by keyword.

    ``SimpleRecord(value)``, ``SimpleRecord(key, value)``, ``SimpleRecord(timestamp, key, value, headers=())``,
    or ``SimpleRecord(value=..., key=..., timestamp=..., headers=...)``. The timestamp defaults to -1 (none).
    """

    __slots__ = ("headers", "key", "timestamp", "value")

    def __init__(self, *args: object, key: object = None, value: object = None, timestamp: int | None = None,
                 headers: Iterable[tuple[str, object]] | None = None) -> None:
        if len(args) == 1:
            value = args[0]
        elif len(args) == 2:
            key, value = args
        elif len(args) in (3, 4):
            if not isinstance(args[0], int) or isinstance(args[0], bool):
                raise TypeError("SimpleRecord(timestamp, key, value[, headers]): timestamp must be an int")
            timestamp, key, value = args[0], args[1], args[2]
            if len(args) == 4:
                headers = args[3]  # type: ignore[assignment]
        elif len(args) > 4:
            raise TypeError(f"SimpleRecord takes at most 4 positional arguments, got {len(args)}")
        self.key = _check_bytes("key", key)
        self.value = _check_bytes("value", value)
        self.timestamp = NO_TIMESTAMP if timestamp is None else int(timestamp)
        hs: list[Header] = []
        for h in headers or ():
            hk, hv = h
            if not isinstance(hk, str):
                raise TypeError(f"header keys must be str, got {type(hk).__name__}")
            hs.append((hk, _check_bytes("header value", hv)))
        self.headers: tuple[Header, ...] = tuple(hs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SimpleRecord) and (self.timestamp, self.key, self.value, self.headers) == (
            other.timestamp, other.key, other.value, other.headers)

    def __repr__(self) -> str:
        return f"SimpleRecord(timestamp={self.timestamp}, key={self.key!r}, value={self.value!r}, headers={self.headers!r})"


def encode_record(out: bytearray, offset_delta: int, timestamp_delta: int, key: bytes | None,
                  value: bytes | None, headers: Sequence[Header]) -> None:
    """Append one record (with its length prefix) to ``out``."""
    body = bytearray(b"\x00")  # attributes
    encode_varint(timestamp_delta, body)
    encode_varint(offset_delta, body)
    if key is None:
        body.append(1)  # zigzag(-1)
    else:
        encode_varint(len(key), body)
        body += key
    if value is None:
        body.append(1)
    else:
        encode_varint(len(value), body)
        body += value
    encode_varint(len(headers), body)
    for hk, hv in headers:
        kb = hk.encode()
        encode_varint(len(kb), body)
        body += kb
        if hv is None:
            body.append(1)
        else:
            encode_varint(len(hv), body)
            body += hv
    encode_varint(len(body), out)
    out += body


def record_size(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                headers: Sequence[Header]) -> int:
    """The bytes :func:`encode_record` writes for this record, its length prefix included (Kafka's
    ``DefaultRecord.sizeInBytes``): what a writer adds to an uncompressed batch body."""
    body = 1 + size_of_varint(timestamp_delta) + size_of_varint(offset_delta)
    body += 1 if key is None else size_of_varint(len(key)) + len(key)
    body += 1 if value is None else size_of_varint(len(value)) + len(value)
    body += size_of_varint(len(headers))
    for hk, hv in headers:
        n = len(hk.encode())
        body += size_of_varint(n) + n + (1 if hv is None else size_of_varint(len(hv)) + len(hv))
    return size_of_varint(body) + body


def decode_records(data: bytes | memoryview, count: int, base_offset: int, base_timestamp: int,
                   log_append_time: int | None, base_sequence: int) -> list[Record]:
    """Decode ``count`` records from ``data`` (exactly their bytes); InvalidRecordError naming the record position
    for anything malformed."""
    try:
        return _decode_records(data, count, base_offset, base_timestamp, log_append_time, base_sequence)
    except (IndexError, UnicodeDecodeError) as exc:
        raise InvalidRecordError(f"truncated or malformed record ({exc})", records_count=count) from None


def _decode_records(data: bytes | memoryview, count: int, base_offset: int, base_timestamp: int,
                    log_append_time: int | None, base_sequence: int) -> list[Record]:
    out: list[Record] = []
    pos = 0
    end = len(data)
    buf = data if isinstance(data, bytes) else bytes(data)
    dv = decode_varint
    for i in range(count):
        if pos >= end:
            raise InvalidRecordError(
                f"batch declares {count} records but its data ends after {i}", position=pos, records_count=count)
        start = pos
        b = buf[pos]
        if b < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            length, pos = dv(buf, pos)
        rec_end = pos + length
        if length < 0 or rec_end > end:
            raise InvalidRecordError(f"record {i} at position {start} declares {length} bytes past the data", position=start)
        pos += 1  # attributes
        ts_delta, pos = dv(buf, pos, 10)
        b = buf[pos]
        if b < 0x80:
            off_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            off_delta, pos = dv(buf, pos)
        b = buf[pos]
        if b < 0x80:
            klen, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            klen, pos = dv(buf, pos)
        if klen < 0:
            key = None
        else:
            key = buf[pos : pos + klen]
            pos += klen
        b = buf[pos]
        if b < 0x80:
            vlen, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            vlen, pos = dv(buf, pos)
        if vlen < 0:
            value = None
        else:
            value = buf[pos : pos + vlen]
            pos += vlen
        hcount, pos = dv(buf, pos)
        headers: tuple[Header, ...] = ()
        if hcount:
            if hcount < 0:
                raise InvalidRecordError(f"record {i} at position {start} has {hcount} headers", position=start)
            hl = []
            for _ in range(hcount):
                hklen, pos = dv(buf, pos)
                if hklen < 0:
                    raise InvalidRecordError(f"null header key in record {i} at position {start}", position=start)
                hk = buf[pos : pos + hklen].decode("utf-8", "replace")  # as Java's new String(bytes, UTF_8)
                pos += hklen
                hvlen, pos = dv(buf, pos)
                if hvlen < 0:
                    hv = None
                else:
                    hv = buf[pos : pos + hvlen]
                    pos += hvlen
                hl.append((hk, hv))
            headers = tuple(hl)
        if pos != rec_end:
            raise InvalidRecordError(
                f"record {i} at position {start} declares {length} bytes but its fields take {pos - start - (rec_end - start - length)}",
                position=start)
        seq = -1 if base_sequence < 0 else (base_sequence + off_delta) & 0x7FFFFFFF
        ts = log_append_time if log_append_time is not None else base_timestamp + ts_delta
        out.append(Record(base_offset + off_delta, ts, key, value, headers, seq))
    if pos != end:
        raise InvalidRecordError(
            f"batch declares {count} records but {end - pos} bytes follow the last one", position=pos, records_count=count)
    return out
