"""SIGKILL a real writer process (``writer.py``) at random points, many times, and check after every restart
that no acknowledged batch was lost and that the log, its indexes and its producer state agree.

What is checked after each kill, on the log reopened as a broker would (unclean, from the recovery point):

* the log is a valid prefix: offsets run contiguously from the log start to the log end, every record holds the
  value, key and timestamp derived from its offset, every batch the producer id and the sequence = its offset;
* every batch acknowledged after a flush is there: the log end offset is above the highest ``ACK``;
* the indexes agree with the log: every offset index entry points at the start of the batch holding its offset,
  every time index entry (T, O) has T = the timestamp of offset O (timestamps grow with offsets here), entries
  strictly increasing;
* the producer state is consistent: an idempotent retry of the last batch is answered as a duplicate with the
  original offsets and writes nothing.

The reopened log is dropped without a clean close (``close_handlers``), so the next writer starts unclean too.
Set ``CRASH_SEED`` to replay a run's random choices (the kill timing still varies).

Timing is scaled to the machine, not written in seconds: the first kill is a calibration (a writer's time to
READY, the time of one append-and-flush round measured over its first ACKs, and the time of the check after
the kill), and the kill points and the run's time budget are multiples of what it measured.
"""

from __future__ import annotations

import os
import random
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from local import filenames
from local.log import Log
from tests.crash.writer import (
    PRODUCER_ID,
    build_batch,
    crash_config,
    expected_timestamp,
    expected_value,
    read_recovery_point,
)

pytestmark = pytest.mark.crash

WRITER = Path(__file__).with_name("writer.py")
REPO = Path(__file__).resolve().parents[2]
KILLS = 60
MIN_KILLS = 25
CALIBRATION_ACKS = 20  # flush rounds timed by the calibration kill
POST_READY_ACKS = 30  # a kill after READY comes within this many flush rounds (as measured)
BUDGET_FACTOR = 2.0  # the run may take this many times what KILLS calibrated kills would
LIMIT = 120.0  # seconds: a failure bound for waits that end at once on any machine


@dataclass(frozen=True)
class Calibration:
    ready_s: float  # from starting a writer to its READY (interpreter start, imports, log recovery)
    ack_s: float  # one round of appends and a flush
    check_s: float  # reopening and checking the log after a kill

    def budget_s(self) -> float:
        mean_cycle = self.ready_s + self.ack_s * POST_READY_ACKS / 2 + self.check_s
        return KILLS * mean_cycle * BUDGET_FACTOR


class Writer:
    """One writer process and the lines it printed (read on a thread so its pipe never fills)."""

    def __init__(self, partition_dir: Path, seed: int, t0: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(WRITER), str(partition_dir), str(seed), str(t0)],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._acks = 0
        self._printed = threading.Condition()
        self._ended = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode().strip()
            with self._printed:
                self.lines.append(line)
                if line.startswith("ACK "):
                    self._acks += 1
                self._printed.notify_all()
            if line.startswith("READY"):
                self.ready.set()
        with self._printed:
            self._ended = True
            self._printed.notify_all()
        self.ready.set()  # the process ended: nobody waits forever

    def wait_for_acks(self, n: int) -> bool:
        """Wait until it has printed ``n`` ACKs (False if it ended first or took LIMIT)."""
        with self._printed:
            return self._printed.wait_for(lambda: self._acks >= n or self._ended, LIMIT) and self._acks >= n

    def kill(self) -> str:
        """SIGKILL it; returns its stderr. A writer that died by itself is a failure."""
        self.proc.send_signal(signal.SIGKILL)
        _, err = self.proc.communicate(timeout=LIMIT)
        self._reader.join(timeout=LIMIT)
        stderr = err.decode(errors="replace")
        if self.proc.returncode != -signal.SIGKILL:
            pytest.fail(f"writer exited with {self.proc.returncode} before it was killed:\n{stderr}")
        return stderr

    def max_ack(self) -> int:
        acks = [int(line.split()[1]) for line in self.lines if line.startswith("ACK ")]
        return max(acks, default=-1)


def calibrate(partition_dir: Path, t0: int, seed: int, rng: random.Random) -> tuple[Calibration, int]:
    """The first kill, timed: returns the machine's calibration and the highest offset acknowledged."""
    started = time.monotonic()
    writer = Writer(partition_dir, rng.randrange(2**32), t0)
    assert writer.ready.wait(timeout=LIMIT), "the writer never opened the log"
    ready = time.monotonic()
    assert writer.wait_for_acks(CALIBRATION_ACKS), f"the writer did not flush {CALIBRATION_ACKS} times: {writer.lines}"
    acked = time.monotonic()
    writer.kill()
    max_acked = writer.max_ack()
    killed = time.monotonic()
    check_log(partition_dir, t0, max_acked, 1, f"seed {seed}, calibration kill, highest ack {max_acked}")
    checked = time.monotonic()
    return Calibration(ready - started, (acked - ready) / CALIBRATION_ACKS, checked - killed), max_acked


