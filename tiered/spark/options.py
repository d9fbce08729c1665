"""The Spark source's options, parsed and checked once (on the driver), without importing pyspark.

Options (case-insensitive, as Spark passes them): ``config`` (a broker properties file) and ``config.<key>``
(broker keys, overriding the file's), ``topics`` (comma list) or ``topicPattern`` (a regex matched against the
whole topic name), ``startingOffsets``/``endingOffsets`` (``earliest``/``latest`` or JSON per partition,
``{"t":{"0":23,"1":-2}}``, -2 earliest, -1 latest), ``startingTimestamp``/``endingTimestamp`` (ms; the first offset
whose timestamp is at or after it), ``isolationLevel`` (``read_uncommitted``/``read_committed``), ``tiers``
(``both``/``remote``/``local``), ``failOnDataLoss`` (``true``), ``minPartitions`` (the least number of input
partitions wanted, as Spark's Kafka source takes it; none by default), and two of our own: ``maxBytesPerPartition``
(the most bytes one input partition reads, 64 MiB: a larger segment is split at batch boundaries, consecutive
smaller ones of a topic partition are read in one task, as Spark's file sources pack small files:
:func:`tiered.spark.planning.input_partitions`) and ``cacheDir``
(where executors keep the remote tier's caches; one per machine, shared by its executors; the planner keeps
the remote indexes of its plans there too: :func:`tiered.spark.planning.planning_tier`). ``filterPushdown``
(``true``) and ``maxOffsetsPerTrigger`` (streaming) are read by :mod:`tiered.spark.source`. ``columnarCopy``
(``true``): offsets held by the topic's columnar copy (``remote.log.columnar.enable``, :mod:`tiered.columnar`) are
read from its Parquet files, the rest from the log; ``false`` reads the log only. ``freezeWorkerHeap`` (``true``):
a reused Spark worker freezes its heap after its first read, plan or making of the data source
(:mod:`tiered.spark.worker_heap`); ``false`` leaves the
garbage collector alone. Any other option is refused, naming the known ones (a typo such as ``startingOffset``
would otherwise read everything).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tiered.errors import TieredStorageError

EARLIEST = -2
LATEST = -1
TIERS = ("both", "remote", "local")
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


READ_OPTIONS = (
    "config", "topics", "subscribe", "topicPattern", "subscribePattern", "startingOffsets", "endingOffsets",
    "startingTimestamp", "endingTimestamp", "isolationLevel", "tiers", "failOnDataLoss", "maxBytesPerPartition",
    "minPartitions", "cacheDir", "filterPushdown", "maxOffsetsPerTrigger", "columnarCopy", "freezeWorkerHeap",
)


class SparkSourceOptionError(TieredStorageError, ValueError):
    """An option of the Spark source that cannot work, named with its value."""


def check_known(options: Iterable[Any], known: Iterable[str], what: str) -> None:
    """Refuse an option not in ``known`` (nor ``config.<key>``), naming the known ones; Spark passes keys in lower
    case, so case is ignored."""
    names = {k.lower(): k for k in known}
    for key in options:
        lower = str(key).lower()
        if lower in names or lower.startswith("config."):
            continue
        close = difflib.get_close_matches(lower, list(names), n=1, cutoff=0.75)
        hint = f" (did you mean {names[close[0]]}?)" if close else ""
        raise SparkSourceOptionError(
            f"unknown option {key}{hint}; {what} takes {', '.join(names.values())} and config.<broker key>")


@dataclass
class SourceOptions:
    props: dict[str, str]
    topics: list[str] | None = None
    topic_pattern: str | None = None
    starting: int | dict[str, dict[int, int]] = EARLIEST
    ending: int | dict[str, dict[int, int]] = LATEST
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    read_committed: bool = False
    tiers: str = "both"
    fail_on_data_loss: bool = True
    max_bytes_per_partition: int = 64 * 1024 * 1024
    min_partitions: int | None = None  # tiered.spark.planning.input_partitions
    columnar_copy: bool = True  # read the offsets the columnar copy holds from its Parquet files
    freeze_worker_heap: bool = True  # tiered.spark.worker_heap
    cache_dir: str = field(default_factory=lambda: os.path.join(tempfile.gettempdir(), f"tiered-spark-cache-{os.getuid()}"))

    def topic_matches(self, topic: str) -> bool:
        if self.topics is not None:
            return topic in self.topics
        assert self.topic_pattern is not None
        return re.fullmatch(self.topic_pattern, topic) is not None


def _offsets(name: str, value: str | None, default: int) -> int | dict[str, dict[int, int]]:
    if value is None:
        return default
    text = value.strip()
    if text.lower() == "earliest":
        return EARLIEST
    if text.lower() == "latest":
        return LATEST
    try:
        parsed = json.loads(text)
        out = {str(t): {int(p): _whole(o) for p, o in parts.items()} for t, parts in parsed.items()}
    except (ValueError, AttributeError, TypeError) as exc:
        raise SparkSourceOptionError(
            f"{name}={value!r}: expected earliest, latest or JSON like {{\"topic\":{{\"0\":23}}}} ({exc})") from None
    for t, parts in out.items():
        for p, o in parts.items():
            if o < EARLIEST:
                raise SparkSourceOptionError(f"{name}: offset {o} of {t}-{p} is below -2 (earliest)")
            if o == EARLIEST and default == LATEST:  # (as endingOffsets=earliest: Spark's Kafka source refuses both)
                raise SparkSourceOptionError(f"{name}: -2 (earliest) for {t}-{p} is not allowed as an ending offset")
    return out


def _whole(value: object) -> int:
    """An offset of a JSON offsets option: a JSON integer (5998.7 read from 5998, true from 1, "5998" as 5998)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"offset {value!r} is not a whole number")
    return value


