"""The remote read path's rules one at a time (``tiered/remote_log_reader.py``), each at its boundary.

- The batch walk over one remote object: where it starts (the segment's start, the index's position, where a
  reader's previous read ended), what it skips (batches before the offset, by their headers), how much it returns
  (whole batches up to ``max_bytes``, one at least with ``min_one_message``, one straddling the first range), and
  every way it refuses an object: short of its metadata's size, cut inside a header or a batch, a batch overlapping
  the one before, a gap (unless compacted), a batch past the segment's end offset. Each error names the segment
  and the position.
- Sequential readers: bounded per scope, the oldest forgotten; a byte-range reader (the Spark source) and a log
  reader each get read-ahead only when they go on from where they stopped, and the next segment once per segment.
- ``Log.read``'s remote half: the segment by epoch or by offset alone, gaps between segments, out of range versus
  missing, a compacted log going on to the next segment and then to the local log, the metrics, the answer.
- Aborted transactions from the remote transaction indexes then the local ones; the timestamp scan.

The reader runs over in-memory fakes of its ports (the segment cache, the metadata store, the index cache, a log),
so each rule is seen alone and every range it asks for is recorded. The end-to-end paths are in
``test_remote_tier.py`` and ``test_verified_reads.py`` (there the chunk checksums catch a damaged byte before the
walk sees it, which is why the walk's own checks are tested here, on objects without checksums).
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from local.errors import CorruptRecordError, KafkaStorageError, OffsetOutOfRangeError
from local.fetch import FetchIsolation, LogOffsetMetadata
from local.index.entries import AbortedTxn, TxnIndexSearchResult
from local.records import MemoryRecords, SimpleRecord
from local.records.batch import LENGTH_OFFSET
from local.records.constants import INT32_MAX
from tiered import remote_log_reader
from tiered.errors import RemoteResourceNotFoundError, TieredStorageError
from tiered.rate_limiter import RateLimiter
from tiered.remote_log_reader import NOTHING, READ_SLACK, RemoteLogReader, SequentialReaders
from tiered.rlm_metrics import RemoteLogMetrics
from tiered.rsm import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition

T0 = 1_700_000_000_000
TIP = TopicIdPartition(uuid.UUID(int=7), "t", 0)


# --------------------------------------------------------------------------------------------------------------
# Fakes of the reader's ports


def _batch(base: int, n: int, *, value_size: int = 50, ts: int | None = None, epoch: int = 0, fill: bytes = b"v") -> bytes:
    """One v2 batch of ``n`` records from ``base``; record i is stamped ``ts + i`` (default ``T0 + offset``)."""
    start_ts = T0 + base if ts is None else ts
    recs = [SimpleRecord(start_ts + i, b"k", b"%08d" % (base + i) + fill * value_size) for i in range(n)]
    return bytes(MemoryRecords.build(recs, base_offset=base, partition_leader_epoch=epoch))


@dataclass
class _Segment:
    md: RemoteLogSegmentMetadata
    data: bytearray
    positions: list[int]  # of each batch
    bases: list[int]  # base offset of each batch

    def batches(self, first: int, last: int) -> bytes:
        """The bytes of batches ``first..last-1``."""
        end = self.positions[last] if last < len(self.positions) else len(self.data)
        return bytes(self.data[self.positions[first]:end])


def _segment(start: int, batches: int = 5, per: int = 10, *, value_size: int = 50, epochs: dict[int, int] | None = None,
             size: int | None = None, end: int | None = None, ts: int | None = None, bases: list[int] | None = None,
             leader_epoch: int = 0, fill: bytes = b"v") -> _Segment:
    """A remote segment of ``batches`` batches of ``per`` records from ``start`` (or from each of ``bases``)."""
    data, positions = bytearray(), []
    bases = bases or [start + b * per for b in range(batches)]
    for base in bases:
        positions.append(len(data))
        data += _batch(base, per, value_size=value_size, ts=None if ts is None else ts + base - start, epoch=leader_epoch,
                       fill=fill)
    last = bases[-1] + per - 1
    md = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TIP, uuid.uuid4()), start, last if end is None else end,
        (T0 + last) if ts is None else ts + last - start, 0, T0, len(data) if size is None else size,
        epochs or {0: start}, state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    return _Segment(md, data, positions, bases)


class _Segments:
    """The segment cache: objects in memory; every read and prefetch recorded. A read allowed to run on
    (``spare``) returns ``SPARE`` bytes more, as a cache holding the rest of a chunk may."""

    SPARE = 1000

    def __init__(self, *segments: _Segment) -> None:
        self.objects = {s.md.remote_log_segment_id: s.data for s in segments}
        self.reads: list[tuple[RemoteLogSegmentId, int, int]] = []
        self.spares: list[bool] = []
        self.prefetched: list[tuple[RemoteLogSegmentId, int]] = []
        self.reaches_end = False

    def read(self, md: RemoteLogSegmentMetadata, start: int, end: int, *, spare: bool = False) -> bytes | memoryview:
        self.reads.append((md.remote_log_segment_id, start, end))
        self.spares.append(spare)
        return memoryview(bytes(self.objects[md.remote_log_segment_id]))[start:end + (self.SPARE if spare else 0)]

    def prefetch(self, md: RemoteLogSegmentMetadata, position: int) -> bool:
        self.prefetched.append((md.remote_log_segment_id, position))
        return self.reaches_end


class _Store:
    """The metadata store: a segment by epoch answers only for a segment of that epoch holding the offset."""

    def __init__(self, *segments: _Segment) -> None:
        self.mds = sorted((s.md for s in segments), key=lambda m: m.start_offset)

    def readable_segments(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        assert tip == TIP
        return list(self.mds)

    def remote_log_segment_metadata(self, tip: TopicIdPartition, offset: int, leader_epoch: int) -> RemoteLogSegmentMetadata | None:
        assert tip == TIP
        return next((m for m in self.mds if leader_epoch in m.segment_leader_epochs
                     and m.start_offset <= offset <= m.end_offset), None)


@dataclass
class _Index:
    """The index cache: per segment, a sparse offset index (offset -> position); transaction index answers."""

    entries: dict[RemoteLogSegmentId, dict[int, int]] = field(default_factory=dict)
    txns: dict[RemoteLogSegmentId, TxnIndexSearchResult] = field(default_factory=dict)
    lookups: list[tuple[RemoteLogSegmentId, int]] = field(default_factory=list)
    txn_searches: list[tuple[RemoteLogSegmentId, int, int]] = field(default_factory=list)

    def lookup_offset(self, md: RemoteLogSegmentMetadata, offset: int) -> int:
        sid = md.remote_log_segment_id
        self.lookups.append((sid, offset))
        below = [o for o in self.entries.get(sid, {}) if o <= offset]
        return self.entries[sid][max(below)] if below else 0

    def lookup_timestamp_offset(self, md: RemoteLogSegmentMetadata, timestamp: int) -> int:
        return md.start_offset  # no time index entries: a search by timestamp starts at the segment's base offset

    def collect_aborted_txns(self, md: RemoteLogSegmentMetadata, fetch_offset: int, upper: int) -> TxnIndexSearchResult:
        self.txn_searches.append((md.remote_log_segment_id, fetch_offset, upper))
        return self.txns.get(md.remote_log_segment_id, TxnIndexSearchResult())


class _Epochs:
    def __init__(self, entries: list[tuple[int, int]]) -> None:
        self.entries = entries  # (epoch, start offset)

    def epoch_for_offset(self, offset: int) -> int | None:
        found = [e for e, start in self.entries if start <= offset]
        return found[-1] if found else None


class _Log:
    """What the reader uses of a Log; its own reads and transaction searches recorded."""

    def __init__(self, *, log_start: int = 0, local_start: int = 10**9, compact: bool = False,
                 epochs: list[tuple[int, int]] | None = None) -> None:
        self.topic_id, self.topic, self.partition, self.name = TIP.topic_id, TIP.topic, TIP.partition, "t-0"
        self.config = SimpleNamespace(cleanup_policy=["compact"] if compact else ["delete"])
        self.leader_epoch_cache = _Epochs([(0, 0)] if epochs is None else epochs)
        self.log_start_offset = log_start
        self.local_log_start_offset = local_start
        self.local_reads: list[tuple[int, int, FetchIsolation, bool]] = []
        self.local_txns: list[tuple[int, int]] = []
        self.local_aborted: list[AbortedTxn] = []

    def read(self, offset: int, max_bytes: int, isolation: FetchIsolation, min_one_message: bool) -> str:
        self.local_reads.append((offset, max_bytes, isolation, min_one_message))
        return "local answer"

    def collect_aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]:
        self.local_txns.append((start, upper))
        return list(self.local_aborted)


class _Tier:
    def __init__(self, *segments: _Segment, quota: RateLimiter | None = None) -> None:
        self.segs = segments
        self.segments = _Segments(*segments)
        self.store = _Store(*segments)
        self.index = _Index()
        self.metrics = RemoteLogMetrics(CollectorRegistry())
        self.reader = RemoteLogReader(self.store, self.index, self.segments, fetch_quota=quota,  # type: ignore[arg-type]
                                      metrics=self.metrics)

    def read(self, log: _Log, offset: int, max_bytes: int = 1 << 20, *, min_one: bool = True,
             isolation: FetchIsolation = FetchIsolation.LOG_END) -> Any:
        return self.reader.read(log, offset, max_bytes, isolation, min_one)  # type: ignore[arg-type]


def _counter(c: Any) -> float:
    return float(c._value.get())


def _offsets(data: bytes | memoryview) -> list[int]:
    return [r.offset for r in MemoryRecords(bytes(data)).records()]


def _damage(err: pytest.ExceptionInfo[CorruptRecordError], seg: _Segment, position: int) -> str:
    """The error names the segment (in its text and its fields) and the position: its text."""
    e = err.value
    sid = seg.md.remote_log_segment_id
    assert e.segment_id == str(sid) and e.position == position, (e.context, position)  # type: ignore[attr-defined]
    assert str(sid) in str(e) and f"position {position}" in str(e)
    return str(e)


# --------------------------------------------------------------------------------------------------------------
# The batch walk (read_segment)


def test_a_read_from_the_segment_start_or_below_needs_no_index_and_a_later_one_starts_at_the_indexs_position() -> None:
    seg = _segment(100, batches=6)
    tier = _Tier(seg)
    for offset in (100, 99):  # below the start: a read in a gap before the segment's first batch
        got = tier.reader.read_segment(seg.md, offset, 1 << 20, True)
        assert got.found and got.start == 0 and _offsets(got.data)[0] == 100
    assert tier.index.lookups == []
    tier.index.entries[seg.md.remote_log_segment_id] = {120: seg.positions[2]}
    tier.segments.reads.clear()
    got = tier.reader.read_segment(seg.md, 101, 1 << 20, True)  # one past the start: the index answers 0
    assert tier.index.lookups == [(seg.md.remote_log_segment_id, 101)] and got.start == 0
    tier.segments.reads.clear()
    got = tier.reader.read_segment(seg.md, 135, 1 << 20, True)
    assert tier.segments.reads[0][1] == seg.positions[2]  # the first range starts at the index's position
    assert got.start == seg.positions[3] and _offsets(got.data)[0] == 130  # 120..129 skipped by its header
    assert bytes(got.data) == seg.batches(3, 6) and got.end == len(seg.data) and got.next_offset == 160


def test_whole_batches_up_to_max_bytes_and_one_at_least_with_min_one_message() -> None:
    seg = _segment(0, batches=5)
    tier = _Tier(seg)
    one = seg.positions[1]
    got = tier.reader.read_segment(seg.md, 0, 2 * one, False)  # exactly two batches fit: both
    assert bytes(got.data) == seg.batches(0, 2) and (got.end, got.next_offset) == (2 * one, 20)
    got = tier.reader.read_segment(seg.md, 0, 2 * one - 1, False)
    assert bytes(got.data) == seg.batches(0, 1) and got.next_offset == 10
    got = tier.reader.read_segment(seg.md, 15, one - 1, False)  # nothing fits: nothing, but found
    assert got.found and bytes(got.data) == b"" and (got.start, got.end, got.next_offset) == (one, one, 15)
    got = tier.reader.read_segment(seg.md, 15, one - 1, True)
    assert bytes(got.data) == seg.batches(1, 2) and got.next_offset == 20
    got = tier.reader.read_segment(seg.md, 0, 0, True)  # max_bytes 0: the first range is 1 byte + the slack
    assert tier.segments.reads[-1][1:] == (0, 1 + READ_SLACK) and bytes(got.data) == seg.batches(0, 1)


def test_batches_straddling_the_first_range_are_completed_with_further_reads() -> None:
    seg = _segment(0, batches=6, per=2, value_size=50_000)  # ~100 KB batches: the first range ends inside one
    tier = _Tier(seg)
    got = tier.reader.read_segment(seg.md, 0, 1, True)
    assert bytes(got.data) == seg.batches(0, 1) and got.next_offset == 2
    first = tier.segments.reads[0]  # it may run on (spare): the next read starts where its bytes ended
    assert first[1:] == (0, 1 + READ_SLACK) and tier.segments.reads[1][1] == 1 + READ_SLACK + _Segments.SPARE
    got = tier.reader.read_segment(seg.md, 9, 1, True)  # skipping batches past the first range
    assert bytes(got.data) == seg.batches(4, 5) and got.start == seg.positions[4]
    got = tier.reader.read_segment(seg.md, 11, 1, True)  # the last: the further read ends with the object
    assert bytes(got.data) == seg.batches(5, 6) and got.end == len(seg.data)


def test_a_first_range_ending_exactly_between_two_batches_reads_on_up_to_max_bytes() -> None:
    seg = _segment(0, batches=12, per=2, value_size=12_000)
    size = seg.positions[1]  # every batch the same size
    tier = _Tier(seg)
    tier.segments.SPARE = 0  # the cache returns exactly the range
    # the first range, [0, 6 batches), holds the 4 skipped and 2 whole ones; max_bytes allows a third
    got = tier.reader.read_segment(seg.md, 8, 6 * size - READ_SLACK, True)
    assert tier.segments.reads[0][1:] == (0, 6 * size) and 3 * size <= 6 * size - READ_SLACK < 4 * size
    assert bytes(got.data) == seg.batches(4, 7) and got.next_offset == 14


@pytest.mark.parametrize("extra", [1, 10, 11, 12, 16, 17, 26, 27, 30])
def test_a_first_range_ending_inside_a_batch_header_is_completed(extra: int) -> None:
    seg = _segment(0, batches=8, per=2, value_size=12_000)  # ~24 KB batches: the 4th starts past the slack
    tier = _Tier(seg)
    at = seg.positions[4]
    max_bytes = at + extra - READ_SLACK  # the first range from 0 ends ``extra`` bytes into the 4th batch's header
    got = tier.reader.read_segment(seg.md, 11, max_bytes, True)  # skipping over the 4th: the 6th
    assert tier.segments.reads[0][1:] == (0, at + extra)
    assert got.start == seg.positions[5] and bytes(got.data)[:seg.positions[1]] == seg.batches(5, 6)


def test_a_read_past_the_last_batch_finds_nothing_when_the_object_is_whole() -> None:
    seg = _segment(0, batches=3)
    assert _Tier(seg).reader.read_segment(seg.md, 30, 1 << 20, True) is NOTHING
    clamped = _segment(0, batches=3, size=INT32_MAX)  # a clamped size is not a size: the end is learnt by reading
    assert _Tier(clamped).reader.read_segment(clamped.md, 30, 1 << 20, True) is NOTHING


def test_an_object_shorter_than_its_metadata_says_is_an_error_naming_where_it_ends() -> None:
    seg = _segment(0, batches=3)
    seg.md = dataclasses.replace(seg.md, segment_size_in_bytes=len(seg.data) + 1)
    with pytest.raises(CorruptRecordError) as err:
        _Tier(seg).reader.read_segment(seg.md, 30, 1 << 20, True)
    text = _damage(err, seg, len(seg.data))
    assert f"is short: it ends after {len(seg.data)} bytes, its metadata says {len(seg.data) + 1}" in text
    assert f"(object of {len(seg.data) + 1} bytes)" in text and err.value.offset == 30  # type: ignore[attr-defined]


@pytest.mark.parametrize("cut", [1, 10, 11, 12, 15, 16, 17, 20, 26, 27])
def test_an_object_cut_inside_a_batch_header_is_an_error_at_the_header(cut: int) -> None:
    seg = _segment(0, batches=3)
    at = seg.positions[2]
    del seg.data[at + cut:]
    tier = _Tier(seg)
    # the header up to the last offset delta is 27 bytes: with all of them, it is the batch that is cut
    what = "ends inside a batch header" if cut < 27 else f"ends inside a batch of {seg.positions[1]} bytes (27 present)"
    with pytest.raises(CorruptRecordError) as err:  # walking past it: the skip
        tier.reader.read_segment(seg.md, 25, 1 << 20, True, position=seg.positions[1])
    assert what in _damage(err, seg, at)
    # reading the batches before it: they come back; the next read, which starts at it, raises
    got = tier.reader.read_segment(seg.md, 10, 1 << 20, True)
    assert bytes(got.data) == seg.batches(1, 2) and got.end == at
    with pytest.raises(CorruptRecordError) as err:
        tier.reader.read_segment(seg.md, 20, 1 << 20, True, position=at)
    assert what in _damage(err, seg, at)
    # an object whose size the metadata does not know (clamped): the error says only "object"
    seg.md = dataclasses.replace(seg.md, segment_size_in_bytes=INT32_MAX)
    with pytest.raises(CorruptRecordError) as err:
        tier.reader.read_segment(seg.md, 20, 1 << 20, True, position=at)
    assert f"(object) {what} at position {at}" in _damage(err, seg, at)


def test_a_batch_length_below_a_header_is_an_error_naming_the_segment_and_position() -> None:
    seg = _segment(0, batches=3)
    struct.pack_into(">i", seg.data, seg.positions[1] + LENGTH_OFFSET, 3)
    with pytest.raises(CorruptRecordError) as err:
        _Tier(seg).reader.read_segment(seg.md, 15, 1 << 20, True)
    text = _damage(err, seg, seg.positions[1])
    assert f"remote segment {seg.md.remote_log_segment_id}" in text and err.value.offset == 15  # type: ignore[attr-defined]
    with pytest.raises(CorruptRecordError) as err:  # a read starting there: the position in the object, not the read
        _Tier(seg).reader.read_segment(seg.md, 10, 1 << 20, True, position=seg.positions[1])
    _damage(err, seg, seg.positions[1])


@pytest.mark.parametrize("length", [-12, -1, 0, 3, 48])  # a size of 0 once walked on forever
def test_a_damaged_length_after_the_first_batch_returns_the_batches_before_it_and_then_raises(length: int) -> None:
    seg = _segment(0, batches=3)
    struct.pack_into(">i", seg.data, seg.positions[1] + LENGTH_OFFSET, length)
    tier = _Tier(seg)
    got = tier.reader.read_segment(seg.md, 0, 1 << 20, True)
    assert bytes(got.data) == seg.batches(0, 1) and (got.end, got.next_offset) == (seg.positions[1], 10)
    with pytest.raises(CorruptRecordError) as err:  # the next read starts at the damaged batch
        tier.reader.read_segment(seg.md, 10, 1 << 20, True, position=got.end)
    assert "declares size" in _damage(err, seg, seg.positions[1])


def test_an_object_cut_inside_a_batch_returns_the_whole_batches_before_it_and_then_raises() -> None:
    seg = _segment(0, batches=3)
    at = seg.positions[2]
    del seg.data[at + 100:]
    tier = _Tier(seg)
    got = tier.reader.read_segment(seg.md, 0, 1 << 20, True)
    assert bytes(got.data) == seg.batches(0, 2) and got.next_offset == 20
    with pytest.raises(CorruptRecordError) as err:
        tier.reader.read_segment(seg.md, 20, 1 << 20, True)
    size = seg.positions[1]
    assert f"ends inside a batch of {size} bytes (100 present)" in _damage(err, seg, at)


@pytest.mark.parametrize("relabel", [-1, -4])
def test_a_batch_overlapping_the_one_before_is_an_error(relabel: int) -> None:
    seg = _segment(0, batches=4)
    at = seg.positions[2]
    struct.pack_into(">q", seg.data, at, 20 + relabel)  # 19..28 (or 16..25) after 10..19: an overlap
    tier = _Tier(seg)
    with pytest.raises(CorruptRecordError) as err:
        tier.reader.read_segment(seg.md, 25, 1 << 20, True)
    assert "overlap the offset 19 before it" in _damage(err, seg, at)
    # a resumed read (position known: the batch before ended at offset - 1) checks the same
    with pytest.raises(CorruptRecordError) as err:
        tier.reader.read_segment(seg.md, 20, 1 << 20, True, position=at)
    assert "overlap the offset 19 before it" in _damage(err, seg, at)
    # the first batch of a segment is checked against the segment's start
    first = _segment(50, batches=2)
    struct.pack_into(">q", first.data, 0, 49)
    with pytest.raises(CorruptRecordError) as err:
        _Tier(first).reader.read_segment(first.md, 50, 1 << 20, True)
    assert "overlap the offset 49 before it" in _damage(err, first, 0)


def test_a_batch_at_the_indexs_position_checks_its_base_offset_against_nothing_before_it() -> None:
    seg = _segment(0, batches=4, per=1)  # one record a batch: offsets 0..3
    tier = _Tier(seg)
    tier.index.entries[seg.md.remote_log_segment_id] = {1: seg.positions[1]}
    got = tier.reader.read_segment(seg.md, 1, 1 << 20, True)  # found at the index's position: base 1 is fine
    assert got.start == seg.positions[1] and _offsets(got.data) == [1, 2, 3]
    big = _segment(0, batches=3, per=10)
    struct.pack_into(">q", big.data, big.positions[1], -1)  # a base offset damaged to -1 (outside the CRC)
    tier = _Tier(big)
    tier.index.entries[big.md.remote_log_segment_id] = {5: big.positions[1]}
    with pytest.raises(CorruptRecordError) as err:
        tier.reader.read_segment(big.md, 5, 1 << 20, True)
    assert "holds a batch with offsets -1..8 that overlap the offset -1 before it" in _damage(err, big, big.positions[1])


@pytest.mark.parametrize("fill", [b"v", b"\0"])  # values of zero bytes: no stray byte may stand in for the magic
def test_a_batch_after_the_offset_asked_for_answers_a_read_in_a_gap_when_it_is_intact(fill: bytes) -> None:
    gapped = _segment(0, per=10, bases=[0, 10, 25, 35], fill=fill)  # 20..24 gone, as a cleaner leaves them
    tier = _Tier(gapped)
    got = tier.reader.read_segment(gapped.md, 21, 1 << 20, True)
    assert _offsets(got.data)[0] == 25 and got.start == gapped.positions[2]
    assert _offsets(tier.reader.read_segment(gapped.md, 25, 1 << 20, True).data)[0] == 25  # exactly its base: fine
    # a base offset damaged upwards (20..29 relabelled 25..34) opens a gap that the batch after it contradicts
    seg = _segment(0, batches=4, fill=fill)
    at = seg.positions[2]
    struct.pack_into(">q", seg.data, at, 25)
    tier = _Tier(seg)
    with pytest.raises(CorruptRecordError) as err:
        tier.reader.read_segment(seg.md, 21, 1 << 20, True)
    assert ("has no batch holding offset 21: the batch found holds offsets 25..34 and the batch after it starts at "
            "offset 30") in _damage(err, seg, at)
    # ... and the batch after a gap must pass its CRC
    bad = _segment(0, per=10, bases=[0, 10, 25, 35], fill=fill)
    bad.data[bad.positions[2] + 70] ^= 0x01
    with pytest.raises(CorruptRecordError, match=f"is corrupt: position {bad.positions[2]} of remote segment"):
        _Tier(bad).reader.read_segment(bad.md, 21, 1 << 20, True)


def test_a_batch_relabelled_downwards_before_a_gap_is_an_error() -> None:
    seg = _segment(0, batches=5)
    struct.pack_into(">q", seg.data, seg.positions[2], 12)  # 20..29 relabelled 12..21: it overlaps 10..19
    tier = _Tier(seg)
    with pytest.raises(CorruptRecordError) as err:
        tier.reader.read_segment(seg.md, 25, 1 << 20, True)  # walks over it into a "gap" 22..29
    assert "the batch before the gap the read found overlaps the one before it" in _damage(err, seg, seg.positions[2])


def test_a_batch_past_the_segments_end_offset_is_an_error_first_and_a_stop_later() -> None:
    seg = _segment(0, batches=4, end=29)  # the metadata ends at 29: the last batch (30..39) is past it
    tier = _Tier(seg)
    got = tier.reader.read_segment(seg.md, 0, 1 << 20, True)
    assert bytes(got.data) == seg.batches(0, 3) and got.next_offset == 30
    with pytest.raises(CorruptRecordError) as err:
        tier.reader.read_segment(seg.md, 30, 1 << 20, True, position=seg.positions[3])
    assert "holds a batch ending at offset 39, past the segment's end offset 29" in _damage(err, seg, seg.positions[3])
    whole = _segment(0, batches=4)  # ending exactly at the end offset: returned
    assert _offsets(_Tier(whole).reader.read_segment(whole.md, 30, 1 << 20, True).data)[-1] == 39


def test_every_range_counts_against_the_fetch_quota() -> None:
    asked: list[int] = []

    class Quota(RateLimiter):
        def acquire(self, n: int) -> None:
            asked.append(n)

    seg = _segment(0, batches=2)
    tier = _Tier(seg, quota=Quota(None))
    tier.reader.read_segment(seg.md, 0, 100, True)
    tier.reader.read_segment(seg.md, 10, 100, True, position=seg.positions[1])
    tier.reader.read_range(seg.md, 50, 70)
    assert asked == [end - start for _, start, end in tier.segments.reads] and asked[0] == asked[1] == 100 + READ_SLACK
    assert asked[-1] == 20


def test_only_a_walks_first_range_may_run_on_past_its_end() -> None:
    seg = _segment(0, batches=6, per=2, value_size=50_000)  # the first range ends inside the first batch
    tier = _Tier(seg)
    assert bytes(tier.reader.read_segment(seg.md, 0, 1, True).data) == seg.batches(0, 1)
    assert tier.segments.spares[0] is True and len(tier.segments.spares) > 1 and not any(tier.segments.spares[1:])
    tier.segments.spares.clear()
    assert bytes(tier.reader.read_range(seg.md, 0, 10)) == bytes(seg.data[:10])  # exactly the range asked for
    assert tier.segments.spares == [False]


# --------------------------------------------------------------------------------------------------------------
# Sequential readers


def test_sequential_readers_are_bounded_per_scope_oldest_forgotten_first() -> None:
    readers = SequentialReaders(per_scope=3)
    for point in range(4):
        readers.note("a", point, f"v{point}")
    readers.note("b", 0, "other scope")
    assert readers.take("a", 0) is None  # the oldest went
    assert [readers.take("a", p) for p in (1, 2, 3)] == ["v1", "v2", "v3"]
    assert readers.take("a", 3) is None  # taken: the reader moved on
    readers.note("a", 7, "x")
    readers.note("a", 8, "y")
    readers.note("a", 9, "z")  # exactly per_scope: none forgotten
    assert readers.take("a", 7) == "x"
    assert readers.take("b", 0) == "other scope" and readers.take("c", 0) is None
    readers.note("b", 1, "again")
    readers.forget("b")
    readers.forget("never noted")
    assert readers.take("b", 1) is None and readers.take("a", 8) == "y"


def test_sequential_readers_forget_the_scope_noted_least_recently_beyond_their_bound() -> None:
    # Regression: every segment a byte-range reader (the Spark source) reads is a scope, and scopes were never
    # forgotten (``forget`` had no caller): a long-lived process kept an entry for every segment it ever read.
    readers = SequentialReaders(per_scope=4, scopes=2)
    readers.note("a", 1, "a1")
    readers.note("b", 1, "b1")
    readers.note("a", 2, "a2")  # a noted again: b is now the least recent
    readers.note("c", 1, "c1")  # a third scope: b goes
    assert readers.take("b", 1) is None
    assert (readers.take("a", 1), readers.take("a", 2), readers.take("c", 1)) == ("a1", "a2", "c1")
    seg = _segment(0, batches=2)
    tier = _Tier(seg)
    many = [dataclasses.replace(seg.md, remote_log_segment_id=RemoteLogSegmentId(TIP, uuid.uuid4())) for _ in range(5)]
    for md in many:
        tier.segments.objects[md.remote_log_segment_id] = seg.data
    tier.reader.readers = SequentialReaders(scopes=3)
    for md in many:
        tier.reader.read_range(md, 0, 100)
    tier.segments.prefetched.clear()
    tier.reader.read_range(many[0], 100, 200)  # its scope was forgotten: not a sequential read any more
    tier.reader.read_range(many[-1], 100, 200)
    assert tier.segments.prefetched == [(many[-1].remote_log_segment_id, 100)]


def test_a_byte_range_reader_gets_read_ahead_from_the_start_and_when_it_goes_on() -> None:
    seg, other = _segment(0, batches=4), _segment(40, batches=4)
    tier = _Tier(seg, other)
    sid = seg.md.remote_log_segment_id
    assert bytes(tier.reader.read_range(seg.md, 0, 100)) == bytes(seg.data[:100])
    assert tier.segments.prefetched == [(sid, 0)]
    assert bytes(tier.reader.read_range(seg.md, 100, 300)) == bytes(seg.data[100:300])  # goes on: read ahead
    assert tier.segments.prefetched == [(sid, 0), (sid, 100)]
    tier.reader.read_range(other.md, 300, 400)  # another segment's range at that point: not this reader
    tier.reader.read_range(seg.md, 250, 300)  # not where a read ended
    tier.reader.read_range(seg.md, 1, 2)
    assert tier.segments.prefetched == [(sid, 0), (sid, 100)]
    tier.reader.read_range(seg.md, 300, 350)  # where the second read ended: once
    tier.reader.read_range(seg.md, 300, 350)
    assert tier.segments.prefetched[2:] == [(sid, 300)]
    assert tier.segments.reads[-1] == (sid, 300, 350)
    end = len(seg.data)
    assert bytes(tier.reader.read_range(seg.md, end - 10, end + 10)) == bytes(seg.data[-10:])  # fewer at the end


def test_a_log_reader_going_on_needs_no_index_and_gets_the_next_segment_read_ahead_once() -> None:
    # the second segment holds one offset: the one read ahead after the first is it, not the one after it
    first, second, third = _segment(0, batches=4), _segment(40, batches=1, per=1), _segment(41, batches=4)
    tier = _Tier(first, second, third)
    log = _Log()
    one = first.positions[1]
    info = tier.read(log, 0, one)
    assert _offsets(bytes(info.records))[-1] == 9
    assert tier.segments.prefetched == [(first.md.remote_log_segment_id, 0)]
    tier.segments.reaches_end = True
    info = tier.read(log, 10, one)  # goes on at the position where the first read ended
    assert tier.index.lookups == [] and info.records.position == one
    assert tier.segments.prefetched[1:] == [(first.md.remote_log_segment_id, one),
                                            (second.md.remote_log_segment_id, 0)]
    tier.read(log, 20, one)  # the next segment is read ahead once
    assert tier.segments.prefetched[2:] == [(second.md.remote_log_segment_id, 0), (first.md.remote_log_segment_id, 2 * one)]
    tier.read(log, 30, one)
    tier.read(log, 40, one)  # starting the one-offset segment, resumed: the next one (41..) read ahead
    assert tier.segments.prefetched[-1] == (third.md.remote_log_segment_id, 0)
    assert tier.index.lookups == []
    # a read from elsewhere is not a sequential reader's: the index, no read-ahead
    tier.segments.prefetched.clear()
    tier.read(log, 55, one)
    assert tier.segments.prefetched == [] and tier.index.lookups == [(third.md.remote_log_segment_id, 55)]


def test_a_reader_starting_a_segment_gets_it_read_ahead_but_not_the_next_until_it_goes_on() -> None:
    first, second, third = _segment(0, batches=4), _segment(40, batches=4), _segment(80, batches=4)
    tier = _Tier(first, second, third)
    tier.segments.reaches_end = True
    tier.read(_Log(), 40, 100)
    assert tier.segments.prefetched == [(second.md.remote_log_segment_id, 0)]  # its start: read ahead, nothing more


# --------------------------------------------------------------------------------------------------------------
# Log.read's remote half


def test_the_segment_is_found_by_the_offsets_epoch_and_by_offset_alone_without_one() -> None:
    old, new = _segment(0, batches=2, epochs={0: 0}), _segment(20, batches=2, epochs={1: 20})
    tier = _Tier(old, new)
    log = _Log(epochs=[(0, 0), (1, 20)])
    assert tier.reader.segment_for_offset(log, TIP, 25) == new.md  # type: ignore[arg-type]
    assert tier.reader.segment_for_offset(log, TIP, 19) == old.md  # type: ignore[arg-type]
    # no epoch for the offset, or the store has none of that epoch there: the offsets alone
    assert tier.reader.segment_for_offset(_Log(epochs=[]), TIP, 25) == new.md  # type: ignore[arg-type]
    assert tier.reader.segment_for_offset(_Log(epochs=[(5, 0)]), TIP, 25) == new.md  # type: ignore[arg-type]
    assert tier.reader.segment_for_offset(_Log(epochs=[(5, 0)]), TIP, 20) == new.md  # type: ignore[arg-type]
    assert tier.reader.segment_for_offset(_Log(epochs=[(5, 0)]), TIP, 39) == new.md  # type: ignore[arg-type]
    assert tier.reader.segment_for_offset(_Log(epochs=[(5, 0)]), TIP, 40) is None  # type: ignore[arg-type]
    gap = _Tier(_segment(0, batches=1), _segment(30, batches=1))
    assert gap.reader.segment_for_offset(_Log(epochs=[]), TIP, 15).start_offset == 30  # type: ignore[arg-type, union-attr]


def test_of_two_segments_holding_an_offset_the_one_of_the_offsets_epoch_is_read() -> None:
    # a previous leader's copy of 20..39 (epoch 0) and the current lineage's (epoch 1, from offset 20): both
    # FINISHED, the stale one first by start offset; the offset's epoch picks the right one
    stale = _segment(20, batches=2, epochs={0: 20}, ts=T0 + 5000)
    current = _segment(20, batches=2, epochs={1: 20}, ts=T0 + 7000)
    tier = _Tier(stale, current)
    tier.store.mds = [stale.md, current.md]
    log = _Log(epochs=[(0, 0), (1, 20)])
    assert tier.reader.segment_for_offset(log, TIP, 25) == current.md  # type: ignore[arg-type]
    info = tier.read(log, 25)
    assert bytes(info.records) == current.batches(0, 2) != stale.batches(0, 2)
    assert tier.reader.segment_for_offset(_Log(epochs=[]), TIP, 25) == stale.md  # type: ignore[arg-type]


def test_an_offset_no_remote_segment_holds_is_out_of_range_below_the_log_start_else_missing() -> None:
    tier = _Tier(_segment(100, batches=2))  # 100..119; retention moved the log start past it since
    log = _Log(log_start=150, local_start=500)
    with pytest.raises(OffsetOutOfRangeError) as err:
        tier.read(log, 149)
    assert (err.value.offset, err.value.log_start_offset) == (149, 150)  # type: ignore[attr-defined]
    assert str(err.value) == "offset 149 of t-0 is below the log start offset 150"
    with pytest.raises(RemoteResourceNotFoundError) as missing:
        tier.read(log, 150)  # at or above the log start: the tier's data is missing
    assert missing.value.offset == 150 and f"no remote segment of {TIP} holds offset 150" in str(missing.value)  # type: ignore[attr-defined]
    assert "log start offset 150, local log start offset 500" in str(missing.value)
    empty = _Tier()
    with pytest.raises(RemoteResourceNotFoundError):
        empty.read(_Log(log_start=50), 50)
    assert _counter(empty.metrics.fetch_errors) == 1 and _counter(empty.metrics.fetch_requests) == 1


def test_a_gap_between_remote_segments_is_an_error_unless_the_log_is_compacted() -> None:
    before, after = _segment(0, batches=2), _segment(30, batches=2)
    tier = _Tier(before, after)
    log = _Log(epochs=[])
    with pytest.raises(CorruptRecordError) as err:
        tier.read(log, 20)
    assert "offsets 20..29 of t-0 are in no remote segment" in str(err.value)
    assert err.value.offset == 20 and err.value.segment_id == str(after.md.remote_log_segment_id)  # type: ignore[attr-defined]
    info = tier.read(_Log(epochs=[], compact=True), 20)
    assert _offsets(bytes(info.records))[0] == 30


def test_a_segment_ending_cleanly_before_its_end_offset_leads_to_the_next_and_a_short_one_is_an_error() -> None:
    # metadata 0..29, batches 0..19, the object as long as the metadata says: a gap at the segment's end (a cleaner's)
    gapped, following = _segment(0, batches=2, end=29), _segment(30, batches=2)
    tier = _Tier(gapped, following)
    for offset in (25, 29):
        info = tier.read(_Log(), offset)
        assert _offsets(bytes(info.records))[0] == 30 and info.fetch_offset_metadata.message_offset == offset
    short = _segment(0, batches=2, end=29)
    short.md = dataclasses.replace(short.md, segment_size_in_bytes=len(short.data) + 100)  # the object is cut
    tier = _Tier(short, following)
    with pytest.raises(CorruptRecordError, match="is short") as err:
        tier.read(_Log(), 25)
    assert err.value.segment_id == str(short.md.remote_log_segment_id)  # type: ignore[attr-defined]
    clamped = _segment(0, batches=2, end=29, size=2**31 - 1)  # a size the metadata cannot say: only compacted logs
    tier = _Tier(clamped, following)
    with pytest.raises(CorruptRecordError, match=r"ends before offset 25 \(its metadata says it holds 0\.\.29\)"):
        tier.read(_Log(), 25)
    assert _offsets(bytes(tier.read(_Log(compact=True), 25).records))[0] == 30


def test_a_compacted_log_goes_on_to_the_local_log_after_its_last_remote_segment() -> None:
    seg = _segment(0, batches=2, end=29)
    tier = _Tier(seg)
    log = _Log(compact=True, local_start=30)
    assert tier.read(log, 25, 4096) == "local answer"
    assert tier.read(log, 25, 4096, min_one=False, isolation=FetchIsolation.TXN_COMMITTED) == "local answer"
    assert log.local_reads == [(30, 4096, FetchIsolation.LOG_END, True), (30, 4096, FetchIsolation.TXN_COMMITTED, False)]
    higher = _Log(compact=True, local_start=31)  # the local log starts later: the offset is in no segment
    with pytest.raises(RemoteResourceNotFoundError):
        tier.read(higher, 25)


def test_the_answer_knows_its_segment_and_position_and_the_metrics_count_it() -> None:
    seg = _segment(0, batches=3)
    tier = _Tier(seg)
    info = tier.read(_Log(), 15, 1 << 20)
    sid = seg.md.remote_log_segment_id
    assert info.records.origin == f"remote segment {sid}" and info.records.position == seg.positions[1]
    assert info.fetch_offset_metadata == LogOffsetMetadata(15, -1, -1) and info.aborted_transactions is None
    assert info.first_entry_incomplete is False
    assert bytes(info.records) == seg.batches(1, 3)
    assert _counter(tier.metrics.fetch_requests) == 1 and _counter(tier.metrics.fetch_bytes) == len(seg.batches(1, 3))
    assert _counter(tier.metrics.fetch_errors) == 0
    seg.data[seg.positions[2] + 70] ^= 1  # a record byte: the CRC no longer matches
    with pytest.raises(CorruptRecordError) as err:
        list(tier.read(_Log(), 20).records.batches())
    assert err.value.segment_id == str(sid) and err.value.position == seg.positions[2]  # type: ignore[attr-defined]


# --------------------------------------------------------------------------------------------------------------
# Aborted transactions and the timestamp scan


def test_aborted_transactions_come_from_the_remote_indexes_from_the_segment_read_then_the_local_ones() -> None:
    """Kafka's collectAbortedTransactions: the search goes on, segment after segment and then the local log, until
    an entry says it is complete. It used to stop at the segment holding the last batch read: a transaction whose
    abort marker (and so its index entry) was in a later segment was not returned, and read_committed consumers got
    its records (a helper's pass over transactions in the remote tier)."""
    a, b, c = _segment(0, batches=2), _segment(20, batches=2), _segment(40, batches=2)
    tier = _Tier(a, b, c)
    txn = AbortedTxn(producer_id=1, first_offset=22, last_offset=30, last_stable_offset=31)
    tier.index.txns[b.md.remote_log_segment_id] = TxnIndexSearchResult([txn], True)  # complete: 31 >= upper
    log = _Log(local_start=60)
    info = tier.read(log, 25, b.positions[1], isolation=FetchIsolation.TXN_COMMITTED)  # 20..29: upper 30
    assert info.aborted_transactions == [txn]
    assert tier.index.txn_searches == [(b.md.remote_log_segment_id, 25, 30)]
    # an aborted transaction whose marker is in the next segment: found there
    later = AbortedTxn(producer_id=3, first_offset=35, last_offset=45, last_stable_offset=46)
    tier.index.txns[b.md.remote_log_segment_id] = TxnIndexSearchResult([], False)
    tier.index.txns[c.md.remote_log_segment_id] = TxnIndexSearchResult([later], True)
    tier.index.txn_searches.clear()
    info = tier.read(log, 30, 1 << 20, isolation=FetchIsolation.TXN_COMMITTED)  # 30..39: b ends exactly at 39
    assert info.aborted_transactions == [later]
    assert tier.index.txn_searches == [(b.md.remote_log_segment_id, 30, 40), (c.md.remote_log_segment_id, 30, 40)]
    assert log.local_txns == []
    tier.index.txns[b.md.remote_log_segment_id] = TxnIndexSearchResult([txn], False)
    tier.index.txns[c.md.remote_log_segment_id] = TxnIndexSearchResult([], False)
    # a search the remote segments do not complete goes on to the local indexes
    # batches reaching one offset past a segment: the next segment's index is searched too
    reader = tier.reader
    tier.index.txn_searches.clear()
    data = b.batches(0, 2) + _batch(40, 1)  # 20..40: upper 41
    assert reader.aborted_transactions(log, TIP, b.md, 20, data) == [txn]  # type: ignore[arg-type]
    assert tier.index.txn_searches == [(b.md.remote_log_segment_id, 20, 41), (c.md.remote_log_segment_id, 20, 41)]
    assert log.local_txns == [(20, 41)]  # not complete in the remote tier: the local indexes too
    log.local_txns.clear()
    # past the last remote segment: the local indexes complete the search
    local = AbortedTxn(producer_id=2, first_offset=58, last_offset=61, last_stable_offset=62)
    log.local_aborted = [local]
    tier.index.txn_searches.clear()
    data = b.batches(0, 2) + c.batches(0, 2) + _batch(60, 1)  # 20..60: upper 61
    assert reader.aborted_transactions(log, TIP, b.md, 20, data) == [txn, local]  # type: ignore[arg-type]
    assert [s[0] for s in tier.index.txn_searches] == [b.md.remote_log_segment_id, c.md.remote_log_segment_id]
    assert log.local_txns == [(20, 61)]
    # a complete answer stops the search at that segment
    tier.index.txns[b.md.remote_log_segment_id] = TxnIndexSearchResult([txn], True)
    assert reader.aborted_transactions(log, TIP, b.md, 20, data) == [txn]  # type: ignore[arg-type]
    assert log.local_txns == [(20, 61)]
    # no batches: the upper bound is the fetch offset
    tier.index.txn_searches.clear()
    tier.index.txns[c.md.remote_log_segment_id] = TxnIndexSearchResult([], True)
    reader.aborted_transactions(log, TIP, c.md, 45, b"")  # type: ignore[arg-type]
    assert tier.index.txn_searches == [(c.md.remote_log_segment_id, 45, 45)]


def test_aborted_transactions_of_a_segment_deleted_during_the_read_come_from_the_local_indexes() -> None:
    a, b = _segment(0, batches=2), _segment(20, batches=2)
    tier = _Tier(a, b)
    read = tier.segments.read

    def read_then_expire(md: RemoteLogSegmentMetadata, start: int, end: int, *, spare: bool = False) -> Any:
        tier.store.mds = [m for m in tier.store.mds if m is not b.md]  # expiration deletes b meanwhile
        return read(md, start, end, spare=spare)

    tier.segments.read = read_then_expire  # type: ignore[method-assign]
    log = _Log()
    info = tier.read(log, 25, b.positions[1], isolation=FetchIsolation.TXN_COMMITTED)
    assert _offsets(bytes(info.records))[0] == 20 and info.aborted_transactions == []
    assert tier.index.txn_searches == [] and log.local_txns == [(25, 30)]


def test_aborted_transactions_of_a_one_offset_segment_come_from_its_own_index() -> None:
    a, one = _segment(0, batches=2), _segment(20, batches=1, per=1)
    tier = _Tier(a, one)
    txn = AbortedTxn(producer_id=1, first_offset=20, last_offset=20, last_stable_offset=21)
    tier.index.txns[one.md.remote_log_segment_id] = TxnIndexSearchResult([txn], False)
    info = tier.read(_Log(), 20, isolation=FetchIsolation.TXN_COMMITTED)
    assert info.aborted_transactions == [txn] and tier.index.txn_searches == [(one.md.remote_log_segment_id, 20, 21)]


def test_aborted_transactions_read_the_batch_headers_without_checking_crcs() -> None:
    seg = _segment(0, batches=2)
    data = bytearray(seg.batches(0, 2))
    data[seg.positions[1] + 70] ^= 1  # a record byte of the second batch: its CRC no longer matches
    tier = _Tier(seg)
    log = _Log()
    assert tier.reader.aborted_transactions(log, TIP, seg.md, 0, bytes(data)) == []  # type: ignore[arg-type]
    assert tier.index.txn_searches == [(seg.md.remote_log_segment_id, 0, 20)] and log.local_txns == [(0, 20)]


def test_the_timestamp_scan_finds_the_first_record_at_or_after_the_timestamp_and_the_log_start() -> None:
    a = _segment(0, batches=3, ts=T0, leader_epoch=3)  # 0..29 stamped T0..T0+29
    b = _segment(30, batches=3, ts=T0 + 100)  # 30..59 stamped T0+100..
    tier = _Tier(a, b)
    log = _Log()
    found = tier.reader.offset_for_timestamp(log, T0 + 5)  # type: ignore[arg-type]
    assert (found.timestamp, found.offset, found.leader_epoch) == (T0 + 5, 5, 3)  # type: ignore[union-attr]
    assert tier.reader.offset_for_timestamp(log, T0 + 29).offset == 29  # type: ignore[arg-type, union-attr]
    assert tier.reader.offset_for_timestamp(log, T0 + 30).offset == 30  # type: ignore[arg-type, union-attr]  # a's max < ts
    assert tier.reader.offset_for_timestamp(log, T0 + 159) is None  # type: ignore[arg-type]
    # at or after the log start offset: within a batch, and a segment wholly below it is not scanned
    assert tier.reader.offset_for_timestamp(_Log(log_start=7), T0).offset == 7  # type: ignore[arg-type, union-attr]
    assert tier.reader.offset_for_timestamp(_Log(log_start=10), T0).offset == 10  # type: ignore[arg-type, union-attr]
    tier.segments.reads.clear()
    assert tier.reader.offset_for_timestamp(_Log(log_start=30), T0).offset == 30  # type: ignore[arg-type, union-attr]
    assert {sid for sid, _, _ in tier.segments.reads} == {b.md.remote_log_segment_id}
    assert tier.reader.offset_for_timestamp(_Log(log_start=29), T0 + 29).offset == 29  # type: ignore[arg-type, union-attr]
    tier.segments.reads.clear()  # a segment whose max timestamp is below the timestamp is not read
    assert tier.reader.offset_for_timestamp(log, T0 + 100).offset == 30  # type: ignore[arg-type, union-attr]
    assert {sid for sid, _, _ in tier.segments.reads} == {b.md.remote_log_segment_id}


def test_the_timestamp_scan_reads_a_segment_in_steps_and_names_a_corrupt_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    seg = _segment(0, batches=8, ts=T0)
    monkeypatch.setattr(remote_log_reader, "_SCAN_BYTES", 2 * seg.positions[1])  # two batches a step
    tier = _Tier(seg)
    tier.index.entries[seg.md.remote_log_segment_id] = dict(zip(seg.bases, seg.positions))
    found = tier.reader.offset_for_timestamp(_Log(), T0 + 75)  # type: ignore[arg-type]
    assert found is not None and found.offset == 75
    starts = [start for _, start, _ in tier.segments.reads if start < len(seg.data)]
    assert starts == [0, seg.positions[2], seg.positions[4], seg.positions[6]]
    data = bytearray(seg.data)
    data[seg.positions[5] + 70] ^= 1
    tier.segments.objects[seg.md.remote_log_segment_id] = data
    with pytest.raises(CorruptRecordError) as err:
        tier.reader.offset_for_timestamp(_Log(), T0 + 75)  # type: ignore[arg-type]
    assert err.value.segment_id == str(seg.md.remote_log_segment_id)  # type: ignore[attr-defined]
    assert err.value.position == seg.positions[5]  # type: ignore[attr-defined]
    assert f"remote segment {seg.md.remote_log_segment_id}" in str(err.value)
    # batches of one record, a step smaller than one: each step one batch, none skipped, up to the last offset
    ones = _segment(0, batches=8, per=1, ts=T0)
    monkeypatch.setattr(remote_log_reader, "_SCAN_BYTES", 10)
    tier = _Tier(ones)
    for offset in (1, 5, 7):
        assert tier.reader.offset_for_timestamp(_Log(), T0 + offset).offset == offset  # type: ignore[arg-type, union-attr]


def test_the_timestamp_scan_goes_over_gaps_whatever_the_policy() -> None:
    seg = _segment(0, per=10, ts=T0, bases=[0, 15])  # as the cleaner left it: 10..14 gone
    tier = _Tier(seg)
    for compact in (True, False):
        found = tier.reader.offset_for_timestamp(_Log(compact=compact, log_start=11), T0)  # type: ignore[arg-type]
        assert found is not None and found.offset == 15


def test_every_bit_of_a_remote_batch_header_flipped_is_an_error_or_changes_nothing() -> None:
    """As tests/property/test_bit_flip_reads.py for a local segment: reads answer a gap's offsets with the next
    batch, so every flip of a header bit (outside the CRC, or opening what looks like a gap) must be an error or
    change nothing read. Exhaustive over the headers of the first, a middle and the last batch, from 4 offsets."""
    template = _segment(0, batches=5, per=10)
    expected = [(r.offset, bytes(r.value)) for b in MemoryRecords(bytes(template.data)).batches() for r in b.records()]
    wrong = []
    for at in (template.positions[0], template.positions[2], template.positions[-1]):
        for position in range(at, at + 61):
            for bit in range(8):
                seg = dataclasses.replace(template, data=bytearray(template.data))
                seg.data[position] ^= 1 << bit
                tier = _Tier(seg)
                for start in (0, 5, 25, 45):
                    got: list[tuple[int, bytes]] = []
                    offset = start
                    try:
                        while offset < 50:
                            batches = list(tier.read(_Log(local_start=50), offset).records.batches())
                            if not batches:
                                raise CorruptRecordError("an empty answer before the end")
                            for batch in batches:
                                got += [(r.offset, bytes(r.value)) for r in batch.records() if r.offset >= offset]
                                offset = batch.last_offset + 1
                    except (KafkaStorageError, TieredStorageError):
                        continue
                    if got != expected[start:]:
                        wrong.append((position, bit, start))
    assert wrong == [], f"(byte, bit, start) flips read back wrong with no error: {wrong[:10]}"
