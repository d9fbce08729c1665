"""The composition root of the remote tier: the one place that builds its object graph from broker configuration.

::

    LogConfig ─┬─ build_remote_storage_manager ──────► RemoteStorageManager   (remote.log.storage.manager.class.name,
               │                                                              rsm.config.*)
               ├─ build_remote_log_metadata_manager ─► RemoteLogMetadataManager (remote.log.metadata.manager.class.name,
               │                                                              rlmm.config.*)
               ├─ the index cache and the remote segment cache (remote.log.index.file.cache.*, remote.log.segment.cache.*)
               └─ build_remote_tier ─────────────────► RemoteLogManager (what local.remote.RemoteTier asks for)

    open_log_manager(config) = LogManager(config, remote_tier_factory=build_remote_tier)

``local`` never imports ``tiered``. A ``LogManager`` is handed its remote tier: built (``remote_tier=``), or as a
factory it calls once it knows where the caches go (``remote_tier_factory=``; a read-only manager puts them in its
scratch dir). Given neither, ``LogManager(config)`` with ``remote.log.storage.system.enable=true`` finds
:func:`build_remote_tier` through the ``local.remote_tier`` entry point that this package declares (see
:mod:`local.remote`), so the library keeps DESIGN's ``LogManager(config)`` promise.

The RemoteStorageManager is a short backend name (``local``, ``s3``, ``fsspec``) or the dotted path of any
:class:`tiered.RemoteStorageManager` subclass (``mypackage.module.MyStorage``). Remote segment metadata lives where
``remote.log.metadata.manager.class.name`` says (:mod:`tiered.rlmm`): unset, it is ``bucket`` (beside the
segments) for an object-store backend and ``local`` (``rlmm.config.dir``, by default ``remote-log-metadata/`` in the
first data dir) for any other plugin.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiered import rlmm
from tiered.errors import PluginConfigError
from tiered.rsm import RemoteStorageManager

if TYPE_CHECKING:
    from local.config import LogConfig
    from local.manager import LogManager
    from tiered.cache.chunk_cache import ChunkCache
    from tiered.remote_log_manager import RemoteLogManager
    from tiered.rlmm import RemoteLogMetadataManager

logger = logging.getLogger(__name__)

RLMM_KEY = "remote.log.metadata.manager.class.name"


def build_remote_storage_manager(config: LogConfig) -> RemoteStorageManager:
    """The configured plugin, instantiated and configured with ``rsm.config.*`` (prefix stripped)."""
    from tiered.backends import load_rsm

    return load_rsm(config.remote_log_storage_manager_class_name, config.rsm_config)


def build_remote_log_metadata_manager(
    config: LogConfig, rsm: RemoteStorageManager, *, read_only: bool = False
) -> RemoteLogMetadataManager:
    """Where ``rsm``'s segments' metadata lives (see the module docstring). ``read_only``: a ``local`` store creates
    nothing (a reader that must not write into the data dirs)."""
    from tiered.backends.base import ObjectStoreRemoteStorageManager

    name = (getattr(config, "remote_log_metadata_manager_class_name", "") or "").strip()
    is_object_store = isinstance(rsm, ObjectStoreRemoteStorageManager)
    if not name:
        name = rlmm.BUCKET if is_object_store else rlmm.LOCAL
        logger.debug("%s unset: remote log metadata in the %s store for %s", RLMM_KEY, name, type(rsm).__qualname__)
    if name == rlmm.BUCKET:
        if not is_object_store:
            raise PluginConfigError(
                f"Invalid value {name} for configuration {RLMM_KEY}: the bucket store keeps metadata in the remote "
                f"storage manager's object store, and {_class_name(rsm)} is not an object-store backend (a subclass "
                f"of tiered.backends.base.ObjectStoreRemoteStorageManager). Use {RLMM_KEY}={rlmm.LOCAL} (the default "
                "for such plugins: metadata in rlmm.config.dir on this machine)", key=RLMM_KEY, value=name)
        from tiered.metadata import RemoteLogMetadataStore

        return RemoteLogMetadataStore.in_bucket(rsm)  # type: ignore[arg-type]  # isinstance checked above
    if name == rlmm.LOCAL:
        return _local_metadata_manager(config, read_only=read_only)
    return _load_metadata_manager_class(name, config.rlmm_config)


def _local_metadata_manager(config: LogConfig, *, read_only: bool) -> RemoteLogMetadataManager:
    from tiered.metadata import RemoteLogMetadataStore

    configured = (config.rlmm_config.get("dir") or "").strip()
    directory = Path(configured) if configured else Path(config.log_dirs[0]) / rlmm.DEFAULT_LOCAL_DIR_NAME
    try:
        return RemoteLogMetadataStore.in_directory(directory, read_only=read_only)
    except OSError as exc:
        raise PluginConfigError(
            f"Invalid value {directory} for configuration rlmm.config.dir: cannot create the remote log metadata "
            f"directory: {exc.strerror or exc}", key="rlmm.config.dir", value=str(directory)) from None


def _load_metadata_manager_class(path: str, props: dict[str, str]) -> RemoteLogMetadataManager:
    module_name, _, attr = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr) if module_name else None
    except (ImportError, AttributeError) as exc:
        raise PluginConfigError(f"Invalid value {path} for configuration {RLMM_KEY}: cannot load it: {exc}",
                                key=RLMM_KEY, value=path) from exc
    if not isinstance(cls, type):
        raise PluginConfigError(f"Invalid value {path} for configuration {RLMM_KEY}: expected {rlmm.BUCKET}, "
                                f"{rlmm.LOCAL} or the dotted path of a class (package.module.Class)",
                                key=RLMM_KEY, value=path)
    manager = cls()
    if not isinstance(manager, rlmm.RemoteLogMetadataManager):
        raise PluginConfigError(f"Invalid value {path} for configuration {RLMM_KEY}: {path} does not implement "
                                "tiered.rlmm.RemoteLogMetadataManager", key=RLMM_KEY, value=path)
    configure = getattr(manager, "configure", None)
    if configure is not None:
        configure(dict(props))
    return manager


def _class_name(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def build_chunk_cache(config: LogConfig, cache_dir: Path, registry: Any = None) -> ChunkCache | None:
    """The remote segment cache in ``cache_dir``; None (with a warning) when ``diskcache`` is not installed.
    ``registry``: where its metrics go (the remote tier's, which ``tiered run`` serves)."""
    try:
        from tiered.cache.chunk_cache import ChunkCache
    except ImportError as exc:  # diskcache is in the s3 extra
        logger.warning("remote segment cache disabled (%s): pip install 'tiered[s3]' to enable it", exc)
        return None
    return ChunkCache(
        cache_dir,
        chunk_size=config.remote_log_segment_cache_chunk_size_bytes,
        size_limit=config.remote_log_segment_cache_total_size_bytes,
        prefetch_chunks=config.remote_log_segment_cache_prefetch_chunks,
        registry=registry,
        disk=not _plaintext_kept_off_disk(config),
    )


def _plaintext_kept_off_disk(config: LogConfig) -> bool:
    """Whether the segment cache stays in memory: the plugin can read encrypted segments (the cache holds their
    plaintext) and ``remote.log.segment.cache.plaintext.disk.enable`` does not allow plaintext on local disk.

    Reading is what counts, not writing: a key ring (or key provider) kept with ``encryption.enabled=false`` still
    decrypts the segments written while it was on."""
    rsm = config.rsm_config
    encrypts = str(rsm.get("encryption.enabled", "false")).strip().lower() == "true"
    decrypts = encrypts or bool(rsm.get("encryption.key.pairs")) or bool(rsm.get("encryption.key.provider.class"))
    return decrypts and not config.remote_log_segment_cache_plaintext_disk_enable


def build_remote_tier(
    config: LogConfig,
    cache_root: Path | None = None,
    *,
    index_cache_dir: Path | None = None,
    segment_cache_dir: Path | None = None,
) -> RemoteLogManager:
    """The remote tier of ``config``: plugin, metadata manager, caches and the RemoteLogManager over them.

    The caches live in the first data dir unless ``cache_root`` is given: a reader that must not write into the data
    dirs (a read-only manager's scratch dir, a Spark executor's own dir) passes it, and then a ``local`` metadata
    store is opened read-only too. A reader with no data dir (a Spark executor) names each cache's directory:
    ``index_cache_dir`` (holding ``remote-log-index-cache/``) and ``segment_cache_dir`` (the chunk cache, shareable
    by the processes of one machine). On any error, what was built is closed again."""
    from prometheus_client import CollectorRegistry

    from tiered.cache.index_cache import RemoteIndexCache
    from tiered.remote_log_manager import RemoteLogManager

    registry = CollectorRegistry()  # the remote tier's metrics and its caches' (what `tiered run` serves)
    rsm = build_remote_storage_manager(config)
    built: list[Any] = [rsm]
    try:
        metadata = build_remote_log_metadata_manager(config, rsm, read_only=cache_root is not None)
        built.append(metadata)
        log_dir = Path(config.log_dirs[0]) if cache_root is None else cache_root
        index_cache = RemoteIndexCache(
            index_cache_dir or log_dir, rsm.fetch_index, max_size_bytes=config.remote_log_index_file_cache_total_size_bytes,
            registry=registry,
        )
        built.append(index_cache)
        chunk_cache = build_chunk_cache(config, segment_cache_dir or _segment_cache_dir(config, cache_root, log_dir),
                                        registry)
        rlm = RemoteLogManager(
            rsm,
            metadata,
            index_cache,
            chunk_cache=chunk_cache,
            broker_id=config.broker_id,
            custom_metadata_max_bytes=config.remote_log_metadata_custom_metadata_max_bytes,
            copy_max_bytes_per_second=config.remote_log_manager_copy_max_bytes_per_second,
            fetch_max_bytes_per_second=config.remote_log_manager_fetch_max_bytes_per_second,
            copier_threads=config.remote_log_manager_copier_thread_pool_size,
            expiration_threads=config.remote_log_manager_expiration_thread_pool_size,
            task_interval_ms=config.remote_log_manager_task_interval_ms,
            checksum_chunk_bytes=_checksum_chunk_bytes(config, chunk_cache.chunk_size if chunk_cache is not None else None),
            registry=registry,
            log_dirs=[str(d) for d in config.log_dirs],
        )
    except BaseException:
        for part in reversed(built):
            _close_quietly(part)
        raise
    if cache_root is None:  # a reader (read-only manager, Spark) copies and deletes nothing: no copier process
        _maybe_copy_in_child_process(config, rsm, metadata, rlm)
        _maybe_keep_columnar_copies(config, rlm)
    return rlm


def _maybe_keep_columnar_copies(config: LogConfig, rlm: RemoteLogManager) -> None:
    """The copy tasks keep the columnar copies (tiered.columnar) where the config gives them a place; topics opt in
    with ``remote.log.columnar.enable``. Encrypted remote segments: refused (logged per topic that asks)."""
    from tiered.columnar.location import columnar_root, encrypted

    root = columnar_root(config)
    if root is None:
        return
    refusal = ("the remote segments are encrypted (rsm.config.encryption.enabled=true) and remote.log.columnar.enable"
               "=true would keep them in plaintext" if encrypted(config) else None)
    rlm.keep_columnar_copies(root, refusal)


def _segment_cache_dir(config: LogConfig, cache_root: Path | None, log_dir: Path) -> Path:
    """``remote.log.segment.cache.dir`` when set (not for a reader with its own cache root), else in ``log_dir``."""
    configured = (config.remote_log_segment_cache_dir or "").strip()
    if configured and cache_root is None:
        return Path(configured)
    return log_dir / "remote-log-segment-cache"


def _checksum_chunk_bytes(config: LogConfig, cache_chunk_bytes: int | None) -> int:
    """``rsm.config.checksum.chunk.bytes``, else a size that divides the segment cache's chunks (so a cache chunk is
    verified without fetching more than it asks for)."""
    from tiered.checksums import checksum_chunk_bytes, default_chunk_bytes

    return checksum_chunk_bytes(config.rsm_config) or default_chunk_bytes(cache_chunk_bytes)


def _maybe_copy_in_child_process(
    config: LogConfig, rsm: RemoteStorageManager, metadata: RemoteLogMetadataManager, rlm: RemoteLogManager
) -> None:
    """``remote.log.manager.copier.process.enable``: only for plugins whose storage another process sees (not an
    in-memory or in-process mocked store); see :mod:`tiered.copier_process`."""
    if not (config.remote_log_manager_copier_process_enable and getattr(rsm, "shared_across_processes", False)):
        return
    from tiered.metadata import RemoteLogMetadataStore

    copier = rlm.copy_in_child_process(config.remote_log_storage_manager_class_name, config.rsm_config)
    if isinstance(metadata, RemoteLogMetadataStore) and metadata.store is rsm:
        from tiered.copier_process import BatchCopier, ChildWritingStore

        # The bucket store: the metadata events of a copy (STARTED, FINISHED) are written by the child too, and the
        # copy task sends it several segments per request (events included).
        metadata.store = ChildWritingStore(rsm, copier)
        rlm.copy_in_batches(BatchCopier(copier, metadata, rsm))
        rlm.delete_in_child_process()  # and the deletes, each with its DELETE_SEGMENT_STARTED event


def _close_quietly(part: Any) -> None:
    try:
        part.close()
    except Exception:  # already failing: the first error is the one to report
        logger.debug("closing %r after a failed build", part, exc_info=True)


def open_log_manager(config: LogConfig, **kwargs: Any) -> LogManager:
    """``LogManager(config, **kwargs)`` with this package's remote tier when ``remote.log.storage.system.enable``
    is true (built by :func:`build_remote_tier` once the manager knows where its caches go)."""
    from local.manager import LogManager

    if config.remote_log_storage_system_enable and "remote_tier" not in kwargs:
        kwargs.setdefault("remote_tier_factory", build_remote_tier)
    return LogManager(config, **kwargs)


def remote_log_manager_of(manager: LogManager) -> RemoteLogManager | None:
    """``manager``'s remote tier as this package's RemoteLogManager (what the CLI drives: ``run_once``,
    ``copy_lag``...), None when it has none. ``TypeError`` for another implementation of ``local.remote.RemoteTier``."""
    from tiered.remote_log_manager import RemoteLogManager

    tier = manager.remote_tier
    if tier is None or isinstance(tier, RemoteLogManager):
        return tier
    raise TypeError(f"the log manager's remote tier is a {type(tier).__qualname__}, not tiered's RemoteLogManager")
