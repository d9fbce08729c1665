"""The composition root (tiered.composition) and how a LogManager gets its remote tier (local.remote).

Which RemoteLogMetadataManager each plugin gets, the local-directory metadata store, the errors that name what to
do, and LogManager(config) finding tiered's factory by its entry point, not by a name local makes up."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import pytest

import local.remote
from local import LogConfig, LogManager
from local.errors import ConfigError
from tests.logutil import local_tier_props
from tiered import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageManager,
)
from tiered import TopicIdPartition as TIP
from tiered.checksums import SegmentChecksums
from tiered.composition import build_remote_log_metadata_manager, build_remote_tier, open_log_manager
from tiered.metadata import DirectoryObjects, RemoteLogMetadataStore
from tiered.remote_log_manager import RemoteLogManager
from tiered.rlmm import RemoteLogMetadataManager
from tiered.rsm import RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState

S = RemoteLogSegmentState


class NotAnObjectStore(RemoteStorageManager):
    """A plugin with no object API (never asked to move bytes here)."""

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> IO[bytes]:
        raise NotImplementedError

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> bytes | None:
        raise NotImplementedError

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> IO[bytes]:
        raise NotImplementedError

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        raise NotImplementedError


class ConfiguredMetadataManager(RemoteLogMetadataStore):
    """A user's RemoteLogMetadataManager named by dotted path: configured with the rlmm.config.* keys."""

    def __init__(self) -> None:
        self.props: Mapping[str, str] = {}

    def configure(self, props: Mapping[str, str]) -> None:
        self.props = props
        super().__init__(DirectoryObjects(Path(props["dir"])))


def _config(tmp_path: Path, **extra: str) -> LogConfig:
    return LogConfig.from_properties(local_tier_props(tmp_path, **extra))


def _custom(tmp_path: Path, **extra: str) -> LogConfig:
    return _config(tmp_path, **{"remote.log.storage.manager.class.name": f"{__name__}.NotAnObjectStore", **extra})


def test_an_object_store_backend_keeps_its_metadata_in_its_own_bucket(tmp_path: Path) -> None:
    from tiered.copier_process import ChildWritingStore

    rlm = build_remote_tier(_config(tmp_path, **{"remote.log.manager.copier.process.enable": "false"}))
    try:
        assert isinstance(rlm.metadata, RemoteLogMetadataStore) and rlm.metadata.store is rlm.rsm.object_store
        assert not (tmp_path / "data" / "remote-log-metadata").exists()
    finally:
        rlm.close()
    rlm = build_remote_tier(_config(tmp_path))  # copies in a child process: the child writes the copy's events too
    try:
        assert isinstance(rlm.metadata, RemoteLogMetadataStore) and isinstance(rlm.metadata.store, ChildWritingStore)
    finally:
        rlm.close()
    # a reader's remote tier (read-only commands, Spark) copies nothing: no copier process, no scratch dir for it
    rlm = build_remote_tier(_config(tmp_path), cache_root=tmp_path / "reader")
    try:
        assert rlm.metadata.store is rlm.rsm.object_store  # type: ignore[attr-defined]
        assert rlm.process_copier is None
    finally:
        rlm.close()


def test_any_other_plugin_gets_the_local_directory_store_in_the_first_data_dir(tmp_path: Path) -> None:
    config = _custom(tmp_path)
    manager = build_remote_log_metadata_manager(config, NotAnObjectStore())
    assert isinstance(manager, RemoteLogMetadataManager)
    assert isinstance(manager, RemoteLogMetadataStore) and isinstance(manager.store, DirectoryObjects)
    assert manager.store.root == tmp_path / "data" / "remote-log-metadata"
    assert manager.store.root.is_dir()
    elsewhere = build_remote_log_metadata_manager(_custom(tmp_path, **{"rlmm.config.dir": str(tmp_path / "md")}),
                                                  NotAnObjectStore())
    assert isinstance(elsewhere, RemoteLogMetadataStore) and elsewhere.store.root == tmp_path / "md"  # type: ignore[attr-defined]


def test_the_bucket_store_for_a_plugin_without_a_bucket_is_a_config_error_naming_the_way_out(tmp_path: Path) -> None:
    config = _custom(tmp_path, **{"remote.log.metadata.manager.class.name": "bucket"})
    with pytest.raises(ConfigError) as info:
        build_remote_log_metadata_manager(config, NotAnObjectStore())
    message = str(info.value)
    assert "remote.log.metadata.manager.class.name" in message and "NotAnObjectStore" in message
    assert "remote.log.metadata.manager.class.name=local" in message


