"""The whole tiered log on the manifest format (zstd + AES-256-GCM): offload, read back through the remote read
path on a fresh manager, and ``tiered verify --remote`` clean then finding a tampered chunk by name."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.formatutil import KeyPairPaths, combo_config, write_key_pair
from tests.logutil import local_tier_props, read_all_values
from tiered.cli import main
from tiered.format import SegmentManifest

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> list[KeyPairPaths]:
    return [write_key_pair(tmp_path_factory.mktemp("keys"), "k1")]


def test_a_tiered_log_offloads_reads_and_verifies_in_the_manifest_format(
    pairs: list[KeyPairPaths], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from local import LogConfig, LogManager
    from local.records import MemoryRecords, SimpleRecord

    props = local_tier_props(tmp_path, **{f"rsm.config.{k}": v for k, v in combo_config("zstd+aes", pairs, 64 * 1024).items()})
    now = int(time.time() * 1000)
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0, {"remote.storage.enable": "true", "local.retention.bytes": str(MIB)})
        for first in range(0, 20_000, 100):
            log.append(MemoryRecords.build([SimpleRecord(now + i, None, b"%08d" % i * 20) for i in range(first, first + 100)]))
        expected = read_all_values(log)
        assert manager.remote_tier is not None
        assert manager.remote_tier.run_once(manager.all_logs()).segments_copied >= 2  # type: ignore[attr-defined]
        assert manager.cleanup_logs() > 0
    manifests = sorted((tmp_path / "remote").rglob("*.rsm-manifest"))
    assert len(manifests) >= 2
    assert not list((tmp_path / "remote").rglob("*.timeindex"))
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
        log = manager.get_log("t", 0)
        assert log is not None and log.local_log_start_offset > 0
        assert read_all_values(log) == expected

    (tmp_path / "broker.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    args = ["verify", "--remote-only", "--json", "--config", str(tmp_path / "broker.properties")]
    assert main(args) == 0, capsys.readouterr()
    assert json.loads(capsys.readouterr().out)["ok"] is True

    manifest = SegmentManifest.decode(manifests[0].read_bytes())
    stored = manifests[0].with_name(manifests[0].name.replace(".rsm-manifest", ".log"))
    data = bytearray(stored.read_bytes())
    data[manifest.stored_offsets[1] + 30] ^= 0x04
    stored.write_bytes(bytes(data))
    assert main(args) == 1
    doc = json.loads(capsys.readouterr().out)
    found = [p for part in doc["partitions"] for p in part["problems"]]
    assert any(p["kind"] == "unreadable" and "chunk 1 of remote object" in p["message"] and
               p["object"].endswith(stored.name) for p in found), found
