"""Log.append and sequential Log.read, against raw os.write and a raw sequential read of the same bytes.

Targets (issue 3): append of 16 KiB batches (1 KiB records) >= 0.4x raw os.write; sequential read of the
whole log >= 0.5x a raw sequential read of the segment files. Reported (issue 13): append of zstd batches, which
the log decompresses as a stream and checks record by record, against decompressing the same batches alone.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from pathlib import Path

import cramjam

from bench._util import best_of, report
from local.config import LogConfig
from local.log import Log
from local.records import MemoryRecords, SimpleRecord
from local.scheduler import Scheduler

TOTAL_BYTES = 256 * 1024 * 1024
RECORD = b"r" * 1024
RECORDS_PER_BATCH = 16
ZSTD_BYTES = 32 * 1024 * 1024  # uncompressed bytes of zstd batches appended
ZSTD_RECORDS_PER_BATCH = 64


def _zstd_batches() -> list[bytes]:
    """Batches of 64 JSON-like records of ~500 bytes (about 4x compressible), zstd, as a producer sends them."""
    rng = random.Random(13)
    words = [bytes(rng.choices(b"abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 9))) for _ in range(300)]
    out: list[bytes] = []
    total = 0
    while total < ZSTD_BYTES:
        recs = []
        for i in range(ZSTD_RECORDS_PER_BATCH):
            value = b'{"user":%d,"event":"%s","text":"%s"}' % (
                rng.randrange(10**6), rng.choice(words), b" ".join(rng.choices(words, k=70)))
            recs.append(SimpleRecord(1_700_000_000_000 + i, b"user-%d" % rng.randrange(1000), value))
            total += len(value)
        out.append(bytes(MemoryRecords.build(recs, "zstd")))
    return out


def zstd_append(tmp: Path, scheduler: Scheduler) -> None:
    batches = _zstd_batches()
    raw = sum(len(b) for b in batches)
    config = LogConfig.from_properties({"log.dirs": str(tmp)}).topic_config({"segment.bytes": 256 * 1024 * 1024})

    def decompress_alone() -> None:
        for b in batches:
            cramjam.zstd.decompress(memoryview(b)[61:])

    def log_append() -> None:
        shutil.rmtree(tmp / "zstd-0", ignore_errors=True)
        log = Log.open(tmp / "zstd-0", config, scheduler=scheduler)
        try:
            for b in batches:
                log.append(MemoryRecords(b))
        finally:
            log.close()

    base = best_of(decompress_alone, 3)
    ours = best_of(log_append, 3)
    mb = raw / 1e6
    report(f"Log.append zstd batches ({ZSTD_RECORDS_PER_BATCH} records, {raw // len(batches) // 1024} KiB compressed)",
           mb / ours, mb / base, "MB/s (compressed)", "zstd decompression alone")


def _batch() -> bytes:
    return bytes(MemoryRecords.build([SimpleRecord(1_700_000_000_000, None, RECORD) for _ in range(RECORDS_PER_BATCH)]))


def main() -> None:
    batch = _batch()
    count = TOTAL_BYTES // len(batch)
    tmp = Path(tempfile.mkdtemp(prefix="bench-log-"))
    try:
        config = LogConfig.from_properties({"log.dirs": str(tmp)}).topic_config({"segment.bytes": 64 * 1024 * 1024})

        def raw_write() -> float:
            path = tmp / "raw.bin"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                start = time.perf_counter()
                for _ in range(count):
                    os.write(fd, batch)
                return time.perf_counter() - start
            finally:
                os.close(fd)
                path.unlink()

        state: dict[str, Log] = {}

        def log_append() -> float:
            # Only the appends are timed; opening the log and removing the previous run's files are not.
            if "log" in state:
                state.pop("log").close()
            shutil.rmtree(tmp / "bench-0", ignore_errors=True)
            log = Log.open(tmp / "bench-0", config, scheduler=scheduler)
            records = MemoryRecords(batch)
            start = time.perf_counter()
            for _ in range(count):
                log.append(records)
            elapsed = time.perf_counter() - start
            state["log"] = log
            return elapsed

        scheduler = Scheduler("bench")
        scheduler.startup()  # the old segment's fsync on roll runs in the background, as in Kafka
        # Interleaved, so page-cache writeback of earlier runs weighs on both sides alike.
        raw, ours = float("inf"), float("inf")
        for _ in range(5):
            raw = min(raw, raw_write())
            ours = min(ours, log_append())
        mb = count * len(batch) / 1e6
        report("Log.append 16 KiB batches", mb / ours, mb / raw, "MB/s", "raw os.write", target=0.4)

        log = state["log"]

        def raw_read() -> None:
            for seg in log.segments.values():
                with open(seg.log.path, "rb", buffering=0) as f:
                    while f.read(1024 * 1024):
                        pass

        def log_read() -> None:
            offset = 0
            end = log.log_end_offset
            while offset < end:
                info = log.read(offset, 1024 * 1024)
                next_offset = MemoryRecords(bytes(info.records)).next_offset()
                assert next_offset is not None
                offset = next_offset

        raw = best_of(raw_read, 3)
        ours = best_of(log_read, 3)
        report("Log.read sequential 1 MiB fetches", mb / ours, mb / raw, "MB/s", "raw sequential read", target=0.5)
        log.close()
        shutil.rmtree(tmp / "bench-0", ignore_errors=True)
        zstd_append(tmp, scheduler)
        scheduler.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
