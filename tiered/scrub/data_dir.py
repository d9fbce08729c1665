"""Scrubbing a local data dir: its own files (checkpoints, the clean-shutdown marker, feature levels) and every
partition dir in it (segments, indexes, snapshots, epoch checkpoint, ``partition.metadata``); see the package docs.

Files are opened ``O_RDONLY`` and read with ``os.pread``; nothing is mapped, locked, created or renamed.
"""

from __future__ import annotations

import os
from pathlib import Path

from local import filenames
from local.errors import KafkaStorageError
from local.index.entries import LARGE_OFFSET_ENTRY_SIZE
from tiered.scrub.batches import BatchScanner, Progress, no_progress, read_file_chunks
from tiered.scrub.files import (
    aborted_transactions,
    check_leader_epoch_checkpoint,
    check_offset_index,
    check_producer_snapshot,
    check_time_index,
    check_txn_index,
)
from tiered.scrub.report import DataDirReport, PartitionReport, Problem

DATA_DIR_CHECKPOINTS = (
    filenames.RECOVERY_POINT_CHECKPOINT_FILENAME,
    filenames.LOG_START_OFFSET_CHECKPOINT_FILENAME,
    filenames.REPLICATION_OFFSET_CHECKPOINT_FILENAME,
    "cleaner-offset-checkpoint",
)

TOPIC_CONFIG_FILENAME = "tiered-topic.properties"
"""The topic overrides ``LogManager`` persists per partition (``local.manager.TOPIC_CONFIG_FILENAME``; not imported
from there, which would load the whole engine)."""


def partition_dirs(data_dir: Path) -> list[tuple[Path, str, int]]:
    out = []
    for child in sorted(data_dir.iterdir()):
        try:
            topic, partition = filenames.parse_partition_dir_name(child.name)
        except ValueError:
            continue
        if child.is_dir():
            out.append((child, topic, partition))
    return out


def log_bytes(data_dir: Path) -> int:
    """The bytes of every segment ``.log`` under the data dir (the progress bar's total)."""
    total = 0
    for pdir, _topic, _partition in partition_dirs(data_dir):
        try:
            total += sum(entry.stat().st_size for entry in os.scandir(pdir)
                         if entry.name.endswith(filenames.LOG_FILE_SUFFIX) and entry.is_file())
        except OSError:
            continue  # gone or unreadable: the scrub of the partition says so
    return total


def scrub_data_dir_files(data_dir: Path) -> DataDirReport:
    from local.checkpoint import CleanShutdownFile, OffsetCheckpointFile
    from local.features import read_features

    report = DataDirReport(str(data_dir))
    marker = data_dir / filenames.CLEAN_SHUTDOWN_FILENAME
    report.clean_shutdown = marker.exists()
    if report.clean_shutdown:
        try:
            CleanShutdownFile(marker).read()
        except (KafkaStorageError, OSError, ValueError) as exc:
            report.problems.append(Problem("checkpoint", f"malformed clean-shutdown marker: {exc}", file=str(marker)))
    elif partition_dirs(data_dir):  # a dir without partitions has nothing to recover
        report.notes.append("no clean-shutdown marker: the next start recovers the segments after the recovery "
                            "point (a torn tail of the active segment is expected)")
    try:
        if read_features(data_dir).large_index_finalized:
            report.requested_entry_size = LARGE_OFFSET_ENTRY_SIZE
    except (KafkaStorageError, OSError, ValueError) as exc:
        report.problems.append(Problem("checkpoint", f"malformed feature levels: {exc}",
                                       file=str(data_dir / filenames.FEATURES_FILENAME)))
    for name in DATA_DIR_CHECKPOINTS:
        path = data_dir / name
        if not path.exists():
            continue
        try:
            report.checkpoints[name] = OffsetCheckpointFile(path).read()
        except (KafkaStorageError, OSError, ValueError) as exc:
            report.problems.append(Problem("checkpoint", f"malformed checkpoint: {exc}", file=str(path)))
    return report


