"""``tiered.spark.read_topic``: one DataFrame of a topic's records, from the columnar copy where it has them.

>>> df = tiered.spark.read_topic(spark, config="broker.properties", topics="events", isolationLevel="read_committed")

The options are the ``tiered`` source's (:mod:`tiered.spark.options`) as keyword arguments, and the DataFrame has
its schema (:data:`tiered.spark.arrow_records.SCHEMA_DDL`). Planned once, on the driver, when it is called:

1. Each partition's offsets ``[start, end)`` are resolved as the source resolves them (log start, high watermark or
   last stable offset, ``startingOffsets``/``endingOffsets``/timestamps: :func:`tiered.spark.planning.offset_range`).
2. The partition's columnar manifest (:mod:`tiered.columnar.manifest`, of the same topic id) gives the offsets its
   files hold, ``[first, next)``. The part of ``[start, end)`` inside it is read by Spark's own Parquet reader from
   the files the manifest names (only those: a file being written or retired is never listed), filtered to
   ``start <= offset < end`` (so nothing below the log start offset is returned) and, under read_committed, to
   rows not ``aborted``.
   With ``columnarCopy=false`` (or ``tiers=local``) there is no Parquet part: the source reads everything from the
   log.
3. The rest (below ``first``, rare, and from ``next`` on, the newest records) is read by the Python source with
   explicit per-partition ``startingOffsets``/``endingOffsets``, so the two sides meet at ``next`` exactly: no
   offset is read twice or skipped, whatever is appended, copied or retained after the call.

The DataFrame is a snapshot of the offsets at the call: call again to read what came since. A file it names may be
retired after the call (retention, or a larger file taking its rows: :mod:`tiered.columnar.keeper`) and is deleted
``remote.log.columnar.file.delete.delay.ms`` later (an hour by default): an action run later than that on an old DataFrame fails with
Spark's missing-file error, whatever ``failOnDataLoss`` says (Spark's ``ignoreMissingFiles`` would skip rows that
another file still holds): call ``read_topic`` again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from tiered.spark.options import LATEST, SparkSourceOptionError, parse_options

_RANGE_OPTIONS = ("topics", "subscribe", "topicpattern", "subscribepattern", "startingoffsets", "endingoffsets",
                  "startingtimestamp", "endingtimestamp")
_STREAM_ONLY = ("maxoffsetspertrigger",)


@dataclass
class TopicPlan:
    """What one ``read_topic`` reads: Parquet files with their offset ranges, and the ranges left to the source."""

    files: list[str] = field(default_factory=list)
    parquet_ranges: list[tuple[str, int, int, int]] = field(default_factory=list)  # topic, partition, [lo, hi)
    whole_files: bool = True  # every listed file is read whole (no offset filter needed on the Parquet side)
    source_ranges: list[tuple[str, int, int, int]] = field(default_factory=list)
    partitions: list[tuple[str, int]] = field(default_factory=list)


def plan_topic(options: dict[str, str]) -> TopicPlan:
    """The split of a read between the columnar copy and the source (module docstring), without Spark."""
    from local import LogConfig
    from tiered.columnar.location import columnar_root
    from tiered.spark.planning import Bounds, check_subscription, columnar_files, offset_range, open_read_only

    opts = parse_options(options)
    config = LogConfig.from_properties(opts.props)
    root = columnar_root(config) if opts.tiers != "local" and opts.columnar_copy else None
    out = TopicPlan()
    props = opts.props
    if opts.starting_timestamp is None and opts.ending_timestamp is None:
        # Offsets only (log start, high watermark, last stable offset: the data dir's own files): the remote tier
        # (its caches, its metadata) is not built, which is most of a plan's time; a timestamp needs its index.
        props = {**props, "remote.log.storage.system.enable": "false"}
    with open_read_only(props) as manager:
        wanted = sorted(tp for tp in manager.partitions() if opts.topic_matches(tp[0]))
        check_subscription(opts, wanted)
        for topic, partition in wanted:
            log = manager.get_log(topic, partition)
            if log is None:
                continue
            out.partitions.append((topic, partition))
            start, end = offset_range(log, topic, partition, opts, Bounds())
            if start >= end:
                continue
            used = columnar_files(log, start, end, root) if root is not None else []
            if not used:
                out.source_ranges.append((topic, partition, start, end))
                continue
            lo, hi = max(start, used[0][1]), min(end, used[-1][2] + 1)
            out.parquet_ranges.append((topic, partition, lo, hi))
            out.files.extend(path for path, _first, _last, _file_last in used)
            # whole only if the range covers the files' own offsets: columnar_files cuts the last one to end (and to
            # a deposed data dir's local log start), and Spark's reader would otherwise return the rest of it
            out.whole_files &= lo == used[0][1] and hi == used[-1][3] + 1
            if start < lo:
                out.source_ranges.append((topic, partition, start, lo))
            if hi < end:
                out.source_ranges.append((topic, partition, hi, end))
    return out


def read_topic(spark: Any, *, config: str | None = None, topics: str | list[str] | None = None,
               **options: Any) -> Any:
    """One DataFrame of the topics' records (module docstring); ``options``: the source's, by name. The source
    must be registered (:func:`tiered.spark.read_topic` does it)."""
    from pyspark.sql import functions as F

    from tiered.columnar.keeper import ABORTED
    from tiered.spark.source import SOURCE_SCHEMA

    given: dict[str, str] = {}
    if config is not None:
        given["config"] = str(config)
    if topics is not None:
        given["topics"] = topics if isinstance(topics, str) else ",".join(topics)
    for key, value in options.items():
        if str(key).lower() in _STREAM_ONLY:
            raise SparkSourceOptionError(f"{key} is an option of streaming reads; read_topic is a batch read")
        given[key] = str(value).lower() if isinstance(value, bool) else str(value)
    opts = parse_options(given)
    plan, df = _plan_and_list(spark, given)
    frames = []
    if df is not None:
        if not plan.whole_files:
            cond = None
            for topic, partition, lo, hi in plan.parquet_ranges:
                c = (F.col("topic") == topic) & (F.col("partition") == partition) & (F.col("offset") >= lo) & (
                    F.col("offset") < hi)
                cond = c if cond is None else cond | c
            df = df.where(cond)
        if opts.read_committed:
            df = df.where(~F.col(ABORTED))
        frames.append(df.drop(ABORTED))  # the source's columns, in its order (aborted is the files' last)
    for round_ in _rounds(plan.source_ranges):
        base = {k: v for k, v in given.items() if k.lower() not in _RANGE_OPTIONS}
        topics_in = sorted({t for t, _p in plan.partitions if t in {r[0] for r in round_}})
        starting: dict[str, dict[str, int]] = {t: {} for t in topics_in}
        ending: dict[str, dict[str, int]] = {t: {} for t in topics_in}
        for t, p in plan.partitions:  # every partition of these topics named: the others read nothing
            if t in starting:
                starting[t][str(p)], ending[t][str(p)] = LATEST, LATEST
        for t, p, lo, hi in round_:
            starting[t][str(p)], ending[t][str(p)] = lo, hi
        frames.append(spark.read.format("tiered").options(
            **base, topics=",".join(topics_in), startingOffsets=json.dumps(starting), endingOffsets=json.dumps(ending),
        ).load())
    if not frames:
        return spark.createDataFrame([], SOURCE_SCHEMA)
    out = frames[0]
    for more in frames[1:]:
        out = out.unionByName(more)
    return out


_PLANS = 3  # read_topic plans again when a planned file was deleted before Spark listed it, twice at most


def _plan_and_list(spark: Any, given: dict[str, str]) -> tuple[TopicPlan, Any]:
    """The read's plan, and Spark's Parquet reader over the copy's files it names (in the copy's schema; None
    without files). A planned file deleted before Spark listed it (retired by a pass of the keeper since the plan,
    with a ``remote.log.columnar.file.delete.delay.ms`` shorter than that) makes it plan again: the manifest then
    lists where the file's rows went. Any other error, or one with every planned file still there, is raised."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from tiered.columnar.keeper import columnar_schema

    schema = from_arrow_schema(columnar_schema())
    for attempt in range(_PLANS):
        plan = plan_topic(given)
        if not plan.files:
            return plan, None
        try:
            # The keeper writes a CRC in every page header; parquet-mr checks them only when asked (a file source's
            # options reach its Hadoop configuration).
            return plan, spark.read.schema(schema).option("parquet.page.verify-checksum.enabled", "true").parquet(
                *plan.files)
        except Exception:
            if attempt == _PLANS - 1 or all(_exists(f) for f in plan.files):
                raise
    raise AssertionError("unreachable")


def _exists(file: str) -> bool:
    """Whether a planned file (a path, or a ``file:`` URI) is still there."""
    from urllib.parse import unquote, urlparse

    parsed = urlparse(file)
    return os.path.exists(unquote(parsed.path) if parsed.scheme == "file" else file)


def _rounds(ranges: list[tuple[str, int, int, int]]) -> list[list[tuple[str, int, int, int]]]:
    """The source's ranges in rounds of at most one range per partition (one source read per round)."""
    rounds: list[list[tuple[str, int, int, int]]] = []
    for r in ranges:
        for round_ in rounds:
            if all((t, p) != (r[0], r[1]) for t, p, _lo, _hi in round_):
                round_.append(r)
                break
        else:
            rounds.append([r])
    return rounds

