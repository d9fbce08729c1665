"""One topic-partition's log: Kafka's UnifiedLog and LocalLog in one class.

A :class:`Log` owns a partition directory: its segments (oldest to newest, the last one active), the
producer state, the leader-epoch cache and the offsets Kafka keeps for a partition (log start offset, local
log start offset, high watermark, recovery point, log end offset).

Concurrency: one writer at a time (appends, rolls, truncation and retention take ``self._lock``); any number of
reader threads. A reader takes a snapshot of the log end offset metadata and never reads past it, so it never
sees a batch that is still being written. A segment deleted by retention is renamed ``.deleted`` and closed only
after ``file.delete.delay.ms``, so a read already in flight finishes on the open file.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import logging
import random
import struct
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

from local import filenames
from local.checkpoint import LeaderEpochCheckpointFile, PartitionMetadataFile, fsync_dir, fsync_file
from local.dir_failure import LogDirFailureChannel
from local.epoch import LeaderEpochFileCache
from local.errors import (
    InvalidRecordError,
    KafkaStorageError,
    KafkaStorageIOError,
    LogCleaningAbortedError,
    LogDirOfflineError,
    LostOffsetsError,
    OffsetOutOfRangeError,
    ReadOnlyLogError,
    RemoteStorageNotConfiguredError,
)
from local.fetch import FetchDataInfo, FetchIsolation, LogOffsetMetadata, TimestampAndOffset
from local.loader import LogLoader
from local.lost_offsets import LostOffsets, LostOffsetsSet
from local.producer_rebuild import analyze_producer_state, rebuild_producer_state
from local.producer_state import AppendOrigin, ProducerStateManager
from local.records import MemoryRecords, RecordBatch, TimestampType
from local.records.batch import (
    CONTROL_FLAG_MASK,
    LOG_OVERHEAD,
    set_max_timestamp,
)
from local.records.compression import CompressionType
from local.remote_state import REMOTE_LOG_STATE_FILENAME, RemoteLogState, RemoteLogStateFile
from local.scheduler import SYSTEM_TIME, MockScheduler, Scheduler, Time
from local.segment import LogSegment
from local.segments import LogSegments
from local.topic_intents import delete_partition_dir
from local.validation import (
    analyze_and_validate,
    plain_client_batch,
    recompressed,
    target_codec,
    timestamps_within_bounds,
    validate_timestamps,
)

if TYPE_CHECKING:
    from local.config import TopicConfig
    from local.remote import RemoteTier

logger = logging.getLogger(__name__)

_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch: outside the CRC

# Special timestamps of ListOffsets (Kafka's ListOffsetsRequest constants).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


class _PlainLimits(NamedTuple):
    """The config values the plain client batch's append path reads, taken from the config once per change."""

    max_message_bytes: int
    segment_bytes: int
    segment_ms: int
    compacted: bool
    before_max_ms: int
    after_max_ms: int


class LogStartOffsetIncrementReason(enum.Enum):
    CLIENT_RECORD_DELETION = "client delete records request"
    SEGMENT_DELETION = "segment deletion"
    SNAPSHOT_GENERATED = "snapshot generated"


@dataclass(slots=True)
class LogAppendInfo:
    """What an append did: the offsets it assigned and what it saw (Kafka's ``LogAppendInfo``)."""

    first_offset: int
    last_offset: int
    last_leader_epoch: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    shallow_count: int
    valid_bytes: int
    duplicate: bool = False


def _topic_partition_from_dir(directory: Path) -> tuple[str, int]:
    return filenames.parse_partition_dir_name(directory.name)


