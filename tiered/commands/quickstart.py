"""``tiered quickstart``: the whole product in one run, on an embedded local-directory remote tier.

Produces records to a topic, rolls segments, offloads the closed ones to the remote tier, lets local retention
delete them, reads every offset back (old ones from the remote tier), looks up offsets by timestamp, restarts
the log manager and reads again, and dumps a segment. Exits 0 when everything read back matches what was
written, 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import tempfile
import time
from pathlib import Path

from tiered.commands._common import UsageError, non_negative_int, positive_int

MAX_RECORD_SIZE = 1_000_000  # a record must fit in one batch under Kafka's default message.max.bytes (1048588)


def _record_size(text: str) -> int:
    size = non_negative_int(text)
    if size > MAX_RECORD_SIZE:
        raise argparse.ArgumentTypeError(f"invalid value {size}: at most {MAX_RECORD_SIZE} (a batch must fit "
                                         "message.max.bytes)")
    return size


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from local.records import CompressionType

    parser.add_argument("--dir", type=Path,
                        help="working directory, new or empty (default: a fresh temp dir, removed afterwards)")
    parser.add_argument("--records", type=positive_int, default=30_000, help="records to produce (default: 30000)")
    parser.add_argument("--record-size", type=_record_size, default=200,
                        help=f"value size in bytes, at most {MAX_RECORD_SIZE:,} (default: 200)")
    parser.add_argument("--batch-size", type=positive_int, default=100, help="records per batch (default: 100)")
    parser.add_argument("--compression", default="none", choices=[c.name_lower for c in CompressionType],
                        help="batch compression (default: none)")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")


def _value(i: int, size: int) -> bytes:
    seed = hashlib.blake2b(i.to_bytes(8, "big"), digest_size=16).digest()
    return (seed * (size // 16 + 1))[:size]


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from local import LogConfig
    from local.records import MemoryRecords, SimpleRecord
    from tiered.composition import open_log_manager, remote_log_manager_of

    given = [name for name, value in (("--config", getattr(args, "config", None)), ("--log-dirs", getattr(args, "log_dirs", None)),
                                      ("-o", getattr(args, "override", None))) if value]
    if given:  # (they were taken and silently ignored: an invalid -o value too)
        raise UsageError(f"it makes its own data dir and broker config, so it takes no {', '.join(given)} "
                         "(--dir DIR picks the place)")
    if args.dir is not None and Path(args.dir).exists() and (not Path(args.dir).is_dir() or any(Path(args.dir).iterdir())):
        # (its data would be appended to, and the read-back check would call that a mismatch)
        raise UsageError(f"--dir {args.dir} is not an empty directory: pass a new one")
    if args.batch_size * args.record_size > MAX_RECORD_SIZE and args.batch_size > 1:
        raise UsageError(f"--batch-size {args.batch_size} of {args.record_size}-byte records does not fit one batch "
                         f"under message.max.bytes: at most {max(1, MAX_RECORD_SIZE // max(args.record_size, 1))}")
    console = Console(soft_wrap=True)  # piped to a file, a line stays one line (rich wraps at 80 columns otherwise)
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="tiered-quickstart-"))
    work.mkdir(parents=True, exist_ok=True)
    data_dir, remote_dir = work / "data", work / "remote"
    props = {
        "log.dirs": str(data_dir),
        "log.segment.bytes": str(1024 * 1024),
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "tiered.backends.local_dir.LocalDirRemoteStorageManager",
        "rsm.config.dir": str(remote_dir),
    }
    # Local retention keeps only the active segment: every offloaded offset is then read back from the remote tier.
    topic_overrides = {"remote.storage.enable": "true", "local.retention.bytes": "0"}
    ok = True
    started = time.perf_counter()
    try:
        config = LogConfig.from_properties(props)
        console.print(f"[bold]tiered quickstart[/] in {work}")
        with open_log_manager(config, start_scheduler=False) as manager:
            log = manager.get_or_create_log("quickstart", 0, topic_overrides)
            t0 = int(time.time() * 1000)
            for first in range(0, args.records, args.batch_size):
                batch = [
                    SimpleRecord(t0 + i, f"key-{i}".encode(), _value(i, args.record_size))
                    for i in range(first, min(first + args.batch_size, args.records))
                ]
                log.append(MemoryRecords.build(batch, compression=args.compression))
            log.flush()
            produced_segments = log.number_of_segments()
            console.print(f"produced {args.records} records in {produced_segments} segments, log end offset {log.log_end_offset}")
            if produced_segments == 1:
                # Only closed segments are tiered: a small run rolls its one segment so there is something to offload.
                log.roll()
                console.print("rolled the active segment, so that the records are in a closed segment to offload")

            rlm = remote_log_manager_of(manager)
            assert rlm is not None, "the remote tier is enabled in this configuration"
            result = rlm.run_once(manager.all_logs())
            console.print(f"offloaded {result.segments_copied} segments ({result.bytes_copied:,} bytes) to {remote_dir}")
            deleted = manager.cleanup_logs()
            console.print(
                f"local retention deleted {deleted} segments: log start offset {log.log_start_offset}, "
                f"local log start offset {log.local_log_start_offset}"
            )
            ok &= _verify(console, log, args)
        # Restart: everything must still be there, remote segments found from the bucket alone.
        with open_log_manager(LogConfig.from_properties(props), start_scheduler=False) as manager:
            log = manager.get_or_create_log("quickstart", 0, topic_overrides)
            console.print(
                f"restarted: {log.name} reopened with log start offset {log.log_start_offset}, local log start offset "
                f"{log.local_log_start_offset}, log end offset {log.log_end_offset}, {log.number_of_segments()} local "
                "segment(s)")
            ok &= _verify(console, log, args)
            seg = log.active_segment
        from tiered.dump_log_segments import dump_file

        console.print(f"[bold]dump[/] of {seg.log.path.name}:")
        for line in list(dump_file(seg.log.path, max_batches=3))[:4]:
            console.print(f"  {line}", highlight=False)

        table = Table(title="quickstart")
        table.add_column("check")
        table.add_column("result")
        table.add_row("records read back", "all match" if ok else "[red]MISMATCH[/]")
        table.add_row("elapsed", f"{time.perf_counter() - started:.2f} s")
        console.print(table)
        return 0 if ok else 1
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(work, ignore_errors=True)


def _verify(console: object, log: object, args: argparse.Namespace) -> bool:
    from local.log import Log

    assert isinstance(log, Log)
    expected = 0
    offset = 0
    remote_reads = 0
    while offset < log.log_end_offset:
        if offset < log.local_log_start_offset:
            remote_reads += 1
        info = log.read(offset, 512 * 1024)
        got = False
        for batch in info.records.batches():
            for rec in batch.records():
                if rec.offset < offset:
                    continue
                if rec.offset != expected or rec.value != _value(expected, args.record_size):
                    console.print(f"[red]mismatch at offset {rec.offset}[/]")  # type: ignore[attr-defined]
                    return False
                expected += 1
                got = True
            offset = max(offset, batch.last_offset + 1)
        if not got:
            break
    found = log.offset_for_timestamp(0)
    ok = expected == args.records and found is not None and found.offset == 0
    console.print(  # type: ignore[attr-defined]
        f"read back {expected}/{args.records} records ({remote_reads} fetches from the remote tier); "
        f"offset for timestamp 0 -> {found.offset if found else None}: {'ok' if ok else 'FAILED'}"
    )
    return ok
