"""The writer's staging and commit without a Spark session (``tiered.spark.writer``'s task and driver halves called
directly): batch limits, Kafka's sticky partition for null keys, task order at commit, a failed attempt's files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

from local import LogConfig, LogManager
from local.errors import RecordTooLargeError
from local.fetch import FetchIsolation
from local.records import MemoryRecords
from local.records.batch import RECORD_BATCH_OVERHEAD
from local.records.record import record_size
from tiered.spark.writer import SparkSinkError, TaskStaged, WritePlan, commit_staged, plan_write, stage_task

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
    plan = _plan(tmp_path, batchSize=str(61 + 10 * 17))
    values = [b"%010d" % i for i in range(40)]  # a 61-byte header and 10 records of 17 bytes fill a batch
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


def _staged_batches(staged: TaskStaged) -> dict[int, list[Any]]:
    """Per partition, the staged batches (parsed back, CRC-checked)."""
    return {f.partition: list(MemoryRecords(Path(f.path).read_bytes()).batches(strict=True)) for f in staged.files}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=60), batch_size=st.integers(1, 20000),
       limit=st.integers(3100, 12000), codec=st.sampled_from(["none", "gzip", "zstd"]), seed=st.integers(0, 2**32 - 1))
def test_batches_are_sized_by_their_encoded_bytes_within_the_topic_limit(
        tmp_path_factory: pytest.TempPathFactory, sizes: list[int], batch_size: int, limit: int, codec: str,
        seed: int) -> None:
    import random

    plan = _plan(tmp_path_factory.mktemp("w"), batchSize=str(batch_size), compression=codec)
    plan.max_message_bytes = limit
    rnd = random.Random(seed)
    values = [rnd.randbytes(n) for n in sizes]  # incompressible: a compressed batch can come out larger
    staged = stage_task(plan, iter([_batch(values, partitions=[0] * len(values))]), task=0, attempt=0)
    batches = _staged_batches(staged)[0]
    assert [r.value for b in batches for r in b.records()] == values
    target = min(batch_size, limit)
    for i, b in enumerate(batches):
        assert b.size_in_bytes <= limit  # never above max.message.bytes, whatever batchSize says
        records = list(b.records())
        uncompressed = RECORD_BATCH_OVERHEAD + sum(
            record_size(r.offset - b.base_offset, r.timestamp - b.base_timestamp, r.key, r.value, r.headers)
            for r in records)
        if codec == "none":
            assert uncompressed == b.size_in_bytes
        assert uncompressed <= target or len(records) == 1 or codec != "none"
        if codec == "none" and i + 1 < len(batches):  # closed only when the next record did not fit
            nxt = next(batches[i + 1].records())
            assert uncompressed + record_size(len(records), nxt.timestamp - b.base_timestamp, nxt.key, nxt.value,
                                              nxt.headers) > target


@pytest.mark.parametrize(("batch_size", "per_batch"), [(247, 10), (248, 11)])
def test_a_batch_closes_before_the_record_that_would_pass_batch_size(tmp_path: Path, batch_size: int,
                                                                     per_batch: int) -> None:
    plan = _plan(tmp_path, batchSize=str(batch_size))
    values = [b"%010d" % i for i in range(33)]  # 17 bytes a record: 10 make 231 bytes with the header, 11 make 248
    staged = stage_task(plan, iter([_batch(values, partitions=[1] * 33)]), task=0, attempt=0)
    assert [b.records_count for b in _staged_batches(staged)[1]] == [per_batch] * (33 // per_batch) + (
        [33 % per_batch] if 33 % per_batch else [])


def test_a_record_that_cannot_fit_a_batch_alone_fails_the_task_and_leaves_no_file(tmp_path: Path) -> None:
    plan = _plan(tmp_path, batchSize="100000")
    plan.max_message_bytes = 2000
    exact = stage_task(plan, iter([_batch([b"x" * 1930], partitions=[2])]), task=9, attempt=0)
    assert exact.files[0].size == 2000  # a record that fills the limit exactly is accepted
    rows = _batch([b"v" * 100] * 30 + [b"w" * 1931], partitions=[2] * 31)
    with pytest.raises(RecordTooLargeError, match=r"w-2 makes a batch of 2001 bytes on its own, above the topic's "
                                                  r"max.message.bytes 2000"):
        stage_task(plan, iter([_batch([b"small"], partitions=[2]), rows]), task=0, attempt=0)
    assert [p.parent.name[:7] for p in Path(plan.job_dir).rglob("*.log")] == ["task-9-"]  # the failed task left none
    plan.segment_bytes = 1500  # segment.bytes below max.message.bytes: the lower one is the limit, and named
    with pytest.raises(RecordTooLargeError, match=r"above the topic's segment.bytes 1500"):
        stage_task(plan, iter([_batch([b"v" * 1500], partitions=[0])]), task=1, attempt=0)


def test_timestamps_with_a_fraction_of_a_millisecond_are_rounded_down(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    micros = [1_700_000_000_123_999, -1_001, None]  # Spark's timestamps are microseconds (-1001 us: before 1970)
    rows = pa.record_batch({"value": pa.array([b"a", b"b", b"c"], pa.binary()), "partition": pa.array([0] * 3, pa.int32()),
                            "timestamp": pa.array(micros, pa.timestamp("us", tz="UTC"))})
    staged = stage_task(plan, iter([rows]), task=0, attempt=0)
    stamps = [r.timestamp for b in _staged_batches(staged)[0] for r in b.records()]
    assert stamps[:2] == [1_700_000_000_123, -2] and stamps[2] > 1_700_000_000_000  # a null one: the time of the write


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


# The driver's commit ---------------------------------------------------------------------------------------------

def _tree(root: Path) -> dict[str, bytes]:
    """Every file of a data dir but the load statistics each open rewrites."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "tiered-load-stats.json"}


