"""LogSegment: one ``.log`` with its offset, time and transaction indexes (Kafka's ``LogSegment``).

Index work is per batch: an offset index entry (and a time index entry for the largest timestamp so far) is
added when more than ``index.interval.bytes`` have been appended since the last one. The time index's final
entry, written when the segment becomes inactive, holds the segment's true max timestamp (KIP-33).

``recover()`` validates every batch, rebuilds all three indexes from the log, truncates at the first invalid
byte and returns how many bytes it cut, logging a warning with the position.
"""

from __future__ import annotations

import logging
import os
import struct
import time as _time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from local import filenames
from local.crc import crc32c
from local.errors import (
    CorruptIndexError,
    CorruptRecordError,
    InvalidRecordError,
    KafkaStorageError,
    LogSegmentOffsetOverflowError,
    UnsupportedCompressionTypeError,
)
from local.fetch import (
    UNKNOWN_OFFSET,
    FetchDataInfo,
    LogOffsetMetadata,
    LogOffsetPosition,
    TimestampAndOffset,
)
from local.file_records import FileRecords, OffsetSearch
from local.index import (
    DEFAULT_MAX_INDEX_SIZE,
    AbortedTxn,
    LazyIndex,
    OffsetIndex,
    TimeIndex,
    TimestampOffset,
    TransactionIndex,
    TxnIndexSearchResult,
)
from local.native import NATIVE_APPEND, SegmentCore
from local.records import MemoryRecords, RecordBatch
from local.records.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    COMPRESSION_CODEC_MASK,
    MAGIC_OFFSET,
    MAGIC_V2,
    NO_TIMESTAMP,
)
from local.records.compression import MAX_CODEC_ID
from local.records.constants import INT32_MAX
from local.records.legacy import LegacyRecordBatch
from local.records.memory_records import batch_from_buffer, corrupt_batch_error
from local.records.walk import walk_batches
from local.validation import validate_legacy_batch

logger = logging.getLogger(__name__)

_OFFSET = struct.Struct(">q")  # a batch's first field: its base offset (a legacy entry's: its last offset)

RECOVERY_READ_BYTES = 8 << 20  # recovery reads the log in blocks of this size


class ProducerStateLike(Protocol):
    def apply_batch(self, batch: Any) -> Any: ...
    def last_stable_offset(self, completed_txn: Any) -> int: ...
    def complete_txn(self, completed_txn: Any) -> None: ...
    def update_map_end_offset(self, offset: int) -> None: ...


class EpochCacheLike(Protocol):
    def latest_epoch(self) -> int | None: ...
    def assign(self, epoch: int, start_offset: int) -> None: ...


@dataclass(frozen=True, slots=True)
class RollParams:
    """What the log knows about an append when deciding to roll (Kafka's ``RollParams``)."""

    max_segment_bytes: int
    max_timestamp_in_messages: int
    max_offset_in_messages: int
    messages_size: int
    now_ms: int
    max_segment_ms: int


def _now_ms() -> int:
    return _time.time_ns() // 1_000_000


def _name_file(exc: OSError, path: Path) -> None:
    """Give an OSError of a write or fsync on an fd (which names no file) the path of the file it failed on."""
    if exc.filename is None:
        exc.filename = str(path)


