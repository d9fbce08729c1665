"""``tiered status``: what each data dir holds and how the next startup will treat it, without loading anything.

Status must not change recovery behaviour, so it never opens a log: loading would rebuild indexes, truncate torn
tails and delete the clean-shutdown marker. It reads files only: the clean-shutdown marker, the recovery-point and
log-start-offset checkpoints, the last load report (``tiered-load-stats.json``, when the broker wrote one), and per
partition the segment files' names and sizes. The log end offset comes from the batch headers after the last
offset index entry of the newest segment (CRCs are not checked: an unclean start may still truncate there).
Nothing is written and no lock is taken.

Per data dir: clean shutdown or not (recovery pending), the last load's counters, the last remote pass (when, what it
copied and deleted, its errors: :mod:`tiered.pass_report`); per partition, both tiers: the log start offset (the
earliest remote offset when the partition has remote data, as the engine keeps it), the local log start offset, the
log end offset, the recovery point, local segments and bytes, ``.deleted`` files awaiting removal and leftover
``.swap``/``.cleaned`` files, the highest remote offset its ``remote-log-state`` remembers, and, when the broker config enables the remote tier,
the remote segments and bytes read from the store's metadata and the copy lag (local segments below the active
one not yet wholly in the remote tier, and their bytes: Kafka's RemoteCopyLagSegments/RemoteCopyLagBytes), and who
owns the partition's remote data (:mod:`tiered.ownership`: a partition this data dir lost to another, or whose
remote data the configured store does not hold, is a problem). The store is only read; one that cannot be reached
is a problem, and the local part is still shown.

Offline partitions and dirs: the per-partition files a corrupt copy of which keeps a partition from loading
(``partition.metadata``, ``leader-epoch-checkpoint``, ``remote-log-state``) are parsed with the broker's own
parsers; a partition whose file fails is reported ``offline`` with the file and why (the next startup serves the
rest of the dir without it), and so is every partition the last load left offline (from the load report). A data
dir the broker cannot open for writing (not writable, its ``.lock`` not a file) is a problem too: it goes offline
at startup; so is a full file system (less than 1 MiB free, reported in ``free_bytes``): appends there fail with
ENOSPC and take the dir offline. A corrupt producer snapshot is only a note: the loader deletes it and rebuilds
the producer state from the log.
Exit codes: 0 ok, 1 a data dir of the config file is missing, unwritable or full, a checkpoint is corrupt, a
partition is offline or its remote data is owned elsewhere or missing from the store, 2 usage (a data dir typed
with ``--log-dirs`` that does not exist: a typo, answered as every command that never makes one answers it).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np

from tiered.commands._common import check_topic_name, check_typed_data_dirs, load_config

_BATCH_BASE = struct.Struct(">q")  # baseOffset i64 (a legacy entry: its last offset)
FULL_BELOW_BYTES = 1 << 20  # a data dir with less free space than this is reported full


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--topic", "-t", help="only the partitions of this topic")


def run(args: argparse.Namespace) -> int:
    if args.topic is not None:
        check_topic_name(args.topic)
    config = load_config(args)
    check_typed_data_dirs(args, config)
    with contextlib.ExitStack() as stack:
        store, remote_problem = _open_remote_view(config, stack)
        dirs = [dir_status(Path(d), args.topic, store) for d in config.log_dirs]
    if args.topic is not None and not any(d["partitions"] for d in dirs):
        # as 'topics describe' does: an empty table would read as a topic with no partitions
        for d in dirs:
            for problem in d["problems"]:
                print(f"tiered status: data dir {d['path']}: {problem}", file=sys.stderr)
        print(f"tiered status: no topic {args.topic!r} in {', '.join(d['path'] for d in dirs)}", file=sys.stderr)
        return 1
    for d in dirs:
        if remote_problem is not None:
            d["problems"].append(remote_problem)
        for p in d["partitions"]:
            p.pop("_segments", None)
    if args.json:
        print(json.dumps({"data_dirs": dirs}, indent=2, sort_keys=True))
    else:
        print_text(dirs)
    for d in dirs:  # problems also go to stderr, so a script (or a person piping stdout) sees them
        for problem in d["problems"]:
            print(f"tiered status: data dir {d['path']}: {problem}", file=sys.stderr)
    return 1 if any(d["problems"] for d in dirs) else 0


def _open_remote_view(config: Any, stack: contextlib.ExitStack) -> tuple[Any, str | None]:
    """The remote metadata store when the config enables the remote tier (None otherwise), closed with ``stack``,
    and the one-line problem when the store cannot be reached (a bad rsm.config.* value is a usage error)."""
    from local.errors import ConfigError
    from tiered.commands._remote import remote_store, remote_tier_enabled
    from tiered.errors import TieredStorageError

    if not remote_tier_enabled(config):
        return None, None
    try:
        return stack.enter_context(remote_store(config, reader=True)), None
    except TieredStorageError as exc:
        if isinstance(exc, ConfigError):
            raise
        return None, f"remote tier: {_one_line(exc)}"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


# ------------------------------------------------------------------------------------------------------------


def dir_status(data_dir: Path, topic: str | None = None, store: Any = None) -> dict[str, Any]:
    """The status of one data dir, as a JSON-ready dict (see the module docstring). ``store``: the remote metadata
    store (a :class:`tiered.metadata.RemoteLogMetadataStore`), when the remote tier is configured."""
    from local import filenames, metrics
    from tiered.errors import TieredStorageError
    from tiered.pass_report import read_pass_report

    out: dict[str, Any] = {"path": str(data_dir), "problems": [], "partitions": []}
    if not data_dir.is_dir():
        out["problems"].append("no such data dir" if not data_dir.exists() else "not a directory")
        return out
    if not os.access(data_dir, os.W_OK | os.X_OK):
        out["problems"].append("not writable: the broker takes it offline at startup")
    lock = data_dir / ".lock"
    if lock.exists() and not lock.is_file():
        out["problems"].append(f"{lock} is not a file: the broker cannot lock the dir and takes it offline at startup")
    fs = os.statvfs(data_dir)
    out["free_bytes"] = fs.f_bavail * fs.f_frsize
    if out["free_bytes"] < FULL_BELOW_BYTES:
        out["problems"].append(
            f"file system full ({out['free_bytes']} bytes free): appends fail with ENOSPC and take the dir offline"
        )
    marker = data_dir / filenames.CLEAN_SHUTDOWN_FILENAME
    out["clean_shutdown"] = marker.exists()
    if marker.exists():
        try:
            out["broker_epoch"] = json.loads(marker.read_text()).get("brokerEpoch")
        except (OSError, ValueError, AttributeError):
            out["problems"].append(f"unreadable {marker.name}")
    recovery_points = _checkpoint(data_dir / filenames.RECOVERY_POINT_CHECKPOINT_FILENAME, out["problems"])
    start_offsets = _checkpoint(data_dir / filenames.LOG_START_OFFSET_CHECKPOINT_FILENAME, out["problems"])
    cleaner_offsets = _checkpoint(data_dir / "cleaner-offset-checkpoint", out["problems"])
    out["last_load"] = _of_topic(metrics.read_load_report(data_dir), topic)
    out["last_remote_pass"] = read_pass_report(data_dir)
    offline_at_last_load = (out["last_load"] or {}).get("offline_partitions") or {}
    for child in sorted(data_dir.iterdir()):
        try:
            name = filenames.parse_partition_dir_name(child.name)
        except ValueError:
            continue
        if not child.is_dir() or (topic is not None and name[0] != topic):
            continue
        try:
            status = partition_status(child, recovery_points.get(name), start_offsets.get(name, 0))
            _compaction_status(child, status, cleaner_offsets.get(name))
            if store is not None and "offline" not in status:
                try:
                    status.update(remote_status(child, status, store))
                except TieredStorageError as exc:
                    out["problems"].append(f"partition {child.name}: remote tier: {_one_line(exc)}")
                ownership = (status.get("remote") or {}).get("ownership") or {}
                if ownership.get("state") in ("lost", "wrong_store", "damaged_owner_record", "missing_owner_record",
                                              "behind"):
                    out["problems"].append(f"partition {ownership['detail']}")
                unread = (status.get("remote") or {}).get("unreadable_metadata") or []
                if unread:
                    out["problems"].append(f"partition {child.name}: {len(unread)} remote metadata object(s) cannot "
                                           f"be read, e.g. {unread[0]} (tiered verify --remote names each)")
        except OSError as exc:
            status = {"partition": child.name, "offline": f"unreadable: {exc}", "segments": 0, "size_bytes": 0,
                      "recovery_point": None, "producer_snapshots": 0, "transient_files": [],
                      "log_start_offset": None, "local_log_start_offset": None, "log_end_offset": None,
                      "highest_remote_offset": None, "notes": []}
        last = offline_at_last_load.get(child.name)
        if last and "offline" not in status and isinstance(last, dict):
            status["offline"] = f"offline at the last load: {last.get('path')}: {last.get('reason')}"
        if "offline" in status:
            out["problems"].append(f"partition {child.name} is offline: {status['offline']}")
        out["partitions"].append(status)
    return out


def _of_topic(load: dict[str, Any] | None, topic: str | None) -> dict[str, Any] | None:
    """The load report with only ``topic``'s partitions (``--topic``); its totals stay the whole dir's."""
    if load is None or topic is None:
        return load
    from local import filenames

    def ours(name: str) -> bool:
        try:
            return filenames.parse_partition_dir_name(name)[0] == topic
        except ValueError:
            return False

    narrowed = dict(load)
    for key in ("partitions", "offline_partitions"):
        if isinstance(load.get(key), dict):
            narrowed[key] = {name: v for name, v in load[key].items() if ours(name)}
    return narrowed


def _checkpoint(path: Path, problems: list[str]) -> dict[tuple[str, int], int]:
    from local.checkpoint import OffsetCheckpointFile
    from local.errors import KafkaStorageError

    if not path.exists():
        return {}
    try:
        return dict(OffsetCheckpointFile(path).read())
    except (KafkaStorageError, OSError, ValueError) as exc:
        # The broker treats it as absent: every segment will be recovered at the next unclean start.
        problems.append(f"corrupt {path.name}: {exc}")
        return {}


def partition_status(partition_dir: Path, recovery_point: int | None, checkpoint_start: int) -> dict[str, Any]:
    """Segments, sizes and offsets of one partition dir, from its files only."""
    from local import filenames

    segments: list[tuple[int, int]] = []
    transient: list[str] = []
    snapshots = 0
    for entry in sorted(os.scandir(partition_dir), key=lambda e: e.name):
        if not entry.is_file():
            continue
        name = entry.name
        if name.endswith(filenames.TRANSIENT_SUFFIXES):
            transient.append(name)
        elif name.endswith(filenames.LOG_FILE_SUFFIX):
            try:
                segments.append((filenames.offset_from_file_name(name), entry.stat().st_size))
            except ValueError:
                continue
        elif name.endswith(filenames.PRODUCER_SNAPSHOT_FILE_SUFFIX):
            snapshots += 1
    out: dict[str, Any] = {
        "partition": partition_dir.name,
        "segments": len(segments),
        "size_bytes": sum(size for _, size in segments),
        "recovery_point": recovery_point,
        "producer_snapshots": snapshots,
        "transient_files": transient,
    }
    from local.dir_failure import check_partition_files

    offline, notes = check_partition_files(partition_dir)
    if offline is not None:
        out["offline"] = offline
    out["notes"] = notes
    highest_remote = _highest_remote_offset(partition_dir)
    out["highest_remote_offset"] = highest_remote
    if segments:
        last_base = segments[-1][0]
        local_start = max(checkpoint_start, segments[0][0])
        # As the loader does: a partition with remote data keeps its log start below the local one.
        out["log_start_offset"] = checkpoint_start if highest_remote is not None and highest_remote >= 0 else local_start
        out["local_log_start_offset"] = local_start
        out["log_end_offset"] = log_end_from_files(partition_dir, last_base)
        out["active_segment"] = last_base
        out["_segments"] = segments  # for remote_status; dropped before printing
    else:
        out["log_start_offset"] = out["local_log_start_offset"] = out["log_end_offset"] = checkpoint_start
    return out


def _compaction_status(partition_dir: Path, status: dict[str, Any], cleaner_offset: int | None) -> None:
    """A compacted partition's cleaner offset (its first dirty offset: ``cleaner-offset-checkpoint``, else the log
    start) and dirty ratio (see :func:`local.cleaner.manager.dirty_ratio_of_files`)."""
    from local.cleaner.manager import dirty_ratio_of_files
    from local.config import read_properties

    try:
        policy = str(read_properties(partition_dir / "tiered-topic.properties").get("cleanup.policy", ""))
    except (OSError, ValueError):
        policy = ""
    if "compact" not in policy and cleaner_offset is None:
        return
    first_dirty = cleaner_offset if cleaner_offset is not None else status.get("log_start_offset") or 0
    status["cleaner_offset"] = cleaner_offset
    status["dirty_ratio"] = round(dirty_ratio_of_files(status.get("_segments", []), first_dirty), 4)


def _highest_remote_offset(partition_dir: Path) -> int | None:
    """The highest remote offset ``remote-log-state`` remembers (-1: tiered, nothing copied yet; None: no file or
    unreadable, which check_partition_files reports)."""
    from local.errors import KafkaStorageError
    from local.remote_state import REMOTE_LOG_STATE_FILENAME, RemoteLogStateFile

    if not (partition_dir / REMOTE_LOG_STATE_FILENAME).exists():
        return None
    try:
        return RemoteLogStateFile(partition_dir).read().highest_remote_offset
    except KafkaStorageError:
        return None


def remote_status(partition_dir: Path, status: dict[str, Any], store: Any) -> dict[str, Any]:
    """The remote tier of one partition from the store's metadata: segments, bytes, offsets, and the copy lag."""
    from local import filenames
    from local.checkpoint import PartitionMetadataFile
    from tiered.rsm import TopicIdPartition

    meta = PartitionMetadataFile(partition_dir / filenames.PARTITION_METADATA_FILENAME)
    if not meta.exists():
        return {"remote": None}
    topic, partition = filenames.parse_partition_dir_name(partition_dir.name)
    tip = TopicIdPartition(meta.read(), topic, partition)
    segs = store.readable_segments(tip)
    highest = max((m.end_offset for m in segs), default=-1)
    remote: dict[str, Any] = {
        "segments": len(segs),
        "size_bytes": sum(m.segment_size_in_bytes for m in segs),
        "log_start_offset": min((m.start_offset for m in segs), default=None),
        "highest_offset": highest,
    }
    from local.config import read_properties
    from local.manager import TOPIC_CONFIG_FILENAME

    overrides = partition_dir / TOPIC_CONFIG_FILENAME
    tiered = overrides.exists() and read_properties(overrides).get("remote.storage.enable", "").lower() == "true"
    remote["tiered"] = tiered
    local = status.get("_segments") or []
    # A local segment is copied when every offset of it (up to the next segment's base) is remote; the active one
    # never is. What is left is the copy lag (none when the topic is not tiered: nothing is copied).
    lag = [(base, size) for (base, size), (nxt, _) in itertools.pairwise(local) if nxt - 1 > highest]
    remote["copy_lag_segments"] = len(lag) if tiered else None
    remote["copy_lag_bytes"] = sum(size for _, size in lag) if tiered else None
    remote["ownership"] = _ownership(partition_dir, status, store, tip)
    if remote["ownership"]["state"] in ("lost", "wrong_store"):
        # (nothing is copied from here any more: a lag that never shrinks would say otherwise)
        remote["copy_lag_segments"] = remote["copy_lag_bytes"] = None
    unreadable = store.unreadable_events(tip) if hasattr(store, "unreadable_events") else {}
    remote["unreadable_metadata"] = sorted(unreadable)  # (their segments are not counted above: not seen)
    out: dict[str, Any] = {"remote": remote}
    if unreadable:
        key, why = sorted(unreadable.items())[0]
        out["notes"] = [*status.get("notes", []), f"{len(unreadable)} remote metadata object(s) cannot be read, e.g. "
                        f"{key.rsplit('/', 1)[-1]} ({why}): their segments are not counted; tiered verify --remote"]
    known = status.get("highest_remote_offset")
    if segs and remote["log_start_offset"] is not None and (known is None or known < 0):
        # The data dir has no record of remote data (attached from the bucket, or never copied here): its log start
        # is the bucket's. With one, the checkpoint's log start stands, as the loader takes it: remote segments
        # below it are retention's, waiting for their deletion.
        out["log_start_offset"] = min(status["log_start_offset"], remote["log_start_offset"])
    return out


