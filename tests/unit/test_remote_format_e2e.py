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

    _dump_understands_the_manifest_format(manifests[0], tmp_path / "broker.properties", capsys)

    manifest = SegmentManifest.decode(manifests[0].read_bytes())
    stored = manifests[0].with_name(manifests[0].name.replace(".rsm-manifest", ".log"))
    data = bytearray(stored.read_bytes())
    data[manifest.stored_offsets[1] + 30] ^= 0x04
    stored.write_bytes(bytes(data))
    assert main(args) == 1
    doc = json.loads(capsys.readouterr().out)
    found = [p for part in doc["partitions"] for p in part["problems"]]
    assert any(p["kind"] == "unreadable" and "chunk 1 of remote object" in p["message"] and
               p["object"].endswith(stored.name) and p["position"] == manifest.chunk_size for p in found), found

    packed = manifests[1].with_name(manifests[1].name.replace(".rsm-manifest", ".indexes"))
    raw = bytearray(packed.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    packed.write_bytes(bytes(raw))
    assert main(args) == 1
    found = [p for part in json.loads(capsys.readouterr().out)["partitions"] for p in part["problems"]]
    remote = tmp_path / "remote"
    assert any(p["object"] == str(packed.relative_to(remote)) for p in found), found
    assert all((remote / p["object"]).exists() for p in found if p.get("object")), found  # the objects there are

    manifests[1].unlink()  # a segment's chunks without their manifest: reported, not a crash
    assert main(args) == 1
    found = [p for part in json.loads(capsys.readouterr().out)["partitions"] for p in part["problems"]]
    assert [p["kind"] for p in found if p["object"] == str(manifests[1].relative_to(tmp_path / "remote"))] == \
        ["missing_object"], found


def _dump_understands_the_manifest_format(manifest_path: Path, config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = SegmentManifest.decode(manifest_path.read_bytes())
    stored_log = manifest_path.with_name(manifest_path.name.replace(".rsm-manifest", ".log"))
    packed = manifest_path.with_name(manifest_path.name.replace(".rsm-manifest", ".indexes"))
    start = int(manifest_path.name.split("-", 1)[0])

    assert main(["dump", "--json", str(manifest_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["type"] == "segment-manifest"
    assert doc["items"][0]["transforms"] == "zstd,aes-256-gcm" and doc["items"][0]["key_id"] == "k1"
    assert sum(1 for item in doc["items"] if "chunk" in item) == manifest.chunk_count

    assert main(["dump", "--json", "--config", str(config), str(stored_log)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["problems"] == [] and doc["items"][0]["baseOffset"] == start
    assert all(item["isvalid"] for item in doc["items"])
    assert sum(item["size"] for item in doc["items"]) == manifest.size

    assert main(["dump", "--json", str(stored_log)]) == 1  # no ring given: the key id is named
    assert "key pair 'k1' is needed" in capsys.readouterr().out

    assert main(["dump", "--json", "--config", str(config), str(packed)]) == 0
    doc = json.loads(capsys.readouterr().out)
    files = [item["file"] for item in doc["items"] if "file" in item]
    assert f"{start:020d}.index" in files and f"{start:020d}.timeindex" in files
    assert any(item.get("offset", -1) > start for item in doc["items"] if "position" in item)


@pytest.mark.parametrize("plaintext_on_disk", [False, True])
@pytest.mark.parametrize("reader_encrypts", [True, False])  # a ring kept with encryption off still decrypts
def test_the_plaintext_of_encrypted_segments_stays_off_the_local_disk_unless_allowed(
    pairs: list[KeyPairPaths], tmp_path: Path, plaintext_on_disk: bool, reader_encrypts: bool
) -> None:
    from local import LogConfig, LogManager
    from local.records import MemoryRecords, SimpleRecord

    props = local_tier_props(tmp_path, **{f"rsm.config.{k}": v for k, v in combo_config("aes", pairs, 64 * 1024).items()},
                             **{"remote.log.segment.cache.plaintext.disk.enable": str(plaintext_on_disk).lower()})
    marker = b"plaintext-marker-%06d"
    now = int(time.time() * 1000)
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
        for first in range(0, 6_000, 100):
            log.append(MemoryRecords.build([SimpleRecord(now, None, marker % i * 8) for i in range(first, first + 100)]))
        expected = read_all_values(log)
        assert manager.remote_tier.run_once(manager.all_logs()).segments_copied >= 1  # type: ignore[union-attr]
        assert manager.cleanup_logs() > 0
    reader = props if reader_encrypts else {**props, "rsm.config.encryption.enabled": "false"}
    with LogManager(LogConfig.from_properties(reader), start_scheduler=False) as manager:
        log = manager.get_log("t", 0)
        assert log is not None and log.local_log_start_offset > 0
        assert read_all_values(log) == expected  # served from the remote tier, through the segment cache
        assert manager.remote_tier.chunk_cache.fetches > 0  # type: ignore[union-attr]
    cache_dir = tmp_path / "data" / "remote-log-segment-cache"
    on_disk = b"".join(p.read_bytes() for p in cache_dir.rglob("*") if p.is_file()) if cache_dir.exists() else b""
    assert (marker % 0 in on_disk) is plaintext_on_disk
