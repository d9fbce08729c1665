"""``tiered import``: append the Parquet or JSON lines written by ``tiered export`` to a topic, with Spark.

``tiered import --config F --topic T [--format parquet|jsonl] [--partitions N] [--compression C] [--batch-size B]
IN``. Each record goes to the partition it was exported from (the ``partition`` column, or the ``partition=N``
directories of a Parquet export), with its key, value, headers and timestamp; its offset is assigned anew by the
log. Within a partition the records are appended in the order of their exported offsets. A topic that does not
exist is created with ``--partitions`` partitions (default: one more than the highest exported partition). The
write goes through the source's writer (:mod:`tiered.spark.writer`): all or nothing, committed by the driver;
``--batch-size`` is its ``batchSize`` (bytes of a batch as encoded, never above what the topic accepts).

Before Spark starts, the config (file and values), the topic name and IN (a directory holding data files of the
format) are checked; a failure of the Spark job is one line (see :mod:`tiered.commands._spark`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from tiered.commands._common import UsageError, check_topic_name, positive_int, spark_master
from tiered.commands.export import _options as _source_options
from tiered.commands.export import check_inputs, session

JSON_SCHEMA = ("key binary, value binary, partition int, offset bigint, timestamp timestamp, "
               "headers array<struct<key:string,value:binary>>")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", "-t", required=True, help="the topic to append to")
    parser.add_argument("--format", choices=["parquet", "jsonl"], default="parquet")
    parser.add_argument("--partitions", type=positive_int, help="partitions of the topic if it is created")
    parser.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                        help="none, gzip, snappy, lz4 or zstd (default: none)")
    parser.add_argument("--batch-size", type=positive_int, default=1024 * 1024,
                        help="bytes per record batch as encoded (default 1 MiB; never above the topic's "
                             "max.message.bytes and segment.bytes)")
    parser.add_argument("--master", default="local[*]", type=spark_master, help="Spark master (default local[*])")
    parser.add_argument("input", metavar="IN", help="a directory written by tiered export")


def check_input(path: str, fmt: str) -> None:
    """IN is a directory holding at least one data file of ``fmt`` (Spark's hidden ``_``/``.`` files aside)."""
    if "://" in path:
        return  # a URL: Spark reads it, and says what is wrong with it
    if not os.path.isdir(path):
        raise UsageError(f"{path}: {'no such directory' if not os.path.exists(path) else 'not a directory'}")
    for _dir, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        if any(not f.startswith(("_", ".")) and (fmt != "parquet" or f.endswith(".parquet")) for f in files):
            return
    raise UsageError(f"{path} holds no {fmt} data files: not the output of tiered export --format {fmt}")


def run(args: argparse.Namespace) -> int:
    args.from_ = args.to = None
    args.isolation_level = "read_uncommitted"
    check_topic_name(args.topic)
    opts = {k: v for k, v in _source_options(args).items() if k.startswith("config")}
    opts.update({"topic": args.topic, "compression": args.compression, "batchSize": str(args.batch_size)})
    if args.partitions is not None:
        opts["numPartitions"] = str(args.partitions)
    check_inputs(args, None)
    check_input(args.input, args.format)
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print('tiered import: pyspark is not installed (pip install "tiered[spark]")', file=sys.stderr)
        return 1
    from pyspark.sql import functions as F

    from tiered.commands._spark import spark_job_error

    began = time.monotonic()
    spark, created = session(args.master, quiet=not args.verbose)
    try:
        if args.format == "parquet":
            df = spark.read.parquet(args.input)
        else:
            df = spark.read.schema(JSON_SCHEMA).json(args.input)
        if "value" not in df.columns or "partition" not in df.columns:
            raise UsageError(f"{args.input} has columns {', '.join(df.columns)}: not the output of tiered export")
        columns = [c for c in ("key", "value", "headers", "partition", "timestamp") if c in df.columns]
        if "numPartitions" not in opts:
            top = df.agg(F.max("partition")).first()[0]
            opts["numPartitions"] = str((top if top is not None else 0) + 1)
        order = ["partition", "offset"] if "offset" in df.columns else ["partition"]
        rows = df.repartition("partition").sortWithinPartitions(*order).select(*columns)
        rows.write.format("tiered").mode("append").options(**opts).save()
        print(f"tiered import: {args.input} appended to {args.topic} in {time.monotonic() - began:.1f} s",
              file=sys.stderr)
    except Exception as exc:
        job_error = spark_job_error(exc)
        if job_error is not None:
            raise job_error from exc
        raise
    finally:
        if created:
            spark.stop()
    return 0
