"""Helpers shared by the benchmarks: best-of-N timing and the one-line report format."""

from __future__ import annotations

import time
from collections.abc import Callable
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
