"""``tiered produce``: append records read from stdin to a topic-partition of a data dir.

Each input line is one record. Plain lines are values; with ``--key-separator`` the part before the first
separator is the key; with ``--json`` each line is an object ``{"key":..., "value":..., "headers": {...},
"timestamp": ...}`` (strings are UTF-8 encoded, null stays null, other values are stored as their JSON text;
``timestamp`` is milliseconds since the epoch, default now; other fields, such as ``consume --json``'s ``offset``,
are ignored, so ``consume --json`` output produces again). Records are batched ``--batch-size`` at a time. All of stdin is read
and checked before the data dir is opened, so input with a bad line creates nothing and appends nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from tiered.commands._common import (
    UsageError,
    check_topic_name,
    load_config,
    parse_topic_overrides,
    partition_number,
    positive_int,
)

if TYPE_CHECKING:
    from local.records import SimpleRecord


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", "-t", required=True)
    parser.add_argument("--partition", "-p", type=partition_number, default=0)
    parser.add_argument("--key-separator", help="split each line into key and value at the first SEP")
    parser.add_argument("--json", action="store_true", help="each line is a JSON record object")
    parser.add_argument("--header", action="append", default=[], metavar="KEY=VALUE", help="a header on every record")
    from local.records import CompressionType

    parser.add_argument("--compression", default="none", choices=[c.name_lower for c in CompressionType],
                        help="the batches' codec (default: none)")
    parser.add_argument("--batch-size", type=positive_int, default=500, help="records per batch (default: 500)")
    parser.add_argument("--topic-config", action="append", default=[], metavar="KEY=VALUE", help="topic config override")


def _encode(value: object) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":")).encode()


def json_record(obj: object, now_ms: int, headers: list[tuple[str, bytes | None]] | None = None) -> SimpleRecord:
    """One ``--json`` record object (the format of the module docstring; ``tiered run``'s HTTP produce takes the
    same) as a record stamped ``now_ms`` unless it has a ``timestamp``. Raises ValueError naming what is wrong."""
    from local.records import SimpleRecord

    if not isinstance(obj, dict):
        raise ValueError(f"a record must be a JSON object, got {type(obj).__name__}")
    timestamp = obj.get("timestamp", now_ms)
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or not -1 <= timestamp <= 2**63 - 1:
        raise ValueError(f"invalid timestamp {timestamp!r}: expected milliseconds since the epoch (a whole number)")
    rec_headers = obj.get("headers") or {}
    if not isinstance(rec_headers, dict):
        raise ValueError("headers must be a JSON object of name: value")
    all_headers = list(headers or []) + [(str(k), _encode(v)) for k, v in rec_headers.items()]
    return SimpleRecord(timestamp, _encode(obj.get("key")), _encode(obj.get("value")), all_headers)


def run(args: argparse.Namespace) -> int:
    from local.records import MemoryRecords
    from tiered.composition import open_log_manager

    config = load_config(args)
    headers = []
    for item in args.header:
        k, sep, v = item.partition("=")
        if not sep:
            raise UsageError(f"--header expects KEY=VALUE, got {item!r}")
        headers.append((k, v.encode()))
    overrides = parse_topic_overrides(args.topic_config) or None
    config.topic_config(overrides)
    check_topic_name(args.topic)
    # Every line is parsed before the data dir is opened: input that cannot be produced creates no topic and
    # appends nothing, rather than leaving a partition dir and the batches before the bad line.
    try:
        records = _read_records(args, headers)
    except ValueError as exc:
        print(f"tiered produce: {exc}", file=sys.stderr)
        return 1
    first = last = -1
    with open_log_manager(config, start_scheduler=False) as manager:
        log = manager.get_or_create_log(args.topic, args.partition, overrides)
        for start in range(0, len(records), args.batch_size):
            info = log.append(MemoryRecords.build(records[start:start + args.batch_size], compression=args.compression))
            first = info.first_offset if first < 0 else first
            last = info.last_offset
        log.flush()
    offsets = f" (offsets {first}..{last})" if records else ""
    print(f"produced {len(records)} records to {args.topic}-{args.partition}{offsets}", file=sys.stderr)
    return 0


def _read_records(args: argparse.Namespace, headers: list[tuple[str, bytes | None]]) -> list[SimpleRecord]:
    """The records of stdin's lines; ValueError naming the first line that is not a record."""
    from local.records import SimpleRecord

    records: list[SimpleRecord] = []
    for lineno, line in enumerate(sys.stdin, 1):
        line = line.rstrip("\n")
        now = int(time.time() * 1000)
        if args.json:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"line {lineno} is not JSON: {exc}") from None
            if not isinstance(obj, dict):
                raise ValueError(f"line {lineno} must be a JSON object")
            try:
                records.append(json_record(obj, now, headers))
            except ValueError as exc:
                raise ValueError(f"line {lineno}: {exc}") from None
        elif args.key_separator and args.key_separator in line:
            key, _, value = line.partition(args.key_separator)
            records.append(SimpleRecord(now, key.encode(), value.encode(), headers))
        else:
            records.append(SimpleRecord(now, None, line.encode(), headers))
    return records
