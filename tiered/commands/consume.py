"""``tiered consume``: print the records of a topic-partition, local and remote tiers alike.

Starts at ``--offset`` (default: the log start offset) or at the first record whose timestamp is at or after
``--timestamp`` (or at one of Kafka's special ListOffsets timestamps, -1..-5); stops at ``--to-offset``
(exclusive), after ``--max-messages``, or at the end of the log. ``--json`` prints one object per record in the JSON
record format (:mod:`tiered.record_json`, docs/record-json.md), which ``produce --json`` stores back byte for byte;
text mode prints each value's bytes as they are and ``null`` for null, as Kafka's console consumer does.

Every batch's CRC is checked before any of its records is printed (``--no-check-crcs`` turns that off, like a
Kafka consumer's ``check.crcs=false``). Bad data (a corrupt batch, a damaged or missing remote object, a read
that comes back empty before the end) stops the command with a message naming the file or remote segment, the
position and the offset, and exit status 1: it never prints a wrong value or ends quietly early.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any

from tiered.commands._common import (
    UsageError,
    check_topic_name,
    check_typed_data_dirs,
    load_config,
    non_negative_int,
    partition_number,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", "-t", required=True)
    parser.add_argument("--partition", "-p", type=partition_number, default=0)
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--offset", type=non_negative_int, help="first offset to print (default: the log start offset)")
    start.add_argument(
        "--timestamp", type=timestamp_arg, metavar="MS",
        help="start at the first record with timestamp >= MS (ms since the epoch), or at one of Kafka's special "
             "values: -1 latest (the log end offset), -2 earliest (the log start offset), -3 the record with the "
             "largest timestamp, -4 earliest local (the local log start offset), -5 latest tiered (the last offset "
             "in the remote tier)")
    parser.add_argument("--to-offset", type=non_negative_int, help="stop before this offset")
    parser.add_argument("--max-messages", type=non_negative_int, help="stop after this many records")
    parser.add_argument(
        "--isolation", choices=["log_end", "high_watermark", "txn_committed"], default="high_watermark",
        help="how far to read (default: high_watermark)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per record")
    parser.add_argument("--print-key", action="store_true", help="print KEY<TAB>VALUE in text mode")
    parser.add_argument(
        "--no-check-crcs", dest="check_crcs", action="store_false",
        help="do not check each batch's CRC before printing its records (default: checked)",
    )


SPECIAL_TIMESTAMPS = {-1: "latest", -2: "earliest", -3: "max timestamp", -4: "earliest local", -5: "latest tiered"}


def timestamp_arg(text: str) -> int:
    """An argparse type: milliseconds since the epoch, or one of Kafka's special ListOffsets values -1..-5."""
    specials = ", ".join(f"{k} {v}" for k, v in SPECIAL_TIMESTAMPS.items())
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid timestamp {text!r}: expected milliseconds since the epoch or one "
                                         f"of Kafka's special values ({specials})") from None
    if value < min(SPECIAL_TIMESTAMPS):
        raise argparse.ArgumentTypeError(f"invalid timestamp {value}: expected milliseconds since the epoch (>= 0) or "
                                         f"one of Kafka's special values ({specials})")
    return value


def record_json(batch: Any, rec: Any) -> dict[str, Any]:
    """A record as ``--json`` prints it and ``tiered run``'s HTTP consume answers it (:mod:`tiered.record_json`)."""
    from tiered.record_json import record_to_json

    return record_to_json(rec.offset, rec.timestamp, rec.key, rec.value, rec.headers, batch.partition_leader_epoch)


def run(args: argparse.Namespace) -> int:
    from local.errors import ConfigError, KafkaStorageError
    from tiered.commands._remote import check_remote_access
    from tiered.errors import TieredStorageError

    check_topic_name(args.topic)
    if args.to_offset is not None and args.offset is not None and args.to_offset <= args.offset:
        raise UsageError(f"--to-offset {args.to_offset} must be above --offset {args.offset} (it is exclusive)")
    config = load_config(args)
    try:
        check_remote_access(config, reader=True)  # an unreachable store, missing bucket or bad credentials: one line
        check_typed_data_dirs(args, config)
        return _consume(args, config)
    except ConfigError:
        raise  # a usage error (exit 2), whatever tier it names
    except (KafkaStorageError, TieredStorageError) as exc:
        sys.stdout.flush()
        print(f"tiered consume: {exc}", file=sys.stderr)
        return 1


