"""The composition root of the remote tier: the one place that builds its object graph from broker configuration.

::

    LogConfig ─┬─ build_remote_storage_manager ──────► RemoteStorageManager   (remote.log.storage.manager.class.name,
               │                                                              rsm.config.*)
               ├─ build_remote_log_metadata_manager ─► RemoteLogMetadataManager (remote.log.metadata.manager.class.name,
               │                                                              rlmm.config.*)
               ├─ the chunk cache (remote.log.segment.cache.*) and the copier process (remote.log.manager.copier.*)
               └─ build_remote_tier ─────────────────► RemoteLogManager (what local.remote.RemoteTier asks for)
                    └─ assemble_remote_log_manager: the checksum verifier, the index cache (remote.log.index.file.
                       cache.*), the segment cache, the ownership guard, the reader and the quotas, each built once
                       here and handed to what uses it; the RemoteLogManager closes them all

    open_log_manager(config) = LogManager(config, remote_tier_factory=build_remote_tier)

``local`` never imports ``tiered``. A ``LogManager`` is handed its remote tier: built (``remote_tier=``), or as a
factory it calls once it knows where the caches go (``remote_tier_factory=``; a read-only manager puts them in its
scratch dir). Given neither, ``LogManager(config)`` with ``remote.log.storage.system.enable=true`` finds
:func:`build_remote_tier` through the ``local.remote_tier`` entry point that this package declares (see
:mod:`local.remote`), so ``LogManager(config)`` alone gets the remote tier its configuration asks for.

The RemoteStorageManager is a short backend name (``local``, ``s3``, ``fsspec``) or the dotted path of any
:class:`tiered.RemoteStorageManager` subclass (``mypackage.module.MyStorage``). Remote segment metadata lives where
``remote.log.metadata.manager.class.name`` says (:mod:`tiered.rlmm`): unset, it is ``bucket`` (beside the
segments) for an object-store backend and ``local`` (``rlmm.config.dir``, by default ``remote-log-metadata/`` in the
first data dir) for any other plugin.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from local.scheduler import SYSTEM_TIME, Time
from tiered import rlmm
from tiered.errors import PluginConfigError
from tiered.rsm import RemoteStorageManager

if TYPE_CHECKING:
    from local.config import LogConfig
    from local.log import Log
    from local.manager import LogManager
    from tiered.cache.chunk_cache import ChunkCache
    from tiered.copier_process import ProcessCopier
    from tiered.remote_log_manager import RemoteLogManager
    from tiered.rlm_copy import CopyBatch
    from tiered.rlmm import RemoteLogMetadataManager

logger = logging.getLogger(__name__)

RLMM_KEY = "remote.log.metadata.manager.class.name"


def build_remote_storage_manager(config: LogConfig) -> RemoteStorageManager:
    """The configured plugin, instantiated and configured with ``rsm.config.*`` (prefix stripped; see
    :func:`rsm_config_of`)."""
    from tiered.backends import load_rsm

    return load_rsm(config.remote_log_storage_manager_class_name, rsm_config_of(config))


def rsm_config_of(config: LogConfig) -> dict[str, str]:
    """``rsm.config.*`` (prefix stripped) as the plugin and its copier process are configured with.

    For the project's own backends an unset ``chunk.size`` is fitted to the segment cache's chunk
    (``remote.log.segment.cache.chunk.size.bytes``), as the checksum chunk is: the default 4 MiB when the cache's
    chunk is a multiple of it, else the cache's chunk size. A cache chunk is then made of whole stored chunks, so
    filling it decodes nothing it does not keep. A ``chunk.size`` set explicitly is kept (segments already stored
    keep theirs either way: the manifest records it); when the cache's chunk is not a multiple of it, a warning
    says that each cache fill decodes up to two stored chunks more than it keeps. A plugin of another kind gets
    the settings as they are."""
    from tiered.backends import BACKENDS
    from tiered.format.settings import DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE

    props = dict(config.rsm_config)
    name = config.remote_log_storage_manager_class_name
    if not any(name in (b.name, b.class_path) for b in BACKENDS):
        return props
    cache_chunk = config.remote_log_segment_cache_chunk_size_bytes
    configured = (props.get("chunk.size") or "").strip()
    if not configured:
        if cache_chunk % DEFAULT_CHUNK_SIZE and cache_chunk <= MAX_CHUNK_SIZE:
            props["chunk.size"] = str(cache_chunk)
    elif configured.isdigit() and int(configured) > 0 and cache_chunk % int(configured):
        logger.warning("rsm.config.chunk.size=%s does not divide remote.log.segment.cache.chunk.size.bytes=%d: each "
                       "segment cache fill decodes up to two stored chunks more than it keeps (set chunk.size to a "
                       "divisor of the cache's chunk)", configured, cache_chunk)
    return props


def build_remote_log_metadata_manager(
    config: LogConfig, rsm: RemoteStorageManager, *, read_only: bool = False
) -> RemoteLogMetadataManager:
    """Where ``rsm``'s segments' metadata lives (see the module docstring). ``read_only``: a ``local`` store creates
    nothing (a reader that must not write into the data dirs)."""
    name = (config.remote_log_metadata_manager_class_name or "").strip()
    store = rsm.object_store
    if not name:
        name = rlmm.BUCKET if store is not None else rlmm.LOCAL
        logger.debug("%s unset: remote log metadata in the %s store for %s", RLMM_KEY, name, type(rsm).__qualname__)
    if name == rlmm.BUCKET:
        if store is None:
            raise PluginConfigError(
                f"Invalid value {name} for configuration {RLMM_KEY}: the bucket store keeps metadata in the remote "
                f"storage manager's object store, and {_class_name(rsm)} has none (its object_store is None: it is "
                f"not built on a tiered.ObjectStore). Use {RLMM_KEY}={rlmm.LOCAL} (the default for such plugins: "
                "metadata in rlmm.config.dir on this machine)", key=RLMM_KEY, value=name)
        from tiered.metadata import RemoteLogMetadataStore

        return RemoteLogMetadataStore.in_bucket(rsm)
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


def build_chunk_cache(config: LogConfig, cache_dir: Path, rsm: RemoteStorageManager, registry: Any = None) -> ChunkCache | None:
    """The remote segment cache of ``rsm``'s segments in ``cache_dir``; None (with a warning) when ``diskcache`` is
    not installed. ``registry``: where its metrics go (the remote tier's, which ``tiered run`` serves)."""
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
        disk=not _plaintext_kept_off_disk(config, rsm),
    )


