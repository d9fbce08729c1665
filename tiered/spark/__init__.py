"""PySpark side of tiered: the ``tiered`` data source (imported only when asked for: ``pip install "tiered[spark]"``).

>>> import tiered.spark
>>> tiered.spark.register(spark)
>>> df = spark.read.format("tiered").option("config", "broker.properties").option("topics", "events").load()

:func:`register` registers the data source and turns on Spark's Python filter pushdown
(``spark.sql.python.filterPushdown.enabled``) so filters on ``partition``, ``offset`` and ``timestamp`` prune
segments. :func:`read_topic` reads a topic through its columnar copy (Parquet, kept by the engine) where it has
one. See :mod:`tiered.spark.source` for the source and :mod:`tiered.spark.options` for its options.
"""

from __future__ import annotations

from typing import Any

from tiered.spark.arrow_records import SCHEMA_DDL

__all__ = ["SCHEMA_DDL", "local_session", "read_topic", "register"]


def read_topic(spark: Any, *, config: str | None = None, topics: str | list[str] | None = None, **options: Any) -> Any:
    """One DataFrame of the topics' records in the source's schema: Spark's Parquet reader over the columnar copy
    (topics with ``remote.log.columnar.enable=true``) for the offsets it holds, the ``tiered`` source for the rest,
    each offset exactly once. ``options``: the source's options by name. See :mod:`tiered.spark.columnar_read`."""
    from tiered.spark.columnar_read import read_topic as read

    pushdown = next((str(v) for k, v in options.items() if k.lower() == "filterpushdown"), "true").lower() != "false"
    register(spark, filter_pushdown=pushdown)
    return read(spark, config=config, topics=topics, **options)


def register(spark: Any, *, filter_pushdown: bool = True) -> None:
    """Register ``format("tiered")`` with ``spark`` (and enable Python filter pushdown unless told not to)."""
    from tiered.spark.source import TieredDataSource

    spark.dataSource.register(TieredDataSource)
    if filter_pushdown:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def local_session(master: str = "local[*]", app_name: str = "tiered", **conf: str) -> Any:
    """A SparkSession for a local master that stays on loopback (``SPARK_LOCAL_IP`` and the driver's host and bind
    address at 127.0.0.1; workers run this interpreter), with the source registered. Python workers talk to the JVM
    over Unix domain sockets (``spark.python.unix.domain.socket.enabled``; ``conf`` may set it false): over Spark's
    TCP socket every Python task waits ~40 ms for its input (Nagle's algorithm against a delayed ACK), which made
    a read of the source ~1.3x slower on the bench machine (bench/RESULTS.md)."""
    import os
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
               .config("spark.python.unix.domain.socket.enabled", "true"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
