"""The operator's CLI against a real S3 server (moto's, on 127.0.0.1): ``tiered attach`` on a second data dir reads
every remote offset of the first from the bucket alone, and a missing bucket is named as such."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from local.remote_state import RemoteLogStateFile
from tests.integration.s3_servers import S3Endpoint
from tests.unit.test_cli_attach import RECORDS, cli, consume_all, produce, write_config


def s3_props(root: Path, endpoint: S3Endpoint, bucket: str) -> dict[str, str]:
    props = {"log.dirs": str(root / "data"), "log.segment.bytes": str(1024 * 1024),
             "remote.log.storage.system.enable": "true", "remote.log.storage.manager.class.name": "s3"}
    props.update({f"rsm.config.{k}": v for k, v in endpoint.rsm_config(bucket, prefix="tiered").items()})
    return props


def test_attach_from_an_s3_bucket_reads_every_remote_offset(
    moto_server_endpoint: S3Endpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = f"attach-{uuid.uuid4().hex[:8]}"
    moto_server_endpoint.client().create_bucket(Bucket=bucket)
    first = write_config(tmp_path / "a.properties", s3_props(tmp_path / "a", moto_server_endpoint, bucket))
    rc, _, err = cli(capsys, "--config", str(first), "topics", "create", "-t", "ev", "--partitions", "2",
                     "--topic-config", "remote.storage.enable=true", "--topic-config", "local.retention.bytes=1")
    assert rc == 0, err
    produce(first, "ev", 2)
    rc, out, err = cli(capsys, "--config", str(first), "offload")
    assert rc == 0, out + err
    second = write_config(tmp_path / "b.properties", s3_props(tmp_path / "b", moto_server_endpoint, bucket))
    rc, out, err = cli(capsys, "--config", str(second), "attach", "-t", "ev")
    assert rc == 0, err
    for p in range(2):
        highest = RemoteLogStateFile(tmp_path / "a" / "data" / f"ev-{p}").read().highest_remote_offset
        assert highest > RECORDS // 2
        original = consume_all(capsys, first, "ev", p)
        adopted = consume_all(capsys, second, "ev", p)
        assert [r["offset"] for r in adopted] == list(range(highest + 1))
        assert adopted == original[: highest + 1]
    rc, out, err = cli(capsys, "--config", str(second), "status", "--json")
    assert rc == 0, err
    parts = {p["partition"]: p for p in json.loads(out)["data_dirs"][0]["partitions"]}
    assert parts["ev-1"]["log_start_offset"] == 0 and parts["ev-1"]["remote"]["segments"] >= 2


def test_a_missing_bucket_is_named(moto_server_endpoint: S3Endpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path / "a.properties", s3_props(tmp_path / "a", moto_server_endpoint, "no-such-bucket-here"))
    for command in (["offload"], ["attach", "-t", "ev"], ["consume", "-t", "ev"]):
        rc, _, err = cli(capsys, "--config", str(config), *command)
        assert rc == 1, command
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert f"the bucket 'no-such-bucket-here' does not exist at {moto_server_endpoint.url}" in err
