"""Producer state: idempotent producers' sequences and open transactions (Kafka's ``ProducerStateManager``).

Snapshot file ``<20-digit offset>.snapshot`` (big-endian, CRC-32C over bytes [6, end))::

    version i16 (1) | crc u32 | count i32 | entries
    entry (46 bytes): producerId i64 | epoch i16 | lastSequence i32 | lastOffset i64 | offsetDelta i32 |
                      timestamp i64 | coordinatorEpoch i32 | currentTxnFirstOffset i64 (-1 none)

Snapshots are taken on every roll and on close, named by the map end offset. At start the latest one at or
below the log end is loaded and the log replayed from there; a corrupt one (bad CRC or version) is deleted with
a warning and the previous one used.
"""

from __future__ import annotations

import bisect
import enum
import logging
import os
import struct
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local import filenames
from local.checkpoint import atomic_write
from local.crc import crc32c
from local.errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)
from local.records.batch import ControlRecordType, EndTransactionMarker
from local.records.constants import INT32_MAX

logger = logging.getLogger(__name__)

SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">hIi")  # version | crc | count
_ENTRY = struct.Struct(">qhiqiqiq")  # 46 bytes, see the module docstring
NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1


class AppendOrigin(enum.Enum):
    CLIENT = "client"
    REPLICATION = "replication"
    COORDINATOR = "coordinator"


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1 = none


def encode_snapshot(entries: Iterable[SnapshotEntry]) -> bytes:
    items = list(entries)
    buf = bytearray(_HEADER.size + _ENTRY.size * len(items))
    _HEADER.pack_into(buf, 0, SNAPSHOT_VERSION, 0, len(items))
    pos = _HEADER.size
    for e in items:
        _ENTRY.pack_into(buf, pos, e.producer_id, e.producer_epoch, e.last_sequence, e.last_offset, e.offset_delta,
                         e.timestamp, e.coordinator_epoch, e.current_txn_first_offset)
        pos += _ENTRY.size
    struct.pack_into(">I", buf, 2, crc32c(memoryview(buf)[6:]))
    return bytes(buf)


def decode_snapshot(data: bytes, source: str = "snapshot") -> list[SnapshotEntry]:
    if len(data) < _HEADER.size:
        raise CorruptSnapshotError(f"{source}: {len(data)} bytes is shorter than the snapshot header", path=source)
    version, crc, count = _HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"{source}: unknown snapshot version {version}", path=source)
    computed = crc32c(memoryview(data)[6:])
    if computed != crc:
        raise CorruptSnapshotError(f"{source}: crc mismatch (stored {crc:#010x}, computed {computed:#010x})", path=source)
    if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"{source}: {count} entries do not fit {len(data)} bytes", path=source)
    return [SnapshotEntry(*_ENTRY.unpack_from(data, _HEADER.size + i * _ENTRY.size)) for i in range(count)]


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return _decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


def _decrement_sequence(seq: int, dec: int) -> int:
    if seq < dec:
        return INT32_MAX - (dec - seq) + 1
    return seq - dec


@dataclass(slots=True)
class TxnMetadata:
    producer_id: int
    first_offset: int
    last_offset: int | None = None


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(self.producer_id, self.producer_epoch, self.coordinator_epoch, self.last_timestamp,
                                  self.current_txn_first_offset, deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN))

    def is_empty(self) -> bool:
        return not self.batches

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def find_duplicate_batch(self, batch: Any) -> BatchMetadata | None:
        if batch.producer_epoch != self.producer_epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == batch.base_sequence and meta.last_seq == batch.last_sequence:
                return meta
        return None