def scrub_partition(pdir: Path, topic: str, partition: int, dir_report: DataDirReport, *,
                    progress: Progress = no_progress, check_content: bool = False) -> PartitionReport:
    """Scrub one partition dir (what is checked: the :mod:`tiered.scrub` docs); ``check_content``: digest its
    segments' records too (:attr:`PartitionReport.segment_content`)."""
    report = PartitionReport(topic, partition, data_dir=str(pdir.parent), check_content=check_content)
    _check_partition_files(pdir, report)
    logs: list[tuple[int, Path]] = []
    others: dict[str, list[Path]] = {}
    for entry in sorted(os.scandir(pdir), key=lambda e: e.name):
        if not entry.is_file():
            continue
        name = entry.name
        if name.endswith(filenames.DELETED_FILE_SUFFIX):  # Kafka's asynchronous delete: normal, not a leftover
            report.notes.append(f"{name} awaits removal (file.delete.delay.ms, or the next start)")
            continue
        if name.endswith(filenames.TRANSIENT_SUFFIXES) or name.endswith(filenames.TMP_FILE_SUFFIX):
            report.notes.append(f"leftover {name} (the next start finishes or removes it)")
            continue
        try:
            base = filenames.offset_from_file_name(name)
        except ValueError:
            continue
        suffix = name[20:]
        if suffix == filenames.LOG_FILE_SUFFIX:
            logs.append((base, Path(entry.path)))
        else:
            others.setdefault(suffix, []).append(Path(entry.path))
    last_base = logs[-1][0] if logs else None
    # After an unclean stop the next start recovers every segment from the one holding the recovery point on,
    # rebuilding their indexes: one still preallocated there (zeros past its entries: a roll or a close the stop
    # cut short) is what recovery is for, not damage.
    recovery_point = dir_report.checkpoints.get(filenames.RECOVERY_POINT_CHECKPOINT_FILENAME, {}).get(
        (topic, partition), 0)
    next_min = 0
    for i, (base, path) in enumerate(logs):
        active_unclean = base == last_base and not dir_report.clean_shutdown
        recovered = not dir_report.clean_shutdown and (i + 1 == len(logs) or logs[i + 1][0] > recovery_point)
        scan = _scrub_segment(pdir, base, path, report, next_min, active_unclean, dir_report, progress, recovered)
        if scan.next_offset is not None:
            next_min = scan.next_offset
        report.log_end_offset = scan.next_offset if scan.next_offset is not None else max(base, next_min)
    if logs:
        report.local_start_offset = logs[0][0]
    log_bases = {b for b, _ in logs}
    for suffix in filenames.INDEX_SUFFIXES:
        for path in others.get(suffix, []):
            if filenames.offset_from_file_name(path.name) not in log_bases:
                report.notes.append(f"{path.name} has no segment .log (the next start deletes it)")
    for path in others.get(filenames.PRODUCER_SNAPSHOT_FILE_SUFFIX, []):
        report.problems += check_producer_snapshot(_read(path, report), str(path), remote=False)
    _check_checkpoint_offsets(report, dir_report)
    _check_lost_offsets(pdir, report)
    return report


def _check_lost_offsets(pdir: Path, report: PartitionReport) -> None:
    """Every range a recovery recorded as lost (:mod:`local.lost_offsets`) at or above the log start: a problem naming
    the segment file it was cut out of. (A gap compaction left is no problem: nothing records it.)"""
    from local.errors import KafkaStorageError
    from local.lost_offsets import LostOffsetsFile

    record = LostOffsetsFile(pdir)
    try:
        entries = record.read()
    except (KafkaStorageError, OSError, ValueError) as exc:
        report.problems.append(Problem("checkpoint", f"malformed lost-offsets record: {exc}", file=str(record.path)))
        return
    start = report.log_start_offset if report.log_start_offset is not None else -1
    for entry in entries:
        if entry.last_offset < start:
            continue  # retention removed what was around it (the next writer drops the entry)
        report.problems.append(Problem(
            "lost_offsets", f"offsets {entry.first_offset}..{entry.last_offset} of {report.name} were lost: a recovery "
            f"found the segment damaged and cut it at byte {entry.position} (recorded in {record.path})",
            file=str(pdir / entry.segment), position=entry.position, offset=entry.first_offset))


