"""The conformance suite for a backend storing segments in the manifest format (compression and/or encryption on).

Every test of :class:`tests.rsm_conformance.RSMConformance` runs unchanged except the four that look at the
stored objects' bytes, which the manifest layout changes: they are replaced here by their counterparts for that
layout (the object keys; a flipped stored byte, damaged packed indexes, a truncated ``.log`` all refused naming
the object and chunk, through the plugin, the checksum verifier, the caches and the whole log). Subclasses define
``rsm`` as for RSMConformance, configured with a transform on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from local.errors import CorruptRecordError
from local.log import Log
from tests.rsm_conformance import CHUNK, RSMConformance, _names, _value, metadata
from tiered import IndexType, LogSegmentData, RemoteLogSegmentMetadata
from tiered.backends.composed import MANIFEST_SUFFIX, PACKED_INDEXES_SUFFIX, ObjectStoreRemoteStorageManager
from tiered.checksums import ChecksumVerifier
from tiered.errors import RemoteChunkError
from tiered.layout import kafka_uuid, segment_key
from tiered.metadata import RemoteLogMetadataStore
from tiered.scrub.object_checksums import verify_object_checksums


def _flip_stored(rsm: ObjectStoreRemoteStorageManager, md: RemoteLogSegmentMetadata, chunk: int, at: int = 17) -> str:
    """Flip one byte of stored chunk ``chunk`` of the segment's ``.log`` behind the plugin's back; its key."""
    manifest = rsm.manifest(md)
    assert manifest is not None, "the backend under test must store segments in the manifest layout"
    key = segment_key(rsm.prefix, md, ".log")
    stored = bytearray(rsm.store.get(key))
    stored[manifest.stored_offsets[chunk] + at] ^= 0x01
    rsm.store.put(key, bytes(stored))
    return key


class ManifestConformance(RSMConformance):
    def test_object_keys_follow_the_layout(self, rsm: ObjectStoreRemoteStorageManager, segment: tuple[LogSegmentData, bytes]) -> None:
        data, _ = segment
        md = metadata(start=42, partition=7)
        rsm.copy_log_segment_data(md, data)
        expected_dir = f"conformance-{kafka_uuid(md.topic_id_partition.topic_id)}/7/"
        keys = rsm.store.list_keys((rsm.prefix + "/" if rsm.prefix else "") + expected_dir)
        name = f"00000000000000000042-{kafka_uuid(md.remote_log_segment_id.id)}"
        assert sorted(k.rsplit("/", 1)[1] for k in keys) == sorted(name + s for s in (".log", PACKED_INDEXES_SUFFIX, MANIFEST_SUFFIX))

    def test_a_flipped_byte_in_a_stored_object_is_refused_after_one_refetch(
        self, rsm: ObjectStoreRemoteStorageManager, segment: tuple[LogSegmentData, bytes], tmp_path: Path
    ) -> None:
        data, log = segment
        md, _ = self._copy_with_checksums(rsm, data)
        chunk = rsm.format.chunk_size
        key = _flip_stored(rsm, md, 1)
        fresh = type(rsm)()
        fresh.configure(rsm.props)
        verifier = ChecksumVerifier(fresh, RemoteLogMetadataStore.in_bucket(fresh).segment_checksums)
        with fresh.fetch_log_segment(md, 0, chunk - 1) as s:
            assert s.read() == log[:chunk]  # the chunk before it still reads
        with pytest.raises(RemoteChunkError, match=f"chunk 1 of remote object {key}") as info, \
                fresh.fetch_log_segment(md, chunk + 5, chunk + 10) as s:
            s.read()
        assert (info.value.key, info.value.chunk) == (key, 1) and isinstance(info.value, CorruptRecordError)
        with pytest.raises(RemoteChunkError), verifier.opener(md, lambda a, b: fresh.fetch_log_segment(md, a, b))(0, None) as stream:
            while stream.read(CHUNK):
                pass
        [problem] = verify_object_checksums(fresh, md)
        assert problem.kind == "unreadable" and f"chunk 1 of remote object {key}" in problem.detail

    def test_damaged_indexes_and_a_truncated_log_are_errors_naming_the_object(
        self, rsm: ObjectStoreRemoteStorageManager, segment: tuple[LogSegmentData, bytes], tmp_path: Path
    ) -> None:
        data, log = segment
        md, _ = self._copy_with_checksums(rsm, data)
        manifest = rsm.manifest(md)
        assert manifest is not None
        packed_key = segment_key(rsm.prefix, md, PACKED_INDEXES_SUFFIX)
        packed = bytearray(rsm.store.get(packed_key))
        packed[manifest.indexes[".index"].offset] ^= 0x01
        rsm.store.put(packed_key, bytes(packed))
        log_key = segment_key(rsm.prefix, md, ".log")
        rsm.store.put(log_key, rsm.store.get(log_key)[:-10])
        fresh = type(rsm)()
        fresh.configure(rsm.props)
        with pytest.raises(RemoteChunkError, match=rf"the \.index index of remote object {packed_key}"):
            fresh.fetch_index(md, IndexType.OFFSET)
        assert fresh.fetch_index(md, IndexType.TIMESTAMP).read() == data.time_index.read_bytes()  # the others read
        last = manifest.chunk_count - 1
        with pytest.raises(RemoteChunkError, match=f"chunk {last} .*ends after"), \
                fresh.fetch_log_segment(md, len(log) - 5) as s:
            s.read()
        kinds = {p.object: p.kind for p in verify_object_checksums(fresh, md)}
        assert kinds[log_key] == "unreadable" and set(kinds) >= {log_key}

    def test_a_flipped_byte_in_a_remote_object_is_an_error_never_a_wrong_value(
        self, rsm: ObjectStoreRemoteStorageManager, tiered_log: tuple[Log, list[RemoteLogSegmentMetadata]]
    ) -> None:
        log, remote = tiered_log
        md = remote[1]
        _flip_stored(rsm, md, 0, at=100)
        got: list[tuple[int, bytes | None]] = []
        with pytest.raises(CorruptRecordError) as err:
            got.extend(self._consume(log, md.start_offset, md.end_offset + 1))
        assert _names(err.value, md), str(err.value)
        assert got == [(i, _value(i)) for i in range(md.start_offset, md.start_offset + len(got))]  # never wrong
        assert self._consume(log, remote[0].start_offset, remote[0].end_offset + 1) == [
            (i, _value(i)) for i in range(remote[0].start_offset, remote[0].end_offset + 1)]
