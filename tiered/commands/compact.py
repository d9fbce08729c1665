"""``tiered compact``: one pass of Kafka's log cleaner over the compacted topics (``cleanup.policy`` holding
``compact``), what ``tiered run``'s cleaner threads do every ``log.cleaner.backoff.ms``.

Each compacted partition that is due (its dirty ratio above ``min.cleanable.dirty.ratio``, or a dirty segment older
than ``max.compaction.lag.ms``) is cleaned once, dirtiest first: the latest record of each key kept (a tombstone,
null value, for ``delete.retention.ms`` after its first cleaning), aborted transactions and spent markers removed,
segments regrouped by ``segment.bytes``; then compacted topics' retention runs (``compact,delete``). One line per
compacted partition says what was done or why not (``--json``: one JSON document). The data dirs are locked for the
pass (a running ``tiered run`` holds them: it cleans on its own). Exit 1 when a partition's cleaning failed.

To clean what the ratio would leave (a first run, a test): ``-o log.cleaner.min.cleanable.ratio=0`` lowers the
broker default (a topic's own ``min.cleanable.dirty.ratio`` still wins).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tiered.commands._common import UsageError, check_topic_name, load_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", "-t", help="only this topic's partitions")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of lines")


def run(args: argparse.Namespace) -> int:
    from tiered.composition import open_log_manager

    if args.topic is not None:
        check_topic_name(args.topic)
    config = load_config(args)
    if not config.log_cleaner_enable:
        raise UsageError("log.cleaner.enable=false: the log cleaner is disabled (remove it, or -o log.cleaner.enable=true)")
    missing = [str(d) for d in config.log_dirs if not Path(d).is_dir()]
    if missing:  # a typo would otherwise make an empty data dir and clean nothing, exit 0
        raise UsageError(f"no such data dir: {', '.join(missing)} (compact never creates one)")
    with open_log_manager(config, start_scheduler=False) as manager:
        cleaner = manager.cleaner
        assert cleaner is not None
        if args.topic is not None and not any(t == args.topic for t, _ in manager.partitions()):
            offline = [o for (t, _), o in sorted(manager.offline_partitions.items()) if t == args.topic]
            if offline:  # the topic exists: "no topic" would send the operator looking for a typo
                print(f"tiered compact: {offline[0].error()}", file=sys.stderr)
            else:
                print(f"tiered compact: no topic {args.topic} in {', '.join(str(d) for d in config.log_dirs)}",
                      file=sys.stderr)
            return 1
        reports = cleaner.clean_pass(None if args.topic is None else lambda tp: tp[0] == args.topic)
    if args.json:
        print(json.dumps({"partitions": [r.to_json() for r in reports]}, indent=2))
    else:
        if not reports:
            print("no compacted partition (cleanup.policy with compact)" +
                  (f" in topic {args.topic}" if args.topic else ""))
        for r in reports:
            name = f"{r.topic}-{r.partition}"
            if r.error:
                print(f"{name}: cleaning FAILED: {r.error}")
            elif r.cleaned:
                print(f"{name}: cleaned offsets {r.first_dirty_offset}..{r.end_offset - 1}: {r.records_read:,} records "
                      f"({r.bytes_read:,} bytes) read, {r.records_written:,} ({r.bytes_written:,} bytes) kept; "
                      f"{r.segments_before} -> {r.segments_after} segment(s); dirty ratio was {r.dirty_ratio:.3f}; "
                      f"next cleaning starts at offset {r.end_offset}" + _retention(r.segments_deleted_by_retention))
            else:
                print(f"{name}: not cleaned: {r.why_not}; first dirty offset {r.first_dirty_offset}"
                      + _retention(r.segments_deleted_by_retention))
    return 1 if any(r.error for r in reports) else 0


def _retention(deleted: int) -> str:
    return f"; retention deleted {deleted} segment(s)" if deleted else ""