def _bool(name: str, value: str | None, default: bool) -> bool:
    if value is None:
        return default
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise SparkSourceOptionError(f"{name}={value!r}: expected true or false")


def freeze_worker_heap(options: Mapping[str, str]) -> bool:
    """The option ``freezeWorkerHeap`` of ``options`` (any case), alone: what the data source itself needs of them
    where it is made (:func:`tiered.spark.worker_heap.settle`), before any reader parses the rest."""
    value = next((v for k, v in options.items() if k.lower() == "freezeworkerheap"), None)
    return _bool("freezeWorkerHeap", value, True)


def _int(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        raise SparkSourceOptionError(f"{name}={value!r}: expected an integer") from None


def _timestamp(name: str, value: str | None) -> int | None:
    """A timestamp option: ms since the epoch, >= 0 (a negative one was taken for Kafka's special lookups, -1 latest,
    -2 earliest, -3 the largest timestamp..., and -6 failed with a traceback)."""
    ms = _int(name, value)
    if ms is not None and ms < 0:
        raise SparkSourceOptionError(f"{name}={value!r}: expected milliseconds since the epoch, >= 0")
    return ms


def broker_props(options: Mapping[str, Any]) -> dict[str, str]:
    """The broker properties named by the options ``config`` (a file) and ``config.<key>`` (overriding the file's)."""
    props: dict[str, str] = {}
    path = next((str(v) for k, v in options.items() if str(k).lower() == "config"), None)
    if path:
        from local.config import read_properties

        try:
            props.update(read_properties(path))
        except OSError as exc:
            raise SparkSourceOptionError(f"config={path!r}: cannot read the properties file ({exc})") from exc
    # config.<key>: Spark lower-cases option keys, and broker keys are lower case (rsm.config.* values keep case).
    for key, value in options.items():
        if str(key).lower().startswith("config."):
            props[str(key)[len("config."):]] = str(value)
    if "log.dirs" not in props and "log.dir" not in props:
        raise SparkSourceOptionError("no broker config: set option config=<properties file> or config.log.dirs=<dirs>")
    return props


def parse_options(options: Mapping[str, Any]) -> SourceOptions:
    """Check and convert the options Spark passed (keys in any case)."""
    check_known(options, READ_OPTIONS, "a read")
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    props = broker_props(options)
    topics = opts.get("topics") or opts.get("subscribe")
    pattern = opts.get("topicpattern") or opts.get("subscribepattern")
    if (topics is None) == (pattern is None):
        raise SparkSourceOptionError("set exactly one of the options topics (a comma list) and topicPattern")
    if topics is not None and not any(t.strip() for t in topics.split(",")):  # (" , " read nothing, silently)
        raise SparkSourceOptionError(f"topics={topics!r}: no topic name")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SparkSourceOptionError(f"topicPattern={pattern!r} is not a valid regular expression: {exc}") from None
    tiers = opts.get("tiers", "both").lower()
    if tiers not in TIERS:
        raise SparkSourceOptionError(f"tiers={tiers!r}: expected one of {', '.join(TIERS)}")
    isolation = opts.get("isolationlevel", "read_uncommitted").lower()
    if isolation not in ISOLATION_LEVELS:
        raise SparkSourceOptionError(f"isolationLevel={isolation!r}: expected read_uncommitted or read_committed")
    out = SourceOptions(
        props=props,
        topics=[t.strip() for t in topics.split(",") if t.strip()] if topics is not None else None,
        topic_pattern=pattern,
        starting=_offsets("startingOffsets", opts.get("startingoffsets"), EARLIEST),
        ending=_offsets("endingOffsets", opts.get("endingoffsets"), LATEST),
        starting_timestamp=_timestamp("startingTimestamp", opts.get("startingtimestamp")),
        ending_timestamp=_timestamp("endingTimestamp", opts.get("endingtimestamp")),
        read_committed=isolation == "read_committed",
        tiers=tiers,
        fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss"), True),
        columnar_copy=_bool("columnarCopy", opts.get("columnarcopy"), True),
        freeze_worker_heap=_bool("freezeWorkerHeap", opts.get("freezeworkerheap"), True),
    )
    if out.ending == EARLIEST:
        raise SparkSourceOptionError("endingOffsets=earliest is not allowed (Spark's Kafka source refuses it too)")
    max_bytes = _int("maxBytesPerPartition", opts.get("maxbytesperpartition"))
    if max_bytes is not None:
        if max_bytes < 1024:
            raise SparkSourceOptionError(f"maxBytesPerPartition={max_bytes}: at least 1024")
        out.max_bytes_per_partition = max_bytes
    min_partitions = _int("minPartitions", opts.get("minpartitions"))
    if min_partitions is not None:
        if min_partitions < 1:
            raise SparkSourceOptionError(f"minPartitions={min_partitions}: at least 1")
        out.min_partitions = min_partitions
    if opts.get("cachedir"):
        out.cache_dir = opts["cachedir"]
    return out
