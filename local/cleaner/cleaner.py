"""One cleaning of one log: Kafka's ``Cleaner`` (``LogCleaner.scala``).

A compacted log is a clean head (segments below the ``cleaner-offset-checkpoint``: each key at most once) and a
dirty tail; of the tail, everything below the first uncleanable offset (the active segment, the last stable
offset, segments newer than ``min.compaction.lag.ms``) may be cleaned. A cleaning

1. builds the offset map (key digest -> its latest offset) over the dirty part, a batch at a time, until the map
   holds ``log.cleaner.io.buffer.load.factor`` of its slots; the map's latest offset + 1 is where this cleaning ends
   (the next one starts there);
2. groups the segments up to there, from the log's first, into runs whose log bytes stay within ``segment.bytes``
   and index bytes within ``segment.index.bytes`` and whose offsets fit the 32-bit relative offsets of one segment
   (64-bit sizes throughout: ``groupSegmentsBySize`` with the ``segment.bytes`` above 2 GiB of KIP-1333);
3. rewrites each run into one ``.cleaned`` segment named by the run's first base offset, keeping what
   :mod:`local.cleaner.filter` keeps (offsets and timestamps preserved, indexes and transaction index rebuilt by the
   appends), flushes it, gives it the run's last modification time, and has the log swap it in
   (:meth:`local.log.Log.replace_segments`: ``.cleaned`` -> ``.swap`` -> the plain names, the old segments
   ``.deleted``; a crash at any step is finished or undone by the loader).

A cleaning is aborted (``LogCleaningAbortedError``; its ``.cleaned`` files deleted) when ``check_done`` says so (the
cleaner stopping, the partition's cleaning aborted) or when the log changed under it in a way that makes the run
stale (a truncation, retention of a segment of the run: :meth:`Log.replace_segments` refuses).
"""

from __future__ import annotations

import logging
import threading
import time as _time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from local import filenames
from local.cleaner.filter import BatchFilter, FilterStats, LastRecord, _cleancore, control_type, scan_records
from local.cleaner.offset_map import SkimpyOffsetMap
from local.cleaner.records import F_KEY_LEN, F_OFFSET_DELTA
from local.cleaner.transactions import CleanedTransactionMetadata
from local.crc import crc32c
from local.errors import CorruptRecordError
from local.errors import LogCleaningAbortedError as LogCleaningAbortedError
from local.records.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    MAGIC_V2,
    TRANSACTIONAL_FLAG_MASK,
)
from local.records.compression import CompressionType
from local.records.constants import (
    INT32_MAX,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    SIZE_OFFSET,
)
from local.records.memory_records import batch_from_buffer
from local.records.walk import batch_size
from local.scheduler import SYSTEM_TIME, Time
from local.segment import LogSegment

if TYPE_CHECKING:
    from local.log import Log

logger = logging.getLogger(__name__)

_unpack_header = BATCH_HEADER.unpack_from
READ_WINDOW = 1 << 20


@dataclass(slots=True)
class CleanerStats:
    """What one cleaning did (Kafka's ``CleanerStats``), for its log line and the cleaner's metrics."""

    start_time: float = field(default_factory=_time.monotonic)
    map_complete_time: float = -1.0
    end_time: float = -1.0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    segments_cleaned: int = 0
    groups: int = 0
    buffer_utilization: float = 0.0
    filter: FilterStats = field(default_factory=FilterStats)

    @property
    def bytes_read(self) -> int:
        return self.filter.bytes_read

    @property
    def bytes_written(self) -> int:
        return self.filter.bytes_retained

    @property
    def messages_read(self) -> int:
        return self.filter.messages_read

    @property
    def messages_written(self) -> int:
        return self.filter.messages_retained

    @property
    def elapsed_secs(self) -> float:
        return max(0.0, (self.end_time if self.end_time >= 0 else _time.monotonic()) - self.start_time)

    @property
    def elapsed_index_secs(self) -> float:
        return max(0.0, self.map_complete_time - self.start_time) if self.map_complete_time >= 0 else 0.0


