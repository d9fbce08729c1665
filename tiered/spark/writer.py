"""Writes: ``df.write.format("tiered").mode("append").options(...).save()`` appends rows to a topic's log.

Columns: ``value`` (binary or string, required), ``key`` (binary or string), ``headers`` (array of struct<key
string, value binary>), ``partition`` (integer) and ``timestamp`` (timestamp), all but ``value`` optional; the other
columns of the read schema (``topic``, ``offset``, ``timestampType``, ``leaderEpoch``) are ignored, so a DataFrame
read from the source can be written back; any other column is an error. A null or missing ``partition`` is chosen as
Kafka's default partitioner does: the murmur2 hash of the key, and for a null key a sticky partition that moves on
when its batch is full. A null or missing ``timestamp`` is the time of the write.

Options: ``config``/``config.<key>`` (the broker config, as for reads), ``topic`` (required), ``batchSize`` (bytes of
keys, values and headers per record batch, Kafka's ``batch.size``; 16384), ``compression`` (Kafka's
``compression.type`` of a producer: none, gzip, snappy, lz4, zstd), ``numPartitions`` (create the topic with this
many partitions if it does not exist; without it a missing topic is an error) and ``stagingDir`` (see below). Only
``append`` mode: a log is append-only.

Commit protocol: staging, not transactional markers. The data dirs are locked by one writing ``LogManager`` per
process, and Spark's tasks run in Python workers of their own (on other machines on a cluster): they cannot append
to the log. Each task builds its record batches (with the batch size and compression asked for, checked against the
topic's ``max.message.bytes``) and writes them, as they would lie in a segment, to files of its own in the job's
staging directory; its commit message names the files. The job's commit, on the driver, opens the data dirs for
writing and appends the staged batches of the committed tasks in task order (offsets and leader epoch assigned by
the log as a leader's append), then removes the staging directory; an abort only removes it. So readers of either
isolation level see nothing of a job that aborted or of a task attempt that failed, and a job's records are
contiguous in each partition. Transactional markers were the alternative (a producer id per task, COMMIT/ABORT
control batches, which the engine supports): they would still need one process to append for the tasks, an
aborted task's records would stay visible to ``read_uncommitted`` readers (the source's default, as Kafka's) and
take offsets for ever. The commit itself is not atomic against a crash of the driver in its middle: a prefix of
the job's batches may then be in the logs (Spark's Kafka sink gives at-least-once too).

``stagingDir`` defaults to ``<first log dir>.spark-staging`` (beside the data dir, never inside it: Kafka's broker
refuses unknown directories there). On a cluster it must be a directory that the executors and the driver share.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from local.errors import RecordTooLargeError
from local.records import CompressionType, MemoryRecords, SimpleRecord
from local.records.batch import LOG_OVERHEAD
from tiered.errors import TieredStorageError
from tiered.spark.options import SparkSourceOptionError, broker_props

IGNORED_COLUMNS = ("topic", "offset", "timestampType", "leaderEpoch")
DEFAULT_BATCH_SIZE = 16384
APPEND_CHUNK = 1024 * 1024  # staged bytes handed to one Log.append
_REMOVE_PASSES = 20  # rmtree passes an abort makes at most (_remove_job_dir)


class SparkSinkError(TieredStorageError):
    """A write that cannot be done (the data dirs, the topic, a staged file), named with what was wrong."""


@dataclass
class WritePlan:
    """What every task needs, resolved on the driver and pickled to the tasks."""

    props: dict[str, str]
    topic: str
    partitions: int
    create: bool
    max_message_bytes: int
    compression: str
    batch_size: int
    job_dir: str
    columns: tuple[str, ...]


@dataclass
class Staged:
    """One staged file: the batches of one task attempt for one partition."""

    topic: str
    partition: int
    path: str
    records: int
    batches: int
    size: int


@dataclass
class TaskStaged(WriterCommitMessage):
    task: int
    attempt: int
    files: list[Staged] = field(default_factory=list)


def _check_column(name: str, kind: DataType) -> str | None:
    """Why this column cannot be written (None: it can)."""
    wanted: dict[str, tuple[type, ...]] = {
        "value": (BinaryType, StringType), "key": (BinaryType, StringType),
        "partition": (IntegerType, LongType, ShortType, ByteType), "timestamp": (TimestampType, TimestampNTZType),
    }
    if name in wanted:
        return None if isinstance(kind, wanted[name]) else f"{name} is {kind.simpleString()}"
    if name == "headers":
        ok = (isinstance(kind, ArrayType) and isinstance(kind.elementType, StructType)
              and [f.name for f in kind.elementType.fields] == ["key", "value"]
              and isinstance(kind.elementType["key"].dataType, StringType)
              and isinstance(kind.elementType["value"].dataType, BinaryType | StringType))
        return None if ok else f"headers is {kind.simpleString()}, not array<struct<key:string,value:binary>>"
    if name in IGNORED_COLUMNS:
        return None
    return f"unknown column {name}"


def plan_write(options: Mapping[str, Any], schema: StructType, overwrite: bool) -> WritePlan:
    """Check the options and the DataFrame's columns, and resolve the topic on the driver."""
    if overwrite:
        raise SparkSinkError("mode overwrite: a topic's log is append-only; write with mode('append')")
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    props = broker_props(options)
    topic = opts.get("topic")
    if not topic:
        raise SparkSourceOptionError("writes need the option topic")
    problems = [p for f in schema.fields if (p := _check_column(f.name, f.dataType)) is not None]
    if "value" not in schema.fieldNames():
        problems.append("no value column")
    if problems:
        raise SparkSinkError(f"cannot write to {topic}: {'; '.join(problems)} (columns: value, key, headers, "
                             f"partition, timestamp; ignored: {', '.join(IGNORED_COLUMNS)})")
    compression = opts.get("compression", "none").lower()
    try:
        CompressionType.from_name(compression)
    except (ValueError, KeyError):
        raise SparkSourceOptionError(f"compression={compression!r}: expected none, gzip, snappy, lz4 or zstd") from None
    batch_size = _positive("batchSize", opts.get("batchsize"), DEFAULT_BATCH_SIZE)
    wanted_partitions = _positive("numPartitions", opts.get("numpartitions"), 0) if "numpartitions" in opts else None
    partitions, max_message_bytes = _topic_shape(props, topic)
    create = partitions == 0
    if create:
        if wanted_partitions is None:
            raise SparkSinkError(f"topic {topic} does not exist in {props.get('log.dirs', props.get('log.dir'))}; "
                                 "set the option numPartitions to create it")
        partitions = wanted_partitions
    first_dir = (props.get("log.dirs") or props["log.dir"]).split(",")[0].rstrip("/")
    staging = opts.get("stagingdir") or f"{first_dir}.spark-staging"
    job_dir = os.path.join(os.path.abspath(staging), f"job-{uuid.uuid4().hex}")
    os.makedirs(job_dir)  # here, on the driver: tasks write into it but never create it (see _TaskStager.flush)
    return WritePlan(props=props, topic=topic, partitions=partitions, create=create,
                     max_message_bytes=max_message_bytes, compression=compression, batch_size=batch_size,
                     job_dir=job_dir, columns=tuple(schema.fieldNames()))


