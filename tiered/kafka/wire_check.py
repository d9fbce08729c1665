"""A walk over a request body's bytes before ``kio`` decodes it: every array count and every string and bytes length
must fit in the bytes that are left.

``kio``'s native decoder reserves memory for the count an array announces before it reads the elements: a frame
of a few bytes announcing 2**32 elements made it ask for 34 GB, and a failed allocation in that code aborts the
whole process (it is not an exception the server can catch), so one client could stop every other one. Kafka's
own readers refuse such a count first (``MessageUtil``: "Tried to allocate a collection of size N, but there are
only M bytes remaining"); this module does the same for ``kio``: it follows the message's schema (the ``kio``
dataclass of the request's version) field by field, reading only lengths, and raises :class:`ValueError` naming
the field whose count or length passes the end of the frame. Each element of an array takes at least one byte,
so a count larger than the bytes left is never valid.

The walk is planned once per message class: runs of fixed-size fields become one skip, so a request costs a few
steps per array element.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from collections.abc import Callable
from typing import Any

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field

# A step reads what it needs from ``data`` at ``pos`` and returns the position after it.
Step = Callable[[bytes, int], int]

_FIXED = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "timedelta_i32": 4, "int64": 8,
          "timedelta_i64": 8, "float64": 8, "uuid": 16}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def check_lengths(cls: Any, data: bytes, pos: int) -> int:
    """Walk one ``cls`` (a ``kio`` message class) in ``data`` from ``pos``; the position after it. ValueError for
    an array count or a length past the end of ``data``, or bytes ending inside a field."""
    return _plan(cls)(data, pos)


def _need(data: bytes, pos: int, size: int, what: str) -> int:
    if size < 0 or pos + size > len(data):
        raise ValueError(f"{what} of {size} bytes at position {pos} passes the end of the {len(data)}-byte request")
    return pos + size


def _uvarint(data: bytes, pos: int, what: str) -> tuple[int, int]:
    value = shift = 0
    for i in range(5):
        if pos + i >= len(data):
            raise ValueError(f"{what}: the request ends inside a varint at position {pos}")
        byte = data[pos + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos + i + 1
        shift += 7
    raise ValueError(f"{what}: a varint longer than 5 bytes at position {pos}")


def _length(data: bytes, pos: int, flexible: bool, wide: bool, what: str) -> tuple[int, int]:
    """A length prefix: compact (unsigned varint, 0 = null) or legacy (int16 for strings, int32 otherwise,
    -1 = null); -1 for null."""
    if flexible:
        value, pos = _uvarint(data, pos, what)
        return value - 1, pos
    prefix = _I32 if wide else _I16
    _need(data, pos, prefix.size, what)
    return int(prefix.unpack_from(data, pos)[0]), pos + prefix.size


def _sized(flexible: bool, wide: bool, what: str) -> Step:
    """A string (``wide`` False) or bytes/records value: its length, then that many bytes."""

    def step(data: bytes, pos: int) -> int:
        size, pos = _length(data, pos, flexible, wide, what)
        return pos if size == -1 else _need(data, pos, size, what)

    return step


def _array(flexible: bool, element: Step, what: str) -> Step:
    def step(data: bytes, pos: int) -> int:
        count, pos = _length(data, pos, flexible, True, what)
        if count == -1:
            return pos
        if count < -1 or count > len(data) - pos:
            raise ValueError(f"{what}: an array of {count} elements at position {pos}, with {len(data) - pos} "
                             "bytes left")
        for _ in range(count):
            pos = element(data, pos)
        return pos

    return step


def _skip(size: int, what: str) -> Step:
    return lambda data, pos: _need(data, pos, size, what)


def _tagged_fields(data: bytes, pos: int) -> int:
    count, pos = _uvarint(data, pos, "tagged fields")
    if count > len(data) - pos:
        raise ValueError(f"{count} tagged fields at position {pos}, with {len(data) - pos} bytes left")
    for _ in range(count):
        _, pos = _uvarint(data, pos, "a tag")
        size, pos = _uvarint(data, pos, "a tagged field's size")
        pos = _need(data, pos, size, "a tagged field")
    return pos


@functools.cache
def _plan(cls: Any) -> Step:
    flexible = bool(cls.__flexible__)
    steps: list[Step] = []
    fixed = 0  # bytes of fixed-size fields not yet turned into a skip
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:  # read with the tagged fields, by their sizes
            continue
        what = f"{cls.__name__}.{f.name}"
        kind = classify_field(f)
        kafka_type = f.metadata.get("kafka_type")
        if kafka_type in _FIXED and not kind.is_array:
            fixed += _FIXED[kafka_type]
            continue
        if fixed:
            steps.append(_skip(fixed, what))
            fixed = 0
        if isinstance(kind, EntityTupleField):
            steps.append(_array(flexible, _plan(kind.type_), what))
        elif isinstance(kind, EntityField):
            raise TypeError(f"{what}: a nested struct that is not an array is not planned")  # none in requests served
        elif isinstance(kind, PrimitiveTupleField):
            if kafka_type in _FIXED:
                element = _skip(_FIXED[kafka_type], what)
            elif kafka_type == "string":
                element = _sized(flexible, False, what)
            else:
                element = _sized(flexible, True, what)
            steps.append(_array(flexible, element, what))
        elif kafka_type == "string":
            steps.append(_sized(flexible, False, what))
        elif kafka_type in ("bytes", "records"):
            steps.append(_sized(flexible, True, what))
        else:
            raise TypeError(f"{what}: kafka type {kafka_type!r} is not planned")
    if fixed:
        steps.append(_skip(fixed, cls.__name__))
    if flexible:
        steps.append(_tagged_fields)

    def walk(data: bytes, pos: int) -> int:
        for step in steps:
            pos = step(data, pos)
        return pos

    return walk
