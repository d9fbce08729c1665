"""Kafka's per-segment indexes: offset (``.index``), time (``.timeindex``) and transaction (``.txnindex``).

The offset and time indexes are memory-mapped arrays of big-endian fixed-size entries sharing one base
(:class:`AbstractIndex`); the transaction index is a plain append-only file. None is checksummed: after a
crash they are sanity-checked and, when found wrong, rebuilt by recovery from the log. Offset index entries
are 8 bytes (legacy) or 12 bytes (KIP-1333, segments past 2 GiB); :func:`detect_entry_size` tells an
existing file's format.
"""

from __future__ import annotations

from local.index.base import WARM_SECTION_BYTES, AbstractIndex
from local.index.detect import detect_entry_size
from local.index.entries import (
    ABORTED_TXN_SIZE,
    DEFAULT_MAX_INDEX_SIZE,
    LARGE_OFFSET_ENTRY_SIZE,
    LEGACY_OFFSET_ENTRY_SIZE,
    TIME_ENTRY_SIZE,
    AbortedTxn,
    OffsetPosition,
    TimestampOffset,
    TxnIndexSearchResult,
)
from local.index.lazy import LazyIndex
from local.index.offset_index import OffsetIndex
from local.index.time_index import TimeIndex
from local.index.txn_index import TransactionIndex

__all__ = [
    "ABORTED_TXN_SIZE",
    "DEFAULT_MAX_INDEX_SIZE",
    "LARGE_OFFSET_ENTRY_SIZE",
    "LEGACY_OFFSET_ENTRY_SIZE",
    "TIME_ENTRY_SIZE",
    "WARM_SECTION_BYTES",
    "AbortedTxn",
    "AbstractIndex",
    "LazyIndex",
    "OffsetIndex",
    "OffsetPosition",
    "TimeIndex",
    "TimestampOffset",
    "TransactionIndex",
    "TxnIndexSearchResult",
    "detect_entry_size",
]