class Log:
    """A topic-partition log. Create one with :meth:`open` (which runs the loader), not the constructor."""

    def __init__(
        self,
        directory: Path,
        config: TopicConfig,
        segments: LogSegments,
        *,
        log_start_offset: int,
        recovery_point: int,
        producer_state_manager: ProducerStateManager,
        leader_epoch_cache: LeaderEpochFileCache,
        topic_id: uuid.UUID | None,
        scheduler: Scheduler | None,
        time: Time,
        remote_tier: RemoteTier | None = None,
        use_large_index: bool = False,
        local_log_start_offset: int | None = None,
        remote_log_state: RemoteLogState | None = None,
        read_only: bool = False,
        log_dir_failure_channel: LogDirFailureChannel | None = None,
        lost_offsets: LostOffsetsSet | None = None,
    ) -> None:
        self.dir = Path(directory)
        self.topic, self.partition = _topic_partition_from_dir(self.dir)
        self.config = config  # sets _plain_limits too
        self.segments = segments
        self.producer_state_manager = producer_state_manager
        self.leader_epoch_cache = leader_epoch_cache
        self.topic_id = topic_id
        self.scheduler = scheduler
        self.time = time
        self.remote_tier = remote_tier
        self.use_large_index = use_large_index
        self.remote_log_state = remote_log_state or RemoteLogState()
        self.read_only = read_only
        # Offsets a recovery cut out of the middle of the log (local.lost_offsets): a read there raises.
        self.lost_offsets = lost_offsets or LostOffsetsSet(self.dir, read_only)
        self._lock = threading.RLock()
        self._closed = False
        # Where an I/O error is reported (the LogManager's channel, else a private one), and why this log is
        # offline (None while online): see _handle_io_error.
        self.log_dir_failure_channel = log_dir_failure_channel or LogDirFailureChannel()
        self._offline: str | None = None
        self._handles_released = False
        # The epoch appends carry: the latest of the epoch cache, or the owner epoch this data dir claimed for the
        # partition's remote data (a claim at the log end is dropped from the cache by a load until an append, as
        # a Kafka leader's epoch is re-assigned when it becomes leader again).
        self._leader_epoch = max(leader_epoch_cache.latest_epoch() or 0, self.remote_log_state.owner_epoch)
        self._pending_deletes: list[LogSegment] = []
        # Bumped (under the lock) whenever segments leave or change other than by an append or roll: a cleaning
        # that began before it must not swap in segments built from what is gone (see replace_segments).
        self.segments_generation = 0
        # Called (under the log lock) each time the log start offset moves, before anything below it is deleted:
        # the LogManager writes its log-start-offset checkpoint there.
        self.log_start_offset_checkpointer: Callable[[Log], None] | None = None
        # Called (outside the log lock) after each append that wrote records: the LogManager tells its append
        # listeners (the Kafka listener wakes the fetches waiting for data, whichever path appended).
        self.append_listener: Callable[[Log], None] | None = None
        # Called (under the log lock) after a truncation with the new log end: the LogManager brings the log
        # cleaner's checkpoint down to it.
        self.truncation_listener: Callable[[Log, int], None] | None = None
        self._log_start_checkpoint_failed = False
        active = segments.active_segment
        assert active is not None, "a loaded log always has an active segment"
        self._leo = LogOffsetMetadata(active.read_next_offset(), active.base_offset, active.size)
        self.log_start_offset = log_start_offset
        first_base = segments.first_segment.base_offset if segments.first_segment else log_start_offset
        self.local_log_start_offset = (
            local_log_start_offset if local_log_start_offset is not None else max(log_start_offset, first_base)
        )
        self.recovery_point = min(recovery_point, self._leo.message_offset)
        # A single-node ISR: as a leader that is its own ISR, the high watermark is the log end offset.
        self._high_watermark = self._leo.message_offset
        self.load_stats: Any = None
        self._unflushed_messages = 0
        self._last_flush_ms = time.milliseconds()

    @property
    def config(self) -> TopicConfig:
        return self._config

    @config.setter
    def config(self, config: TopicConfig) -> None:
        # What the plain client batch's fast path needs of the config, read once per change instead of per append;
        # None when every batch takes the general path (LogAppendTime stamps each batch).
        self._config = config
        self._compacted = "compact" in str(config.cleanup_policy)  # a compacted topic: its records need keys
        # A topic compression.type other than producer (or uncompressed, the plain path's own) rebuilds batches
        self._codec = target_codec(str(config.compression_type))
        self._codec_level = config.compression_level
        plain = config.message_timestamp_type != "LogAppendTime" and self._codec in (None, CompressionType.NONE)
        self._plain_limits = None if not plain else _PlainLimits(
            config.max_message_bytes, config.segment_bytes, config.max_segment_ms, self._compacted,
            config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms,
        )

    # ------------------------------------------------------------------------------------------------------
    # Opening

    @classmethod
    def open(
        cls,
        directory: str | Path,
        config: TopicConfig,
        *,
        scheduler: Scheduler | None = None,
        time: Time = SYSTEM_TIME,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        had_clean_shutdown: bool = True,
        topic_id: uuid.UUID | None = None,
        remote_tier: RemoteTier | None = None,
        use_large_index: bool = False,
        num_segment_loading_threads: int = 1,
        producer_id_expiration_ms: int = 86_400_000,
        max_transaction_timeout_ms: int = 900_000,
        remaining_segments_callback: Any = None,
        read_only: bool = False,
        log_dir_failure_channel: LogDirFailureChannel | None = None,
    ) -> Log:
        """Open (creating if needed) the partition directory ``directory`` and load it as Kafka's LogLoader does.

        With ``read_only`` the directory is a private scratch copy made by the caller (see
        :mod:`local.read_only`): its ``.log`` files are links opened read-only, recovery only bounds them in
        memory, and the log refuses every change.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        topic, partition = _topic_partition_from_dir(directory)
        topic_id = _init_partition_metadata(directory, topic_id)
        remote_state = RemoteLogStateFile(directory).read()
        epochs_missing = not (directory / filenames.LEADER_EPOCH_CHECKPOINT_FILENAME).exists()
        epoch_cache = LeaderEpochFileCache(
            f"{topic}-{partition}",
            LeaderEpochCheckpointFile(directory / filenames.LEADER_EPOCH_CHECKPOINT_FILENAME, sync=not read_only),
        )
        psm = ProducerStateManager(
            directory,
            max_transaction_timeout_ms=max_transaction_timeout_ms,
            producer_id_expiration_ms=producer_id_expiration_ms,
            time=time.milliseconds,
        )
        segments = LogSegments()
        lost_offsets = LostOffsetsSet(directory, read_only)
        loader = LogLoader(
            directory,
            config,
            segments=segments,
            producer_state_manager=psm,
            leader_epoch_cache=epoch_cache,
            log_start_offset=log_start_offset,
            recovery_point=recovery_point,
            had_clean_shutdown=had_clean_shutdown,
            time=time,
            use_large_index=use_large_index,
            num_segment_loading_threads=num_segment_loading_threads,
            # A partition with remote data keeps its log start offset below the local one even when this process
            # has no remote tier: moving it up would make the next remote pass delete the remote segments.
            remote_storage_enabled=remote_state.has_remote_data
            or (remote_tier is not None and bool(config.remote_storage_enable)),
            remaining_segments_callback=remaining_segments_callback,
            read_only=read_only,
            lost_offsets=lost_offsets,
            rebuild_leader_epochs=epochs_missing,
        )
        loaded = loader.load()
        if epochs_missing and not read_only:
            # Kafka creates the checkpoint with the log (CheckpointFile makes the file): a partition never written
            # (an internal topic's) has an empty one, not none, and is not taken for one whose file was lost.
            epoch_cache.flush()
        lost_offsets.drop_below(loaded.log_start_offset)
        last = segments.last_segment
        if last is not None:  # a load that ended the log earlier took the offsets after it out of any hole
            lost_offsets.truncate_from(last.read_next_offset())
        log = cls(
            directory,
            config,
            segments,
            log_start_offset=loaded.log_start_offset,
            recovery_point=loaded.recovery_point,
            producer_state_manager=psm,
            leader_epoch_cache=epoch_cache,
            topic_id=topic_id,
            scheduler=scheduler,
            time=time,
            remote_tier=remote_tier,
            use_large_index=use_large_index,
            remote_log_state=remote_state,
            read_only=read_only,
            log_dir_failure_channel=log_dir_failure_channel,
            lost_offsets=lost_offsets,
        )
        log.load_stats = loader.stats
        return log

    # ------------------------------------------------------------------------------------------------------
    # Offsets

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def log_end_offset(self) -> int:
        return self._leo.message_offset

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, or the high watermark if it is lower (Kafka's LSO)."""
        first_unstable = self.producer_state_manager.first_unstable_offset()
        if first_unstable is None:
            return self._high_watermark
        return min(_as_offset(first_unstable), self._high_watermark)

    @property
    def size_in_bytes(self) -> int:
        return self.segments.size_in_bytes()

    @property
    def source_dir(self) -> Path:
        """The partition dir as the operator knows it, for messages: a read-only view is loaded from a scratch copy
        (``dir``) whose segments are links into it (see :mod:`local.read_only`)."""
        first = self.segments.first_segment
        return first.log.source_path.parent if first is not None else self.dir

    @property
    def remote_storage_enabled(self) -> bool:
        return self.remote_tier is not None and bool(self.config.remote_storage_enable)

    @property
    def has_remote_data(self) -> bool:
        """Whether finished remote copies exist (as this partition dir remembers, whatever this process's config)."""
        return self.remote_log_state.has_remote_data

    def note_highest_remote_offset(self, offset: int) -> None:
        """Remember (durably, in ``remote-log-state``) that remote copies reach ``offset``. The remote tier calls
        this after every finished copy; a partition with remote data is then never trimmed by a process that
        lacks the remote tier (see :mod:`local.remote_state`)."""
        with self._lock:
            state = self.remote_log_state
            if offset <= state.highest_remote_offset and state.remote_storage_enabled:
                return
            new = dataclasses.replace(state, remote_storage_enabled=True,
                                      highest_remote_offset=max(offset, state.highest_remote_offset))
            if not self.read_only:
                RemoteLogStateFile(self.dir).write(new)
            self.remote_log_state = new

    def forget_remote_data(self) -> None:
        """Remember (durably) that the partition holds no remote data any more: its topic turned remote storage off
        with ``remote.log.delete.on.disable=true``, and the remote tier deleted every remote segment (or left them to
        the data dir that owns them). Its claim stays (tiering turned on again goes on under it)."""
        with self._lock:
            new = dataclasses.replace(self.remote_log_state, remote_storage_enabled=False, highest_remote_offset=-1)
            if not self.read_only:
                RemoteLogStateFile(self.dir).write(new)
            self.remote_log_state = new

    def note_remote_owner(self, owner_epoch: int, owner_id: str) -> None:
        """Remember (durably, in ``remote-log-state``) that this data dir claimed ownership of the partition's remote
        data at ``owner_epoch`` (the remote tier's fencing: see :mod:`local.remote_state`); a pending claim is done."""
        with self._lock:
            new = dataclasses.replace(self.remote_log_state, remote_storage_enabled=True, owner_epoch=owner_epoch,
                                      owner_id=owner_id, pending_owner_epoch=-1, pending_owner_id="")
            if not self.read_only:
                RemoteLogStateFile(self.dir).write(new)
            self.remote_log_state = new

    def note_pending_claim(self, owner_epoch: int, owner_id: str) -> None:
        """Remember (durably) the claim the remote tier is about to write, before it writes it: an owner record of
        this epoch and id found later, whenever the write lands, is this data dir's own."""
        with self._lock:
            new = dataclasses.replace(self.remote_log_state, remote_storage_enabled=True,
                                      pending_owner_epoch=owner_epoch, pending_owner_id=owner_id)
            if not self.read_only:
                RemoteLogStateFile(self.dir).write(new)
            self.remote_log_state = new

    def check_remote_tier_present(self, what: str) -> None:
        """Refuse ``what`` on a partition whose data lives partly in remote storage when this process has no remote
        tier, or when its topic turned remote storage off without ``remote.log.delete.on.disable`` (Kafka's rule:
        remote storage cannot be disabled silently)."""
        wants_remote = bool(self.config.remote_storage_enable)
        if self.remote_tier is None and (self.has_remote_data or wants_remote):
            held = (
                f"holds data in remote storage up to offset {self.remote_log_state.highest_remote_offset}"
                if self.has_remote_data else "has remote.storage.enable=true"
            )
            raise RemoteStorageNotConfiguredError(
                f"{what} refused for {self.name}: the partition {held}, but this process has no remote tier. Set "
                "remote.log.storage.system.enable=true and remote.log.storage.manager.class.name (with its "
                "rsm.config.* keys) in the broker config (tiered: pass --config FILE)",
                topic=self.topic, partition=self.partition,
            )
        if self.has_remote_data and not wants_remote and not self.config.remote_log_delete_on_disable:
            raise RemoteStorageNotConfiguredError(
                f"{what} refused for {self.name}: the partition holds data in remote storage but its topic config "
                "has remote.storage.enable=false. Set remote.storage.enable=true again (with remote.log.copy.disable="
                "true to stop copying), or set remote.log.delete.on.disable=true to give up the remote data",
                topic=self.topic, partition=self.partition,
            )

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyLogError(f"log {self.name} is open read-only", path=str(self.dir))

    @property
    def active_segment(self) -> LogSegment:
        seg = self.segments.active_segment
        assert seg is not None
        return seg

    def number_of_segments(self) -> int:
        return self.segments.number_of_segments()

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, bounded to [log start offset, log end offset]; returns the new value."""
        with self._lock:
            self._high_watermark = max(self.log_start_offset, min(offset, self.log_end_offset))
            self.producer_state_manager.on_high_watermark_updated(self._high_watermark)
            return self._high_watermark

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        with self._lock:
            if offset > self._high_watermark:
                self.update_high_watermark(offset)
                return True
            return False

    # ------------------------------------------------------------------------------------------------------
    # Append

    def append(
        self,
        records: MemoryRecords | bytes | bytearray,
        *,
        leader_epoch: int | None = None,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Append batches as the leader (Kafka's ``appendAsLeader``): offsets and leader epoch are assigned here.

        Batches must have base offset 0 as a client sends them. The high watermark advances to the new log end
        offset (a single-node ISR). Every batch passes Kafka's LogValidator rules (``local.validation``). Raises
        ``CorruptRecordError``, ``InvalidRecordError``, ``RecordTooLargeError``, ``InvalidTimestampError`` or a
        producer-state error; nothing is written when it raises.
        """
        self._check_writable()
        data = records.buffer if isinstance(records, MemoryRecords) else records
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"{self.name}: append takes MemoryRecords (MemoryRecords.build([SimpleRecord(...)])) or the "
                            f"bytes of record batches, got {type(records).__name__}")
        epoch = self._leader_epoch if leader_epoch is None else leader_epoch
        if type(epoch) is not int:
            raise TypeError(f"{self.name}: leader_epoch must be an int, got {type(epoch).__name__} {epoch!r}")
        try:
            info = None
            if origin is AppendOrigin.CLIENT and self._plain_limits is not None:
                info = self._append_plain_batch(data if type(data) is bytes else _unchangeable(data), epoch)
            if info is None:
                # Our own copy: offsets and the epoch are patched into it.
                info = self._append(bytearray(data), origin, True, epoch)
        except OSError as exc:  # a write, a roll, an index, a snapshot or a checkpoint failed: the dir goes offline
            self._handle_io_error("appending to", exc)
        listener = self.append_listener
        if listener is not None and info.first_offset >= 0 and not info.duplicate:
            listener(self)
        return info

    def append_as_follower(self, records: MemoryRecords | bytes | bytearray) -> LogAppendInfo:
        """Append batches whose offsets and epochs were assigned by a leader; out-of-order offsets are rejected."""
        self._check_writable()
        buffer = bytearray(records.buffer if isinstance(records, MemoryRecords) else records)
        try:
            return self._append(buffer, AppendOrigin.REPLICATION, False, -1)
        except OSError as exc:
            self._handle_io_error("appending to", exc)

    def _append(self, buffer: bytearray, origin: AppendOrigin, assign_offsets: bool, leader_epoch: int) -> LogAppendInfo:
        """The general append path (any number of batches, producer state, LogAppendTime, follower appends),
        working per batch on the header fields parsed once by validation. ``buffer`` is the log's own copy."""
        if self._closed:
            self._check_open()
        batches, has_producer_ids = self._analyze_and_validate(buffer, origin, assign_offsets)
        if not batches:
            return LogAppendInfo(-1, -1, -1, -1, -1, -1, self.log_start_offset, 0, 0)
        if self._codec is not None and origin is AppendOrigin.CLIENT and assign_offsets:
            # The topic's compression.type: batches in another codec are built again in it (Kafka's LogValidator),
            # after the producer's bytes passed their checks, and checked again as built.
            rebuilt = recompressed(batches, self._codec, self._codec_level)
            if rebuilt is not None:
                buffer = rebuilt
                batches, has_producer_ids = self._analyze_and_validate(buffer, origin, assign_offsets)
        with self._lock:
            if self._closed:
                self._check_open()
            config = self.config
            now = self.time.milliseconds()
            log_append_time = -1
            if assign_offsets:
                if has_producer_ids:
                    duplicate = self._find_duplicate(batches)
                    if duplicate is not None:
                        return duplicate
                next_offset = self._leo.message_offset
                append_time_type = config.message_timestamp_type == "LogAppendTime"
                after_max_ms = config.message_timestamp_after_max_ms
                before_max_ms = config.message_timestamp_before_max_ms
                pack_header = _OFFSET_LENGTH_EPOCH.pack_into
                position = 0
                for batch in batches:
                    # Base offset and leader epoch lie outside the CRC: patched in place, no re-checksum.
                    pack_header(buffer, position, next_offset, batch.batch_length, leader_epoch)
                    # The views parsed the header before the patch: keep their fields in step with the bytes.
                    batch.base_offset = next_offset
                    batch.partition_leader_epoch = leader_epoch
                    if append_time_type:
                        set_max_timestamp(buffer, position, TimestampType.LOG_APPEND_TIME, now)
                        batch.max_timestamp = now
                        batch.attributes |= 0x08
                        log_append_time = now
                    elif not timestamps_within_bounds(batch.base_timestamp, batch.max_timestamp, now, before_max_ms,
                                                      after_max_ms) and not batch.attributes & CONTROL_FLAG_MASK:
                        self._validate_timestamp(batch, now)  # raises, saying which bound was broken
                    next_offset += batch.last_offset_delta + 1
                    position += batch.batch_length + LOG_OVERHEAD
            elif batches[0].base_offset < self._leo.message_offset:
                raise InvalidRecordError(
                    f"out of order offsets in follower append to {self.name}: first offset "
                    f"{batches[0].base_offset} is below the log end offset {self.log_end_offset}",
                    offset=batches[0].base_offset,
                )
            first_offset = batches[0].base_offset
            last_batch = batches[-1]
            last_offset = last_batch.base_offset + last_batch.last_offset_delta
            max_ts, offset_of_max = -1, first_offset
            for batch in batches:
                if batch.max_timestamp > max_ts:
                    max_ts, offset_of_max = batch.max_timestamp, batch.base_offset + batch.last_offset_delta

            # Producer state is validated before anything is written, so a rejected batch leaves no trace.
            updated, completed = (
                analyze_producer_state(self.producer_state_manager, batches, origin) if has_producer_ids else ((), ())
            )

            segment = self._maybe_roll(len(buffer), first_offset, last_offset, max_ts, now)
            segment.append(last_offset, buffer, batches)

            producer_state = self.producer_state_manager
            for append_info in updated:
                producer_state.update(append_info)
            for txn in completed:
                lso = producer_state.last_stable_offset(txn)
                segment.update_txn_index(txn, lso)
                producer_state.complete_txn(txn)
            if assign_offsets:
                self._appended(segment, first_offset, last_offset, leader_epoch)
            else:
                latest_epoch = self.leader_epoch_cache.latest_epoch()
                for batch in batches:
                    batch_epoch = batch.partition_leader_epoch
                    if batch_epoch >= 0 and (latest_epoch is None or batch_epoch > latest_epoch):
                        self.leader_epoch_cache.assign(batch_epoch, batch.base_offset)
                        latest_epoch = batch_epoch
                self._appended(segment, first_offset, last_offset, -1, as_leader=False)
            return LogAppendInfo(
                first_offset,
                last_offset,
                last_batch.partition_leader_epoch,
                max_ts,
                offset_of_max,
                log_append_time,
                self.log_start_offset,
                len(batches),
                len(buffer),
            )

    def _append_plain_batch(self, buffer: bytes | memoryview, leader_epoch: int) -> LogAppendInfo | None:
        """The common append, on one header unpack and no batch object: a single v2 batch from a client, without
        producer id, not a control batch, CreateTime within the bounds. ``None`` when the append is anything
        else, or wrong in any way: the general path then handles it, and says what is wrong. ``buffer`` is not
        changed: its patched first bytes are written in place of its own, without a copy."""
        limits = self._plain_limits
        if limits is None:
            return None
        max_message_bytes, segment_bytes, segment_ms, compacted, before_max_ms, after_max_ms = limits
        header = plain_client_batch(buffer, max_message_bytes, segment_bytes, compacted)
        if header is None:
            return None
        length, last_offset_delta, base_timestamp, max_timestamp = header
        with self._lock:
            if self._closed:
                self._check_open()
            now = self.time.milliseconds()
            if not timestamps_within_bounds(base_timestamp, max_timestamp, now, before_max_ms, after_max_ms):
                return None  # the general path raises the error that says which bound
            first_offset = self._leo.message_offset
            last_offset = first_offset + last_offset_delta
            # Base offset and leader epoch lie outside the CRC: written in place of the client's, no re-checksum.
            header = _OFFSET_LENGTH_EPOCH.pack(first_offset, length, leader_epoch)
            segment = self.segments.active_segment
            assert segment is not None
            if not segment.append_batch_if_room(last_offset, max_timestamp, buffer, now, segment_bytes, segment_ms,
                                                header):
                segment = self._maybe_roll(len(buffer), first_offset, last_offset, max_timestamp, now)
                segment.append_batch(last_offset, max_timestamp, buffer, header)
            self._appended(segment, first_offset, last_offset, leader_epoch)
            return LogAppendInfo(
                first_offset,
                last_offset,
                leader_epoch,
                max_timestamp,
                last_offset if max_timestamp >= 0 else first_offset,
                -1,
                self.log_start_offset,
                1,
                len(buffer),
            )

    def _appended(self, segment: LogSegment, first_offset: int, last_offset: int, leader_epoch: int, as_leader: bool = True) -> None:
        """After the write: the epoch lineage, the log end offset, the high watermark and the flush policy."""
        if as_leader and leader_epoch >= 0:
            latest_epoch = self.leader_epoch_cache.latest_epoch()
            if latest_epoch is None or leader_epoch > latest_epoch:
                self.leader_epoch_cache.assign(leader_epoch, first_offset)
        next_offset = last_offset + 1
        self._leo = LogOffsetMetadata(next_offset, segment.base_offset, segment.log.size_in_bytes)
        producer_state = self.producer_state_manager
        producer_state.update_map_end_offset(next_offset)
        if as_leader and next_offset > self._high_watermark:
            # A leader is its own ISR: the high watermark follows the log end offset.
            self._high_watermark = max(self.log_start_offset, next_offset)
            producer_state.on_high_watermark_updated(self._high_watermark)
        self._unflushed_messages += next_offset - first_offset
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()

    def _analyze_and_validate(
        self, buffer: bytearray, origin: AppendOrigin, assign_offsets: bool
    ) -> tuple[list[RecordBatch], bool]:
        """Kafka's LogValidator over every batch (``local.validation``): the batch views, and whether any carries a
        producer id. Raises, saying what is wrong, before anything is written."""
        config = self.config
        return analyze_and_validate(
            buffer, self.name, max_message_bytes=config.max_message_bytes, segment_bytes=config.segment_bytes,
            from_client=origin is AppendOrigin.CLIENT, assign_offsets=assign_offsets, compacted=self._compacted,
        )

    def _validate_timestamp(self, batch: RecordBatch, now: int) -> None:
        validate_timestamps(batch, now, self.config.message_timestamp_before_max_ms,
                            self.config.message_timestamp_after_max_ms, self.name)

    def _find_duplicate(self, batches: list[RecordBatch]) -> LogAppendInfo | None:
        """An idempotent retry of the last batches of a producer gets the offsets of the original append."""
        for batch in batches:
            if not batch.has_producer_id:
                continue
            original = self.producer_state_manager.find_duplicate_batch(batch)
            if original is not None:
                return LogAppendInfo(
                    original.first_offset, original.last_offset, batch.partition_leader_epoch, original.timestamp, original.last_offset,
                    -1, self.log_start_offset, 1, batch.size_in_bytes, duplicate=True,
                )
        return None

    # ------------------------------------------------------------------------------------------------------
    # Roll

    def _maybe_roll(self, messages_size: int, first_offset: int, last_offset: int, max_ts: int, now: int) -> LogSegment:
        segment = self.segments.active_segment
        assert segment is not None
        config = self.config
        if not segment.should_roll_for(messages_size, last_offset, max_ts, now, config.segment_bytes,
                                      config.max_segment_ms):
            return segment
        logger.debug("rolling %s at offset %d (segment %d, size %d)", self.name, first_offset, segment.base_offset, segment.size)
        # At the first offset of this append: a leader's is the log end offset, a follower's is at or past it (an
        # append below it is refused first), and offsets past the relative range of the old segment need it too.
        return self.roll(first_offset)

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Close the active segment and start a new one at ``max(expected_next_offset, log end offset)``."""
        self._check_writable()
        if expected_next_offset is not None:
            expected_next_offset = _offset_arg(self.name, "roll expected_next_offset", expected_next_offset)
        try:
            return self._roll(expected_next_offset)
        except OSError as exc:
            self._handle_io_error("rolling", exc)

    def _roll(self, expected_next_offset: int | None) -> LogSegment:
        with self._lock:
            self._check_open()
            new_offset = max(expected_next_offset or 0, self.log_end_offset)
            active = self.active_segment
            if new_offset == active.base_offset and active.size == 0:
                return active  # an empty active segment at that offset already exists
            existing = self.segments.get(new_offset)
            if existing is not None:
                raise KafkaStorageError(
                    f"cannot roll {self.name} to offset {new_offset}: a segment with that base offset exists",
                    offset=new_offset,
                )
            scheduler = self.scheduler
            background_flush = (scheduler is not None and scheduler.is_started
                                and not isinstance(scheduler, MockScheduler))
            # A background flush also does the rolled segment's file trims, which can wait on the file system's
            # journal (LogSegment.on_become_inactive_segment): not in the append that rolls.
            active.on_become_inactive_segment(defer_trim=background_flush)
            self.producer_state_manager.update_map_end_offset(new_offset)
            # No fsync under the lock (it would stall appends behind the page-cache writeback of the old
            # segment): the snapshot is flushed with the old segment below, as Kafka's roll does.
            snapshot = self.producer_state_manager.take_snapshot(sync=False)
            segment = self._new_segment(new_offset)
            self.segments.add(segment)
            self._leo = LogOffsetMetadata(self.log_end_offset, segment.base_offset, segment.size)

            def flush_rolled() -> None:
                if snapshot is not None:
                    fsync_file(snapshot)
                self.flush(new_offset)

            # Everything before the new segment becomes durable: asynchronously, as Kafka does, when a
            # scheduler runs; otherwise right here.
            if background_flush and scheduler is not None:
                scheduler.schedule_once(f"flush-log-{self.name}", flush_rolled)
            else:
                flush_rolled()
            return segment

    def _new_segment(self, base_offset: int) -> LogSegment:
        # Kafka's randomSegmentJitter bounds it by segment.ms; by the roll's own bound here, so that a short
        # max.compaction.lag.ms never leaves a bound minus jitter below zero (a roll at every append).
        jitter = min(self.config.segment_jitter_ms, self.config.max_segment_ms)
        return LogSegment.open(
            self.dir,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.segment_index_bytes,
            roll_jitter_ms=random.randrange(jitter) if jitter > 0 else 0,
            preallocate=self.config.preallocate,
            init_file_size=self.config.segment_bytes if self.config.preallocate else 0,
            use_large_index=self.use_large_index,
            time=self.time.milliseconds,
        )

    # ------------------------------------------------------------------------------------------------------
    # Read

    def read(
        self,
        offset: int,
        max_bytes: int = 1024 * 1024,
        isolation: FetchIsolation = FetchIsolation.LOG_END,
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """The batches from the one holding ``offset``, up to ``max_bytes`` (one whole batch at least when
        ``min_one_message``). Offsets below the local log start come from the remote tier, if there is one.

        Raises ``OffsetOutOfRangeError`` below the log start offset or past the log end offset, and
        ``LogDirOfflineError`` once the log's data dir is offline.

        Reads racing retention (Kafka: no floor segment -> out of range): retention and truncation publish the new
        log start offset, then the local log start offset, BEFORE they remove a segment, so a read that saw a segment go (no floor
        segment, a file closed under it, a remote segment deleted) sees the moved start when it checks again
        after reading, and raises ``OffsetOutOfRangeError`` naming the current log start rather than returning
        the later data it may have found. A local read overtaken by local retention (the data now only remote)
        goes to the remote tier instead. A read that a truncation cut short is read again once it is done (the
        records read are a view of the segment file, as Kafka's ``FileRecords``: a truncation after the read, a
        Spark write's rollback, may change what they hold).
        """
        if self._offline is not None:
            self._check_open()
        if type(offset) is not int:
            offset = _offset_arg(self.name, "read offset", offset)
        return self._read(offset, max_bytes, isolation, min_one_message, 0)

    def _read(self, offset: int, max_bytes: int, isolation: FetchIsolation, min_one_message: bool,
              attempt: int) -> FetchDataInfo:
        leo = self._leo
        if isolation is FetchIsolation.LOG_END:
            max_offset = leo.message_offset
        elif isolation is FetchIsolation.HIGH_WATERMARK:
            max_offset = self._high_watermark
        else:
            max_offset = self.last_stable_offset
        if offset < self.log_start_offset or offset > leo.message_offset:
            raise self._out_of_range(offset, leo.message_offset)
        remote = self.remote_tier
        generation = self.segments_generation
        if self.lost_offsets.entries:
            lost = self.lost_offsets.find(offset)
            if lost is not None:
                if remote is not None and self.has_remote_data and (
                        offset <= remote.highest_offset_in_remote_storage(self)):
                    copy = remote.read(self, offset, max_bytes, isolation, min_one_message)  # its copy, if whole
                    first = next(iter(copy.records.batches()), None) if copy.records is not None else None
                    if first is not None and first.base_offset <= lost.last_offset:
                        return copy
                    # (a copy of the segment before the hole, made after it was recorded, names the hole's offsets
                    # as its own and holds none of them: what it reads is after the hole)
                raise self._lost(offset, lost)
        try:
            info = None
            if remote is None or offset >= self.local_log_start_offset:
                info = self._read_local(offset, max_bytes, isolation, min_one_message, max_offset, leo)
            if info is None:
                if remote is None and offset < self.local_log_start_offset and self.has_remote_data:
                    raise RemoteStorageNotConfiguredError(
                        f"offset {offset} of {self.name} is in remote storage (the local log starts at "
                        f"{self.local_log_start_offset}) and this process has no remote tier: set "
                        "remote.log.storage.system.enable=true and remote.log.storage.manager.class.name (with its "
                        "rsm.config.* keys) in the broker config (tiered: pass --config FILE)",
                        offset=offset, topic=self.topic, partition=self.partition,
                    )
                if remote is None:
                    raise self._out_of_range(offset, leo.message_offset)
                info = remote.read(self, offset, max_bytes, isolation, min_one_message)
        except (OffsetOutOfRangeError, RemoteStorageNotConfiguredError):
            raise
        except Exception as exc:
            if offset < self.log_start_offset:  # retention removed what the read was reading
                raise self._out_of_range(offset, leo.message_offset) from exc
            if not isinstance(exc, LogDirOfflineError) and attempt < 3:
                # A truncation (or a segment swap) cut the file under the read: what looked torn (or a position past
                # the file's end) is the cut, not damage. Once it is done (its lock), read again: the new log answers
                # (out of range past its end). Anything else is raised as it is.
                with self._lock:
                    changed = self.segments_generation != generation
                if changed:
                    return self._read(offset, max_bytes, isolation, min_one_message, attempt + 1)
            raise
        if offset < self.log_start_offset:
            # Retention moved the log start past the offset while we read: what we found may be later data.
            raise self._out_of_range(offset, leo.message_offset)
        return info

    def _lost(self, offset: int, lost: LostOffsets) -> LostOffsetsError:
        source_dir = self.source_dir
        path = source_dir / lost.segment
        record = source_dir / self.lost_offsets.path.name
        if self.lost_offsets.is_recorded(lost) and lost.position == 0 and not path.exists():
            what = f"were lost: {path} is missing (recorded in {record})"
        elif self.lost_offsets.is_recorded(lost):
            what = f"were lost: a recovery found {path} damaged and cut it at byte {lost.position} (recorded in {record})"
        else:  # what a read-only view found: nothing on disk says so yet
            what = (f"are lost to damage: {path} is damaged from byte {lost.position} (a writer opening the dir would "
                    f"cut it there and record the loss in {record})")
        return LostOffsetsError(
            f"offsets {lost.first_offset}..{lost.last_offset} of {self.name} {what}; offset {offset} cannot be read, "
            f"the log goes on at offset {lost.last_offset + 1}",
            offset=offset, first_offset=lost.first_offset, last_offset=lost.last_offset,
            next_offset=lost.last_offset + 1, path=str(path), topic=self.topic, partition=self.partition,
        )

    def _out_of_range(self, offset: int, log_end_offset: int) -> OffsetOutOfRangeError:
        log_start = self.log_start_offset
        return OffsetOutOfRangeError(
            f"offset {offset} is out of range for {self.name}: log start offset {log_start}, "
            f"log end offset {log_end_offset}",
            offset=offset,
            log_start_offset=log_start,
            log_end_offset=log_end_offset,
        )

    def _read_local(
        self, offset: int, max_bytes: int, isolation: FetchIsolation, min_one_message: bool, max_offset: int,
        leo: LogOffsetMetadata,
    ) -> FetchDataInfo | None:
        """The local part of :meth:`read`; None when the local segments no longer hold ``offset`` (no floor segment,
        or local retention moved the local log start past it during the read): the caller goes remote or raises."""
        if offset >= max_offset:
            return FetchDataInfo(LogOffsetMetadata(offset, -1, -1), MemoryRecords(b""))
        segments = self.segments
        segment = segments.floor_segment(offset)
        if segment is None:
            return None
        try:
            info = None
            while segment is not None:
                max_position = self._max_position(segment, max_offset, leo)
                # An offset in a gap (compaction's, a real broker's) is answered with the next batch, in this
                # segment or a later one, as Kafka does; the segment checks that what it answers is no damage.
                info = segment.read(
                    offset, max_bytes, max_position, min_one_message, True, partial(_next_base, segments, segment)
                )
                if info is not None:
                    if isolation is FetchIsolation.TXN_COMMITTED:
                        info = self._add_aborted_transactions(offset, segment, info)
                    break
                if segments.get(segment.base_offset) is not segment and (now := segments.floor_segment(offset)):
                    # A cleaning swapped the segment out under the read: its replacement may hold the records of
                    # the segments after it too, which the segment after the replacement would skip.
                    segment = now
                    continue
                segment = segments.higher_segment(segment.base_offset)
        except Exception:
            if offset < self.local_log_start_offset:
                return None  # the segment was deleted under the read (its file closed)
            raise
        if offset < self.local_log_start_offset:
            return None  # local retention removed the segment meanwhile: what was read may be later data
        return info if info is not None else FetchDataInfo(LogOffsetMetadata(offset, -1, -1), MemoryRecords(b""))

    def _max_position(self, segment: LogSegment, max_offset: int, leo: LogOffsetMetadata) -> int:
        if segment.base_offset == leo.segment_base_offset:
            limit = leo.relative_position_in_segment
        else:
            limit = segment.size
        if max_offset < leo.message_offset:
            pos = segment.translate_offset(max_offset)
            if pos is not None:
                limit = min(limit, pos.position)
        return limit

    def _add_aborted_transactions(self, start_offset: int, segment: LogSegment, info: FetchDataInfo) -> FetchDataInfo:
        from local.index import OffsetPosition

        meta = info.fetch_offset_metadata
        upper = segment.offset_index.fetch_upper_bound_offset(
            OffsetPosition(meta.message_offset, meta.relative_position_in_segment), info.records.size_in_bytes
        )
        if upper is not None:
            upper_bound = upper.offset
        else:
            nxt = self.segments.higher_segment(segment.base_offset)
            upper_bound = nxt.base_offset if nxt is not None else self.log_end_offset
        aborted = self.collect_aborted_transactions(start_offset, upper_bound, segment)
        return FetchDataInfo(info.fetch_offset_metadata, info.records, info.first_entry_incomplete, aborted)

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int, from_segment: LogSegment | None = None
    ) -> list[Any]:
        """Aborted transactions overlapping [start_offset, upper_bound_offset) from the local txn indexes."""
        aborted: list[Any] = []
        base = from_segment.base_offset if from_segment is not None else start_offset
        for seg in self.segments.values(base, None) if from_segment is not None else self.segments.values():
            if from_segment is None and seg.read_next_offset() <= start_offset:
                continue
            result = seg.txn_index.collect_aborted_txns(start_offset, upper_bound_offset)
            aborted.extend(result.aborted_txns)
            if result.is_complete:
                break
        return aborted

    def batches_from(self, offset: int, isolation: FetchIsolation = FetchIsolation.LOG_END) -> Iterator[Any]:
        """Every batch from the one holding ``offset`` to the isolation bound, reading a segment at a time."""
        next_offset = offset
        bound = {FetchIsolation.LOG_END: lambda: self.log_end_offset,
                 FetchIsolation.HIGH_WATERMARK: lambda: self.high_watermark,
                 FetchIsolation.TXN_COMMITTED: lambda: self.last_stable_offset}[isolation]()
        while next_offset < bound:
            info = self.read(next_offset, 8 * 1024 * 1024, isolation, True)
            got = False
            for batch in info.records.batches():
                if batch.last_offset < next_offset:
                    continue
                got = True
                yield batch
                next_offset = batch.last_offset + 1
            if not got:
                break

    # ------------------------------------------------------------------------------------------------------
    # Timestamps

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """Kafka's ``fetchOffsetByTimestamp``: the earliest offset whose timestamp is >= ``timestamp``.

        Specials: ``EARLIEST_TIMESTAMP`` (-2), ``LATEST_TIMESTAMP`` (-1), ``MAX_TIMESTAMP`` (-3),
        ``EARLIEST_LOCAL_TIMESTAMP`` (-4), ``LATEST_TIERED_TIMESTAMP`` (-5). None when no offset qualifies.
        """
        epoch_cache = self.leader_epoch_cache
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(-1, self.log_start_offset, epoch_cache.epoch_for_offset(self.log_start_offset))
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            off = self.local_log_start_offset
            return TimestampAndOffset(-1, off, epoch_cache.epoch_for_offset(off))
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, self.log_end_offset, epoch_cache.latest_epoch())
        if timestamp == LATEST_TIERED_TIMESTAMP:
            highest = self.remote_tier.highest_offset_in_remote_storage(self) if self.remote_tier else -1
            return TimestampAndOffset(-1, highest, epoch_cache.epoch_for_offset(highest) if highest >= 0 else None)
        if timestamp == MAX_TIMESTAMP:
            latest: LogSegment | None = None
            for seg in self.segments.values():
                if seg.max_timestamp_so_far >= 0 and (latest is None or seg.max_timestamp_so_far > latest.max_timestamp_so_far):
                    latest = seg
            if latest is None:
                return None
            # The record holding it, not its batch's last offset (the time index's entry): Kafka's KAFKA-16310.
            best = latest.max_timestamp_record()
            if best is None:
                best = TimestampAndOffset(latest.max_timestamp_so_far, latest.offset_of_max_timestamp_so_far)
            return TimestampAndOffset(best.timestamp, best.offset, epoch_cache.epoch_for_offset(best.offset))
        if timestamp < 0:
            raise ValueError(f"invalid timestamp {timestamp}: use >= 0 or one of the special values -1..-5")
        if self.remote_tier is not None and self.log_start_offset < self.local_log_start_offset:
            remote = self.remote_tier.offset_for_timestamp(self, timestamp)
            if remote is not None:
                return remote
        for seg in self.segments.values():
            if seg.largest_timestamp >= timestamp:
                found = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
                if found is not None:
                    return TimestampAndOffset(found.timestamp, found.offset, epoch_cache.epoch_for_offset(found.offset))
        return None

    # ------------------------------------------------------------------------------------------------------
    # Flush

    def flush(self, offset: int | None = None) -> None:
        """fsync every segment up to ``offset`` (default: the log end offset) and advance the recovery point.

        What was flushed survives a crash: the loader recovers only from the recovery point on. As in Kafka's
        ``UnifiedLog.flush``, the fsyncs run outside the log lock, so appends and reads go on while an old
        segment is written back; only the recovery point update takes the lock.
        """
        with self._lock:
            if self._closed:
                if self._offline is not None:
                    self._check_open()
                return
            leo = self.log_end_offset
            target = leo if offset is None else min(offset, leo)
            if target <= self.recovery_point:
                # Nothing to sync, but a roll at the recovery point (a full flush just before it) still owes the
                # rolled segment the trims it deferred to this flush: its index files stay preallocated otherwise.
                rolled = self.segments.lower_segment(target) if target > 0 else None
                if rolled is None or not rolled.trims_pending:
                    return
                to_flush = [rolled]
            else:
                to_flush = self.segments.values(self.recovery_point, target)
            active = self.active_segment
            if target == leo and active not in to_flush:
                to_flush.append(active)
            unflushed_at_start = self._unflushed_messages
        for seg in to_flush:
            try:
                seg.flush()
            except OSError as exc:
                with self._lock:
                    if self._closed or self.segments.get(seg.base_offset) is not seg:
                        if self._offline is not None:
                            self._check_open()
                        continue  # deleted or replaced while we flushed: nothing of it is left to make durable
                    self._handle_io_error("flushing", exc)
        with self._lock:
            target = min(target, self.log_end_offset)  # a truncation may have run meanwhile
            if self._closed or target <= self.recovery_point:
                return
            self.recovery_point = target
            if target == leo:
                # Messages appended while the fsyncs ran are not covered by them.
                self._unflushed_messages = max(0, self._unflushed_messages - unflushed_at_start)
            self._last_flush_ms = self.time.milliseconds()

    @property
    def last_flush_time(self) -> int:
        return self._last_flush_ms

    def unflushed_messages(self) -> int:
        return self.log_end_offset - self.recovery_point

    # ------------------------------------------------------------------------------------------------------
    # Log start offset, retention and truncation

    def delete_records(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (Kafka's DeleteRecords). Returns the new log start offset."""
        self._check_writable()
        offset = _offset_arg(self.name, "delete_records offset", offset)
        with self._lock:
            if self._closed:
                self._check_open()  # a closed log's dir may belong to another LogManager now
            if offset < 0:  # (Kafka's -1, "up to the high watermark", is the request's: its handler resolves it)
                raise OffsetOutOfRangeError(f"cannot delete records of {self.name} up to {offset}: a negative offset "
                                            f"(pass the high watermark, {self._high_watermark}, to delete every "
                                            "record)", offset=offset)
            if offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records of {self.name} up to {offset}: above the high watermark "
                    f"{self._high_watermark}",
                    offset=offset,
                )
            try:
                self.maybe_increment_log_start_offset(offset, LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION)
            except OSError as exc:
                # The log start moved in memory, its checkpoint did not: readers saw the records gone while the
                # request failed, until a restart brought them back. Kafka's checkpoint failure takes the dir
                # offline (LogDirFailureChannel): no one reads the partition in between.
                self._handle_io_error("writing the log start offset checkpoint of", exc)
            return self.log_start_offset

    def maybe_increment_log_start_offset(self, new_offset: int, reason: LogStartOffsetIncrementReason) -> bool:
        with self._lock:
            if new_offset <= self.log_start_offset:
                return False
            logger.info("incrementing log start offset of %s to %d (%s)", self.name, new_offset, reason.value)
            self.log_start_offset = new_offset
            if self._high_watermark < new_offset:
                self.update_high_watermark(new_offset)
            if self.local_log_start_offset < new_offset:
                self.local_log_start_offset = new_offset
            self.leader_epoch_cache.truncate_from_start(new_offset)
            self.producer_state_manager.on_log_start_offset_incremented(new_offset)
            # Durable before the caller deletes anything below it (an OSError here stops the deletion): a crash
            # between the two must not bring back a log start below deleted data.
            self._log_start_checkpoint_failed = True
            self.ensure_log_start_offset_checkpointed()
            self.lost_offsets.drop_below(new_offset)
            return True

    def ensure_log_start_offset_checkpointed(self) -> None:
        """Write the log start checkpoint if the last attempt failed; raises ``OSError`` if it fails again. Whatever
        deletes below the log start (local retention, remote expiration) calls it first: a pass after a failed
        checkpoint finds the log start already moved, and must not delete on the strength of it."""
        with self._lock:
            checkpoint = self.log_start_offset_checkpointer
            if self._log_start_checkpoint_failed and checkpoint is not None:
                checkpoint(self)
            self._log_start_checkpoint_failed = False

    def delete_old_segments(self) -> int:
        """One retention pass (what the scheduler runs every ``log.retention.check.interval.ms``).

        Deletes whole non-active segments breaching the log start offset, ``retention.bytes`` or ``retention.ms``
        (the ``local.*`` values when the remote tier holds a finished copy). Returns the number deleted.
        """
        self._check_writable()
        if not self.config.delete:
            # compact alone: only what a moved log start offset left below it goes (Kafka's deleteOldSegments)
            return self._delete_log_start_offset_breached_segments()
        self.check_remote_tier_present("retention")
        remote_end = _RemoteEnd(self)  # (asked of the remote tier once a pass, and only when a segment breaches)
        return (
            self._delete_log_start_offset_breached_segments()
            + self._delete_retention_size_breached_segments(remote_end)
            + self._delete_retention_ms_breached_segments(remote_end)
        )

    def _retention_ms(self) -> int:
        if self.remote_storage_enabled:
            return int(self.config.effective_local_retention_ms)
        return int(self.config.retention_ms)

    def _retention_bytes(self) -> int:
        if self.remote_storage_enabled:
            return int(self.config.effective_local_retention_bytes)
        return int(self.config.retention_bytes)

    def _delete_log_start_offset_breached_segments(self) -> int:
        def breached(seg: LogSegment, nxt: LogSegment | None) -> bool:
            return nxt is not None and nxt.base_offset <= self.log_start_offset

        return self._delete_segments(self._deletable_segments(breached, None), "log start offset breach")

    def _delete_retention_size_breached_segments(self, remote_end: _RemoteEnd) -> int:
        limit = self._retention_bytes()
        if limit < 0:
            return 0
        diff = self.size_in_bytes - limit
        if diff <= 0:
            return 0

        def breached(seg: LogSegment, nxt: LogSegment | None) -> bool:
            nonlocal diff
            if diff - seg.size >= 0:
                diff -= seg.size
                return True
            return False

        return self._delete_segments(self._deletable_segments(breached, remote_end), "retention size breach")

    def _delete_retention_ms_breached_segments(self, remote_end: _RemoteEnd) -> int:
        limit = self._retention_ms()
        if limit < 0:
            return 0
        now = self.time.milliseconds()

        def breached(seg: LogSegment, nxt: LogSegment | None) -> bool:
            return now - seg.largest_timestamp > limit

        return self._delete_segments(self._deletable_segments(breached, remote_end), "retention time breach")

    def _deletable_segments(self, predicate: Any, remote_end: _RemoteEnd | None) -> list[LogSegment]:
        """Leading non-active segments satisfying ``predicate`` (called once per segment, in order, until it says
        no); with a remote tier (``remote_end``; None where it does not bound the deletion), only those fully
        copied. The remote tier is asked only once a segment breaches, not at every idle retention check (its
        answer costs an ownership LIST), and outside the log's lock."""
        found: list[tuple[LogSegment, int]] = []
        with self._lock:
            segs = list(self.segments.values())
            for i, seg in enumerate(segs[:-1]):  # the active segment is never deleted
                nxt = segs[i + 1]
                if self._high_watermark < nxt.base_offset or not predicate(seg, nxt):
                    break
                found.append((seg, nxt.base_offset))
        if found and remote_end is not None and self.remote_storage_enabled:
            highest_remote = remote_end.get()
            found = list(itertools.takewhile(lambda pair: pair[1] - 1 <= highest_remote, found))
        return [seg for seg, _ in found]

    def _delete_segments(self, segments: list[LogSegment], reason: str) -> int:
        """Remove ``segments`` (leading, non-active) in Kafka's order for readers: first publish the new local log
        start offset (and, without the remote tier, the log start offset, checkpointed), then take the segments
        out of the lookup list, then rename their files ``.deleted``. A reader that finds a segment gone therefore
        sees the moved start (see :meth:`read`)."""
        if not segments:
            return 0
        with self._lock:
            segments = [seg for seg in segments if self.segments.get(seg.base_offset) is seg]  # a racing pass took some
            if not segments:
                return 0
            last = segments[-1]
            following = self.segments.higher_segment(last.base_offset)
            assert following is not None, "the active segment is never deleted"
            new_start = following.base_offset
            # The log start before the local start (maybe_increment_log_start_offset moves both, in that order): a
            # reader that finds the local start past its offset then finds the log start there too, and its
            # out-of-range answer names the moved start.
            if not self.remote_storage_enabled:
                self.maybe_increment_log_start_offset(new_start, LogStartOffsetIncrementReason.SEGMENT_DELETION)
            self.local_log_start_offset = max(self.local_log_start_offset, new_start)
            self.ensure_log_start_offset_checkpointed()
            self.segments_generation += 1
            for seg in segments:
                logger.info("deleting segment %d of %s: %s", seg.base_offset, self.name, reason)
                self.segments.remove(seg.base_offset)
            self.producer_state_manager.delete_snapshots_before(new_start)
            for seg in segments:
                self._async_delete(seg)
        return len(segments)

    def replace_segments(self, new_segments: list[LogSegment], old_segments: list[LogSegment],
                         generation: int | None = None) -> int:
        """Swap ``new_segments`` (written as ``.cleaned`` files, flushed) in for ``old_segments``, crash-safely: Kafka's
        ``replaceSegments``. The new files are renamed ``.swap`` (highest base offset first, so that the loader can
        tell a complete set of swaps from an incomplete one) and the directory synced; they replace the old ones in
        the lookup list; the old files are renamed ``.deleted`` and removed after ``file.delete.delay.ms`` (reads in
        flight finish on them); the ``.swap`` files take their plain names; the directory is synced. A crash before
        every ``.swap`` exists is undone by the loader, after it is finished by the loader.

        Raises ``LogCleaningAbortedError`` (nothing changed) when the log changed since ``generation`` was read
        (:attr:`segments_generation`) or an old segment is no longer the log's. Returns the generation after the
        swap (a cleaning swapping several groups expects that one next).
        """
        self._check_writable()
        with self._lock:
            self._check_open()
            if generation is not None and generation != self.segments_generation:
                raise LogCleaningAbortedError(f"the segments of {self.name} changed while it was cleaned")
            for seg in old_segments:
                if self.segments.get(seg.base_offset) is not seg:
                    raise LogCleaningAbortedError(f"segment {seg.base_offset} of {self.name} left the log while it was "
                                                  "cleaned")
            new_sorted = sorted(new_segments, key=lambda s: s.base_offset)
            for seg in reversed(new_sorted):
                seg.change_file_suffixes(filenames.CLEANED_FILE_SUFFIX, filenames.SWAP_FILE_SUFFIX)
            fsync_dir(self.dir)  # every .swap durable before any old file is renamed .deleted
            new_bases = {seg.base_offset for seg in new_sorted}
            old_sorted = sorted(old_segments, key=lambda s: s.base_offset)
            deleted_not_replaced = [seg for seg in old_sorted if seg.base_offset not in new_bases]
            # The lookup list changes in one step (readers never see a new segment beside an old one it replaces),
            # then the old files are renamed .deleted.
            self.segments.replace(new_sorted, [seg.base_offset for seg in deleted_not_replaced])
            for seg in old_sorted:
                self._async_delete(seg)
            for seg in new_sorted:
                seg.change_file_suffixes(filenames.SWAP_FILE_SUFFIX, "")
            fsync_dir(self.dir)
            for seg in deleted_not_replaced:
                self.producer_state_manager.remove_snapshot(seg.base_offset)
            self.segments_generation += 1
            return self.segments_generation

    def last_records_of_active_producers(self) -> dict[int, tuple[int | None, int]]:
        """Each active producer's last data offset (None when its last entry is a transaction marker) and epoch
        (Kafka's ``lastRecordsOfActiveProducers``): the batches the cleaner keeps for producer state."""
        with self._lock:
            return {pid: (e.last_data_offset if e.last_data_offset >= 0 else None, e.producer_epoch)
                    for pid, e in self.producer_state_manager.active_producers.items()}

    def _async_delete(self, segment: LogSegment) -> None:
        """Rename to ``.deleted`` now; close and remove after ``file.delete.delay.ms`` (readers in flight finish)."""
        segment.change_file_suffixes("", filenames.DELETED_FILE_SUFFIX)
        delay = self.config.file_delete_delay_ms
        if self.scheduler is None or not self.scheduler.is_started:
            self._pending_deletes.append(segment)
            return
        self.scheduler.schedule_once(f"delete-file-{self.name}-{segment.base_offset}", lambda: _delete_segment_files(segment), delay)

    def delete_pending_segments(self) -> None:
        """Remove ``.deleted`` segments queued without a scheduler (tests and :meth:`close`)."""
        pending, self._pending_deletes = self._pending_deletes, []
        for seg in pending:
            _delete_segment_files(seg)

    def truncate_to(self, target_offset: int) -> bool:
        """Drop every offset >= ``target_offset`` (a follower truncating to its leader). True if anything went."""
        self._check_writable()
        target_offset = _offset_arg(self.name, "truncate_to offset", target_offset)
        if self._closed:
            self._check_open()
        if target_offset < 0:
            raise ValueError(f"cannot truncate {self.name} to a negative offset {target_offset}")
        with self._lock:
            if target_offset >= self.log_end_offset:
                return False
            first = self.segments.first_segment
            if first is None or target_offset < first.base_offset:
                self.truncate_fully_and_start_at(target_offset)
                return True
            self.leader_epoch_cache.truncate_from_end(target_offset)
            self.lost_offsets.truncate_from(target_offset)
            self.segments_generation += 1
            for seg in list(self.segments.values()):
                if seg.base_offset > target_offset:
                    self.segments.remove(seg.base_offset)
                    self._async_delete(seg)
            active = self.active_segment
            active.truncate_to(target_offset)
            self._leo = LogOffsetMetadata(target_offset, active.base_offset, active.size)
            self.recovery_point = min(self.recovery_point, target_offset)
            self._high_watermark = min(self._high_watermark, target_offset)
            self.segments_generation += 1  # (again, after the cut: a read that raced it knows to read again)
            # A truncation below the log start (moved inside the first segment by DeleteRecords) takes the log
            # start down with it, as Kafka's truncateTo does: the log start never passes the log end.
            self.local_log_start_offset = min(self.local_log_start_offset, target_offset)
            if target_offset < self.log_start_offset:
                self.log_start_offset = target_offset
                self._log_start_checkpoint_failed = True  # i.e. not yet written
                self.ensure_log_start_offset_checkpointed()
            rebuild_producer_state(
                self.producer_state_manager, self.segments, self.log_start_offset, target_offset, self.time
            )
            if self.truncation_listener is not None:
                self.truncation_listener(self, target_offset)
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and start empty at ``new_offset`` (which becomes the log start offset)."""
        self._check_writable()
        new_offset = _offset_arg(self.name, "truncate_fully_and_start_at offset", new_offset)
        if new_offset < 0:
            raise ValueError(f"cannot start {self.name} at a negative offset {new_offset}")
        with self._lock:
            if self._closed:
                self._check_open()
            # The new start first, then the segments go (the order of a retention pass): a reader that finds no
            # segment for its offset finds it below the log start, and answers out of range naming it.
            self.log_start_offset = new_offset
            self.local_log_start_offset = new_offset
            self.segments_generation += 1
            for seg in list(self.segments.values()):
                self.segments.remove(seg.base_offset)
                self._async_delete(seg)
            segment = self._new_segment(new_offset)
            self.segments.add(segment)
            self._leo = LogOffsetMetadata(new_offset, new_offset, 0)
            self.leader_epoch_cache.clear_and_flush()
            self.producer_state_manager.truncate_full_and_start_at(new_offset)
            self.lost_offsets.clear()
            self.recovery_point = new_offset
            self._high_watermark = new_offset
            if self.truncation_listener is not None:
                self.truncation_listener(self, new_offset)

    # ------------------------------------------------------------------------------------------------------
    # Leader epochs

    def assign_epoch_start_offset(self, leader_epoch: int, start_offset: int | None = None) -> None:
        """Become leader in ``leader_epoch``: later appends are stamped with it."""
        with self._lock:
            self._leader_epoch = leader_epoch
            self.leader_epoch_cache.assign(leader_epoch, self.log_end_offset if start_offset is None else start_offset)

    @property
    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch()

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        return self.leader_epoch_cache.end_offset_for(leader_epoch, self.log_end_offset)

    # ------------------------------------------------------------------------------------------------------
    # Lifecycle

    def close(self) -> None:
        """Clean close: snapshot the producer state, flush, trim the indexes. Queued deletes run now."""
        with self._lock:
            if self._closed:
                return
            self.flush()
            self.producer_state_manager.take_snapshot()
            self.delete_pending_segments()
            self.segments.close()
            self._closed = True

    def close_handlers(self) -> None:
        """Release file handles without flushing or trimming (a data dir going offline)."""
        with self._lock:
            self._release_handles()
            self._closed = True

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        with self._lock:
            self.close()
            delete_partition_dir(self.dir)  # (renamed <name>.<uuid>-delete first: never loaded half removed)

    def _check_open(self) -> None:
        if self._offline is not None:
            if not self._handles_released:
                self.mark_offline(self._offline)  # mark_offline found the lock taken: release them now
            raise LogDirOfflineError(
                f"log {self.name} is offline: its data dir {self.dir.parent} was taken offline ({self._offline})",
                path=str(self.dir), log_dir=str(self.dir.parent),
            )
        if self._closed:
            raise KafkaStorageError(f"log {self.name} in {self.dir} is closed", path=str(self.dir))

    # ------------------------------------------------------------------------------------------------------
    # Storage faults (Kafka's maybeHandleIOException and LogDirFailureChannel)

    @property
    def is_offline(self) -> bool:
        """True once this log's data dir was taken offline: reads and writes raise ``LogDirOfflineError``."""
        return self._offline is not None

    def mark_offline(self, reason: str) -> None:
        """Refuse every read and write from now on, and release the file handles (Kafka closes the handlers
        of a failed dir's logs). Never waits for the log lock (the caller may hold another log's lock): when
        another thread holds it, the handles are released by the next call that takes it."""
        if self._offline is None:
            self._offline = reason
        self._closed = True
        if not self._handles_released and self._lock.acquire(blocking=False):
            try:
                self._release_handles()
                self._handles_released = True
            finally:
                self._lock.release()

    def _release_handles(self) -> None:
        for seg in self.segments.values():
            seg.close_handlers()

    def _handle_io_error(self, action: str, exc: OSError) -> NoReturn:
        """An I/O error while ``action`` this log: the log goes offline at once, the error is reported to the
        log dir failure channel (which takes the whole data dir offline), and ``KafkaStorageIOError`` is raised
        naming the dir, the file and the errno."""
        if isinstance(exc, LogDirOfflineError) or (isinstance(exc, KafkaStorageIOError) and self._offline is not None):
            raise exc  # already handled by an inner call (a flush inside an append, a roll inside an append)
        data_dir = self.dir.parent
        path = exc.filename or getattr(exc, "path", None) or self.dir
        cause = exc.__cause__ if isinstance(exc, KafkaStorageError) and isinstance(exc.__cause__, OSError) else exc
        errno = exc.errno if exc.errno is not None else getattr(cause, "errno", None)
        message = f"I/O error while {action} {self.name} ({path}): {cause}"
        self.mark_offline(message)
        self.log_dir_failure_channel.maybe_add_offline_log_dir(data_dir, message, exc)
        raise KafkaStorageIOError(  # (no strerror attribute: OSError's str() would then drop the message)
            f"{message}; data dir {data_dir} is now offline",
            path=str(path), log_dir=str(data_dir), errno=errno, topic=self.topic, partition=self.partition,
        ) from exc

    @property
    def is_closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return (
            f"Log({self.name}, dir={self.dir}, log_start_offset={self.log_start_offset}, "
            f"local_log_start_offset={self.local_log_start_offset}, log_end_offset={self.log_end_offset}, "
            f"high_watermark={self._high_watermark}, segments={self.number_of_segments()})"
        )


