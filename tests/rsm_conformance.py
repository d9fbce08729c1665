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
from typing import IO

import pytest

from local import LogConfig, LogManager
from local.errors import CorruptRecordError
from local.log import Log
from local.records import MemoryRecords, SimpleRecord
from tiered import IndexType, LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tiered.backends.composed import ObjectStoreRemoteStorageManager
from tiered.cache.chunk_cache import ChunkCache
from tiered.cache.index_cache import RemoteIndexCache
from tiered.checksums import (
    ChecksumVerifier,
    SegmentChecksums,
    compute_segment_checksums,
)
from tiered.composition import assemble_remote_log_manager
from tiered.errors import (
    ObjectExistsError,
    RemoteChecksumError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from tiered.layout import kafka_uuid, segment_key
from tiered.metadata import RemoteLogMetadataStore
from tiered.ownership import OwnerRecord
from tiered.rsm import RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState
from tiered.scrub.object_checksums import verify_object_checksums

T0 = 1_700_000_000_000


def metadata(start: int = 100, end: int = 199, partition: int = 0) -> RemoteLogSegmentMetadata:
    tip = TopicIdPartition(uuid.uuid4(), "conformance", partition)
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), start, end, T0, 0, T0, 1000, {0: start})


class CopyFaultConformance:
    """Mixed into RSMConformance: a copy that fails in the middle (the store goes down after N uploads, its deletes
    failing too) leaves nothing behind after the next pass of the same process."""

    @pytest.mark.parametrize("fail_after", [1, 3, 7], ids=["started-event-reply-lost", "after-log-and-index", "finished-event-reply-lost"])
    def test_a_copy_failing_mid_way_leaves_no_orphan_after_the_next_pass(
        self, rsm: ObjectStoreRemoteStorageManager, tmp_path: Path, fail_after: int
    ) -> None:
        import time

        from local import LogConfig, LogManager
        from local.records import MemoryRecords, SimpleRecord
        from tests.faulty_rsm import faulty_rsm
        from tests.logutil import read_all_values
        from tiered.layout import partition_prefix

        wrapped, faulty = faulty_rsm(rsm)
        rlm = assemble_remote_log_manager(wrapped, RemoteLogMetadataStore.in_bucket(wrapped), tmp_path / "data")
        config = LogConfig.from_properties({"log.dirs": str(tmp_path / "data"), "log.segment.bytes": str(CHUNK)})
        with LogManager(config, remote_tier=rlm, start_scheduler=False) as manager:
            log = manager.get_or_create_log("faults", 0, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
            for first in range(0, 12_000, 100):
                now = int(time.time() * 1000)  # recent: remote retention must not expire them
                log.append(MemoryRecords.build([SimpleRecord(now, None, b"%0200d" % i) for i in range(first, first + 100)]))
            expected = read_all_values(log)
            candidates = len(rlm.candidate_segments(log))
            assert candidates >= 2
            rlm.ownership.ensure_owner(log, rlm.topic_id_partition(log))  # the claim lands before the outage
            faulty.fail_after_uploads(fail_after)
            first_pass = rlm.run_once(manager.all_logs())
            assert first_pass.copy_errors == 1 and faulty.down
            faulty.up()  # the outage ends: the same process, no restart
            second = rlm.run_once(manager.all_logs())
            assert (second.stale_copies_cleaned, second.copy_errors) == (1, 0), second
            tip = rlm.topic_id_partition(log)
            fresh = RemoteLogMetadataStore.in_bucket(rsm)  # what the bucket says
            assert fresh.find_stale_copies(tip) == []
            finished = {kafka_uuid(md.remote_log_segment_id.id) for md in fresh.readable_segments(tip)}
            assert len(finished) == candidates
            keys = rsm.store.list_keys(partition_prefix(rsm.prefix, tip) + "/")
            data_keys = [k for k in keys if "/__remote_log_metadata/" not in k]
            owners = {k.rsplit("/", 1)[1].split("-", 1)[1].split(".", 1)[0] for k in data_keys}
            assert owners == finished  # no object of the failed attempt is left
            assert len(data_keys) == (3 if rsm.format.transformed else 5) * candidates  # manifest layout: 3 objects
            for md in fresh.readable_segments(tip):
                assert verify_object_checksums(rsm, md) == []
            manager.cleanup_logs()
            assert log.local_log_start_offset > 0
            assert read_all_values(log) == expected  # through the remote tier, every value checked


def _value(i: int) -> bytes:
    return (b"%08d" % i) * 25


def _names(exc: BaseException, md: RemoteLogSegmentMetadata) -> bool:
    """Whether an error names the remote segment (its id, or the object key's Kafka-style id)."""
    text = str(exc)
    return str(md.remote_log_segment_id.id) in text or kafka_uuid(md.remote_log_segment_id.id) in text


class RSMConformance(CopyFaultConformance):
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
        assert not rsm.store.exists(segment_key(rsm.prefix, md, ".log"))
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_log_segment(md, 0)

    def test_object_keys_follow_the_layout(self, rsm: ObjectStoreRemoteStorageManager, segment: tuple[LogSegmentData, bytes]) -> None:
        data, _ = segment
        md = metadata(start=42, partition=7)
        rsm.copy_log_segment_data(md, data)
        tip = md.topic_id_partition
        expected_dir = f"conformance-{kafka_uuid(tip.topic_id)}/7/"
        keys = rsm.store.list_keys((rsm.prefix + "/" if rsm.prefix else "") + expected_dir)
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
        assert rsm.store.list_keys((rsm.prefix + "/" if rsm.prefix else "") + f"conformance-{kafka_uuid(tip.topic_id)}/") == []

    def test_metadata_durable_in_the_store(self, rsm: ObjectStoreRemoteStorageManager) -> None:
        md = metadata()
        store = RemoteLogMetadataStore.in_bucket(rsm)
        store.add_remote_log_segment_metadata(md)
        store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, T0 + 1, b"custom", RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0))
        fresh = RemoteLogMetadataStore.in_bucket(rsm)  # a new machine: only the bucket
        [found] = fresh.readable_segments(md.topic_id_partition)
        assert found.remote_log_segment_id == md.remote_log_segment_id and found.custom_metadata == b"custom"
        assert fresh.remote_log_segment_metadata(md.topic_id_partition, 150, 0) == found
        assert fresh.find_stale_copies(md.topic_id_partition) == []

    # Conditional writes and owner claims (tiered.ownership) ------------------------------------------------------

    def test_a_conditional_put_creates_once_and_an_owner_epoch_is_claimed_once(
        self, rsm: ObjectStoreRemoteStorageManager
    ) -> None:
        from tiered.store import put_if_absent

        key = f"{rsm.prefix + '/' if rsm.prefix else ''}conditional-{uuid.uuid4().hex}"
        put_if_absent(rsm.store, key, b"first")  # the store's own conditional put where it declares one
        with pytest.raises(ObjectExistsError) as raised:
            put_if_absent(rsm.store, key, b"second")
        assert raised.value.key == key  # type: ignore[attr-defined]
        assert rsm.store.get(key) == b"first"
        rsm.store.put(key, b"third")  # an unconditional write replaces it
        assert rsm.store.get(key) == b"third"
        tip = metadata().topic_id_partition
        RemoteLogMetadataStore.in_bucket(rsm).claim_ownership(tip, OwnerRecord(0, "a" * 32, ((0, 0),), T0))
        with pytest.raises(ObjectExistsError):
            RemoteLogMetadataStore.in_bucket(rsm).claim_ownership(tip, OwnerRecord(0, "b" * 32, ((0, 0),), T0))
        RemoteLogMetadataStore.in_bucket(rsm).claim_ownership(tip, OwnerRecord(1, "c" * 32, ((0, 0), (1, 10)), T0))
        assert [r.owner_id for r in RemoteLogMetadataStore.in_bucket(rsm).owner_records(tip)] == ["a" * 32, "c" * 32]

    @pytest.fixture
    def serializes_conditional_writes(self, rsm: ObjectStoreRemoteStorageManager) -> bool:
        """Whether the store behind ``rsm`` serializes two conditional creates of one key: what the backend declares,
        unless the server is a mock that checks, then writes (moto: see the S3 test classes)."""
        return rsm.store.capabilities.conditional_writes

    def test_claimants_racing_to_one_epoch_have_one_winner_where_the_store_has_conditional_writes(
        self, rsm: ObjectStoreRemoteStorageManager, serializes_conditional_writes: bool
    ) -> None:
        """Eight claimants of one epoch at once: where the store serializes conditional creates, exactly one wins and
        its record is stored; elsewhere (a backend without conditional writes, docs/operations.md, or a mock server)
        at least one wins and what is stored is a winner's record."""
        import threading
        tip = metadata().topic_id_partition
        barrier = threading.Barrier(8)
        won: list[str] = []
        failed: dict[str, RemoteStorageError] = {}

        def claim(i: int) -> None:
            record = OwnerRecord(5, f"{i:032x}", ((5, 0),), T0)
            barrier.wait()
            try:
                RemoteLogMetadataStore.in_bucket(rsm).claim_ownership(tip, record)
            except ObjectExistsError:
                return
            except RemoteStorageError as exc:  # (moto in process: its writes of one key at once can break its buffer)
                failed[record.owner_id] = exc
                return
            won.append(record.owner_id)

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        [stored] = RemoteLogMetadataStore.in_bucket(rsm).owner_records(tip)
        if serializes_conditional_writes:
            assert won == [stored.owner_id] and not failed, failed
        else:  # (a write the mock failed in its answer may be the one it kept)
            assert stored.owner_id in [*won, *failed]

    def test_a_topic_of_the_longest_valid_name_is_stored_listed_and_found_again(
        self, rsm: ObjectStoreRemoteStorageManager, segment: tuple[LogSegmentData, bytes]
    ) -> None:
        """249 characters (Kafka's limit): ``<topic>-<topicId>`` is 272, more than a file name can hold. Keys stay the
        layout's; a directory backend stores the long component shortened (tiered.backends.long_names)."""
        from tiered.layout import metadata_prefix, partition_prefix, topic_ids_in_store

        data, log = segment
        topic = ("a.B-c_9" * 36)[:249]
        tip = TopicIdPartition(uuid.uuid4(), topic, 3)
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), 0, 99, T0, 0, T0, len(log), {0: 0})
        store = RemoteLogMetadataStore.in_bucket(rsm)
        store.add_remote_log_segment_metadata(md)
        rsm.copy_log_segment_data(md, data)
        store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, T0 + 1, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0))
        assert rsm.fetch_log_segment(md, 1000, 1999).read() == log[1000:2000]
        assert rsm.fetch_index(md, IndexType.OFFSET).read() == data.offset_index.read_bytes()
        keys = rsm.store.list_keys(partition_prefix(rsm.prefix, tip) + "/")
        assert segment_key(rsm.prefix, md, ".log") in keys and all(rsm.store.exists(k) for k in keys)  # the layout's keys
        assert len([k for k in keys if k.startswith(metadata_prefix(rsm.prefix, tip))]) == 2
        [found] = RemoteLogMetadataStore.in_bucket(rsm).readable_segments(tip)  # a new machine: only the bucket
        assert found.remote_log_segment_id == md.remote_log_segment_id and found.topic_id_partition.topic == topic
        assert topic_ids_in_store(rsm.store, rsm.prefix, topic) == {tip.topic_id: {3}}  # how attach finds the topic
        assert topic_ids_in_store(rsm.store, rsm.prefix, topic[:-1]) == {}
        rsm.delete_log_segment_data(md)
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_log_segment(md, 0)

    # End-to-end checksums (tiered.checksums): recorded with the FINISHED metadata, checked on every fetch -------

    @staticmethod
    def _copy_with_checksums(
        rsm: ObjectStoreRemoteStorageManager, data: LogSegmentData, with_checksums: bool = True
    ) -> tuple[RemoteLogSegmentMetadata, SegmentChecksums]:
        md = metadata()
        store = RemoteLogMetadataStore.in_bucket(rsm)
        store.add_remote_log_segment_metadata(md)
        rsm.copy_log_segment_data(md, data)
        sums = compute_segment_checksums(data, CHUNK)
        store.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, T0 + 1, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0),
            checksums=sums if with_checksums else None,
        )
        return md, sums

    def test_checksums_are_in_the_bucket_and_ranged_reads_are_verified(
        self, rsm: ObjectStoreRemoteStorageManager, segment: tuple[LogSegmentData, bytes]
    ) -> None:
        data, log = segment
        md, sums = self._copy_with_checksums(rsm, data)
        fresh = RemoteLogMetadataStore.in_bucket(rsm)  # a new machine: only the bucket
        assert fresh.segment_checksums(md) == sums
        assert sums.objects[".log"].size == len(log) and len(sums.objects[".log"].crcs) == 4
        verifier = ChecksumVerifier(rsm, fresh.segment_checksums)
        raw = CountingFetch(rsm, md)
        fetch = verifier.fetcher(md, raw)
        for lo, hi in ((0, 99), (5, 5), (CHUNK - 3, CHUNK + 3), (1_000_000, 2_500_000), (len(log) - 3, len(log) + 100)):
            assert fetch(lo, hi) == log[lo : hi + 1]
        end = len(log) - 1
        assert raw.calls == [(0, CHUNK - 1), (0, CHUNK - 1), (0, 2 * CHUNK - 1), (0, 3 * CHUNK - 1), (3 * CHUNK, end)]
        with verifier.opener(md, raw.open)(CHUNK + 7, None) as stream:
            pieces = []
            while piece := stream.read(300_000):
                pieces.append(piece)
        assert b"".join(pieces) == log[CHUNK + 7 :]
        assert verifier.fetch_index(md, IndexType.OFFSET).read() == data.offset_index.read_bytes()
        assert verify_object_checksums(rsm, md) == []

    def test_a_flipped_byte_in_a_stored_object_is_refused_after_one_refetch(
        self, rsm: ObjectStoreRemoteStorageManager, segment: tuple[LogSegmentData, bytes], tmp_path: Path
    ) -> None:
        data, log = segment
        md, _ = self._copy_with_checksums(rsm, data)
        key = segment_key(rsm.prefix, md, ".log")
        damaged = bytearray(log)
        damaged[CHUNK + 12345] ^= 0x01
        rsm.store.put(key, bytes(damaged))  # behind the backend's back: not through copy_log_segment_data
        verifier = ChecksumVerifier(rsm, RemoteLogMetadataStore.in_bucket(rsm).segment_checksums)
        raw = CountingFetch(rsm, md)
        fetch = verifier.fetcher(md, raw)
        assert fetch(0, 1000) == log[:1001]  # the chunks around it still read
        raw.calls.clear()
        with pytest.raises(RemoteChecksumError) as info:
            fetch(CHUNK + 12_000, CHUNK + 13_000)
        err = info.value
        assert raw.calls == [(CHUNK, 2 * CHUNK - 1)] * 2  # fetched once more, then refused
        assert (err.key, err.start, err.end) == (key, CHUNK, 2 * CHUNK - 1)
        assert key in str(err) and f"{CHUNK}..{2 * CHUNK - 1}" in str(err)
        assert isinstance(err, CorruptRecordError)  # what readers of corrupt data already handle
        with pytest.raises(RemoteChecksumError), verifier.opener(md, raw.open)(0, None) as stream:
            while stream.read(CHUNK):
                pass
        # Through the segment cache (a sequential reader: on S3 the chunks come off one streaming GET).
        with ChunkCache(tmp_path / "cache", chunk_size=CHUNK, prefetch_chunks=1) as cache:
            cache.prefetch(key, 0, fetch, len(log), verifier.opener(md, raw.open))
            assert cache.read(key, len(log), 0, 100, fetch) == log[:101]
            cache.prefetch(key, CHUNK, fetch, len(log), verifier.opener(md, raw.open))
            with pytest.raises(RemoteChecksumError):
                cache.read(key, len(log), CHUNK, CHUNK + 100, fetch)
        [problem] = verify_object_checksums(rsm, md)
        assert (problem.kind, problem.object, problem.start, problem.end) == ("mismatch", key, CHUNK, 2 * CHUNK - 1)

    def test_damaged_indexes_and_a_truncated_log_are_errors_naming_the_object(
        self, rsm: ObjectStoreRemoteStorageManager, segment: tuple[LogSegmentData, bytes], tmp_path: Path
    ) -> None:
        data, log = segment
        md, _ = self._copy_with_checksums(rsm, data)
        verifier = ChecksumVerifier(rsm, RemoteLogMetadataStore.in_bucket(rsm).segment_checksums)
        index_key = segment_key(rsm.prefix, md, ".index")
        rsm.store.put(index_key, b"\x00\x00\x00\x01\x00\x00\x10\x01")
        with pytest.raises(RemoteChecksumError) as info:
            verifier.fetch_index(md, IndexType.OFFSET)
        assert info.value.key == index_key
        cache = RemoteIndexCache(tmp_path / "idx", rsm.fetch_index, verifier=verifier)
        try:
            with pytest.raises(RemoteChecksumError, match=index_key):
                cache.lookup_offset(md, 150)
            assert not any((tmp_path / "idx").rglob("*.index"))  # nothing damaged was cached
        finally:
            cache.close()
        log_key = segment_key(rsm.prefix, md, ".log")
        rsm.store.put(log_key, log[: 2 * CHUNK - 10])
        with pytest.raises(RemoteChecksumError) as info:
            verifier.fetcher(md, CountingFetch(rsm, md))(CHUNK, CHUNK + 10)
        assert (info.value.key, info.value.kind) == (log_key, "short")
        rsm.store.delete_many([segment_key(rsm.prefix, md, ".timeindex")])
        kinds = {(p.kind, p.object) for p in verify_object_checksums(rsm, md)}
        assert kinds == {("mismatch", index_key), ("short", log_key), ("missing", segment_key(rsm.prefix, md, ".timeindex"))}

    def test_a_segment_copied_without_checksums_still_reads(
        self, rsm: ObjectStoreRemoteStorageManager, segment: tuple[LogSegmentData, bytes]
    ) -> None:
        data, log = segment
        md, _ = self._copy_with_checksums(rsm, data, with_checksums=False)
        store = RemoteLogMetadataStore.in_bucket(rsm)
        assert [s.remote_log_segment_id for s in store.readable_segments(md.topic_id_partition)] == [md.remote_log_segment_id]
        assert store.segment_checksums(md) is None
        verifier = ChecksumVerifier(rsm, store.segment_checksums)
        raw = CountingFetch(rsm, md)
        assert verifier.fetcher(md, raw) is raw  # unverified, as before
        assert verifier.fetcher(md, raw)(CHUNK - 1, CHUNK + 1) == log[CHUNK - 1 : CHUNK + 2]
        assert verifier.fetch_index(md, IndexType.TIMESTAMP).read() == data.time_index.read_bytes()
        assert verify_object_checksums(rsm, md) == []


    # -- damaged objects: the whole read path on this backend gives an error, never a wrong value or a skip ------

    @pytest.fixture
    def tiered_log(self, rsm: ObjectStoreRemoteStorageManager, tmp_path: Path) -> Iterator[tuple[Log, list[RemoteLogSegmentMetadata]]]:
        from tiered.cache.chunk_cache import ChunkCache

        data_dir = tmp_path / "data"
        rlm = assemble_remote_log_manager(rsm, RemoteLogMetadataStore.in_bucket(rsm), data_dir,
            chunk_cache=ChunkCache(tmp_path / "chunks", chunk_size=256 * 1024, prefetch_chunks=1),
            checksum_chunk_bytes=256 * 1024,
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
        data = bytearray(rsm.store.get(key))
        bad = md.start_offset + 2000
        data[self._batch_position(data, bad) + 61 + 50] ^= 0x01  # inside a record of the batch at ``bad``
        rsm.store.put(key, bytes(data))
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
        data = rsm.store.get(key)
        rsm.store.put(key, data[: len(data) // 2])
        key = segment_key(rsm.prefix, damaged, ".log")
        first = bytearray(rsm.store.get(key))
        struct.pack_into(">i", first, 8, 0x0FFFFFFF)  # the first batch's length
        rsm.store.put(key, bytes(first))
        rsm.store.delete_many([segment_key(rsm.prefix, deleted, ".log")])
        for md, offset in ((truncated, truncated.end_offset - 5), (damaged, damaged.start_offset),
                           (deleted, deleted.start_offset + 1)):
            with pytest.raises((CorruptRecordError, RemoteStorageError)) as err:
                self._consume(log, offset, offset + 1)
            assert _names(err.value, md), str(err.value)

CHUNK = 1024 * 1024


class CountingFetch:
    """Ranged fetches of a segment's .log through the plugin, recorded."""

    def __init__(self, rsm: ObjectStoreRemoteStorageManager, md: RemoteLogSegmentMetadata) -> None:
        self.rsm, self.md = rsm, md
        self.calls: list[tuple[int, int]] = []

    def __call__(self, start: int, end: int) -> bytes:
        self.calls.append((start, end))
        with self.rsm.fetch_log_segment(self.md, start, end) as stream:
            return stream.read()

    def open(self, start: int, end: int | None) -> IO[bytes]:
        return self.rsm.fetch_log_segment(self.md, start, end)

