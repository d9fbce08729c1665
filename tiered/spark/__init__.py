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

import logging
import os
import re
from collections.abc import Mapping
from typing import Any

from tiered.spark.arrow_records import SCHEMA_DDL

__all__ = ["SCHEMA_DDL", "local_session", "read_topic", "register"]

logger = logging.getLogger(__name__)

UNIX_SOCKETS = "spark.python.unix.domain.socket.enabled"
_SOCKET_DIR = "spark.python.unix.domain.socket.dir"
_SUN_PATH_MAX = 107  # the bytes of an AF_UNIX socket's path (sun_path holds 108, with the NUL)
# What Spark 4.3's JVM adds to the directory for a worker socket (a UUID name): 46 bytes, measured (a directory of 61
# bytes works, 62 fails with "Unix domain path too long"); PySpark's driver socket takes 43.
_SOCKET_NAME_BYTES = 46


def unix_socket_dir(conf: Mapping[str, str]) -> str | None:
    """Where a session of ``conf`` would put Spark's Python worker sockets (``spark.python.unix.domain.socket.dir``,
    else the driver JVM's ``java.io.tmpdir``: ``/tmp`` unless ``spark.driver.extraJavaOptions`` sets it), or None
    when a socket's path there would be longer than AF_UNIX allows: the session then fails to start ("AF_UNIX path
    too long") or every Python task fails ("Unix domain path too long")."""
    directory = conf.get(_SOCKET_DIR)
    if directory is None:
        found = re.search(r"-Djava\.io\.tmpdir=(\S+)", conf.get("spark.driver.extraJavaOptions", ""))
        directory = found.group(1) if found else "/tmp"
    return directory if len(os.fsencode(directory.rstrip("/"))) + _SOCKET_NAME_BYTES <= _SUN_PATH_MAX else None


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
    a read of the source ~1.3x slower on the bench machine (bench/RESULTS.md). Where the sockets' directory is too
    long a path for one (:func:`unix_socket_dir`), the session keeps TCP and says why."""
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4"))
    if UNIX_SOCKETS not in conf:
        if unix_socket_dir(conf) is not None:
            builder = builder.config(UNIX_SOCKETS, "true")
        else:
            logger.warning("Spark's Python workers stay on TCP (~40 ms more per task): a Unix domain socket's path in "
                           "the JVM's temp dir would be longer than %d bytes; set %s to a shorter directory",
                           _SUN_PATH_MAX, _SOCKET_DIR)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
