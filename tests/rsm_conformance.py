"""The conformance suite every RemoteStorageManager backend passes (not collected by itself).

A subclass provides the ``rsm`` fixture (a configured backend with the object API) — unit tests use the
local directory, fsspec and moto in-process; integration tests use real S3 servers on 127.0.0.1.
"""

from __future__ import annotations

import os
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from local import LogConfig, LogManager
from local.errors import CorruptRecordError
from local.log import Log
from local.records import MemoryRecords, SimpleRecord
from tiered import IndexType, LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tiered.backends.base import ObjectStoreRemoteStorageManager
from tiered.errors import RemoteResourceNotFoundError, RemoteStorageError
from tiered.layout import kafka_uuid, segment_key
from tiered.metadata import RemoteLogMetadataStore
from tiered.remote_log_manager import RemoteLogManager
from tiered.rsm import RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState

T0 = 1_700_000_000_000


def metadata(start: int = 100, end: int = 199, partition: int = 0) -> RemoteLogSegmentMetadata:
    tip = TopicIdPartition(uuid.uuid4(), "conformance", partition)
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), start, end, T0, 0, T0, 1000, {0: start})


def _value(i: int) -> bytes:
    return (b"%08d" % i) * 25


def _names(exc: BaseException, md: RemoteLogSegmentMetadata) -> bool:
    """Whether an error names the remote segment (its id, or the object key's Kafka-style id)."""
    text = str(exc)
    return str(md.remote_log_segment_id.id) in text or kafka_uuid(md.remote_log_segment_id.id) in text


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

    # -- damaged objects: the whole read path on this backend gives an error, never a wrong value or a skip ------

    @pytest.fixture
    def tiered_log(self, rsm: ObjectStoreRemoteStorageManager, tmp_path: Path) -> Iterator[tuple[Log, list[RemoteLogSegmentMetadata]]]:
        from tiered.cache.chunk_cache import ChunkCache
        from tiered.cache.index_cache import RemoteIndexCache

        data_dir = tmp_path / "data"
        rlm = RemoteLogManager(
            rsm, RemoteLogMetadataStore.for_rsm(rsm), RemoteIndexCache(data_dir, rsm.fetch_index),
            chunk_cache=ChunkCache(tmp_path / "chunks", chunk_size=256 * 1024, prefetch_chunks=1),
        )
        config = LogConfig.from_properties({"log.dirs": str(data_dir), "log.segment.bytes": str(1024 * 1024)})
        manager = LogManager(config, start_scheduler=False, remote_tier=rlm)
        try:
            log = manager.get_or_create_log("damaged", 0, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
            t0 = int(time.time() * 1000) - 60_000
            for first in range(0, 16_000, 100):
                log.append(MemoryRecords.build([SimpleRecord(t0 + i, None, _value(i)) for i in range(first, first + 100)]))
            rlm.run_once([log])
            manager.cleanup_logs()
            remote = [md for md in rlm.finished_segments(rlm.topic_id_partition(log)) if md.end_offset < log.local_log_start_offset]
            assert len(remote) >= 3
            yield log, remote
        finally:
            manager.close()

    @staticmethod
    def _batch_position(data: bytes | bytearray, offset: int) -> int:
        pos = 0
        while struct.unpack_from(">q", data, pos)[0] != offset:
            pos += struct.unpack_from(">i", data, pos + 8)[0] + 12
        return pos

    @staticmethod
    def _consume(log: Log, offset: int, until: int) -> list[tuple[int, bytes | None]]:
        out: list[tuple[int, bytes | None]] = []
        while offset < until:
            for batch in log.read(offset, 64 * 1024).records.batches():
                out.extend((r.offset, r.value) for r in batch.records())
                offset = batch.last_offset + 1
        return out

    def test_a_flipped_byte_in_a_remote_object_is_an_error_never_a_wrong_value(
        self, rsm: ObjectStoreRemoteStorageManager, tiered_log: tuple[Log, list[RemoteLogSegmentMetadata]]
    ) -> None:
        log, remote = tiered_log
        md = remote[1]
        key = segment_key(rsm.prefix, md, ".log")
        data = bytearray(rsm.get_range(key))
        bad = md.start_offset + 2000
        data[self._batch_position(data, bad) + 61 + 50] ^= 0x01  # inside a record of the batch at ``bad``
        rsm.put_bytes(key, bytes(data))
        got: list[tuple[int, bytes | None]] = []
        with pytest.raises((CorruptRecordError, RemoteStorageError)) as err:
            got.extend(self._consume(log, md.start_offset, md.end_offset + 1))
        assert _names(err.value, md), str(err.value)
        assert got == [(i, _value(i)) for i in range(md.start_offset, md.start_offset + len(got))]  # never wrong
        assert len(got) <= bad - md.start_offset
        # the segments either side still read in full
        assert self._consume(log, remote[0].start_offset, remote[0].end_offset + 1) == [
            (i, _value(i)) for i in range(remote[0].start_offset, remote[0].end_offset + 1)]
        assert self._consume(log, remote[2].start_offset, remote[2].start_offset + 1)[0] == (
            remote[2].start_offset, _value(remote[2].start_offset))

    def test_truncated_damaged_and_deleted_remote_objects_are_errors_naming_them(
        self, rsm: ObjectStoreRemoteStorageManager, tiered_log: tuple[Log, list[RemoteLogSegmentMetadata]]
    ) -> None:
        log, remote = tiered_log
        truncated, damaged, deleted = remote[:3]
        key = segment_key(rsm.prefix, truncated, ".log")
        data = rsm.get_range(key)
        rsm.put_bytes(key, data[: len(data) // 2])
        key = segment_key(rsm.prefix, damaged, ".log")
        first = bytearray(rsm.get_range(key))
        struct.pack_into(">i", first, 8, 0x0FFFFFFF)  # the first batch's length
        rsm.put_bytes(key, bytes(first))
        rsm.delete_many([segment_key(rsm.prefix, deleted, ".log")])
        for md, offset in ((truncated, truncated.end_offset - 5), (damaged, damaged.start_offset),
                           (deleted, deleted.start_offset + 1)):
            with pytest.raises((CorruptRecordError, RemoteStorageError)) as err:
                self._consume(log, offset, offset + 1)
            assert _names(err.value, md), str(err.value)
