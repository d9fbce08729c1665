"""``tiered produce``: append records read from stdin to a topic-partition of a data dir.

Each input line is one record. Plain lines are values; with ``--key-separator`` the part before the first
separator is the key; with ``--json`` each line is a record object in the format of docs/record-json.md
(:mod:`tiered.record_json`: ``{"key": ..., "value": ..., "headers": [...], "timestamp": ...}``, bytes that are not
UTF-8 as ``valueBase64``, ``"value": null`` a tombstone), the format ``consume --json`` prints, so its output
produces the same bytes again. Records are batched ``--batch-size`` at a time (a batch cut before it would exceed the
topic's ``max.message.bytes``, as the HTTP endpoint cuts them) and appended batch by batch as stdin streams in; a batch with a bad line is not appended, and input whose first batch
has one creates nothing (no data dir, no topic).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tiered.commands._common import (
    Terminated,
    UsageError,
    check_partition_to_write,
    check_topic_name,
    interrupts_deferred,
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
    parser.add_argument("--batch-size", type=positive_int, default=500, help="records per batch at most (default: 500); a batch is cut "
                        "before it would exceed the topic's max.message.bytes")
    parser.add_argument("--topic-config", action="append", default=[], metavar="KEY=VALUE",
                        help="topic config override where the write creates the topic (repeatable; an existing "
                        "topic's config: tiered topics alter)")


def run(args: argparse.Namespace) -> int:
    from local.errors import RecordTooLargeError
    from tiered.batching import build_batches
    from tiered.composition import lost_ownership, open_log_manager

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
    if args.key_separator == "":
        raise UsageError("--key-separator must not be empty")
    # Input streams through in batches (an endless pipe included), and a batch is appended only once all its lines
    # parsed. The data dir is opened, and the topic created, at the first whole batch: input whose first batch holds
    # a bad line creates nothing. A bad line later stops there; the batches before it stay, as with Kafka's console
    # producer, and the message says how many.
    count, first, last = 0, -1, -1
    manager = log = None
    started = -1  # the log end offset when the log was opened (what an interrupted run says it wrote is from it)
    try:
        limit, reason = _line_limit(config, args, overrides)
        for batch in _batches(_records(args, headers, limit, reason), args.batch_size):
            if log is None:
                manager = open_log_manager(config, start_scheduler=False)
                check_partition_to_write(manager, args.topic, args.partition)
                overrides = _overrides_of_a_new_topic(manager, args.topic, overrides)
                created = manager.get_log(args.topic, args.partition) is None
                log = manager.get_or_create_log(args.topic, args.partition, overrides)
                started = log.log_end_offset
                if created:  # (said before anything is written: another machine's topic of this name?)
                    _warn_of_namesakes(manager, log)
                lost = lost_ownership(manager, log, ask=True)
                if lost is not None:  # (as tiered run answers NOT_LEADER_OR_FOLLOWER / 409: never tiered)
                    print(f"tiered produce: nothing written: {lost}; records written here would never be tiered "
                          "and would differ from the owner's at the same offsets", file=sys.stderr)
                    return 1
            # --batch-size records at most, cut where a batch would exceed max.message.bytes (the HTTP endpoint's
            # cut): two lines of 800 KB in one batch failed the run after the batches before them were written
            for records in build_batches(batch, log.config.max_message_bytes, args.compression, what="the input",
                                         first_index=count + 1):
                with interrupts_deferred():  # (the append whole, and counted, before an interrupt acts)
                    info = log.append(records)
                    first = info.first_offset if first < 0 else first
                    last = info.last_offset
                    count += info.last_offset - info.first_offset + 1
    except (_BadLine, RecordTooLargeError) as exc:
        kept = f"; {_produced(args, count, first, last)} before it" if count else ""
        print(f"tiered produce: {exc}{kept}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # (Ctrl-C: what was appended stays; say how much, as for a bad line)
        # (from the log itself: the interrupt may come between an append and the count of it)
        end = log.log_end_offset if log is not None else started
        written = _produced(args, end - started, started, end - 1) if log is not None and end > started else None
        print(f"tiered produce: interrupted; {written or 'nothing written'}", file=sys.stderr)
        return 128 + signal.SIGTERM if isinstance(sys.exc_info()[1], Terminated) else 130
    finally:
        if manager is not None:
            try:
                if log is not None:
                    log.flush()
            finally:
                manager.close()
    print(_produced(args, count, first, last) if count else "produced 0 records: stdin was empty (nothing written)",
          file=sys.stderr)
    return 0


def _warn_of_namesakes(manager: Any, log: Any) -> None:
    """A tiered topic this command creates, where the remote tier holds another topic of its name: say so
    (:meth:`tiered.ownership.OwnershipGuard.warn_of_namesakes`)."""
    from tiered.composition import remote_log_manager_of
    from tiered.remote_tier_parts import topic_id_partition

    rlm = remote_log_manager_of(manager)
    if rlm is not None and log.remote_storage_enabled and log.topic_id is not None:
        rlm.ownership.warn_of_namesakes(log, topic_id_partition(log))


def _overrides_of_a_new_topic(manager: Any, topic: str, overrides: dict[str, str] | None) -> dict[str, str] | None:
    """``--topic-config`` applies where the write creates the topic. For an existing topic it rewrote the overrides of
    the partition written alone, dropping its others and passing by the checks of ``topics alter`` (a helper's
    pass): refused unless it says what the topic has already (None: nothing to change)."""
    from tiered.commands.topics import topic_overrides

    existing = sorted(p for t, p in manager.partitions() if t == topic)
    if overrides is None or not existing:
        return overrides
    log = manager.get_log(topic, existing[0])
    current = topic_overrides(log.dir) if log is not None else {}
    differ = sorted(k for k, v in overrides.items() if current.get(k) != v)
    if differ:
        raise UsageError(f"topic {topic} exists: --topic-config applies only where a write creates the topic, and "
                         f"{', '.join(f'{k}={overrides[k]}' for k in differ)} is not its config; change an existing "
                         f"topic's config with tiered topics alter --topic {topic} --add-config KEY=VALUE")
    return None


class _BadLine(ValueError):
    """An input line that is not a record (its number and what is wrong in the message)."""


def _produced(args: argparse.Namespace, count: int, first: int, last: int) -> str:
    offsets = f" (offsets {first}..{last})" if count else ""
    return f"produced {count} records to {args.topic}-{args.partition}{offsets}"


def _batches(records: Iterator[SimpleRecord], size: int) -> Iterator[list[SimpleRecord]]:
    """``records`` in lists of ``size`` (the last one shorter); a list is handed out only once it is whole."""
    batch: list[SimpleRecord] = []
    for record in records:
        batch.append(record)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _line_limit(config: Any, args: argparse.Namespace, overrides: dict[str, str] | None) -> tuple[int, str]:
    """The longest input line that can be a record of the topic, and what bounds it: a record's batch fits
    ``max.message.bytes`` and ``segment.bytes`` (the broker's, the ones given, the topic's own where it exists), or,
    compressed, inflates to no more than :func:`local.validation.max_decompressed_bytes`; and a JSON line may spell
    each byte in up to six (``\\u00XX``). Reading stops there: a longer line is no record, and read whole it could
    take all memory first."""
    from local.errors import ConfigError
    from local.validation import max_decompressed_bytes
    from tiered.commands.topics import local_topics, topic_overrides

    sizes = {**(overrides or {})}
    existing = local_topics(config, missing_ok=True).get(args.topic)
    if existing:  # an existing topic's own overrides (any partition's: they are the topic's)
        try:
            sizes = {**topic_overrides(existing[min(existing)]), **sizes}
        except ConfigError:
            pass  # (an unreadable overrides file: the write reports it)
    try:
        topic = config.topic_config({k: v for k, v in sizes.items() if k in ("max.message.bytes", "segment.bytes")})
    except ConfigError:  # (a damaged overrides file: the write reports it; the broker's limits bound the line here)
        topic = config.topic_config()
    if args.compression == "none":  # the batch is the record's bytes: both limits hold
        bound = min(topic.max_message_bytes, topic.segment_bytes)
        reason = f"max.message.bytes {topic.max_message_bytes} and segment.bytes {topic.segment_bytes}"
    else:  # compressed, it may be far smaller; uncompressed, no larger than a batch may inflate to
        bound = max_decompressed_bytes(topic.max_message_bytes)
        reason = f"the {bound} bytes a compressed batch may inflate to under max.message.bytes {topic.max_message_bytes}"
    return bound * (6 if args.json else 1) + 64 * 1024, reason


def _records(args: argparse.Namespace, headers: list[tuple[str, bytes | None]], line_limit: int = 2**31,
             limit_reason: str = "") -> Iterator[SimpleRecord]:
    """The records of stdin's lines, read as they come; _BadLine naming the first line that is not a record.

    Lines are read as bytes: a plain line's bytes are the value as they are (any encoding, or none), as Kafka's
    console producer stores them. Only ``--json`` lines are decoded, as UTF-8."""
    from local.records import SimpleRecord
    from tiered.record_json import loads, record_from_json

    separator = args.key_separator.encode("utf-8", "surrogateescape") if args.key_separator else None
    stdin = sys.stdin.buffer if sys.stdin is not None else None
    if stdin is None:
        raise UsageError("stdin is closed: produce reads its records from stdin")
    limit = line_limit
    for lineno, raw in enumerate(iter(lambda: stdin.readline(limit + 1), b""), 1):
        if len(raw) > limit and not raw.endswith(b"\n"):
            # (read no further into memory: a line this long is no record under the topic's limits)
            raise _BadLine(f"line {lineno} is longer than {limit} bytes: more than a record may hold under "
                           f"{limit_reason}")
        line = raw[:-1] if raw.endswith(b"\n") else raw
        now = int(time.time() * 1000)
        if args.json:
            try:
                obj = loads(line.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise _BadLine(f"line {lineno} is not UTF-8: {exc.reason} at byte {exc.start}") from None
            except ValueError as exc:
                raise _BadLine(f"line {lineno} is not JSON: {exc}") from None
            if not isinstance(obj, dict):
                raise _BadLine(f"line {lineno} must be a JSON object")
            try:
                record = record_from_json(obj, now, headers)
            except ValueError as exc:
                raise _BadLine(f"line {lineno}: {exc}") from None
            yield record
        elif separator is not None and separator in line:
            key, _, value = line.partition(separator)
            yield SimpleRecord(now, key, value, headers)
        else:
            yield SimpleRecord(now, None, line, headers)