def test_a_metadata_manager_class_by_dotted_path_is_built_and_configured(tmp_path: Path) -> None:
    config = _custom(tmp_path, **{"remote.log.metadata.manager.class.name": f"{__name__}.ConfiguredMetadataManager",
                                  "rlmm.config.dir": str(tmp_path / "md")})
    manager = build_remote_log_metadata_manager(config, NotAnObjectStore())
    assert isinstance(manager, ConfiguredMetadataManager) and manager.props == {"dir": str(tmp_path / "md")}
    for bad, why in [(f"{__name__}.NoSuchClass", "cannot load"), ("nodots", "dotted path"),
                     (f"{__name__}.NotAnObjectStore", "does not implement")]:
        with pytest.raises(ConfigError, match=why):
            build_remote_log_metadata_manager(
                _custom(tmp_path, **{"remote.log.metadata.manager.class.name": bad}), NotAnObjectStore())


def _md(tip: TIP) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), 0, 99, 1, 0, 1, 1000, {0: 0})


def test_the_local_directory_store_survives_a_restart_with_states_and_checksums(tmp_path: Path) -> None:
    tip = TIP(uuid.uuid4(), "t", 0)
    store = RemoteLogMetadataStore.in_directory(tmp_path / "md")
    md = _md(tip)
    store.add_remote_log_segment_metadata(md)
    sums = SegmentChecksums(1024, {})
    store.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 2, None, S.COPY_SEGMENT_FINISHED, 0), sums)
    again = RemoteLogMetadataStore.in_directory(tmp_path / "md", read_only=True)
    found = again.remote_log_segment_metadata(tip, 50, 0)
    assert found is not None and found.remote_log_segment_id == md.remote_log_segment_id
    assert found.state is S.COPY_SEGMENT_FINISHED and again.segment_checksums(found) == sums
    with pytest.raises(PermissionError):
        again.add_remote_log_segment_metadata(_md(tip))