class _RemoteEnd:
    """The highest offset the remote tier holds a copy of, asked once per retention pass (at first need) and noted
    in the partition's ``remote-log-state``."""

    def __init__(self, log: Log) -> None:
        self._log = log
        self._value: int | None = None

    def get(self) -> int:
        if self._value is None:
            tier = self._log.remote_tier
            assert tier is not None
            self._value = tier.highest_offset_in_remote_storage(self._log)
            if self._value >= 0:
                self._log.note_highest_remote_offset(self._value)
        return self._value


def _unchangeable(data: bytes | bytearray | memoryview) -> bytes | memoryview:
    """``data``, or a copy of it when its owner could still change it (a bytearray, or a view of one): what the
    append checks must be what it writes."""
    if isinstance(data, bytes) or (isinstance(data, memoryview) and isinstance(data.obj, bytes)):
        return data
    return bytes(data)


def _offset_arg(log_name: str, what: str, value: Any) -> int:
    """``value`` as an int offset, or TypeError naming the argument: a float, a bool or a string must never reach
    the checkpoints (written with ``{}``, they make the partition unloadable) nor a file name."""
    if type(value) is int:
        return value
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{what} of {log_name} must be an int offset, got {type(value).__name__} {value!r}")
    return value.__index__()


def _as_offset(value: Any) -> int:
    return value.message_offset if hasattr(value, "message_offset") else int(value)


