"""Startup of a partition: parallel segment loading, and unclean recovery throughput.

1. One partition of 10,000 small segments after a clean shutdown, loaded with
   ``num.segment.loading.threads.per.data.dir`` = 4 against 1 (the KIP's point; target >= 1.5x). Reported twice:
   with the segment files in the page cache, and cold (each file's cached pages dropped with
   ``posix_fadvise(DONTNEED)`` before every load, as after a reboot).
2. Unclean recovery (every batch CRC-checked, indexes rebuilt) of 64 MiB of 16 KiB batches, in MB/s, against
   reading the same files and computing their crc32c (target >= 0.25x).

The dirs are built directly from one segment's bytes with the base offsets patched (they sit outside the CRC),
so building 10,000 segments takes seconds rather than 10,000 rolls.

What the profiles said (py-spy with --gil, cProfile; 2-core VM, CPython 3.11):

* A clean load cost ~200 microseconds a segment: about a dozen syscalls (a few microseconds each here) and
  Python, most of it pathlib (Paths built and re-parsed per file), copying the segment list once per segment
  added (quadratic), a 16 MiB read buffer allocated per index file read, and a transaction index reading its
  file when constructed. Without those: 1.94 s -> 1.2 s for 10,000 segments, sequentially.
* Threads made phase 1 slower, not faster (4 threads 2.1 s against 1 thread's 1.2 s): every segment is a
  handful of microsecond-long syscalls, each of which drops the GIL and wakes another loading thread, which
  then holds it for the Python around its own syscalls. The work that could overlap is too short to pay for the
  hand-offs, and even on a cold page cache the hand-offs ate the overlapped waits. So phase 1 is split: the
  loading thread opens the segments (their descriptors must live in this process) while ``num_threads`` worker
  processes (``local.load_worker``, subprocesses, not a multiprocessing pool: those re-run the caller's
  ``__main__``) read and check the index files, the other half of the work and most of the cold-disk waits.
* Unclean recovery spent its time in LogSegment.recover's per-batch Python (a RecordBatch per batch, an index
  append per entry) and in first-touch page faults of the fresh sparse index files through the mapping
  (page_mkwrite, milliseconds per page on this ext4); recovery now checks each batch with one header unpack and
  one crc32c over a large read, and writes the rebuilt entries with one pwrite.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import struct
import tempfile
import time
from pathlib import Path

from bench._util import best_of, report
from local import filenames
from local.config import LogConfig, TopicConfig
from local.crc import crc32c
from local.log import Log
from local.records import MemoryRecords, SimpleRecord
from local.scheduler import MockTime

SEGMENTS = 10_000
BATCHES_PER_SEGMENT = 4
RECORDS_PER_BATCH = 2
RECOVERY_BYTES = 64 << 20
RECOVERY_SEGMENT_BYTES = 8 << 20
RECOVERY_BATCH_RECORDS = 16
RECOVERY_RECORD_BYTES = 1000
T0 = 1_700_000_000_000
_BASE_OFFSET = struct.Struct(">q")


def bench_config(root: Path) -> TopicConfig:
    base = LogConfig.from_properties({"log.dirs": str(root)}).topic_config()
    return dataclasses.replace(base, segment_bytes=1 << 30, index_interval_bytes=1, retention_ms=-1)


def _batches_at(template: list[bytes], base_offset: int) -> bytes:
    """Consecutive batches (each with its original offsets relative to the first) re-based at ``base_offset``."""
    out = bytearray()
    offset = base_offset
    for batch in template:
        patched = bytearray(batch)
        _BASE_OFFSET.pack_into(patched, 0, offset)
        out += patched
        offset += RECORDS_PER_BATCH
    return bytes(out)


def build_many_segments(path: Path, cfg: TopicConfig, segments: int = SEGMENTS) -> None:
    """``segments`` closed segments of ``BATCHES_PER_SEGMENT`` batches each, plus a clean close's files."""
    scratch = path.parent / "scratch-0"
    log = Log.open(scratch, cfg, time=MockTime(ms=T0))
    for i in range(BATCHES_PER_SEGMENT):
        values = [SimpleRecord(T0 + i * RECORDS_PER_BATCH + j, b"k", b"v" * 100) for j in range(RECORDS_PER_BATCH)]
        log.append(MemoryRecords.build(values))
    log.roll()
    log.close()
    first = filenames.log_file(scratch, 0).read_bytes()
    batches = _split(first)
    index = filenames.offset_index_file(scratch, 0).read_bytes()
    time_index = filenames.time_index_file(scratch, 0).read_bytes()
    path.mkdir(parents=True)
    shutil.copy(scratch / filenames.PARTITION_METADATA_FILENAME, path / filenames.PARTITION_METADATA_FILENAME)
    step = BATCHES_PER_SEGMENT * RECORDS_PER_BATCH
    for n in range(segments):
        base = n * step
        filenames.log_file(path, base).write_bytes(_batches_at(batches, base))
        filenames.offset_index_file(path, base).write_bytes(index)
        filenames.time_index_file(path, base).write_bytes(time_index)
    shutil.rmtree(scratch)


