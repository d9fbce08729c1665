"""Copy lag and read latency under load (issue 18): the soak's load (tests/soak/load.py) for a while, against a
baseline measured in the same run.

- baseline: the same readers on a prefilled log, with no writer and no tiering work to do (the data is
  copied first), so their latency is the reads' own;
- load: a writer appending as fast as it can, the same readers, and the LogManager's own scheduled copy,
  expiration and retention of both tiers (local-directory remote tier).

Printed: read latency p50/p99 under load vs the baseline (ratio), Kafka's RemoteCopyLagSegments and
RemoteCopyLagBytes sampled every 0.5 s (mean, max, last), and the writer's and copier's throughput; then the same
load with the copy in this process (``remote.log.manager.copier.process.enable=false``) for the copy lag it had
before the copier process (see tiered/copier_process.py).
``BENCH_SOAK_SECONDS`` sets the length of each phase (default 30).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from pathlib import Path

from bench._util import report_latency
from tests.soak.load import MIB, LoadResult, prefill, run_load

SECONDS = float(os.environ.get("BENCH_SOAK_SECONDS", "30"))


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    try:
        (tmp / "base").mkdir()
        prefill(tmp / "base", 40_000)
        base = run_load(tmp / "base", SECONDS, writer=False, restart=False)
        print(f"baseline (no writer, nothing to tier): {base.summary()}", flush=True)
        (tmp / "load").mkdir()
        load = run_load(tmp / "load", SECONDS, restart=False)
        print(f"load: {load.summary()}", flush=True)
        for q, name in ((0.5, "p50"), (0.99, "p99")):
            report_latency(
                f"read latency {name} under write + tiering load", load.latency_ms(q) / 1000, base.latency_ms(q) / 1000,
                "readers alone",
            )
        lag, lag_bytes = load.copy_lag_segments or [0], load.copy_lag_bytes or [0]
        print(
            f"copy lag (RemoteCopyLagSegments): mean {statistics.fmean(lag):.1f}, max {max(lag)}, last {lag[-1]} "
            f"segments; RemoteCopyLagBytes max {max(lag_bytes) / MIB:.1f} MiB, last {lag_bytes[-1] / MIB:.1f} MiB",
            flush=True,
        )
        _throughput(load)
        (tmp / "inproc").mkdir()
        inproc = run_load(tmp / "inproc", SECONDS, restart=False, props={"remote.log.manager.copier.process.enable": "false"})
        print(f"load, copy in process: {inproc.summary()}", flush=True)
        _throughput(inproc)
        lag_in = inproc.copy_lag_segments or [0]
        print(
            f"copy lag, copier process vs in process: mean {statistics.fmean(lag):.1f} vs {statistics.fmean(lag_in):.1f}, "
            f"last {lag[-1]} vs {lag_in[-1]} segments",
            flush=True,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _throughput(load: LoadResult) -> None:
    print(
        f"writer {load.records_written / SECONDS:,.0f} records/s; copier {load.remote_segments_copied / SECONDS:.2f} "
        f"segments/s ({load.remote_segments_copied} copied, {load.remote_segments_deleted} expired remotely); "
        f"{len(load.skips)} skips, {len(load.wrong)} wrong records",
        flush=True,
    )
