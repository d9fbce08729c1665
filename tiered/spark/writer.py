"""Writes: ``df.write.format("tiered").mode("append").options(...).save()`` appends rows to a topic's log.

Columns: ``value`` (binary or string, required), ``key`` (binary or string), ``headers`` (array of struct<key
string, value binary>), ``partition`` (integer) and ``timestamp`` (timestamp), all but ``value`` optional; the other
columns of the read schema (``topic``, ``offset``, ``timestampType``, ``leaderEpoch``) are ignored, so a DataFrame
read from the source can be written back; any other column is an error. A null or missing ``partition`` is chosen as
Kafka's default partitioner does: the murmur2 hash of the key, and for a null key a sticky partition that moves on
when its batch is full. A null or missing ``timestamp`` is the time of the write.

Options: ``config``/``config.<key>`` (the broker config, as for reads), ``topic`` (required), ``batchSize`` (Kafka's
``batch.size``: a batch is closed before the next record would take its encoded size, header and records before
compression, above this many bytes; 16384; never above what the log accepts, the topic's ``max.message.bytes`` and
``segment.bytes``, whatever this says), ``compression`` (Kafka's
``compression.type`` of a producer: none, gzip, snappy, lz4, zstd), ``numPartitions`` (create the topic with this
many partitions if it does not exist; without it a missing topic is an error) and ``stagingDir`` (see below); any
other option is refused. Only ``append`` mode: a log is append-only.

Commit protocol: staging, not transactional markers. The data dirs are locked by one writing ``LogManager`` per
process, and Spark's tasks run in Python workers of their own (on other machines on a cluster): they cannot append
to the log. Each task builds its record batches (with the batch size and compression asked for, each within the
topic's ``max.message.bytes`` and ``segment.bytes``) and writes them, as they would lie in a segment, to files of its own in the job's
staging directory; its commit message names the files. The job's commit, on the driver, opens the data dirs for
writing and appends the staged batches of the committed tasks in task order (offsets and leader epoch assigned by
the log as a leader's append), then removes the staging directory; an abort only removes it. So readers of either
isolation level see nothing of a job that aborted or of a task attempt that failed, and a job's records are
contiguous in each partition. Transactional markers were the alternative (a producer id per task, COMMIT/ABORT
control batches, which the engine supports): they would still need one process to append for the tasks, an
aborted task's records would stay visible to ``read_uncommitted`` readers (the source's default, as Kafka's) and
take offsets for ever. The driver appends in pieces of whole batches no larger than the log's ``segment.bytes``
(the largest append a log takes). The commit is all or nothing against errors (a batch the log refuses, say for a
timestamp outside ``message.timestamp.after.max.ms``, or a full disk): the partitions it appended to are truncated
back to their log end offsets from before it, a topic it created is deleted again, and the error says so. Readers
of a partition while its commit runs may see the part appended so far, and a failed commit's truncation takes it
back (as a follower's truncation does). It is not atomic against a crash of the driver in its middle: a prefix of
the job's batches may then stay in the logs (Spark's Kafka sink gives at-least-once too).

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
from tiered.batching import PendingBatch, build_within
from tiered.errors import TieredStorageError
from tiered.spark.options import SparkSourceOptionError, broker_props, check_known

IGNORED_COLUMNS = ("topic", "offset", "timestampType", "leaderEpoch")
WRITE_OPTIONS = ("config", "topic", "batchSize", "compression", "numPartitions", "stagingDir")
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
    segment_bytes: int = 2**31 - 1

    @property
    def batch_limit(self) -> int:
        """The most bytes one whole batch may have: the log refuses a batch above ``max.message.bytes`` (its size
        with the 12-byte log overhead, as Kafka counts it) or above ``segment.bytes`` (no segment could hold it)."""
        return min(self.max_message_bytes, self.segment_bytes)


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
    check_known(options, WRITE_OPTIONS, "a write")
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
    partitions, max_message_bytes, segment_bytes = _topic_shape(props, topic)
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
                     job_dir=job_dir, columns=tuple(schema.fieldNames()), segment_bytes=segment_bytes)


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


def _topic_shape(props: dict[str, str], topic: str) -> tuple[int, int, int]:
    """(partition count, max.message.bytes, segment.bytes) of the topic; (0, the broker defaults) when it does not
    exist."""
    from local import LogConfig
    from tiered.spark.planning import open_read_only

    mine = [p for t, p in _partitions(props) if t == topic]
    if not mine:
        defaults = LogConfig.from_properties(props).topic_config()
        return 0, defaults.max_message_bytes, defaults.segment_bytes
    if sorted(mine) != list(range(len(mine))):
        raise SparkSinkError(f"topic {topic} has partitions {sorted(mine)} in the data dirs, not 0..{len(mine) - 1}")
    with open_read_only(props) as manager:
        log = manager.get_log(topic, 0)
        assert log is not None
        return len(mine), log.config.max_message_bytes, log.config.segment_bytes


def _partitions(props: dict[str, str]) -> list[tuple[str, int]]:
    from tiered.spark.planning import open_read_only

    if not any(Path(d).is_dir() for d in (props.get("log.dirs") or props.get("log.dir", "")).split(",")):
        return []
    with open_read_only(props) as manager:
        return list(manager.partitions())


# On an executor --------------------------------------------------------------------------------------------------

class _TaskStager:
    """Builds one task attempt's batches and stages them, one file per partition.

    A batch is closed when the next record would take its encoded size (header and records as written, before
    compression) above ``batchSize``, Kafka's ``batch.size``; a record larger than that gets a batch of its own.
    No batch goes above :attr:`WritePlan.batch_limit`, whatever ``batchSize`` says: one record that cannot fit
    there alone is refused (``RecordTooLargeError``), and a compressed batch that came out larger than the limit
    (incompressible data grows a little) is rebuilt as two."""

    def __init__(self, plan: WritePlan, task: int, attempt: int) -> None:
        self.plan = plan
        self.dir = Path(plan.job_dir) / f"task-{task}-{attempt}-{uuid.uuid4().hex[:8]}"
        self.codec = CompressionType.from_name(plan.compression)
        self.target = min(plan.batch_size, plan.batch_limit)
        self.pending: dict[int, PendingBatch] = {}
        self.files: dict[int, Any] = {}
        self.staged: dict[int, Staged] = {}
        self.sticky = task % plan.partitions

    def _grown(self, partition: int, record: SimpleRecord) -> int | None:
        """The pending batch's size with ``record`` added (None: there is no pending batch)."""
        pending = self.pending.get(partition)
        return pending.size_with(record) if pending is not None and pending.records else None

    def add(self, partition: int, record: SimpleRecord) -> None:
        grown = self._grown(partition, record)
        if grown is not None and grown > self.target:
            self.flush(partition)
            grown = None
        pending = self.pending.setdefault(partition, PendingBatch())
        if grown is None:
            grown = pending.size_with(record)
            if grown > self.plan.batch_limit:
                raise RecordTooLargeError(
                    f"a record for {self.plan.topic}-{partition} makes a batch of {grown} bytes on its own, above the "
                    f"topic's {self._limit_name()} {self.plan.batch_limit}", size=grown)
        pending.add(record, grown)

    def _limit_name(self) -> str:
        return "max.message.bytes" if self.plan.max_message_bytes <= self.plan.segment_bytes else "segment.bytes"

    def sticky_partition(self, record: SimpleRecord) -> int:
        """Kafka's sticky choice for a null key: the same partition until its batch is full, then the next."""
        p = self.sticky
        grown = self._grown(p, record)
        if grown is not None and grown > self.target:
            self.sticky = p = (p + 1) % self.plan.partitions
        return p

    def _build(self, partition: int, records: list[SimpleRecord]) -> list[MemoryRecords]:
        """The batches of ``records``: one, or more when compression made one larger than the limit."""
        return build_within(records, self.plan.batch_limit, self.codec, lambda _, size: RecordTooLargeError(
            f"a record for {self.plan.topic}-{partition} makes a {self.plan.compression} batch of {size} bytes, above "
            f"the topic's {self._limit_name()} {self.plan.batch_limit}", size=size))

    def flush(self, partition: int) -> None:
        pending = self.pending.get(partition)
        if pending is None or not pending.records:
            return
        records = pending.take()
        batches = self._build(partition, records)
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
        staged = self.staged[partition]
        for batch in batches:
            out.write(batch.buffer)
            staged.batches += 1
            staged.size += batch.size_in_bytes
        staged.records += len(records)

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


