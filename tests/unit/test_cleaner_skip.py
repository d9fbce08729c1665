"""The cleaner's speed-ups keep its answers: the keyed key digest (SipHash-2-4, 128 bits) against its authors'
reference vectors and on real keys, and the cleaning pass that reads only the batches that can keep something
(a segment the map pass walked whole) against the pass that reads every batch, byte for byte and count for count."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest

from local.cleaner import cleaner as cleaner_module
from local.cleaner.cleaner import Cleaner, CleanerStats, LogToClean, Throttler
from local.cleaner.filter import _cleancore
from local.cleaner.offset_map import SkimpyOffsetMap
from local.cleaner.records import key_digest, scan_records
from local.errors import CorruptRecordError
from local.log import Log
from local.records import CompressionType, MemoryRecords, SimpleRecord
from local.scheduler import MockTime
from tests.logutil import topic_config

T0 = 1_700_000_000_000

# SipHash-2-4 with 128-bit output, key 00 01 .. 0f, message 00 01 .. (n-1): vectors.h of the reference implementation
# (github.com/veorq/SipHash, vectors_sip128).
SIP128_VECTORS = {
    0: "a3817f04ba25a8e66df67214c7550293",
    1: "da87c1d86b99af44347659119b22fc45",
    7: "a1f1ebbed8dbc153c0b84aa61ff08239",
    8: "3b62a9ba6258f5610f83e264f31497b4",
    12: "d626b266905ef35882634df68532c125",
    15: "5493e99933b0a8117e08ec0f97cfc3d9",
    16: "6ee2a4ca67b054bbfd3315bf85230577",
    63: "5150d1772f50834a503e069a973fbd7c",
}


def test_the_key_digest_is_siphash_2_4_128_in_python_and_in_c() -> None:
    key = bytes(range(16))
    for n, want in SIP128_VECTORS.items():
        assert key_digest(key, bytes(range(n))).hex() == want
    if _cleancore is None:
        return
    batch = bytes(MemoryRecords.build([SimpleRecord(T0, bytes(range(n)), b"v") for n in SIP128_VECTORS]))
    _, hashes = _cleancore.scan_records(batch[61:], len(SIP128_VECTORS), key)
    assert [hashes[i * 16 : (i + 1) * 16].hex() for i in range(len(SIP128_VECTORS))] == list(SIP128_VECTORS.values())
    assert scan_records(batch[61:], len(SIP128_VECTORS), key)[1] == hashes


@pytest.mark.parametrize("native", [True, False])
def test_the_map_answers_each_real_key_with_its_own_offset_under_any_hash_key(native: bool) -> None:
    keys = [b"user-%d" % i for i in range(3000)] + [b"", b"\x00", b"\x00" * 16, b"order-1", b"order-1 "]
    maps = [SkimpyOffsetMap(24 * 8192, native=native) for _ in range(2)]
    assert maps[0].hash_key != maps[1].hash_key
    for offset_map in maps:
        for offset, key in enumerate(keys):
            offset_map.put(key, 10 * offset)
        assert offset_map.entries == len(keys)  # no two of these keys share a digest
        assert [offset_map.get(key) for key in keys] == [10 * offset for offset in range(len(keys))]
        assert offset_map.get(b"user-3000") == -1 and offset_map.get(b"user-1\x00") == -1
        before = offset_map.hash_key
        offset_map.clear()
        assert offset_map.hash_key != before and offset_map.get(b"user-1") == -1 and offset_map.entries == 0


def _log(path: Path, time: MockTime) -> Log:
    config = dataclasses.replace(topic_config(path.parent, cleanup_policy="compact", segment_bytes=6000,
                                              file_delete_delay_ms=0), min_cleanable_dirty_ratio=0.0)
    return Log.open(path, config, time=time, scheduler=time.scheduler)


def _fill(log: Log) -> None:
    """Segments of plain batches (keys cycling: most batches end up superseded), and among them a segment with a
    compressed batch, keyless records, tombstones and an idempotent producer's batches (its last one is kept)."""
    t = T0
    for round_ in range(6):
        for first in range(0, 40, 4):
            recs = [SimpleRecord(t, b"k%02d" % (i % 37), b"v%d-%d" % (round_, i) * 20) for i in range(first, first + 4)]
            if round_ == 2 and first == 8:
                recs.append(SimpleRecord(t, None, b"no key"))
            if round_ == 3 and first == 12:
                recs.append(SimpleRecord(t, b"k05", None))
            kwargs: dict[str, Any] = {}
            if round_ == 4 and first == 16:
                kwargs["compression"] = CompressionType.GZIP
            if round_ == 1 and first in (20, 24):
                kwargs.update(producer_id=7, producer_epoch=0, base_sequence=first - 20)
                recs = recs[:4]
            # as a follower: a leader refuses a keyless record on a compacted topic, older data may hold some
            log.append_as_follower(MemoryRecords.build(recs, base_offset=log.log_end_offset, **kwargs))
            t += 1
    log.roll()


