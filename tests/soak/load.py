"""A mixed load on one partition, shared by the soak test (tests/soak/test_soak.py) and ``python -m bench soak``.

One writer appends batches of 0-3 KB records as fast as it can; sequential readers consume from the log start
and random readers read anywhere (half of them near the log start, where retention deletes); the LogManager's
OWN scheduler tiers the partition to a local-directory remote tier and applies retention to both tiers (nothing
here calls copy, expiration or retention). Halfway through, the LogManager is closed and reopened (a clean
restart) while the workers wait at a gate.

Every value is derived from its offset (:func:`expected_value`), so a reader checks what it got without a model:
each read must return its fetch offset first (the first batch holds it) or raise ``OffsetOutOfRangeError``,
and every record must be the one written at its offset, offsets consecutive. A monitor samples open files, RSS
and the copy lag (Kafka's RemoteCopyLagSegments/RemoteCopyLagBytes) during the run, with what the engine keeps
files open for at that moment (segment files in the partition dir, the remote index cache's files: see
open_files_bound); tracebacks the engine's own tasks log are collected (task_failures).
"""

from __future__ import annotations

import logging
import os
import random
import statistics
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local import LogConfig, LogManager
from local.errors import OffsetOutOfRangeError
from local.log import Log
from local.records import MemoryRecords, SimpleRecord

MIB = 1024 * 1024
TOPIC = "soak"
_PAGE = os.sysconf("SC_PAGE_SIZE")
_Q = struct.Struct(">q")


def expected_value(offset: int) -> bytes:
    """The value written at ``offset``: 0-3 KB, its length and bytes both derived from the offset."""
    return _Q.pack(offset) * (((offset * 2654435761) >> 8) % 384)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def anonymous_rss_bytes() -> int:
    """Resident memory not backed by a file (the heap: where a leak shows). The rest of the RSS is file pages
    mapped by the process, such as the segment cache's chunks, which its memory bound limits."""
    with open("/proc/self/statm") as f:
        fields = f.read().split()
    return (int(fields[1]) - int(fields[2])) * _PAGE


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def broker_props(tmp: Path, task_interval_ms: int = 200) -> dict[str, str]:
    return {
        "log.dirs": str(tmp / "data"),
        "log.segment.bytes": str(MIB),
        "log.retention.check.interval.ms": "200",
        "log.segment.delete.delay.ms": "1000",
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "local",
        "rsm.config.dir": str(tmp / "remote"),
        "remote.log.manager.task.interval.ms": str(task_interval_ms),
    }


TOPIC_OVERRIDES = {
    "remote.storage.enable": "true",
    "local.retention.bytes": str(8 * MIB),  # local retention deletes (once copied) while readers read
    "retention.bytes": str(24 * MIB),  # remote retention too: the log start moves under the readers
}


