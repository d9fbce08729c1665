"""A reused Spark worker freezes its heap after its first read (tiered.spark.worker_heap).

Each check runs in a subprocess of its own: freezing is process-wide, and the test process must keep its collector
as it is. ``SPARK_REUSE_WORKER`` is what PySpark's daemon reads to decide whether it reuses a worker (and then
collects after every task); the subprocess sets it or not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from tiered.spark.options import SparkSourceOptionError, parse_options

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, reuse: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REUSE_WORKER"}
    if reuse:
        env["SPARK_REUSE_WORKER"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


SETTLE = """
    import gc, json, weakref
    from tiered.spark import worker_heap

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle only the collector frees
    gone = weakref.ref(a)
    del a, b
    kept = Node()  # alive: frozen
    before = gc.get_freeze_count()

    def items():
        yield 1
        yield 2

    it = worker_heap.settle_after(items(), {enabled})
    first = next(it)
    mid = gc.get_freeze_count()
    rest = list(it)
    after = gc.get_freeze_count()
    again = worker_heap.settle({enabled})
    print(json.dumps({{"before": before, "mid": mid, "after": after, "items": [first, *rest], "again": again,
                       "cycle_freed": gone() is None}}))
"""


def test_a_reused_worker_collects_then_freezes_once_after_its_first_read() -> None:
    out = _run(SETTLE.format(enabled=True), reuse=True)
    assert out["items"] == [1, 2]
    assert out["before"] == 0 and out["mid"] == 0  # nothing before the read's end
    assert out["after"] > 1000  # the modules and what survived: frozen
    assert out["cycle_freed"]  # garbage was collected first, not frozen
    assert out["again"] is False  # once per process


@pytest.mark.parametrize(("reuse", "enabled"), [(False, True), (True, False)])
def test_no_freeze_outside_a_reused_worker_or_when_turned_off(reuse: bool, enabled: bool) -> None:
    out = _run(SETTLE.format(enabled=enabled), reuse=reuse)
    assert out["items"] == [1, 2]
    assert out["after"] == 0
    assert out["again"] is False


def test_a_read_that_raises_settles_nothing() -> None:
    out = _run("""
        import gc, json
        from tiered.spark import worker_heap

        def items():
            yield 1
            raise OSError("the store went away")

        try:
            list(worker_heap.settle_after(items()))
        except OSError:
            pass
        print(json.dumps({"after": gc.get_freeze_count()}))
    """, reuse=True)
    assert out["after"] == 0


def _data_dir(tmp_path: Path) -> dict[str, str]:
    props = {"log.dirs": str(tmp_path / "data"), "num.partitions": "1"}
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        log = m.get_or_create_log("t", 0)
        for first in range(0, 300, 100):
            log.append(MemoryRecords.build([SimpleRecord(1_700_000_000_000 + i, None, b"v%d" % i)
                                            for i in range(first, first + 100)]))
    return {**{f"config.{k}": v for k, v in props.items()}, "topics": "t", "cacheDir": str(tmp_path / "cache")}


READ = """
    import gc, json
    from pyspark.sql.pandas.types import from_arrow_schema
    from tiered.spark.arrow_records import ARROW_SCHEMA
    from tiered.spark.options import parse_options
    from tiered.spark.planning import plan
    from tiered.spark.source import TieredDataSource, TieredInputPartition

    options = {options!r}
    source = TieredDataSource(options)
    reader = source.reader(from_arrow_schema(ARROW_SCHEMA))
    pieces = plan(parse_options(options))  # what partitions() plans, without its own settling
    read = reader.read(TieredInputPartition(pieces[:1]))
    rows = sum(batch.num_rows for batch in read)
    print(json.dumps({{"rows": rows, "frozen": gc.get_freeze_count()}}))
"""


@pytest.mark.parametrize("freeze", ["true", "false"])
def test_the_sources_read_settles_its_worker_by_the_option(tmp_path: Path, freeze: str) -> None:
    options = {**_data_dir(tmp_path), "freezeWorkerHeap": freeze}
    out = _run(READ.format(options=options), reuse=True)
    assert out["rows"] == 300
    assert (out["frozen"] > 1000) == (freeze == "true")


def test_the_planner_settles_too(tmp_path: Path) -> None:
    options = _data_dir(tmp_path)
    out = _run(f"""
        import gc, json
        from tiered.spark.source import TieredFilteringReader

        reader = TieredFilteringReader({options!r})  # as the planner unpickles it: no data source made here
        before = gc.get_freeze_count()
        parts = reader.partitions()
        print(json.dumps({{"parts": len(parts), "before": before, "frozen": gc.get_freeze_count()}}))
    """, reuse=True)
    assert out["parts"] == 1 and out["before"] == 0 and out["frozen"] > 1000


@pytest.mark.parametrize("freeze", ["true", "FALSE"])
def test_making_the_data_source_settles_its_worker_by_the_option(tmp_path: Path, freeze: str) -> None:
    """Spark makes the data source at every load() in a reused worker of its own (create_data_source), which
    nothing else of the source runs in."""
    options = {**_data_dir(tmp_path), "FreezeWorkerHeap": freeze}
    out = _run(f"""
        import gc, json
        from tiered.spark.source import TieredDataSource

        before = gc.get_freeze_count()
        TieredDataSource({options!r}).schema()
        print(json.dumps({{"before": before, "frozen": gc.get_freeze_count()}}))
    """, reuse=True)
    assert out["before"] == 0
    assert (out["frozen"] > 1000) == (freeze == "true")


def test_a_bad_freeze_option_is_refused_where_the_data_source_is_made(tmp_path: Path) -> None:
    from tiered.spark.source import TieredDataSource

    with pytest.raises(SparkSourceOptionError, match="freezeWorkerHeap='yes'"):
        TieredDataSource({**_data_dir(tmp_path), "freezeWorkerHeap": "yes"})


def test_the_option_takes_true_or_false_only(tmp_path: Path) -> None:
    options = _data_dir(tmp_path)
    assert parse_options(options).freeze_worker_heap is True
    assert parse_options({**options, "freezeworkerheap": "FALSE"}).freeze_worker_heap is False
    with pytest.raises(SparkSourceOptionError, match="freezeWorkerHeap='no'"):
        parse_options({**options, "freezeWorkerHeap": "no"})
