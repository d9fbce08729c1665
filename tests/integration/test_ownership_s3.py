"""Ownership of a partition's remote data (tiered.ownership) on a real S3 server (SeaweedFS on 127.0.0.1): two data
dirs share one bucket, the second attaches the topic, the first finds it lost the partition at its next offload
and copies nothing, and the second reads back only its own records. The conditional writes a claim relies on are
checked on every server the suite starts by the conformance suite (tests/integration/test_real_s3.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from local.remote_state import RemoteLogStateFile
from tests.integration.s3_servers import S3Endpoint
from tests.integration.test_cli_remote_s3 import s3_props
from tests.unit.test_ownership import TOPIC, attach, cli, consume, produce, write_config


def test_two_data_dirs_on_one_s3_bucket_have_one_owner_per_partition(
    seaweedfs_endpoint: S3Endpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = f"owners-{uuid.uuid4().hex[:8]}"
    seaweedfs_endpoint.client().create_bucket(Bucket=bucket)
    a = write_config(tmp_path / "a.properties", s3_props(tmp_path / "a", seaweedfs_endpoint, bucket))
    b = write_config(tmp_path / "b.properties", s3_props(tmp_path / "b", seaweedfs_endpoint, bucket))
    rc, _, err = cli(capsys, "--config", str(a), "topics", "create", "-t", TOPIC, "--topic-config",
                     "remote.storage.enable=true", "--topic-config", "local.retention.bytes=1")
    assert rc == 0, err
    produce(a, "A", 70)
    rc, _, err = cli(capsys, "--config", str(a), "offload")
    assert rc == 0, err
    highest = RemoteLogStateFile(tmp_path / "a" / "data" / f"{TOPIC}-0").read().highest_remote_offset
    assert "owner epoch 1" in attach(capsys, b)
    _, b_end = produce(b, "B", 70)
    produce(a, "A", 70)

    def objects() -> list[str]:
        pages = seaweedfs_endpoint.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    before = objects()
    rc, out, err = cli(capsys, "--config", str(a), "offload")
    assert rc == 1 and "lost ownership" in err and "copied 0 segment(s)" in out
    assert objects() == before
    rc, _, err = cli(capsys, "--config", str(b), "offload")
    assert rc == 0, err
    rc, records, err = consume(capsys, b, "--offset", str(highest))
    assert rc == 0, err
    assert [r["offset"] for r in records] == list(range(highest, b_end))
    assert str(records[0]["value"]).startswith(f"A-{highest}x")
    assert all(str(r["value"]).startswith(f"B-{r['offset']}x") for r in records[1:])
    rc, out, err = cli(capsys, "--config", str(b), "verify", "--remote")
    assert rc == 0, out + err