def test_a_read_only_reader_creates_no_metadata_dir_in_the_data_dir(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    with open_log_manager(_custom(tmp_path), read_only=True, start_scheduler=False) as manager:
        assert manager.remote_tier is not None
        assert manager.get_log("t", 0) is None
    assert list((tmp_path / "data").iterdir()) == []


@pytest.fixture
def no_installed_tier(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(local.remote, "_installed_factories", lambda: ())
    yield


def test_a_log_manager_with_no_remote_tier_installed_says_what_to_do_and_releases_its_dirs(
    tmp_path: Path, no_installed_tier: None
) -> None:
    config = _config(tmp_path)
    with pytest.raises(ConfigError) as info:
        LogManager(config, start_scheduler=False)
    assert "no remote tier is installed" in str(info.value) and "tiered.open_log_manager(config)" in str(info.value)
    with LogManager(config, start_scheduler=False, remote_tier_factory=build_remote_tier) as manager:  # not locked
        assert isinstance(manager.remote_tier, RemoteLogManager)
    with open_log_manager(config, start_scheduler=False) as manager:
        assert isinstance(manager.remote_tier, RemoteLogManager)


def test_remote_log_tier_factory_names_the_factory_explicitly(tmp_path: Path, no_installed_tier: None) -> None:
    built: list[Any] = []

    def factory(config: LogConfig, cache_root: Path | None = None) -> RemoteLogManager:
        built.append(cache_root)
        return build_remote_tier(config, cache_root)

    globals()["_test_factory"] = factory
    config = _config(tmp_path, **{"remote.log.tier.factory": f"{__name__}:_test_factory"})
    with LogManager(config, start_scheduler=False) as manager:
        assert isinstance(manager.remote_tier, RemoteLogManager)
    assert built == [None]
    for bad in ("tiered.composition.build_remote_tier", f"{__name__}:nothing_here"):
        with pytest.raises(ConfigError, match=r"remote\.log\.tier\.factory"):
            LogManager(_config(tmp_path, **{"remote.log.tier.factory": bad}), start_scheduler=False)


def test_several_installed_tiers_must_be_chosen_between(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib.metadata import EntryPoint

    two = (EntryPoint("a", "a.mod:build", local.remote.ENTRY_POINT_GROUP),
           EntryPoint("b", "b.mod:build", local.remote.ENTRY_POINT_GROUP))
    monkeypatch.setattr(local.remote, "_installed_factories", lambda: two)
    with pytest.raises(ConfigError, match=r"several remote tiers .*remote.log.tier.factory"):
        LogManager(_config(tmp_path), start_scheduler=False)


def test_tiered_declares_its_composition_root_as_the_installed_remote_tier() -> None:
    """What ``LogManager(config)`` relies on (pyproject.toml's entry point, in the installed package metadata)."""
    local.remote._installed_factories.cache_clear()
    [entry] = local.remote._installed_factories()
    assert entry.value == "tiered.composition:build_remote_tier" and entry.load() is build_remote_tier


def _produce_segments(log: Any, n: int = 3000) -> None:
    import time

    from local.records import MemoryRecords, SimpleRecord

    now = int(time.time() * 1000)
    for first in range(0, n, 100):
        log.append(MemoryRecords.build([SimpleRecord(now, b"k%d" % i, (b"%08d" % i) * 125)
                                        for i in range(first, first + 100)]))


def test_an_unset_chunk_size_is_fitted_to_the_segment_caches_chunk(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import json

    from tiered.composition import rsm_config_of

    fitted = _config(tmp_path, **{"remote.log.segment.cache.chunk.size.bytes": str(256 * 1024),
                                  "rsm.config.compression.enabled": "true"})
    assert rsm_config_of(fitted)["chunk.size"] == str(256 * 1024)
    assert "chunk.size" not in rsm_config_of(_config(tmp_path))  # 4 MiB cache chunks: the 4 MiB default fits
    assert "chunk.size" not in rsm_config_of(_custom(tmp_path, **{"remote.log.segment.cache.chunk.size.bytes": "5000"}))
    explicit = _config(tmp_path, **{"remote.log.segment.cache.chunk.size.bytes": str(256 * 1024),
                                    "rsm.config.chunk.size": str(100 * 1024)})
    with caplog.at_level("WARNING", logger="tiered.composition"):
        assert rsm_config_of(explicit)["chunk.size"] == str(100 * 1024)  # kept, and a warning says what it costs
    assert "does not divide remote.log.segment.cache.chunk.size.bytes=262144" in caplog.text
    # What a copy stores: 256 KiB chunks, the cache's, recorded in the segment's manifest.
    with open_log_manager(fitted, start_scheduler=False) as manager:
        rlm = manager.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        log = manager.get_or_create_log("t", 0, {"remote.storage.enable": "true"})
        _produce_segments(log)
        assert rlm.run_once(manager.all_logs()).segments_copied >= 2
    manifests = list((tmp_path / "remote").rglob("*.rsm-manifest"))
    assert manifests and {json.loads(p.read_text())["log"]["chunk_size"] for p in manifests} == {256 * 1024}


def _open_files_under(root: Path) -> list[str]:
    from tests.logutil import held_files

    return held_files(lambda target: target.startswith(str(root)))


def test_a_log_manager_with_the_remote_tier_leaves_no_thread_and_no_open_file_when_closed(tmp_path: Path) -> None:
    """Everything the remote tier starts (the task pools, the copier process, the index cache's cleaner, the chunk
    decoders, the chunk cache's writer) is stopped by close(), and every file it opened is closed."""
    import threading

    before = set(threading.enumerate())
    config = _config(tmp_path, **{"rsm.config.compression.enabled": "true", "rsm.config.chunk.size": "65536",
                                  "remote.log.manager.task.interval.ms": "60000"})
    manager = open_log_manager(config)
    rlm = manager.remote_tier
    assert isinstance(rlm, RemoteLogManager) and rlm.tasks_running and rlm.process_copier is not None
    log = manager.get_or_create_log("t", 0, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
    _produce_segments(log)
    assert rlm.run_once(manager.all_logs()).segments_copied >= 2
    manager.cleanup_logs()  # local retention: the copied segments are now read from the remote tier
    assert log.local_log_start_offset > 0
    info = log.read(0, 1024 * 1024)  # several stored chunks: decoded ahead on the plugin's decoders
    assert next(iter(info.records.batches())).base_offset == 0
    assert _open_files_under(tmp_path)
    manager.close()
    assert _open_files_under(tmp_path) == []
    assert [t.name for t in set(threading.enumerate()) - before if t.is_alive()] == []
