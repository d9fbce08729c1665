"""``tiered export``: a topic's whole history (both tiers) to Parquet or JSON lines, with Spark.

``tiered export --config F --topic T [--from X] [--to Y] --format parquet|jsonl OUT``. ``--from``/``--to`` take an
offset (an integer, applied to every partition; ``--to`` exclusive) or a timestamp (``@<epoch ms>`` or an ISO 8601
date-time, UTC unless it says otherwise). Parquet output is partitioned by ``partition`` and ``date`` (the UTC date
of each record's timestamp, in directories ``partition=N/date=YYYY-MM-DD``); JSON lines carry every column, binary
ones in base64 (Spark's JSON writer). The job runs on ``local[*]`` unless ``--master`` names a cluster; with a
local master Spark stays on loopback (``SPARK_LOCAL_IP`` and the driver's host and bind address 127.0.0.1).
pyspark is imported only when this command runs (``pip install "tiered[spark]"``).

``--incremental`` exports only what earlier incremental runs did not: a state file beside the output,
``OUT.export-state.json``, holds per partition the offset the last run stopped at, ``{"topic": ..., "format": ...,
"next_offsets": {"t": {"0": 1234}}}``. A run reads each partition from there (a new partition from its log start)
up to the high watermark (last stable offset with ``--isolation-level read_committed``) taken before the job starts,
so segments wholly exported before are not read, and appends to OUT; the state is replaced (atomically) only once
the job succeeded. ``--from``/``--to``/``--overwrite`` do not combine with it. ``tiered import`` is the reverse.

Before Spark starts, the config (file and values), the topic names and that each topic exists are checked. A full
export is written beside OUT and moved into place once whole: a failed export leaves no OUT, and a failed
``--overwrite`` keeps the old one. A failure of the Spark job is one line (the source's or Spark's own message;
``-v`` shows Spark's log and the whole error), see :mod:`tiered.commands._spark`.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import sys
import time
import uuid
from typing import TYPE_CHECKING, Any

from tiered.commands._common import (
    UsageError,
    check_output_place,
    check_topic_name,
    check_typed_data_dirs,
    load_config,
    spark_master,
)

if TYPE_CHECKING:
    from local.config import LogConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", "-t", required=True, help="topic name (or a comma list)")
    parser.add_argument("--from", dest="from_", metavar="OFFSET|TIME",
                        help="first offset, or @epoch-ms / ISO date-time of the first record")
    parser.add_argument("--to", metavar="OFFSET|TIME", help="stop before this offset, or before this time")
    parser.add_argument("--format", choices=["parquet", "jsonl"], default="parquet")
    parser.add_argument("--master", default="local[*]", type=spark_master, help="Spark master (default local[*])")
    parser.add_argument("--isolation-level", choices=["read_uncommitted", "read_committed"], default="read_uncommitted")
    parser.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    parser.add_argument("--incremental", action="store_true",
                        help="export only what earlier --incremental runs did not (state in OUT.export-state.json)")
    parser.add_argument("out", metavar="OUT", help="output directory")


def parse_position(text: str | None, what: str) -> tuple[str, int] | None:
    """("offset", n) or ("timestamp", ms) from a --from/--to value."""
    if text is None:
        return None
    value = text.strip()
    if value.startswith("@"):
        try:
            return "timestamp", int(value[1:])
        except ValueError:
            raise UsageError(f"{what} {text!r}: @ must be followed by epoch milliseconds") from None
    try:
        n = int(value)
    except ValueError:
        pass
    else:
        if n < 0:
            raise UsageError(f"{what} {text!r}: an offset is >= 0")
        return "offset", n
    try:
        when = _dt.datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(f"{what} {text!r}: expected an offset, @epoch-ms or an ISO 8601 date-time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    return "timestamp", int(when.timestamp() * 1000)


def _options(args: argparse.Namespace) -> dict[str, str]:
    opts: dict[str, str] = {"topics": args.topic, "isolationLevel": args.isolation_level}
    config = getattr(args, "config", None)
    if config:
        opts["config"] = os.path.abspath(config)
    if args.log_dirs:
        opts["config.log.dirs"] = ",".join(os.path.abspath(d) for d in args.log_dirs.split(","))
    for item in args.override or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--override expects KEY=VALUE, got {item!r}")
        opts[f"config.{key.strip()}"] = value.strip()
    if not config and not args.log_dirs and not any(k in ("config.log.dirs", "config.log.dir") for k in opts):
        raise UsageError("no data dir: pass --config FILE (with log.dirs) or --log-dirs DIR")
    for name, pos in (("starting", parse_position(args.from_, "--from")), ("ending", parse_position(args.to, "--to"))):
        if pos is not None and pos[0] == "timestamp":
            opts[f"{name}Timestamp"] = str(pos[1])
    return opts


def session(master: str, quiet: bool = False) -> tuple[Any, bool]:
    """The active SparkSession, or a new one for ``master`` (see :func:`tiered.commands._spark.session`)."""
    from tiered.commands._spark import session as spark_session

    return spark_session(master, "tiered-export", quiet)


def check_inputs(args: argparse.Namespace, topics: list[str] | None) -> LogConfig:
    """The broker config (the file read, every value checked) and, for ``topics``, that each has a partition in the
    data dirs: what export and import can check before Spark starts."""
    from local.errors import UnknownTopicOrPartitionError
    from tiered.composition import open_log_manager

    config = load_config(args)
    if topics:  # a read (export); an import makes its data dir, as produce does
        check_typed_data_dirs(args, config)
        dirs = ",".join(str(d) for d in config.log_dirs)
        if not any(os.path.isdir(d) for d in config.log_dirs):
            raise UnknownTopicOrPartitionError(f"no data dir {dirs}: topic {topics[0]} does not exist there")
        with open_log_manager(config, start_scheduler=False, read_only=True) as manager:
            present = {t for t, _p in manager.partitions()}
        missing = [t for t in topics if t not in present]
        if missing:
            raise UnknownTopicOrPartitionError(
                f"topic{'s' if len(missing) > 1 else ''} {', '.join(missing)} not found in {dirs}")
    return config


def topic_names(text: str) -> list[str]:
    """The topics of a ``--topic`` comma list, each a valid name (else a UsageError)."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise UsageError(f"--topic {text!r}: no topic name")
    return [check_topic_name(t) for t in names]