class ProducerAppendInfo:
    """The producer-state effect of one append, validated before anything is written (Kafka's)."""

    def __init__(self, producer_id: int, current: ProducerStateEntry, origin: AppendOrigin) -> None:
        self.producer_id = producer_id
        self.current = current
        self.origin = origin
        self.updated = current.copy()
        self.started_transactions: list[TxnMetadata] = []

    def _check_epoch(self, epoch: int, offset: int) -> None:
        if epoch < self.updated.producer_epoch:
            message = (f"epoch {epoch} of producer {self.producer_id} at offset {offset} is older than the current "
                       f"epoch {self.updated.producer_epoch}")
            if self.origin is AppendOrigin.REPLICATION:
                logger.warning(message)
            else:
                raise InvalidProducerEpochError(message, producer_id=self.producer_id, offset=offset)

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        if epoch != self.updated.producer_epoch:
            if first_seq != 0 and self.updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"invalid sequence {first_seq} for the new epoch {epoch} of producer {self.producer_id} at offset "
                    f"{offset}: a new epoch starts at 0", producer_id=self.producer_id, offset=offset)
            return
        if not self.updated.is_empty():
            current_last = self.updated.last_seq
        elif epoch == self.current.producer_epoch:
            current_last = self.current.last_seq
        else:
            current_last = NO_SEQUENCE
        in_sequence = first_seq == current_last + 1 or (first_seq == 0 and current_last == INT32_MAX)
        if not (self.current.producer_epoch == NO_PRODUCER_EPOCH or in_sequence):
            raise OutOfOrderSequenceError(
                f"out of order sequence number for producer {self.producer_id} at offset {offset}: {first_seq} "
                f"(incoming), {current_last} (current end)", producer_id=self.producer_id, offset=offset)

    def append_batch(self, batch: Any, first_offset_metadata: Any = None) -> CompletedTxn | None:
        if batch.is_control_batch:
            rec = next(batch.records())
            kind = ControlRecordType.parse(rec.key)
            if kind not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
                return None  # other control records do not touch producer state
            marker = EndTransactionMarker.decode(kind, rec.value)
            return self.append_end_txn_marker(marker, batch.producer_epoch, batch.base_offset, batch.max_timestamp)
        self.append_data_batch(batch.producer_epoch, batch.base_sequence, batch.last_sequence, batch.max_timestamp,
                               batch.base_offset, batch.last_offset, batch.is_transactional)
        return None

    def append_data_batch(self, epoch: int, first_seq: int, last_seq: int, timestamp: int, first_offset: int,
                          last_offset: int, is_transactional: bool) -> None:
        self._check_epoch(epoch, first_offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        self.updated.add_batch(epoch, last_seq, last_offset, last_offset - first_offset, timestamp)
        if is_transactional:
            if self.updated.current_txn_first_offset is None:
                self.updated.current_txn_first_offset = first_offset
                self.started_transactions.append(TxnMetadata(self.producer_id, first_offset))
        elif self.updated.current_txn_first_offset is not None:
            raise InvalidTxnStateError(
                f"expected a transactional write from producer {self.producer_id} at offset {first_offset}",
                producer_id=self.producer_id, offset=first_offset)

    def append_end_txn_marker(self, marker: EndTransactionMarker, epoch: int, offset: int, timestamp: int) -> CompletedTxn:
        self._check_epoch(epoch, offset)
        if self.updated.coordinator_epoch > marker.coordinator_epoch and self.origin is not AppendOrigin.REPLICATION:
            raise InvalidTxnStateError(
                f"transaction marker of producer {self.producer_id} at offset {offset} has coordinator epoch "
                f"{marker.coordinator_epoch}, below {self.updated.coordinator_epoch}", producer_id=self.producer_id)
        first = self.updated.current_txn_first_offset if self.updated.current_txn_first_offset is not None else offset
        if epoch > self.updated.producer_epoch:
            self.updated.batches.clear()
            self.updated.producer_epoch = epoch
        self.updated.coordinator_epoch = marker.coordinator_epoch
        self.updated.last_timestamp = timestamp
        self.updated.current_txn_first_offset = None
        return CompletedTxn(self.producer_id, first, offset, marker.control_type is ControlRecordType.ABORT)


class ProducerStateManager:
    """See the module docstring."""

    def __init__(self, partition_dir: str | os.PathLike[str], *, max_transaction_timeout_ms: int = 900_000,
                 producer_id_expiration_ms: int = 86_400_000, time: Callable[[], int] | None = None) -> None:
        import time as _t

        self.dir = Path(partition_dir)
        self.max_transaction_timeout_ms = max_transaction_timeout_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._time = time or (lambda: _t.time_ns() // 1_000_000)
        self.producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, TxnMetadata] = {}  # first offset -> txn
        self._unreplicated: dict[int, TxnMetadata] = {}
        self.map_end_offset = 0
        self.last_snap_offset = 0
        self._snapshots: list[int] = self._list_snapshots()

    # Snapshot files ------------------------------------------------------------------------------------
    def _list_snapshots(self) -> list[int]:
        out: list[int] = []
        try:
            entries = os.scandir(self.dir)  # names, not Paths: a partition dir can hold 30,000 segment files
        except (FileNotFoundError, NotADirectoryError):
            return out
        with entries:
            for entry in entries:
                if entry.name.endswith(filenames.PRODUCER_SNAPSHOT_FILE_SUFFIX) and entry.is_file():
                    try:
                        out.append(filenames.offset_from_file_name(entry.name))
                    except ValueError:
                        continue
        return sorted(out)

    def latest_snapshot_offset(self) -> int | None:
        return self._snapshots[-1] if self._snapshots else None

    def snapshot_offsets(self) -> list[int]:
        return list(self._snapshots)

    def fetch_snapshot(self, offset: int) -> Path | None:
        path = filenames.producer_snapshot_file(self.dir, offset)
        return path if offset in self._snapshots and path.exists() else None

    def _remove_snapshot(self, offset: int) -> None:
        i = bisect.bisect_left(self._snapshots, offset)
        if i < len(self._snapshots) and self._snapshots[i] == offset:
            del self._snapshots[i]
        filenames.producer_snapshot_file(self.dir, offset).unlink(missing_ok=True)

    def remove_snapshot(self, offset: int) -> None:
        """Delete the snapshot at ``offset`` (a segment that left the log took it along), if there is one."""
        self._remove_snapshot(offset)

    def delete_snapshots_before(self, offset: int) -> None:
        for snap in [s for s in self._snapshots if s < offset]:
            self._remove_snapshot(snap)

    def remove_straggling_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """Kafka's removeStraySnapshots: keep only snapshots at segment bases, plus the newest stray one if it is
        above every segment base (the snapshot taken at close)."""
        self._snapshots = self._list_snapshots()  # recovery's throwaway managers may have deleted some on disk
        bases = set(segment_base_offsets)
        max_base = max(bases) if bases else None
        latest_stray: int | None = None
        for snap in list(self._snapshots):
            if snap not in bases:
                if latest_stray is not None:
                    self._remove_snapshot(latest_stray)
                latest_stray = snap
        if latest_stray is not None and max_base is not None and latest_stray < max_base:
            self._remove_snapshot(latest_stray)

    def take_snapshot(self, sync: bool = True) -> Path | None:
        """Write a snapshot at the map end offset unless one was already taken there; returns the file written.

        With ``sync=False`` the file is not fsynced: the caller flushes it later with
        :func:`local.checkpoint.fsync_file` (a roll does, on the scheduler, as Kafka's ``takeSnapshot(false)``).
        A snapshot torn by a crash before that is found corrupt at load and the previous one is used.
        """
        if self.map_end_offset == self.last_snap_offset and self.map_end_offset in self._snapshots:
            return None
        entries = [
            SnapshotEntry(pid, e.producer_epoch, e.last_seq, e.last_data_offset,
                          e.batches[-1].offset_delta if e.batches else 0, e.last_timestamp, e.coordinator_epoch,
                          -1 if e.current_txn_first_offset is None else e.current_txn_first_offset)
            for pid, e in self.producers.items()
        ]
        # No mkdir: a partition dir gone under a running log (a deleted or lost mount) is an I/O error that takes the
        # data dir offline (Kafka: NoSuchFileException), never a new empty dir that later loads as the partition.
        path = filenames.producer_snapshot_file(self.dir, self.map_end_offset)
        atomic_write(path, encode_snapshot(entries), sync=sync)
        if self.map_end_offset not in self._snapshots:
            bisect.insort(self._snapshots, self.map_end_offset)
        self.last_snap_offset = self.map_end_offset
        return path

    def _load_from_snapshot(self, log_start_offset: int, now: int) -> None:
        while self._snapshots:
            offset = self._snapshots[-1]
            path = filenames.producer_snapshot_file(self.dir, offset)
            try:
                entries = decode_snapshot(path.read_bytes(), str(path))
            except (CorruptSnapshotError, FileNotFoundError) as exc:
                logger.warning("failed to load producer snapshot %s (%s): deleting it and using the previous one", path, exc)
                self._remove_snapshot(offset)
                continue
            for e in entries:
                if self._is_expired(now, e.timestamp, e.current_txn_first_offset):
                    continue
                entry = ProducerStateEntry(e.producer_id, e.producer_epoch, e.coordinator_epoch, e.timestamp,
                                           None if e.current_txn_first_offset < 0 else e.current_txn_first_offset)
                if e.last_offset >= 0:
                    entry.batches.append(BatchMetadata(e.last_sequence, e.last_offset, e.offset_delta, e.timestamp))
                self.producers[e.producer_id] = entry
                if entry.current_txn_first_offset is not None:
                    self._ongoing[entry.current_txn_first_offset] = TxnMetadata(e.producer_id, entry.current_txn_first_offset)
            self.last_snap_offset = self.map_end_offset = offset
            return
        self.last_snap_offset = self.map_end_offset = log_start_offset

    def _is_expired(self, now: int, last_timestamp: int, txn_first: int) -> bool:
        return txn_first < 0 and now - last_timestamp >= self.producer_id_expiration_ms

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now: int) -> None:
        for snap in list(self._snapshots):
            if snap > log_end_offset or snap <= log_start_offset:
                self._remove_snapshot(snap)
        if log_end_offset != self.map_end_offset:
            self.producers.clear()
            self._ongoing.clear()
            self._unreplicated.clear()
            self._load_from_snapshot(log_start_offset, now)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def truncate_full_and_start_at(self, offset: int) -> None:
        self.producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        for snap in list(self._snapshots):
            self._remove_snapshot(snap)
        self.map_end_offset = self.last_snap_offset = offset

    truncate_fully_and_start_at = truncate_full_and_start_at

    # State -----------------------------------------------------------------------------------------------
    def is_empty(self) -> bool:
        return not self.producers and not self._unreplicated

    @property
    def active_producers(self) -> dict[int, ProducerStateEntry]:
        return dict(self.producers)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def prepare_update(self, producer_id: int, origin: AppendOrigin | str = AppendOrigin.CLIENT) -> ProducerAppendInfo:
        if isinstance(origin, str):
            origin = AppendOrigin[origin.upper()]
        current = self.producers.get(producer_id) or ProducerStateEntry(producer_id)
        return ProducerAppendInfo(producer_id, current, origin)

    def update(self, info: ProducerAppendInfo) -> None:
        self.producers[info.producer_id] = info.updated
        for txn in info.started_transactions:
            self._ongoing[txn.first_offset] = txn

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    def find_duplicate_batch(self, batch: Any) -> BatchMetadata | None:
        entry = self.producers.get(batch.producer_id)
        return entry.find_duplicate_batch(batch) if entry is not None else None

    def first_unstable_offset(self) -> int | None:
        candidates = list(self._ongoing) + list(self._unreplicated)
        return min(candidates) if candidates else None

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        others = [o for o, t in self._ongoing.items() if t.producer_id != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        txn = self._ongoing.pop(completed.first_offset, None)
        if txn is None:
            return  # a marker with no data (or data below the log start): nothing was open
        txn.last_offset = completed.last_offset
        self._unreplicated[completed.first_offset] = txn

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        if self._unreplicated:  # (called on every append)
            self._remove_unreplicated(high_watermark)

    def _remove_unreplicated(self, offset: int) -> None:
        if not self._unreplicated:
            return
        for first, txn in list(self._unreplicated.items()):
            if txn.last_offset is not None and txn.last_offset < offset:
                del self._unreplicated[first]

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self._remove_unreplicated(log_start_offset)
        if self.map_end_offset < log_start_offset:
            self.map_end_offset = log_start_offset
        self.last_snap_offset = self.latest_snapshot_offset() or log_start_offset

    def remove_expired_producers(self, now: int) -> None:
        for pid, entry in list(self.producers.items()):
            if entry.current_txn_first_offset is None and now - entry.last_timestamp >= self.producer_id_expiration_ms:
                del self.producers[pid]

    def apply_batch(self, batch: Any) -> CompletedTxn | None:
        """Recovery: apply one batch with replication origin (no sequence checks); advance the map end offset."""
        info = self.prepare_update(batch.producer_id, AppendOrigin.REPLICATION)
        completed = info.append_batch(batch)
        self.update(info)
        self.update_map_end_offset(batch.last_offset + 1)
        return completed
