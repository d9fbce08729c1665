"""The on-disk constants of Kafka's log format, each defined once (Kafka's ``Records``, ``RecordBatch``,
``DefaultRecordBatch`` and ``LegacyRecord``). Every reader, the loader, dump, scrub and the remote path import
them from here (or through :mod:`local.records.batch`, which re-exports the batch ones).

Every batch, whatever its magic, starts with the same 17 bytes::

    0  baseOffset (v2) / offset (v0, v1)   i64
    8  batchLength (v2) / size (v0, v1)     i32   the bytes that follow this field
    12 partitionLeaderEpoch (v2) / crc      i32
    16 magic                                i8    0, 1 or 2

so a walk over a file or a buffer sizes each batch from ``LOG_OVERHEAD`` bytes and tells its format from the
byte at ``MAGIC_OFFSET`` (see :mod:`local.records.walk`).
"""

from __future__ import annotations

from typing import Final

INT32_MAX: Final = 2**31 - 1
"""Java's ``Integer.MAX_VALUE``: the largest relative offset, legacy index position and int32 field."""

OFFSET_OFFSET: Final = 0
SIZE_OFFSET: Final = 8
MAGIC_OFFSET: Final = 16
LAST_OFFSET_DELTA_OFFSET: Final = 23
"""Where a v2 header keeps ``lastOffsetDelta`` (the full layout is in :mod:`local.records.batch`)."""
LOG_OVERHEAD: Final = 12
"""Offset and size fields: what precedes a batch's length-counted bytes (``Records.LOG_OVERHEAD``)."""
HEADER_SIZE_UP_TO_MAGIC: Final = 17
"""Bytes up to and including the magic byte (``Records.HEADER_SIZE_UP_TO_MAGIC``)."""

MAGIC_V0: Final = 0
MAGIC_V1: Final = 1
MAGIC_V2: Final = 2
CURRENT_MAGIC: Final = MAGIC_V2

RECORD_BATCH_OVERHEAD: Final = 61
"""The v2 batch header, the smallest v2 batch (``DefaultRecordBatch.RECORD_BATCH_OVERHEAD``)."""
RECORD_OVERHEAD_V0: Final = 14
"""crc, magic, attributes, key length, value length: the smallest v0 message after ``LOG_OVERHEAD``, and so the
smallest size field any batch may carry (``LegacyRecord.RECORD_OVERHEAD_V0``)."""
RECORD_OVERHEAD_V1: Final = 22
"""v0's overhead plus the timestamp (``LegacyRecord.RECORD_OVERHEAD_V1``)."""


def min_batch_size(magic: int) -> int:
    """The smallest whole batch (``LOG_OVERHEAD`` included) of format ``magic`` (0, 1 or 2)."""
    if magic == MAGIC_V2:
        return RECORD_BATCH_OVERHEAD
    return LOG_OVERHEAD + (RECORD_OVERHEAD_V1 if magic == MAGIC_V1 else RECORD_OVERHEAD_V0)
