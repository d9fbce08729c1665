"""RemoteLogMetadataStore.remote_log_segment_metadata (bisection over a cached, sorted view) against the plain
scan it replaced, on segments from several lineages that overlap, with one or several leader epochs each."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tiered import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tiered.backends import load_rsm
from tiered.metadata import RemoteLogMetadataStore
from tiered.rsm import RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState

T0 = 1_700_000_000_000
S = RemoteLogSegmentState


def covers(md: RemoteLogSegmentMetadata, epoch: int, offset: int) -> bool:
    epochs = sorted(md.segment_leader_epochs.items())
    for i, (e, start) in enumerate(epochs):
        end = epochs[i + 1][1] - 1 if i + 1 < len(epochs) else md.end_offset
        if e == epoch:
            return start <= offset <= end
    return False


def reference(segments: list[RemoteLogSegmentMetadata], offset: int, epoch: int | None) -> RemoteLogSegmentMetadata | None:
    for md in sorted(segments, key=lambda m: (m.start_offset, m.event_timestamp_ms)):
        in_range = md.state is S.COPY_SEGMENT_FINISHED and md.start_offset <= offset <= md.end_offset
        if in_range and (epoch is None or covers(md, epoch, offset)):
            return md
    return None


segment = st.tuples(
    st.integers(0, 300),  # start
    st.integers(0, 120),  # length - 1
    st.lists(st.integers(0, 60), min_size=0, max_size=2, unique=True),  # extra epoch starts, relative
    st.integers(0, 4),  # first epoch
    st.booleans(),  # finished (else left STARTED)
)


@settings(max_examples=60, deadline=None)
@given(segments=st.lists(segment, min_size=1, max_size=12), probes=st.lists(st.tuples(st.integers(0, 450), st.one_of(st.none(), st.integers(0, 7))), min_size=1, max_size=30))
def test_lookup_agrees_with_a_plain_scan(segments: list[tuple[int, int, list[int], int, bool]], probes: list[tuple[int, int | None]]) -> None:
    tip = TopicIdPartition(uuid.UUID(int=7), "t", 0)
    with tempfile.TemporaryDirectory() as tmp:
        store = RemoteLogMetadataStore.in_bucket(load_rsm("local", {"dir": str(Path(tmp) / "remote")}))
        recorded = []
        for n, (start, length, extra, first_epoch, finished) in enumerate(segments):
            end = start + length
            starts = sorted({start, *(start + r for r in extra if r <= length)})
            epochs = {first_epoch + i: s for i, s in enumerate(starts)}
            md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), start, end, T0, 0, T0 + n, 10, epochs)
            store.add_remote_log_segment_metadata(md)
            if finished:
                md = store.update_remote_log_segment_metadata(
                    RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, T0 + n, None, S.COPY_SEGMENT_FINISHED, 0)
                )
            recorded.append(md)
            for offset, epoch in probes:  # queried between changes too: the cached view must follow them
                assert store.remote_log_segment_metadata(tip, offset, epoch) == reference(recorded, offset, epoch)
