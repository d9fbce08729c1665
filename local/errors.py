"""Errors of the local log engine.

Every error the storage layer raises derives from :class:`KafkaStorageError`, and carries the context a
reader needs to act on it (path, offset, position) both as attributes and in its message.
"""

from __future__ import annotations

from typing import Any


class KafkaStorageError(Exception):
    """Root of every error raised by :mod:`local`."""

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.context = context
        for key, value in context.items():
            setattr(self, key, value)


# Records -------------------------------------------------------------------------------------------


class CorruptRecordError(KafkaStorageError):
    """Bytes that cannot be a valid record batch: bad CRC, too short, truncated, wrong magic."""


class InvalidRecordError(KafkaStorageError):
    """A well-formed batch whose content breaks a rule (record count mismatch, bad varint, ...)."""


class InvalidTopicError(KafkaStorageError):
    """A write to a topic clients may not write to (an internal topic: Kafka's InvalidTopicException)."""


class UnsupportedCompressionTypeError(KafkaStorageError):
    """A batch names a compression codec that does not exist or is not available."""


class RecordTooLargeError(KafkaStorageError):
    """A batch larger than `max.message.bytes` or than a segment can hold."""


class RecordBatchTooLargeError(RecordTooLargeError):
    """A whole append (one MemoryRecords) is larger than the segment size."""


class InvalidTimestampError(KafkaStorageError):
    """A CreateTime timestamp outside `message.timestamp.before/after.max.ms`."""


# Indexes -------------------------------------------------------------------------------------------


class CorruptIndexError(KafkaStorageError):
    """An index file that fails its sanity check or cannot be read in any known format."""


class InvalidOffsetError(KafkaStorageError):
    """An index append whose offset (or timestamp) goes backwards."""


class IndexOffsetOverflowError(KafkaStorageError):
    """An offset whose distance from the segment's base offset does not fit in an int32."""


class IndexFullError(KafkaStorageError):
    """An append to an index that has no free slot."""


class InvalidIndexTimestampError(InvalidOffsetError):
    """A time index append whose timestamp is below the last timestamp appended."""


class ReadOnlyIndexError(KafkaStorageError):
    """A write, resize or trim of an index that was opened read-only."""


class IndexClosedError(KafkaStorageError):
    """A lookup or write on an index whose memory map was already released (after close)."""


class LegacyIndexPositionOverflowError(KafkaStorageError):
    """A position past 2^31-1 appended to an 8-byte (legacy) offset index.

    Positions that large need the 12-byte entry format of KIP-1333, which is only written once the
    large-index feature is finalized (``tiered features upgrade --release-version 4.4``).
    """


# Segments and logs ---------------------------------------------------------------------------------


class LogSegmentOffsetOverflowError(KafkaStorageError):
    """A batch whose offsets cannot be expressed relative to its segment's base offset."""


class TooManyPartitionsError(KafkaStorageError):
    """New partitions refused before any is made: their files would not fit under the process's limit of open
    files (:func:`local.manager.open_files_refusal`)."""


class UnknownTopicOrPartitionError(KafkaStorageError):
    """A write to a partition its topic does not have (Kafka's UNKNOWN_TOPIC_OR_PARTITION): a topic's partitions
    change only when asked (``tiered topics alter --partitions N``). Carries ``topic`` and ``partition``."""


class OffsetOutOfRangeError(KafkaStorageError):
    """A read at an offset below the log start offset or above the log end offset."""


class LostOffsetsError(KafkaStorageError):
    """A read of an offset that a recovery cut out of the middle of the log (a damaged closed segment truncated,
    the segments after it kept), as recorded in the partition's ``tiered-lost-offsets`` (:mod:`local.lost_offsets`).
    Unlike a gap compaction left, such a read is never answered with the next batch. Carries ``offset``,
    ``first_offset``/``last_offset`` (the lost range), ``next_offset`` (where reading may go on), ``path`` (the
    segment file the operator knows) and ``topic``/``partition``."""


class LogCleaningAbortedError(KafkaStorageError):
    """A log cleaning stopped before its swap (Kafka's ``LogCleaningAbortedException``): the cleaner stopping, the
    partition's cleaning aborted, or the log changed under it (truncated, segments deleted). Nothing of it is
    visible: its ``.cleaned`` files are deleted."""


class InvalidProducerEpochError(KafkaStorageError):
    """A batch from a producer epoch older than the one the log has seen."""


class OutOfOrderSequenceError(KafkaStorageError):
    """An idempotent batch whose sequence number does not follow the last one appended."""


class InvalidTxnStateError(KafkaStorageError):
    """A transaction marker or transactional batch that breaks the transaction state machine."""


class CorruptSnapshotError(KafkaStorageError):
    """A producer state snapshot with an unknown version or a CRC mismatch."""


class CorruptCheckpointError(KafkaStorageError):
    """A checkpoint file whose version, entry count or lines are malformed."""


class KafkaStorageIOError(KafkaStorageError, OSError):
    """An I/O failure that takes a data dir offline."""


class LogDirOfflineError(KafkaStorageIOError):
    """An operation on a log whose data dir was taken offline after an I/O error."""


# Configuration -------------------------------------------------------------------------------------


class ConfigError(KafkaStorageError, ValueError):
    """An invalid configuration value: the message names the key, the value and the allowed range."""


class FeatureDowngradeError(KafkaStorageError):
    """An attempt to lower a finalized feature level."""


class RemoteStorageNotConfiguredError(KafkaStorageError):
    """A partition holds data in remote storage (its ``remote-log-state`` says so, or its topic enables remote
    storage) but this process was opened without the remote tier: reading that data or running retention
    would return nothing or destroy it, so the operation is refused, naming the missing settings."""


class ReadOnlyLogError(KafkaStorageError):
    """A log opened read-only (by ``consume``, ``status``... ) was asked to change."""


# Storage faults (appended) -------------------------------------------------------------------------


class PartitionOfflineError(KafkaStorageError):
    """An operation on a partition that could not be loaded (a corrupt per-partition file such as
    ``partition.metadata`` or ``leader-epoch-checkpoint``): only that partition is offline, its data dir serves on.
    Carries ``topic``, ``partition``, ``path`` (the bad file, or the partition dir) and ``reason``."""
