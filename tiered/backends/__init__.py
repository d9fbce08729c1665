"""Backends of the remote tier, loaded by dotted path or short alias."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from tiered.errors import PluginConfigError
from tiered.rsm import RemoteStorageManager

_KEY = "remote.log.storage.manager.class.name"
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
        raise PluginConfigError(f"Invalid value {class_name} for configuration {_KEY}: expected a dotted path "
                                f"(package.module.Class) or one of {', '.join(ALIASES)}", key=_KEY, value=class_name)
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        hint = " (pip install 'tiered[s3]')" if module_name.endswith(("s3", "fsspec_backend")) else ""
        raise PluginConfigError(f"Invalid value {class_name} for configuration {_KEY}: cannot load remote storage "
                                f"manager {path!r}: {exc}{hint}", key=_KEY, value=class_name) from exc
    if not (isinstance(cls, type) and issubclass(cls, RemoteStorageManager)):
        raise PluginConfigError(f"Invalid value {class_name} for configuration {_KEY}: {path!r} is not a "
                                "RemoteStorageManager subclass", key=_KEY, value=class_name)
    rsm = cls()
    rsm.configure(dict(config or {}))
    return rsm
