"""How a remote segment is deleted, the one way every task does it (Kafka's order of metadata events and objects),
and the claims that keep two tasks of this process from deleting the same segment at once."""

from __future__ import annotations

import logging
import threading
import uuid
from typing import TYPE_CHECKING

from tiered.rsm import RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState

if TYPE_CHECKING:
    from tiered.remote_tier_parts import RemoteTierParts

logger = logging.getLogger(__name__)


class DeletionClaims:
    """The remote segments (by id) whose deletion a task of this process is carrying out."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: set[uuid.UUID] = set()

    def claim(self, segment_id: uuid.UUID) -> bool:
        """Take the segment's deletion; False when another task holds it."""
        with self._lock:
            if segment_id in self._ids:
                return False
            self._ids.add(segment_id)
            return True

    def release(self, segment_id: uuid.UUID) -> None:
        with self._lock:
            self._ids.discard(segment_id)


def delete_remote_segment(parts: RemoteTierParts, md: RemoteLogSegmentMetadata, reason: str) -> bool:
    """Kafka's order: DELETE_SEGMENT_STARTED, the objects, DELETE_SEGMENT_FINISHED; then the segment leaves the
    caches. A failed object delete leaves the STARTED event (retried by the next pass that finds it).

    One deletion of a segment at a time in this process: the copy task's cleanup takes every segment left
    DELETE_SEGMENT_STARTED for a leftover, which includes the one the expiration task is deleting at that moment. A
    segment another task is deleting, or deleted since the caller listed it, is left alone: returns False (True
    when this call deleted it)."""
    sid = md.remote_log_segment_id
    if not parts.deletions.claim(sid.id):
        logger.debug("remote segment %s is being deleted by another task", sid)
        return False
    try:
        if md.state is not RemoteLogSegmentState.COPY_SEGMENT_FINISHED and not _listed(parts, md):
            logger.debug("remote segment %s was deleted since it was listed", sid)
            return False
        logger.info("deleting remote segment %s (%d-%d): %s", sid, md.start_offset, md.end_offset, reason)
        _set_state(parts, md, RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
        try:
            parts.rsm.delete_log_segment_data(md)
        except Exception:
            parts.metrics.delete_errors.inc()
            raise
        _set_state(parts, md, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED)
        parts.index_cache.remove(sid.id)
        parts.segments.invalidate(md)
        parts.metrics.delete_requests.inc()
        return True
    finally:
        parts.deletions.release(sid.id)


def _listed(parts: RemoteTierParts, md: RemoteLogSegmentMetadata) -> bool:
    """Whether the metadata still lists ``md``'s segment (not DELETE_SEGMENT_FINISHED). Asked only for a segment the
    caller found unfinished (the copy task's cleanup): a FINISHED one is deleted by the expiration task alone, whose
    runs never overlap."""
    sid = md.remote_log_segment_id
    return any(m.remote_log_segment_id == sid for m in parts.metadata.list_remote_log_segments(sid.topic_id_partition))


def _set_state(parts: RemoteTierParts, md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> None:
    parts.metadata.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, parts.time.milliseconds(), None, state, parts.broker_id)
    )