class Throttler:
    """Kafka's ``Throttler``: callers report bytes; past ``rate`` bytes a second (over ~300 ms windows) they sleep.
    Shared by every cleaner thread (``log.cleaner.io.max.bytes.per.second`` bounds them together)."""

    def __init__(self, rate: float, time: Time = SYSTEM_TIME, check_interval_ms: int = 300) -> None:
        self.rate = rate
        self._time = time
        self._interval_ns = check_interval_ms * 1_000_000
        self._lock = threading.Lock()
        self._period_start = time.nanoseconds()
        self._observed = 0.0

    def maybe_throttle(self, observed: float) -> None:
        if self.rate >= 1e300:
            return
        with self._lock:
            self._observed += observed
            now = self._time.nanoseconds()
            elapsed = now - self._period_start
            if elapsed <= self._interval_ns:
                return
            needed_ns = self._observed / self.rate * 1e9
            sleep_ms = int((needed_ns - elapsed) / 1e6)
            self._period_start = now
            self._observed = 0.0
        if sleep_ms > 0:
            self._time.sleep(sleep_ms)


@dataclass(frozen=True, slots=True)
class LogToClean:
    """A log chosen for cleaning (Kafka's ``LogToClean``): where its dirty part starts, where cleaning must stop, and
    its sizes (its cleanable ratio orders the candidates)."""

    log: Any
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool = False

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


@dataclass(slots=True)
class _Appended:
    """A batch written to the cleaned segment, as :meth:`LogSegment.append` indexes it."""

    last_offset: int
    max_timestamp: int
    size_in_bytes: int


