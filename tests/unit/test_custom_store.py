"""An object store of the user's own (``docs/examples/folder_store.py``: the five methods, nothing declared), plugged
by dotted path with ``remote.log.storage.manager.class.name=store``: the conformance suites pass over it, and the
``tiered`` CLI alone, in separate processes with the store's module on PYTHONPATH, produces, offloads, serves remote
offsets, verifies, rotates keys and attaches a second data dir, with compression and encryption on."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.formatutil import KeyPairPaths, combo_config, ring_config, write_key_pair
from tests.rsm_conformance import RSMConformance
from tests.rsm_conformance_manifest import ManifestConformance
from tiered.backends import load_rsm
from tiered.backends.composed import ObjectStoreRemoteStorageManager
from tiered.errors import ObjectExistsError, PluginConfigError, RemoteStorageError
from tiered.rsm import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
STORE_CLASS = "folder_store.FolderStore"
LINES = [f"value-{i:06d}-{'y' * 150}" for i in range(15_000)]  # ~2.5 MiB: three 1 MiB segments


@pytest.fixture(scope="module", autouse=True)
def example_on_path() -> Iterator[None]:
    sys.path.insert(0, str(EXAMPLES))
    yield
    sys.path.remove(str(EXAMPLES))


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> list[KeyPairPaths]:
    keys = tmp_path_factory.mktemp("keys")
    return [write_key_pair(keys, "k1"), write_key_pair(keys, "k2")]


def _store_rsm(root: Path, **extra: str) -> ObjectStoreRemoteStorageManager:
    rsm = load_rsm("store", {"store.class": STORE_CLASS, "store.root": str(root), **extra})
    assert isinstance(rsm, ObjectStoreRemoteStorageManager)
    return rsm


class _FolderStoreCases:
    """What differs for the example store: conditional creates emulated in this process, keys kept as paths."""

    @pytest.fixture
    def serializes_conditional_writes(self) -> bool:
        return True  # the claimants are threads of this process: the emulation's lock lets exactly one win

    def test_a_topic_of_the_longest_valid_name_is_stored_listed_and_found_again(
        self, rsm: ObjectStoreRemoteStorageManager, segment: tuple[LogSegmentData, bytes]
    ) -> None:
        """The example keeps each key as its path: a topic of 249 characters makes a component of 272, more than a
        file name holds (the bundled local-directory store shortens it, tiered.backends.long_names). The copy
        fails, saying so, and leaves nothing."""
        data, log = segment
        tip = TopicIdPartition(uuid.uuid4(), ("a.B-c_9" * 36)[:249], 3)
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), 0, 99, 0, 0, 0, len(log), {0: 0})
        with pytest.raises(RemoteStorageError, match="File name too long"):
            rsm.copy_log_segment_data(md, data)
        assert rsm.store.list_keys("") == []


class TestFolderStorePlain(_FolderStoreCases, RSMConformance):
    @pytest.fixture
    def rsm(self, tmp_path: Path) -> ObjectStoreRemoteStorageManager:
        return _store_rsm(tmp_path / "remote", prefix="tiered")


class TestFolderStoreZstdAes(_FolderStoreCases, ManifestConformance):
    @pytest.fixture
    def rsm(self, tmp_path: Path, pairs: list[KeyPairPaths]) -> ObjectStoreRemoteStorageManager:
        return _store_rsm(tmp_path / "remote", **combo_config("zstd+aes", pairs[:1], 256 * 1024 + 3))


def test_a_store_without_conditional_writes_gets_them_emulated_and_ownership_says_what_it_cannot_fence(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.formatutil import metadata
    from tiered.metadata import RemoteLogMetadataStore
    from tiered.ownership import OwnerRecord
    from tiered.store import put_if_absent

    rsm = _store_rsm(tmp_path / "remote")
    assert not rsm.store.capabilities.conditional_writes and not rsm.fetch_streams
    put_if_absent(rsm.store, "k", b"first")
    with pytest.raises(ObjectExistsError):
        put_if_absent(rsm.store, "k", b"second")
    assert rsm.store.get("k") == b"first"
    tip = metadata().topic_id_partition
    with caplog.at_level(logging.WARNING, logger="tiered.metadata"):
        RemoteLogMetadataStore.in_bucket(rsm).claim_ownership(tip, OwnerRecord(0, "a" * 32, ((0, 0),), 0))
    assert any("no atomic conditional writes" in r.getMessage() and "different machines" in r.getMessage()
               for r in caplog.records)
    # messages name a store by its class, not by an address ("<... object at 0x7f...>")
    assert repr(rsm.store) == f"{type(rsm.store).__module__}.{type(rsm.store).__qualname__}()"
    assert any(repr(rsm.store) in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("config", "message"), [
    ({}, "Missing required configuration rsm.config.store.class"),
    ({"store.class": "folder_store.Nope"}, "Invalid value folder_store.Nope for configuration rsm.config.store.class"),
    ({"store.class": "tiered.backends.composed.ObjectStoreRemoteStorageManager"}, "subclass of tiered.ObjectStore"),
])
def test_a_wrong_store_class_is_a_configuration_error_naming_the_key(config: dict[str, str], message: str) -> None:
    with pytest.raises(PluginConfigError, match=re.escape(message)):
        load_rsm("store", config)


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "tiered.cli", *args], input=stdin, capture_output=True, text=True,
                          timeout=300, env=env)


def _config(tmp_path: Path, name: str, data: str, rsm: dict[str, str]) -> str:
    props = {
        "log.dirs": str(tmp_path / data),
        "log.segment.bytes": "1048576",
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "store",
        **{f"rsm.config.{k}": v for k, v in rsm.items()},
    }
    path = tmp_path / name
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


def test_a_store_by_dotted_path_gets_the_format_verify_keys_and_attach_through_the_cli_alone(
    tmp_path: Path, pairs: list[KeyPairPaths]
) -> None:
    remote = tmp_path / "remote"
    tier = {"store.class": STORE_CLASS, "store.root": str(remote), "prefix": "t1",
            **combo_config("zstd+aes", pairs, 64 * 1024), **ring_config(pairs, "k1")}
    config = _config(tmp_path, "a.properties", "data", tier)
    produce = run_cli("--config", config, "produce", "-t", "t", "--topic-config", "remote.storage.enable=true",
                      "--topic-config", "local.retention.bytes=1048576", stdin="\n".join(LINES) + "\n")
    assert produce.returncode == 0, produce.stderr
    offload = run_cli("--config", config, "offload")
    assert offload.returncode == 0, offload.stderr
    assert "copied 2 segment(s)" in offload.stdout and "local retention deleted 1 segment(s)" in offload.stdout

    # The manifest layout in the user's folder, the metadata beside it (the bucket store), nothing in plain text.
    objects = sorted(p.relative_to(remote).as_posix() for p in remote.rglob("*") if p.is_file())
    assert len([o for o in objects if o.endswith(".rsm-manifest")]) == 2
    assert len([o for o in objects if "/__remote_log_metadata/" in o and not o.rsplit("/", 1)[1].startswith("owner-")]) == 4
    assert all(o.startswith("t1/t-") for o in objects)
    stored_log = next(p for p in remote.rglob("*.log"))
    assert b"value-000000" not in stored_log.read_bytes()
    assert not (tmp_path / "data" / "remote-log-metadata").exists()
    assert not (tmp_path / "data" / "t-0" / "00000000000000000000.log").exists()  # offset 0 is remote only

    first = run_cli("--config", config, "consume", "-t", "t", "--offset", "0", "--max-messages", "2", "--json")
    assert first.returncode == 0, first.stderr
    assert [json.loads(line)["value"] for line in first.stdout.splitlines()] == LINES[:2]

    verify = run_cli("--config", config, "verify", "--remote")
    assert verify.returncode == 0, verify.stdout + verify.stderr

    rotate = run_cli("--config", config, "keys", "rotate", "--new-key-pair-id", "k2")
    assert rotate.returncode == 0, rotate.stderr
    assert "re-wrapped 2 segment data key(s) under key pair k2" in rotate.stdout
    only_k2 = {**{k: v for k, v in tier.items() if ".k1." not in k}, **ring_config(pairs[1:], "k2")}  # k1 left the ring
    b_config = _config(tmp_path, "b.properties", "data-b", only_k2)
    attach = run_cli("--config", b_config, "attach", "-t", "t")
    assert attach.returncode == 0, attach.stderr
    adopted = run_cli("--config", b_config, "consume", "-t", "t")
    assert adopted.returncode == 0, adopted.stderr
    values = adopted.stdout.splitlines()  # the two remote segments, read through k2 alone
    assert len(values) > len(LINES) // 3 and values == LINES[: len(values)]


def test_the_guide_shows_the_tested_store_unchanged() -> None:
    guide = (EXAMPLES.parent / "custom-rsm.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", guide, flags=re.DOTALL)
    assert (EXAMPLES / "folder_store.py").read_text() in blocks