def _read(path: Path, report: PartitionReport) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        report.problems.append(Problem("unreadable", f"cannot read: {exc}", file=str(path)))
        return b""


def _check_partition_files(pdir: Path, report: PartitionReport) -> None:
    from local.checkpoint import PartitionMetadataFile, kafka_uuid_to_str
    from local.remote_state import REMOTE_LOG_STATE_FILENAME, RemoteLogStateFile

    metadata = pdir / filenames.PARTITION_METADATA_FILENAME
    if metadata.exists():
        try:
            report.topic_id = kafka_uuid_to_str(PartitionMetadataFile.decode(_read(metadata, report), str(metadata)))
        except (KafkaStorageError, ValueError) as exc:
            report.problems.append(Problem("partition_metadata", str(exc), file=str(metadata)))
    remote = None
    if (pdir / REMOTE_LOG_STATE_FILENAME).exists():
        try:
            remote = RemoteLogStateFile(pdir).read()
        except (KafkaStorageError, OSError, ValueError):
            remote = None  # (reported where the remote state is checked)
    holds_remote = remote is not None and (remote.has_remote_data or remote.claimed)
    if holds_remote and not metadata.exists():
        report.problems.append(Problem(
            "partition_metadata", f"missing, but {REMOTE_LOG_STATE_FILENAME} says the partition has data in remote "
            "storage: its topic id, which names that data, is lost (restore the file; no command makes a new id "
            "for it)", file=str(metadata)))
    overrides = pdir / TOPIC_CONFIG_FILENAME
    readable = True
    if overrides.exists():
        from local.config import read_properties

        try:
            props = read_properties(overrides)
        except (KafkaStorageError, OSError, ValueError) as exc:
            report.problems.append(Problem("checkpoint", f"unreadable topic overrides: {exc}", file=str(overrides)))
            readable = False
        else:
            value = props.get("remote.storage.enable")
            report.remote_storage_enable = None if value is None else str(value).strip().lower() == "true"
            # Turned off the documented way (KIP-950): the remote data is being given up, or was; its claim stays.
            given_up = str(props.get("remote.log.delete.on.disable", "")).strip().lower() == "true"
            if given_up and report.remote_storage_enable is not True:
                holds_remote = False
    if holds_remote and readable and report.remote_storage_enable is not True:
        report.problems.append(Problem(
            "topic_config", f"{REMOTE_LOG_STATE_FILENAME} says the partition has data in remote storage, but its topic "
            f"overrides ({TOPIC_CONFIG_FILENAME}{'' if overrides.exists() else ': missing'}) do not set "
            "remote.storage.enable=true: no copy or retention runs on it. Restore the file, or: tiered topics alter "
            f"--topic {pdir.name.rpartition('-')[0]} --add-config remote.storage.enable=true", file=str(overrides)))
    epochs = pdir / filenames.LEADER_EPOCH_CHECKPOINT_FILENAME
    if epochs.exists():
        report.problems += check_leader_epoch_checkpoint(_read(epochs, report), str(epochs), remote=False)


