"""Nothing an executor does depends on the driver: the same read on ``local-cluster[2,1,1024]`` (two executor
JVMs, each with its own Python workers and a cache dir of its own machine's), against the engine's reads."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from local import LogConfig, LogManager
from local.fetch import FetchIsolation
from local.records import CompressionType, MemoryRecords, SimpleRecord

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def cluster(start_session: Callable[..., Any]) -> Iterator[Any]:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    root = str(Path(__file__).resolve().parents[2])
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    session = start_session("local-cluster[2,1,1024]", "tiered-cluster-test",
                            **{"spark.executorEnv.PYTHONPATH": os.environ["PYTHONPATH"]})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def test_two_executor_jvms_read_both_tiers(cluster: Any, tmp_path: Path) -> None:
    props = {
        "log.dirs": str(tmp_path / "data"), "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "local", "rsm.config.dir": str(tmp_path / "remote"),
        "log.segment.bytes": str(MIB),
    }
    now = int(time.time() * 1000) - 60_000
    expected = {}
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        for p in range(2):
            log = m.get_or_create_log("c", p, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
            for first in range(0, 24_000, 250):
                log.append(MemoryRecords.build(
                    [SimpleRecord(now + i, b"%d" % i, b"v%d-" % i + b"z" * 200) for i in range(first, first + 250)],
                    CompressionType.ZSTD if first % 5000 == 0 else CompressionType.NONE))
        assert m.remote_tier is not None
        m.remote_tier.run_once(m.all_logs())
        m.cleanup_logs()
        for p in range(2):
            log = m.get_log("c", p)
            assert log is not None and log.local_log_start_offset > 0
            expected[p] = [(b.partition_leader_epoch, r.offset, r.value)
                           for b in log.batches_from(0, FetchIsolation.HIGH_WATERMARK) for r in b.records()]
    df = (cluster.read.format("tiered").options(**{f"config.{k}": v for k, v in props.items()})
          .option("topics", "c").option("cacheDir", str(tmp_path / "executor-cache")).load())
    rows = df.select("partition", "offset", "value").collect()
    got: dict[int, list[tuple[int, bytes]]] = {0: [], 1: []}
    for r in rows:
        got[r["partition"]].append((r["offset"], r["value"]))
    for p in range(2):
        assert sorted(got[p]) == [(o, v) for _, o, v in expected[p]]
    executors = cluster.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
    assert executors == 3  # the driver and two executor JVMs
