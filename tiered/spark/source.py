"""The ``tiered`` PySpark data source (``pyspark.sql.datasource``): batch reads of a topic's whole history.

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
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from tiered.spark.arrow_records import SCHEMA_DDL
from tiered.spark.options import parse_options
from tiered.spark.planning import Bounds, Piece, plan
from tiered.spark.reader import read_piece, timestamp_micros

_OPS: dict[type, str] = {
    EqualTo: "=", GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<=", In: "in",
}
_PUSHABLE = ("partition", "offset", "timestamp")
_INT_LIMIT = 2**63


class TieredInputPartition(InputPartition):
    """One planned piece (a byte range of one segment), pickled to the executor."""

    def __init__(self, piece: Piece) -> None:
        super().__init__(piece)
        self.piece = piece


class TieredDataSource(DataSource):
    """``format("tiered")``."""

    @classmethod
    def name(cls) -> str:
        return "tiered"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        options = dict(self.options)
        if str(options.get("filterPushdown", options.get("filterpushdown", "true"))).lower() == "false":
            return TieredReader(options)
        return TieredFilteringReader(options)


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

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.opts = parse_options(options)
        self.bounds = Bounds()

    def partitions(self) -> Sequence[InputPartition]:
        pieces = plan(self.opts, self.bounds)
        if not pieces:
            return [TieredInputPartition(_EMPTY)]
        return [TieredInputPartition(p) for p in pieces]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        piece = partition.piece  # type: ignore[attr-defined]
        if piece.topic == "":
            return iter(())
        return read_piece(piece)


class TieredFilteringReader(TieredReader):
    """The default reader: accepts filters on partition, offset and timestamp (module docstring)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for f in filters:
            op = _OPS.get(type(f))
            attribute: tuple[str, ...] = getattr(f, "attribute", ())
            column = attribute[0] if len(attribute) == 1 else None
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


_EMPTY = Piece(topic="", partition=-1, from_offset=0, until_offset=0, start_position=0, end_position=0)


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