def _plaintext_kept_off_disk(config: LogConfig, rsm: RemoteStorageManager) -> bool:
    """Whether the segment cache stays in memory: the plugin can read encrypted segments (the cache holds their
    plaintext) and ``remote.log.segment.cache.plaintext.disk.enable`` does not allow plaintext on local disk.

    Reading is what counts, not writing: a key ring (or key provider) kept with ``encryption.enabled=false`` still
    decrypts the segments written while it was on (the plugin says so: ``decrypts``)."""
    return rsm.decrypts and not config.remote_log_segment_cache_plaintext_disk_enable


def build_remote_tier(
    config: LogConfig,
    cache_root: Path | None = None,
    *,
    index_cache_dir: Path | None = None,
    segment_cache_dir: Path | None = None,
    segment_cache: bool = True,
    time: Time = SYSTEM_TIME,
) -> RemoteLogManager:
    """The remote tier of ``config``: plugin, metadata manager, caches and the RemoteLogManager over them.

    The caches live in the first data dir (the first writable one: :func:`_cache_home`) unless ``cache_root`` is given: a reader that must not write into the data
    dirs (a read-only manager's scratch dir, a Spark executor's own dir) passes it, and then a ``local`` metadata
    store is opened read-only too. A reader with no data dir (a Spark executor) names each cache's directory:
    ``index_cache_dir`` (holding ``remote-log-index-cache/``) and ``segment_cache_dir`` (the chunk cache, shareable
    by the processes of one machine). ``segment_cache=False``: no chunk cache, for a reader of metadata and indexes
    only (a Spark read's planning, where opening a ``diskcache`` store and closing it again cost more than the rest
    of the plan). ``time``: the clock of the remote tasks' schedule and of the metadata events (a test's
    :class:`local.scheduler.MockTime` runs the tasks as it advances). On any error, what was built is closed again."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()  # the remote tier's metrics and its caches' (what `tiered run` serves)
    rsm = build_remote_storage_manager(config)
    built: list[Any] = [rsm]
    try:
        metadata = build_remote_log_metadata_manager(config, rsm, read_only=cache_root is not None)
        built.append(metadata)
        log_dir = _cache_home(config) if cache_root is None else cache_root
        chunk_cache = build_chunk_cache(config, segment_cache_dir or _segment_cache_dir(config, cache_root, log_dir),
                                        rsm, registry) if segment_cache else None
        if chunk_cache is not None:
            built.append(chunk_cache)
        # a reader (read-only manager, Spark) copies and deletes nothing: no copier process
        process_copier = _process_copier(config, rsm) if cache_root is None else None
        if process_copier is not None:
            built.append(process_copier)
        columnar_root, columnar_refusal = _columnar(config) if cache_root is None else (None, None)  # writers only
        return assemble_remote_log_manager(
            rsm,
            metadata,
            index_cache_dir or log_dir,
            index_cache_bytes=config.remote_log_index_file_cache_total_size_bytes,
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
            cache_registry=registry,
            log_dirs=[str(d) for d in config.log_dirs],
            time=time,
            process_copier=process_copier,
            columnar_root=columnar_root,
            columnar_refusal=columnar_refusal,
        )
    except BaseException:
        for part in reversed(built):
            _close_quietly(part)
        raise


def assemble_remote_log_manager(
    rsm: RemoteStorageManager,
    metadata: RemoteLogMetadataManager,
    index_cache_dir: Path,
    *,
    index_cache_bytes: int = 1024 * 1024 * 1024,
    chunk_cache: ChunkCache | None = None,
    broker_id: int = 0,
    custom_metadata_max_bytes: int = 128,
    copy_max_bytes_per_second: int | None = None,
    fetch_max_bytes_per_second: int | None = None,
    copier_threads: int = 10,
    expiration_threads: int = 10,
    task_interval_ms: int = 30_000,
    checksum_chunk_bytes: int | None = None,
    registry: Any = None,
    cache_registry: Any = None,
    log_dirs: Sequence[str] = (),
    time: Time = SYSTEM_TIME,
    process_copier: ProcessCopier | None = None,
    columnar_root: Path | None = None,
    columnar_refusal: str | None = None,
) -> RemoteLogManager:
    """The RemoteLogManager over ``rsm`` and ``metadata``, every part built here once and handed to the part that
    uses it: the checksum verifier, the index cache in ``index_cache_dir`` (checking what it downloads), the segment
    cache over ``chunk_cache``, the ownership guard, the reader, the quotas and, with ``process_copier``, the copies
    and deletes through the copier process. The manager closes them (and ``rsm``, ``chunk_cache`` and
    ``process_copier``) in its ``close()``. ``registry``: where the manager's metrics go (default:
    ``local.metrics.REGISTRY``); ``cache_registry``: the index cache's (default: none kept). ``columnar_root``: where the copy tasks keep the
    columnar copies of the topics that ask for them (tiered.columnar; ``columnar_refusal``: why they may not, logged
    instead)."""
    from tiered.cache.index_cache import RemoteIndexCache
    from tiered.cache.segment_cache import RemoteSegmentCache
    from tiered.checksums import ChecksumVerifier, default_chunk_bytes
    from tiered.ownership import OwnershipGuard
    from tiered.rate_limiter import RateLimiter
    from tiered.remote_log_manager import RemoteLogManager
    from tiered.remote_log_reader import RemoteLogReader
    from tiered.remote_tier_parts import RemoteTierParts
    from tiered.rlm_metrics import remote_log_metrics

    metrics = remote_log_metrics(registry)
    checksums = ChecksumVerifier(rsm, metadata.segment_checksums)
    index_cache = RemoteIndexCache(index_cache_dir, rsm.fetch_index, max_size_bytes=index_cache_bytes,
                                   registry=cache_registry, verifier=checksums)  # downloaded indexes are checked too
    segments = RemoteSegmentCache(rsm, checksums, chunk_cache)
    # One writer per partition across machines sharing the store (tiered.ownership): checked before every copy and
    # deletion, and by reads for a store that lacks a partition's data.
    ownership = OwnershipGuard(metadata, clock=time.milliseconds, store_name=repr(rsm), log_dirs=log_dirs,
                               on_change=metrics.ownership_changed)
    deleting_rsm, copy_batch = _through_the_copier_process(rsm, metadata, process_copier)
    parts = RemoteTierParts(deleting_rsm, metadata, index_cache, segments, metrics, time, broker_id, ownership)
    reader = RemoteLogReader(metadata, index_cache, segments, fetch_quota=RateLimiter(fetch_max_bytes_per_second),
                             metrics=metrics)
    columnar = None
    if columnar_root is not None:
        from tiered.columnar.keeper import ColumnarKeeper

        columnar = ColumnarKeeper(columnar_root, parts, reader.read_range, refusal=columnar_refusal)
    return RemoteLogManager(
        parts, reader, rsm=rsm, checksums=checksums, copy_quota=RateLimiter(copy_max_bytes_per_second),
        checksum_chunk_bytes=checksum_chunk_bytes or default_chunk_bytes(), chunk_cache=chunk_cache,
        custom_metadata_max_bytes=custom_metadata_max_bytes, copier_threads=copier_threads,
        expiration_threads=expiration_threads, task_interval_ms=task_interval_ms, process_copier=process_copier,
        copy_batch=copy_batch, columnar=columnar,
    )


def _columnar(config: LogConfig) -> tuple[Path | None, str | None]:
    """Where the copy tasks keep the columnar copies (tiered.columnar), if the config gives them a place (topics opt
    in with ``remote.log.columnar.enable``), and why they may not (encrypted remote segments: logged per topic)."""
    from tiered.columnar.location import columnar_root, encrypted

    root = columnar_root(config)
    if root is None:
        return None, None
    refusal = ("the remote segments are encrypted (rsm.config.encryption.enabled=true) and remote.log.columnar.enable"
               "=true would keep them in plaintext" if encrypted(config) else None)
    return root, refusal


def _cache_home(config: LogConfig) -> Path:
    """The data dir the remote tier's caches live in: the first one (Kafka's ``logDirs.head``), or, when it cannot
    be written (a file system remounted read-only after an error, a dead mount), the first of the others that can,
    said in an ERROR. The manager takes that dir offline and serves the others; caches there would stop the whole
    start. (The ``local`` metadata manager's default dir stays in the first data dir: it holds metadata, not a
    cache.)"""
    dirs = [Path(d) for d in config.log_dirs]
    usable = next((d for d in dirs if d.is_dir() and os.access(d, os.W_OK)), None)
    if usable is None or usable == dirs[0]:
        return dirs[0]
    logger.error("the first data dir %s cannot be written: the remote tier's caches (remote-log-index-cache, "
                 "remote-log-segment-cache) go to %s until it can", dirs[0], usable)
    return usable


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


def _process_copier(config: LogConfig, rsm: RemoteStorageManager) -> ProcessCopier | None:
    """``remote.log.manager.copier.process.enable``: the copier process, only for plugins whose storage another
    process sees (not an in-memory or in-process mocked store); see :mod:`tiered.copier_process`."""
    store = rsm.object_store
    if not (config.remote_log_manager_copier_process_enable and store is not None
            and store.capabilities.shared_across_processes):
        return None
    from tiered.copier_process import ProcessCopier

    return ProcessCopier(config.remote_log_storage_manager_class_name, rsm_config_of(config), rsm.copy_log_segment_data)


def _through_the_copier_process(
    rsm: RemoteStorageManager, metadata: RemoteLogMetadataManager, copier: ProcessCopier | None
) -> tuple[RemoteStorageManager, CopyBatch | None]:
    """What the tasks delete through and copy batches with. With the copier process and the bucket metadata store,
    the metadata events of a copy (STARTED, FINISHED) are written by the child too, the copy task sends it several
    segments per request (events included), and the deletes go to it, each with its DELETE_SEGMENT_STARTED event."""
    from tiered.metadata import RemoteLogMetadataStore

    store = rsm.object_store
    if copier is None or store is None or not (isinstance(metadata, RemoteLogMetadataStore) and metadata.store is store):
        return rsm, None
    from tiered.copier_process import BatchCopier, ChildDeletingRsm, ChildWritingStore

    metadata.store = ChildWritingStore(store, rsm, copier)
    # The plugin itself for everything but deletes (a proxy: RemoteTierParts only deletes through it).
    return cast(RemoteStorageManager, ChildDeletingRsm(rsm, copier)), BatchCopier(copier, metadata, rsm)


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


def awaiting_claim(manager: LogManager, log: Log, wait_s: float = 0.0) -> str | None:
    """Why reads and writes of ``log`` must wait, or None: ``tiered run``'s start is still claiming the partition at
    a new owner epoch (:meth:`tiered.remote_log_manager.RemoteLogManager.renew_ownership_behind`; waited for up to
    ``wait_s`` seconds here). Until then this data dir may yet turn out not to own it, as a Kafka broker serves a
    partition only once it was elected its leader; Kafka clients retry NOT_LEADER_OR_FOLLOWER."""
    try:
        rlm = remote_log_manager_of(manager)
    except TypeError:
        return None
    if rlm is None or log.topic_id is None or not rlm.awaiting_claim(log, wait_s):
        return None
    return f"{log.name}: its claim at a new owner epoch is still being made (tiered run's start): retry"


def lost_ownership(manager: LogManager, log: Log, *, ask: bool = False) -> str | None:
    """Why this data dir may no longer take writes to ``log``, or None: another data dir owns the partition's
    remote data (``tiered attach`` there, or a copy of this data dir fenced here: :mod:`tiered.ownership`), so what
    this one appends would never be tiered and would differ from the owner's records at the same offsets. A Kafka
    leader that lost its leadership answers NOT_LEADER_OR_FOLLOWER the same way. Known from the remote tasks' last
    pass (``remote.log.manager.task.interval.ms``), or, with ``ask`` (a one-shot writer that runs no pass), from the
    store's owner records now for a tiered topic (one LIST); None without tiered's remote tier."""
    from tiered.ownership import LOST
    from tiered.remote_tier_parts import topic_id_partition

    if log.topic_id is None:
        return None
    try:
        rlm = remote_log_manager_of(manager)
    except TypeError:
        return None
    if rlm is None:
        return None
    tip = topic_id_partition(log)
    if ask and log.remote_storage_enabled:
        try:
            found = rlm.ownership.check(log, tip)
        except Exception as exc:  # (a store that does not answer: writes go on, as a Kafka leader's do)
            logger.warning("%s: cannot list the owner records of its remote data (%s): who owns it is not checked",
                           log.name, exc)
            return None
    else:
        found = rlm.ownership.state_of(tip)
    return found.detail if found is not None and found.state == LOST else None


def remote_log_manager_of(manager: LogManager) -> RemoteLogManager | None:
    """``manager``'s remote tier as this package's RemoteLogManager (what the CLI drives: ``run_once``,
    ``copy_lag``...), None when it has none. ``TypeError`` for another implementation of ``local.remote.RemoteTier``."""
    from tiered.remote_log_manager import RemoteLogManager

    tier = manager.remote_tier
    if tier is None or isinstance(tier, RemoteLogManager):
        return tier
    raise TypeError(f"the log manager's remote tier is a {type(tier).__qualname__}, not tiered's RemoteLogManager")
