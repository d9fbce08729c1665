"""A RemoteStorageManager of your own: remote segments kept as plain files in a directory.

The example of ``docs/custom-rsm.md``; tests/unit/test_custom_rsm.py imports it and runs it through the library and
the ``tiered`` CLI, so what the guide shows works. Configure it with::

    remote.log.storage.system.enable=true
    remote.log.storage.manager.class.name=directory_rsm.DirectoryStorage
    rsm.config.root=/srv/remote-segments

(``directory_rsm`` must be importable: on ``PYTHONPATH`` or installed.) Each remote segment is a directory
``<root>/<topic>-<partition>-<topic id>/<start offset>-<segment id>/`` holding one file per object. A copy is
written into a temporary directory and renamed into place, so a reader never sees half a segment and copying the
same segment again replaces it (idempotent).
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from tiered import IndexType, LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageManager
from tiered.errors import RemoteResourceNotFoundError, RemoteStorageError

LOG_FILE = "segment.log"


class DirectoryStorage(RemoteStorageManager):
    """Remote segments as files under ``rsm.config.root``."""

    root: Path

    def configure(self, props: Mapping[str, str]) -> None:
        """Receives the ``rsm.config.*`` keys, prefix stripped."""
        root = props.get("root")
        if not root:
            raise RemoteStorageError("rsm.config.root is required: the directory that holds the remote segments")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _segment_dir(self, metadata: RemoteLogSegmentMetadata) -> Path:
        segment_id = metadata.remote_log_segment_id
        tip = segment_id.topic_id_partition
        return self.root / f"{tip.topic}-{tip.partition}-{tip.topic_id}" / f"{metadata.start_offset:020d}-{segment_id.id}"

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> bytes | None:
        target = self._segment_dir(metadata)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".copy-", dir=target.parent))
        try:
            shutil.copyfile(segment_data.log_segment, staging / LOG_FILE)
            shutil.copyfile(segment_data.offset_index, staging / IndexType.OFFSET.suffix)
            shutil.copyfile(segment_data.time_index, staging / IndexType.TIMESTAMP.suffix)
            if segment_data.transaction_index is not None:
                shutil.copyfile(segment_data.transaction_index, staging / IndexType.TRANSACTION.suffix)
            shutil.copyfile(segment_data.producer_snapshot_index, staging / IndexType.PRODUCER_SNAPSHOT.suffix)
            (staging / IndexType.LEADER_EPOCH.suffix).write_bytes(segment_data.leader_epoch_index)
            shutil.rmtree(target, ignore_errors=True)  # a repeated copy replaces the earlier one
            os.replace(staging, target)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)  # a failed copy leaves nothing behind
            raise RemoteStorageError(f"copy of {metadata.remote_log_segment_id} to {target} failed: {exc}") from exc
        return None  # no custom metadata

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> IO[bytes]:
        """Bytes ``start_position..end_position`` (inclusive; to the end when None) of the segment's ``.log``."""
        path = self._segment_dir(metadata) / LOG_FILE
        try:
            with open(path, "rb") as f:
                f.seek(start_position)
                size = -1 if end_position is None else end_position - start_position + 1
                return io.BytesIO(f.read(size))
        except FileNotFoundError:
            raise RemoteResourceNotFoundError(f"no remote segment {path}") from None

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> IO[bytes]:
        """One index of the segment; a segment copied without a transaction index raises "not found"."""
        path = self._segment_dir(metadata) / index_type.suffix
        try:
            return io.BytesIO(path.read_bytes())
        except FileNotFoundError:
            raise RemoteResourceNotFoundError(f"no {index_type.name} index {path}") from None

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Deleting a segment that is already gone is not an error."""
        shutil.rmtree(self._segment_dir(metadata), ignore_errors=True)