def _ownership(partition_dir: Path, status: dict[str, Any], store: Any, tip: Any) -> dict[str, Any]:
    """Who owns the partition's remote data (:mod:`tiered.ownership`), from the store's owner records and this data
    dir's claim: ``state`` owner, lost, wrong_store, damaged_owner_record (the newest record cannot be read: who
    owns it cannot be told), missing_owner_record (the record of this data dir's claim is gone from the store: the
    next pass of ``tiered run`` or ``offload`` claims again above it), behind (its claim, but the copies made under it pass its log end: an older copy of the
    data dir that made them) or unclaimed (nobody claimed it yet: the next copy does)."""
    from local.errors import KafkaStorageError
    from local.remote_state import REMOTE_LOG_STATE_FILENAME, RemoteLogStateFile
    from tiered.ownership import OWNER, assess, behind, diverged_at

    try:
        local = RemoteLogStateFile(partition_dir).read()
    except KafkaStorageError:
        return {"state": "unknown", "detail": f"unreadable {REMOTE_LOG_STATE_FILENAME}"}
    records = store.owner_records(tip)
    damaged = store.damaged_owner_records(tip) if hasattr(store, "damaged_owner_records") else {}
    start, local_start = status.get("log_start_offset"), status.get("local_log_start_offset")
    found = assess(
        partition_dir.name, local.owner_epoch, local.owner_id, records, has_remote_data=local.has_remote_data,
        below_local_start=start is not None and local_start is not None and start < local_start,
        holds_metadata=bool(records) or store.holds_metadata(tip),
        state_file=str(partition_dir / REMOTE_LOG_STATE_FILENAME), store=repr(store.store),
        pending=(local.pending_owner_epoch, local.pending_owner_id) if local.claim_pending else None,
        damaged=damaged,
    )
    newest = records[-1] if records else None
    state = found.state if found is not None else "unclaimed"
    detail = found.detail if found is not None else None
    if damaged and max(damaged) >= (newest.owner_epoch if newest is not None else -1):
        state = "damaged_owner_record"  # (assess says wrong_store: nothing is done there; the cause is the record)
    elif found is not None and found.reclaim:
        state = "missing_owner_record"  # (the record of this data dir's claim is gone: its next pass claims again)
    log_end = status.get("log_end_offset")
    if state == OWNER and newest is not None and log_end is not None and hasattr(store, "list_remote_log_segments"):
        # The claim is this data dir's, but the copies made under it reach past its log end: an older copy of the
        # data dir that made them (tiered.ownership.OwnershipGuard.renew does not claim anew there).
        copies = store.list_remote_log_segments(tip)
        why = behind(partition_dir.name, copies, newest.lineage, log_end)
        if why is not None:
            # The log end was read before the remote tier was listed: beside a running tiered run, segments rolled
            # and copied meanwhile pass it (a helper's pass: BEHIND ITS REMOTE DATA, exit 1, on a healthy data dir).
            # Read now, after the listing, it passes every copy listed unless the data dir is behind indeed.
            now = _log_end_now(partition_dir)
            why = behind(partition_dir.name, copies, newest.lineage, now) if now is not None and now > log_end else why
        if why is not None:
            state, detail = "behind", why
    return {
        "state": state,
        "owner_epoch": newest.owner_epoch if newest is not None else None,
        "owner": newest.describe() if newest is not None else None,
        "claimed_epoch": local.owner_epoch if local.claimed else None,
        # (lost: from this offset on, this data dir's records are not the partition's)
        "diverged_at": diverged_at(newest.lineage, local.owner_epoch) if state == "lost" and newest else None,
        "detail": detail,
    }


