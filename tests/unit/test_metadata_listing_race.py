"""A reader whose listing predates the owner's deletion of the last live segment and whose GETs come after the
owner's next retention pass (which removes the previous last deleted segment's event as superseded) finds neither
event: its next_offset falls back below offsets the partition already used (an attach there reuses them)."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.unit.test_metadata_deleted_events import TOPIC, _set
from tiered.backends.local_dir import LocalDirStore
from tiered.metadata import RemoteLogMetadataStore
from tiered.rsm import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition

S = RemoteLogSegmentState


class _ListThen(LocalDirStore):
    """Runs ``after_list`` once, right after a listing (what the owner did between a reader's LIST and its GETs)."""

    after_list = None

    def list_keys(self, prefix: str):  # type: ignore[no-untyped-def]
        keys = list(super().list_keys(prefix))
        hook, self.after_list = self.after_list, None
        if hook is not None:
            hook()
        return keys


def test_a_reader_racing_two_retention_passes_still_ends_where_the_history_ends(tmp_path: Path) -> None:
    base = LocalDirStore()
    base.configure({"dir": str(tmp_path / "bucket")})
    writer = RemoteLogMetadataStore(base)
    tip = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    segs = []
    for start in (0, 10, 20):
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), start, start + 9, 0, 0, 0, 10, {0: start})
        writer.add_remote_log_segment_metadata(md)
        _set(writer, md, S.COPY_SEGMENT_FINISHED)
        segs.append(md)
    for md in segs[:2]:
        _set(writer, md, S.DELETE_SEGMENT_STARTED)
        _set(writer, md, S.DELETE_SEGMENT_FINISHED)
    writer.remove_leftover_events(tip)  # keeps 10-19's event (the last deleted one), 20-29 is live

    def owner_passes() -> None:
        _set(writer, segs[2], S.DELETE_SEGMENT_STARTED)  # this pass deletes the last live segment
        _set(writer, segs[2], S.DELETE_SEGMENT_FINISHED)
        writer.remove_leftover_events(tip)  # the next pass: 10-19's event is superseded by 20-29's

    store = _ListThen()
    store.configure({"dir": str(tmp_path / "bucket")})
    store.after_list = owner_passes
    reader = RemoteLogMetadataStore(store)
    assert reader.next_offset(tip) == 30
