"""The RSM conformance suite and the whole tiered log against real S3 servers on 127.0.0.1."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from tests.integration.s3_servers import S3Endpoint
from tests.rsm_conformance import RSMConformance
from tiered.backends import load_rsm
from tiered.backends.composed import ObjectStoreRemoteStorageManager

pytestmark = pytest.mark.integration


_BUCKETS: dict[str, str] = {}


def _bucket(endpoint: S3Endpoint) -> str:
    """One bucket per server for the session (SeaweedFS gives every bucket volumes of its own); tests keep apart
    by random topic ids and prefixes."""
    if endpoint.url not in _BUCKETS:
        name = f"tiered-{uuid.uuid4().hex[:12]}"
        endpoint.client().create_bucket(Bucket=name)
        _BUCKETS[endpoint.url] = name
    return _BUCKETS[endpoint.url]


class TestRealS3(RSMConformance):

    @pytest.fixture
    def serializes_conditional_writes(self, s3_server: S3Endpoint) -> bool:
        return s3_server.serializes_conditional_writes
    @pytest.fixture
    def rsm(self, s3_server: S3Endpoint) -> Iterator[ObjectStoreRemoteStorageManager]:
        config = s3_server.rsm_config(_bucket(s3_server), prefix=f"it-{uuid.uuid4().hex[:8]}")
        config["multipart_threshold_bytes"] = str(5 * 1024 * 1024)
        config["multipart_chunk_size_bytes"] = str(5 * 1024 * 1024)
        rsm = load_rsm("s3", config)
        yield rsm  # type: ignore[misc]
        rsm.close()


def test_multipart_upload_of_a_large_segment(s3_server: S3Endpoint, tmp_path: Path) -> None:
    rsm = load_rsm("s3", {**s3_server.rsm_config(_bucket(s3_server)), "multipart_threshold_bytes": str(5 * 2**20),
                          "multipart_chunk_size_bytes": str(5 * 2**20)})
    data = bytes(range(256)) * (70 * 1024)  # 17.5 MiB: four parts
    (tmp_path / "big").write_bytes(data)
    with open(tmp_path / "big", "rb") as f:
        rsm.store.put("big", f)
    assert rsm.store.get_range("big", 16 * 2**20, 16 * 2**20 + 99) == data[16 * 2**20 : 16 * 2**20 + 100]  # type: ignore[attr-defined]
    rsm.close()


def test_tiered_log_on_seaweedfs_end_to_end(seaweedfs_endpoint: S3Endpoint, tmp_path: Path) -> None:
    bucket = _bucket(seaweedfs_endpoint)
    props = {"log.dirs": str(tmp_path / "data"), "log.segment.bytes": str(2**20),
             "remote.log.storage.system.enable": "true", "remote.log.storage.manager.class.name": "s3",
             **{f"rsm.config.{k}": v for k, v in seaweedfs_endpoint.rsm_config(bucket, "cluster-a").items()}}
    overrides = {"remote.storage.enable": "true", "local.retention.bytes": str(2**20)}
    t0 = int(time.time() * 1000)
    values = [(b"%06d" % i) * 30 for i in range(15_000)]
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        log = m.get_or_create_log("orders", 0, overrides)
        for first in range(0, len(values), 100):
            log.append(MemoryRecords.build([SimpleRecord(t0 + i, None, values[i]) for i in range(first, first + 100)]))
        assert m.remote_tier.run_once(m.all_logs()).segments_copied > 0  # type: ignore[union-attr]
        # the copies ran in the copier process (a bucket is shared across processes): the parent's GIL is not theirs
        assert m.remote_tier.process_copier is not None and m.remote_tier.process_copier.requests > 0  # type: ignore[union-attr]
        assert m.cleanup_logs() > 0
    # a new machine: a fresh data dir copy is not needed, the remote segments are found from the bucket
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        log = m.get_log("orders", 0)
        assert log is not None and log.local_log_start_offset > 0
        got = []
        offset = 0
        while offset < log.log_end_offset:
            for batch in log.read(offset, 256 * 1024).records.batches():
                got.extend(r.value for r in batch.records() if r.offset >= offset)
                offset = batch.last_offset + 1
        assert got == values
        # the sequential reader was fed by streaming GETs (one per segment), not only chunk by chunk
        assert m.remote_tier.chunk_cache.streams_opened > 0  # type: ignore[union-attr]


def test_two_seaweedfs_servers_side_by_side_and_sigterm_stops_one(seaweedfs_endpoint: S3Endpoint, tmp_path: Path) -> None:
    """localstack/seaweedfs.sh binds only ports it is given or picks free: a second server starts beside the
    session's, both serve, and SIGTERM ends the script itself (exit 0, not a SIGKILL from the caller)."""
    import os
    import signal
    import subprocess

    from tests.integration.s3_servers import SCRIPTS, _wait_http, free_port

    port = free_port()
    log = tmp_path / "second.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["bash", str(SCRIPTS / "seaweedfs.sh"), str(tmp_path / "second"), str(port)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_http(f"http://127.0.0.1:{port}/", 90, proc, log)
        second = S3Endpoint("seaweedfs-2", f"http://127.0.0.1:{port}")
        for endpoint in (seaweedfs_endpoint, second):
            client = endpoint.client()
            deadline = time.monotonic() + 60
            while True:
                try:
                    client.create_bucket(Bucket="side-by-side")
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            client.put_object(Bucket="side-by-side", Key="k", Body=endpoint.url.encode())
        for endpoint in (seaweedfs_endpoint, second):
            body = endpoint.client().get_object(Bucket="side-by-side", Key="k")["Body"].read()
            assert body == endpoint.url.encode()
        os.kill(proc.pid, signal.SIGTERM)  # the script only: it must stop weed itself
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
