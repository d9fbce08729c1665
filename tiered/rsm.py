"""The tiered-storage plugin interface (KIP-405 shape) and its value types.

A :class:`RemoteStorageManager` copies a closed segment's files to a remote store, fetches byte ranges of them
back and deletes them. Plugins are loaded by dotted path from ``remote.log.storage.manager.class.name`` and
configured with the ``rsm.config.*`` keys (prefix stripped).
"""

from __future__ import annotations

import enum
import logging
import uuid
import warnings
from abc import ABC
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from local.records.constants import INT32_MAX
from tiered.errors import InvalidStateTransitionError, RemoteStorageError

if TYPE_CHECKING:
    from tiered.store import ObjectStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    topic_id: uuid.UUID
    topic: str
    partition: int

    def __post_init__(self) -> None:
        p = self.partition
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= INT32_MAX:
            raise ValueError(f"invalid partition {p!r} of topic {self.topic!r}: must be a whole number in 0..{INT32_MAX}")
        if not isinstance(self.topic_id, uuid.UUID):  # (a str id made keys and events no reader finds again)
            raise TypeError(f"the topic id of {self.topic!r} must be a uuid.UUID (tiered.layout.parse_kafka_uuid reads "
                            f"Kafka's 22-character form), got {type(self.topic_id).__name__} {self.topic_id!r}")
        if not isinstance(self.topic, str):
            raise TypeError(f"the topic must be a str, got {type(self.topic).__name__} {self.topic!r}")

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}:{self.topic_id}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    """A remote segment: its partition and a uuid unique to one copy attempt."""

    topic_id_partition: TopicIdPartition
    id: uuid.UUID

    @classmethod
    def generate_new(cls, topic_id_partition: TopicIdPartition) -> RemoteLogSegmentId:
        return cls(topic_id_partition, uuid.uuid4())

    def __str__(self) -> str:
        return f"RemoteLogSegmentId({self.topic_id_partition}, {self.id})"


