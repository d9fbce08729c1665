"""The manifest format of remote segments on real S3 servers (SeaweedFS, LocalStack, moto server) on 127.0.0.1:
every combination of transforms and chunk sizes, a multipart upload of chunks, ranged reads at chunk boundaries,
old plain segments in the same bucket, and a tampered stored chunk refused."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.formatutil import (
    COMBOS,
    KeyPairPaths,
    combo_config,
    metadata,
    segment_files,
    text_like,
    write_key_pair,
)
from tests.integration.s3_servers import S3Endpoint
from tests.integration.test_real_s3 import _bucket
from tests.rsm_conformance_manifest import ManifestConformance
from tiered import IndexType, RemoteLogSegmentMetadata
from tiered.backends import load_rsm
from tiered.backends.base import ObjectStoreRemoteStorageManager
from tiered.errors import RemoteChunkError
from tiered.layout import segment_key

pytestmark = pytest.mark.integration
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> list[KeyPairPaths]:
    d = tmp_path_factory.mktemp("keys")
    return [write_key_pair(d, "k1")]


@pytest.fixture
def s3_config(s3_server: S3Endpoint) -> dict[str, str]:
    config = s3_server.rsm_config(_bucket(s3_server), prefix=f"fmt-{uuid.uuid4().hex[:8]}")
    config["multipart_chunk_size_bytes"] = str(5 * MIB)
    config["multipart_threshold_bytes"] = str(5 * MIB)
    return config


def _rsm(config: dict[str, str], **extra: str) -> Iterator[ObjectStoreRemoteStorageManager]:
    rsm: ObjectStoreRemoteStorageManager = load_rsm("s3", {**config, **extra})  # type: ignore[assignment]
    try:
        yield rsm
    finally:
        rsm.close()


def _read(rsm: ObjectStoreRemoteStorageManager, md: RemoteLogSegmentMetadata, start: int, end: int | None) -> bytes:
    with rsm.fetch_log_segment(md, start, end) as s:
        return s.read()


@pytest.mark.parametrize("chunk", [4096, 3000], ids=["chunk-divides", "chunk-does-not-divide"])
@pytest.mark.parametrize("combo", list(COMBOS))
def test_round_trip_every_combination(s3_config: dict[str, str], pairs: list[KeyPairPaths], combo: str, chunk: int,
                                      tmp_path: Path) -> None:
    log = text_like(40 * 1024)
    md = metadata()
    data = segment_files(tmp_path / "seg", log)
    for rsm in _rsm(s3_config, **combo_config(combo, pairs, chunk)):
        rsm.copy_log_segment_data(md, data)
        for start, end in [(0, None), (chunk - 1, chunk), (chunk, 2 * chunk - 1), (len(log) - 1, None),
                           (5 * chunk - 3, 7 * chunk + 2)]:
            assert _read(rsm, md, start, end) == log[start : None if end is None else end + 1], (start, end)
        assert rsm.fetch_index(md, IndexType.TIMESTAMP).read() == data.time_index.read_bytes()
        assert (rsm.manifest(md) is None) == (combo == "plain")
    for fresh in _rsm(s3_config, **combo_config(combo, pairs, chunk)):
        assert _read(fresh, md, 0, None) == log
        fresh.delete_log_segment_data(md)
        assert fresh.list_keys(fresh.prefix) == []


@pytest.mark.parametrize("combo", ["aes", "zstd+aes"])
def test_a_multipart_upload_of_chunks(s3_config: dict[str, str], pairs: list[KeyPairPaths], combo: str,
                                      tmp_path: Path) -> None:
    chunk = MIB + 7  # does not divide the segment; the stored chunks straddle the 5 MiB parts
    log = os.urandom(12 * MIB) if combo == "aes" else text_like(12 * MIB)
    md = metadata(size=len(log))
    for rsm in _rsm(s3_config, **combo_config(combo, pairs, chunk)):
        rsm.copy_log_segment_data(md, segment_files(tmp_path / "seg", log))
        m = rsm.manifest(md)
        assert m is not None and m.chunk_count == 12
        if combo == "aes":
            assert m.stored_size > 10 * MIB  # three parts
        for i in (1, 5, 11):
            b = i * chunk
            assert _read(rsm, md, b - 3, b + 2) == log[b - 3 : b + 3]
        assert _read(rsm, md, 0, None) == log


def test_old_plain_segments_in_the_same_bucket_and_a_tampered_chunk(s3_config: dict[str, str], pairs: list[KeyPairPaths],
                                                                    s3_server: S3Endpoint, tmp_path: Path) -> None:
    old_log, new_log = os.urandom(20_000), text_like(20_000)
    old_md, new_md = metadata(0, 99), metadata(100, 199)
    for plain in _rsm(s3_config):
        plain.copy_log_segment_data(old_md, segment_files(tmp_path / "a", old_log))
    for rsm in _rsm(s3_config, **combo_config("zstd+aes", pairs, 4096)):
        rsm.copy_log_segment_data(new_md, segment_files(tmp_path / "b", new_log))
        assert _read(rsm, old_md, 10, 15_000) == old_log[10:15_001]
        assert _read(rsm, new_md, 10, 15_000) == new_log[10:15_001]
        key = segment_key(rsm.prefix, new_md, ".log")
        m = rsm.manifest(new_md)
        assert m is not None
        stored = bytearray(rsm.get_range(key))
        stored[m.stored_offsets[3] + 20] ^= 0x80
        s3_server.client().put_object(Bucket=s3_config["bucket"], Key=key, Body=bytes(stored))
    for fresh in _rsm(s3_config, **combo_config("zstd+aes", pairs, 4096)):
        assert _read(fresh, new_md, 0, 3 * 4096 - 1) == new_log[: 3 * 4096]
        with pytest.raises(RemoteChunkError, match=rf"chunk 3 of remote object {key}"):
            _read(fresh, new_md, 3 * 4096, 3 * 4096 + 10)


class TestManifestConformanceRealS3(ManifestConformance):
    """The conformance suite, zstd+aes, on each real server."""

    @pytest.fixture
    def serializes_conditional_writes(self, s3_server: S3Endpoint) -> bool:
        return s3_server.serializes_conditional_writes

    @pytest.fixture
    def rsm(self, s3_config: dict[str, str], pairs: list[KeyPairPaths]) -> Iterator[ObjectStoreRemoteStorageManager]:
        yield from _rsm(s3_config, **combo_config("zstd+aes", pairs, 256 * 1024 + 3))
