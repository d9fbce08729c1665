"""The RSM conformance suite with segments in the manifest format, on the local-directory (zstd+aes), fsspec
memory (aes) and in-process moto (zstd) backends."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.formatutil import KeyPairPaths, combo_config, write_key_pair
from tests.rsm_conformance_manifest import ManifestConformance
from tiered.backends import load_rsm
from tiered.backends.base import ObjectStoreRemoteStorageManager

CHUNK_SIZE = 256 * 1024 + 3  # does not divide the conformance segment


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> list[KeyPairPaths]:
    return [write_key_pair(tmp_path_factory.mktemp("keys"), "k1")]


class TestLocalDirZstdAes(ManifestConformance):
    @pytest.fixture
    def rsm(self, tmp_path: Path, pairs: list[KeyPairPaths]) -> ObjectStoreRemoteStorageManager:
        return load_rsm("local", {"dir": str(tmp_path / "remote"), "prefix": "tiered",  # type: ignore[return-value]
                                  **combo_config("zstd+aes", pairs, CHUNK_SIZE)})


class TestFsspecMemoryAes(ManifestConformance):
    @pytest.fixture
    def rsm(self, pairs: list[KeyPairPaths]) -> ObjectStoreRemoteStorageManager:
        return load_rsm("fsspec", {"url": f"memory://bucket-{uuid.uuid4().hex}/root",  # type: ignore[return-value]
                                   **combo_config("aes", pairs, CHUNK_SIZE)})


class TestS3MotoZstd(ManifestConformance):

    @pytest.fixture
    def serializes_conditional_writes(self) -> bool:
        return False  # moto checks If-None-Match, then writes, without a lock: racing creates may both succeed
    @pytest.fixture
    def rsm(self, pairs: list[KeyPairPaths]) -> Iterator[ObjectStoreRemoteStorageManager]:
        from moto import mock_aws

        with mock_aws():
            import boto3

            boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="tiered-test")
            rsm = load_rsm("s3", {"bucket": "tiered-test", "prefix": "p", "region": "us-east-1",
                                  "multipart_threshold_bytes": str(5 * 1024 * 1024), "aws_access_key_id": "test",
                                  "aws_secret_access_key": "test", **combo_config("zstd", pairs, CHUNK_SIZE)})
            yield rsm  # type: ignore[misc]
            rsm.close()