def state_path(out: str) -> str:
    """The incremental state file of an output directory (beside it)."""
    return os.path.abspath(out).rstrip(os.sep) + ".export-state.json"


def _incremental(args: argparse.Namespace, opts: dict[str, str]) -> dict[str, dict[str, int]]:
    """Set the options' offsets from the state file; the next offsets this run exports up to."""
    from tiered.spark.options import parse_options
    from tiered.spark.planning import open_read_only

    if args.from_ is not None or args.to is not None or args.overwrite:
        raise UsageError("--incremental does not combine with --from, --to or --overwrite")
    path = state_path(args.out)
    done: dict[str, dict[str, int]] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
        if state.get("format") != args.format or state.get("topic") != args.topic:
            raise UsageError(f"{path} is the state of an export of {state.get('topic')} as {state.get('format')}, "
                             f"not {args.topic} as {args.format}")
        done = state["next_offsets"]
    elif os.path.exists(args.out):
        raise UsageError(f"{args.out} exists but {path} does not: not an incremental export's output")
    source = parse_options(opts)
    ends: dict[str, dict[str, int]] = {}
    with open_read_only(source.props) as manager:
        for topic, partition in sorted(manager.partitions()):
            log = manager.get_log(topic, partition)
            if log is None or not source.topic_matches(topic):
                continue
            end = log.last_stable_offset if source.read_committed else log.high_watermark
            ends.setdefault(topic, {})[str(partition)] = end
    starts = {t: {p: done.get(t, {}).get(p, -2) for p in parts} for t, parts in ends.items()}
    opts["startingOffsets"] = json.dumps(starts)
    opts["endingOffsets"] = json.dumps(ends)
    return ends


