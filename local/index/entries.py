"""Entry layouts and value types of Kafka's segment indexes: a pure codec, no file I/O.

All integers are big-endian; none of these files is checksummed (a crash leaves them to be rebuilt by
recovery, see the module docs of each index).

Offset index ``.index`` (one entry per sparse offset -> byte position mapping)::

    legacy entry, 8 bytes            large entry (KIP-1333), 12 bytes
    +0  relativeOffset  i32          +0  relativeOffset  i32
    +4  position        i32          +4  position        i64

Time index ``.timeindex`` (12 bytes, unchanged by KIP-1333)::

    +0  timestamp       i64          the largest timestamp at or before the offset below
    +8  relativeOffset  i32

Transaction index ``.txnindex`` (one AbortedTxn, 34 bytes)::

    +0  version         i16 (0)
    +2  producerId      i64
    +10 firstOffset     i64
    +18 lastOffset      i64
    +26 lastStableOffset i64

``relativeOffset`` is the offset minus the segment's base offset and must fit in [0, 2^31-1].
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from local.errors import CorruptIndexError
from local.records.constants import INT32_MAX as INT32_MAX  # re-exported: its home is the records' constants

DEFAULT_MAX_INDEX_SIZE: Final = 10 * 1024 * 1024
"""Kafka's ``segment.index.bytes`` default."""

LEGACY_OFFSET_ENTRY_SIZE: Final = 8
LARGE_OFFSET_ENTRY_SIZE: Final = 12
TIME_ENTRY_SIZE: Final = 12
ABORTED_TXN_SIZE: Final = 34
ABORTED_TXN_CURRENT_VERSION: Final = 0

NO_TIMESTAMP: Final = -1

# --- offset index -------------------------------------------------------------------------------------
LEGACY_OFFSET_ENTRY = struct.Struct(">ii")  # relativeOffset i32, position i32
LARGE_OFFSET_ENTRY = struct.Struct(">iq")  # relativeOffset i32, position i64
LEGACY_OFFSET_DTYPE = np.dtype([("rel", ">i4"), ("pos", ">i4")])
LARGE_OFFSET_DTYPE = np.dtype([("rel", ">i4"), ("pos", ">i8")])

# --- time index ---------------------------------------------------------------------------------------
TIME_ENTRY = struct.Struct(">qi")  # timestamp i64, relativeOffset i32
TIME_DTYPE = np.dtype([("ts", ">i8"), ("rel", ">i4")])

# --- transaction index --------------------------------------------------------------------------------
ABORTED_TXN = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, lastStableOffset

assert LEGACY_OFFSET_ENTRY.size == LEGACY_OFFSET_DTYPE.itemsize == LEGACY_OFFSET_ENTRY_SIZE
assert LARGE_OFFSET_ENTRY.size == LARGE_OFFSET_DTYPE.itemsize == LARGE_OFFSET_ENTRY_SIZE
assert TIME_ENTRY.size == TIME_DTYPE.itemsize == TIME_ENTRY_SIZE
assert ABORTED_TXN.size == ABORTED_TXN_SIZE


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    """An offset index entry: the batch holding ``offset`` starts at byte ``position`` of the segment."""

    offset: int
    position: int


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A time index entry: ``timestamp`` is the largest timestamp at or before ``offset``."""

    timestamp: int
    offset: int


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction of a segment: its offset range and the last stable offset when it aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = ABORTED_TXN_CURRENT_VERSION

    def encode(self) -> bytes:
        """The 34-byte on-disk form."""
        return ABORTED_TXN.pack(
            self.version, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, pos: int = 0) -> AbortedTxn:
        """Read one entry at ``pos``. A version newer than this code knows raises CorruptIndexError."""
        version, producer_id, first, last, lso = ABORTED_TXN.unpack_from(buf, pos)
        if version > ABORTED_TXN_CURRENT_VERSION:
            raise CorruptIndexError(
                f"unexpected aborted transaction version {version} at position {pos} "
                f"(current version is {ABORTED_TXN_CURRENT_VERSION})",
                position=pos,
                version=version,
            )
        return cls(producer_id, first, last, lso, version)


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    """Aborted transactions overlapping a fetch range, and whether the search may stop at this segment."""

    aborted_txns: list[AbortedTxn] = field(default_factory=list)
    is_complete: bool = False


# Lookups return a new value object each call and are the hot path; a frozen dataclass's __init__ goes
# through object.__setattr__ per field. These build the identical object through the slot descriptors,
# about twice as fast. Use them only with values already known to be ints.
_new_object = object.__new__
_set_offset_position_offset = vars(OffsetPosition)["offset"].__set__
_set_offset_position_position = vars(OffsetPosition)["position"].__set__
_set_timestamp_offset_timestamp = vars(TimestampOffset)["timestamp"].__set__
_set_timestamp_offset_offset = vars(TimestampOffset)["offset"].__set__


def make_offset_position(offset: int, position: int) -> OffsetPosition:
    """``OffsetPosition(offset, position)``, faster (see above)."""
    entry: OffsetPosition = _new_object(OffsetPosition)
    _set_offset_position_offset(entry, offset)
    _set_offset_position_position(entry, position)
    return entry


def make_timestamp_offset(timestamp: int, offset: int) -> TimestampOffset:
    """``TimestampOffset(timestamp, offset)``, faster (see above)."""
    entry: TimestampOffset = _new_object(TimestampOffset)
    _set_timestamp_offset_timestamp(entry, timestamp)
    _set_timestamp_offset_offset(entry, offset)
    return entry
