"""Run every benchmark: ``python -m bench`` (or ``python -m bench NAME...`` for some of them).

Each ``bench/bench_*.py`` module has a ``main()`` that prints its figures against a baseline measured in
the same run.

``python -m bench mutation [MODULE...] [--jobs N] [--keep]`` runs mutation testing (mutmut) instead; it is
never part of the default run (hours, not minutes): see ``bench/bench_mutation.py`` and TESTING.md.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import platform
import sys
from pathlib import Path

# Run only when named (``python -m bench spark``): they start a JVM and take minutes.
OPT_IN = {"bench_spark", "bench_spark_columnar"}
# Run only when named, and with arguments of their own: not benchmarks.
ON_DEMAND = {"bench_mutation"}


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("mutation", "bench_mutation"):
        from bench import bench_mutation

        return bench_mutation.main(argv[1:])
    names = sorted(
        m.name
        for m in pkgutil.iter_modules([str(Path(__file__).parent)])
        if m.name.startswith("bench_") and m.name not in ON_DEMAND
    )
    wanted = [n if n.startswith("bench_") else f"bench_{n}" for n in argv] or [n for n in names if n not in OPT_IN]
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(names)}", file=sys.stderr)
        return 2
    print(f"# {platform.node()} {platform.machine()} {platform.python_implementation()} {platform.python_version()}")
    for name in wanted:
        # Each benchmark starts with the previous one's writes on disk: otherwise it pays for their writeback
        # (a benchmark after bench_loading's 30,000 files ran at half its speed measured alone).
        if hasattr(os, "sync"):
            os.sync()
        print(f"## {name}", flush=True)
        importlib.import_module(f"bench.{name}").main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