def _write_state(args: argparse.Namespace, ends: dict[str, dict[str, int]]) -> None:
    path = state_path(args.out)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"topic": args.topic, "format": args.format, "next_offsets": ends}, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_output(df: Any, fmt: str, out: str, mode: str) -> None:
    """Write the source's rows as ``tiered export`` does: Parquet partitioned by ``partition`` and ``date``, or JSON
    lines."""
    from pyspark.sql import functions as F

    if fmt == "parquet":
        dated = df.withColumn("date", F.to_date(F.col("timestamp")).cast("string"))
        dated.write.mode(mode).partitionBy("partition", "date").parquet(out)
    else:
        df.write.mode(mode).json(out)


def run(args: argparse.Namespace) -> int:
    opts = _options(args)
    config = check_inputs(args, topic_names(args.topic))
    check_output_place(args.out, config, getattr(args, "config", None), "OUT")
    ends = _incremental(args, opts) if args.incremental else None
    if os.path.exists(args.out) and not args.overwrite and ends is None:
        print(f"tiered export: {args.out} exists (--overwrite replaces it)", file=sys.stderr)
        return 1
    start = parse_position(args.from_, "--from")
    end = parse_position(args.to, "--to")
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print('tiered export: pyspark is not installed (pip install "tiered[spark]")', file=sys.stderr)
        return 1
    from pyspark.sql import functions as F

    from tiered.commands._spark import spark_job_error

    began = time.monotonic()
    # A full export is written beside OUT and moved into place once whole: a failed one leaves nothing, and an
    # --overwrite that fails keeps the old OUT (Spark's own overwrite deletes it first). An incremental export
    # appends to OUT (Spark's commit protocol), and removes OUT again if its first run made it and failed.
    staged = _staging_path(args.out) if ends is None else None
    made_out = not os.path.exists(args.out)
    spark, created = session(args.master, quiet=not args.verbose)
    try:
        df = spark.read.format("tiered").options(**opts).load()
        if start is not None and start[0] == "offset":
            df = df.where(F.col("offset") >= start[1])
        if end is not None and end[0] == "offset":
            df = df.where(F.col("offset") < end[1])
        mode = "append" if ends is not None else "overwrite" if staged is None and args.overwrite else "errorifexists"
        write_output(df, args.format, staged or args.out, mode)
        if staged is not None:
            _replace(staged, args.out)
        if ends is not None:
            _write_state(args, ends)
        written = spark.read.parquet(args.out).count() if args.format == "parquet" else spark.read.json(args.out).count()
        print(f"tiered export: {args.topic} exported to {args.out} ({args.format}, {written} records there) in "
              f"{time.monotonic() - began:.1f} s", file=sys.stderr)
    except Exception as exc:
        if staged is not None:
            shutil.rmtree(staged, ignore_errors=True)
        elif made_out:
            shutil.rmtree(args.out, ignore_errors=True)
        job_error = spark_job_error(exc)
        if job_error is not None:
            raise job_error from exc
        raise
    finally:
        if created:
            spark.stop()
    return 0


def _staging_path(out: str) -> str | None:
    """Where a full export is written before it becomes OUT (beside it: the move is a rename), or None when OUT is
    not a local path (a URL Spark writes to directly)."""
    if "://" in out:
        return None
    target = os.path.abspath(out).rstrip(os.sep)
    return f"{os.path.dirname(target)}{os.sep}.{os.path.basename(target)}.export-{uuid.uuid4().hex[:12]}"


def _replace(staged: str, out: str) -> None:
    """Move a finished export into place, replacing an old OUT (--overwrite) only once the new one is whole."""
    old = None
    if os.path.exists(out):
        old = f"{staged}.old"
        os.rename(out, old)
    os.rename(staged, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