class Gate:
    """Workers pass through it for each operation; :meth:`closed` waits for the operations in flight and holds
    new ones back (the restart swaps the LogManager meanwhile)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._open = True
        self._active = 0

    @contextmanager
    def passing(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: self._open)
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    @contextmanager
    def closed(self) -> Iterator[None]:
        with self._cond:
            self._open = False
            self._cond.wait_for(lambda: self._active == 0)
        try:
            yield
        finally:
            with self._cond:
                self._open = True
                self._cond.notify_all()


@dataclass
class LoadResult:
    seconds: float
    records_written: int = 0
    reads: int = 0
    remote_reads: int = 0
    out_of_range: int = 0
    records_checked: int = 0
    skips: list[str] = field(default_factory=list)  # reads that did not return their fetch offset first
    wrong: list[str] = field(default_factory=list)  # records not as written (value, gap, torn batch)
    errors: list[str] = field(default_factory=list)  # anything else a worker raised
    # Tracebacks logged at WARNING or above by the engine's own threads (a scheduled task or a remote tier task that
    # failed: they log and go on, so nothing else would show them).
    task_failures: list[str] = field(default_factory=list)
    restarts: int = 0
    read_latencies: list[float] = field(default_factory=list)  # seconds, every read
    open_files: list[int] = field(default_factory=list)
    # What the engine keeps files open for, sampled with open_files (see open_files_bound): local segments (and
    # those deleted, waiting for file.delete.delay.ms), remote segments (the index cache's), and the most chunk
    # files the segment cache's memory tier keeps mapped (from its configuration).
    local_segments: list[int] = field(default_factory=list)
    deleted_segments: list[int] = field(default_factory=list)
    txn_index_files: list[int] = field(default_factory=list)
    remote_index_files: list[int] = field(default_factory=list)
    chunk_files_bound: int = 0
    readers: int = 0
    rss: list[int] = field(default_factory=list)
    rss_anonymous: list[int] = field(default_factory=list)
    copy_lag_segments: list[int] = field(default_factory=list)
    copy_lag_bytes: list[int] = field(default_factory=list)
    highest_remote_offsets: list[int] = field(default_factory=list)  # the log's, with each lag sample
    sample_times: list[float] = field(default_factory=list)  # time.monotonic() of each sample
    remote_segments_copied: int = 0
    remote_segments_deleted: int = 0
    final_log_start: int = 0
    final_log_end: int = 0

    def copy_stalls(self, window: float) -> list[tuple[float, int]]:
        """The windows of ``window`` seconds through which there was copy lag at every sample and the copy moved the
        highest remote offset not once: (seconds into the run, lag at its start) of each. Progress, not speed: a copy
        that keeps working, however slowly the machine lets it, has none."""
        stalls: list[tuple[float, int]] = []
        times, lag, copied = self.sample_times, self.copy_lag_segments, self.highest_remote_offsets
        j = 0
        for i in range(len(times)):
            j = max(j, i)
            while j < len(times) and times[j] - times[i] < window:
                j += 1
            if j == len(times):
                break
            if all(lag[k] > 0 for k in range(i, j + 1)) and copied[j] <= copied[i]:
                stalls.append((round(times[i] - times[0], 1), lag[i]))
        return stalls

    def latency_ms(self, q: float) -> float:
        if not self.read_latencies:
            return float("nan")
        data = sorted(self.read_latencies)
        return data[min(len(data) - 1, int(q * len(data)))] * 1000

    def summary(self) -> str:
        lag = self.copy_lag_segments or [0]
        lag_b = self.copy_lag_bytes or [0]
        return (
            f"{self.seconds:.0f} s: {self.records_written:,} records written, {self.reads:,} reads "
            f"({self.remote_reads:,} below the local log start, {self.out_of_range:,} out of range), "
            f"{self.records_checked:,} records checked, {len(self.skips)} skips, {len(self.wrong)} wrong, "
            f"{len(self.errors)} errors, {len(self.task_failures)} task failures; copied {self.remote_segments_copied}, remote-deleted "
            f"{self.remote_segments_deleted}; copy lag segments mean {statistics.fmean(lag):.1f} max {max(lag)}, "
            f"bytes max {max(lag_b):,}; read p50 {self.latency_ms(0.5):.2f} ms p99 {self.latency_ms(0.99):.2f} ms; "
            f"open files {min(self.open_files or [0])}-{max(self.open_files or [0])}; "
            f"RSS {min(self.rss or [0]) / MIB:.0f}-{max(self.rss or [0]) / MIB:.0f} MiB"
        )


class _Run:
    def __init__(
        self, tmp: Path, seconds: float, writer: bool, restart: bool, task_interval_ms: int, props: dict[str, str],
    ) -> None:
        self.tmp = tmp
        self.seconds = seconds
        self.with_writer = writer
        self.with_restart = restart
        self.config = LogConfig.from_properties({**broker_props(tmp, task_interval_ms), **props})
        self.gate = Gate()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.result = LoadResult(seconds)
        self.manager = LogManager(self.config)
        self.log = self.manager.get_or_create_log(TOPIC, 0, TOPIC_OVERRIDES)

    # -- workers ------------------------------------------------------------------------------------------

    def _guard(self, name: str, fn: Any) -> None:
        try:
            fn()
        except Exception as exc:  # a worker's failure is a finding, reported by the run
            with self.lock:
                self.result.errors.append(f"{name}: {type(exc).__name__}: {exc}")
            self.stop.set()

    def writer(self) -> None:
        rng = random.Random(1)
        now = int(time.time() * 1000)
        while not self.stop.is_set():
            with self.gate.passing():
                log = self.log
                first = log.log_end_offset
                n = rng.randint(1, 40)
                records = [SimpleRecord(now, b"%d" % o, expected_value(o)) for o in range(first, first + n)]
                info = log.append(MemoryRecords.build(records))
                if info.first_offset != first:
                    raise AssertionError(f"append assigned {info.first_offset}, expected {first}")
            with self.lock:
                self.result.records_written += n

    def _read(self, log: Log, offset: int, max_bytes: int) -> int | None:
        """One read at ``offset``, checked; returns the next offset to read (None when out of range)."""
        local_start = log.local_log_start_offset
        started = time.perf_counter()
        try:
            info = log.read(offset, max_bytes)
            data = info.records
            batches = list(data.batches())
        except OffsetOutOfRangeError as exc:
            elapsed = time.perf_counter() - started
            with self.lock:
                self.result.reads += 1
                self.result.out_of_range += 1
                self.result.read_latencies.append(elapsed)
            start, end = exc.context.get("log_start_offset"), exc.context.get("log_end_offset")
            if start is None or end is None or start <= offset <= end:
                with self.lock:
                    self.result.skips.append(f"out of range at {offset} names log start {start}, end {end}")
            return None
        elapsed = time.perf_counter() - started
        checked = 0
        problems: list[str] = []
        skip = None
        if batches:
            first = batches[0]
            if not first.base_offset <= offset <= first.last_offset:
                skip = f"read at {offset} returned batches from {first.base_offset}-{first.last_offset}"
            expected = first.base_offset
            for batch in batches:
                for rec in batch.records():
                    if rec.offset != expected:
                        problems.append(f"read at {offset}: offset {rec.offset} where {expected} was due")
                        break
                    if rec.value != expected_value(rec.offset) or rec.key != b"%d" % rec.offset:
                        problems.append(f"read at {offset}: record {rec.offset} is not the one written")
                        break
                    expected += 1
                    checked += 1
            next_offset = batches[-1].last_offset + 1
        else:
            next_offset = offset
        with self.lock:
            r = self.result
            r.reads += 1
            r.remote_reads += offset < local_start
            r.records_checked += checked
            r.read_latencies.append(elapsed)
            if skip is not None:
                r.skips.append(skip)
            r.wrong.extend(problems)
        return next_offset

    def sequential_reader(self, seed: int) -> None:
        rng = random.Random(seed)
        offset = -1
        while not self.stop.is_set():
            with self.gate.passing():
                log = self.log
                if offset < log.log_start_offset:
                    offset = log.log_start_offset
                got = self._read(log, offset, rng.choice((16 * 1024, 256 * 1024, 1024 * 1024)))
                if got is None:
                    offset = -1  # out of range: on from the (new) log start
                elif got == offset:
                    offset = -1  # nothing more (the log end): round again from the start
                else:
                    offset = got

    def random_reader(self, seed: int) -> None:
        rng = random.Random(seed)
        while not self.stop.is_set():
            with self.gate.passing():
                log = self.log
                start, end = log.log_start_offset, log.log_end_offset
                if end <= start:
                    continue
                if rng.random() < 0.5:  # near the log start: where retention (of both tiers) deletes
                    offset = start + rng.randrange(min(end - start, 2000))
                else:
                    offset = rng.randrange(start, end)
                self._read(log, offset, rng.choice((4 * 1024, 64 * 1024, 512 * 1024)))

    def _segment_counts(self) -> tuple[int, int, int, int]:
        """(local segments, local segments deleted and not yet removed, transaction index files among them, files
        in the remote index cache), now."""
        from tiered.remote_log_manager import RemoteLogManager

        # From the directory (one listing), not the log's segment list: retention takes a segment out of the list
        # before it renames its files .deleted, and a sample in between would count its files nowhere.
        names = os.listdir(self.log.dir)
        local = sum(1 for name in names if name.endswith(".log"))
        deleted = sum(1 for name in names if name.endswith(".log.deleted"))
        txn = sum(1 for name in names if ".txnindex" in name)
        rlm = self.manager.remote_tier
        remote = 0
        if isinstance(rlm, RemoteLogManager):
            remote = sum(1 for name in os.listdir(rlm.index_cache.cache_dir) if not name.endswith(".tmp"))
        return local, deleted, txn, remote

    def monitor(self) -> None:
        from tiered.remote_log_manager import RemoteLogManager

        while not self.stop.wait(0.5):
            with self.gate.passing():
                rlm = self.manager.remote_tier
                lag = rlm.copy_lag(self.log) if isinstance(rlm, RemoteLogManager) else (0, 0)
                copied_up_to = rlm.highest_offset_in_remote_storage(self.log) if isinstance(rlm, RemoteLogManager) else -1
                # Counted before and after the files: a segment rolled or deleted in between is counted for them.
                before = self._segment_counts()
                files = open_files()
                after = self._segment_counts()
            with self.lock:
                self.result.open_files.append(files)
                self.result.local_segments.append(max(before[0], after[0]))
                self.result.deleted_segments.append(max(before[1], after[1]))
                self.result.txn_index_files.append(max(before[2], after[2]))
                self.result.remote_index_files.append(max(before[3], after[3]))
                self.result.rss.append(rss_bytes())
                self.result.rss_anonymous.append(anonymous_rss_bytes())
                self.result.copy_lag_segments.append(lag[0])
                self.result.copy_lag_bytes.append(lag[1])
                self.result.highest_remote_offsets.append(copied_up_to)
                self.result.sample_times.append(time.monotonic())

    # -- the run ------------------------------------------------------------------------------------------

    def _tally_remote(self) -> None:
        totals = getattr(self.manager.remote_tier, "task_totals", None)
        if totals is not None:
            self.result.remote_segments_copied += totals.segments_copied
            self.result.remote_segments_deleted += totals.segments_deleted

    def restart(self) -> None:
        with self.gate.closed():
            self.manager.close()
            self._tally_remote()  # after close: the runs in progress have ended
            self.manager = LogManager(self.config)
            self.log = self.manager.get_or_create_log(TOPIC, 0, TOPIC_OVERRIDES)
            self.result.restarts += 1

    def run(self, sequential: int, random_readers: int) -> LoadResult:
        failures = _TaskFailures(self.result.task_failures)
        logging.getLogger().addHandler(failures)
        try:
            return self._run(sequential, random_readers)
        finally:
            logging.getLogger().removeHandler(failures)

    def _run(self, sequential: int, random_readers: int) -> LoadResult:
        chunks = getattr(getattr(self.manager.remote_tier, "segments", None), "chunks", None)
        self.result.chunk_files_bound = chunks.max_open_chunk_files if chunks is not None else 0
        self.result.readers = sequential + random_readers
        workers = [threading.Thread(target=self._guard, args=("monitor", self.monitor), name="soak-monitor")]
        if self.with_writer:
            workers.append(threading.Thread(target=self._guard, args=("writer", self.writer), name="soak-writer"))
        for i in range(sequential):
            workers.append(threading.Thread(
                target=self._guard, args=(f"sequential-{i}", lambda i=i: self.sequential_reader(100 + i)), name=f"soak-seq-{i}"))
        for i in range(random_readers):
            workers.append(threading.Thread(
                target=self._guard, args=(f"random-{i}", lambda i=i: self.random_reader(200 + i)), name=f"soak-rand-{i}"))
        for w in workers:
            w.start()
        try:
            if self.with_restart and not self.stop.wait(self.seconds / 2):
                self.restart()
            self.stop.wait(self.seconds / 2 if self.with_restart else self.seconds)
        finally:
            self.stop.set()
            for w in workers:
                w.join(60)
            self.result.final_log_start = self.log.log_start_offset
            self.result.final_log_end = self.log.log_end_offset
            self.manager.close()
            self._tally_remote()
        return self.result


class _TaskFailures(logging.Handler):
    """Collects the tracebacks logged at WARNING or above (a failed task logs its exception and goes on)."""

    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.WARNING)
        self._into = into

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            self._into.append(f"{record.name}: {record.getMessage()}: {type(exc).__name__}: {exc}")


# Files the engine holds open (the structure the soak's bound is made of):
# - a local segment: its .log (one descriptor, shared by the reads' slices) and its offset and time indexes once
#   loaded (a map each: CPython's mmap keeps a descriptor, before 3.13); a transaction index file when it has one
#   (counted as files: the soak writes no transactions, so none);
# - the remote index cache: at most one per file it holds (a map or a descriptor per index loaded);
# - a read in flight: at most one more (the slice of a segment deleted meanwhile, or the map of a chunk the segment
#   cache evicted meanwhile);
# - the segment cache's memory tier: ChunkCache.max_open_chunk_files (mapped_bytes // chunk_size);
# - the copier process: a pipe each way per child (RemoteLogManager: at most 2 children).
FILES_PER_LOCAL_SEGMENT = 3
FILES_PER_READER = 1
COPIER_FILES = 2 * 2


def open_files_bound(result: LoadResult, sample: int, files_before: int) -> int:
    """The most files the process may hold open at monitor sample ``sample``: what it held before the load, and
    what the engine keeps open for the segments, caches and reads of that moment (see the constants above)."""
    return (
        files_before
        + FILES_PER_LOCAL_SEGMENT * (result.local_segments[sample] + result.deleted_segments[sample])
        + result.txn_index_files[sample]
        + result.remote_index_files[sample]
        + result.chunk_files_bound
        + FILES_PER_READER * result.readers
        + COPIER_FILES
    )


def prefill(tmp: Path, records: int) -> None:
    """Write ``records`` records (values derived from offsets), tier them and apply retention of both tiers, and
    close: the data a load without a writer reads, with nothing left for the tasks to do."""
    config = LogConfig.from_properties(broker_props(tmp))
    with LogManager(config, start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, TOPIC_OVERRIDES)
        now = int(time.time() * 1000)
        while log.log_end_offset < records:
            first = log.log_end_offset
            log.append(MemoryRecords.build([SimpleRecord(now, b"%d" % o, expected_value(o)) for o in range(first, first + 40)]))
        log.roll()
        rlm: Any = manager.remote_tier
        for _ in range(2):
            rlm.run_once(manager.all_logs())
            manager.cleanup_logs()


def run_load(
    tmp: Path, seconds: float, *, writer: bool = True, restart: bool = True, sequential: int = 2,
    random_readers: int = 2, task_interval_ms: int = 200, props: dict[str, str] | None = None,
) -> LoadResult:
    """Run the load for ``seconds`` in data dirs under ``tmp`` and return what it saw (see the module docstring);
    ``props`` override broker keys."""
    return _Run(tmp, seconds, writer, restart, task_interval_ms, props or {}).run(sequential, random_readers)
