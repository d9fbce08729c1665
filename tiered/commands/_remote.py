"""What the commands that talk to the remote tier share: a first contact that fails fast and names what is wrong,
the remote metadata of a partition read from the store alone, and the topics the store holds.

:func:`check_remote_access` builds the configured plugin and, when it is built on an object store, asks the store
once whether it answers (:meth:`tiered.ObjectStore.check_access`; the S3 store lists the bucket): an unreachable
endpoint, a missing bucket or rejected credentials fail in seconds with one line, before any data dir is opened.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tiered.commands._common import UsageError

if TYPE_CHECKING:
    from local.config import LogConfig
    from tiered.metadata import RemoteLogMetadataStore
    from tiered.rsm import RemoteStorageManager

REMOTE_TIER_HINT = (
    "set remote.log.storage.system.enable=true and remote.log.storage.manager.class.name (with its rsm.config.* "
    "keys) in the broker config (--config FILE or -o KEY=VALUE)"
)


def remote_tier_enabled(config: LogConfig) -> bool:
    return bool(config.remote_log_storage_system_enable)


def check_remote_access(config: LogConfig, *, reader: bool = False) -> None:
    """When the remote tier is enabled: build its plugin (a bad ``rsm.config.*`` is a ConfigError) and let it check
    that its store answers (see the module docstring). Nothing is written. ``reader``: the caller only reads
    (consume), so the local-directory tier's missing directory is an error, not one to create."""
    from tiered.backends import load_rsm

    if not remote_tier_enabled(config):
        return
    if reader:
        _refuse_a_missing_local_dir(config)
    rsm = load_rsm(config.remote_log_storage_manager_class_name, config.rsm_config)
    try:  # any plugin (a custom one need not be built on an object store): only a store is asked
        if rsm.object_store is not None:
            rsm.object_store.check_access()
    finally:
        rsm.close()


@contextlib.contextmanager
def remote_store(config: LogConfig, *, check: bool = True, reader: bool = False) -> Iterator[RemoteLogMetadataStore]:
    """The remote metadata store of the configured plugin (see :func:`remote_plugin`), closed on exit."""
    with remote_plugin(config, check=check, reader=reader) as (_, store):
        yield store


@contextlib.contextmanager
def remote_plugin(
    config: LogConfig, *, check: bool = True, reader: bool = False
) -> Iterator[tuple[RemoteStorageManager, RemoteLogMetadataStore]]:
    """The configured plugin (which must be built on an object store) and the remote metadata store in its bucket,
    closed on exit. ``check``: let the store check it answers first. ``reader``: the caller only reads (status,
    attach), so the local-directory tier's missing directory is an error rather than a directory to create."""
    from tiered.backends import load_rsm
    from tiered.metadata import RemoteLogMetadataStore

    if not remote_tier_enabled(config):
        raise UsageError(f"the remote tier is not enabled: {REMOTE_TIER_HINT}")
    if reader:
        _refuse_a_missing_local_dir(config)
    rsm = load_rsm(config.remote_log_storage_manager_class_name, config.rsm_config)
    try:
        store = rsm.object_store
        if store is None:
            raise UsageError(f"the remote storage manager {type(rsm).__qualname__} is not built on an object store: "
                             "its remote metadata cannot be read from the store")
        if check:
            store.check_access()
        yield rsm, RemoteLogMetadataStore.in_bucket(rsm)
    finally:
        rsm.close()


def _refuse_a_missing_local_dir(config: LogConfig) -> None:
    """Configuring the local-directory tier creates its directory: a reader must not (a mistyped rsm.config.dir
    would be made, and nothing is there to read)."""
    from tiered.backends import BY_NAME
    from tiered.errors import RemoteStorageError

    directory = config.rsm_config.get("dir")
    is_local = config.remote_log_storage_manager_class_name in ("local", BY_NAME["local"].class_path)
    if is_local and directory and not Path(directory).is_dir():
        raise RemoteStorageError(f"the remote tier's directory {directory} (rsm.config.dir) does not exist")