class Cleaner:
    """Cleans one log at a time with its own offset map (one per cleaner thread). ``check_done(log)`` raises
    ``LogCleaningAbortedError`` when the cleaning must stop. ``skip_batches``: the cleaning pass reads only the
    batches of a segment the map pass walked whole that can keep something (see :meth:`_clean_into`); False reads
    every batch (the same output: tests compare the two)."""

    skip_batches = True

    def __init__(
        self, cleaner_id: int, offset_map: SkimpyOffsetMap, io_buffer_size: int, max_io_buffer_size: int,
        dup_buffer_load_factor: float, throttler: Throttler, time: Time = SYSTEM_TIME,
        check_done: Callable[[Any], None] = lambda log: None,
    ) -> None:
        if offset_map.slots * dup_buffer_load_factor <= 1:
            raise ValueError(
                "the offset map is too small to hold even one key, so log cleaning would never make progress: raise "
                "log.cleaner.dedupe.buffer.size or lower log.cleaner.threads")
        self.id = cleaner_id
        self.offset_map = offset_map
        self.io_buffer_size = max(io_buffer_size, RECORD_BATCH_OVERHEAD)
        # Segments are read a window at a time: at least READ_WINDOW (reads of a few hundred KiB cost half the
        # cleaning in read calls), more for a batch larger than that (Kafka grows its buffers the same way).
        self.read_window = max(self.io_buffer_size, READ_WINDOW)
        self._window = _Window(self.read_window)
        self._mapped: dict[int, _Mapped] = {}  # by base offset: the segments the last map pass walked whole
        self._kept_offsets: np.ndarray | None = None  # the offsets the map holds, sorted (when first needed)
        self.max_io_buffer_size = max_io_buffer_size
        self.dup_buffer_load_factor = dup_buffer_load_factor
        self.throttler = throttler
        self.time = time
        self.check_done = check_done

    # ------------------------------------------------------------------------------------------------------

    def clean(self, to_clean: LogToClean) -> tuple[int, CleanerStats]:
        """Clean ``to_clean.log``; (the first offset not cleaned: the next cleaning's first dirty offset, stats)."""
        return self.do_clean(to_clean, self.time.milliseconds())

    def do_clean(self, to_clean: LogToClean, now: int) -> tuple[int, CleanerStats]:
        log = to_clean.log
        stats = CleanerStats()
        logger.info("beginning cleaning of log %s", log.name)
        # What the map is built from must still be the log's at each swap: a truncation or a deletion since aborts.
        generation = log.segments_generation
        upper = to_clean.first_uncleanable_offset
        self.build_offset_map(log, to_clean.first_dirty_offset, upper, stats)
        end_offset = self.offset_map.latest_offset + 1
        stats.map_complete_time = _time.monotonic()
        config = log.config
        transactions = CleanedTransactionMetadata()
        groups = group_segments_by_size(log.segments.values(0, end_offset), config.segment_bytes,
                                        config.segment_index_bytes, upper)
        for group in groups:
            generation = self.clean_segments(log, group, now, stats, transactions, upper, generation)
            stats.groups += 1
            stats.segments_cleaned += len(group)
        stats.buffer_utilization = self.offset_map.utilization
        stats.end_time = _time.monotonic()
        return end_offset, stats

    # ------------------------------------------------------------------------------------------------------
    # The offset map

    def build_offset_map(self, log: Log, start: int, end: int, stats: CleanerStats) -> None:
        """Map every key of the dirty records in ``[start, end)`` to its latest offset (Kafka's
        ``buildOffsetMap``), until the map is full (then the latest offset says how far it got). What the walk learns
        of each segment it maps whole is kept in ``self._mapped`` for the cleaning pass (see :class:`_Mapped`)."""
        offset_map = self.offset_map
        offset_map.clear()
        self._mapped = {}
        self._kept_offsets = None
        dirty = log.segments.values(start, end)
        transactions = CleanedTransactionMetadata()
        transactions.add_aborted_transactions(log.collect_aborted_transactions(start, end))
        max_entries = int(offset_map.slots * self.dup_buffer_load_factor)
        for i, segment in enumerate(dirty):
            next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
            self.check_done(log)
            if self._map_segment(log, segment, start, next_start, transactions, max_entries, stats):
                logger.debug("offset map of %s full in segment %d", log.name, segment.base_offset)
                return

    def _map_segment(self, log: Log, segment: LogSegment, start: int, next_start: int,
                     transactions: CleanedTransactionMetadata, max_entries: int, stats: CleanerStats) -> bool:
        """Add the segment's keys from offset ``start``; True when the map filled in it."""
        offset_map = self.offset_map
        native = _cleancore is not None and offset_map.native
        position = segment.offset_index.lookup(start).position
        records_log = segment.log
        end = records_log.size_in_bytes
        # A segment walked whole from its first byte by the C pass alone can have its cleaning pass skip batches.
        mapped: _Mapped | None = (_Mapped(end) if self.skip_batches and native and start <= segment.base_offset
                                  and position == 0 else None)
        source = str(records_log.source_path)
        window = self._window
        pos = position
        try:
            while pos < end:
                n = window.read(records_log, pos, end)
                if n <= 0:
                    break
                view = window.view
                at = 0
                while at < n:
                    if native:  # the plain batches of the chunk, in C
                        marks, mark_every, next_mark = (
                            (mapped.marks, mapped.mark_every, mapped.next_mark) if mapped else (None, 0, 0))
                        at, entries, latest, stop, records, nbytes, keyless, next_mark = _cleancore.map_plain_batches(
                            view, at, n, start, offset_map.table_view, offset_map.slots, offset_map.entries,
                            max_entries, offset_map.latest_offset, offset_map.hash_key, pos, marks, mark_every,
                            next_mark)
                        offset_map.entries, offset_map.latest_offset = entries, latest
                        stats.map_messages_read += records
                        stats.map_bytes_read += nbytes
                        self.throttler.maybe_throttle(nbytes)
                        if mapped is not None:
                            mapped.add(records, nbytes, keyless, next_mark)
                        if stop == _STOP_FULL:
                            return True
                        if stop == _STOP_END:
                            break
                        if stop == _STOP_CORRUPT:
                            raise _corrupt_batch(view, at, pos + at, source)
                    size = _whole_batch(view, at, n, pos, segment)
                    if size is None:
                        break
                    mapped = None  # a batch for Python (codec, transaction, control, legacy, malformed)
                    self.throttler.maybe_throttle(size)
                    stats.map_bytes_read += size
                    if self._map_batch(view, at, size, start, transactions, max_entries, stats, pos + at, source):
                        return True
                    at += size
                if at == 0:
                    if not window.fit(n, pos, end):
                        raise _not_whole(pos, end, source)
                    continue
                pos += at
        finally:
            window.restore()
        if mapped is not None and mapped.bytes == end:
            self._mapped[segment.base_offset] = mapped
        # Gaps: the segment's offsets reach to the next one's base (Kafka: fast forward to the latest expected offset).
        offset_map.update_latest_offset(next_start - 1)
        return False

    def _map_batch(self, view: memoryview, at: int, size: int, start: int, transactions: CleanedTransactionMetadata,
                   max_entries: int, stats: CleanerStats, position: int = -1, source: str = "") -> bool:
        """One batch into the map (any kind: control, transactional, compressed); True when the map filled. Its CRC
        is checked first: a damaged batch stops the cleaning before its keys can mislead the map."""
        offset_map = self.offset_map
        if view[at + MAGIC_OFFSET] != MAGIC_V2:
            return False  # legacy entries are not deduplicated (see local.cleaner.filter)
        (base, _, _, _, crc, attributes, last_delta, _, _, producer_id, _, _, count) = _unpack_header(view, at)
        if crc32c(view[at + ATTRIBUTES_OFFSET : at + size]) != crc:
            raise _corrupt_batch(view, at, position if position >= 0 else at, source)
        last_offset = base + last_delta
        if last_offset >= start:
            _check_order(view, at, offset_map.latest_offset, position if position >= 0 else at, source)
        header = _MapHeader(last_offset, producer_id, attributes)
        if attributes & CONTROL_FLAG_MASK:
            transactions.on_control_batch_read(header, _control_type(view, at, size, attributes, count))
            stats.map_messages_read += 1
        elif transactions.on_batch_read(header):
            stats.map_messages_read += count  # aborted: its keys are not mapped
        elif count > 0 and last_offset >= start:
            body = view[at + RECORD_BATCH_OVERHEAD : at + size]
            codec = CompressionType.from_id(attributes & COMPRESSION_CODEC_MASK)
            records = body if codec is CompressionType.NONE else codec.decompress(body)
            fields, hashes = scan_records(records, count, offset_map.hash_key)
            offsets = base + fields[:, F_OFFSET_DELTA]
            offsets[(fields[:, F_KEY_LEN] < 0) | (offsets < start)] = -1  # a keyless or clean record: not mapped
            done = offset_map.put_many(hashes, offsets, max_entries)
            stats.map_messages_read += done
            if done < count:
                return True
        if last_offset >= start:
            offset_map.update_latest_offset(last_offset)
        return False

    # ------------------------------------------------------------------------------------------------------
    # Rewriting

    def clean_segments(self, log: Log, group: list[LogSegment], now: int, stats: CleanerStats,
                       transactions: CleanedTransactionMetadata, upper_bound_offset: int, generation: int) -> int:
        """Rewrite ``group`` into one ``.cleaned`` segment and swap it in (Kafka's ``cleanSegments``), unless the log's
        segments changed since ``generation``; returns the generation after the swap."""
        base = group[0].base_offset
        for suffix in filenames.SEGMENT_SUFFIXES:
            (log.dir / (filenames.filename_prefix_from_offset(base) + suffix + filenames.CLEANED_FILE_SUFFIX)).unlink(
                missing_ok=True)
        cleaned = LogSegment.open(
            log.dir, base, file_suffix=filenames.CLEANED_FILE_SUFFIX, index_interval_bytes=log.config.index_interval_bytes,
            max_index_size=log.config.segment_index_bytes, use_large_index=log.use_large_index, time=log.time.milliseconds,
        )
        transactions.cleaned_index = cleaned.txn_index
        try:
            last_records = {pid: LastRecord(last, epoch)
                            for pid, (last, epoch) in log.last_records_of_active_producers().items()}
            for i, segment in enumerate(group):
                upper = group[i + 1].base_offset if i + 1 < len(group) else segment.read_next_offset()
                transactions.add_aborted_transactions(log.collect_aborted_transactions(segment.base_offset, upper))
                self._clean_into(log, segment, upper, cleaned, transactions, last_records, upper_bound_offset, now, stats)
            cleaned.on_become_inactive_segment()
            cleaned.flush()
            cleaned.set_last_modified(group[-1].last_modified)
        except BaseException:
            cleaned.delete_if_exists()
            raise
        try:
            return log.replace_segments([cleaned], group, generation)
        except LogCleaningAbortedError:
            cleaned.delete_if_exists()  # refused before any rename: nothing of it is visible
            raise
        # Any other failure of the swap (an I/O error) leaves the files as they are: once the .swap files exist the
        # swap is the loader's to finish at the next start (the data dir goes offline meanwhile), as in Kafka.

    def _clean_into(self, log: Log, segment: LogSegment, upper: int, dest: LogSegment, transactions: CleanedTransactionMetadata,
                    last_records: dict[int, LastRecord], upper_bound_offset: int, now: int, stats: CleanerStats) -> None:
        """Copy what ``segment`` keeps into ``dest`` (Kafka's ``cleanInto``), a read window of batches at a time: the
        plain batches of a window in C where it was built, every other batch (and all of them without C) by
        :class:`local.cleaner.filter.BatchFilter`, one decision for both.

        A segment the map pass walked whole (:class:`_Mapped`: plain batches only, CRCs checked, every key mapped) can
        keep only the records whose offsets the map holds, the batch of an active producer's last record and the
        round's last batch (see :mod:`local.cleaner.filter`); every other batch of it goes. Only the windows holding
        those are read, from the sparse index of batch starts the map pass left; the batches skipped are counted as
        read (the map pass read them), and their keyless records as invalid, as the whole walk would count them."""
        source = str(segment.log.source_path)
        filter_stats = stats.filter
        retain = np.array(sorted(r.last_data_offset for r in last_records.values() if r.last_data_offset is not None),
                          dtype=np.int64)
        mapped = self._mapped.get(segment.base_offset)
        needed = starts = None
        if mapped is not None:
            needed = self._needed_offsets(segment.base_offset, upper, retain, upper_bound_offset)
            starts = mapped.starts_of(needed)
            filter_stats.messages_read += mapped.records
            filter_stats.bytes_read += mapped.bytes
            filter_stats.invalid_messages += mapped.keyless
            counted = FilterStats()  # what the windows read is counted above already: only what they keep counts
        else:
            counted = filter_stats
        batch_filter = BatchFilter(self.offset_map, transactions, last_records, upper_bound_offset, now,
                                   log.config.delete_retention_ms, counted, source)
        offset_map = self.offset_map
        native = _cleancore is not None and offset_map.native
        out = bytearray()
        meta = bytearray()
        appended: list[_Appended] = []
        largest = -1
        records_log = segment.log
        end = records_log.size_in_bytes
        window = self._window
        pos, wanted = 0, 0
        prev_last = -1  # the last offset of the batch before: each batch's offsets must come after it
        try:
            while pos < end:
                if needed is not None:
                    if wanted >= len(needed):
                        break  # nothing further in this segment can be kept
                    pos = max(pos, int(starts[wanted]))  # type: ignore[index]
                n = window.read(records_log, pos, end)
                if n <= 0:
                    break
                view = window.view
                at, last_seen = 0, -1
                while at < n:
                    if native:
                        at, stop, m_read, b_read, m_kept, b_kept, invalid, c_last = _cleancore.filter_plain_batches(
                            view, at, n, offset_map.table_view, offset_map.slots, offset_map.latest_offset,
                            upper_bound_offset, now, log.config.delete_retention_ms, retain, out, meta,
                            offset_map.hash_key, prev_last)
                        prev_last = max(prev_last, c_last)
                        counted.messages_read += m_read
                        counted.bytes_read += b_read
                        counted.invalid_messages += invalid
                        filter_stats.messages_retained += m_kept
                        filter_stats.bytes_retained += b_kept
                        last_seen = max(last_seen, c_last)
                        self.throttler.maybe_throttle(b_read)
                        if meta:
                            rows = np.frombuffer(bytes(meta), dtype=np.int64).reshape(-1, 3).tolist()
                            appended += [_Appended(a, b, c) for a, b, c in rows]
                            largest = rows[-1][0]
                            meta.clear()
                        if stop == _STOP_END:
                            break
                    size = _whole_batch(view, at, n, pos, segment)
                    if size is None:
                        break
                    self.throttler.maybe_throttle(size)
                    if view[at + MAGIC_OFFSET] == MAGIC_V2:
                        prev_last = _check_order(view, at, prev_last, pos + at, source)
                    retained = (counted.messages_retained, counted.bytes_retained)
                    kept = batch_filter.filter(view, at, size, pos + at)
                    if counted is not filter_stats:
                        filter_stats.messages_retained += counted.messages_retained - retained[0]
                        filter_stats.bytes_retained += counted.bytes_retained - retained[1]
                    if view[at + MAGIC_OFFSET] == MAGIC_V2:
                        header = _unpack_header(view, at)
                        last_seen = max(last_seen, header[0] + header[6])
                    if kept is not None:
                        data, last_offset, max_ts = kept
                        if last_offset < 0:  # a legacy entry: its offsets from its header
                            legacy = batch_from_buffer(data)
                            last_offset, max_ts = legacy.last_offset, legacy.max_timestamp
                        out += data
                        appended.append(_Appended(last_offset, max_ts, len(data)))
                        largest = last_offset
                    at += size
                if at == 0:
                    if not window.fit(n, pos, end):
                        raise _not_whole(pos, end, source)
                    continue
                pos += at
                if needed is not None:
                    wanted = int(np.searchsorted(needed, last_seen, side="right"))
                if len(out) >= self.io_buffer_size:
                    self._append(dest, largest, out, appended)
                self.check_done(log)
        finally:
            window.restore()
        self._append(dest, largest, out, appended)

    def _needed_offsets(self, lo: int, hi: int, retain: np.ndarray, upper_bound_offset: int) -> np.ndarray:
        """The offsets in ``[lo, hi)`` (a segment's) whose batches a cleaning may keep when the map pass walked it whole: the
        latest offsets the map holds, the active producers' last data offsets and the round's last offset (sorted)."""
        if self._kept_offsets is None:
            offset_map = self.offset_map
            self._kept_offsets = np.sort(np.frombuffer(
                _cleancore.map_offsets(offset_map.table_view, offset_map.slots, offset_map.entries), dtype=np.int64))
        kept = self._kept_offsets
        needed = kept[np.searchsorted(kept, lo) : np.searchsorted(kept, hi)]  # sorted, distinct
        more = [o for o in (*retain.tolist(), upper_bound_offset - 1) if lo <= o < hi]
        return np.union1d(needed, np.array(more, dtype=np.int64)) if more else needed

    def _append(self, dest: LogSegment, largest: int, out: bytearray, appended: list[_Appended]) -> None:
        if out:
            room = _index_room(dest)
            if room < len(appended):
                # Each batch may add an index entry, and the cleaned segment's indexes have room for fewer: the
                # grouping counts its sources' entries, but a source's first batch and a small segment have none,
                # while the cleaned segment indexes every index.interval.bytes of its own. The batches past the
                # room go unindexed (the index is sparse: a lookup scans on from the entry before), or the
                # partition could never be cleaned again.
                cut = max(room - 1, 0)
                if cut:
                    head = sum(a.size_in_bytes for a in appended[:cut])
                    dest.append(appended[cut - 1].last_offset, memoryview(out)[:head], appended[:cut])
                    del out[:head]
                    del appended[:cut]
                if dest.index_interval_bytes < INT32_MAX:
                    logger.info("cleaning into %s: its indexes are full; the rest of it goes unindexed", dest.log.path)
                    dest.index_interval_bytes = INT32_MAX
            dest.append(largest, out, appended)  # written at once (pwrite): the buffer is reused after
            self.throttler.maybe_throttle(len(out))
            out.clear()
            appended.clear()


