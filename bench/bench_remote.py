"""The remote tier against a real S3-compatible server on loopback (SeaweedFS, started from localstack/).

Targets (issue 5): offload >= 0.8x raw boto3 upload_file of the same files; sequential consume from the remote
tier with a cold cache >= 0.5x a raw boto3 streaming GET; warm-cache random reads within 2x of the same reads
from the local tier; p50/p99 latency of the first byte from a cold and a warm cache, printed.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import time

from bench._util import report, report_latency, seaweedfs_bucket
from local import LogConfig, LogManager
from local.log import Log
from local.records import MemoryRecords, SimpleRecord

SEGMENT = 16 * 1024 * 1024
SEGMENTS = 6
PASSES = 5


def _fill(log: Log) -> None:
    now = int(time.time() * 1000)
    value = random.randbytes(1024)
    batch = [SimpleRecord(now, None, value) for _ in range(64)]
    while log.number_of_segments() <= SEGMENTS:
        log.append(MemoryRecords.build(batch))


def _consume(log: Log, start: int, end: int, fetch: int = 1024 * 1024) -> int:
    offset, total = start, 0
    while offset < end:
        info = log.read(offset, fetch)
        last = None
        for b in info.records.batches():
            last = b
            total += b.size_in_bytes
        assert last is not None
        offset = last.last_offset + 1
    return total


def main() -> None:
    with seaweedfs_bucket("remote") as (tmp, client, bucket, tier):
        props = {**tier, "log.segment.bytes": str(SEGMENT), "remote.log.segment.cache.dir": str(tmp / "chunks")}
        with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
            log = manager.get_or_create_log("bench", 0, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
            _fill(log)
            log.flush()
            files = [s.log.path for s in list(log.segments.values())[:-1]]
            nbytes = sum(p.stat().st_size for p in files)
            shutil.copytree(tmp / "data" / "bench-0", tmp / "local-copy" / "bench-0")

            os.sync()  # the segments on disk: neither upload pays for their writeback
            t = time.perf_counter()
            for i, p in enumerate(files):
                client.upload_file(str(p), bucket, f"raw/{i}.log")
            raw_upload = time.perf_counter() - t
            os.sync()
            t = time.perf_counter()
            result = manager.remote_tier.run_once(manager.all_logs())  # type: ignore[union-attr]
            offload = time.perf_counter() - t
            assert result.segments_copied == len(files)
            report("offload (all files of each segment)", nbytes / offload / 1e6, nbytes / raw_upload / 1e6, "MB/s",
                   "raw boto3 upload_file of the .log files", 0.8)

            manager.cleanup_logs()
            remote_end = log.local_log_start_offset
            # Passes of (raw GET, cold consume), each consume after both caches are emptied; the figures are
            # the medians. The first pass is printed too: a fresh process on a fresh VM pays for the first
            # touch of every page it keeps (the chunks in memory, the cache files in the page cache), at
            # ~24 us a page here, where the raw GET reuses one buffer.
            raw_rates, cold_rates = [], []
            for _ in range(PASSES):
                os.sync()
                t = time.perf_counter()
                for i in range(len(files)):
                    body = client.get_object(Bucket=bucket, Key=f"raw/{i}.log")["Body"]
                    while body.read(1024 * 1024):
                        pass
                raw_rates.append(nbytes / (time.perf_counter() - t) / 1e6)
                manager.remote_tier.chunk_cache.clear()  # type: ignore[union-attr]
                manager.remote_tier.index_cache.clear()  # type: ignore[union-attr]
                t = time.perf_counter()
                consumed = _consume(log, 0, remote_end)
                cold_rates.append(consumed / (time.perf_counter() - t) / 1e6)
            report("sequential consume, remote tier, cold cache, first pass of the process", cold_rates[0],
                   raw_rates[0], "MB/s", "raw boto3 streaming GET")
            report(f"sequential consume, remote tier, cold cache (median of {PASSES} passes)",
                   statistics.median(cold_rates), statistics.median(raw_rates), "MB/s", "raw boto3 streaming GET", 0.5)

            # A copy of a live log (the active segment's indexes still preallocated): opened as after a crash.
            local_log = Log.open(tmp / "local-copy" / "bench-0", log.config, had_clean_shutdown=False)
            rng = random.Random(7)
            offsets = [rng.randrange(0, remote_end) for _ in range(2000)]
            # The consume above warmed the chunk cache. Each offset is read from both tiers in turn, so a
            # slow phase of the machine weighs on both sides alike.
            warm, local = [], []
            for off in offsets:
                for target, lat in ((log, warm), (local_log, local)):
                    s = time.perf_counter()
                    target.read(off, 64 * 1024)
                    lat.append(time.perf_counter() - s)
            report_latency("random 64 KiB reads, remote tier warm cache (p50)", statistics.median(warm),
                           statistics.median(local), "the same reads from the local tier", 2)
            p99 = lambda xs: sorted(xs)[int(len(xs) * 0.99) - 1]  # noqa: E731
            print(f"first byte, warm cache: p50 {statistics.median(warm) * 1e3:.2f} ms, p99 {p99(warm) * 1e3:.2f} ms")
            local_log.close()

        # Cold first-byte latency: a fresh manager and fresh caches on every read.
        shutil.rmtree(tmp / "chunks", ignore_errors=True)
        shutil.rmtree(tmp / "data" / "remote-log-index-cache", ignore_errors=True)
        with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
            log = manager.get_log("bench", 0)  # type: ignore[assignment]
            cold_lat = []
            for off in offsets[:40]:
                manager.remote_tier.chunk_cache.clear()  # type: ignore[union-attr]
                s = time.perf_counter()
                log.read(off, 1)
                cold_lat.append(time.perf_counter() - s)
            print(f"first byte, cold cache: p50 {statistics.median(cold_lat) * 1e3:.2f} ms, p99 {p99(cold_lat) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
