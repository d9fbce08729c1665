"""The bundled backends, one table (:data:`BACKENDS`: name, class, pip extra, description) that the loader, its
errors and the generated docs read; a plugin loads by a name of the table or by dotted path."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass

from tiered.errors import PluginConfigError
from tiered.rsm import RemoteStorageManager

_KEY = "remote.log.storage.manager.class.name"


@dataclass(frozen=True)
class Backend:
    name: str  #: the value of remote.log.storage.manager.class.name
    class_path: str  #: the RemoteStorageManager it loads (package.module.Class)
    extra: str | None  #: the pip extra its libraries come with (pip install 'tiered[<extra>]'), None: none needed
    description: str

    @property
    def install_hint(self) -> str:
        return f"pip install 'tiered[{self.extra}]'" if self.extra else ""


BACKENDS: tuple[Backend, ...] = (
    Backend("local", "tiered.backends.local_dir.LocalDirRemoteStorageManager", None,
            "A directory of this machine (or a mounted share), like Kafka's LocalTieredStorage."),
    Backend("s3", "tiered.backends.s3.S3RemoteStorageManager", "s3",
            "Any S3-compatible store through boto3 (AWS, MinIO, SeaweedFS, LocalStack)."),
    Backend("fsspec", "tiered.backends.fsspec_backend.FsspecRemoteStorageManager", "s3",
            "Any fsspec filesystem (s3fs, gcsfs, adlfs, file, memory), named by a URL."),
    Backend("store", "tiered.backends.composed.ObjectStoreRemoteStorageManager", None,
            "Your own tiered.ObjectStore, named by `rsm.config.store.class` (docs/custom-rsm.md): the segment format, "
            "checksums, compression, encryption and metadata in the bucket on its five methods."),
)
BY_NAME = {b.name: b for b in BACKENDS}


def load_rsm(class_name: str, config: Mapping[str, str] | None = None) -> RemoteStorageManager:
    """Import ``class_name`` (a dotted path or a name of :data:`BACKENDS`), instantiate it and configure it."""
    backend = BY_NAME.get(class_name)
    path = backend.class_path if backend is not None else class_name
    module_name, _, attr = path.rpartition(".")
    if not module_name:
        raise PluginConfigError(f"Invalid value {class_name} for configuration {_KEY}: expected a dotted path "
                                f"(package.module.Class) or one of {', '.join(BY_NAME)}", key=_KEY, value=class_name)
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        hint = f" ({backend.install_hint})" if backend is not None and backend.extra else ""
        raise PluginConfigError(f"Invalid value {class_name} for configuration {_KEY}: cannot load remote storage "
                                f"manager {path!r}: {exc}{hint}", key=_KEY, value=class_name) from exc
    if not (isinstance(cls, type) and issubclass(cls, RemoteStorageManager)):
        raise PluginConfigError(f"Invalid value {class_name} for configuration {_KEY}: {path!r} is not a "
                                "RemoteStorageManager subclass", key=_KEY, value=class_name)
    rsm = cls()
    rsm.configure(dict(config or {}))
    return rsm