def _scrub_segment(pdir: Path, base: int, path: Path, report: PartitionReport, next_min: int, active_unclean: bool,
                   dir_report: DataDirReport, progress: Progress, recovered: bool = False) -> BatchScanner:
    scan = BatchScanner(str(path), remote=False, segment_base=base, min_offset=max(base, next_min), total_size=None,
                        progress=progress, content=report.check_content)
    try:
        size = scan_file(scan, path)
    except OSError as exc:  # deleted meanwhile (a live broker's retention), permissions, I/O errors
        report.problems.append(Problem("unreadable", f"cannot read: {exc}", file=str(path), position=scan.bytes_seen))
        report.segments += 1
        return scan  # its indexes are not judged against a segment not read
    report.segments += 1
    report.batches += len(scan.positions)
    report.bytes += size
    if active_unclean and scan.stopped_at is None and scan.problems and all(
        p.kind == "truncated_segment" for p in scan.problems
    ):
        report.notes.append(f"{path}: torn tail of {size - scan.valid_end} bytes at position {scan.valid_end} "
                            "(unflushed when the broker stopped; the next start truncates it)")
    else:
        report.problems += scan.problems
        report.count_records(base, scan)

    index = filenames.offset_index_file(pdir, base)
    if index.exists():
        problems, notes = check_offset_index_file(index, base, scan, dir_report.requested_entry_size,
                                                  zero_tail_ok=recovered)
        report.problems += problems
        report.notes += notes
    else:
        report.notes.append(f"{index.name} is missing (the next start rebuilds it)")
    time_index = filenames.time_index_file(pdir, base)
    if time_index.exists():
        problems, notes = check_time_index(_read(time_index, report), base, scan, str(time_index), remote=False,
                                           zero_tail_ok=recovered)
        report.problems += problems
        report.notes += notes
    txn_index = filenames.transaction_index_file(pdir, base)
    aborted: tuple[tuple[int, int, int], ...] | None = ()
    if txn_index.exists():
        segment_last = scan.lasts[-1] if scan.lasts else None
        known = len(report.problems)
        data = _read(txn_index, report)  # (b"" and a problem when it cannot be read)
        report.problems += check_txn_index(data, base, segment_last, str(txn_index), remote=False)
        aborted = aborted_transactions(data) if len(report.problems) == known else None
    if report.check_content:
        report.segment_aborted[base] = aborted
    return scan


def scan_file(scan: BatchScanner, path: Path) -> int:
    """Feed the whole segment file ``path`` to ``scan`` and finish it; its size. Raises OSError (not finished)."""
    size = scan.total_size = path.stat().st_size
    for chunk in read_file_chunks(path, size):
        scan.feed(chunk)
    scan.finish()
    return size


def check_offset_index_file(index: Path, base: int, scan: BatchScanner, requested_entry_size: int, *,
                            zero_tail_ok: bool) -> tuple[list[Problem], list[str]]:
    """Problems and notes of the local offset index file ``index`` against its segment's scanned batches: the one
    check of an index file, so ``tiered verify`` and ``tiered dump --verify`` judge a file alike."""
    from local.errors import CorruptIndexError
    from local.index import detect_entry_size

    try:
        entry_size = detect_entry_size(index, requested_entry_size)
        with open(index, "rb") as f:
            data = f.read()
    except CorruptIndexError as exc:
        return [Problem("offset_index", str(exc), file=str(index))], []
    except OSError as exc:
        return [Problem("unreadable", f"cannot read: {exc}", file=str(index))], []
    return check_offset_index(data, entry_size, base, scan, str(index), remote=False, zero_tail_ok=zero_tail_ok)


def _check_checkpoint_offsets(report: PartitionReport, dir_report: DataDirReport) -> None:
    key = (report.topic, report.partition)
    end = report.log_end_offset
    for name, what in ((filenames.RECOVERY_POINT_CHECKPOINT_FILENAME, "recovery point"),
                       (filenames.LOG_START_OFFSET_CHECKPOINT_FILENAME, "log start offset")):
        value = dir_report.checkpoints.get(name, {}).get(key)
        if value is None:
            continue
        if what == "log start offset":
            report.log_start_offset = value
        if end is not None and value > end:
            consequence = "flushed data is missing" if what == "recovery point" else "the log start is past its end"
            report.problems.append(Problem(
                "checkpoint", f"{report.name}: {what} {value} is past the log end offset {end} ({consequence})",
                file=str(Path(dir_report.path) / name), offset=value))
