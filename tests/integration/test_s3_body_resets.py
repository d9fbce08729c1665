"""GETs whose body a real S3 server's connection breaks off mid-stream (a TCP proxy resets it after the headers and
part of the body): the S3 store asks again for the bytes not received, up to max_attempts GETs (found by helper
hZa, F4: one reset failed `tiered consume`, HTTP reads and Spark tasks)."""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.integration.body_reset_proxy import BodyResetProxy
from tests.integration.s3_servers import S3Endpoint
from tests.integration.test_real_s3 import _bucket
from tests.rsm_conformance import metadata
from tiered.backends import load_rsm
from tiered.errors import RemoteStorageError
from tiered.rsm import LogSegmentData

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("server", ["seaweedfs", "moto-server"])
def test_gets_broken_off_mid_body_by_a_reset_are_asked_again_from_the_byte_reached(
    server: str, request: pytest.FixtureRequest
) -> None:
    endpoint: S3Endpoint = request.getfixturevalue(f"{server.replace('-', '_')}_endpoint")
    bucket = _bucket(endpoint)
    url = urlsplit(endpoint.url)
    data = random.Random(3).randbytes(600_000)  # several recv()s of the proxy: the reset comes mid-body
    key = f"resets-{uuid.uuid4().hex[:8]}/seg.log"
    endpoint.client().put_object(Bucket=bucket, Key=key, Body=data)
    with BodyResetProxy((url.hostname or "127.0.0.1", url.port or 80)) as proxy:
        config = {**endpoint.rsm_config(bucket), "endpoint_url": f"http://127.0.0.1:{proxy.port}",
                  "max_attempts": "3"}
        rsm = load_rsm("s3", config)
        store: Any = rsm.store  # type: ignore[attr-defined]
        try:
            name, started = key.encode(), time.monotonic()
            proxy.reset_gets(name, 2, 5000)  # a whole-object read: twice broken off 5000 bytes into the answer
            assert store.get(key) == data
            assert len(proxy.gets) == 3 and proxy.resets == 2

            proxy.gets.clear()
            proxy.reset_gets(name, 2, 70_000)  # a stream read in pieces: on from the byte reached, nothing twice
            with store.open_range(key, 100, 599_999) as stream:
                pieces = list(iter(lambda: stream.read(16_384), b""))
            assert b"".join(pieces) == data[100:]
            assert len(proxy.gets) == 3 and proxy.resets == 4

            proxy.gets.clear()
            proxy.reset_gets(name, 3, 5000)  # max_attempts GETs broken off: the retriable error of today
            with pytest.raises(RemoteStorageError, match=rf"S3 get of s3://.*/{key}: .*Connection broken") as err:
                store.get_range(key, 0, 599_999)
            assert err.value.retriable and len(proxy.gets) == 3 and proxy.resets == 7
            assert time.monotonic() - started < 20  # resets, each seen at once (no read timeout waited for)
        finally:
            rsm.close()


@pytest.mark.parametrize("server", ["seaweedfs", "moto-server"])
def test_a_remote_segment_read_whose_gets_are_reset_mid_body_reads_every_byte_once(
    server: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The same through the segment format (its manifest, chunks and checksums): a fetch of a remote segment whose
    segment GETs break off (max_attempts - 1 of them) reads back the segment (before: the first reset failed the read)."""
    endpoint: S3Endpoint = request.getfixturevalue(f"{server.replace('-', '_')}_endpoint")
    bucket = _bucket(endpoint)
    url = urlsplit(endpoint.url)
    log = random.Random(5).randbytes(3 * 1024 * 1024 + 17)
    d = tmp_path / "segment"
    d.mkdir()
    (d / "0.log").write_bytes(log)
    (d / "0.index").write_bytes(b"\x00\x00\x00\x01\x00\x00\x10\x00")
    (d / "0.timeindex").write_bytes(b"\x00" * 12)
    (d / "1.snapshot").write_bytes(bytes.fromhex("000148674bc700000000"))
    data = LogSegmentData(d / "0.log", d / "0.index", d / "0.timeindex", None, d / "1.snapshot", b"0\n1\n0 100\n")
    with BodyResetProxy((url.hostname or "127.0.0.1", url.port or 80)) as proxy:
        config = {**endpoint.rsm_config(bucket, prefix=f"resets-{uuid.uuid4().hex[:8]}"),
                  "endpoint_url": f"http://127.0.0.1:{proxy.port}", "max_attempts": "3"}
        rsm = load_rsm("s3", config)
        try:
            md = metadata()
            rsm.copy_log_segment_data(md, data)
            proxy.reset_gets(b".log", 2, 20_000)  # the next two segment GETs, whichever streams they are of
            assert rsm.fetch_log_segment(md, 0).read() == log
            proxy.reset_gets(b".log", 2, 20_000)
            with rsm.fetch_log_segment(md, 1000, 2_999_999) as stream:
                pieces = list(iter(lambda: stream.read(64 * 1024), b""))
            assert b"".join(pieces) == log[1000:3_000_000]
            assert proxy.resets == 4
        finally:
            rsm.close()
