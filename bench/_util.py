"""Helpers shared by the benchmarks: best-of-N timing and the one-line report format."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def best_of(fn: Callable[[], Any], repeat: int = 5) -> float:
    """The fastest of ``repeat`` wall-clock runs of ``fn``, in seconds (least disturbed by noise)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def report(name: str, ours: float, baseline: float, unit: str, baseline_name: str, target: float | None = None) -> float:
    """Print ``name: ours, baseline, ratio`` where both figures are rates (higher is better)."""
    ratio = ours / baseline if baseline else float("inf")
    goal = f"  (target >= {target:g}x)" if target is not None else ""
    print(f"{name}: {ours:,.1f} {unit} vs {baseline_name} {baseline:,.1f} {unit} -> {ratio:.2f}x{goal}", flush=True)
    return ratio


def report_latency(name: str, ours: float, baseline: float, baseline_name: str, target: float | None = None) -> float:
    """Print a latency comparison (lower is better); the ratio is ours / baseline."""
    ratio = ours / baseline if baseline else float("inf")
    goal = f"  (target <= {target:g}x)" if target is not None else ""
    print(
        f"{name}: {ours * 1e6:,.2f} us vs {baseline_name} {baseline * 1e6:,.2f} us -> {ratio:.2f}x{goal}",
        flush=True,
    )
    return ratio


@contextmanager
def seaweedfs_bucket(name: str) -> Iterator[tuple[Path, Any, str, dict[str, str]]]:
    """A SeaweedFS server on loopback (started from localstack/) with a new bucket: (a scratch dir, a boto3 client,
    the bucket, the broker properties of a data dir in the scratch dir tiered to the bucket); all removed after."""
    from tests.integration.s3_servers import seaweedfs

    tmp = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    try:
        with seaweedfs(tmp) as endpoint:
            client = endpoint.client()
            bucket = f"bench-{uuid.uuid4().hex[:8]}"
            client.create_bucket(Bucket=bucket)
            yield tmp, client, bucket, {
                "log.dirs": str(tmp / "data"),
                "remote.log.storage.system.enable": "true", "remote.log.storage.manager.class.name": "s3",
                **{f"rsm.config.{k}": v for k, v in endpoint.rsm_config(bucket, "bench").items()},
            }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
