"""The conformance suite every RemoteStorageManager backend passes (not collected by itself).

A subclass provides the ``rsm`` fixture (a configured backend with the object API) — unit tests use the
local directory, fsspec and moto in-process; integration tests use real S3 servers on 127.0.0.1.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from tiered import IndexType, LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tiered.backends.base import ObjectStoreRemoteStorageManager
from tiered.errors import RemoteResourceNotFoundError, RemoteStorageError
from tiered.layout import kafka_uuid, segment_key
from tiered.metadata import RemoteLogMetadataStore
from tiered.rsm import RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState

T0 = 1_700_000_000_000


def metadata(start: int = 100, end: int = 199, partition: int = 0) -> RemoteLogSegmentMetadata:
    tip = TopicIdPartition(uuid.uuid4(), "conformance", partition)
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), start, end, T0, 0, T0, 1000, {0: start})


class RSMConformance:
    """Subclasses define ``rsm`` (a fixture returning a configured ObjectStoreRemoteStorageManager)."""

    @pytest.fixture
    def segment(self, tmp_path: Path) -> tuple[LogSegmentData, bytes]:
        log = os.urandom(3 * 1024 * 1024 + 17)
        d = tmp_path / "segment"
        d.mkdir()
        (d / "0.log").write_bytes(log)
        (d / "0.index").write_bytes(b"\x00\x00\x00\x01\x00\x00\x10\x00")
        (d / "0.timeindex").write_bytes(b"\x00" * 12)
        (d / "0.txnindex").write_bytes(b"\x00" * 34)
        (d / "1.snapshot").write_bytes(bytes.fromhex("000148674bc700000000"))
        data = LogSegmentData(d / "0.log", d / "0.index", d / "0.timeindex", d / "0.txnindex", d / "1.snapshot", b"0\n1\n0 100\n")
        return data, log

    def test_copy_then_fetch_ranges(self, rsm: ObjectStoreRemoteStorageManager, segment: tuple[LogSegmentData, bytes]) -> None:
        data, log = segment
        md = metadata()
        assert rsm.copy_log_segment_data(md, data) is None
        assert rsm.fetch_log_segment(md, 0).read() == log
        assert rsm.fetch_log_segment(md, 5, 5).read() == log[5:6]  # end inclusive
        assert rsm.fetch_log_segment(md, 1_000_000, 2_500_000).read() == log[1_000_000:2_500_001]
        assert rsm.fetch_log_segment(md, len(log) - 3, len(log) + 100).read() == log[-3:]

    def test_a_fetch_read_in_pieces_to_the_end(self, rsm: ObjectStoreRemoteStorageManager, segment: tuple[LogSegmentData, bytes]) -> None:
        # How the segment cache's stream reads it: open to the end, then fixed pieces (the last one short).
        data, log = segment
        md = metadata()
        rsm.copy_log_segment_data(md, data)
        for start in (0, 1_048_576 + 3):
            with rsm.fetch_log_segment(md, start) as stream:
                pieces = []
                while piece := stream.read(1_000_000):
                    pieces.append(piece)
            assert b"".join(pieces) == log[start:]
            assert all(len(p) == 1_000_000 for p in pieces[:-1])
        with rsm.fetch_log_segment(md, len(log) + 10) as stream:
            assert stream.read(10) == b""  # past the end: nothing, not an error
        with rsm.fetch_log_segment(md, 0) as stream:  # closed before its end: no error, nothing left open
            assert stream.read(100) == log[:100]

    def test_fetch_every_index(self, rsm: ObjectStoreRemoteStorageManager, segment: tuple[LogSegmentData, bytes]) -> None:
        data, _ = segment
        md = metadata()
        rsm.copy_log_segment_data(md, data)
        assert rsm.fetch_index(md, IndexType.OFFSET).read() == data.offset_index.read_bytes()
        assert rsm.fetch_index(md, IndexType.TIMESTAMP).read() == data.time_index.read_bytes()
        assert rsm.fetch_index(md, IndexType.TRANSACTION).read() == data.transaction_index.read_bytes()  # type: ignore[union-attr]
        assert rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT).read() == data.producer_snapshot_index.read_bytes()
        assert rsm.fetch_index(md, IndexType.LEADER_EPOCH).read() == data.leader_epoch_index

    def test_missing_txn_index_is_not_found(self, rsm: ObjectStoreRemoteStorageManager, segment: tuple[LogSegmentData, bytes]) -> None:
        data, _ = segment
        md = metadata()
        rsm.copy_log_segment_data(md, LogSegmentData(data.log_segment, data.offset_index, data.time_index, None,
                                                     data.producer_snapshot_index, data.leader_epoch_index))
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_index(md, IndexType.TRANSACTION)
        with pytest.raises(FileNotFoundError):  # not-found is also a FileNotFoundError
            rsm.fetch_log_segment(metadata(), 0)

    def test_copy_is_idempotent_and_delete_twice_is_fine(self, rsm: ObjectStoreRemoteStorageManager, segment: tuple[LogSegmentData, bytes]) -> None:
        data, log = segment
        md = metadata()
        rsm.copy_log_segment_data(md, data)
        rsm.copy_log_segment_data(md, data)
        assert rsm.fetch_log_segment(md, 0).read() == log
        rsm.delete_log_segment_data(md)
        rsm.delete_log_segment_data(md)
        assert not rsm.exists(segment_key(rsm.prefix, md, ".log"))
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_log_segment(md, 0)

    def test_object_keys_follow_the_layout(self, rsm: ObjectStoreRemoteStorageManager, segment: tuple[LogSegmentData, bytes]) -> None:
        data, _ = segment
        md = metadata(start=42, partition=7)
        rsm.copy_log_segment_data(md, data)
        tip = md.topic_id_partition
        expected_dir = f"conformance-{kafka_uuid(tip.topic_id)}/7/"
        keys = rsm.list_keys((rsm.prefix + "/" if rsm.prefix else "") + expected_dir)
        name = f"00000000000000000042-{kafka_uuid(md.remote_log_segment_id.id)}"
        assert sorted(k.rsplit("/", 1)[1] for k in keys) == sorted(
            name + s for s in (".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".leader-epoch-checkpoint")
        )

    def test_failed_copy_leaves_no_orphans(self, rsm: ObjectStoreRemoteStorageManager, segment: tuple[LogSegmentData, bytes]) -> None:
        data, _ = segment
        md = metadata()
        broken = LogSegmentData(data.log_segment, data.offset_index, data.time_index, data.transaction_index,
                                data.log_segment.parent / "missing.snapshot", data.leader_epoch_index)
        with pytest.raises(RemoteStorageError):
            rsm.copy_log_segment_data(md, broken)
        tip = md.topic_id_partition
        assert rsm.list_keys((rsm.prefix + "/" if rsm.prefix else "") + f"conformance-{kafka_uuid(tip.topic_id)}/") == []

    def test_metadata_durable_in_the_store(self, rsm: ObjectStoreRemoteStorageManager) -> None:
        md = metadata()
        store = RemoteLogMetadataStore(rsm)
        store.add_remote_log_segment_metadata(md)
        store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, T0 + 1, b"custom", RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0))
        fresh = RemoteLogMetadataStore(rsm)  # a new machine: only the bucket
        [found] = fresh.readable_segments(md.topic_id_partition)
        assert found.remote_log_segment_id == md.remote_log_segment_id and found.custom_metadata == b"custom"
        assert fresh.remote_log_segment_metadata(md.topic_id_partition, 150, 0) == found
        assert fresh.find_stale_copies(md.topic_id_partition) == []