def test_sigkill_at_random_points_loses_no_acknowledged_batch(tmp_path: Path) -> None:
    seed = int(os.environ.get("CRASH_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    partition_dir = tmp_path / "data" / "crash-0"
    t0 = time.time_ns() // 1_000_000
    started = time.monotonic()
    calibration, max_acked = calibrate(partition_dir, t0, seed, rng)
    budget = calibration.budget_s()
    kills = 1
    context = f"seed {seed}, {calibration}"
    while kills < KILLS and time.monotonic() - started < budget:
        writer = Writer(partition_dir, rng.randrange(2**32), t0)
        if rng.random() < 0.15:
            # late in its start, often while the writer is still loading (recovering) the log
            time.sleep(rng.uniform(0.5, 1.0) * calibration.ready_s)
        else:
            assert writer.ready.wait(timeout=LIMIT), "the writer never opened the log"
            time.sleep(rng.uniform(0.0, POST_READY_ACKS) * calibration.ack_s)
        writer.kill()
        kills += 1
        max_acked = max(max_acked, writer.max_ack())
        context = f"seed {seed}, kill {kills}, highest ack {max_acked}, {calibration}"
        check_log(partition_dir, t0, max_acked, rng.choice((1, 4)), context)
    assert kills >= MIN_KILLS, f"only {kills} kills fit in {budget:.1f} s ({context})"
    assert max_acked > 100, f"the writer barely wrote anything ({context})"


def check_log(partition_dir: Path, t0: int, max_acked: int, threads: int, context: str) -> None:
    log = Log.open(
        partition_dir,
        crash_config(partition_dir.parent),
        had_clean_shutdown=False,
        recovery_point=read_recovery_point(partition_dir),
        num_segment_loading_threads=threads,
    )
    try:
        start, end = log.log_start_offset, log.log_end_offset
        assert end > max_acked, f"acknowledged offset {max_acked} lost: log ends at {end} ({context})"
        batches = list(log.batches_from(start))
        offsets: list[int] = []
        for batch in batches:
            assert batch.producer_id == PRODUCER_ID, context
            assert batch.base_sequence == batch.base_offset, context
            for record in batch.records():
                offsets.append(record.offset)
                assert record.value == expected_value(record.offset), f"offset {record.offset} ({context})"
                assert record.key == b"k%d" % record.offset, context
                assert record.timestamp == expected_timestamp(t0, record.offset), context
        assert offsets == list(range(start, end)), f"log is not a contiguous prefix ({context})"
        check_indexes(log, t0, context)
        if batches:
            last = batches[-1]
            count = last.last_offset - last.base_offset + 1
            info = log.append(build_batch(t0, last.base_offset, count))
            assert info.duplicate, f"a retry of the last batch was not a duplicate ({context})"
            assert (info.first_offset, info.last_offset) == (last.base_offset, last.last_offset), context
            assert log.log_end_offset == end, context
    finally:
        log.close_handlers()


_BATCH_HEAD = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_DELTA = struct.Struct(">i")  # lastOffsetDelta at byte 23


def check_indexes(log: Log, t0: int, context: str) -> None:
    segments = list(log.segments.values())
    for i, segment in enumerate(segments):
        base = segment.base_offset
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else log.log_end_offset
        data = filenames.log_file(log.dir, base).read_bytes()
        offset_index = segment.offset_index
        previous = -1
        for n in range(offset_index.entries):
            entry = offset_index.entry(n)
            assert base <= entry.offset < max(next_base, base + 1), f"segment {base}: {entry} ({context})"
            assert entry.offset > previous, f"segment {base}: entries not increasing ({context})"
            previous = entry.offset
            assert entry.position + 61 <= len(data), f"segment {base}: {entry} past the log end ({context})"
            batch_base, _ = _BATCH_HEAD.unpack_from(data, entry.position)
            (delta,) = _LAST_DELTA.unpack_from(data, entry.position + 23)
            assert batch_base <= entry.offset <= batch_base + delta, f"segment {base}: {entry} ({context})"
        time_index = segment.time_index
        previous_ts = -1
        for n in range(time_index.entries):
            time_entry = time_index.entry(n)
            assert time_entry.timestamp > previous_ts, f"segment {base}: time index not increasing ({context})"
            previous_ts = time_entry.timestamp
            assert base <= time_entry.offset < max(next_base, base + 1), f"segment {base}: {time_entry} ({context})"
            assert time_entry.timestamp == expected_timestamp(t0, time_entry.offset), f"segment {base}: {time_entry}"
