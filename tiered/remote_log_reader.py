"""RemoteLogReader: the remote tier's read path (Kafka's ``RemoteLogReader`` and the read half of its
``RemoteLogManager``), one owner for every remote read: ``Log.read`` below the local log start offset (through
:class:`tiered.remote_log_manager.RemoteLogManager`), the CLI, and the Spark source, whose executors read a remote
segment by its metadata through :meth:`RemoteLogReader.read_range` with no broker-side state.

It owns, and nothing else decides:

- **Which remote segment holds an offset**: the leader epoch of the offset, then the metadata store's answer; a
  partition without epochs falls back to the offsets alone.
- **The batch walk** (:meth:`RemoteLogReader.read_segment`): from the position the offset index gives (or the
  segment's start, or where the same reader's previous read ended), whole batches are cut by their headers only
  (CRCs are checked by whoever decodes them). It never skips: a short object, a damaged header or offsets
  overlapping the batch before raise ``CorruptRecordError`` naming the segment and the position. An offset in a
  gap (compaction's, or a real broker's compacted topic's, whatever the topic's config says) is answered with the
  next batch, as Kafka does, once that batch is checked to be intact: its CRC, and neighbours that do not
  contradict its base offset (outside the CRC), as the local read checks them.
- **Sequential readers** (one mechanism, :class:`SequentialReaders`): a read that starts where an earlier read
  ended (by offset for log reads, by position for byte-range reads) is the same reader going on. It needs no
  index lookup (the position is known), and only it gets read-ahead: within its segment, and into the next
  segment once the read-ahead reaches the segment's end.
- **Aborted transactions** under read_committed: from the remote transaction indexes, then the local ones.
- **The timestamp scan** (``offset_for_timestamp``): the first record at or after a timestamp, over the remote
  segments whose max timestamp reaches it, each from the batch its remote time index names.

Bytes come from a :class:`tiered.cache.segment_cache.SegmentCache` (which knows chunks, streams and checksums; the
reader knows none of it), positions from the :class:`tiered.cache.index_cache.RemoteIndexCache`. A fetch quota
(``remote.log.manager.fetch.max.bytes.per.second``) applies to every byte range asked for. Thread-safe.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from local.errors import CorruptRecordError, OffsetOutOfRangeError
from local.fetch import FetchDataInfo, FetchIsolation, LogOffsetMetadata, TimestampAndOffset
from local.records import MemoryRecords
from local.records.batch import (
    HEADER_SIZE_UP_TO_MAGIC,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
)
from local.records.memory_records import batch_from_buffer, corrupt_batch_error
from local.records.walk import checked_batch_size
from local.records.walk import last_offset as _last_offset
from tiered.cache.segment_cache import object_size
from tiered.errors import RemoteResourceNotFoundError
from tiered.rate_limiter import RateLimiter
from tiered.remote_tier_parts import collect_aborted_transactions, finished_segments, topic_id_partition
from tiered.rlm_metrics import RemoteLogMetrics, remote_log_metrics
from tiered.rsm import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

if TYPE_CHECKING:
    from local.log import Log
    from tiered.cache.index_cache import RemoteIndexCache
    from tiered.cache.segment_cache import SegmentCache

logger = logging.getLogger(__name__)

READ_SLACK = 64 * 1024  # read past max_bytes a little so a batch straddling the limit can be completed
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_OFFSET = struct.Struct(">q")
_LAST_OFFSET_DELTA_END = LAST_OFFSET_DELTA_OFFSET + 4
_READERS_PER_SCOPE = 16  # sequential readers of one partition (or one segment) told apart
_SCOPES = 4096  # partitions and segments whose readers are remembered (a process reads ever more segments)
_SCAN_BYTES = 1024 * 1024  # what the timestamp scan reads at a time


class SegmentLookup(Protocol):
    """The metadata store as the reader uses it."""

    def readable_segments(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]: ...

    def remote_log_segment_metadata(
        self, tip: TopicIdPartition, offset: int, leader_epoch: int
    ) -> RemoteLogSegmentMetadata | None: ...


class SegmentRead(NamedTuple):
    """Whole batches read from a remote segment: the bytes, the position after them, the offset after them and
    the position of the first (``found`` False: no batch of the segment holds the offset or a later one)."""

    data: bytes | memoryview
    end: int
    next_offset: int
    start: int = 0
    found: bool = True


NOTHING = SegmentRead(b"", 0, -1, 0, False)


def allows_gaps(log: Log) -> bool:
    """Whether remote segments' metadata may leave offsets out (a compacted topic's): only then does a read go on
    from an offset no segment's metadata covers to the next segment. (Within a segment, an intact batch after a
    gap answers a read whatever the config: see :meth:`RemoteLogReader.read_segment`.)"""
    return "compact" in str(log.config.cleanup_policy)


def unread_metadata_note(metadata: Any, tip: TopicIdPartition) -> str:
    """For an error about offsets no remote segment holds: the partition's metadata objects that could not be read
    at its last listing (a store that did not answer, more often than damage), which may be the segments missing;
    "" when there are none (or ``metadata`` does not tell)."""
    unreadable = getattr(metadata, "unreadable_events", None)
    found = unreadable(tip) if unreadable is not None else {}
    if not found:
        return ""
    key, why = sorted(found.items())[0]
    return (f"{len(found)} of its remote metadata object(s) could not be read at the last listing (e.g. {key}: "
            f"{why}): if the store did not answer, read again (tiered verify --remote tells damage)")


def _base_offset(data: bytes | memoryview, pos: int) -> int:
    """The base offset of the v2 batch at ``pos`` (a legacy entry's header holds only its last offset: that)."""
    return int(_OFFSET_AND_LENGTH.unpack_from(data, pos)[0])


class SequentialReaders:
    """Where recent reads ended, per scope (a partition, or a segment), each with what the reader needs to go on
    from there: a read that starts at such a point is that reader's next read. Bounded per scope (the oldest
    forgotten first) and in scopes (the one noted least recently forgotten first: every segment a byte-range
    reader reads is a scope); thread-safe. The reader's one mechanism for telling sequential readers apart."""

    def __init__(self, per_scope: int = _READERS_PER_SCOPE, scopes: int = _SCOPES) -> None:
        self._per_scope = per_scope
        self._scopes = scopes
        self._ends: OrderedDict[Hashable, OrderedDict[Hashable, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, scope: Hashable, point: Hashable) -> Any:
        """What was noted at ``point`` (forgotten now: the reader moves on), or None: not a sequential read."""
        with self._lock:
            ends = self._ends.get(scope)
            return None if ends is None else ends.pop(point, None)

    def note(self, scope: Hashable, point: Hashable, value: Any) -> None:
        """A read ended at ``point``; the next read from there gets ``value`` back."""
        with self._lock:
            ends = self._ends.get(scope)
            if ends is None:
                ends = self._ends[scope] = OrderedDict()
                if len(self._ends) > self._scopes:
                    self._ends.popitem(last=False)
            else:
                self._ends.move_to_end(scope)
            ends[point] = value
            if len(ends) > self._per_scope:
                ends.popitem(last=False)

    def forget(self, scope: Hashable) -> None:
        with self._lock:
            self._ends.pop(scope, None)


class _Walk:
    """One walk over a remote segment's batches from ``position``: the bytes read so far, and the errors that
    name the segment and the position."""

    __slots__ = ("data", "md", "offset", "position", "reader")

    def __init__(self, reader: RemoteLogReader, md: RemoteLogSegmentMetadata, position: int, offset: int,
                 data: bytes | memoryview) -> None:
        self.reader, self.md, self.position, self.offset, self.data = reader, md, position, offset, data

    def extend(self, upto: int) -> bytes | memoryview:
        """The bytes with at least ``upto`` of them when the object has them (a batch straddling the read)."""
        data = self.data
        if len(data) < upto:
            start = self.position + len(data)
            extra = self.reader.read_bytes(self.md, start, self.position + upto + READ_SLACK)
            if extra:
                data = self.data = b"".join((data, extra))
        return data

    def batch_size(self, at: int) -> int:
        """The checked size of the batch whose header is at ``data[at:]`` (``checked_batch_size``). Its error names
        the segment; the name is made only then, not for every batch walked."""
        try:
            return checked_batch_size(self.data, at)
        except CorruptRecordError:
            sid = self.md.remote_log_segment_id
            return checked_batch_size(self.data, at, self.position + at, f"remote segment {sid}",
                                      {"segment_id": str(sid), "offset": self.offset})  # raises, naming it

    def damaged(self, what: str, at: int) -> CorruptRecordError:
        size = object_size(self.md)
        known = f" of {size} bytes" if size is not None else ""
        sid = self.md.remote_log_segment_id
        return CorruptRecordError(
            f"remote segment {sid} (object{known}) {what} at position {self.position + at}",
            segment_id=str(sid), position=self.position + at, offset=self.offset)


class RemoteLogReader:
    """See the module docstring."""

    def __init__(
        self,
        metadata: SegmentLookup,
        index_cache: RemoteIndexCache,
        segments: SegmentCache,
        *,
        fetch_quota: RateLimiter | None = None,
        metrics: RemoteLogMetrics | None = None,
    ) -> None:
        self.metadata = metadata
        self.index_cache = index_cache
        self.segments = segments
        self._quota = fetch_quota or RateLimiter(None)
        self.metrics = metrics or remote_log_metrics()
        self.readers = SequentialReaders()
        self._read_past: dict[TopicIdPartition, RemoteLogSegmentId] = {}  # per partition: the segment read past
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------------------------
    # One segment, no log: what a Spark executor or a tool calls

    def read_bytes(self, md: RemoteLogSegmentMetadata, start: int, end: int, *, spare: bool = False) -> bytes | memoryview:
        """Bytes ``[start, end)`` of ``md``'s remote ``.log`` (fewer at the object's end; with ``spare``, maybe
        more), through the segment cache, checked against the segment's checksums; counted against the quota."""
        self._quota.acquire(end - start)
        return self.segments.read(md, start, end, spare=spare)

    def read_range(self, md: RemoteLogSegmentMetadata, start: int, end: int) -> bytes | memoryview:
        """Bytes ``[start, end)`` of ``md``'s remote ``.log`` (fewer only at its end), for a reader that walks the
        batches itself (the Spark source). A read starting where the previous one of the segment ended is a
        sequential reader's, and gets the segment read ahead."""
        sid = md.remote_log_segment_id
        if start == 0 or self.readers.take(sid, start) is not None:
            self.segments.prefetch(md, start)
        data = self.read_bytes(md, start, end)
        if data:
            self.readers.note(sid, start + len(data), True)
        return data

    def read_segment(
        self, md: RemoteLogSegmentMetadata, offset: int, max_bytes: int, min_one_message: bool,
        position: int | None = None,
    ) -> SegmentRead:
        """The whole batches of ``md`` from the one holding ``offset``, up to ``max_bytes`` (at least one when
        ``min_one_message``): a view into the cache when they lie in one chunk, so a sequential consumer's read
        copies nothing. Only batch headers are parsed: the index is sparse, so the batches before ``offset``
        are skipped by their offsets and lengths. ``position``, when known (where the reader's previous read
        ended, the batch there starting at ``offset``), is where to start instead of the index's answer.

        Raises CorruptRecordError naming the segment and the position when the object ends inside a batch
        before one is returned, is shorter than its metadata says, holds a batch length below a header's, or its
        first batch from ``offset`` starts after it (a gap) and is not intact (:meth:`_check_after_gap`).
        ``found`` is False only when the object ends cleanly with no batch at or after ``offset``."""
        previous_last = offset - 1 if position is not None else -1
        if position is None:
            # From the start when the offset is the segment's first (or below it): no index needed.
            position = 0 if offset <= md.start_offset else self.index_cache.lookup_offset(md, offset)
        if position == 0:
            previous_last = md.start_offset - 1  # the offset before the first batch walked
        want = max(max_bytes, 1)
        walk = _Walk(self, md, position, offset,
                     self.read_bytes(md, position, position + want + READ_SLACK, spare=True))
        pos = self._skip_to(walk, offset, previous_last)
        if pos < 0:
            return NOTHING
        return self._whole_batches(walk, pos, max_bytes, min_one_message)

    def _skip_to(self, walk: _Walk, offset: int, previous_last: int) -> int:
        """The position (in ``walk.data``) of the first batch whose last offset is ``offset`` or later, checked
        against the batch before it; -1 when the object ends cleanly before one."""
        data, pos = walk.data, 0
        overlap_at: int | None = None  # a batch walked over whose offsets do not come after the one before it
        previous_at: int | None = None  # the last batch walked over
        while True:
            if len(data) - pos < _LAST_OFFSET_DELTA_END:
                data = walk.extend(pos + _LAST_OFFSET_DELTA_END)
                if len(data) == pos:  # the object ends here, between batches
                    size = object_size(walk.md)
                    if size is not None and walk.position + pos < size:
                        raise walk.damaged(
                            f"is short: it ends after {walk.position + pos} bytes, its metadata says {size}", pos)
                    self._check_before_gap(walk, offset, overlap_at, previous_at)  # the next segment answers
                    return -1
                if len(data) - pos < MAGIC_OFFSET + 1:
                    raise walk.damaged("ends inside a batch header", pos)
            length = walk.batch_size(pos) - LOG_OVERHEAD
            if data[pos + MAGIC_OFFSET] >= MAGIC_V2 and len(data) - pos < _LAST_OFFSET_DELTA_END:
                raise walk.damaged("ends inside a batch header", pos)
            last_offset = _last_offset(data, pos)
            if last_offset >= offset:
                break
            if overlap_at is None and data[pos + MAGIC_OFFSET] >= MAGIC_V2 and (
                    (base := _base_offset(data, pos)) < 0 or base <= previous_last):
                overlap_at = pos  # a negative base offset or one not after the batch before: damaged
            previous_last = last_offset
            previous_at = pos
            pos += length + LOG_OVERHEAD
        if data[pos + MAGIC_OFFSET] >= MAGIC_V2:
            base = _base_offset(data, pos)
            if base <= previous_last:  # base offsets are outside the CRC: a damaged one overlaps the batch before
                raise walk.damaged(f"holds a batch with offsets {base}..{_last_offset(data, pos)} that overlap the "
                                   f"offset {previous_last} before it", pos)
            if base > offset:
                self._check_before_gap(walk, offset, overlap_at, previous_at)
                self._check_after_gap(walk, offset, pos)
        return pos

    @staticmethod
    def _check_crc(walk: _Walk, pos: int) -> int:
        """Raise CorruptRecordError naming the segment unless the batch at ``pos`` passes its CRC; its size."""
        size = walk.batch_size(pos)
        data = walk.extend(pos + size + _OFFSET.size)
        if len(data) >= pos + size:  # (cut short: the batch walk after this says so)
            batch = batch_from_buffer(memoryview(data)[pos : pos + size])
            if not batch.is_valid():
                sid = walk.md.remote_log_segment_id
                raise corrupt_batch_error(batch, f"remote segment {sid}", walk.position + pos, {"segment_id": str(sid)})
        return size

    def _check_before_gap(self, walk: _Walk, offset: int, overlap_at: int | None, previous_at: int | None) -> None:
        """A read of ``offset`` found a gap: the batches walked over before it must be in order (``overlap_at``
        None: a base offset damaged downwards overlaps the batch before it) and the last of them must pass its CRC
        (a damaged last offset delta or magic byte would open the gap)."""
        if overlap_at is not None:
            raise walk.damaged(f"has no batch holding offset {offset}: the batch before the gap the read found "
                               "overlaps the one before it", overlap_at)
        if previous_at is not None:
            self._check_crc(walk, previous_at)

    def _check_after_gap(self, walk: _Walk, offset: int, pos: int) -> None:
        """The batch at ``pos`` answers a read of ``offset`` in a gap: it must be intact (its CRC), and the batch
        after it, when the object holds one, must start after it. Its last offset against the segment's end offset
        is :meth:`_whole_batches`' check."""
        base, last = _base_offset(walk.data, pos), _last_offset(walk.data, pos)
        where = f"has no batch holding offset {offset}: the batch found holds offsets {base}..{last}"
        size = self._check_crc(walk, pos)
        data = walk.data
        if len(data) >= pos + size + _OFFSET.size:
            following = _OFFSET.unpack_from(data, pos + size)[0]  # a v2 base offset or a legacy last offset
            if following <= last:
                raise walk.damaged(f"{where} and the batch after it starts at offset {following}", pos)

    def _whole_batches(self, walk: _Walk, start: int, max_bytes: int, min_one_message: bool) -> SegmentRead:
        """Whole batches from ``start`` up to ``max_bytes`` (one at least when ``min_one_message``). The header at
        ``start`` is whole (``_skip_to`` read it); a later one cut short ends the batches (the next read, which
        starts at it, raises)."""
        md, data = walk.md, walk.data
        end = start
        next_offset = walk.offset
        while True:
            if len(data) - end < HEADER_SIZE_UP_TO_MAGIC:
                data = walk.extend(end + HEADER_SIZE_UP_TO_MAGIC)
                if len(data) - end < HEADER_SIZE_UP_TO_MAGIC:
                    break  # the object ends (inside a header: the next read, which starts there, raises)
            try:
                size = walk.batch_size(end)
            except CorruptRecordError:
                if end == start:
                    raise
                break  # the batches before it are whole and good: the next read, which starts at it, raises
            if not (end - start + size <= max_bytes or (end == start and min_one_message)):
                break
            if end + size > len(data):
                data = walk.extend(end + size)
                if end + size > len(data):
                    if end == start:  # nothing whole to return: the object is cut (the next read would be too)
                        raise walk.damaged(f"ends inside a batch of {size} bytes ({len(data) - end} present)", end)
                    break  # the object ends inside this batch: the next read, which starts at it, raises
            batch_last = _last_offset(data, end)
            if batch_last > md.end_offset:  # a base offset (outside the CRC) damaged upwards
                if end == start:
                    raise walk.damaged(f"holds a batch ending at offset {batch_last}, past the segment's end offset "
                                       f"{md.end_offset}", end)
                break  # the batches before it are whole and good: the next read, which starts at it, raises
            next_offset = batch_last + 1
            end += size
        return SegmentRead(memoryview(data)[start:end], walk.position + end, next_offset, walk.position + start)

    # ------------------------------------------------------------------------------------------------------
    # A log's remote offsets: what RemoteLogManager serves Log.read with

    def segment_for_offset(self, log: Log, tip: TopicIdPartition, offset: int) -> RemoteLogSegmentMetadata | None:
        """The FINISHED remote segment holding ``offset``, or the first one after it (a compacted log's gap)."""
        epoch = log.leader_epoch_cache.epoch_for_offset(offset)
        md = self.metadata.remote_log_segment_metadata(tip, offset, epoch) if epoch is not None else None
        if md is None:
            # No epoch lineage (e.g. a partition written without epochs): fall back to the offset alone.
            for cand in finished_segments(self.metadata, tip):
                if cand.start_offset <= offset <= cand.end_offset or cand.start_offset > offset:
                    return cand
        return md

    def read(
        self, log: Log, fetch_offset: int, max_bytes: int, isolation: FetchIsolation, min_one_message: bool
    ) -> FetchDataInfo:
        """Batches from the one holding ``fetch_offset``, out of the remote segment holding it.

        Never skips: an offset no remote segment holds raises (``OffsetOutOfRangeError`` when retention removed it
        meanwhile, else ``RemoteResourceNotFoundError``), and a short object or a damaged batch header (one that a
        gap's neighbours contradict included) raises ``CorruptRecordError`` naming the segment and the position.
        An offset in a gap is answered with the next intact batch, as in Kafka; a segment whose object ends
        cleanly before the offset (its size the metadata's) leads to the next one. Offsets that no segment's
        metadata covers are a gap in the remote tier (copies cover their segments' whole offset range) unless the
        log is compacted. The answer's ``records`` know their segment and position: a corrupt batch found by their
        ``batches()`` (CRC checked) names them too.
        """
        tip = topic_id_partition(log)
        self.metrics.fetch_requests.inc()
        try:
            return self._read(log, tip, fetch_offset, max_bytes, isolation, min_one_message)
        except Exception:
            self.metrics.fetch_errors.inc()
            raise

    def _read(self, log: Log, tip: TopicIdPartition, fetch_offset: int, max_bytes: int, isolation: FetchIsolation,
              min_one_message: bool) -> FetchDataInfo:
        offset = fetch_offset
        resumed = self.readers.take(tip, fetch_offset)  # where an earlier read of this reader ended, if any
        gaps = allows_gaps(log)
        while True:
            md = self.segment_for_offset(log, tip, offset)
            if md is None:
                raise self._not_in_remote(log, tip, offset)
            sid = md.remote_log_segment_id
            if md.start_offset > offset and not gaps:
                deposed = self._removed_by_the_owner(log, tip, offset, md.start_offset)
                if deposed is not None:
                    raise deposed
                raise CorruptRecordError(
                    f"offsets {offset}..{md.start_offset - 1} of {log.name} are in no remote segment (the next, "
                    f"{sid}, starts at {md.start_offset}): the remote tier has a gap{self._unread_note(tip)}",
                    offset=offset, segment_id=str(sid))
            position = resumed[1] if resumed is not None and resumed[0] == sid else None
            if position is not None or offset <= md.start_offset:
                self._read_ahead(log, tip, md, position or 0, resumed is not None)
            try:
                got = self.read_segment(md, offset, max_bytes, min_one_message, position)
            except RemoteResourceNotFoundError:
                if not self._deleted_since_loaded(tip, md):
                    raise  # its metadata still says it exists: a missing object is damage
                resumed = None
                continue  # deleted since this view was loaded (the owner's retention, on another machine): again
            if got.found:
                return self._answer(md, tip, fetch_offset, got, isolation, log)
            # The object ended cleanly before the offset: a gap at the segment's end when its size is the metadata's
            # (a short object raised), as in a local segment; unknown (a clamped size) only a compacted log's.
            if not gaps and offset <= md.end_offset and object_size(md) is None:
                raise CorruptRecordError(
                    f"remote segment {sid} ends before offset {offset} (its metadata says it holds "
                    f"{md.start_offset}..{md.end_offset}): the object is short or damaged",
                    offset=offset, segment_id=str(sid))
            offset = max(offset, md.end_offset + 1)  # a compacted segment without the offset: the next one
            if offset >= log.local_log_start_offset:
                return log.read(offset, max_bytes, isolation, min_one_message)

    def _read_ahead(self, log: Log, tip: TopicIdPartition, md: RemoteLogSegmentMetadata, position: int,
                    resumed: bool) -> None:
        """A sequential reader (it resumed its previous read, or starts at the segment's start) is about to read
        ``md`` from ``position``: the segment is read ahead, and once that reaches the segment's end, a resumed
        reader gets the next segment's start read ahead too."""
        if self.segments.prefetch(md, position) and resumed:
            self._read_ahead_next_segment(log, tip, md)

    def _answer(self, md: RemoteLogSegmentMetadata, tip: TopicIdPartition, fetch_offset: int, got: SegmentRead,
                isolation: FetchIsolation, log: Log) -> FetchDataInfo:
        """The fetch answer for batches read from ``md`` (the reader noted where it ended)."""
        data = got.data
        sid = md.remote_log_segment_id
        aborted = None
        if data:
            self.readers.note(tip, got.next_offset, (sid, got.end))
            self.metrics.fetch_bytes.inc(len(data))
            if isolation is FetchIsolation.TXN_COMMITTED:
                aborted = self.aborted_transactions(log, tip, md, fetch_offset, data)
        records = MemoryRecords(data, origin=f"remote segment {sid}", position=got.start,
                                context={"segment_id": str(sid)})
        return FetchDataInfo(LogOffsetMetadata(fetch_offset, -1, -1), records, False, aborted)

    def _deleted_since_loaded(self, tip: TopicIdPartition, md: RemoteLogSegmentMetadata) -> bool:
        """Whether ``md``, one of whose objects is missing, is no longer a readable segment once the partition's
        metadata is listed again (where the manager can: :class:`tiered.metadata.RemoteLogMetadataStore`)."""
        reload = getattr(self.metadata, "load", None)
        if reload is None:
            return False
        reload(tip)
        return all(m.remote_log_segment_id != md.remote_log_segment_id for m in finished_segments(self.metadata, tip))

    def _removed_by_the_owner(self, log: Log, tip: TopicIdPartition, offset: int,
                              first: int) -> OffsetOutOfRangeError | None:
        """The answer for ``offset``, which no remote segment holds any more while this data dir is a former owner
        of the partition's remote data (a newer owner record exists): the owner's retention removed it, and the
        remote log now starts at ``first`` (an out-of-range offset, as a deposed Kafka leader's reader sees; not a
        gap). None where this data dir is the owner, or no newer owner is known."""
        listing = getattr(self.metadata, "owner_records", None)  # (a lookup without owner records: no owner known)
        if listing is None:
            return None
        try:
            records = listing(tip)
        except Exception:  # (the store is down: the caller's error stands)
            return None
        mine = log.remote_log_state.owner_epoch
        if not records or records[-1].owner_epoch <= mine:
            return None
        owner = records[-1]
        return OffsetOutOfRangeError(
            f"offset {offset} of {log.name} is no longer in the remote tier: the partition's owner (owner epoch "
            f"{owner.owner_epoch}{', ' + owner.host if owner.host else ''}) removed it by retention; the remote log "
            f"starts at {first}", offset=offset, log_start_offset=first)

    def _not_in_remote(self, log: Log, tip: TopicIdPartition, offset: int) -> Exception:
        """The error for an offset below the local log start that no remote segment holds."""
        if offset < log.log_start_offset:  # retention removed it since the read began
            return OffsetOutOfRangeError(
                f"offset {offset} of {log.name} is below the log start offset {log.log_start_offset}",
                offset=offset, log_start_offset=log.log_start_offset)
        segs = finished_segments(self.metadata, tip)
        first = min((m.start_offset for m in segs), default=log.local_log_start_offset)
        if offset < first:
            deposed = self._removed_by_the_owner(log, tip, offset, first)
            if deposed is not None:
                return deposed
        return RemoteResourceNotFoundError(
            f"no remote segment of {tip} holds offset {offset} (log start offset {log.log_start_offset}, local "
            f"log start offset {log.local_log_start_offset}): the remote tier's metadata or objects are missing"
            f"{self._unread_note(tip)}", offset=offset)

    def _unread_note(self, tip: TopicIdPartition) -> str:
        note = unread_metadata_note(self.metadata, tip)
        return f"; {note}" if note else ""

    def _read_ahead_next_segment(self, log: Log, tip: TopicIdPartition, md: RemoteLogSegmentMetadata) -> None:
        """A sequential reader's read-ahead reaches the end of ``md``: start on the next segment (once per segment
        and partition); the reader reads it from its start, which needs no index. Without it the reader stalls at
        every segment boundary on a download; started any earlier, it competes with the segment being read."""
        segment_id = md.remote_log_segment_id
        with self._lock:
            if self._read_past.get(tip) == segment_id:
                return
            self._read_past[tip] = segment_id
        following = self.segment_for_offset(log, tip, md.end_offset + 1)
        if following is not None and following.remote_log_segment_id != segment_id:
            self.segments.prefetch(following, 0)

    def aborted_transactions(
        self, log: Log, tip: TopicIdPartition, md: RemoteLogSegmentMetadata, fetch_offset: int, data: bytes | memoryview
    ) -> list[Any]:
        """The aborted transactions overlapping the batches ``data`` (read from ``md`` at ``fetch_offset``): from
        the remote transaction indexes from ``md`` on, then, if those do not complete the search, the local ones.

        A transaction's entry is in the index of the segment holding its marker, which may come segments after its
        records: the search goes on past the batches read until an entry says it is complete (its last stable offset
        reaches the upper bound), as Kafka's ``collectAbortedTransactions`` does."""
        batches = list(MemoryRecords(data).batches(verify=False))  # headers only: the consumer checks the CRCs
        upper = batches[-1].last_offset + 1 if batches else fetch_offset
        return collect_aborted_transactions(self.metadata, self.index_cache, log, tip, fetch_offset, upper)

    def offset_for_timestamp(self, log: Log, timestamp: int) -> TimestampAndOffset | None:
        """The first remote record at or after ``timestamp`` (and at or after the log start offset), or None."""
        tip = topic_id_partition(log)
        for md in finished_segments(self.metadata, tip):
            if md.max_timestamp_ms < timestamp or md.end_offset < log.log_start_offset:
                continue
            found = self._scan_for_timestamp(md, timestamp, max(md.start_offset, log.log_start_offset))
            if found is not None:
                return found
        return None

    def _scan_for_timestamp(
        self, md: RemoteLogSegmentMetadata, timestamp: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        # From the batch of the remote time index's entry (Kafka's RemoteLogManager.lookupTimestamp), not from the
        # segment's start: no record before it reaches the timestamp. Records are still kept from starting_offset.
        offset = max(starting_offset, self.index_cache.lookup_timestamp_offset(md, timestamp))
        while offset <= md.end_offset:
            got = self.read_segment(md, offset, _SCAN_BYTES, True, None)
            if not got.data:
                return None
            records = MemoryRecords(got.data, origin=f"remote segment {md.remote_log_segment_id}", position=got.start,
                                    context={"segment_id": str(md.remote_log_segment_id)})
            for batch in records.batches():
                if batch.max_timestamp >= timestamp and batch.last_offset >= starting_offset:
                    for rec in batch.records():
                        if rec.timestamp >= timestamp and rec.offset >= starting_offset:
                            return TimestampAndOffset(rec.timestamp, rec.offset, batch.partition_leader_epoch)
                offset = batch.last_offset + 1
        return None
