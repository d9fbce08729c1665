"""``tiered keys rotate``: data keys re-wrapped under a new key pair by rewriting manifests only."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.formatutil import (
    KeyPairPaths,
    combo_config,
    metadata,
    ring_config,
    segment_files,
    text_like,
    write_key_pair,
)
from tiered.backends import load_rsm
from tiered.backends.composed import MANIFEST_SUFFIX, ObjectStoreRemoteStorageManager
from tiered.cli import main
from tiered.errors import EncryptionKeyNotFoundError
from tiered.layout import segment_key


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> list[KeyPairPaths]:
    d = tmp_path_factory.mktemp("keys")
    return [write_key_pair(d, "old"), write_key_pair(d, "new")]


def _config_file(tmp_path: Path, rsm_config: dict[str, str]) -> Path:
    lines = [f"log.dirs={tmp_path / 'data'}", "remote.log.storage.system.enable=true",
             "remote.log.storage.manager.class.name=local", *(f"rsm.config.{k}={v}" for k, v in rsm_config.items())]
    path = tmp_path / "server.properties"
    path.write_text("\n".join(lines) + "\n")
    return path


def _read_all(rsm: ObjectStoreRemoteStorageManager, md) -> bytes:  # type: ignore[no-untyped-def]
    with rsm.fetch_log_segment(md, 0) as s:
        return s.read()


def test_rotate_rewrites_only_manifests_and_the_old_key_can_then_leave_the_ring(
    pairs: list[KeyPairPaths], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    remote = str(tmp_path / "remote")
    config = {"dir": remote, **combo_config("zstd+aes", pairs, 1024)}  # active: old
    rsm: ObjectStoreRemoteStorageManager = load_rsm("local", config)  # type: ignore[assignment]
    logs = [text_like(3000 + i * 1000) for i in range(3)]
    mds = [metadata(100 * i, 100 * i + 99) for i in range(3)]
    for i, (md, log) in enumerate(zip(mds, logs)):
        rsm.copy_log_segment_data(md, segment_files(tmp_path / f"s{i}", log))
    plain_md = metadata(1000, 1099)
    load_rsm("local", {"dir": remote}).copy_log_segment_data(plain_md, segment_files(tmp_path / "p", b"plain" * 100))
    data_before = {p: p.read_bytes() for p in Path(remote).rglob("*") if p.is_file() and not p.name.endswith(MANIFEST_SUFFIX)}
    manifests_before = {p: p.read_bytes() for p in Path(remote).rglob(f"*{MANIFEST_SUFFIX}")}
    assert len(manifests_before) == 3

    cfg = _config_file(tmp_path, config)
    assert main(["keys", "rotate", "--config", str(cfg), "--new-key-pair-id", "new"]) == 0
    out = capsys.readouterr()
    assert "re-wrapped 3 segment data key(s) under key pair new; 0 already under it" in out.out
    assert "set it to new" in out.err
    assert {p: p.read_bytes() for p in Path(remote).rglob("*") if p.is_file() and not p.name.endswith(MANIFEST_SUFFIX)} == data_before
    assert all(p.read_bytes() != before for p, before in manifests_before.items())

    only_new: ObjectStoreRemoteStorageManager = load_rsm("local", {"dir": remote, **ring_config([pairs[1]], "new")})  # type: ignore[assignment]
    for md, log in zip(mds, logs):
        manifest = only_new.manifest(md)
        assert manifest is not None and manifest.envelope is not None and manifest.envelope.key_id == "new"
        assert _read_all(only_new, md) == log
    assert _read_all(only_new, plain_md) == b"plain" * 100
    only_old = load_rsm("local", {"dir": remote, **ring_config([pairs[0]], "old")})
    with pytest.raises(EncryptionKeyNotFoundError, match="'new'"):
        _read_all(only_old, mds[0])  # type: ignore[arg-type]

    # a rerun changes nothing
    assert main(["keys", "rotate", "--config", str(cfg), "--new-key-pair-id", "new"]) == 0
    assert "re-wrapped 0 segment data key(s) under key pair new; 3 already under it" in capsys.readouterr().out


def test_rotate_to_a_key_pair_not_in_the_ring_is_a_usage_error(pairs: list[KeyPairPaths], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _config_file(tmp_path, {"dir": str(tmp_path / "r"), **ring_config(pairs, "old")})
    assert main(["keys", "rotate", "--config", str(cfg), "--new-key-pair-id", "k9"]) == 2
    err = capsys.readouterr().err
    assert "--new-key-pair-id k9: key pair 'k9' is not in the key ring" in err and "to wrap data keys under it" in err


def test_a_segment_under_a_key_missing_from_the_ring_is_named_and_fails_the_run(
    pairs: list[KeyPairPaths], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    remote = str(tmp_path / "remote")
    rsm = load_rsm("local", {"dir": remote, **combo_config("aes", pairs, 1024)})
    md = metadata()
    rsm.copy_log_segment_data(md, segment_files(tmp_path / "s", text_like(2000)))
    before = (Path(remote) / segment_key("", md, MANIFEST_SUFFIX)).read_bytes()
    cfg = _config_file(tmp_path, {"dir": remote, **ring_config([pairs[1]], "new")})
    assert main(["keys", "rotate", "--config", str(cfg), "--new-key-pair-id", "new"]) == 1
    err = capsys.readouterr().err
    assert "rsm-manifest: key pair 'old' is not in the key ring" in err
    assert (Path(remote) / segment_key("", md, MANIFEST_SUFFIX)).read_bytes() == before


def test_dry_run_changes_nothing(pairs: list[KeyPairPaths], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    remote = str(tmp_path / "remote")
    config = {"dir": remote, **combo_config("aes", pairs, 1024)}
    md = metadata()
    load_rsm("local", config).copy_log_segment_data(md, segment_files(tmp_path / "s", text_like(2000)))
    path = Path(remote) / segment_key("", md, MANIFEST_SUFFIX)
    before = path.read_bytes()
    assert main(["keys", "rotate", "--dry-run", "--config", str(_config_file(tmp_path, config)), "--new-key-pair-id", "new"]) == 0
    assert "would re-wrap 1 segment data key(s)" in capsys.readouterr().out
    assert path.read_bytes() == before


def test_a_segment_deleted_while_its_manifest_is_rewrapped_is_not_brought_back(
    pairs: list[KeyPairPaths], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention deleting a segment between rotate's read of its manifest and its write: the write put the
    manifest back alone, and nothing would ever delete it (found by hZg)."""
    import tiered.backends

    remote = tmp_path / "remote"
    config = {"dir": str(remote), **combo_config("zstd+aes", pairs, 1024)}
    rsm: ObjectStoreRemoteStorageManager = load_rsm("local", config)  # type: ignore[assignment]
    md = metadata(100, 199)
    rsm.copy_log_segment_data(md, segment_files(tmp_path / "s", text_like(5000)))
    real_load = tiered.backends.load_rsm

    def racing_load(*args, **kwargs):  # type: ignore[no-untyped-def]
        loaded = real_load(*args, **kwargs)
        get = loaded.store.get

        def get_then_delete(key: str) -> bytes:
            data = get(key)
            if key.endswith(MANIFEST_SUFFIX):
                rsm.delete_log_segment_data(md)  # retention, right after rotate read the manifest
            return data

        monkeypatch.setattr(loaded.store, "get", get_then_delete)
        return loaded

    monkeypatch.setattr(tiered.backends, "load_rsm", racing_load)
    assert main(["keys", "rotate", "--config", str(_config_file(tmp_path, config)), "--new-key-pair-id", "new"]) == 0
    capsys.readouterr()
    assert [p.name for p in remote.rglob("*") if p.is_file() and not p.name.endswith(".tiered-name")] == []
