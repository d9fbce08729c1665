"""The columnar copy (issue 31 items 1-2): ``tiered.spark.read_topic`` over a topic whose closed segments are all in
the columnar copy, against Spark reading one Parquet dataset of the same rows; and what keeping the copy costs.

``python -m bench spark`` runs it after :mod:`bench.bench_spark` (or alone: ``python -m bench spark_columnar``).
``BENCH_SPARK_RECORDS`` records (default 1,000,000) of 159 bytes in two partitions, 16 MiB segments, every segment
closed and copied to the remote tier (local-directory backend). Figures:

- keeping the copy: one pass of the copy tasks with ``remote.log.columnar.enable=false`` (the segment copies alone),
  then the columnar keeper over the same segments (what the copy task adds when it is true): seconds per segment
  of each, and their ratio. With 16 MiB segments and ``remote.log.columnar.file.bytes`` at its default (128 MiB),
  each partition's segments go into one file, each new segment's rows into a copy of the file so far: the rewrite
  is part of the keeper's cost;
- ``read_topic(...)`` into ``count(*), sum(length(value))`` and into the same with ``offset >= a AND offset < b``
  (a tenth of each partition), planning included (it opens the data dirs read-only and reads the manifests), against
  ``spark.read.parquet`` of one Parquet file holding the same rows and columns, written by pyarrow with the same
  row groups. Target >= 0.9x. Timed in alternation, best of fifteen rounds, and by the CPU time of Spark's processes
  and this one (median of the rounds; ``read_topic`` plans in this process): on a machine other work shares,
  wall-clock ratios swing by +-30% from run to run while CPU ratios move by a few percent.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench._util import report
from bench.bench_spark import (  # the same topic layout and rows
    BATCH,
    PARTITIONS,
    RECORDS,
    VALUE_BYTES,
    _props,
)


def _build(root: Path) -> tuple[float, float, int, int, int]:
    """The topic written, its segments copied (columnar off), then the columnar copy made: (copy seconds, columnar
    seconds, segments copied, files written, files kept)."""
    from local import LogConfig, LogManager
    from local.records import MemoryRecords, SimpleRecord
    from tiered.remote_log_manager import RemoteLogManager

    rnd = random.Random(31)
    now = int(time.time() * 1000) - 3_600_000
    with LogManager(LogConfig.from_properties(_props(root)), start_scheduler=False) as manager:
        for p in range(PARTITIONS):
            log = manager.get_or_create_log("bench", p, {"remote.storage.enable": "true"})
            per = RECORDS // PARTITIONS
            for first in range(0, per, BATCH):
                recs = [SimpleRecord(now + i, None, rnd.randbytes(VALUE_BYTES)) for i in range(first, min(first + BATCH, per))]
                log.append(MemoryRecords.build(recs))
            log.roll()
        rlm = manager.remote_tier
        assert isinstance(rlm, RemoteLogManager) and rlm.columnar is not None
        started = time.perf_counter()
        copied = rlm.run_once(manager.all_logs()).segments_copied
        copy_s = time.perf_counter() - started
        columnar_s, files, kept = 0.0, 0, 0
        for log in manager.all_logs():
            done = rlm.columnar.keep(log, rlm.topic_id_partition(log))
            columnar_s += done.seconds
            files += done.files_written
            kept += done.files_written - done.files_merged
    return copy_s, columnar_s, copied, files, kept


def _one_dataset(root: Path) -> Path:
    """The rows of every columnar file, without ``aborted``, in one Parquet file written by pyarrow."""
    import pyarrow.parquet as pq

    from tiered.columnar.manifest import partition_dir, read_manifest

    out = root / "one.parquet"
    writer = None
    for p in range(PARTITIONS):
        directory = partition_dir(root / "remote-columnar", "bench", p)
        manifest = read_manifest(directory)
        assert manifest is not None
        for f in manifest.files:
            parquet = pq.ParquetFile(directory / f.name)
            for i in range(parquet.num_row_groups):
                table = parquet.read_row_group(i).drop_columns(["aborted"])
                if writer is None:
                    writer = pq.ParquetWriter(out, table.schema, compression="snappy")
                writer.write_table(table)
    assert writer is not None
    writer.close()
    return out


def main() -> None:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    root_path = Path(__file__).resolve().parent.parent
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(root_path), os.environ.get("PYTHONPATH", "")) if p)
    import tiered.spark
    from bench.bench_spark import alternating_best, process_tree_cpu

    root = Path(tempfile.mkdtemp(prefix="bench-columnar-"))
    try:
        copy_s, columnar_s, copied, files, kept = _build(root)
        total = PARTITIONS * (RECORDS // PARTITIONS)
        print(f"# {total:,} records of {VALUE_BYTES} bytes: {copied} segments copied in {copy_s:.2f} s, their columnar "
              f"copy ({files} files written, {kept} kept) in {columnar_s:.2f} s", flush=True)
        report("keeping the columnar copy: segments per second (columnar copy vs segment copy)", files / columnar_s,
               copied / copy_s, "segments/s", "the segment copy", None)
        one = _one_dataset(root)
        spark = tiered.spark.local_session("local[2]", "bench-columnar", **{"spark.sql.session.timeZone": "UTC",
                                                                            "spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        try:
            options = {f"config.{k}": v for k, v in _props(root).items()}
            per = RECORDS // PARTITIONS
            lo, hi = per // 2, per // 2 + per // 10
            query = ["count(*)", "sum(length(value))"]
            expected = (total, total * VALUE_BYTES)
            expected_range = (PARTITIONS * (hi - lo), PARTITIONS * (hi - lo) * VALUE_BYTES)
            where = f"offset >= {lo} AND offset < {hi}"

            def ours() -> None:
                assert tuple(tiered.spark.read_topic(spark, topics="bench", **options).selectExpr(*query).first()) == expected

            def parquet() -> None:
                assert tuple(spark.read.parquet(str(one)).selectExpr(*query).first()) == expected

            def ours_range() -> None:
                df = tiered.spark.read_topic(spark, topics="bench", **options).where(where)
                assert tuple(df.selectExpr(*query).first()) == expected_range

            def parquet_range() -> None:
                assert tuple(spark.read.parquet(str(one)).where(where).selectExpr(*query).first()) == expected_range

            for warm in (ours, parquet, ours_range, parquet_range):
                warm()
            jvm = spark.sparkContext._gateway.proc.pid

            def cpu() -> float:
                return process_tree_cpu(jvm) + time.process_time()

            full, full_cpu = alternating_best({"ours": ours, "parquet": parquet}, 15, cpu)
            ranged, ranged_cpu = alternating_best({"ours": ours_range, "parquet": parquet_range}, 15, cpu)
            report("read_topic, all closed segments in the columnar copy, count+sum(length(value))",
                   total / full["ours"], total / full["parquet"], "records/s", "Spark Parquet, one dataset", 0.9)
            report("  the same by CPU time (median, Spark's processes and this one)", total / full_cpu["ours"],
                   total / full_cpu["parquet"], "records/CPU-s", "Spark Parquet, one dataset", 0.9)
            report("read_topic, the same with an offset range (a tenth)", total / ranged["ours"],
                   total / ranged["parquet"], "records/s", "Spark Parquet, one dataset, the same filter", 0.9)
            report("  the same by CPU time (median)", total / ranged_cpu["ours"], total / ranged_cpu["parquet"],
                   "records/CPU-s", "Spark Parquet, one dataset, the same filter", 0.9)
        finally:
            spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