class RemoteLogSegmentState(enum.IntEnum):
    """Kafka's states; a copy is readable only once COPY_SEGMENT_FINISHED."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3

    @staticmethod
    def is_valid_transition(source: RemoteLogSegmentState | None, target: RemoteLogSegmentState) -> bool:
        S = RemoteLogSegmentState
        if source is None:
            return target is S.COPY_SEGMENT_STARTED
        if source is target:
            return True  # repeating a state is allowed (idempotent updates)
        allowed = {
            S.COPY_SEGMENT_STARTED: {S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED},
            S.COPY_SEGMENT_FINISHED: {S.DELETE_SEGMENT_STARTED},
            S.DELETE_SEGMENT_STARTED: {S.DELETE_SEGMENT_FINISHED},
            S.DELETE_SEGMENT_FINISHED: set(),
        }
        return target in allowed[source]

    @staticmethod
    def check_transition(source: RemoteLogSegmentState | None, target: RemoteLogSegmentState) -> None:
        if not RemoteLogSegmentState.is_valid_transition(source, target):
            raise InvalidStateTransitionError(
                f"invalid remote segment state transition {source.name if source else None} -> {target.name}"
            )


class IndexType(enum.Enum):
    OFFSET = ".index"
    TIMESTAMP = ".timeindex"
    PRODUCER_SNAPSHOT = ".snapshot"
    TRANSACTION = ".txnindex"
    LEADER_EPOCH = "leader-epoch-checkpoint"

    @property
    def suffix(self) -> str:
        return self.value


@dataclass(frozen=True)
class RemoteLogSegmentMetadata:
    """Kafka's RemoteLogSegmentMetadata. ``segment_size_in_bytes`` is serialized as an int32: a larger size is
    clamped to 2147483647 with a warning. Nothing in the read path relies on it (positions come from the
    64-bit offset index)."""

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int]
    custom_metadata: bytes | None = None
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED

    def __post_init__(self) -> None:
        if not isinstance(self.remote_log_segment_id, RemoteLogSegmentId):
            raise TypeError(f"remote_log_segment_id must be a RemoteLogSegmentId, got "
                            f"{type(self.remote_log_segment_id).__name__} {self.remote_log_segment_id!r}")
        for name in ("start_offset", "end_offset", "max_timestamp_ms", "broker_id", "event_timestamp_ms",
                     "segment_size_in_bytes"):
            value = getattr(self, name)
            if type(value) is int:
                continue
            if isinstance(value, bool) or not hasattr(type(value), "__index__"):  # (a float reached the events)
                raise TypeError(f"{name} of {self.remote_log_segment_id} must be an int, got {type(value).__name__} "
                                f"{value!r}")
            object.__setattr__(self, name, value.__index__())  # (a numpy integer: JSON and struct want an int)
        if self.custom_metadata is not None and not isinstance(self.custom_metadata, bytes):
            raise TypeError(f"custom_metadata of {self.remote_log_segment_id} must be bytes or None, got "
                            f"{type(self.custom_metadata).__name__}")
        if self.start_offset < 0 or self.end_offset < self.start_offset:
            raise ValueError(
                f"invalid offsets for {self.remote_log_segment_id}: start {self.start_offset}, end {self.end_offset}"
            )
        if not self.segment_leader_epochs:
            raise ValueError(f"segment_leader_epochs of {self.remote_log_segment_id} must not be empty")
        if self.segment_size_in_bytes < 0:
            raise ValueError(f"negative segment size {self.segment_size_in_bytes}")
        if self.segment_size_in_bytes > INT32_MAX:
            logger.warning(
                "segment %s is %d bytes; its metadata records %d (the serialized size is an int32)",
                self.remote_log_segment_id, self.segment_size_in_bytes, INT32_MAX,
            )
            object.__setattr__(self, "segment_size_in_bytes", INT32_MAX)
        object.__setattr__(self, "segment_leader_epochs", dict(sorted(self.segment_leader_epochs.items())))

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition

    def create_with_updates(self, update: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        if update.remote_log_segment_id != self.remote_log_segment_id:
            raise ValueError(f"update for {update.remote_log_segment_id} applied to {self.remote_log_segment_id}")
        RemoteLogSegmentState.check_transition(self.state, update.state)
        return replace(
            self,
            broker_id=update.broker_id,
            event_timestamp_ms=update.event_timestamp_ms,
            custom_metadata=update.custom_metadata if update.custom_metadata is not None else self.custom_metadata,
            state=update.state,
        )


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    custom_metadata: bytes | None
    state: RemoteLogSegmentState
    broker_id: int


@dataclass(frozen=True)
class LogSegmentData:
    """The local files of a segment to copy, and its leader-epoch checkpoint text."""

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot_index: Path
    leader_epoch_index: bytes = field(default=b"")


class RemoteStorageManager(ABC):  # noqa: B024 - abstract by contract: at least one fetch variant must be overridden
    """The plugin interface. Contracts:

    - ``copy_log_segment_data`` is idempotent: copying the same segment id again overwrites. On failure it deletes
      what it uploaded and raises :class:`RemoteStorageError`. It returns optional custom metadata (bytes).
    - ``fetch_log_segment(metadata, start, end=None)``: 64-bit positions, ``end`` inclusive, returns a readable
      binary stream. ``fetch_log_segment_int32`` is the deprecated 32-bit variant. A plugin must implement at
      least one; a plugin with only the 32-bit variant keeps working through the default 64-bit method, which
      checks bounds and raises a clear error past 2^31-1.
    - ``fetch_index``: a missing transaction index raises :class:`RemoteResourceNotFoundError`.
    - ``delete_log_segment_data`` of something already gone is not an error.
    """

    _ABSTRACT_HELPER = True

    #: True when ``fetch_log_segment`` returns a stream that reads from the store as it is read, rather than the
    #: whole range at once (not part of Kafka's interface; a plugin that says nothing is taken not to stream).
    #: The remote segment cache then serves a sequential reader from one open fetch per segment, opened to
    #: the segment's end, instead of one ranged fetch per chunk.
    fetch_streams: bool = False
    #: True when the plugin holds keys that decrypt segments (not part of Kafka's interface): the segment cache
    #: then keeps their plaintext off local disk unless remote.log.segment.cache.plaintext.disk.enable allows it.
    decrypts: bool = False
    #: The object store this plugin keeps its segments in and the key prefix of its objects (not part of Kafka's
    #: interface): set by a plugin that composes a store with the segment format
    #: (:class:`tiered.backends.composed.ObjectStoreRemoteStorageManager`), None otherwise. What works on the
    #: objects themselves needs it: metadata in the bucket, ``verify --remote``, ``keys rotate``, ``attach``.
    object_store: ObjectStore | None = None
    prefix: str = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("_ABSTRACT_HELPER", False):
            return
        has64 = cls.fetch_log_segment is not RemoteStorageManager.fetch_log_segment
        has32 = cls.fetch_log_segment_int32 is not RemoteStorageManager.fetch_log_segment_int32
        if not (has64 or has32):
            raise TypeError(
                f"{cls.__qualname__} implements neither fetch_log_segment (64-bit) nor the deprecated "
                "fetch_log_segment_int32: a RemoteStorageManager must implement at least one"
            )

    def configure(self, props: Mapping[str, str]) -> None:  # noqa: B027 - optional hook
        """Receive the ``rsm.config.*`` keys (prefix stripped)."""

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> bytes | None:
        raise NotImplementedError

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> IO[bytes]:
        if start_position > INT32_MAX or (end_position is not None and end_position > INT32_MAX):
            raise RemoteStorageError(
                f"{type(self).__qualname__} implements only the 32-bit fetch_log_segment_int32 and cannot read "
                f"positions past {INT32_MAX} (asked for {start_position}..{end_position}) of "
                f"{metadata.remote_log_segment_id}; implement fetch_log_segment for segments larger than 2 GiB"
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return self.fetch_log_segment_int32(metadata, start_position, end_position)

    def fetch_log_segment_int32(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> IO[bytes]:
        """Deprecated 32-bit variant: positions must fit in an int32."""
        warnings.warn(
            "fetch_log_segment_int32 is deprecated: use fetch_log_segment (64-bit positions)", DeprecationWarning,
            stacklevel=2,
        )
        if start_position > INT32_MAX or (end_position is not None and end_position > INT32_MAX):
            raise RemoteStorageError(f"position past {INT32_MAX} in the 32-bit fetch_log_segment_int32")
        return self.fetch_log_segment(metadata, start_position, end_position)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> IO[bytes]:
        raise NotImplementedError

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        raise NotImplementedError

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""

    def __enter__(self) -> RemoteStorageManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