def _next_base(segments: LogSegments, segment: LogSegment) -> int | None:
    """The base offset of the segment after ``segment`` (None for the last)."""
    nxt = segments.higher_segment(segment.base_offset)
    return None if nxt is None else nxt.base_offset


def _delete_segment_files(segment: LogSegment) -> None:
    try:
        segment.delete_if_exists()
    except OSError:
        logger.exception("failed to delete segment %r", segment)


def _init_partition_metadata(directory: Path, topic_id: uuid.UUID | None) -> uuid.UUID:
    """Read ``partition.metadata`` or write it: the topic id never changes once a partition dir has one. A
    partition dir that lost the file while its ``remote-log-state`` says it has remote data (or claimed it) gets no
    new id: the id names that data in the remote tier (its objects' keys, its owner records), and a new one would cut
    every offloaded record off from the log, silently (KafkaStorageError naming both files)."""
    meta = PartitionMetadataFile(directory / filenames.PARTITION_METADATA_FILENAME)
    existing = meta.read() if meta.exists() else None
    if existing is not None:
        if topic_id is not None and existing != topic_id:
            raise KafkaStorageError(
                f"topic id {topic_id} does not match the id {existing} recorded in {meta.path}",
                path=str(meta.path),
            )
        return existing
    if topic_id is None:
        remote = RemoteLogStateFile(directory).read()
        if remote.has_remote_data or remote.claimed:
            raise KafkaStorageError(
                f"{meta.path} is missing, but {directory / REMOTE_LOG_STATE_FILENAME} says the partition has data in "
                f"remote storage (up to offset {remote.highest_remote_offset}, owner epoch {remote.owner_epoch}): its "
                "topic id names that data, so no new one is made. Restore the file (the id is in the remote tier's "
                f"keys: {directory.name.rpartition('-')[0]}-<topic id>/)",
                path=str(meta.path),
            )
    topic_id = topic_id or uuid.uuid4()
    meta.write(topic_id)
    return topic_id