class LogSegment(SegmentCore):
    """See the module docstring. Open with :meth:`open`."""

    # Slots beside the append's fields in SegmentCore (local.native), for the reason given in AbstractIndex.
    __slots__ = ("__dict__", "__weakref__", "_time", "_trim_pending", "txn_index")

    def __init__(
        self,
        log: FileRecords,
        lazy_offset_index: LazyIndex,
        lazy_time_index: LazyIndex,
        txn_index: TransactionIndex,
        base_offset: int,
        index_interval_bytes: int,
        roll_jitter_ms: int,
        time: Callable[[], int],
    ) -> None:
        self.log = log
        self._lazy_offset_index = lazy_offset_index
        self._lazy_time_index = lazy_time_index
        self.txn_index = txn_index
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self._time = time
        self.created = time()
        self.bytes_since_last_index_entry = 0
        self.rolling_based_timestamp: int | None = None
        # The largest timestamp so far and its offset, loaded from the time index (and the log after its last
        # entry) when first needed: _max_known says whether they are.
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = base_offset
        self._max_known = False
        self._trim_pending = False  # rolled, its trims not done yet (on_become_inactive_segment)

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        base_offset: int,
        *,
        index_interval_bytes: int = 4096,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        roll_jitter_ms: int = 0,
        file_already_exists: bool = False,
        init_file_size: int = 0,
        preallocate: bool = False,
        file_suffix: str = "",
        use_large_index: bool = False,
        time: Callable[[], int] = _now_ms,
        mutable: bool = True,
    ) -> LogSegment:
        """Open (or create) a segment. With ``mutable=False`` its ``.log`` is opened read-only: a read-only log
        (see :mod:`local.read_only`) recovers it by bounding it in memory, never by writing."""
        d = directory if isinstance(directory, Path) else Path(directory)
        log = FileRecords.open(
            filenames.log_file(d, base_offset, file_suffix),
            mutable=mutable,
            file_already_exists=file_already_exists,
            init_file_size=init_file_size,
            preallocate=preallocate,
        )
        return cls(
            log,
            LazyIndex.for_offset(
                filenames.offset_index_file(d, base_offset, file_suffix), base_offset, max_index_size,
                use_large_format=use_large_index,
            ),
            LazyIndex.for_time(filenames.time_index_file(d, base_offset, file_suffix), base_offset, max_index_size),
            TransactionIndex(base_offset, filenames.transaction_index_file(d, base_offset, file_suffix)),
            base_offset,
            index_interval_bytes,
            roll_jitter_ms,
            time,
        )

    # ------------------------------------------------------------------------------------------------------

    @property
    def offset_index(self) -> OffsetIndex:
        return self._lazy_offset_index.get()

    @property
    def time_index(self) -> TimeIndex:
        return self._lazy_time_index.get()

    @property
    def offset_index_path(self) -> Path:
        return self._lazy_offset_index.path

    @property
    def time_index_path(self) -> Path:
        return self._lazy_time_index.path

    @property
    def size(self) -> int:
        return self.log.size_in_bytes

    def _max_timestamp_and_offset(self) -> TimestampOffset:
        if not self._max_known:
            last = self.time_index.last_entry
            self._set_max_timestamp(last.timestamp, last.offset)
        return TimestampOffset(self._max_timestamp, self._offset_of_max_timestamp)

    def _set_max_timestamp(self, timestamp: int, offset: int) -> None:
        self._max_timestamp, self._offset_of_max_timestamp, self._max_known = timestamp, offset, True

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_timestamp_and_offset().timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self._max_timestamp_and_offset().offset

    @property
    def largest_timestamp(self) -> int:
        """The segment's max timestamp, or its last-modified time when it has none (retention by time)."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.last_modified

    @property
    def last_modified(self) -> int:
        try:
            return int(os.stat(self.log.path).st_mtime * 1000)
        except FileNotFoundError:
            return self.created

    def set_last_modified(self, ms: int) -> None:
        os.utime(self.log.path, (ms / 1000, ms / 1000))

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def _ensure_offset_in_range(self, offset: int) -> None:
        if not self.can_convert_to_relative_offset(offset):
            raise LogSegmentOffsetOverflowError(
                f"offset {offset} cannot be stored in segment {self.base_offset} of {self.log.path.parent}: its "
                f"distance from the base offset does not fit in an int32",
                offset=offset, segment=self.base_offset,
            )

    # ------------------------------------------------------------------------------------------------------
    # Append and read

    def append(
        self, largest_offset: int, records: MemoryRecords | bytes | bytearray | memoryview, batches: list[Any] | None = None
    ) -> None:
        """Append ``records`` (already validated, offsets assigned) in one write; index per batch.

        ``batches`` may hold the already parsed batches of ``records`` (the log has them) to skip a second parse.
        An offset index entry (and a time index entry when the max timestamp grew) is added for a batch when
        more than ``index.interval.bytes`` were appended since the last entry, as Kafka does.
        """
        data = records.buffer if isinstance(records, MemoryRecords) else records
        if not len(data):
            return
        if not 0 <= largest_offset - self.base_offset <= INT32_MAX:
            self._ensure_offset_in_range(largest_offset)
        position = self.log.size_in_bytes
        try:
            self.log.append(data)
        except OSError as exc:
            _name_file(exc, self.log.path)
            raise
        for batch in batches if batches is not None else MemoryRecords(data).batches(verify=False):
            size = batch.size_in_bytes
            self._index_batch(batch.last_offset, batch.max_timestamp, position, size)
            position += size

    def append_batch(self, last_offset: int, max_timestamp: int, batch: bytes | bytearray | memoryview,
                     header: bytes = b"") -> None:
        """:meth:`append` of exactly one batch whose last offset and max timestamp the caller has parsed (its first
        bytes replaced by ``header``, see :meth:`FileRecords.append`)."""
        if not 0 <= last_offset - self.base_offset <= INT32_MAX:
            self._ensure_offset_in_range(last_offset)
        position = self.log.size_in_bytes
        try:
            self.log.append(batch, header)
        except OSError as exc:
            _name_file(exc, self.log.path)
            raise
        self._index_batch(last_offset, max_timestamp, position, len(batch))

    def _py_append_batch_if_room(self, last_offset: int, max_timestamp: int, batch: bytes | bytearray | memoryview,
                                 now: int, max_segment_bytes: int, max_segment_ms: int, header: bytes = b"") -> bool:
        """The log's append fast path: :meth:`should_roll_for` and :meth:`append_batch` in one call.

        Writes ``batch`` (its first bytes replaced by ``header``, see :meth:`FileRecords.append`) and returns True
        when this segment need not roll for it. Returns False, having written nothing, when it must roll, or when
        the answer needs more than the fields at hand (the first batch's timestamp not loaded yet): the caller then
        asks :meth:`should_roll_for`, rolls if told to, and appends.

        This is the definition; where ``local/_appendcore.c`` is built, :meth:`append_batch_if_room` is the same in
        C, which hands any case but the common one back to this method.
        """
        log = self.log
        position = log.size_in_bytes
        if position > max_segment_bytes - len(batch) or not 0 <= last_offset - self.base_offset <= INT32_MAX:
            return False
        if position:
            first_timestamp = self.rolling_based_timestamp
            if first_timestamp is None:
                return False
            waited = max_timestamp - first_timestamp if first_timestamp >= 0 else now - self.created
            if waited > max_segment_ms - self.roll_jitter_ms:
                return False
        offset_index = self._lazy_offset_index.get()
        time_index = self._lazy_time_index.get()
        if offset_index.is_full or time_index.is_full:
            return False
        try:
            log.append(batch, header)
        except OSError as exc:
            _name_file(exc, log.path)
            raise
        self._py_index_batch(last_offset, max_timestamp, position, len(batch), offset_index, time_index)
        return True

    append_batch_if_room = SegmentCore.append_batch_if_room if NATIVE_APPEND else _py_append_batch_if_room

    def _py_index_batch(self, last_offset: int, max_timestamp: int, position: int, size: int,
                        offset_index: OffsetIndex | None = None, time_index: TimeIndex | None = None) -> None:
        """The bookkeeping of one appended batch: first timestamp, max timestamp, sparse index entries. The indexes
        are loaded here, when an entry is due, unless the caller has them at hand.

        The definition of :meth:`_index_batch`, which is this in C where ``local/_appendcore.c`` is built."""
        if position == 0:
            self.rolling_based_timestamp = max_timestamp
        if not self._max_known:
            self._max_timestamp_and_offset()
        if max_timestamp > self._max_timestamp:
            self._set_max_timestamp(max_timestamp, last_offset)
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            (self._lazy_offset_index.get() if offset_index is None else offset_index).append(last_offset, position)
            if time_index is None:
                time_index = self._lazy_time_index.get()
            if self._max_timestamp > time_index.last_entry.timestamp:
                time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self.bytes_since_last_index_entry = size
        else:
            self.bytes_since_last_index_entry += size

    _index_batch = SegmentCore._index_batch if NATIVE_APPEND else _py_index_batch

    def update_txn_index(self, completed_txn: Any, last_stable_offset: int) -> None:
        if completed_txn.is_aborted:
            self.txn_index.append(
                AbortedTxn(completed_txn.producer_id, completed_txn.first_offset, completed_txn.last_offset, last_stable_offset)
            )

    def translate_offset(self, offset: int, starting_file_position: int = 0) -> LogOffsetPosition | None:
        """The batch holding ``offset`` (or the first after it): its last offset, position and size."""
        mapping = self.offset_index.lookup(offset)
        return self.log.search_for_offset_from_position(offset, max(mapping.position, starting_file_position))

    def read(
        self, start_offset: int, max_size: int, max_position: int | None = None, min_one_message: bool = False,
        checked: bool = False, next_base: Callable[[], int | None] | None = None,
    ) -> FetchDataInfo | None:
        """Batches from the one holding ``start_offset``, up to ``max_size`` bytes (and ``max_position``).

        None when no batch in this segment holds ``start_offset`` or a later offset. A consumer's read
        (``checked``) checks the answer as :meth:`check_read` says; ``next_base`` gives the base offset of the
        segment after this one (None for the last), asked only when the batch found follows a gap. Internal reads
        (loading, producer state) check nothing.
        """
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for a read of segment {self.base_offset}")
        position = self.offset_index.lookup(start_offset).position
        if checked:
            search = self.log.search_for_offset(start_offset, position, self.base_offset - 1 if position == 0 else -1)
            found = search.found
            self.check_read(start_offset, search, next_base)
        else:
            found = self.log.search_for_offset_from_position(start_offset, position)
        if found is None:
            return None
        start_position = found.position
        meta = LogOffsetMetadata(start_offset, self.base_offset, start_position)
        adjusted = max(max_size, found.size) if min_one_message else max_size
        if adjusted == 0:
            return FetchDataInfo(meta, MemoryRecords(b""))
        limit = self.size if max_position is None else max_position
        fetch_size = max(0, min(limit - start_position, adjusted))
        return FetchDataInfo(meta, self.log.slice(start_position, fetch_size), adjusted < found.size)

    def check_read(self, offset: int, search: OffsetSearch, next_base: Callable[[], int | None] | None = None) -> None:
        """Raise CorruptRecordError unless the batch a read of ``offset`` found (``search``) may answer the read,
        naming the operator's file.

        Kafka's read semantics: an offset in a gap (removed by compaction, or never written: a real broker's
        compacted topics, whatever the topic's config says) is answered with the next batch, and a segment that
        ends before the offset leads to the next segment. Damage is told apart by what is outside the CRC: bytes
        that are not a whole batch before the segment's end; a batch whose offsets do not come after the batch
        before it; and, for a batch found after a gap, a CRC that does not match, a batch after it (the next one in
        the segment, else the next segment's base offset) that does not come after it, or batches walked over
        before it that overlap: a base offset damaged up or down opens a gap that its neighbours contradict.
        """
        source = self.log.source_path
        found, torn_at = search.found, search.torn_at
        if found is None:
            if torn_at is not None:
                raise CorruptRecordError(
                    f"no batch holds offset {offset} in {source} (segment {self.base_offset}): the bytes from "
                    f"position {torn_at} are not a whole batch (the segment is cut short, or a batch length is "
                    "damaged)", offset=offset, position=torn_at, path=str(source))
            self._check_batches_before_gap(offset, search)  # the read goes on to the next segment: a gap
            return
        base = found.base_offset
        if base == UNKNOWN_OFFSET:  # a legacy entry: its header holds only its last offset
            return
        # The batch before it is the previous segment's when this one is the segment's first.
        previous = found.previous_last_offset if found.position else self.base_offset - 1
        if base <= previous or base < 0:
            after = f" (the batch before it ends at {previous})" if previous >= 0 else ""
            raise CorruptRecordError(
                f"no batch holds offset {offset} in {source}: the batch at position {found.position} holds "
                f"offsets {base}..{found.offset}{after}: a batch header is damaged",
                offset=offset, position=found.position, path=str(source))
        if base > offset:
            self._check_batches_before_gap(offset, search)
            self._check_batch_after_gap(offset, found, next_base)

    def _check_batches_before_gap(self, offset: int, search: OffsetSearch) -> None:
        """The batches walked over before a gap must be in order (a base offset damaged downwards overlaps the batch
        before it) and the last of them must pass its CRC (a damaged last offset delta or magic byte would open the
        gap)."""
        if search.overlap_at is not None:
            source = self.log.source_path
            raise CorruptRecordError(
                f"no batch holds offset {offset} in {source}: the batch at position {search.overlap_at}, before the "
                "gap the read found, overlaps the one before it: a batch header is damaged",
                offset=offset, position=search.overlap_at, path=str(source))
        if search.previous is not None:
            position, size = search.previous
            self._check_crc(self.log.read(position, size), position)

    def _check_crc(self, data: bytes, position: int) -> None:
        source = self.log.source_path
        batch = batch_from_buffer(data)
        if not batch.is_valid():
            raise corrupt_batch_error(batch, str(source), position, {"path": str(source)})

    def _check_batch_after_gap(
        self, offset: int, found: LogOffsetPosition, next_base: Callable[[], int | None] | None
    ) -> None:
        """The batch a read of ``offset`` found after a gap must pass its CRC, and the batch after it (the next in
        the segment, else the next segment's base offset) must start after it."""
        source = self.log.source_path
        self._check_crc(self.log.read(found.position, found.size), found.position)
        after = found.position + found.size
        head = self.log.read(after, 8) if after < self.log.size_in_bytes else b""
        if len(head) == 8:
            # The next batch's first 8 bytes: a v2 base offset or a legacy entry's last offset, after ours either way.
            following, where = _OFFSET.unpack(head)[0], f"the batch after it (position {after}) starts at"
        else:
            following = next_base() if next_base is not None else None
            where = "the next segment starts at"
        if following is not None and following <= found.offset:
            raise CorruptRecordError(
                f"no batch holds offset {offset} in {source}: the batch at position {found.position} holds offsets "
                f"{found.base_offset}..{found.offset} and {where} offset {following}: a batch header is damaged",
                offset=offset, position=found.position, path=str(source))

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int = 0) -> TimestampAndOffset | None:
        entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(entry.offset, starting_offset)).position
        return self.log.search_for_timestamp(timestamp, position, starting_offset)

    def max_timestamp_record(self) -> TimestampAndOffset | None:
        """The first record holding the segment's max timestamp (Kafka's ListOffsets MAX_TIMESTAMP: the batch with
        that max timestamp, then its ``offsetOfMaxTimestamp``, KAFKA-16310), or None when the segment has none."""
        ts, offset = self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far
        if ts < 0:
            return None
        position = self.offset_index.lookup(offset).position
        for batch in self.log.batches(position):
            if batch.max_timestamp == ts:
                epoch = batch.partition_leader_epoch
                for rec in batch.records():
                    if rec.timestamp == ts:
                        return TimestampAndOffset(ts, rec.offset, epoch if epoch >= 0 else None)
                return TimestampAndOffset(ts, batch.last_offset, epoch if epoch >= 0 else None)
        return None

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        return self.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    def read_next_offset(self) -> int:
        """The offset after the last batch (the base offset when empty), found from the last index entry."""
        info = self.read(self.offset_index.last_offset, self.size, self.size)
        if info is None:
            return self.base_offset
        last = self.base_offset
        for batch in info.records.batches(verify=False):
            last = batch.next_offset
        return max(last, self.base_offset)

    # ------------------------------------------------------------------------------------------------------
    # Recovery and truncation

    def recover(self, producer_state_manager: ProducerStateLike | None = None, leader_epoch_cache: EpochCacheLike | None = None) -> int:
        """Rebuild the indexes from the log, truncating at the first invalid batch; returns bytes truncated.

        Kafka's LogSegment.recover, per batch on one header unpack and one crc32c over a memoryview of a large
        read; a batch view is built only for what needs one (producer state, legacy magic). The index entries
        are collected and written in bulk at the end.
        """
        offset_index = self.offset_index
        time_index = self.time_index
        offset_index.reset()
        time_index.reset()
        self.txn_index.reset()
        base_offset = self.base_offset
        interval = self.index_interval_bytes
        end = self.log.size_in_bytes
        index_offsets: list[int] = []
        index_positions: list[int] = []
        time_timestamps: list[int] = []
        time_offsets: list[int] = []
        max_ts, offset_of_max = -1, base_offset
        last_index_entry = 0
        valid_bytes = 0
        unpack_header = BATCH_HEADER.unpack_from
        previous_last_offset = -1  # none yet (a legacy segment's first batch may start below the base offset)
        latest_epoch = -1  # the highest epoch seen (the cache is asked only when a batch's epoch goes above it)
        map_end_offset: int | None = None  # past the last v2 batch, given to the producer state once at the end
        # One buffer, refilled (reuse): batch views do not outlive the next step of the walk.
        walk = walk_batches(self.log.read_into, end, reuse=True, window=RECOVERY_READ_BYTES, origin=str(self.log.source_path))
        try:
            for _position, size, view, rel in walk:  # contiguous from 0: the batch is at ``valid_bytes``
                magic = view[rel + MAGIC_OFFSET]
                if magic == MAGIC_V2:
                    (first_offset, _, epoch, _, crc, attributes, last_offset_delta, _, batch_max_ts, producer_id, _, _,
                     _) = unpack_header(view, rel)
                    if crc32c(view[rel + ATTRIBUTES_OFFSET : rel + size]) != crc:
                        RecordBatch(view[rel : rel + size]).ensure_valid()  # raises, naming both checksums
                    if attributes & COMPRESSION_CODEC_MASK > MAX_CODEC_ID:
                        raise CorruptRecordError(
                            f"batch at position {valid_bytes} of {self.log.source_path} names an unknown compression codec "
                            f"{attributes & COMPRESSION_CODEC_MASK}", position=valid_bytes)
                    last_offset = first_offset + last_offset_delta
                else:  # a legacy message set entry: no leader epoch, no producer state
                    legacy = batch_from_buffer(view[rel : rel + size])
                    if not isinstance(legacy, LegacyRecordBatch):
                        raise CorruptRecordError(
                            f"batch at position {valid_bytes} of {self.log.source_path} has magic {magic}", position=valid_bytes)
                    validate_legacy_batch(legacy)  # its CRC, and a wrapper's inner messages
                    first_offset, last_offset, batch_max_ts = legacy.base_offset, legacy.last_offset, legacy.max_timestamp
                if not 0 <= last_offset - base_offset <= INT32_MAX:
                    self._ensure_offset_in_range(last_offset)
                if first_offset <= previous_last_offset or last_offset < first_offset:
                    # An offset field (outside the CRC) was damaged: what follows cannot be indexed in order.
                    raise CorruptRecordError(
                        f"batch at position {valid_bytes} of {self.log.source_path} has offsets [{first_offset}, "
                        f"{last_offset}], not above the previous batch's last offset {previous_last_offset}",
                        position=valid_bytes)
                previous_last_offset = last_offset
                if batch_max_ts > max_ts:
                    max_ts, offset_of_max = batch_max_ts, last_offset
                if valid_bytes - last_index_entry > interval:
                    index_offsets.append(last_offset)
                    index_positions.append(valid_bytes)
                    if max_ts > (time_timestamps[-1] if time_timestamps else NO_TIMESTAMP):
                        time_timestamps.append(max_ts)
                        time_offsets.append(offset_of_max)
                    last_index_entry = valid_bytes
                if magic == MAGIC_V2:  # valid and in range: now its epoch and producer state count
                    if epoch > latest_epoch and leader_epoch_cache is not None:
                        latest = leader_epoch_cache.latest_epoch()
                        if latest is None or epoch > latest:
                            leader_epoch_cache.assign(epoch, first_offset)
                        latest_epoch = epoch
                    if producer_id >= 0 and producer_state_manager is not None:
                        self._update_producer_state(producer_state_manager, RecordBatch(view[rel : rel + size]))
                    map_end_offset = last_offset + 1
                valid_bytes += size
        except (CorruptRecordError, InvalidRecordError, UnsupportedCompressionTypeError, LogSegmentOffsetOverflowError) as exc:
            logger.warning(
                "found invalid batch in %s at position %d: %s", self.log.source_path, valid_bytes, exc
            )
        if map_end_offset is not None and producer_state_manager is not None:
            producer_state_manager.update_map_end_offset(map_end_offset)
        # A segment the cleaner wrote may hold more batches past index.interval.bytes than its indexes have room for
        # (the cleaner leaves the rest unindexed, see local.cleaner.cleaner.Cleaner._append): the rebuilt indexes stop
        # where they are full (sparse: a lookup scans on from the last entry) rather than fail the load.
        room = offset_index.max_entries - offset_index.reserved_slots - offset_index.entries
        if len(index_offsets) > room:
            logger.info("recovering %s: its offset index holds %d of its %d entries; the rest goes unindexed",
                        self.log.source_path, room, len(index_offsets))
            del index_offsets[max(room, 0):], index_positions[max(room, 0):]
        room = time_index.max_entries - time_index.reserved_slots - time_index.entries
        if len(time_timestamps) > room:
            del time_timestamps[max(room, 0):], time_offsets[max(room, 0):]
        offset_index.append_many(index_offsets, index_positions)
        time_index.append_many(time_timestamps, time_offsets)
        truncated = end - valid_bytes
        if truncated > 0:
            if self.log.mutable:
                logger.warning("truncating %s to %d bytes: %d invalid bytes from position %d", self.log.path,
                               valid_bytes, truncated, valid_bytes)
            else:  # a read-only view: the file stays as it is, the view ends where its valid batches do
                logger.warning("reading %s only up to byte %d (a read-only view: the file is not changed): %d invalid "
                               "bytes from position %d", self.log.source_path, valid_bytes, truncated, valid_bytes)
            self.log.truncate_to(valid_bytes)
        offset_index.trim_to_valid_size()
        time_index.maybe_append(max_ts, offset_of_max, skip_full_check=True)
        time_index.trim_to_valid_size()
        self._set_max_timestamp(max_ts, offset_of_max)
        self.bytes_since_last_index_entry = valid_bytes - last_index_entry
        return truncated

    def _update_producer_state(self, psm: ProducerStateLike, batch: Any) -> None:
        if batch.has_producer_id:
            completed = psm.apply_batch(batch)
            if completed is not None:
                self.update_txn_index(completed, psm.last_stable_offset(completed))
                psm.complete_txn(completed)
        psm.update_map_end_offset(batch.last_offset + 1)

    def truncate_to(self, offset: int) -> int:
        """Drop every batch at or after the one holding ``offset``; returns bytes removed."""
        mapping = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.offset_index.resize(self.offset_index.max_index_size)
        self.time_index.resize(self.time_index.max_index_size)
        truncated = 0 if mapping is None else self.log.truncate_to(mapping.position)
        if self.log.size_in_bytes == 0:
            self.created = self._time()
            self.rolling_based_timestamp = None
        self.bytes_since_last_index_entry = 0
        self._max_known = False
        self._load_largest_timestamp()
        return truncated

    def _load_largest_timestamp(self) -> None:
        last = self.time_index.last_entry
        best = last
        position = self.offset_index.lookup(last.offset).position
        after = self.log.largest_timestamp_after(position)
        if after.timestamp > best.timestamp:
            best = TimestampOffset(after.timestamp, after.offset)
        self._set_max_timestamp(best.timestamp, best.offset)

    # ------------------------------------------------------------------------------------------------------
    # Rolling and life cycle

    def _load_first_batch_timestamp(self) -> None:
        if self.rolling_based_timestamp is None:
            for batch in self.log.batches(verify=False):
                self.rolling_based_timestamp = batch.max_timestamp
                break

    def first_batch_timestamp(self) -> int:
        """The first batch's max timestamp, or Long.MAX_VALUE when it has none (Kafka's ``getFirstBatchTimestamp``:
        how old the segment's data is, for ``max.compaction.lag.ms``)."""
        self._load_first_batch_timestamp()
        ts = self.rolling_based_timestamp
        return ts if ts is not None and ts >= 0 else 2**63 - 1

    def time_waited_for_roll(self, now: int, message_timestamp: int) -> int:
        """KIP-33: time since the first batch's timestamp (measured in message time), else since creation."""
        self._load_first_batch_timestamp()
        ts = self.rolling_based_timestamp if self.rolling_based_timestamp is not None else -1
        if ts >= 0:
            return message_timestamp - ts
        return now - self.created

    def should_roll(self, params: RollParams) -> bool:
        """Kafka's shouldRoll: full by size, too old (``segment.ms`` minus jitter), an index full, or offsets
        that would not fit relative to the base offset."""
        return self.should_roll_for(
            params.messages_size, params.max_offset_in_messages, params.max_timestamp_in_messages, params.now_ms,
            params.max_segment_bytes, params.max_segment_ms,
        )

    def should_roll_for(
        self, messages_size: int, max_offset: int, max_timestamp: int, now: int, max_segment_bytes: int,
        max_segment_ms: int,
    ) -> bool:
        """:meth:`should_roll` without building a :class:`RollParams` (the log calls this on every append)."""
        size = self.log.size_in_bytes
        if size > max_segment_bytes - messages_size:
            return True
        if size > 0:
            first_timestamp = self.rolling_based_timestamp
            if first_timestamp is None:
                self._load_first_batch_timestamp()
                first_timestamp = self.rolling_based_timestamp
            waited = max_timestamp - first_timestamp if first_timestamp is not None and first_timestamp >= 0 else now - self.created
            if waited > max_segment_ms - self.roll_jitter_ms:
                return True
        return (
            self._lazy_offset_index.get().is_full
            or self._lazy_time_index.get().is_full
            or not 0 <= max_offset - self.base_offset <= INT32_MAX
        )

    def on_become_inactive_segment(self, defer_trim: bool = False) -> None:
        """The closing time index entry (the true max timestamp, KIP-33), then trim indexes and log.

        With ``defer_trim`` the trims wait for :meth:`flush` or :meth:`trim_inactive`. Shrinking a file gives its
        allocated blocks back, and on ext4 that waits for the journal commit in flight, which the previous rolled
        segment's fsync forces: 10-50 ms of a roll, stalling the append that rolls. The log defers the trims when
        the rolled segment's flush runs in the background, and that flush trims before it syncs; until then the
        files are longer than their entries, as the active segment's are, and a crash before it leaves the
        segment above the recovery point, recovered on the next start.
        """
        self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, skip_full_check=True)
        self._trim_pending = True
        if not defer_trim:
            self.trim_inactive()

    @property
    def trims_pending(self) -> bool:
        """Whether the trims of a roll (:meth:`on_become_inactive_segment` with ``defer_trim``) are still to do."""
        return self._trim_pending

    def trim_inactive(self) -> None:
        """The trims :meth:`on_become_inactive_segment` deferred: indexes to their entries, the log file to its
        size (preallocated space). Idempotent; a no-op for a segment that was not rolled."""
        if self._trim_pending:
            self.offset_index.trim_to_valid_size()
            self.time_index.trim_to_valid_size()
            self.log.trim()
            self._trim_pending = False

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def sanity_check(self, time_index_file_newly_created: bool) -> None:
        """Raise FileNotFoundError or CorruptIndexError when this segment must be recovered."""
        if not self.offset_index_path.exists():
            raise FileNotFoundError(f"offset index {self.offset_index_path} does not exist")
        if time_index_file_newly_created:
            self.time_index.resize(0)
        self.offset_index.sanity_check()
        self.time_index.sanity_check()
        self.txn_index.sanity_check()
        index = self.offset_index
        if index.entries and index.entry(index.entries - 1).position >= self.size:
            raise CorruptIndexError(
                f"last entry of {index.path} points at position {index.entry(index.entries - 1).position}, past the "
                f"end of {self.log.path} ({self.size} bytes)",
                path=str(index.path),
            )

    def has_suffix(self, suffix: str) -> bool:
        return str(self.log.path).endswith(suffix)

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        def renamed(path: Path) -> Path:
            name = path.name
            if old_suffix and name.endswith(old_suffix):
                name = name[: -len(old_suffix)]
            return path.with_name(name + new_suffix)

        self.log.rename_to(renamed(self.log.path))
        self._lazy_offset_index.rename_to(renamed(self.offset_index_path))
        self._lazy_time_index.rename_to(renamed(self.time_index_path))
        self.txn_index.rename_to(renamed(self.txn_index.path))

    def flush(self) -> None:
        """fsync the log and msync the indexes, after the trims a roll deferred (:meth:`trim_inactive`); an
        OSError names the file that failed."""
        try:
            self.trim_inactive()
        except OSError as exc:
            _name_file(exc, self.log.path)
            raise
        for flush, path in ((self.log.flush, self.log.path), (self.offset_index.flush, self.offset_index_path),
                            (self.time_index.flush, self.time_index_path), (self.txn_index.flush, self.txn_index.path)):
            try:
                flush()
            except OSError as exc:
                _name_file(exc, path)
                raise

    def close(self) -> None:
        if self._max_known and self._max_timestamp >= 0:
            try:
                self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, skip_full_check=True)
            except KafkaStorageError:  # Kafka swallows errors of this closing entry too
                logger.warning("could not write the closing time index entry of %s", self.log.path, exc_info=True)
        self._lazy_offset_index.close()
        self._lazy_time_index.close()
        self.log.close()
        self.txn_index.close()

    def close_handlers(self) -> None:
        for closer in (self._lazy_offset_index.close_handler, self._lazy_time_index.close_handler,
                       self.log.close_handlers, self.txn_index.close):
            try:
                closer()
            except OSError:
                logger.debug("error closing handlers of segment %d", self.base_offset, exc_info=True)

    def delete_if_exists(self) -> None:
        self.close_handlers()
        for deleter in (self.log.delete_if_exists, self._lazy_offset_index.delete_if_exists,
                        self._lazy_time_index.delete_if_exists, self.txn_index.delete_if_exists):
            deleter()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, path={self.log.path})"