_STOP_END, _STOP_SLOW, _STOP_FULL, _STOP_CORRUPT = 0, 1, 2, 3


class _Window:
    """One read buffer a cleaner reuses for every segment it reads (a buffer per segment costs its page faults
    each time): :meth:`read` fills it from a file position; a batch larger than it gets a larger one for a while
    (:meth:`fit`, as Kafka grows its read buffer), :meth:`restore` goes back to the usual size."""

    __slots__ = ("buffer", "size", "view")

    def __init__(self, size: int) -> None:
        self.size = max(size, RECORD_BATCH_OVERHEAD)
        self.buffer = bytearray(self.size)
        self.view = memoryview(self.buffer)

    def read(self, records_log: Any, pos: int, end: int) -> int:
        """Fill the buffer from ``pos`` (no further than ``end``); the bytes read."""
        return int(records_log.read_into(pos, self.view[: min(len(self.buffer), end - pos)]))

    def fit(self, n: int, pos: int, end: int) -> bool:
        """The ``n`` bytes read at ``pos`` hold no whole batch: make room for the batch there and say True, or say
        False when it cannot be whole (a torn tail: less than a header, or a batch running past ``end``)."""
        if n < LOG_OVERHEAD:
            return False
        size = int.from_bytes(self.view[SIZE_OFFSET : SIZE_OFFSET + 4], "big") + LOG_OVERHEAD
        if size <= len(self.buffer) or pos + size > end:
            return False
        self.view.release()
        self.buffer = bytearray(size)
        self.view = memoryview(self.buffer)
        return True

    def restore(self) -> None:
        if len(self.buffer) != self.size:
            self.view.release()
            self.buffer = bytearray(self.size)
            self.view = memoryview(self.buffer)