def _positive(name: str, value: str | None, default: int) -> int:
    if value is None:
        return default
    try:
        n = int(value)
    except ValueError:
        raise SparkSourceOptionError(f"{name}={value!r}: expected a positive integer") from None
    if n <= 0:
        raise SparkSourceOptionError(f"{name}={value!r}: expected a positive integer")
    return n


def _topic_shape(props: dict[str, str], topic: str) -> tuple[int, int]:
    """(partition count, max.message.bytes) of the topic; (0, the broker default) when it does not exist."""
    from local import LogConfig
    from tiered.spark.planning import open_read_only

    mine = [p for t, p in _partitions(props) if t == topic]
    if not mine:
        return 0, LogConfig.from_properties(props).topic_config().max_message_bytes
    if sorted(mine) != list(range(len(mine))):
        raise SparkSinkError(f"topic {topic} has partitions {sorted(mine)} in the data dirs, not 0..{len(mine) - 1}")
    with open_read_only(props) as manager:
        log = manager.get_log(topic, 0)
        assert log is not None
        return len(mine), log.config.max_message_bytes


def _partitions(props: dict[str, str]) -> list[tuple[str, int]]:
    from tiered.spark.planning import open_read_only

    if not any(Path(d).is_dir() for d in (props.get("log.dirs") or props.get("log.dir", "")).split(",")):
        return []
    with open_read_only(props) as manager:
        return list(manager.partitions())