def _split(data: bytes) -> list[bytes]:
    out, position = [], 0
    while position + 12 <= len(data):
        size = 12 + int.from_bytes(data[position + 8 : position + 12], "big")
        out.append(data[position : position + size])
        position += size
    return out


def drop_page_cache(path: Path) -> None:
    """Evict the cached pages of every file in ``path`` (clean pages only: the files were written and synced)."""
    for entry in os.scandir(path):
        fd = os.open(entry.path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def load_once(path: Path, cfg: TopicConfig, threads: int, cold: bool) -> float:
    if cold:
        drop_page_cache(path)
    started = time.perf_counter()
    log = Log.open(path, cfg, time=MockTime(ms=T0), had_clean_shutdown=True, num_segment_loading_threads=threads)
    elapsed = time.perf_counter() - started
    assert log.number_of_segments() == SEGMENTS and log.load_stats.segments_recovered == 0
    log.close()
    return elapsed


def bench_parallel_loading(root: Path) -> None:
    cfg = bench_config(root)
    path = root / "many-0"
    started = time.perf_counter()
    build_many_segments(path, cfg)
    print(f"built {SEGMENTS} segments in {time.perf_counter() - started:.1f} s", flush=True)
    os.sync()  # the 30,000 files on disk, as after a restart, not being written back during the loads
    load_once(path, cfg, 1, cold=False)  # first load writes the producer snapshots a clean close leaves
    # The worker processes start at a process's first parallel load and serve every later one: shown apart.
    print(f"first 4-thread load of this process (starting 4 worker processes): {load_once(path, cfg, 4, False):.2f} s")
    for cold in (False, True):
        times = {t: min(load_once(path, cfg, t, cold) for _ in range(3)) for t in (1, 4)}
        label = "cold page cache" if cold else "warm page cache"
        report(
            f"load {SEGMENTS} segments, 4 threads vs 1 ({label})",
            SEGMENTS / times[4], SEGMENTS / times[1], "segments/s", "1 thread", target=1.5,
        )


def build_recovery_dir(path: Path) -> int:
    """``RECOVERY_BYTES`` of batches in segments of ``RECOVERY_SEGMENT_BYTES``, no index files. Returns bytes."""
    payload = os.urandom(RECOVERY_RECORD_BYTES)
    template = bytes(
        MemoryRecords.build([SimpleRecord(T0, None, payload) for _ in range(RECOVERY_BATCH_RECORDS)])
    )
    batches_per_segment = RECOVERY_SEGMENT_BYTES // len(template)
    path.mkdir(parents=True)
    total = 0
    offset = 0
    while total < RECOVERY_BYTES:
        base = offset
        data = bytearray(template * batches_per_segment)
        for i in range(batches_per_segment):
            _BASE_OFFSET.pack_into(data, i * len(template), offset)
            offset += RECOVERY_BATCH_RECORDS
        filenames.log_file(path, base).write_bytes(data)
        total += len(data)
    return total


def read_and_crc(path: Path) -> None:
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        if entry.name.endswith(filenames.LOG_FILE_SUFFIX):
            with open(entry.path, "rb") as f:
                crc32c(f.read())


def bench_unclean_recovery(root: Path) -> None:
    cfg = bench_config(root)
    source = root / "recover-0"
    total = build_recovery_dir(source)
    work = root / "work" / "recover-0"

    def recover() -> None:
        shutil.rmtree(work.parent, ignore_errors=True)
        shutil.copytree(source, work)
        # After a crash the files are on disk, not dirty in the page cache: without this sync, every metadata
        # change of recovery (index files created, truncated) waits on an ext4 journal commit that first writes
        # back the 64 MiB the copy just dirtied.
        os.sync()
        started = time.perf_counter()
        log = Log.open(work, cfg, time=MockTime(ms=T0), had_clean_shutdown=False, recovery_point=0)
        timings.append(time.perf_counter() - started)
        assert log.load_stats.bytes_truncated == 0
        log.close()

    timings: list[float] = []
    for _ in range(3):
        recover()
    ours = min(timings)
    baseline = best_of(lambda: read_and_crc(source), repeat=3)
    mb = total / 1e6
    report("unclean recovery of 64 MiB (16 KiB batches)", mb / ours, mb / baseline, "MB/s", "read+crc32c", target=0.25)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-loading-") as tmp:
        bench_parallel_loading(Path(tmp))
    os.sync()  # the removal of those 30,000 files done before recovery is timed
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as tmp:
        bench_unclean_recovery(Path(tmp))


if __name__ == "__main__":
    main()