def _consume(args: argparse.Namespace, config: Any) -> int:
    from local.fetch import FetchIsolation
    from tiered.composition import lost_ownership, open_log_manager

    isolation = FetchIsolation[args.isolation.upper()]
    printed = 0
    out = sys.stdout.buffer
    # Read-only: nothing is written to the data dirs (no lock, no checkpoint, no recovery on disk).
    with open_log_manager(config, start_scheduler=False, read_only=True) as manager:
        log = manager.get_log(args.topic, args.partition)
        if log is None:
            print(f"tiered consume: no partition {args.topic}-{args.partition} in {', '.join(str(d) for d in config.log_dirs)}", file=sys.stderr)
            return 1
        lost = lost_ownership(manager, log, ask=True)
        if lost is not None:  # (read on: what this data dir holds may be what an operator recovers from)
            print(f"tiered consume: warning: {lost}; the records read here past the handover are this data dir's "
                  "own, not the partition's (read them from the owner's data dir)", file=sys.stderr)
        if args.timestamp is not None:
            found = log.offset_for_timestamp(args.timestamp)
            if found is not None and found.offset < 0:  # -5 (latest tiered) with nothing in the remote tier
                print(f"tiered consume: no offset of {log.name} is in the remote tier (--timestamp -5 is the last "
                      "offset there)", file=sys.stderr)
                return 0
            if found is None:  # a range that exists and is empty: exit 0, said on stderr
                print(f"tiered consume: no record of {log.name} has a timestamp at or after {args.timestamp} "
                      f"(offsets {log.log_start_offset}..{log.log_end_offset - 1})", file=sys.stderr)
                return 0
            offset = found.offset
        else:
            offset = log.log_start_offset if args.offset is None else args.offset
        if offset < 0:
            raise UsageError("--offset must be >= 0")
        if offset > log.log_end_offset:
            print(f"tiered consume: offset {offset} is out of range for {log.name}: log start offset "
                  f"{log.log_start_offset}, log end offset {log.log_end_offset}", file=sys.stderr)
            return 1
        if offset == log.log_end_offset:
            print(f"tiered consume: no records of {log.name} from offset {offset}: it is the log end offset",
                  file=sys.stderr)
            return 0
        for batch, rec in records_from(log, offset, isolation, getattr(args, "check_crcs", True)):
            if args.to_offset is not None and rec.offset >= args.to_offset:
                break
            if args.max_messages is not None and printed >= args.max_messages:
                break
            if args.json:
                out.write(json.dumps(record_json(batch, rec)).encode("ascii") + b"\n")
            elif args.print_key:
                out.write(_plain(rec.key) + b"\t" + _plain(rec.value) + b"\n")
            else:
                out.write(_plain(rec.value) + b"\n")
            printed += 1
    return 0


def _plain(data: bytes | None) -> bytes:
    """A key or value in text mode, as Kafka's console consumer prints it: its bytes as they are, ``null`` for
    null (``--json`` tells bytes, text and null apart)."""
    return b"null" if data is None else bytes(data)


def records_from(log: Any, offset: int, isolation: Any, check_crcs: bool = True) -> Iterator[tuple[Any, Any]]:
    """(batch, record) pairs from ``offset``; under txn_committed, aborted transactions are skipped as a
    READ_COMMITTED consumer does (the fetch's aborted list, ended by the producer's abort marker). Each batch is
    CRC-checked (unless ``check_crcs`` is False) before any of its records is yielded; a read that answers
    nothing before the end raises CorruptRecordError."""
    from local.errors import CorruptRecordError
    from local.fetch import FetchIsolation

    end = {FetchIsolation.LOG_END: log.log_end_offset, FetchIsolation.HIGH_WATERMARK: log.high_watermark}.get(
        isolation, log.last_stable_offset
    )
    aborting: set[int] = set()
    previous_last = -1  # the last offset of the batch before (a fetch may start inside a batch, never before one)
    while offset < end:
        info = log.read(offset, 1024 * 1024, isolation, True)
        pending = sorted((t.first_offset, t.producer_id) for t in (info.aborted_transactions or []))
        got = False
        meta = info.fetch_offset_metadata
        position = meta.relative_position_in_segment  # (of a local segment's bytes; -1: not known, a remote read)
        for batch in info.records.batches(verify=check_crcs):  # each checked before any of its records is used
            got = True
            if check_crcs:
                _check_offsets(log, offset, batch, previous_last, meta.segment_base_offset, position)
            previous_last = batch.last_offset
            if position >= 0:
                position += batch.size_in_bytes
            while pending and pending[0][0] <= batch.last_offset:
                aborting.add(pending.pop(0)[1])
            if batch.is_control_batch:
                if batch.is_transactional:
                    aborting.discard(batch.producer_id)
            elif not (batch.is_transactional and batch.producer_id in aborting):
                for rec in batch.records():
                    if rec.offset >= offset:
                        yield batch, rec
            offset = max(offset, batch.last_offset + 1)
        if not got:
            raise CorruptRecordError(
                f"the read of {log.name} at offset {offset} returned no whole batch ({len(info.records)} bytes) "
                f"before the end offset {end}", offset=offset)


def _check_offsets(log: Any, offset: int, batch: Any, previous_last: int, segment: int = -1,
                   position: int = -1) -> None:
    """Base offsets are outside the CRC: a damaged one shows as a batch that overlaps the one before it or reaches
    past the log end offset. A gap before a batch is no damage (compaction's, a real broker's: Kafka's reads answer
    an offset in a gap with the next batch; the log's read checked the batch after a gap against its neighbours)."""
    from local.errors import CorruptRecordError

    base, last = batch.base_offset, batch.last_offset
    if previous_last >= 0 and base <= previous_last:
        problem = f"does not follow the batch before it, which ends at offset {previous_last}"
    elif last >= log.log_end_offset:
        problem = f"reaches past the log end offset {log.log_end_offset}"
    else:
        return
    seg = log.segments.get(segment) if segment >= 0 and position >= 0 else None
    where = f" (at byte {position} of {log.source_dir / seg.log.path.name})" if seg is not None else ""  # (not a scratch copy)
    raise CorruptRecordError(
        f"the read of {log.name} at offset {offset} answered with a batch holding offsets {base}..{last}{where}, "
        f"which {problem}: its base offset is damaged (tiered verify names every damaged batch)", offset=base)