# On an executor --------------------------------------------------------------------------------------------------

class _TaskStager:
    """Builds one task attempt's batches and stages them, one file per partition."""

    def __init__(self, plan: WritePlan, task: int, attempt: int) -> None:
        self.plan = plan
        self.dir = Path(plan.job_dir) / f"task-{task}-{attempt}-{uuid.uuid4().hex[:8]}"
        self.codec = CompressionType.from_name(plan.compression)
        self.pending: dict[int, list[SimpleRecord]] = {}
        self.pending_bytes: dict[int, int] = {}
        self.files: dict[int, Any] = {}
        self.staged: dict[int, Staged] = {}
        self.sticky = task % plan.partitions

    def add(self, partition: int, record: SimpleRecord, size: int) -> None:
        pending = self.pending.setdefault(partition, [])
        if pending and self.pending_bytes[partition] + size > self.plan.batch_size:
            self.flush(partition)
            pending = self.pending[partition]
        pending.append(record)
        self.pending_bytes[partition] = self.pending_bytes.get(partition, 0) + size

    def sticky_partition(self, size: int) -> int:
        """Kafka's sticky choice for a null key: the same partition until its batch is full, then the next."""
        p = self.sticky
        if self.pending.get(p) and self.pending_bytes[p] + size > self.plan.batch_size:
            self.sticky = p = (p + 1) % self.plan.partitions
        return p

    def flush(self, partition: int) -> None:
        records = self.pending.get(partition)
        if not records:
            return
        batch = MemoryRecords.build(records, self.codec)
        size = batch.size_in_bytes
        if size - LOG_OVERHEAD > self.plan.max_message_bytes:
            raise RecordTooLargeError(
                f"a batch of {len(records)} record(s) for {self.plan.topic}-{partition} is {size} bytes, above the "
                f"topic's max.message.bytes {self.plan.max_message_bytes} (lower batchSize or compress)")
        out = self.files.get(partition)
        if out is None:
            path = self.dir / f"{self.plan.topic}-{partition}.log"
            try:  # the job's directory is made by the driver when it plans the job; a task never remakes it (nor its
                # own, once made), so a task still running after the job's abort removed them fails here instead of
                # leaving files behind
                if not self.files:
                    self.dir.mkdir()
                out = self.files[partition] = open(path, "xb")  # noqa: SIM115 - closed in close()
            except FileNotFoundError:
                raise SparkSinkError(f"the job's staging directory {self.dir.parent} is gone: the job was aborted, "
                                     "or stagingDir is not shared by the executors and the driver") from None
            self.staged[partition] = Staged(self.plan.topic, partition, str(path), 0, 0, 0)
        out.write(batch.buffer)
        staged = self.staged[partition]
        staged.records += len(records)
        staged.batches += 1
        staged.size += size
        self.pending[partition] = []
        self.pending_bytes[partition] = 0

    def close(self) -> list[Staged]:
        for partition in list(self.pending):
            self.flush(partition)
        for out in self.files.values():
            out.flush()
            os.fsync(out.fileno())
            out.close()
        return [self.staged[p] for p in sorted(self.staged)]

    def discard(self) -> None:
        """A failed attempt leaves no staged file behind (the job's abort removes the rest)."""
        for out in self.files.values():
            out.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _texts(column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """A binary or string column as a list of bytes (None kept)."""
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type) or pa.types.is_string_view(column.type):
        column = column.cast(pa.binary())
    return column.to_pylist()


