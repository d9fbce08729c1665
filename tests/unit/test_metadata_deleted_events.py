"""The DELETE_SEGMENT_FINISHED events a partition's remote retention leaves: the owner's expiration task deletes
those nothing needs any more (:meth:`RemoteLogMetadataStore.remove_leftover_events`), so the metadata of a partition
under retention stays as large as its live segments, not as every segment it ever had, each read at a first load.

What a deleted segment's event is read for, :meth:`next_offset` and :meth:`max_epoch` (where a log adopting the
partition starts, and the epoch above which a claim is made), and what readers read, stay the same for a new reader
after every removal: checked against the same store's figures before it, over random histories of copies,
deletions, claims and a deposed owner's late copies (hypothesis), and through the engine's own retention."""

from __future__ import annotations

import uuid
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.unit.test_retention import HOUR, T0, _produce, _Tier
from tiered.backends.local_dir import LocalDirStore
from tiered.layout import metadata_event_of_key, metadata_prefix
from tiered.metadata import RemoteLogMetadataStore
from tiered.ownership import OwnerRecord, claim_lineage
from tiered.rsm import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

S = RemoteLogSegmentState
TOPIC = "ev"


def _events(store: LocalDirStore, tip: TopicIdPartition) -> list[tuple[int, uuid.UUID, int]]:
    named = (metadata_event_of_key(k) for k in store.list_keys(metadata_prefix("", tip)))
    return [n for n in named if n is not None]


def _figures(store: LocalDirStore, tip: TopicIdPartition) -> tuple[int, int, list[uuid.UUID], bool]:
    """What a new reader of the store sees: next offset, max epoch, the readable segments, whether it holds any."""
    reader = RemoteLogMetadataStore(store)
    return (reader.next_offset(tip), reader.max_epoch(tip),
            [m.remote_log_segment_id.id for m in reader.readable_segments(tip)], reader.holds_metadata(tip))


def _set(writer: RemoteLogMetadataStore, md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> None:
    writer.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 0, None,
                                                                             state, 0))


OPS = st.lists(st.sampled_from(["copy", "copy", "copy", "delete", "delete", "claim", "late", "started", "remove"]),
               min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
@example(ops=["copy", "copy", "copy", "delete", "delete", "delete"])
@example(ops=["copy", "copy", "claim", "late", "copy", "copy", "delete", "delete", "delete", "remove", "delete"])
def test_removing_superseded_deletions_changes_nothing_a_new_reader_sees(tmp_path_factory, ops: list[str]) -> None:  # type: ignore[no-untyped-def]
    store = LocalDirStore()
    store.configure({"dir": str(tmp_path_factory.mktemp("bucket"))})
    writer = RemoteLogMetadataStore(store)
    tip = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    end, epoch = 0, 0
    epochs: list[tuple[int, int]] = [(0, 0)]  # this data dir's leader-epoch lineage
    live: list[RemoteLogSegmentMetadata] = []  # finished copies, by offset; a deposed owner's late ones too
    deposed: tuple[int, int] | None = None  # (epoch, first offset) a former owner kept writing in after a claim
    for op in [*ops, "remove"]:
        if op == "copy":
            md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), end, end + 9, 0, 0, 0, 10,
                                          {epoch: end})
            writer.add_remote_log_segment_metadata(md)
            _set(writer, md, S.COPY_SEGMENT_FINISHED)
            live.append(md)
            end += 10
        elif op == "started":  # a copy under way (may be purged: never what keeps a figure)
            md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), end, end + 9, 0, 0, 0, 10,
                                          {epoch + 5: end})
            writer.add_remote_log_segment_metadata(md)
        elif op == "delete" and live:
            md = live.pop(0)
            _set(writer, md, S.DELETE_SEGMENT_STARTED)
            _set(writer, md, S.DELETE_SEGMENT_FINISHED)
        elif op == "claim":
            deposed = (epoch, end)
            epoch = max(writer.max_epoch(tip), epoch) + 1
            epochs.append((epoch, end))
            writer.claim_ownership(tip, OwnerRecord(epoch, uuid.uuid4().hex, claim_lineage(epochs, end, epoch), 0))
            writer.owner_records(tip)
        elif op == "late" and deposed is not None:  # the former owner's copy past the claim: outside the lineage
            old_epoch, start = deposed
            md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), start, start + 4, 0, 0, 0, 10,
                                          {old_epoch: start})
            writer.add_remote_log_segment_metadata(md)
            _set(writer, md, S.COPY_SEGMENT_FINISHED)
            live.insert(0, md)  # deleted first, as the owner's retention deletes foreign copies first
        elif op == "remove":
            before = _figures(store, tip)
            writer.remove_leftover_events(tip)
            assert _figures(store, tip) == before
            assert _figures(store, tip) == (writer.next_offset(tip), writer.max_epoch(tip),
                                            [m.remote_log_segment_id.id for m in writer.readable_segments(tip)],
                                            writer.holds_metadata(tip))
    finished_deletions = [n for n in _events(store, tip) if n[2] == int(S.DELETE_SEGMENT_FINISHED)]
    assert len(finished_deletions) <= 2 + ops.count("late")  # the last, the highest epoch's, a deposed owner's


