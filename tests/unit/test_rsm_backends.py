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
    def serializes_conditional_writes(self) -> bool:
        return False  # moto checks If-None-Match, then writes, without a lock: racing creates may both succeed
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


def test_an_s3_body_that_breaks_mid_read_is_a_retriable_remote_storage_error() -> None:
    from botocore.exceptions import ReadTimeoutError, ResponseStreamingError

    from tiered.backends.s3 import S3RemoteStorageManager, _Body
    from tiered.errors import RemoteStorageError, RemoteStorageTimeoutError

    class Broken:
        def __init__(self, exc: Exception) -> None:
            self.exc, self.closed = exc, False

        def read(self, amt: int | None = None) -> bytes:
            raise self.exc

        def close(self) -> None:
            self.closed = True

    rsm = S3RemoteStorageManager()
    rsm.bucket = "b"
    body = Broken(ResponseStreamingError(error="connection reset"))
    stream = _Body(rsm, "t/0.log", body)
    with pytest.raises(RemoteStorageError, match=r"s3://b/t/0.log") as err:
        stream.read(10)
    assert err.value.retriable
    stream.close()
    assert body.closed
    with pytest.raises(RemoteStorageTimeoutError):
        _Body(rsm, "t/0.log", Broken(ReadTimeoutError(endpoint_url="http://x"))).read(10)
