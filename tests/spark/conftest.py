"""One SparkSession per test module (the JVM takes ~15 s to start), on loopback, workers on this interpreter."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def start_session(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Any]:
    """``tiered.spark.local_session(master, app_name, **conf)`` whose JVMs and the Python workers they start keep
    their temp files (spark-*, blockmgr-*, artifacts-*, the extracted lz4 and snappy libraries, the source's scratch
    copies and default cache dir) under pytest's tmp dir, not in the system temp dir where a JVM or a worker ended
    abruptly leaves them: ``java.io.tmpdir``, ``spark.local.dir``, and ``TMPDIR`` in the environment the first
    session's JVM (one per test process) starts with and passes on to its workers."""
    temp = str(tmp_path_factory.mktemp("jvm-temp"))

    def start(master: str, app_name: str, **conf: str) -> Any:
        import tiered.spark

        java = f"-Djava.io.tmpdir={temp}"
        options = {"spark.driver.extraJavaOptions": java, "spark.executor.extraJavaOptions": java,
                   "spark.local.dir": temp, "spark.executorEnv.TMPDIR": temp, **conf}
        before = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = temp
        try:
            return tiered.spark.local_session(master, app_name, **options)
        finally:
            if before is None:
                del os.environ["TMPDIR"]
            else:
                os.environ["TMPDIR"] = before

    return start


@pytest.fixture(scope="module")
def spark(start_session: Callable[..., Any]) -> Iterator[Any]:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # executors import the project from the working tree, as the tests do
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])
    session = start_session("local[2]", "tiered-tests", **{"spark.sql.session.timeZone": "UTC"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