def test_a_partition_under_retention_keeps_the_events_of_its_live_segments_only(tmp_path: Path) -> None:
    """Through the engine: passes of copy and remote retention over many segments; before the change every deleted
    segment's event stayed. A data dir attaching the partition afterwards starts where the history ends."""
    from local.scheduler import MockTime

    clock = MockTime(ms=T0 + 1_000_000)
    tier = _Tier(tmp_path, clock)
    try:
        log = tier.log(**{"retention.ms": str(HOUR), "retention.bytes": "-1", "local.retention.ms": "0"})
        tip = tier.rlm.topic_id_partition(log)
        store = tier.rsm.object_store
        assert store is not None
        deleted = 0
        for round_ in range(6):
            _produce(log, 10_000, start=round_ * 10_000, ts=clock.milliseconds())  # two 1 MiB segments and a bit
            log.roll()
            assert tier.rlm.copy_log_segments(log).segments_copied >= 2
            clock.sleep(HOUR + 1)  # everything copied so far is past retention now
            now_deleted = tier.rlm.cleanup_remote_segments(log)
            deleted += now_deleted
            # A pass removes the events of the segments earlier passes deleted (but the last one's): what is left is
            # this pass's deletions and at most two more, however many rounds ran.
            finished_deletions = [n for n in _events(store, tip) if n[2] == int(S.DELETE_SEGMENT_FINISHED)]
            assert now_deleted <= len(finished_deletions) <= now_deleted + 2, (round_, finished_deletions)
        assert deleted >= 12
        reader = RemoteLogMetadataStore.in_bucket(tier.rsm)
        assert reader.next_offset(tip) == log.log_end_offset
        assert reader.max_epoch(tip) == tier.rlm.metadata.max_epoch(tip)
    finally:
        tier.close()


def test_a_restarts_claim_with_a_truncated_lineage_strands_no_deleted_events(tmp_path: Path) -> None:
    """Each `tiered run` start claims the next owner epoch with the lineage of its leader-epoch cache, which the log
    start truncates: the epochs of the segments retention deleted drop out of it. The deleted segment kept as the
    last (or highest) of the previous claim is then outside the newest lineage, below its start: it must still go,
    or one event per restart stays for ever (seen on SeaweedFS with kill -9 restarts: /tmp/hZh/s3.py)."""
    store = LocalDirStore()
    store.configure({"dir": str(tmp_path / "bucket")})
    writer = RemoteLogMetadataStore(store)
    tip = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    end = 0
    for epoch in range(6):
        if epoch:  # a restart: the cache holds only the epoch the log start is in (all below was deleted)
            writer.claim_ownership(tip, OwnerRecord(epoch, uuid.uuid4().hex, claim_lineage([(epoch - 1, end)], end,
                                                                                           epoch), 0))
            writer.owner_records(tip)
        for _ in range(3):
            md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), end, end + 9, 0, 0, 0, 10,
                                          {epoch: end})
            writer.add_remote_log_segment_metadata(md)
            _set(writer, md, S.COPY_SEGMENT_FINISHED)
            _set(writer, md, S.DELETE_SEGMENT_STARTED)
            _set(writer, md, S.DELETE_SEGMENT_FINISHED)
            end += 10
        before = _figures(store, tip)
        writer.remove_leftover_events(tip)
        assert _figures(store, tip) == before
    finished_deletions = [n for n in _events(store, tip) if n[2] == int(S.DELETE_SEGMENT_FINISHED)]
    assert len(finished_deletions) <= 2, finished_deletions