# The map pass notes a batch start every this many bytes of a segment it walks whole, at least (and at most 1024 a
# segment: 16 KiB of notes however large the segment).
MARK_INTERVAL = 64 * 1024
MAX_MARKS = 1024


class _Mapped:
    """What the map pass learnt of a segment it walked whole, from its first byte, with the C pass alone (so every
    batch is v2, uncompressed, neither transactional nor control, and its CRC was checked): its records, bytes and
    keyless records, and a sparse index of batch starts (base offset, file position) it verified on the way."""

    __slots__ = ("bytes", "keyless", "mark_every", "marks", "next_mark", "records")

    def __init__(self, size: int) -> None:
        self.records = self.bytes = self.keyless = self.next_mark = 0
        self.mark_every = max(MARK_INTERVAL, -(-size // MAX_MARKS))
        self.marks = bytearray()

    def add(self, records: int, nbytes: int, keyless: int, next_mark: int) -> None:
        self.records += records
        self.bytes += nbytes
        self.keyless += keyless
        self.next_mark = next_mark

    def starts_of(self, offsets: np.ndarray) -> np.ndarray:
        """For each offset, the position of a batch start at or before the batch holding it."""
        marks = np.frombuffer(bytes(self.marks), dtype=np.int64).reshape(-1, 2)
        if not len(marks):
            return np.zeros(len(offsets), dtype=np.int64)
        at = np.searchsorted(marks[:, 0], offsets, side="right") - 1
        return np.where(at >= 0, marks[np.maximum(at, 0), 1], 0)


def _corrupt_batch(view: memoryview, at: int, position: int, source: str) -> CorruptRecordError:
    base = int.from_bytes(view[at : at + 8], "big", signed=True)
    return CorruptRecordError(
        f"the cleaner found a corrupt batch at position {position} of {source} (offset {base}): its CRC does not "
        "match", offset=base, position=position, path=source)


def _index_room(segment: LogSegment) -> int:
    """How many more entries the segment's offset and time indexes both take."""
    offsets, times = segment.offset_index, segment.time_index
    return min(offsets.max_entries - offsets.reserved_slots - offsets.entries,
               times.max_entries - times.reserved_slots - times.entries)


def _check_order(view: memoryview, at: int, prev_last: int, position: int, source: str) -> int:
    """The last offset of the v2 batch at ``view[at:]``, which must come after ``prev_last`` (the batch before it):
    a base offset (outside the CRC) that breaks the order is damage, which a rewrite would make permanent in a
    batch with a valid CRC."""
    base = int.from_bytes(view[at : at + 8], "big", signed=True)
    last = base + int.from_bytes(view[at + LAST_OFFSET_DELTA_OFFSET : at + LAST_OFFSET_DELTA_OFFSET + 4], "big",
                                 signed=True)
    if base <= prev_last or last < base:
        raise CorruptRecordError(
            f"the cleaner found a batch out of order at position {position} of {source}: offsets {base}-{last} after "
            f"offset {prev_last} (a base offset here or before it is damaged)", offset=base, position=position, path=source)
    return last


def _not_whole(position: int, end: int, source: str) -> CorruptRecordError:
    """The bytes of a segment being cleaned from ``position`` to its end ``end`` hold no whole batch. A cleaned
    segment is a closed one below the recovery point, flushed whole: a torn tail there is damage (a batch length
    pointing past the end, or a file cut short), never what a crash leaves (the load recovers those segments), and
    the rewritten segment would drop every record after it."""
    return CorruptRecordError(
        f"the cleaner found bytes that are not a whole batch at position {position} of {source} ({end - position} "
        "bytes to the segment's end: a batch length is damaged, or the file was cut short)", position=position,
        path=source)


def _whole_batch(view: memoryview, at: int, length: int, chunk_pos: int, segment: LogSegment) -> int | None:
    """The size of the whole batch at ``view[at:]`` (None when it is not whole in the chunk); a corrupt size raises
    ``CorruptRecordError`` naming the segment file."""
    return batch_size(view, at, length - at, chunk_pos + at, str(segment.log.source_path))


class _MapHeader:
    __slots__ = ("is_transactional", "last_offset", "producer_id")

    def __init__(self, last_offset: int, producer_id: int, attributes: int) -> None:
        self.last_offset = last_offset
        self.producer_id = producer_id
        self.is_transactional = bool(attributes & TRANSACTIONAL_FLAG_MASK)


def _control_type(view: memoryview, at: int, size: int, attributes: int, count: int) -> Any:
    body = view[at + RECORD_BATCH_OVERHEAD : at + size]
    codec = CompressionType.from_id(attributes & COMPRESSION_CODEC_MASK)
    return control_type(body if codec is CompressionType.NONE else codec.decompress(body), count)


def group_segments_by_size(segments: list[Any], max_size: int, max_index_size: int,
                           first_uncleanable_offset: int) -> list[list[Any]]:
    """Runs of consecutive segments to rewrite as one (Kafka's ``groupSegmentsBySize``, sizes as 64-bit ints): a run
    grows while its log bytes stay within ``max_size``, its offset and time index bytes within ``max_index_size``,
    and the offsets of the segment added stay within int32 of the run's base offset (its last offset estimated by
    the next segment's base, or the first uncleanable offset for the last)."""
    groups: list[list[Any]] = []
    segs = list(segments)
    i = 0
    while i < len(segs):
        group = [segs[i]]
        log_size = segs[i].size
        index_size = segs[i].offset_index.size_in_bytes
        time_index_size = segs[i].time_index.size_in_bytes
        i += 1
        while i < len(segs):
            nxt = segs[i]
            last_offset = segs[i + 1].base_offset - 1 if i + 1 < len(segs) else first_uncleanable_offset - 1
            if not (log_size + nxt.size <= max_size
                    and index_size + nxt.offset_index.size_in_bytes <= max_index_size
                    and time_index_size + nxt.time_index.size_in_bytes <= max_index_size
                    and (nxt.size == 0 or last_offset - group[0].base_offset <= INT32_MAX)):
                break
            group.append(nxt)
            log_size += nxt.size
            index_size += nxt.offset_index.size_in_bytes
            time_index_size += nxt.time_index.size_in_bytes
            i += 1
        groups.append(group)
    return groups
