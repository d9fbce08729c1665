"""The Spark source over an S3 remote tier: a moto server and SeaweedFS (a real S3 server from ``localstack/``), both
on 127.0.0.1, read by local[2] executors through the project's own S3 backend. Counts and contents equal the
engine's own reads. A server that cannot start fails the test (never a skip)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local import LogConfig, LogManager
from local.records import CompressionType, MemoryRecords, SimpleRecord
from tests.integration.s3_servers import S3Endpoint, ServerStartError, moto_server, seaweedfs
from tests.spark.test_spark_source import _engine_rows, _spark_rows

pytestmark = pytest.mark.integration

N = 12_000  # records per partition: a rolled segment of 1 MiB offloaded, the rest local


@pytest.fixture(scope="module", params=["moto-server", "seaweedfs"])
def endpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    server: contextlib.AbstractContextManager[S3Endpoint] = (
        moto_server() if request.param == "moto-server" else seaweedfs(tmp_path_factory.mktemp("seaweedfs")))
    try:
        started = server.__enter__()
    except ServerStartError as exc:
        pytest.fail(f"{request.param} could not start: {exc}")
    try:
        yield started
    finally:
        server.__exit__(None, None, None)


def _props(root: Path, endpoint: S3Endpoint, bucket: str) -> dict[str, str]:
    return {"log.dirs": str(root / "data"), "log.segment.bytes": str(2**20),
            "remote.log.storage.system.enable": "true", "remote.log.storage.manager.class.name": "s3",
            **{f"rsm.config.{k}": v for k, v in endpoint.rsm_config(bucket, f"spark-{uuid.uuid4().hex[:8]}").items()}}


def test_both_tiers_on_s3_match_the_engine(spark: Any, endpoint: S3Endpoint, tmp_path: Path) -> None:
    bucket = f"spark-{uuid.uuid4().hex[:12]}"
    endpoint.client().create_bucket(Bucket=bucket)
    props = _props(tmp_path, endpoint, bucket)
    t0 = int(time.time() * 1000) - 60_000
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        for p in range(2):
            log = m.get_or_create_log("s3t", p, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
            for first in range(0, N, 200):
                log.append(MemoryRecords.build(
                    [SimpleRecord(t0 + i, None if i % 6 == 0 else b"k%d" % i, b"v%d-%d-" % (p, i) + b"q" * (60 + i % 90),
                                  headers=[("x", b"%d" % i)] if i % 10 == 0 else []) for i in range(first, first + 200)],
                    CompressionType.SNAPPY if first % 1000 == 0 else CompressionType.NONE))
        assert m.remote_tier is not None
        assert m.remote_tier.run_once(m.all_logs()).segments_copied >= 2
        m.cleanup_logs()
        starts = {p: m.get_log("s3t", p).local_log_start_offset for p in range(2)}
    assert all(0 < s < N for s in starts.values())  # the first records are only in the bucket
    expected = _engine_rows(tmp_path, "s3t", props=props)
    assert len(expected) == 2 * N
    options = {**{f"config.{k}": v for k, v in props.items()}, "topics": "s3t", "cacheDir": str(tmp_path / "cache")}
    df = spark.read.format("tiered").options(**options).load()
    assert _spark_rows(df) == expected
    remote = spark.read.format("tiered").options(**options, tiers="remote").load()
    counts = {r["partition"]: (r["n"], r["hi"]) for r in remote.groupBy("partition").agg(
        {"*": "count", "offset": "max"}).withColumnRenamed("count(1)", "n").withColumnRenamed("max(offset)", "hi")
        .collect()}
    assert all(counts[p][0] == counts[p][1] + 1 >= starts[p] for p in range(2))
