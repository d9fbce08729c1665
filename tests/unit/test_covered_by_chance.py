"""Behaviours an outside audit found covered only by chance (issue 27, item 7), each tested where it shows:

- a checksum refusal of a chunk other than the first, through the ranged fetch (the segment cache without its
  chunk cache: every read is a ranged fetch of what it asks for, widened to whole checksum chunks);
- two partitions, and two segments of one partition with one base offset but different ids, read through one
  shared segment cache (chunk cache included), each getting its own bytes, outside Spark;
- local ``retention.bytes`` at its boundaries: an excess one byte short of the oldest segment deletes nothing, an
  excess of exactly one segment deletes it, an excess past several segments deletes exactly the whole ones it
  covers (Kafka's ``diff - segment.size >= 0``).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from local import LogConfig, LogManager
from local.log import Log
from local.records import MemoryRecords, SimpleRecord
from tests.logutil import local_tier_props, make_log, read_all_values
from tiered.backends.local_dir import LocalDirRemoteStorageManager
from tiered.cache.chunk_cache import ChunkCache
from tiered.cache.segment_cache import RemoteSegmentCache
from tiered.checksums import ChecksumVerifier, compute_segment_checksums
from tiered.composition import assemble_remote_log_manager
from tiered.errors import RemoteChecksumError
from tiered.layout import segment_key
from tiered.metadata import RemoteLogMetadataStore
from tiered.rsm import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

T0 = int(time.time() * 1000) - 60_000
C = 64 * 1024  # the checksum chunk of these tests: a 1 MiB segment has 16
TIERED = {"remote.storage.enable": "true", "local.retention.bytes": "1"}
MOCK_NOW = 1_700_000_000_000  # make_log's MockTime


# A checksum refusal of a later chunk through the ranged fetch ---------------------------------------------------


def _value(i: int) -> bytes:
    return (b"%08d" % i) * 25


def test_a_damaged_chunk_past_the_first_is_refused_alone_through_the_ranged_fetch(tmp_path: Path) -> None:
    rsm = LocalDirRemoteStorageManager()
    rsm.configure({"dir": str(tmp_path / "remote")})
    rlm = assemble_remote_log_manager(rsm, RemoteLogMetadataStore(rsm), tmp_path / "data",
        chunk_cache=None, checksum_chunk_bytes=C, registry=CollectorRegistry(),
    )
    with LogManager(LogConfig.from_properties(local_tier_props(tmp_path)), remote_tier=rlm,
                    start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0, TIERED)
        for first in range(0, 6000, 100):
            log.append(MemoryRecords.build([SimpleRecord(T0, b"k%d" % i, _value(i)) for i in range(first, first + 100)]))
        expected = read_all_values(log)
        assert rlm.run_once(manager.all_logs()).segments_copied >= 1
        manager.cleanup_logs()
        md = rlm.finished_segments(rlm.topic_id_partition(log))[0]
        assert rlm.segments.chunks is None and md.segment_size_in_bytes > 8 * C  # every read a ranged fetch
        key = segment_key(rsm.prefix, md, ".log")
        path = tmp_path / "remote" / key
        original = path.read_bytes()
        damaged = bytearray(original)
        damaged[5 * C + 100] ^= 0x40  # in the sixth checksum chunk
        path.write_bytes(bytes(damaged))

        # Ranges in other chunks read as copied, before and after the damaged one.
        assert bytes(rlm.segments.read(md, 100, 5 * C)) == original[100 : 5 * C]
        assert bytes(rlm.segments.read(md, 6 * C + 7, 7 * C + 9)) == original[6 * C + 7 : 7 * C + 9]
        # A range ending in it, starting chunks before it: that chunk is refused, by its own range; fetched twice.
        before = rlm.checksums.mismatches
        with pytest.raises(RemoteChecksumError) as info:
            rlm.segments.read(md, 3 * C + 5, 5 * C + 200)
        assert (info.value.key, info.value.start, info.value.end) == (key, 5 * C, 6 * C - 1)
        assert str(md.remote_log_segment_id) in str(info.value)
        assert rlm.checksums.mismatches - before == 2
        # Through the log: offsets before the damaged chunk read; the records in it are an error, never wrong values.
        assert log.local_log_start_offset > md.end_offset
        first_batches = list(log.read(0, 4096).records.batches())
        assert [r.value for b in first_batches for r in b.records()] == [v for _, v in expected[:100]]
        read: list[int] = []
        offset = 0
        with pytest.raises(RemoteChecksumError):
            while offset <= md.end_offset:
                for batch in log.read(offset, 4096).records.batches():
                    read.extend(r.offset for r in batch.records() if r.value == _value(r.offset))
                    offset = batch.last_offset + 1
        assert read and max(read) < md.end_offset  # the records up to the damaged chunk, none wrong, then the error


# One shared segment cache: two partitions, two ids at one base offset --------------------------------------------


def _upload(rsm: LocalDirRemoteStorageManager, tmp: Path, tip: TopicIdPartition, start: int, body: bytes,
            verifier_sums: dict[uuid.UUID, object]) -> RemoteLogSegmentMetadata:
    src = tmp / f"src-{uuid.uuid4()}"
    src.mkdir()
    (src / "0.log").write_bytes(body)
    for name in ("0.index", "0.timeindex", "1.snapshot"):
        (src / name).write_bytes(b"")
    data = LogSegmentData(src / "0.log", src / "0.index", src / "0.timeindex", None, src / "1.snapshot", b"0\n0\n")
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), start, start + 9, T0, 0, T0, len(body), {0: start})
    rsm.copy_log_segment_data(md, data)
    verifier_sums[md.remote_log_segment_id.id] = compute_segment_checksums(data, 4096)
    return md


def test_one_segment_cache_serves_each_partition_and_each_segment_id_its_own_bytes(tmp_path: Path) -> None:
    """Segments that share a topic id, a partition or a base offset: the cache keys on the segment id. A key made of
    the topic, partition or base offset instead would answer one segment with another's bytes."""
    rsm = LocalDirRemoteStorageManager()
    rsm.configure({"dir": str(tmp_path / "remote")})
    sums: dict[uuid.UUID, object] = {}
    topic_id = uuid.uuid4()
    p0, p1 = TopicIdPartition(topic_id, "t", 0), TopicIdPartition(topic_id, "t", 1)
    size = 300_000  # a few cache chunks each
    bodies = [os.urandom(size) for _ in range(4)]
    segments = [
        _upload(rsm, tmp_path, p0, 0, bodies[0], sums),  # partition 0, base offset 0
        _upload(rsm, tmp_path, p1, 0, bodies[1], sums),  # partition 1, base offset 0
        _upload(rsm, tmp_path, p0, 0, bodies[2], sums),  # partition 0 again, base offset 0, another id
        _upload(rsm, tmp_path, p1, 500, bodies[3], sums),
    ]
    verifier = ChecksumVerifier(rsm, lambda md: sums.get(md.remote_log_segment_id.id))  # type: ignore[arg-type,return-value]
    with ChunkCache(tmp_path / "cache", chunk_size=128 * 1024, prefetch_chunks=1) as chunks:
        cache = RemoteSegmentCache(rsm, verifier, chunks)
        for round_ in range(2):  # fetched, then from the cache (memory or disk)
            for md, body in zip(segments, bodies, strict=True):
                for start, end in ((0, 1000), (128 * 1024 - 10, 128 * 1024 + 10), (size - 50, size)):
                    assert bytes(cache.read(md, start, end)) == body[start:end], (round_, md.remote_log_segment_id)
                cache.prefetch(md, 0)
        fetches = chunks.fetches
        chunks.flush()
        cache.invalidate(segments[0])  # one segment deleted: the others, same partition and base offset, stay
        for md, body in zip(segments[1:], bodies[1:], strict=True):
            assert bytes(cache.read(md, 0, size)) == body
        assert chunks.fetches == fetches  # served from the cache: nothing of the others was forgotten
        cache.close()


