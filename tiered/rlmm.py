"""RemoteLogMetadataManager: where the metadata of remote segments lives (Kafka's ``RemoteLogMetadataManager``).

The RemoteLogManager records every state change of a remote segment here and asks it which segment holds an
offset; the RemoteStorageManager only moves the segments' bytes. Keeping the two apart is what lets any
``RemoteStorageManager`` subclass serve as the remote tier: one that is not an object-store backend has nowhere
to keep metadata, so the metadata goes to a local directory instead.

Configuration, Kafka's names: ``remote.log.metadata.manager.class.name`` picks the implementation and every key
under ``remote.log.metadata.manager.impl.prefix`` (default ``rlmm.config.``) is its configuration, prefix
stripped. Implementations (both :class:`tiered.metadata.RemoteLogMetadataStore`, one JSON object per state change,
see that module):

``bucket``
    In the RemoteStorageManager's own object store, beside the segments (``<prefix>/<topic>-<topicId>/<partition>/
    __remote_log_metadata/``): a new machine or a Spark job finds every remote segment from the bucket alone. Needs
    a plugin built on an object store (``local``, ``s3``, ``fsspec``, ``store``: any whose ``object_store`` is set).
    The default for those.
``local``
    In a directory on this machine: ``rlmm.config.dir``, by default ``remote-log-metadata/`` in the first data dir.
    Works with any RemoteStorageManager; the default for one that is not an object-store backend. The metadata
    then lives on this machine only: another machine cannot find the remote segments from the remote store alone.

The dotted path of a class implementing :class:`RemoteLogMetadataManager` with a no-argument constructor and
``configure(props)`` also works: it is configured with the ``rlmm.config.*`` keys.

Differences from Kafka's interface, kept because the RemoteLogManager's copy and cleanup need them: a
COPY_SEGMENT_FINISHED update carries the segment's checksums (:mod:`tiered.checksums`); ``find_stale_copies``,
``unfinished_segments`` and ``purge`` clean up after a crashed or failed copy, ``remove_leftover_events`` after a
crashed deletion; ``refresh`` shows what another data dir wrote; ``readable_segments``, ``foreign_segments``, ``owner_records``, ``claim_ownership``,
``holds_metadata`` and ``max_epoch`` give one writer per partition across machines sharing a store
(:mod:`tiered.ownership`). Calls are synchronous (Kafka's return futures). ``remote_log_segment_metadata`` takes the offset before the (optional) epoch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from tiered.checksums import SegmentChecksums
    from tiered.ownership import OwnerRecord
    from tiered.rsm import RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, TopicIdPartition

#: ``remote.log.metadata.manager.class.name`` short names (see the module docstring).
BUCKET = "bucket"
LOCAL = "local"
#: The directory of the ``local`` implementation when ``rlmm.config.dir`` is not set, in the first data dir.
DEFAULT_LOCAL_DIR_NAME = "remote-log-metadata"


@runtime_checkable
class RemoteLogMetadataManager(Protocol):
    """Stores and serves remote segment metadata; see the module docstring. Thread-safe."""

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Record a new remote segment. Its state must be COPY_SEGMENT_STARTED (``ValueError`` otherwise)."""
        ...

    def update_remote_log_segment_metadata(
        self, update: RemoteLogSegmentMetadataUpdate, checksums: SegmentChecksums | None = None
    ) -> RemoteLogSegmentMetadata:
        """Record a state change (``KeyError`` for an unknown segment, ``ValueError`` for a transition Kafka refuses);
        ``checksums`` go with COPY_SEGMENT_FINISHED. Returns the segment's metadata in its new state."""
        ...

    def remote_log_segment_metadata(
        self, tip: TopicIdPartition, offset: int, leader_epoch: int | None = None
    ) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` (in ``leader_epoch``'s range when given), or None."""
        ...

    def list_remote_log_segments(
        self, tip: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """Every segment of the partition not yet DELETE_SEGMENT_FINISHED (with ``leader_epoch`` among its epochs,
        when given), ordered by start offset."""
        ...

    def readable_segments(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """The COPY_SEGMENT_FINISHED segments reads may use, ordered by start offset: those within the current
        owner's lineage (:mod:`tiered.ownership`), never a segment whose deletion started."""
        ...

    def foreign_segments(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """Segments copied (or being copied) outside the current owner's lineage, for its retention to delete."""
        ...

    def owner_records(self, tip: TopicIdPartition) -> list[OwnerRecord]:
        """The partition's owner records (:mod:`tiered.ownership`) by ascending epoch, as the store holds them now;
        empty for a manager that keeps none (ownership is then never checked)."""
        ...

    def claim_ownership(self, tip: TopicIdPartition, record: OwnerRecord) -> None:
        """Create ``record`` only if its epoch has none (``tiered.errors.ObjectExistsError`` otherwise)."""
        ...

    def holds_metadata(self, tip: TopicIdPartition) -> bool:
        """Whether any metadata of the partition (an event or an owner record) is there."""
        ...

    def max_epoch(self, tip: TopicIdPartition) -> int:
        """The highest leader epoch known of the partition (owner records and segments), -1 when none."""
        ...

    def segment_checksums(self, metadata: RemoteLogSegmentMetadata) -> SegmentChecksums | None:
        """The checksums recorded when the segment's copy finished (None for a copy made without them)."""
        ...

    def find_stale_copies(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """Segments left COPY_SEGMENT_STARTED or DELETE_SEGMENT_STARTED, as the store holds them now (after a crash:
        their objects must be deleted)."""
        ...

    def unfinished_segments(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """Segments this process left STARTED (a failed copy whose cleanup failed too), without asking the store."""
        ...

    def purge(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Forget every state of a copy that never finished (deleting what is gone is not an error)."""
        ...

    def refresh(self, tip: TopicIdPartition) -> None:
        """Bring what this manager knows of the partition up to date with where the metadata lives: the copy task
        asks before it copies, to see a segment another data dir copied under this one's claim. A no-op for a manager
        that is always current."""
        ...

    def remove_leftover_events(self, tip: TopicIdPartition) -> int:
        """Delete what a crash in a deletion left of segments whose deletion finished (their events of lower states;
        never read); how many. Called by the partition's owner at each retention pass: return 0 for a manager that
        leaves nothing behind."""
        ...

    def close(self) -> None:
        """Release what the manager holds; called once, when the remote tier closes."""
        ...
