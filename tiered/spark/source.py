"""The ``tiered`` PySpark data source (``pyspark.sql.datasource``): batch and streaming reads of a topic's whole
history, and appends (:mod:`tiered.spark.writer`).

``spark.read.format("tiered").options(...).load()`` after :func:`tiered.spark.register`; the options are in
:mod:`tiered.spark.options`, the schema is :data:`tiered.spark.arrow_records.SCHEMA_DDL`. ``partitions()`` plans on
the driver (:mod:`tiered.spark.planning`); ``read()`` runs on executors (:mod:`tiered.spark.reader`) and yields
``pyarrow.RecordBatch``es.

Filter pushdown (with ``spark.sql.python.filterPushdown.enabled=true``): comparisons (=, <, <=, >, >=, IN) of
``partition``, ``offset`` and ``timestamp`` with literals are accepted. They prune partitions and segments, start
reads at the right offset (a timestamp floor through the engine's offset-for-timestamp lookup), and are then
applied exactly to every record, since Spark does not check an accepted filter again. Spark refuses a reader
with ``pushFilters`` while that setting is false: :func:`tiered.spark.register` sets it, and the option
``filterPushdown=false`` gives a reader without it.

A user schema (``spark.read.format("tiered").schema("offset long, value binary")``) made of some of the source's
columns, in any order (names in any case, types as the source's, ``NOT NULL`` only on columns that are never null),
is honoured: only those columns are built. Anything else in it is refused naming the columns, when the read is
planned (Spark calls nothing of a Python source at ``load()`` when it is given a schema). PySpark 4.3's Python Data
Source API has no column pruning (its scan builder takes filters only), so a ``select`` of a few columns still
builds all those of the schema: a schema is the way to build fewer. Unknown options are refused (see
:mod:`tiered.spark.options`); so are a subscription that matches no topic and offsets given for a topic or
partition the read does not include (:func:`tiered.spark.planning.check_subscription`), also by a streaming read when
it starts.

Batch and streaming reads take the offsets that a topic's columnar copy holds (:mod:`tiered.columnar`) from its
Parquet files, read with pyarrow on the executors, and the rest from the log, each offset once
(:mod:`tiered.spark.planning`); the option ``columnarCopy=false`` reads the log only. A streaming query started
from ``earliest`` thus reads the history from the copy and the newest records from the log.

A reused Spark worker (Spark's default) freezes its heap after its first read, the planner after its first plan,
and the worker that makes the data source at each ``load()`` when it first makes one (:mod:`tiered.spark.worker_heap`): PySpark's daemon collects the whole heap after every task, which cost more CPU
than decoding the records; the option ``freezeWorkerHeap=false`` leaves the collector alone.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from tiered.spark.arrow_records import ARROW_SCHEMA, SCHEMA_DDL, Projection
from tiered.spark.options import (
    READ_OPTIONS,
    SparkSourceOptionError,
    check_known,
    freeze_worker_heap,
    parse_options,
)
from tiered.spark.planning import Bounds, Piece, check_subscription, input_partitions
from tiered.spark.reader import read_piece, timestamp_micros
from tiered.spark.worker_heap import settle, settle_after

_OPS: dict[type, str] = {
    EqualTo: "=", GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<=", In: "in",
}
_PUSHABLE = ("partition", "offset", "timestamp")
_INT_LIMIT = 2**63
SOURCE_SCHEMA = from_arrow_schema(ARROW_SCHEMA)  # SCHEMA_DDL as Spark types
_NULLABLE = ("key", "value", "timestamp", "leaderEpoch")  # null for a record without a key, a value, ... (legacy)

logger = logging.getLogger(__name__)


def projection(schema: StructType) -> Projection | None:
    """What a read with ``schema`` builds: None for the source's own schema, else the columns asked for (a user
    schema made of some of the source's columns; anything else is refused, naming the columns)."""
    if schema == SOURCE_SCHEMA:
        return None
    ours = {f.name.lower(): f for f in SOURCE_SCHEMA.fields}
    problems: list[str] = []
    columns: list[str] = []
    for f in schema.fields:
        mine = ours.get(f.name.lower())
        if mine is None:
            problems.append(f"unknown column {f.name}")
        elif mine.name in columns:
            problems.append(f"column {mine.name} twice")
        elif f.dataType != mine.dataType:
            given, wanted = f.dataType.simpleString(), mine.dataType.simpleString()
            problems.append(f"{f.name} is {given}, not {wanted}" if given != wanted else
                            f"{f.name} is {given} with nullability other than the source's")
        elif not f.nullable and mine.name in _NULLABLE:
            problems.append(f"{f.name} is NOT NULL, but the source's {mine.name} can be null")
        if mine is not None and mine.name not in columns:
            columns.append(mine.name)
    if problems or not columns:
        raise SparkSourceOptionError(
            f"schema {schema.simpleString()}: {'; '.join(problems) or 'no column'} (the source's columns: "
            f"{SCHEMA_DDL})")
    return Projection(tuple(columns), to_arrow_schema(schema, timezone="UTC"))