def stage_task(plan: WritePlan, batches: Iterator[pa.RecordBatch], task: int, attempt: int) -> TaskStaged:
    """Turn a task's rows into staged record batches (see the module docstring)."""
    from kafka.partitioner.default import murmur2

    stager = _TaskStager(plan, task, attempt)
    n = plan.partitions
    try:
        for rb in batches:
            rows = rb.num_rows
            if rows == 0:
                continue
            names = rb.schema.names
            values = _texts(rb.column("value"))
            keys = _texts(rb.column("key")) if "key" in names else [None] * rows
            headers = rb.column("headers").to_pylist() if "headers" in names else [None] * rows
            parts = rb.column("partition").to_pylist() if "partition" in names else [None] * rows
            if "timestamp" in names:
                stamps = rb.column("timestamp").cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64()).to_pylist()
            else:
                stamps = [None] * rows
            now = int(time.time() * 1000)
            for key, value, hs, part, ts in zip(keys, values, headers, parts, stamps, strict=True):
                pairs = [(h["key"], h["value"].encode() if isinstance(h["value"], str) else h["value"])
                         for h in hs] if hs else []
                size = len(key or b"") + len(value or b"") + sum(len(k) + len(v or b"") for k, v in pairs)
                if part is None:
                    part = (murmur2(key) & 0x7FFFFFFF) % n if key is not None else stager.sticky_partition(size)
                elif not 0 <= part < n:
                    raise SparkSinkError(f"a row's partition {part} is outside {plan.topic}'s partitions 0..{n - 1}")
                stager.add(part, SimpleRecord(now if ts is None else ts, key, value, headers=pairs), size)
        return TaskStaged(task, attempt, stager.close())
    except BaseException:
        stager.discard()
        raise


# On the driver -------------------------------------------------------------------------------------------------

def commit_staged(plan: WritePlan, messages: list[TaskStaged]) -> dict[int, int]:
    """Append the committed tasks' staged batches (task order) and remove the staging directory; records per
    partition."""
    from local import LogConfig
    from tiered.composition import open_log_manager

    staged = [s for m in sorted(messages, key=lambda m: m.task) for s in m.files]
    for s in staged:
        try:
            size = os.path.getsize(s.path)
        except OSError as exc:
            raise SparkSinkError(f"staged file {s.path} of {s.topic}-{s.partition} is unreadable ({exc}); is "
                                 "stagingDir shared by the executors and the driver?") from exc
        if size != s.size:
            raise SparkSinkError(f"staged file {s.path} has {size} bytes, its task wrote {s.size}")
    written: dict[int, int] = {}
    try:
        manager = open_log_manager(LogConfig.from_properties(plan.props), start_scheduler=False)
    except Exception as exc:
        raise SparkSinkError(f"cannot open {plan.props.get('log.dirs', plan.props.get('log.dir'))} for writing to "
                             f"{plan.topic} ({type(exc).__name__}: {exc}); is a broker running on them?") from exc
    with manager:
        for s in staged:
            log = manager.get_or_create_log(s.topic, s.partition) if plan.create else manager.get_log(s.topic, s.partition)
            if log is None:
                raise SparkSinkError(f"{s.topic}-{s.partition} is gone from the data dirs since the write was planned")
            for chunk in _chunks(Path(s.path)):
                log.append(chunk)
            written[s.partition] = written.get(s.partition, 0) + s.records
    _remove_job_dir(plan.job_dir)
    return written


def _remove_job_dir(job_dir: str) -> None:
    """Remove a job's staging directory, and the staging directory itself once no job uses it.

    An abort runs while tasks Spark is cancelling may still be staging: one can create a file in its own directory
    between ``rmtree`` listing it and removing it, and that ``rmtree`` then leaves the directory behind. Each pass
    removes every task directory it lists, and a task never recreates a removed one, so a few passes converge.
    """
    for _ in range(_REMOVE_PASSES):
        shutil.rmtree(job_dir, ignore_errors=True)
        if not os.path.lexists(job_dir):
            break
    try:
        os.rmdir(os.path.dirname(job_dir))
    except OSError:
        pass  # another job's files are there, or it is gone


def _chunks(path: Path) -> Iterator[bytes]:
    """Whole batches of a staged file, about APPEND_CHUNK bytes at a time."""
    data = path.read_bytes()
    view = memoryview(data)
    start = pos = 0
    while pos < len(data):
        pos += int.from_bytes(view[pos + 8:pos + 12], "big") + LOG_OVERHEAD
        if pos - start >= APPEND_CHUNK:
            yield bytes(view[start:pos])
            start = pos
    if start < len(data):
        yield bytes(view[start:])


class TieredWriter(DataSourceArrowWriter):
    """``df.write.format("tiered")`` (module docstring)."""

    def __init__(self, options: Mapping[str, Any], schema: StructType, overwrite: bool) -> None:
        self.plan = plan_write(options, schema, overwrite)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskStaged:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx is not None else (0, 0)
        return stage_task(self.plan, iterator, task, attempt)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_staged(self.plan, [m for m in messages if isinstance(m, TaskStaged)])

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _remove_job_dir(self.plan.job_dir)
