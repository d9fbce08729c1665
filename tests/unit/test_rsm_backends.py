"""The conformance suite on the local-directory, fsspec (memory and local) and S3 (moto in-process) backends."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rsm_conformance import RSMConformance
from tiered.backends import load_rsm
from tiered.backends.base import ObjectStoreRemoteStorageManager


class TestLocalDir(RSMConformance):
    @pytest.fixture
    def rsm(self, tmp_path: Path) -> ObjectStoreRemoteStorageManager:
        return load_rsm("local", {"dir": str(tmp_path / "remote"), "prefix": "tiered"})  # type: ignore[return-value]


class TestFsspecMemory(RSMConformance):
    @pytest.fixture
    def rsm(self) -> ObjectStoreRemoteStorageManager:
        return load_rsm("fsspec", {"url": f"memory://bucket-{uuid.uuid4().hex}/root"})  # type: ignore[return-value]


class TestFsspecLocal(RSMConformance):
    @pytest.fixture
    def rsm(self, tmp_path: Path) -> ObjectStoreRemoteStorageManager:
        return load_rsm("fsspec", {"url": f"file://{tmp_path / 'fs'}"})  # type: ignore[return-value]


class TestS3Moto(RSMConformance):
    @pytest.fixture
    def rsm(self) -> Iterator[ObjectStoreRemoteStorageManager]:
        from moto import mock_aws

        with mock_aws():
            import boto3

            boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="tiered-test")
            rsm = load_rsm("s3", {"bucket": "tiered-test", "prefix": "p", "region": "us-east-1",
                                  "multipart_threshold_bytes": str(5 * 1024 * 1024), "aws_access_key_id": "test",
                                  "aws_secret_access_key": "test"})
            yield rsm  # type: ignore[misc]
            rsm.close()
