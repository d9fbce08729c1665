"""Backends of the remote tier, loaded by dotted path or short alias."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from tiered.errors import PluginLoadError
from tiered.rsm import RemoteStorageManager

ALIASES = {
    "local": "tiered.backends.local_dir.LocalDirRemoteStorageManager",
    "fsspec": "tiered.backends.fsspec_backend.FsspecRemoteStorageManager",
    "s3": "tiered.backends.s3.S3RemoteStorageManager",
}


def load_rsm(class_name: str, config: Mapping[str, str] | None = None) -> RemoteStorageManager:
    """Import ``class_name`` (a dotted path or an alias), instantiate it and configure it."""
    path = ALIASES.get(class_name, class_name)
    module_name, _, attr = path.rpartition(".")
    if not module_name:
        raise PluginLoadError(f"remote.log.storage.manager.class.name {class_name!r} is not a dotted path")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        hint = " (pip install 'tiered[s3]')" if module_name.endswith(("s3", "fsspec_backend")) else ""
        raise PluginLoadError(f"cannot load remote storage manager {path!r}: {exc}{hint}") from exc
    if not (isinstance(cls, type) and issubclass(cls, RemoteStorageManager)):
        raise PluginLoadError(f"{path!r} is not a RemoteStorageManager subclass")
    rsm = cls()
    rsm.configure(dict(config or {}))
    return rsm