def _millis(column: pa.Array | pa.ChunkedArray) -> list[int | None]:
    """A timestamp column as Kafka's epoch milliseconds (None kept): Spark's are microseconds, rounded down (a
    cast to milliseconds would refuse any with a fraction of one)."""
    micros = column.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()
    return [None if m is None else m // 1000 for m in micros]


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
            stamps = _millis(rb.column("timestamp")) if "timestamp" in names else [None] * rows
            now = int(time.time() * 1000)
            for key, value, hs, part, ts in zip(keys, values, headers, parts, stamps, strict=True):
                pairs = [(h["key"], h["value"].encode() if isinstance(h["value"], str) else h["value"])
                         for h in hs] if hs else []
                record = SimpleRecord(now if ts is None else ts, key, value, headers=pairs)
                if part is None:
                    part = (murmur2(key) & 0x7FFFFFFF) % n if key is not None else stager.sticky_partition(record)
                elif not 0 <= part < n:
                    raise SparkSinkError(f"a row's partition {part} is outside {plan.topic}'s partitions 0..{n - 1}")
                stager.add(part, record)
        return TaskStaged(task, attempt, stager.close())
    except BaseException:
        stager.discard()
        raise


# On the driver -------------------------------------------------------------------------------------------------

def commit_staged(plan: WritePlan, messages: list[TaskStaged]) -> dict[int, int]:
    """Append the committed tasks' staged batches (task order) and remove the staging directory; records per
    partition. All or nothing against an error: see :func:`_append_all`."""
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
    try:
        manager = open_log_manager(LogConfig.from_properties(plan.props), start_scheduler=False)
    except Exception as exc:
        raise SparkSinkError(f"cannot open {plan.props.get('log.dirs', plan.props.get('log.dir'))} for writing to "
                             f"{plan.topic} ({type(exc).__name__}: {exc}); is a broker running on them?") from exc
    with manager:
        written = _append_all(manager, plan, staged)
    _remove_job_dir(plan.job_dir)
    return written


def _append_all(manager: Any, plan: WritePlan, staged: list[Staged]) -> dict[int, int]:
    """Append every staged file, each in appends of whole batches no larger than ``APPEND_CHUNK`` nor the log's
    ``segment.bytes`` (the log refuses one append above it).

    All or nothing against an error (a batch the log refuses, a full disk): each partition the commit appended to
    is truncated back to its log end offset from before, and the partitions of a topic the commit created are
    deleted, before the error is raised. Not against a crash of the driver in the middle: a prefix of the job's
    batches may then stay in the logs (at-least-once, as Spark's Kafka sink)."""
    topic = plan.topic
    created: list[int] = []
    before: dict[int, int] = {}  # partition -> log end offset before the commit (existing partitions)
    written: dict[int, int] = {}
    current: Staged | None = None
    try:
        if plan.create:
            for p in range(plan.partitions):  # every partition asked for, also those no row went to
                if manager.get_log(topic, p) is None:
                    manager.get_or_create_log(topic, p)
                    created.append(p)
        for current in staged:
            log = manager.get_log(current.topic, current.partition)
            if log is None:
                raise SparkSinkError(f"{current.topic}-{current.partition} is gone from the data dirs since the write "
                                     "was planned")
            if current.partition not in created:
                before.setdefault(current.partition, log.log_end_offset)
            for chunk in _chunks(Path(current.path), min(APPEND_CHUNK, log.config.segment_bytes)):
                log.append(chunk)
            written[current.partition] = written.get(current.partition, 0) + current.records
    except Exception as exc:
        undone = _roll_back(manager, topic, before, created)
        where = f" at {current.topic}-{current.partition}" if current is not None else ""
        raise SparkSinkError(f"the commit of the write to {topic} failed{where} ({type(exc).__name__}: "
                             f"{' '.join(str(exc).split())}); {undone}") from exc
    return written


def _roll_back(manager: Any, topic: str, before: dict[int, int], created: list[int]) -> str:
    """Undo a failed commit (see :func:`_append_all`); what was done, in words."""
    failed: list[str] = []
    for p, offset in sorted(before.items()):
        try:
            log = manager.get_log(topic, p)
            if log is not None:
                log.truncate_to(offset)
        except Exception as exc:
            failed.append(f"{topic}-{p} could not be truncated back to offset {offset} ({type(exc).__name__}: {exc})")
    for p in created:
        try:
            manager.delete_log(topic, p)
        except Exception as exc:
            failed.append(f"{topic}-{p}, created by the commit, could not be deleted ({type(exc).__name__}: {exc})")
    if failed:
        return "and undoing it failed: " + "; ".join(failed)
    kept = ", ".join(f"{topic}-{p} at {o}" for p, o in sorted(before.items()))
    return ("nothing of it was kept" + (f" (log end offsets back at {kept})" if kept else "")
            + (" and the partitions it created are deleted" if created else ""))


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


def _chunks(path: Path, limit: int) -> Iterator[bytes]:
    """Whole batches of a staged file, as many as fit in ``limit`` bytes at a time (a batch larger than that comes
    alone, and the log says why it refuses it). Read piece by piece: a staged file can be larger than memory."""
    with open(path, "rb") as f:
        buf = b""
        while True:
            more = f.read(max(limit, 1 << 16))
            buf = buf + more if buf else more
            view = memoryview(buf)
            end = 0
            while end + LOG_OVERHEAD <= len(buf):
                size = int.from_bytes(view[end + 8:end + 12], "big") + LOG_OVERHEAD
                if end + size > len(buf) or (end and end + size > limit):
                    break
                end += size
            if end:
                yield bytes(view[:end])
                buf = bytes(view[end:])
            elif not more:
                if buf:
                    raise SparkSinkError(f"staged file {path} ends with a batch cut short ({len(buf)} bytes)")
                return


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