class _CountingWindow(cleaner_module._Window):
    __slots__ = ("bytes_read",)

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.bytes_read = 0

    def read(self, records_log: Any, pos: int, end: int) -> int:
        n = super().read(records_log, pos, end)
        self.bytes_read += n
        return n


def _clean(path: Path, skip: bool) -> tuple[CleanerStats, int, dict[str, bytes]]:
    time = MockTime(ms=T0 + 10)
    log = _log(path, time)
    cleaner = Cleaner(0, SkimpyOffsetMap(64 * 1024), 512, 1 << 20, 0.9, Throttler(float("inf")), time=time)
    cleaner.skip_batches = skip
    cleaner._window = window = _CountingWindow(cleaner.read_window)
    _, stats = cleaner.clean(LogToClean(log, 0, log.active_segment.base_offset, 0, log.size_in_bytes))
    log.close()
    files = {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.suffix in (".log", ".index", ".timeindex")}
    return stats, window.bytes_read, files


# allowed-skip: the C extension is optional (no compiler); without it the cleaner runs its Python pass, tested elsewhere
@pytest.mark.skipif(_cleancore is None, reason="the skipping pass needs the C map pass (it verifies what it skips)")
def test_the_pass_reading_only_what_can_be_kept_writes_what_the_whole_read_writes(tmp_path: Path) -> None:
    log = _log(tmp_path / "source" / "t-0", MockTime(ms=T0))
    _fill(log)
    log.close()
    results = {}
    for skip in (True, False):
        shutil.copytree(tmp_path / "source", tmp_path / str(skip))
        results[skip] = _clean(tmp_path / str(skip) / "t-0", skip)
    (stats, read, files), (full_stats, full_read, full_files) = results[True], results[False]
    assert files == full_files  # the same segments, indexes and all
    assert dataclasses.asdict(stats.filter) == dataclasses.asdict(full_stats.filter)
    assert stats.filter.invalid_messages == 1 and stats.filter.messages_retained < stats.filter.messages_read
    assert read < full_read  # the superseded batches of the segments walked whole were not read again


# allowed-skip: the C extension is optional (no compiler); the Python pass has no such walk to test
@pytest.mark.skipif(_cleancore is None, reason="the C map pass checks the CRCs of the batches it walks")
def test_a_damaged_batch_the_cleaning_pass_would_skip_stops_the_cleaning_in_the_map_pass(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = _log(path, MockTime(ms=T0))
    _fill(log)
    log.close()
    first = sorted(path.glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    data[200] ^= 0x01  # inside the first batch's records: superseded later, so the cleaning pass would skip it
    first.write_bytes(bytes(data))
    before = {p.name: p.read_bytes() for p in path.glob("*.log")}
    time = MockTime(ms=T0 + 10)
    log = _log(path, time)
    cleaner = Cleaner(0, SkimpyOffsetMap(64 * 1024), 512, 1 << 20, 0.9, Throttler(float("inf")), time=time)
    assert cleaner_module.Cleaner.skip_batches
    with pytest.raises(CorruptRecordError, match=r"corrupt batch at position 0 of .*00000000000000000000\.log"):
        cleaner.clean(LogToClean(log, 0, log.active_segment.base_offset, 0, log.size_in_bytes))
    log.close()
    assert {p.name: p.read_bytes() for p in path.glob("*.log")} == before  # nothing swapped, nothing lost
    assert not [p for p in path.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted"))]
