"""FsspecRemoteStorageManager: the remote tier on any fsspec filesystem (s3fs, gcsfs, local, memory...).

Config: ``url`` (e.g. ``memory://bucket/prefix``, ``file:///srv/tier``, ``s3://bucket/prefix``) and
``storage_options.<name>`` keys passed to the filesystem (e.g. ``storage_options.endpoint_url``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tiered.backends.base import ObjectStoreRemoteStorageManager, not_found
from tiered.errors import RemoteStorageError

_OPTION_PREFIX = "storage_options."


class FsspecRemoteStorageManager(ObjectStoreRemoteStorageManager):
    def configure(self, props: Mapping[str, str]) -> None:
        super().configure(props)
        try:
            import fsspec
        except ImportError as exc:  # pragma: no cover
            raise RemoteStorageError("the fsspec backend needs fsspec: pip install 'tiered[s3]'") from exc
        url = props.get("url")
        if not url:
            raise RemoteStorageError("the fsspec remote tier needs rsm.config.url")
        options: dict[str, Any] = {}
        for key, value in props.items():
            if key.startswith(_OPTION_PREFIX):
                name = key[len(_OPTION_PREFIX):]
                if name in ("endpoint_url", "region_name"):
                    options.setdefault("client_kwargs", {})[name] = value
                else:
                    options[name] = value
        self.fs, root = fsspec.core.url_to_fs(url, **options)
        self.root = root.rstrip("/")
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        self._needs_dirs = bool({"file", "local"} & set(protocols))  # object stores have no directories

    def _prepare(self, path: str) -> str:
        if self._needs_dirs:
            self.fs.makedirs(self.fs._parent(path), exist_ok=True)
        return path

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}" if self.root else key

    def put_file(self, key: str, path: Path) -> None:
        try:
            self.fs.put_file(str(path), self._prepare(self._path(key)))
        except Exception as exc:
            raise RemoteStorageError(f"upload of {key} failed: {exc}", retriable=isinstance(exc, OSError), key=key) from exc

    def put_bytes(self, key: str, data: bytes) -> None:
        try:
            self.fs.pipe_file(self._prepare(self._path(key)), data)
        except Exception as exc:
            raise RemoteStorageError(f"put of {key} failed: {exc}", retriable=isinstance(exc, OSError), key=key) from exc

    def get_range(self, key: str, start: int = 0, end_inclusive: int | None = None) -> bytes:
        try:
            return bytes(self.fs.cat_file(self._path(key), start=start, end=None if end_inclusive is None else end_inclusive + 1))
        except FileNotFoundError:
            raise not_found(key) from None
        except Exception as exc:
            raise RemoteStorageError(f"get of {key} failed: {exc}", retriable=isinstance(exc, OSError), key=key) from exc

    def delete_many(self, keys: Iterable[str]) -> None:
        for key in keys:
            try:
                self.fs.rm_file(self._path(key))
            except FileNotFoundError:
                continue

    def list_keys(self, prefix: str) -> list[str]:
        strip = self.fs._strip_protocol
        root = strip(self.root).rstrip("/") if self.root else ""
        try:
            found = self.fs.find(self._path(prefix.rstrip("/")) if prefix.strip("/") else self.root)
        except FileNotFoundError:
            return []
        keys = (strip(p)[len(root):].lstrip("/") for p in found)
        return sorted(k for k in keys if k.startswith(prefix))

    def exists(self, key: str) -> bool:
        return bool(self.fs.exists(self._path(key)))