def test_commits_append_in_pieces_a_one_mib_segment_takes(tmp_path: Path) -> None:
    options = {"config.log.segment.bytes": "1048576", "batchSize": str(1024 * 1024)}
    plan = _plan(tmp_path, **options)
    assert plan.batch_limit == 1024 * 1024  # segment.bytes, below the default max.message.bytes
    values = [b"%06d" % i + b"v" * 3000 for i in range(1500)]  # 4.5 MiB
    staged = stage_task(plan, iter([_batch(values, partitions=[0] * 1500)]), task=0, attempt=0)
    commit_staged(plan, [staged])
    assert [v for b in _log_batches(tmp_path, 0) for v in b] == values
    with LogManager(LogConfig.from_properties({"log.dirs": str(tmp_path / "data")}), start_scheduler=False,
                    read_only=True) as m:
        log = m.get_log("w", 0)
        assert log is not None and log.number_of_segments() >= 5
        assert all(seg.size <= 1024 * 1024 for seg in log.segments.values())
    assert sorted(p for t, p in _partitions_of(tmp_path)) == [0, 1, 2]  # a created topic has every partition


def _partitions_of(tmp_path: Path) -> list[tuple[str, int]]:
    with LogManager(LogConfig.from_properties({"log.dirs": str(tmp_path / "data")}), start_scheduler=False,
                    read_only=True) as m:
        return m.partitions()


def test_a_failed_commit_leaves_the_logs_as_they_were(tmp_path: Path) -> None:
    import time

    options = {"config.log.segment.bytes": "1048576", "batchSize": "200000"}
    first = _plan(tmp_path, **options)
    commit_staged(first, [stage_task(first, iter([_batch([b"old%d" % i for i in range(9)], partitions=[0, 1, 2] * 3)]),
                                     task=0, attempt=0)])
    with LogManager(LogConfig.from_properties({"log.dirs": str(tmp_path / "data")}), start_scheduler=False):
        pass  # an open and a clean close, as the commit's own, settle what every open changes (old snapshots)
    before = _tree(tmp_path / "data")
    plan = _plan(tmp_path, **options)
    big = [b"%06d" % i + b"n" * 3000 for i in range(1200)]  # 3.6 MiB over partitions 0 and 1: segments roll
    good = stage_task(plan, iter([_batch(big, partitions=[0, 1] * 600)]), task=0, attempt=0)
    future = pa.record_batch({"value": pa.array([b"late"], pa.binary()), "partition": pa.array([1], pa.int32()),
                              "timestamp": pa.array([int(time.time() * 1000) + 7_200_000], pa.timestamp("ms"))})
    bad = stage_task(plan, iter([future]), task=1, attempt=0)  # beyond message.timestamp.after.max.ms (1 h)
    with pytest.raises(SparkSinkError, match=r"commit of the write to w failed at w-1 \(InvalidTimestampError: .*\); "
                                             r"nothing of it was kept \(log end offsets back at w-0 at 3, w-1 at 3\)"):
        commit_staged(plan, [good, bad])
    assert _tree(tmp_path / "data") == before  # every file, byte for byte: segments, indexes, checkpoints

    # a topic the failed commit created is gone again
    created = plan_write({"config.log.dirs": str(tmp_path / "data"), "topic": "fresh", "numPartitions": "2"},
                         SCHEMA, False)
    bad = stage_task(created, iter([future.set_column(1, "partition", pa.array([0], pa.int32()))]), task=0, attempt=0)
    with pytest.raises(SparkSinkError, match=r"fresh-0 .*nothing of it was kept and the partitions it created are "
                                             r"deleted"):
        commit_staged(created, [bad])
    after = _tree(tmp_path / "data")
    # deleting the created partitions updates the log cleaner's checkpoint, as Kafka's deletion does: no entry in it
    assert after.pop("cleaner-offset-checkpoint", b"0\n0\n") == b"0\n0\n"
    assert after == before
