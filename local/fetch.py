"""Small value types of the read path (Kafka's LogOffsetMetadata, FetchDataInfo, FetchIsolation...)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, NamedTuple

UNKNOWN_OFFSET = -1


class FetchIsolation(enum.Enum):
    """How far a read may go: the log end, the high watermark, or the last stable offset (READ_COMMITTED)."""

    LOG_END = "log_end"
    HIGH_WATERMARK = "high_watermark"
    TXN_COMMITTED = "txn_committed"


class LogOffsetMetadata(NamedTuple):
    """An offset, and where it is: the base offset of its segment and its byte position in it (-1 = unknown).

    A named tuple rather than a dataclass: the log builds one on every append.
    """

    message_offset: int
    segment_base_offset: int = UNKNOWN_OFFSET
    relative_position_in_segment: int = UNKNOWN_OFFSET


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """The answer to a read: where it started, the batches (``bytes()``/``batches()``), aborted transactions."""

    fetch_offset_metadata: LogOffsetMetadata
    records: Any
    first_entry_incomplete: bool = False
    aborted_transactions: list[Any] | None = None


@dataclass(frozen=True, slots=True)
class LogOffsetPosition:
    """A batch found in a segment file: its last offset, its position and its size; its base offset (-1 when
    unknown: a legacy entry's header holds only its last offset) and the last offset of the batch before it when
    the search walked over that one (-1 when not)."""

    offset: int
    position: int
    size: int
    base_offset: int = UNKNOWN_OFFSET
    previous_last_offset: int = UNKNOWN_OFFSET


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    """The result of a lookup by timestamp (Kafka's FileRecords.TimestampAndOffset)."""

    timestamp: int
    offset: int
    leader_epoch: int | None = None