def _log_end_now(partition_dir: Path) -> int | None:
    """The partition's log end read from its files now (its newest segment's), None without a segment."""
    bases = [int(p.name[:20]) for p in partition_dir.glob("*.log") if len(p.name) == 24 and p.name[:20].isdigit()]
    return log_end_from_files(partition_dir, max(bases)) if bases else None


def log_end_from_files(partition_dir: Path, base_offset: int) -> int:
    """The offset after the last whole batch of segment ``base_offset``: start at the last sane offset index
    entry and walk the batch headers (``local.records.walk``, no CRC checks); a corrupt or torn tail ends it."""
    from local import filenames
    from local.errors import CorruptRecordError
    from local.records.walk import last_offset, walk_batches

    log_path = filenames.log_file(partition_dir, base_offset)
    size = log_path.stat().st_size
    position = _last_index_position(filenames.offset_index_file(partition_dir, base_offset), size)
    end = base_offset
    fd = os.open(log_path, os.O_RDONLY)
    try:
        for _, _, view, at in walk_batches(lambda at, buf: os.preadv(fd, [buf], at), size, position, whole=False,
                                           window=4096):
            batch_base, last = _BATCH_BASE.unpack_from(view, at)[0], last_offset(view, at)
            if batch_base < end or last < batch_base:
                break  # offsets out of order: recovery will cut the tail
            end = last + 1
    except CorruptRecordError:
        pass  # a corrupt tail: recovery will cut it
    finally:
        os.close(fd)
    return end


