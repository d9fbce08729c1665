"""Log compaction: one cleaning of a 256 MiB compacted log with 10% live keys, against a baseline of the same bytes.

The log: 1 KiB records in batches of 16 (16 KiB, uncompressed, as a producer batches them), keys cycling over a
tenth as many keys as records (each key written 10 times: the last 10% of the records are the live ones), 32 MiB
segments, all closed (the active segment is empty). The cleaning: :class:`local.cleaner.cleaner.Cleaner` over the
whole log (offset map of every key, the segments regrouped and rewritten, each ``.cleaned`` segment flushed and
swapped in), with a 16 MiB dedupe buffer. The baseline, in the same run: read every segment file of the log in 1 MiB
chunks, crc32c each chunk, and write (and fsync) as many bytes as the cleaning kept with ``os.write`` (no decoding
at all), in rounds alternating which goes first. Target (issue 30): >= 0.25x.

Until 2026-11-28 the baseline listed the segment files before the cleaning and read them after it, when those
names held the cleaned segments: it read the 26 MB the cleaning kept instead of the 255 MiB log, ten times less
than the issue's baseline. That figure is printed too (``earlier baseline``), to compare with the earlier results.

Memory: the offset map's table and the peak of Python allocations (tracemalloc, which numpy reports to) during a
second cleaning of a fresh copy, against ``log.cleaner.dedupe.buffer.size``: the map must stay within it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import tracemalloc
from pathlib import Path

from bench._util import report
from local.cleaner.cleaner import Cleaner, LogToClean, Throttler
from local.cleaner.offset_map import SkimpyOffsetMap
from local.config import LogConfig
from local.crc import crc32c
from local.log import Log
from local.records import MemoryRecords, SimpleRecord
from local.scheduler import Scheduler

TOTAL_BYTES = 256 * 1024 * 1024
RECORD_VALUE = 1000
RECORDS_PER_BATCH = 16
LIVE_SHARE = 10  # each key written this many times
SEGMENT_BYTES = 32 * 1024 * 1024
DEDUPE_BUFFER = 16 * 1024 * 1024
ROUNDS = 4


def _write(root: Path) -> int:
    """The compacted log in ``root/c-0``; its record count."""
    config = LogConfig.from_properties({"log.dirs": str(root), "log.segment.bytes": str(SEGMENT_BYTES)})
    topic = config.topic_config({"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES)})
    log = Log.open(root / "c-0", topic)
    value = b"v" * RECORD_VALUE
    per_record = RECORD_VALUE + 30
    records = TOTAL_BYTES // per_record
    keys = records // LIVE_SHARE
    now = int(time.time() * 1000)
    for first in range(0, records, RECORDS_PER_BATCH):
        batch = [SimpleRecord(now, b"key-%08d" % (i % keys), value) for i in range(first, first + RECORDS_PER_BATCH)]
        log.append(MemoryRecords.build(batch))
    log.roll()
    log.close()
    return records


def _open(root: Path, scheduler: Scheduler) -> Log:
    config = LogConfig.from_properties({"log.dirs": str(root), "log.segment.bytes": str(SEGMENT_BYTES),
                                        "log.segment.delete.delay.ms": "0"})
    topic = config.topic_config({"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES)})
    return Log.open(root / "c-0", topic, scheduler=scheduler)


def _clean(log: Log) -> tuple[int, int, SkimpyOffsetMap]:
    """One cleaning of the whole log; (bytes read, bytes written, the map)."""
    offset_map = SkimpyOffsetMap(DEDUPE_BUFFER)
    cleaner = Cleaner(0, offset_map, 256 * 1024, 1 << 20, 0.9, Throttler(float("inf")))
    active = log.active_segment.base_offset
    _, stats = cleaner.clean(LogToClean(log, 0, active, 0, log.size_in_bytes))
    return stats.bytes_read, stats.bytes_written, offset_map


def _baseline(files: list[Path], out_bytes: int, out: Path) -> None:
    chunk = bytearray(1 << 20)
    view = memoryview(chunk)
    written = 0
    fd_out = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for path in files:
            fd = os.open(path, os.O_RDONLY)
            try:
                while n := os.readv(fd, [view]):
                    crc32c(view[:n])
                    if written < out_bytes:
                        written += os.write(fd_out, view[: min(n // LIVE_SHARE + 1, out_bytes - written)])
            finally:
                os.close(fd)
        while written < out_bytes:
            written += os.write(fd_out, view[: min(len(view), out_bytes - written)])
        os.fsync(fd_out)
    finally:
        os.close(fd_out)


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-compaction-"))
    scheduler = Scheduler("bench-compaction")
    try:
        source = tmp / "source"
        records = _write(source)
        source_files = sorted((source / "c-0").glob("*.log"))
        size = sum(p.stat().st_size for p in source_files)
        mb = size / (1024 * 1024)
        ours_s, base_s, kept_s = [], [], []
        written = 0
        for round_ in range(ROUNDS):  # interleaved rounds, the order alternating: both see the same machine state
            work = tmp / f"work-{round_}"
            shutil.copytree(source, work)
            os.sync()  # the copy's writeback must not land in either timing
            for path in [*source_files, *sorted((work / "c-0").glob("*.log"))]:  # warm the page cache for both
                path.read_bytes()
            log = _open(work, scheduler)
            for step in (("baseline", "clean") if round_ % 2 else ("clean", "baseline")):
                start = time.perf_counter()
                if step == "clean":
                    _, written, _ = _clean(log)
                    ours_s.append(time.perf_counter() - start)
                else:  # the bytes the cleaning reads: the source's segments are the same bytes as the work copy's
                    _baseline(source_files, written, tmp / "baseline.out")
                    base_s.append(time.perf_counter() - start)
            log.close()
            # The baseline of the earlier figures (before 2026-11-28) listed the segment files before the cleaning
            # and read them after it: it read the cleaned segments (the kept bytes), not the log. Kept for comparison.
            cleaned = sorted((work / "c-0").glob("*.log"))
            start = time.perf_counter()
            _baseline(cleaned, written, tmp / "baseline.out")
            kept_s.append(time.perf_counter() - start)
            shutil.rmtree(work)
        print(f"log: {records:,} records of {RECORD_VALUE} B in batches of {RECORDS_PER_BATCH}, {mb:,.0f} MiB, "
              f"{LIVE_SHARE}x each key; cleaning kept {written:,} B", flush=True)
        print("compaction: rounds (ms): cleaning " + " ".join(f"{t * 1000:.0f}" for t in ours_s) + "; baseline "
              + " ".join(f"{t * 1000:.0f}" for t in base_s), flush=True)
        report("compaction: one cleaning of the whole log", mb / min(ours_s), mb / min(base_s), "MB/s",
               "crc32c read of the log + os.write and fsync of the kept bytes", target=0.25)
        report("compaction (earlier baseline, for comparison)", mb / min(ours_s), mb / min(kept_s), "MB/s",
               "crc32c read of the cleaned segments only + os.write and fsync of the kept bytes")

        work = tmp / "work-memory"
        shutil.copytree(source, work)
        log = _open(work, scheduler)
        tracemalloc.start()
        _, _, offset_map = _clean(log)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        log.close()
        print(f"compaction: offset map {offset_map.size_in_bytes / 2**20:,.2f} MiB table ({offset_map.slots:,} slots, "
              f"{offset_map.entries:,} keys, {100 * offset_map.utilization:.1f}% used) within "
              f"log.cleaner.dedupe.buffer.size {DEDUPE_BUFFER / 2**20:,.0f} MiB; peak Python allocations during the "
              f"cleaning {peak / 2**20:,.2f} MiB", flush=True)
    finally:
        scheduler.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
