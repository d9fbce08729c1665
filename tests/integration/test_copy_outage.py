"""An S3 outage in the middle of a segment copy, made by a fault proxy on 127.0.0.1 in front of a real server
(connections reset, a response cut, requests hanging): the failed attempt's objects and metadata stay behind while
the store is down, and the next pass of the same process removes them, copies again and serves every value."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from tests.integration.fault_proxy import FaultProxy
from tests.integration.s3_servers import S3Endpoint
from tests.integration.test_real_s3 import _bucket
from tests.logutil import read_all_values
from tiered.backends import load_rsm
from tiered.backends.composed import ObjectStoreRemoteStorageManager
from tiered.composition import assemble_remote_log_manager
from tiered.layout import kafka_uuid, partition_prefix
from tiered.metadata import RemoteLogMetadataStore
from tiered.scrub.object_checksums import verify_object_checksums

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


@pytest.mark.parametrize("mode", ["reset", "cut"])
def test_an_s3_outage_in_the_middle_of_a_copy_leaves_no_orphan_after_the_next_pass(
    s3_server: S3Endpoint, tmp_path: Path, mode: str
) -> None:
    _outage_in_a_copy(s3_server, tmp_path, mode)


def test_a_store_hanging_in_the_middle_of_a_copy_leaves_no_orphan_after_the_next_pass(
    seaweedfs_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    """Requests that hang until the client's read timeout, twice (its attempts): on one server only, as what is
    tested is the client's timeouts, and each server costs the timeouts again (~20 s)."""
    _outage_in_a_copy(seaweedfs_endpoint, tmp_path, "hang")


def _outage_in_a_copy(s3_server: S3Endpoint, tmp_path: Path, mode: str) -> None:
    bucket = _bucket(s3_server)
    prefix = f"outage-{uuid.uuid4().hex[:8]}"
    server = urlsplit(s3_server.url)
    direct = load_rsm("s3", s3_server.rsm_config(bucket, prefix))  # straight to the server: what the bucket holds
    assert isinstance(direct, ObjectStoreRemoteStorageManager)
    with FaultProxy((server.hostname or "127.0.0.1", server.port or 80)) as proxy:
        # A read timeout a busy machine's server answers within (1.5 s once timed out the claim's PUT beside two
        # other test runs): only the "hang" mode waits for it to expire, twice.
        config = {**s3_server.rsm_config(bucket, prefix), "endpoint_url": f"http://127.0.0.1:{proxy.port}",
                  "connect_timeout_ms": "1000", "read_timeout_ms": "5000", "max_attempts": "2"}
        rsm = load_rsm("s3", config)
        rlm = assemble_remote_log_manager(rsm, RemoteLogMetadataStore.in_bucket(rsm), tmp_path / "data")
        log_config = LogConfig.from_properties({"log.dirs": str(tmp_path / "data"), "log.segment.bytes": str(MIB)})
        with LogManager(log_config, remote_tier=rlm, start_scheduler=False) as manager:
            log = manager.get_or_create_log("outage", 0, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
            now = int(time.time() * 1000)
            for first in range(0, 12_000, 100):
                log.append(MemoryRecords.build([SimpleRecord(now, None, b"%0200d" % i) for i in range(first, first + 100)]))
            expected = read_all_values(log)
            candidates = len(rlm.candidate_segments(log))
            assert candidates >= 2
            tip = rlm.topic_id_partition(log)
            data_prefix = partition_prefix(direct.prefix, tip) + "/"

            proxy.fail_on(b".timeindex", mode)  # the .log and the .index are up, then the store goes down
            first_pass = rlm.run_once(manager.all_logs())
            assert proxy.triggered.is_set() and first_pass.copy_errors == 1 and first_pass.segments_copied == 0
            left = [k for k in direct.store.list_keys(data_prefix) if "/__remote_log_metadata/" not in k]
            assert any(k.endswith(".log") for k in left)  # the outage left the attempt's objects behind
            assert RemoteLogMetadataStore.in_bucket(direct).find_stale_copies(tip) != []  # and its STARTED metadata

            proxy.up()  # the store is back; the same process, no restart
            second = rlm.run_once(manager.all_logs())
            assert second.stale_copies_cleaned == 1 and second.copy_errors == 0
            assert second.segments_copied == candidates

            bucket_view = RemoteLogMetadataStore.in_bucket(direct)
            assert bucket_view.find_stale_copies(tip) == []
            finished = bucket_view.readable_segments(tip)
            ids = {kafka_uuid(md.remote_log_segment_id.id) for md in finished}
            data_keys = [k for k in direct.store.list_keys(data_prefix) if "/__remote_log_metadata/" not in k]
            assert {k.rsplit("/", 1)[1].split("-", 1)[1].split(".", 1)[0] for k in data_keys} == ids  # no orphan
            for md in finished:
                assert verify_object_checksums(direct, md) == []
            manager.cleanup_logs()
            assert log.local_log_start_offset > 0
            assert read_all_values(log) == expected
    direct.close()
