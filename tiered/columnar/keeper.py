"""Keeping a partition's columnar copy in step with its remote segments (run by the partition's copy task).

After each run of the copy task (:mod:`tiered.rlm_copy`), for a topic with ``remote.log.columnar.enable=true``,
while this data dir owns the partition (the copy task has just checked :mod:`tiered.ownership`, and holds the
partition's lock): the rows of every finished remote segment after the manifest's last file go into Parquet, in
offset order. While the last file holds fewer than ``remote.log.columnar.file.bytes`` (topic config, default 128 MiB:
one Spark task a file at Spark's default ``maxPartitionBytes``) and its bytes still match the manifest's crc32c,
the new segment's rows go into a new file that first copies the last file's row groups, and it replaces the last
file (which is retired like a file below the log start: deleted ``remote.log.columnar.file.delete.delay.ms``, an
hour by default, later); otherwise they start a new file. A last file the rows would extend whose bytes do not
match (damaged, or gone) is retired before they are added, and its offsets are copied again with them. Reading
many small files costs Spark per file (a topic of 16 MiB segments read 0.8x as fast from a file per segment as from
one file a partition: bench/RESULTS.md); the price is rewriting a file up to ``file.bytes / segment.bytes`` times,
none at all with Kafka's default 1 GiB segments. A remote segment is always below the last stable offset (the copy
task copies nothing above it), so its transactions are resolved: records of aborted transactions are kept with
``aborted = true`` (the Kafka rule: a transactional batch whose producer has an aborted transaction with
``first_offset <= base offset <= last_offset``, from the transaction indexes of the remote segments from this one
on, then the local ones), which lets one copy serve both isolation levels. Control records are not rows (no consumer
sees them).

The bytes are read from the local segment while it is still there (it usually is: the copy has just happened),
else through the remote read path. Each file: the source's columns (:data:`tiered.spark.arrow_records.ARROW_SCHEMA`)
plus ``aborted``, one row group per ~64 Ki records in offset order, with Parquet statistics (partition, offset,
timestamp: Spark prunes row groups by them) and a CRC-32 in every page header, which every reader of the copy
checks (snappy has no checksum of its own: without it most flipped bits read back as other bytes, silently).

Files live in ``_files/``; the partition dir holds a hard link to each published one, made or removed right after
each change of the manifest (:func:`tiered.columnar.manifest.stored_file`), so a plain ``spark.read.parquet`` of the
directory reads each offset once at rest, and a read planned from the manifest keeps its files until they are
deleted. Retention: files wholly below the log start offset leave the manifest (``retired``) and are deleted
``remote.log.columnar.file.delete.delay.ms`` later (a read planned before still finds them); readers filter the rest
by the log start offset. Crash steps, each survivable (a SIGKILL at any of them:
``tests/crash/test_columnar_sigkill.py``): the temp file written (``written``), renamed to its final name
(``renamed``), the manifest naming it (``published``), the links brought in line (``shown``), files retired in the
manifest (``retired``), a retired file deleted (``deleted``). The first run of a partition in a process removes temp
files and files no manifest names, and brings the links in line (what a crash left).
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from local.checkpoint import fsync_dir, kafka_uuid_to_str
from tiered.columnar.manifest import (
    FILES_DIR,
    PARQUET_SUFFIX,
    TEMP_SUFFIX,
    ColumnarFile,
    ColumnarManifestError,
    Manifest,
    SegmentRows,
    file_name,
    footer_crc32c,
    partition_dir,
    published_file,
    read_manifest,
    stored_file,
    write_manifest,
)
from tiered.errors import NotPartitionOwnerError, RemoteStoreMismatchError

if TYPE_CHECKING:
    import pyarrow as pa

    from local.log import Log
    from tiered.rlm_parts import RemoteTierParts
    from tiered.rsm import RemoteLogSegmentMetadata, TopicIdPartition

logger = logging.getLogger(__name__)

ABORTED = "aborted"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_TRANSACTIONAL = 0x10
# Columns whose values repeat (keys often do); offsets, timestamps, values and headers are left plain: trying a
# dictionary on them and falling back made writing a file ~1.7x slower for nothing (bench/RESULTS.md).
_DICTIONARY_COLUMNS = ["key", "topic", "partition", "timestampType", "leaderEpoch"]
ReadRange = Callable[["RemoteLogSegmentMetadata", int, int], "bytes | memoryview"]


def columnar_schema() -> pa.Schema:
    """The Parquet files' schema: the source's columns, then ``aborted``."""
    import pyarrow as pa

    from tiered.spark.arrow_records import ARROW_SCHEMA

    return ARROW_SCHEMA.append(pa.field(ABORTED, pa.bool_(), nullable=False))


@dataclass
class ColumnarPass:
    """What one run did: files written (their rows and bytes, and the seconds it took; ``files_merged``: of them, those
    that took the last file's rows too), retired and deleted."""

    files_written: int = 0
    files_merged: int = 0
    rows: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    files_retired: int = 0
    files_deleted: int = 0


class ColumnarKeeper:
    """Writes the columnar copies under ``root`` (see the module docstring); one per RemoteLogManager, called by each
    partition's copy task under that task's lock (so one run per partition at a time)."""

    def __init__(self, root: Path, parts: RemoteTierParts, read_range: ReadRange, *, refusal: str | None = None) -> None:
        self.root = root
        # Why no copy may be kept under this broker config (encrypted remote segments); logged once per partition.
        self.refusal = refusal
        self.parts = parts
        self._read_range = read_range
        self._swept: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        # One change of a partition's manifest at a time: the copy task's keep() and the expiration task's
        # follow_log_start() both read, change and replace it.
        self._partitions: dict[tuple[str, int], threading.Lock] = {}
        # A seam for crash tests: called with the name of each step once it is done (see the module docstring).
        self.on_step: Callable[[str], None] = lambda step: None

    def _partition_lock(self, log: Log) -> threading.Lock:
        with self._lock:
            return self._partitions.setdefault((log.topic, log.partition), threading.Lock())

    def forget(self, tip: TopicIdPartition) -> None:
        """The partition's topic was deleted: its copy goes with it (Kafka's DeleteTopics removes a topic's data; a
        copy left behind stayed published, so a read of the directory returned the deleted topic's rows, for good
        unless a topic of the same name came again). Only a copy of this topic id; a failure is logged."""
        directory = partition_dir(self.root, tip.topic, tip.partition)
        with self._lock:
            lock = self._partitions.setdefault((tip.topic, tip.partition), threading.Lock())
        with lock:
            try:
                found = read_manifest(directory)
            except Exception as exc:  # a damaged manifest: not known to be this topic's, left for the operator
                logger.warning("columnar copy of deleted %s-%d not removed: %s", tip.topic, tip.partition, exc)
                return
            if found is None or found.topic_id != kafka_uuid_to_str(tip.topic_id):
                return
            try:
                shutil.rmtree(directory)
            except OSError as exc:
                logger.warning("columnar copy of deleted %s-%d not removed: %s", tip.topic, tip.partition, exc)
                return
            with self._lock:
                self._swept.discard((tip.topic, tip.partition))
            logger.info("columnar copy of %s-%d removed with its deleted topic", tip.topic, tip.partition)

    def follow_log_start(self, log: Log, tip: TopicIdPartition) -> ColumnarPass:
        """Retire the files wholly below the log start offset now (and delete those due): the expiration task calls
        it after it moved the log start, so they leave the manifest in the same pass, not at the copy task's next
        run. Nothing when the partition's keep() is running: it follows the log start again as it ends."""
        result = ColumnarPass()
        directory = partition_dir(self.root, log.topic, log.partition)
        lock = self._partition_lock(log)
        if self.refusal is not None or not lock.acquire(blocking=False):
            return result
        try:
            found = read_manifest(directory)
            if found is not None and found.topic_id == kafka_uuid_to_str(tip.topic_id):
                self._follow_retention(directory, found, found, log, self.parts.time.milliseconds(), result)
        finally:
            lock.release()
        return result

    def keep(self, log: Log, tip: TopicIdPartition, stopping: threading.Event | None = None) -> ColumnarPass:
        with self._partition_lock(log):
            return self._keep(log, tip, stopping)

    def _keep(self, log: Log, tip: TopicIdPartition, stopping: threading.Event | None) -> ColumnarPass:
        result = ColumnarPass()
        if self.refusal is not None:
            with self._lock:
                first = (log.topic, log.partition) not in self._swept
                self._swept.add((log.topic, log.partition))
            if first:
                logger.error("no columnar copy of %s: %s", log.name, self.refusal)
            return result
        directory = partition_dir(self.root, log.topic, log.partition)
        (directory / FILES_DIR).mkdir(parents=True, exist_ok=True)
        topic_id = kafka_uuid_to_str(tip.topic_id)
        now = self.parts.time.milliseconds()
        found = read_manifest(directory)
        if found is not None and (found.topic, found.partition) != (log.topic, log.partition):
            raise ColumnarManifestError(f"{directory}: its manifest is the copy of {found.topic}-{found.partition}, "
                                        f"not of {log.name}: not kept (tiered verify reports it)")
        m = found if found is not None else Manifest(log.topic, log.partition, topic_id)
        if m.topic_id != topic_id:  # the topic was deleted and made again: its old copy goes
            m = replace(Manifest(log.topic, log.partition, topic_id), retired=m.retire_all(now).retired)
        self._sweep_once(directory, m, log)
        m = self._follow_retention(directory, m, found, log, now, result)
        segments = self.parts.finished_segments(tip)
        intact: set[str] = set()
        if any(self._adds(md, m, log) for md in segments):
            # Ownership checked again before the copy grows under this data dir's epoch: a copy of its own that
            # finished after another data dir's claim (claimed between its last check and its FINISHED event) is
            # still in its view, and the new owner's keeper would never replace the rows it put past the handover.
            try:
                self.parts.ownership.ensure_owner(log, tip)
            except (NotPartitionOwnerError, RemoteStoreMismatchError):
                return result  # (the guard says it)
            segments = self.parts.finished_segments(tip)  # (the lineage of the claim it found)
            m = self._heal_last(directory, log, m, result, intact)
        for md in segments:
            if stopping is not None and stopping.is_set():
                break
            nxt = m.next_offset
            if not self._adds(md, m, log):
                continue
            if nxt is not None and md.start_offset != nxt:
                # A gap (the copy fell behind remote retention): the files before it go, the copy restarts here.
                logger.warning("columnar copy of %s: remote segment %d-%d does not follow offset %d; starting over",
                               log.name, md.start_offset, md.end_offset, nxt - 1)
                result.files_retired += len(m.files)
                m = m.retire_all(self.parts.time.milliseconds())
            started = time.perf_counter()
            last = self._extendable(directory, log, m, intact)
            f = self._write_file(directory, log, tip, md, last)
            intact.add(f.name)  # (its crc32c computed as it was written: the next segment's rows may extend it)
            if last is not None:
                m = m.with_last_replaced(f, self.parts.time.milliseconds())
                result.files_merged += 1
            else:
                m = m.with_file(f)
            m = replace(m, owner_epoch=log.remote_log_state.owner_epoch)  # (this data dir owns the partition)
            try:
                write_manifest(directory, m)
            except BaseException:
                self._discard_unpublished(directory, f, log)
                raise
            self.on_step("published")
            self._show(directory, m)
            result.files_written += 1
            result.rows += f.segments[-1].rows
            result.bytes_written += f.size
            result.seconds += time.perf_counter() - started
            logger.info("columnar copy of %s: offsets %d-%d in %s (%d rows, %d bytes)%s", log.name,
                        md.start_offset, md.end_offset, f.name, f.rows, f.size,
                        f" with the rows of {last.name}, retired" if last is not None else "")
        # The files replaced by merges (deleted now when the delay is 0), and those below a log start the expiration
        # task moved while this ran (its follow_log_start() found the partition busy).
        m = self._follow_retention(directory, m, m, log, self.parts.time.milliseconds(), result)
        return result

    @staticmethod
    def _adds(md: RemoteLogSegmentMetadata, m: Manifest, log: Log) -> bool:
        """Whether the copy would take ``md`` in: at or past the log start, and past what the manifest holds."""
        nxt = m.next_offset
        return not (md.end_offset < log.log_start_offset or (nxt is not None and md.end_offset < nxt))

    def _extendable(self, directory: Path, log: Log, m: Manifest, intact: set[str]) -> ColumnarFile | None:
        """The last file, when the next segment's rows should go into a copy of it (module docstring); ``intact``:
        the files whose bytes this pass found (or wrote) as the manifest names them."""
        if not m.files or m.files[-1].size >= log.config.remote_log_columnar_file_bytes:
            return None
        last = m.files[-1]
        if last.name not in intact:
            damage = self._damage(directory, last)
            if damage is not None:
                logger.error("columnar copy of %s: %s %s: not copied into a larger file (tiered verify reports it); "
                             "the next rows start a new file", log.name, last.name, damage)
                return None
        return last

    def _heal_last(self, directory: Path, log: Log, m: Manifest, result: ColumnarPass, intact: set[str]) -> Manifest:
        """Before new rows are added: a last file that the next rows would extend (smaller than
        ``remote.log.columnar.file.bytes``), whose bytes are not the ones the manifest names (damaged, or missing),
        is retired, and its offsets are copied again from the remote segments with the new ones. (Otherwise the
        copy kept it for good, and every read planned over it failed naming it.) A full file is checked by
        ``tiered verify`` only: reading it at every pass would cost as much as the copy."""
        if not m.files or m.files[-1].size >= log.config.remote_log_columnar_file_bytes:
            return m
        last = m.files[-1]
        damage = self._damage(directory, last)
        if damage is None:
            intact.add(last.name)
            return m
        logger.error("columnar copy of %s: %s %s: retired; its offsets %d-%d are copied again from the remote "
                     "segments", log.name, last.name, damage, last.base_offset, last.end_offset)
        healed = m.retire_last(self.parts.time.milliseconds())
        write_manifest(directory, healed)
        self.on_step("retired")
        self._show(directory, healed)
        result.files_retired += 1
        return healed

    @staticmethod
    def _damage(directory: Path, f: ColumnarFile) -> str | None:
        """What is wrong with file ``f``'s bytes (None: they have the manifest's crc32c)."""
        from local.crc import crc32c

        crc = 0
        try:
            with open(published_file(directory, f.name), "rb") as fh:
                while chunk := fh.read(8 * 1024 * 1024):
                    crc = crc32c(chunk, crc)
        except OSError as exc:
            return f"cannot be read ({exc})"
        if crc != f.crc32c:
            return f"has crc32c {crc:#010x}, the manifest says {f.crc32c:#010x}"
        return None

    def _discard_unpublished(self, directory: Path, f: ColumnarFile, log: Log) -> None:
        """After the manifest naming ``f`` failed to be written: remove ``f`` unless the manifest names it after all
        (the write failed after its rename). Otherwise a process whose manifest writes keep failing (a partition
        dir made read-only) would leave a new whole file at every pass until it restarts (the sweep of files no
        manifest names runs once a process)."""
        try:
            current = read_manifest(directory)
        except (OSError, ColumnarManifestError):
            return  # not known: the next process's sweep decides
        if current is None or f.name not in current.names():
            stored_file(directory, f.name).unlink(missing_ok=True)
            logger.info("columnar copy of %s: removed %s, which no manifest names", log.name, f.name)

    # ------------------------------------------------------------------------------------------------------
    def _sweep_once(self, directory: Path, m: Manifest, log: Log) -> None:
        """At a partition's first run in this process: remove temp files and files no manifest names."""
        key = (log.topic, log.partition)
        with self._lock:
            if key in self._swept:
                return
            self._swept.add(key)
        known = m.names()
        files = directory / FILES_DIR
        for path in directory.iterdir():  # a copy made before _files/: its files move there (the links stay)
            if path.suffix == PARQUET_SUFFIX and path.name in known and not (files / path.name).exists():
                os.link(path, files / path.name)
        for path in files.iterdir():
            name = path.name
            if name.endswith(TEMP_SUFFIX) or (name.endswith(PARQUET_SUFFIX) and name not in known):
                logger.info("columnar copy of %s: removing %s (left by a crash)", log.name, name)
                path.unlink(missing_ok=True)
        self._show(directory, m)

    def _show(self, directory: Path, m: Manifest) -> None:
        """The partition dir's links made to be the manifest's published files, no more, no fewer (module
        docstring): what ``spark.read.parquet`` of the directory reads."""
        published = {f.name for f in m.files}
        changed = False
        for path in directory.iterdir():
            if path.suffix == PARQUET_SUFFIX and path.name not in published:
                path.unlink(missing_ok=True)
                changed = True
        for name in sorted(published):
            if not (directory / name).exists():
                try:
                    os.link(stored_file(directory, name), directory / name)
                except FileExistsError:
                    pass
                except FileNotFoundError:  # damage (tiered verify names it): nothing to show
                    logger.error("columnar copy: %s is missing; the manifest lists it", stored_file(directory, name))
                changed = True
        if changed:
            fsync_dir(directory)
            self.on_step("shown")

    def _follow_retention(self, directory: Path, m: Manifest, found: Manifest | None, log: Log, now: int,
                          result: ColumnarPass) -> Manifest:
        retired = m.retire(log.log_start_offset, now)
        result.files_retired += len(retired.retired) - len(m.retired)
        if retired != found:
            write_manifest(directory, retired)
            self.on_step("retired")
            self._show(directory, retired)
        due = {r.name for r in retired.retired if r.at_ms + log.config.remote_log_columnar_file_delete_delay_ms <= now}
        if not due:
            return retired
        for name in sorted(due):
            stored_file(directory, name).unlink(missing_ok=True)
            self.on_step("deleted")
        fsync_dir(directory / FILES_DIR)
        result.files_deleted += len(due)
        left = retired.without_retired(due)
        write_manifest(directory, left)
        return left

    def _write_file(self, directory: Path, log: Log, tip: TopicIdPartition, md: RemoteLogSegmentMetadata,
                    prefix: ColumnarFile | None) -> ColumnarFile:
        """A file of ``md``'s rows, after ``prefix``'s row groups (copied as they are) when it is given."""
        from local.crc import crc32c

        try:
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise ImportError(f"the columnar copy needs pyarrow ({exc}): pip install 'tiered[columnar]'") from exc
        base = prefix.base_offset if prefix is not None else md.start_offset
        name = file_name(base, kafka_uuid_to_str(uuid.uuid4()))
        tmp = stored_file(directory, f".{name}{TEMP_SUFFIX}")
        rows = 0
        try:
            with pq.ParquetWriter(tmp, columnar_schema(), compression="snappy", write_statistics=True,
                                  write_page_checksum=True, use_dictionary=_DICTIONARY_COLUMNS) as writer:
                if prefix is not None:
                    with pq.ParquetFile(published_file(directory, prefix.name), page_checksum_verification=True) as old:
                        for i in range(old.num_row_groups):  # one row group in memory at a time
                            writer.write_table(old.read_row_group(i))
                for rb in self._record_batches(log, tip, md):
                    writer.write_batch(rb)
                    rows += rb.num_rows
            crc, size = 0, 0
            with open(tmp, "rb") as fh:
                while chunk := fh.read(8 * 1024 * 1024):
                    crc = crc32c(chunk, crc)
                    size += len(chunk)
                os.fsync(fh.fileno())
            footer = footer_crc32c(tmp)
            self.on_step("written")
            os.rename(tmp, stored_file(directory, name))
            fsync_dir(directory / FILES_DIR)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self.on_step("renamed")
        segment = SegmentRows(kafka_uuid_to_str(md.remote_log_segment_id.id), md.start_offset, md.end_offset, rows)
        if prefix is None:
            return ColumnarFile(name, md.start_offset, md.end_offset, rows, size, crc, (segment,), footer)
        return ColumnarFile(name, base, md.end_offset, prefix.rows + rows, size, crc, (*prefix.segments, segment),
                            footer)

    def _record_batches(self, log: Log, tip: TopicIdPartition, md: RemoteLogSegmentMetadata) -> Iterator[pa.RecordBatch]:
        """The segment's records in the columnar schema (the aborted ones marked)."""
        from local.errors import CorruptRecordError
        from tiered.spark.arrow_records import ArrowBatchBuilder
        from tiered.spark.raw_batches import RawBatches

        builder = ArrowBatchBuilder(log.topic, log.partition, md.start_offset, md.end_offset + 1)
        aborted_txns: list[tuple[int, int, int]] | None = None  # looked up at the first transactional batch
        aborted_ranges: list[tuple[int, int]] = []
        with _segment_reader(log, md, self._read_range) as (read, where, size):
            raw = RawBatches(read, 0, size, md.end_offset + 1, where)
            while True:
                for rb in builder.add_runs(raw, transactional=False):  # the transactional ones are looked at below
                    yield _with_aborted(rb, aborted_ranges)
                pos = raw.position
                batch = raw.next_batch()
                if batch is None:
                    break
                if batch[16] == 2 and _I16.unpack_from(batch, 21)[0] & _TRANSACTIONAL:
                    if aborted_txns is None:
                        aborted_txns = self._aborted_transactions(log, tip, md)
                    base = _I64.unpack_from(batch, 0)[0]
                    pid = _I64.unpack_from(batch, 43)[0]
                    if any(p == pid and first <= base <= last for p, first, last in aborted_txns):
                        aborted_ranges.append((base, base + _I32.unpack_from(batch, 23)[0]))
                try:
                    out = builder.add(batch)
                except CorruptRecordError as exc:
                    raise CorruptRecordError(f"{where}: {exc} at position {pos}", position=pos) from exc
                for rb in out:
                    yield _with_aborted(rb, aborted_ranges)
            for rb in builder.flush():
                yield _with_aborted(rb, aborted_ranges)

    def _aborted_transactions(self, log: Log, tip: TopicIdPartition,
                              md: RemoteLogSegmentMetadata) -> list[tuple[int, int, int]]:
        """(producer id, first offset, last offset) of the aborted transactions over the segment's offsets: from the
        remote transaction indexes from this segment on, then the local ones (as a remote fetch collects them)."""
        found = self.parts.collect_aborted_transactions(log, tip, md.start_offset, md.end_offset + 1)
        return sorted({(t.producer_id, t.first_offset, t.last_offset) for t in found})


def _with_aborted(rb: pa.RecordBatch, ranges: list[tuple[int, int]]) -> pa.RecordBatch:
    import pyarrow as pa

    if not ranges:
        mask = np.zeros(rb.num_rows, np.bool_)
    else:
        offsets = rb.column("offset").to_numpy()
        starts = np.array([a for a, _ in ranges], np.int64)
        ends = np.array([b for _, b in ranges], np.int64)
        i = np.searchsorted(starts, offsets, side="right") - 1
        mask = (i >= 0) & (offsets <= ends[np.maximum(i, 0)])
    return pa.RecordBatch.from_arrays([*rb.columns, pa.array(mask)], schema=columnar_schema())


class _segment_reader:
    """(read(position, n), where, size) over the local segment when it is still there, else the remote one."""

    def __init__(self, log: Log, md: RemoteLogSegmentMetadata, read_range: ReadRange) -> None:
        self.log, self.md, self.read_range = log, md, read_range
        self.records: Any = None

    def __enter__(self) -> tuple[Callable[[int, int], bytes | memoryview], str, int | None]:
        from local.file_records import FileRecords

        log, md = self.log, self.md
        seg = log.segments.get(md.start_offset) if md.start_offset >= log.local_log_start_offset else None
        nxt = log.segments.higher_segment(md.start_offset) if seg is not None else None
        if seg is not None and nxt is not None and nxt.base_offset == md.end_offset + 1:
            try:
                self.records = FileRecords.open(seg.log.path, mutable=False)
            except FileNotFoundError:  # deleted by local retention meanwhile
                self.records = None
            if self.records is not None:
                return self.records.read, str(seg.log.path), md.segment_size_in_bytes
        where = f"remote segment {md.remote_log_segment_id} ({md.start_offset}-{md.end_offset})"
        return (lambda position, n: self.read_range(md, position, position + n)), where, md.segment_size_in_bytes

    def __exit__(self, *exc: object) -> None:
        if self.records is not None:
            self.records.close_handlers()