class TieredInputPartition(InputPartition):
    """The planned pieces one task reads, in order (byte ranges of one topic partition's segments, or a file of its
    columnar copy: :func:`tiered.spark.planning.input_partitions`), pickled to the executor."""

    def __init__(self, pieces: Sequence[Piece]) -> None:
        self.pieces = list(pieces)
        super().__init__(self.pieces)


def _read_pieces(partition: InputPartition, projection: Projection | None, freeze_worker_heap: bool) -> Iterator[Any]:
    pieces: list[Piece] = partition.pieces  # type: ignore[attr-defined]
    if not pieces:
        return iter(())
    batches = itertools.chain.from_iterable(read_piece(piece, projection) for piece in pieces)
    return settle_after(batches, freeze_worker_heap)


class TieredDataSource(DataSource):
    """``format("tiered")``."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        # at load() (before Spark asks for a reader or a writer): an option neither of them knows
        from tiered.spark.writer import WRITE_OPTIONS

        check_known(options, dict.fromkeys((*READ_OPTIONS, *WRITE_OPTIONS)), "the tiered source (reads and writes)")
        # Spark makes this instance in a reused worker of its own (pyspark.sql.worker.create_data_source) at every
        # load(), whose daemon then collects the whole heap: ~14 ms a query on the bench machine, before any task
        settle(freeze_worker_heap(options))

    @classmethod
    def name(cls) -> str:
        return "tiered"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        options = dict(self.options)
        columns = projection(schema)
        if str(options.get("filterPushdown", options.get("filterpushdown", "true"))).lower() == "false":
            return TieredReader(options, columns)
        return TieredFilteringReader(options, columns)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TieredStreamReader(dict(self.options), projection(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from tiered.spark.writer import TieredWriter

        return TieredWriter(dict(self.options), schema, overwrite)


def _literal(column: str, value: Any) -> int | None:
    """The filter literal as the integer the executor compares with (None: not one we handle)."""
    if column == "timestamp":
        try:
            return timestamp_micros(value)
        except TypeError:
            return None
    if isinstance(value, bool) or not isinstance(value, int) or not -_INT_LIMIT <= value < _INT_LIMIT:
        return None
    return value


class TieredReader(DataSourceReader):
    """The reader without filter pushdown (option ``filterPushdown=false``: Spark refuses a reader that implements
    ``pushFilters`` while ``spark.sql.python.filterPushdown.enabled`` is false)."""

    def __init__(self, options: dict[str, str], columns: Projection | None = None) -> None:
        self.options = options
        self.opts = parse_options(options)
        self.bounds = Bounds()
        self.projection = columns

    def partitions(self) -> Sequence[InputPartition]:
        groups = input_partitions(self.opts, self.bounds)
        settle(self.opts.freeze_worker_heap)  # Spark's planner is a reused worker too
        return [TieredInputPartition(g) for g in groups] or [TieredInputPartition([])]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read_pieces(partition, self.projection, self.opts.freeze_worker_heap)


class TieredFilteringReader(TieredReader):
    """The default reader: accepts filters on partition, offset and timestamp (module docstring)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for f in filters:
            op = _OPS.get(type(f))
            attribute: tuple[str, ...] = getattr(f, "attribute", ())
            column = attribute[0].lower() if len(attribute) == 1 else None  # a user schema's names, in any case
            if op is None or column not in _PUSHABLE:
                yield f
                continue
            if op == "in":
                values = [_literal(column, v) for v in f.value]  # type: ignore[attr-defined]
                if any(v is None for v in values):
                    yield f
                    continue
                self._narrow(column, op, set(values))
                self.bounds.filters.append((column, op, frozenset(values)))
            else:
                value = _literal(column, f.value)  # type: ignore[attr-defined]
                if value is None:
                    yield f
                    continue
                self._narrow(column, op, value)
                self.bounds.filters.append((column, op, value))

    def _narrow(self, column: str, op: str, value: Any) -> None:
        """Tighten the pruning bounds (the filters themselves are applied exactly on the executors)."""
        b = self.bounds
        if column == "partition":
            allowed = _allowed(op, value)
            if allowed is not None:
                b.partitions = allowed if b.partitions is None else b.partitions & allowed
            elif op in ("<", "<="):
                hi = value if op == "<" else value + 1
                b.partitions = set(range(max(hi, 0))) if b.partitions is None else {p for p in b.partitions if p < hi}
            else:
                lo = value + 1 if op == ">" else value
                if b.partitions is not None:
                    b.partitions = {p for p in b.partitions if p >= lo}
        elif column == "offset":
            lo, hi = _range(op, value)
            b.offset_lo, b.offset_hi = max(b.offset_lo, lo), min(b.offset_hi, hi)
        elif column == "timestamp":
            lo, _hi = _range(op, value)
            if lo > 0:
                ms = -(-lo // 1000)  # the first millisecond at or after the floor
                b.timestamp_lo_ms = ms if b.timestamp_lo_ms is None else max(b.timestamp_lo_ms, ms)


def _allowed(op: str, value: Any) -> set[int] | None:
    if op == "=":
        return {value}
    if op == "in":
        return set(value)
    return None


def _range(op: str, value: Any) -> tuple[int, int]:
    """[lo, hi) of integers satisfying ``x op value`` (IN: its min and max)."""
    if op == "=":
        return value, value + 1
    if op == "in":
        return (min(value), max(value) + 1) if value else (0, 0)
    if op == ">":
        return value + 1, _INT_LIMIT
    if op == ">=":
        return value, _INT_LIMIT
    if op == "<":
        return -_INT_LIMIT, value
    return -_INT_LIMIT, value + 1


# Streaming ------------------------------------------------------------------------------------------------------

def _ends(bounds: dict[str, dict[str, tuple[int, int]]]) -> dict[str, dict[str, int]]:
    """The end offsets of :meth:`TieredStreamReader._bounds`, as Spark's offsets (``{"topic": {"0": end}}``)."""
    return {t: {p: end for p, (_start, end) in parts.items()} for t, parts in bounds.items()}


class TieredStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("tiered")``: tails the partitions of the topics.

    Spark offsets are JSON per partition, ``{"topic": {"0": next offset, ...}}`` (exclusive ends, as Kafka's
    source). ``latestOffset`` opens the data dirs read-only and takes each partition's high watermark (the last
    stable offset under read_committed); a partition that appears later starts at its log start.
    ``maxOffsetsPerTrigger`` caps the offsets of one micro-batch, shared among the partitions in proportion to
    their lag (with ``failOnDataLoss=false``, counted from the log start where retention passed the stream). Each micro-batch is planned like a batch read of [start, end), so segments appended or offloaded
    meanwhile are found, and offsets in the columnar copy are read from its Parquet files (``columnarCopy``);
    exactly-once comes from Spark's checkpoint of these offsets. ``Trigger.AvailableNow``: the partitions' ends when
    the query starts are its target; it reads up to them, ``maxOffsetsPerTrigger`` at a time, then stops (a restart
    with a batch left pending goes on to the target the restart takes)."""

    def __init__(self, options: dict[str, str], columns: Projection | None = None) -> None:
        self.opts = parse_options(options)
        self.projection = columns
        raw = {str(k).lower(): v for k, v in options.items()}
        limit = raw.get("maxoffsetspertrigger")
        try:
            self.max_offsets = int(limit) if limit is not None else None
        except ValueError:
            raise SparkSourceOptionError(f"maxOffsetsPerTrigger={limit!r}: expected a whole number > 0") from None
        if self.max_offsets is not None and self.max_offsets <= 0:
            raise SparkSourceOptionError(f"maxOffsetsPerTrigger={limit}: must be positive")
        given = [name for name in ("endingOffsets", "endingTimestamp") if name.lower() in raw]
        if given:  # (a stream read them as nothing, silently: Spark's Kafka source refuses them in a stream too)
            raise SparkSourceOptionError(f"{', '.join(given)} is for batch reads: a stream reads on as the log grows")
        self._target: dict[str, dict[str, int]] | None = None  # Trigger.AvailableNow's (prepareForTriggerAvailableNow)

    def _bounds(self, timestamp: int | None = None) -> dict[str, dict[str, tuple[int, int]]]:
        """Per partition: (log start, end bound); with ``timestamp``, the first offset at or after it stands for the
        log start (the end bound where no record is that late)."""
        from tiered.spark.planning import open_read_only

        out: dict[str, dict[str, tuple[int, int]]] = {}
        with open_read_only(self.opts.props) as manager:
            for topic, partition in sorted(manager.partitions()):
                if not self.opts.topic_matches(topic):
                    continue
                log = manager.get_log(topic, partition)
                if log is None:
                    continue
                end = log.last_stable_offset if self.opts.read_committed else log.high_watermark
                start = log.log_start_offset
                if timestamp is not None:
                    found = log.offset_for_timestamp(timestamp)
                    start = max(start, min(found.offset, end) if found is not None else end)
                out.setdefault(topic, {})[str(partition)] = (start, end)
        return out

    def initialOffset(self) -> dict:
        from tiered.spark.options import LATEST

        bounds = self._bounds(self.opts.starting_timestamp)  # (startingTimestamp: where the stream begins)
        check_subscription(self.opts, [(t, int(p)) for t, parts in bounds.items() for p in parts])
        out: dict[str, dict[str, int]] = {}
        for topic, parts in bounds.items():
            for p, (start, end) in parts.items():
                spec = self.opts.starting
                wanted = spec if isinstance(spec, int) else spec.get(topic, {}).get(int(p), -2)
                if self.opts.starting_timestamp is not None:
                    wanted = max(wanted, start) if wanted >= 0 else start
                if wanted > end:  # (said later as a clash with an endingOffsets the stream was never given)
                    raise SparkSourceOptionError(f"startingOffsets {wanted} of {topic}-{p} is past its end {end}")
                out.setdefault(topic, {})[p] = end if wanted == LATEST else start if wanted < 0 else wanted
        return out

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_offsets) if self.max_offsets is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: each partition's end now is where the query ends (a partition made later, and what
        is appended later, is not read)."""
        self._target = _ends(self._bounds())

    def reportLatestOffset(self) -> dict:
        return _ends(self._bounds())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        bounds = self._bounds()
        latest = _ends(bounds)
        if self._target is not None:
            target = self._target
            latest = {t: {p: min(end, target[t][p]) for p, end in parts.items() if p in target.get(t, {})}
                      for t, parts in latest.items()}
            latest = {t: parts for t, parts in latest.items() if parts}
        if not isinstance(limit, ReadMaxRows):
            return latest
        begin = {t: {p: (start or {}).get(t, {}).get(p, bounds[t][p][0]) for p in parts} for t, parts in latest.items()}
        if not self.opts.fail_on_data_loss:  # offsets retention took since are skipped: they take no share of the cap
            begin = {t: {p: max(o, bounds[t][p][0]) for p, o in parts.items()} for t, parts in begin.items()}
        lags = {(t, p): max(0, latest[t][p] - begin[t][p]) for t in latest for p in latest[t]}
        total = sum(lags.values())
        if total <= limit.max_rows:
            return latest
        out: dict[str, dict[str, int]] = {}
        budget = limit.max_rows
        for (t, p), lag in sorted(lags.items()):
            share = min(lag, max(1, lag * limit.max_rows // total)) if lag else 0
            share = min(share, budget)
            budget -= share
            # a checkpoint past the log's end ends at the end (partitions() reports the loss), as Spark's Kafka source
            out.setdefault(t, {})[p] = latest[t][p] if begin[t][p] > latest[t][p] else begin[t][p] + share
        return out

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        import copy

        from tiered.spark.options import EARLIEST

        start, end = self._checked(start or {}, end)
        opts = copy.copy(self.opts)
        opts.starting = {t: {int(p): int(o) for p, o in parts.items()} for t, parts in start.items()}
        opts.ending = {t: {int(p): int(o) for p, o in parts.items()} for t, parts in end.items()}
        opts.starting_timestamp = opts.ending_timestamp = None
        for t, parts in opts.ending.items():  # partitions new since the start begin at their log start
            for p in parts:
                opts.starting.setdefault(t, {}).setdefault(p, EARLIEST)
        opts.topics = sorted(opts.ending)
        opts.topic_pattern = None
        groups = input_partitions(opts, Bounds(), check=False)  # checked when the stream started; Spark's offsets since
        return [TieredInputPartition(g) for g in groups] or [TieredInputPartition([])]

    def _checked(self, start: dict, end: dict) -> tuple[dict, dict]:
        """``start`` and ``end`` with what Spark's Kafka source reports as data loss taken out: a partition of the
        checkpoint that is gone (a deleted topic, or a query restarted with other topics), and one whose offset went
        back (a topic made again, another data dir). With failOnDataLoss=true each is an error naming it."""
        from tiered.spark.planning import SparkSourceDataLossError

        losses = []
        gone = sorted((t, p) for t, parts in start.items() for p in parts if p not in end.get(t, {}))
        for t, p in gone:
            losses.append(f"{t}-{p} of the stream's checkpoint is not in the data dirs (a deleted topic, or the query "
                          "restarted with other topics?)")
        back = sorted((t, p) for t, parts in end.items() for p, o in parts.items() if start.get(t, {}).get(p, -1) > o)
        for t, p in back:
            losses.append(f"{t}-{p}: the stream's checkpoint is at offset {start[t][p]}, past the log's end {end[t][p]} "
                          "(the topic made again, or another data dir?)")
        if losses and self.opts.fail_on_data_loss:
            raise SparkSourceDataLossError(f"{losses[0]}{f' (and {len(losses) - 1} more)' if len(losses) > 1 else ''}"
                                           "; set failOnDataLoss=false to go on without those offsets")
        for loss in losses:
            logger.warning("%s: going on without it (failOnDataLoss=false)", loss)
        start = {t: {p: o for p, o in parts.items() if (t, p) not in gone} for t, parts in start.items()}
        end = {t: {p: o for p, o in parts.items() if (t, p) not in back} for t, parts in end.items()}
        return start, {t: parts for t, parts in end.items() if parts}

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read_pieces(partition, self.projection, self.opts.freeze_worker_heap)

    def commit(self, end: dict) -> None:
        """Nothing to release: the source keeps no state between micro-batches."""
