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
so segments wholly exported before are not read. Each offset lands in OUT once, whatever kills a run: the job writes
a staging directory beside OUT; the state then records the run as pending (its directory and next offsets), its
files are renamed into OUT, and the state is replaced without it. A run that finds a pending one finishes it first
(the renames left, then the state); a staging directory no state names is a killed run's and is removed. Runs of one
OUT take turns (a lock file, ``OUT.export-state.json.lock``). Retention that removed offsets since the last run is
an error naming them before Spark starts, unless ``--no-fail-on-data-loss`` (the run then starts at the log start).
``--from``/``--to``/``--overwrite`` do not combine with it. ``tiered import`` is the reverse.

Before Spark starts, the config (file and values), the topic names and that each topic exists are checked. A full
export is written beside OUT and moved into place once whole: a failed export leaves no OUT, and a failed
``--overwrite`` keeps the old one. A failure of the Spark job is one line (the source's or Spark's own message;
``-v`` shows Spark's log and the whole error), see :mod:`tiered.commands._spark`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from local.checkpoint import fsync_dir
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
    parser.add_argument("--fail-on-data-loss", action=argparse.BooleanOptionalAction, default=True,
                        help="fail when offsets the export would read were deleted (retention, a damaged segment); "
                             "--no-fail-on-data-loss exports what is there (the source's failOnDataLoss=false)")
    parser.add_argument("out", metavar="OUT", help="output directory")


def parse_position(text: str | None, what: str) -> tuple[str, int] | None:
    """("offset", n) or ("timestamp", ms) from a --from/--to value."""
    if text is None:
        return None
    value = text.strip()
    if value.startswith("@"):
        try:
            ms = int(value[1:])
        except ValueError:
            raise UsageError(f"{what} {text!r}: @ must be followed by epoch milliseconds") from None
        if ms < 0:
            raise UsageError(f"{what} {text!r}: epoch milliseconds are >= 0")
        return "timestamp", ms
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
    ms = int(when.timestamp() * 1000)
    if ms < 0:
        raise UsageError(f"{what} {text!r}: before 1970-01-01T00:00Z (a record's timestamp is >= 0)")
    return "timestamp", ms


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
    start, end = parse_position(args.from_, "--from"), parse_position(args.to, "--to")
    if start is not None and end is not None and start[0] == end[0] and start[1] >= end[1]:
        raise UsageError(f"--from {args.from_} is not before --to {args.to}: nothing to export")
    for name, pos in (("starting", start), ("ending", end)):
        if pos is not None and pos[0] == "timestamp":
            opts[f"{name}Timestamp"] = str(pos[1])
    if not getattr(args, "fail_on_data_loss", True):  # (import reads its options here too, without the flag)
        opts["failOnDataLoss"] = "false"
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
    """Set the options' offsets from the state file (a pending run finished first, see the module docstring); the
    next offsets this run exports up to."""
    from local.errors import OffsetOutOfRangeError
    from tiered.spark.options import parse_options
    from tiered.spark.planning import open_read_only

    if args.from_ is not None or args.to is not None or args.overwrite:
        raise UsageError("--incremental does not combine with --from, --to or --overwrite")
    path = state_path(args.out)
    state = _settled_state(args)
    if state is None and os.path.exists(args.out):
        empty = os.path.isdir(args.out) and not _data_files(args.out)
        raise UsageError(f"{args.out} exists but {path} does not: not an incremental export's output (its OUT appears "
                         "only with its first run's files, and its state with it)"
                         + ("; it holds no exported file (a first run of an older version, stopped before its job "
                            "committed?): remove it and run again" if empty else ""))
    done: dict[str, dict[str, int]] = state["next_offsets"] if state is not None else {}
    source = parse_options(opts)
    ends: dict[str, dict[str, int]] = {}
    lost: list[tuple[str, int, int]] = []
    with open_read_only(source.props) as manager:
        for topic, partition in sorted(manager.partitions()):
            log = manager.get_log(topic, partition)
            if log is None or not source.topic_matches(topic):
                continue
            ends.setdefault(topic, {})[str(partition)] = (log.last_stable_offset if source.read_committed
                                                          else log.high_watermark)
            last = done.get(topic, {}).get(str(partition))
            if last is not None and last < log.log_start_offset:
                lost.append((f"{topic}-{partition}", last, log.log_start_offset))
    if lost and args.fail_on_data_loss:
        name, last, log_start = lost[0]
        more = f" (and {len(lost) - 1} more partition(s))" if len(lost) > 1 else ""
        raise OffsetOutOfRangeError(
            f"{name}: the last incremental export stopped at offset {last}, but the log now starts at {log_start} "
            f"(offsets {last}..{log_start - 1} were deleted by retention){more}: pass --no-fail-on-data-loss to "
            f"export from {log_start} on")
    starts = {t: {p: done.get(t, {}).get(p, -2) for p in parts} for t, parts in ends.items()}
    opts["startingOffsets"] = json.dumps(starts)
    opts["endingOffsets"] = json.dumps(ends)
    return ends


def _read_state(args: argparse.Namespace) -> dict[str, Any] | None:
    path = state_path(args.out)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        try:
            state = json.load(f)
        except ValueError as exc:
            raise UsageError(f"{path} is not an export state file: {exc}") from None
    if not isinstance(state, dict) or not isinstance(state.get("next_offsets"), dict):
        raise UsageError(f"{path} is not an export state file (no next_offsets)")
    if state.get("format") != args.format or state.get("topic") != args.topic:
        raise UsageError(f"{path} is the state of an export of {state.get('topic')} as {state.get('format')}, "
                         f"not {args.topic} as {args.format}")
    return state


def _settled_state(args: argparse.Namespace) -> dict[str, Any] | None:
    """The state, once a pending run it records is finished (its files renamed into OUT, the state replaced), and
    the staging directories of runs killed before they were pending removed."""
    state = _read_state(args)
    pending = state.get("pending") if state is not None else None
    if pending is not None:
        staged = os.path.join(_staging_parent(args.out), pending["staged"])
        if not os.path.isdir(staged):  # (removed by hand: whether its rows reached OUT cannot be told)
            raise UsageError(f"{state_path(args.out)} records a run whose files were being moved into {args.out} from "
                             f"{staged}, which is gone: restore it, or remove the \"pending\" entry from the state "
                             "to export that run's offsets again (any of its rows already in OUT would then be "
                             "there twice)")
        _move_into(staged, args.out)
        _write_state(args, pending["next_offsets"])
        shutil.rmtree(staged, ignore_errors=True)
        print(f"tiered export: finished the run of {args.out} that was stopped after its job (its files are in "
              "place now)", file=sys.stderr)
        state = _read_state(args)
    if "://" in args.out:
        return state
    parent, ours = _staging_parent(args.out), _staging_name(args.out)
    for name in os.listdir(parent) if os.path.isdir(parent) else ():
        if ours.fullmatch(name):  # a run stopped before it was pending: none of its files reached OUT
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
    return state


def _write_state(args: argparse.Namespace, ends: dict[str, dict[str, int]],
                 pending: dict[str, Any] | None = None) -> None:
    """Replace the state (atomically and durably): ``ends`` as the next offsets, and ``pending`` (a run whose files
    are being renamed into OUT: its staging directory and next offsets) when given."""
    path = state_path(args.out)
    tmp = path + ".tmp"
    state: dict[str, Any] = {"topic": args.topic, "format": args.format, "next_offsets": ends}
    if pending is not None:
        state["pending"] = pending
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(Path(path).parent)


def _data_files(root: str) -> list[str]:
    """The files of a Spark output directory that hold rows (Spark's ``_SUCCESS`` and ``.crc`` files aside), as
    paths relative to it."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        for name in files:
            if not name.startswith(("_", ".")):
                out.append(os.path.relpath(os.path.join(folder, name), root))
    return sorted(out)


def _move_into(staged: str, out: str) -> None:
    """Rename the data files of ``staged`` into ``out`` (the same relative paths; Spark's file names are unique to
    their job, so a file already moved is simply no longer in ``staged``)."""
    folders: set[str] = set()
    root = os.path.abspath(out)
    for rel in _data_files(staged):
        target = os.path.join(root, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.move(os.path.join(staged, rel), target)  # a rename, but across file systems (a mount inside OUT)
        folder = os.path.dirname(target)
        while folder not in folders and folder != os.path.dirname(root):  # (and the new ones' parents)
            folders.add(folder)
            folder = os.path.dirname(folder)
    for folder in sorted(folders, key=len, reverse=True):
        fsync_dir(Path(folder))
    fsync_dir(Path(root).parent)


def _count_rows(root: str, fmt: str) -> int:
    """The rows of an export directory, from the Parquet footers (or the JSON lines), without a Spark job."""
    count = 0
    for rel in _data_files(root):
        if not rel.endswith(".parquet" if fmt == "parquet" else ".json"):
            continue  # (another file put there: not the export's)
        path = os.path.join(root, rel)
        if fmt == "parquet":
            import pyarrow.parquet as pq

            count += pq.ParquetFile(path).metadata.num_rows
        else:
            with open(path, "rb") as f:
                count += sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    return count


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
    if args.incremental:
        with _exclusive(args.out):
            return _export(args, opts, _incremental(args, opts))
    if os.path.exists(args.out) and not args.overwrite:
        print(f"tiered export: {args.out} exists (--overwrite replaces it)", file=sys.stderr)
        return 1
    return _export(args, opts, None)


def _export(args: argparse.Namespace, opts: dict[str, str], ends: dict[str, dict[str, int]] | None) -> int:
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
    # The job writes beside OUT and its files are moved into place once whole: a failed export leaves nothing, an
    # --overwrite that fails keeps the old OUT (Spark's own overwrite deletes it first), and an incremental run
    # commits through its state (module docstring). OUT a URL: Spark writes there directly.
    staged = _staging_path(args.out)
    committing = False
    spark, created = session(args.master, quiet=not args.verbose)
    try:
        df = spark.read.format("tiered").options(**opts).load()
        if start is not None and start[0] == "offset":
            df = df.where(F.col("offset") >= start[1])
        if end is not None and end[0] == "offset":
            df = df.where(F.col("offset") < end[1])
        mode = "append" if ends is not None else "overwrite" if args.overwrite else "errorifexists"
        write_output(df, args.format, staged or args.out, mode if staged is None else "errorifexists")
        if staged is None:
            written = None
            if ends is not None:
                _write_state(args, ends)  # (a URL's appends are not made exactly-once across a kill)
        else:
            written = _count_rows(staged, args.format)
            if ends is not None:
                committing = True  # from here the state may name the staging directory: it is the next run's
                _commit_run(args, staged, ends)
            elif not written:
                shutil.rmtree(staged, ignore_errors=True)
                print(f"tiered export: no record of {args.topic} in the range asked: nothing written", file=sys.stderr)
                return 1
            else:
                _replace(staged, os.path.realpath(args.out))  # (a symlinked OUT's target, beside which it was staged)
    except Exception as exc:
        if staged is not None and not committing:
            shutil.rmtree(staged, ignore_errors=True)
        job_error = spark_job_error(exc)
        if job_error is not None:
            raise _in_export_terms(job_error) from exc
        raise
    finally:
        if created:
            spark.stop()
    there = _count_rows(args.out, args.format) if ends is not None and staged is not None and os.path.isdir(args.out) \
        else None
    what = ", ".join(f"{n} records {label}" for n, label in ((written, "written"), (there, "there")) if n is not None)
    print(f"tiered export: {args.topic} exported to {args.out} ({args.format}{', ' + what if what else ''}) in "
          f"{time.monotonic() - began:.1f} s", file=sys.stderr)
    return 0


def _commit_run(args: argparse.Namespace, staged: str, ends: dict[str, dict[str, int]]) -> None:
    """An incremental run's files into OUT, exactly once: the run recorded as pending, its files renamed, the state
    replaced without it (a run that finds it pending finishes it: :func:`_settled_state`)."""
    state = _read_state(args)
    done = state["next_offsets"] if state is not None else {}
    _write_state(args, done, pending={"staged": os.path.basename(staged), "next_offsets": ends})
    _move_into(staged, args.out)
    _write_state(args, ends)
    shutil.rmtree(staged, ignore_errors=True)


def _in_export_terms(error: Exception) -> Exception:
    """The source's advice in the export's own option (it says failOnDataLoss, which export takes as a flag)."""
    from tiered.commands._spark import SparkJobError

    text = str(error)
    if not isinstance(error, SparkJobError) or "set failOnDataLoss=false" not in text:
        return error
    return SparkJobError(text.replace("set failOnDataLoss=false", "pass --no-fail-on-data-loss"))


@contextlib.contextmanager
def _exclusive(out: str) -> Iterator[None]:
    """Runs of one incremental export take turns: an exclusive lock on ``OUT.export-state.json.lock``."""
    import fcntl

    path = state_path(out) + ".lock"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"another incremental export of {out} is running (it holds {path})") from None
        yield
    finally:
        os.close(fd)


def _staging_name(out: str) -> re.Pattern[str]:
    """The names of ``out``'s staging directories (beside it), exactly: not an old OUT an --overwrite moved aside
    (``<staging>.old``), nor another output's."""
    return re.compile(re.escape(f".{os.path.basename(os.path.abspath(out).rstrip(os.sep))}.export-") + "[0-9a-f]{12}")


def _staging_parent(out: str) -> str:
    """The directory the staging directories of ``out`` go in: beside OUT where it really is (a symlink's target: on
    its file system, so the moves into OUT are renames)."""
    return os.path.dirname(os.path.realpath(out))


def _staging_path(out: str) -> str | None:
    """Where an export is written before its files reach OUT (beside it: the moves are renames), or None when OUT is
    not a local path (a URL Spark writes to directly)."""
    if "://" in out:
        return None
    name = os.path.basename(os.path.abspath(out).rstrip(os.sep))
    return os.path.join(_staging_parent(out), f".{name}.export-{uuid.uuid4().hex[:12]}")


def _replace(staged: str, out: str) -> None:
    """Move a finished export into place, replacing an old OUT (--overwrite) only once the new one is whole."""
    old = None
    if os.path.exists(out):
        old = f"{staged}.old"
        os.rename(out, old)
    os.rename(staged, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