# Local retention.bytes at its boundaries ---------------------------------------------------------------------------


def _sized_log(tmp_path: Path, name: str, retention_bytes: int = -1) -> Log:
    """Five segments of ten one-record batches (of different sizes: the values grow), the last one active."""
    log = make_log(tmp_path, name, retention_bytes=retention_bytes, retention_ms=-1)
    for seg in range(5):
        if seg:
            log.roll()
        for i in range(10):
            log.append(MemoryRecords.build([SimpleRecord(MOCK_NOW, None, b"v" * (20 * seg + i))]))
    log.update_high_watermark(log.log_end_offset)
    return log


@pytest.mark.parametrize(
    "excess,deleted",
    [
        (lambda s: s[0] - 1, 0),  # one byte short of the oldest segment: it stays
        (lambda s: s[0], 1),  # exactly the oldest segment
        (lambda s: s[0] + s[1] - 1, 1),  # one byte short of two
        (lambda s: s[0] + s[1] + s[2], 3),  # exactly three
        (lambda s: s[0] + s[1] + s[2] + 1, 3),  # past three, short of four: three, not four
    ],
    ids=["short-of-one", "one", "short-of-two", "three", "past-three"],
)
def test_local_retention_bytes_deletes_exactly_the_whole_segments_the_excess_covers(
    tmp_path: Path, excess: object, deleted: int
) -> None:
    sizes = [seg.size for seg in _sized_log(tmp_path, "probe-0").segments.values()]
    assert len(set(sizes)) == len(sizes)  # every segment its own size: an off-by-one segment shows
    total = sum(sizes)
    log = _sized_log(tmp_path, "t-0", retention_bytes=total - excess(sizes))  # type: ignore[operator]
    before = list(log.segments.values())
    assert log.delete_old_segments() == deleted
    assert [s.base_offset for s in log.segments.values()] == [s.base_offset for s in before[deleted:]]
    assert log.log_start_offset == before[deleted].base_offset
    log.close()
