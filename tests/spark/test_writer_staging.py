"""The writer's staging and commit without a Spark session (``tiered.spark.writer``'s task and driver halves called
directly): batch limits, Kafka's sticky partition for null keys, task order at commit, a failed attempt's files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

from local import LogConfig, LogManager
from local.errors import RecordTooLargeError
from local.fetch import FetchIsolation
from tiered.spark.writer import SparkSinkError, WritePlan, commit_staged, plan_write, stage_task

SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", BinaryType()),
                     StructField("partition", IntegerType())])


def _plan(tmp_path: Path, **options: str) -> WritePlan:
    return plan_write({"config.log.dirs": str(tmp_path / "data"), "topic": "w", "numPartitions": "3", **options},
                      SCHEMA, False)


def _batch(values: list[bytes], keys: list[bytes | None] | None = None,
           partitions: list[int | None] | None = None) -> pa.RecordBatch:
    n = len(values)
    return pa.record_batch({"key": pa.array(keys or [None] * n, pa.binary()), "value": pa.array(values, pa.binary()),
                            "partition": pa.array(partitions or [None] * n, pa.int32())})


def _log_batches(tmp_path: Path, partition: int) -> list[list[bytes]]:
    with LogManager(LogConfig.from_properties({"log.dirs": str(tmp_path / "data")}), start_scheduler=False,
                    read_only=True) as m:
        log = m.get_log("w", partition)
        if log is None:
            return []
        return [[r.value for r in b.records()] for b in log.batches_from(0, FetchIsolation.HIGH_WATERMARK)]


def test_null_keys_stick_to_a_partition_until_its_batch_is_full(tmp_path: Path) -> None:
    plan = _plan(tmp_path, batchSize="100")
    values = [b"%010d" % i for i in range(40)]  # 10 records of 10 bytes fill a batch
    staged = stage_task(plan, iter([_batch(values)]), task=1, attempt=0)
    commit_staged(plan, [staged])
    batches = {p: _log_batches(tmp_path, p) for p in range(3)}
    # task 1 starts on partition 1; each full batch moves on: 1, 2, 0, 1
    assert batches == {1: [values[0:10], values[30:40]], 2: [values[10:20]], 0: [values[20:30]]}


def test_commit_appends_in_task_order_and_removes_the_staging_dir(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    first = stage_task(plan, iter([_batch([b"a0", b"a1"], partitions=[0, 0])]), task=0, attempt=0)
    failed = stage_task(plan, iter([_batch([b"x"], partitions=[0])]), task=1, attempt=0)
    second = stage_task(plan, iter([_batch([b"b0"], partitions=[0])]), task=1, attempt=1)
    assert Path(failed.files[0].path).exists()
    commit_staged(plan, [second, first])  # the retried attempt's message, not the failed one's
    assert _log_batches(tmp_path, 0) == [[b"a0", b"a1"], [b"b0"]]
    assert not Path(plan.job_dir).exists() and not Path(plan.job_dir).parent.exists()


def test_a_batch_above_max_message_bytes_fails_the_task_and_leaves_no_file(tmp_path: Path) -> None:
    plan = _plan(tmp_path, batchSize="100000")
    plan.max_message_bytes = 2000
    rows = _batch([b"v" * 100] * 30, partitions=[2] * 30)
    with pytest.raises(RecordTooLargeError, match=r"w-2 is \d+ bytes, above the topic's max.message.bytes 2000"):
        stage_task(plan, iter([_batch([b"small"], partitions=[2]), rows]), task=0, attempt=0)
    assert not any(Path(plan.job_dir).rglob("*.log"))


def test_a_partition_outside_the_topic_fails_the_task(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    with pytest.raises(SparkSinkError, match=r"partition 3 is outside w's partitions 0..2"):
        stage_task(plan, iter([_batch([b"v"], partitions=[3])]), task=0, attempt=0)


def test_a_task_staging_after_the_abort_fails_and_recreates_nothing(tmp_path: Path) -> None:
    from tiered.spark.writer import TieredWriter

    options = {"config.log.dirs": str(tmp_path / "data"), "topic": "w", "numPartitions": "3"}
    writer = TieredWriter(options, SCHEMA, False)
    # a task that staged one partition before the abort, and a second partition after it
    rows = iter([_batch([b"a"], partitions=[0]), _batch([b"b" * 20000], partitions=[1])])

    def aborted_midway() -> Iterator[pa.RecordBatch]:
        yield next(rows)
        yield _batch([b"c" * 20000], partitions=[0])  # fills partition 0's batch: its file is opened now
        writer.abort([])
        yield next(rows)

    with pytest.raises(SparkSinkError, match=r"staging directory .* is gone: the job was aborted"):
        stage_task(writer.plan, aborted_midway(), task=0, attempt=0)
    assert not Path(writer.plan.job_dir).parent.exists()


def test_an_abort_removes_a_file_a_cancelled_task_creates_during_the_removal(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from tiered.spark import writer as writer_module

    plan = _plan(tmp_path)
    staged = stage_task(plan, iter([_batch([b"a"], partitions=[0])]), task=0, attempt=0)
    task_dir = Path(staged.files[0].path).parent
    real_rmtree, passes = shutil.rmtree, []

    def racing_rmtree(path: str, ignore_errors: bool = False) -> None:
        passes.append(path)
        if len(passes) == 1:  # the task opens a file after rmtree listed its dir: the dir survives this pass
            for f in task_dir.iterdir():
                f.unlink()
            (task_dir / "w-2.log").write_bytes(b"late")
            return
        real_rmtree(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(writer_module.shutil, "rmtree", racing_rmtree)
    writer_module._remove_job_dir(plan.job_dir)
    assert len(passes) == 2
    assert not Path(plan.job_dir).parent.exists()