def _last_index_position(index_path: Path, log_size: int) -> int:
    """The position of the last entry of the leading run of sane offset index entries (0 when none).

    Read a piece at a time, up to the first entry that is not sane: after an unclean stop the active segment's index
    keeps its preallocated size (``segment.index.bytes``, 10 MiB by default), zeros past its entries, and reading
    all of it cost ~20 ms a partition (188 s for a data dir of 6,661 partitions)."""
    from local.errors import KafkaStorageError
    from local.index import detect_entry_size

    try:
        entry_size = detect_entry_size(index_path, 8)
        fd = os.open(index_path, os.O_RDONLY)
    except (KafkaStorageError, OSError):
        return 0
    dtype = np.dtype([("rel", ">i4"), ("pos", ">i4" if entry_size == 8 else ">i8")])
    position, previous = 0, None  # the last sane entry's position, and that entry (rel, pos)
    at, count = 0, _INDEX_PIECE_ENTRIES
    try:
        while True:
            try:
                raw = os.pread(fd, count * entry_size, at)
            except OSError:
                return position
            entries = np.frombuffer(raw, dtype=dtype, count=len(raw) // entry_size)
            if entries.size == 0:
                return position
            rel = entries["rel"].astype(np.int64)
            pos = entries["pos"].astype(np.int64)
            bad = (rel < 0) | (pos < 0) | (pos >= log_size)
            bad[1:] |= (rel[1:] <= rel[:-1]) | (pos[1:] <= pos[:-1])
            if previous is not None:
                bad[0] |= bool(rel[0] <= previous[0] or pos[0] <= previous[1])
            hits = np.flatnonzero(bad)
            good = int(hits[0]) if hits.size else entries.size
            if good:
                previous = (int(rel[good - 1]), int(pos[good - 1]))
                position = previous[1]
            if hits.size or len(raw) < count * entry_size:
                return position
            at += len(raw)
            count = min(count * 2, _INDEX_PIECE_ENTRIES * 64)
    finally:
        os.close(fd)


_INDEX_PIECE_ENTRIES = 4096
"""The entries of an offset index read first by :func:`_last_index_position` (doubling up to 64 times that)."""


# ------------------------------------------------------------------------------------------------------------


def _bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _lag(remote: dict[str, Any] | None) -> str:
    if not remote:
        return "-"
    if not remote.get("tiered"):
        return "not tiered"
    if remote.get("copy_lag_segments") is None:
        return "-"  # (not copied from here: another data dir owns its remote data)
    return f"{remote['copy_lag_segments']} seg, {_bytes(remote['copy_lag_bytes'])}"


def _offset(value: int | None) -> str:
    return "-" if value is None else str(value)


def _write_pass(out: Any, report: dict[str, Any] | None) -> None:
    if not report:
        return
    import datetime

    when = datetime.datetime.fromtimestamp(int(report.get("finished_ms", 0)) / 1000, datetime.UTC)
    out.write(
        f"  last remote pass: {when:%Y-%m-%d %H:%M:%S} UTC, copied {report.get('segments_copied', 0)} segment(s) "
        f"({_bytes(int(report.get('bytes_copied', 0)))}), deleted {report.get('segments_deleted', 0)} remote "
        f"segment(s), {report.get('copy_errors', 0)} copy error(s)\n"
    )
    for message in report.get("errors") or []:
        out.write(f"    {message}\n")


def print_text(dirs: list[dict[str, Any]]) -> None:
    out = sys.stdout
    for d in dirs:
        out.write(f"data dir {d['path']}\n")
        for problem in d["problems"]:
            out.write(f"  PROBLEM: {problem}\n")
        if "clean_shutdown" not in d:
            continue
        if d["clean_shutdown"]:
            out.write("  last shutdown: clean\n")
        elif d["partitions"]:
            out.write("  last shutdown: unclean (segments after the recovery point will be recovered)\n")
        else:
            out.write("  last shutdown: none recorded (no partitions: nothing to recover)\n")
        load = d.get("last_load")
        if load:
            parts = load.get("partitions", {})
            recovered = sum(int(p.get("segments_recovered", 0)) for p in parts.values())
            truncated = sum(int(p.get("bytes_truncated", 0)) for p in parts.values())
            out.write(
                f"  last load: {len(parts)} partition(s) in {load.get('elapsed_ms', '?')} ms, {recovered} segment(s) "
                f"recovered, {truncated} byte(s) truncated\n"
            )
        _write_pass(out, d.get("last_remote_pass"))
        header = ("PARTITION", "LOG START", "LOCAL LOG START", "LOG END", "RECOVERY POINT", "LOCAL SEGMENTS",
                  "LOCAL SIZE", "REMOTE SEGMENTS", "REMOTE SIZE", "REMOTE UP TO", "COPY LAG", "NOTES")
        rows = [header]
        for p in d["partitions"]:
            rp = p["recovery_point"]
            notes = _transient_notes(p["transient_files"])
            if "offline" in p:
                notes.insert(0, f"OFFLINE: {p['offline']}")
            if "dirty_ratio" in p:
                cleaned = "never cleaned" if p["cleaner_offset"] is None else f"cleaned below offset {p['cleaner_offset']}"
                notes.append(f"compacted: {cleaned}, dirty ratio {p['dirty_ratio']:.2f}")
            notes += p.get("notes", [])
            remote = p.get("remote")
            owner = (remote or {}).get("ownership") or {}
            if owner.get("state") == "lost" and owner.get("claimed_epoch") is None:
                notes.insert(0, f"OWNED BY ANOTHER DATA DIR: {owner['owner']} (never claimed here)")
            elif owner.get("state") == "lost":
                left = owner.get("diverged_at")
                notes.insert(0, f"OWNERSHIP LOST to {owner['owner']}" + (
                    f"; records from offset {left} on are only this data dir's" if left is not None else ""))
            elif owner.get("state") == "wrong_store":
                notes.insert(0, "WRONG STORE: it holds none of this partition's remote data")
            elif owner.get("state") == "damaged_owner_record":
                notes.insert(0, "OWNER RECORD DAMAGED: who owns its remote data cannot be told")
            elif owner.get("state") == "missing_owner_record":
                notes.insert(0, "OWNER RECORD MISSING: the next pass claims the partition again")
            elif owner.get("state") == "behind":
                notes.insert(0, "BEHIND ITS REMOTE DATA: the copies made under its claim pass its log end")
            highest = remote["highest_offset"] if remote else p.get("highest_remote_offset")
            rows.append(
                (p["partition"], _offset(p["log_start_offset"]), _offset(p.get("local_log_start_offset")),
                 _offset(p["log_end_offset"]), _offset(rp), str(p["segments"]), _bytes(p["size_bytes"]),
                 str(remote["segments"]) if remote else "-", _bytes(remote["size_bytes"]) if remote else "-",
                 "-" if highest is None or highest < 0 else str(highest),
                 _lag(remote),
                 "; ".join(notes))
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for row in rows:
            out.write("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() + "\n")


def _transient_notes(names: list[str]) -> list[str]:
    """``.deleted`` files wait out ``file.delete.delay.ms`` (Kafka's asynchronous delete) and are then removed by the
    process that deleted them, or at the next start: normal, not leftovers. ``.swap``/``.cleaned`` files are what an
    interrupted swap left; the next start finishes or removes them."""
    from local import filenames

    waiting = sum(1 for name in names if name.endswith(filenames.DELETED_FILE_SUFFIX))
    notes = [f"{waiting} deleted segment file(s) awaiting removal (file.delete.delay.ms)"] if waiting else []
    if len(names) > waiting:
        notes.append(f"{len(names) - waiting} leftover .swap/.cleaned file(s) (the next start finishes or removes them)")
    return notes
