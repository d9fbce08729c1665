"""Zigzag varints and varlongs of Kafka's record format (protobuf-style, little-endian groups of 7 bits)."""

from __future__ import annotations

from local.errors import InvalidRecordError


def encode_varint(value: int, out: bytearray) -> None:
    """Append the zigzag varint of a signed 32-bit ``value`` (also used for varlongs) to ``out``."""
    v = (value << 1) ^ (value >> 63)
    v &= 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


encode_varlong = encode_varint


def size_of_varint(value: int) -> int:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


def decode_varint(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int = 5) -> tuple[int, int]:
    """(value, next position) of the zigzag varint at ``pos``; more than ``max_bytes`` bytes is invalid, and so is
    one that the data ends inside (both InvalidRecordError)."""
    try:
        b = buf[pos]
    except IndexError:
        raise InvalidRecordError(f"no varint at position {pos}: the data ends first", position=pos) from None
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result = b & 0x7F
    shift = 7
    i = pos + 1
    end = pos + max_bytes
    while True:
        if i >= end:
            kind = "varint" if max_bytes == 5 else "varlong"
            raise InvalidRecordError(f"{kind} at position {pos} is longer than {max_bytes} bytes", position=pos)
        try:
            b = buf[i]
        except IndexError:
            raise InvalidRecordError(f"truncated varint at position {pos}", position=pos) from None
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), i
        shift += 7


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    return decode_varint(buf, pos, 10)
