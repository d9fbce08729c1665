"""FsspecRemoteStorageManager: the remote tier on any fsspec filesystem (s3fs, gcsfs, local, memory...).

Config: ``url`` (e.g. ``memory://bucket/prefix``, ``file:///srv/tier``, ``s3://bucket/prefix``) and
``storage_options.<name>`` keys passed to the filesystem (e.g. ``storage_options.endpoint_url``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from local.checkpoint import exclusive_write
from tiered.backends.base import ObjectStoreRemoteStorageManager, not_found
from tiered.backends.long_names import NAME_FILE_SUFFIX, is_name_file, is_shortened, shortened, stored_parts
from tiered.backends.options import LIBRARY_LOG_REDACTION
from tiered.errors import ObjectExistsError, RemoteStorageError

_OPTION_PREFIX = "storage_options."


class FsspecRemoteStorageManager(ObjectStoreRemoteStorageManager):
    CONFIG_KEYS = (*ObjectStoreRemoteStorageManager.CONFIG_KEYS, "url")
    CONFIG_KEY_PREFIXES = (*ObjectStoreRemoteStorageManager.CONFIG_KEY_PREFIXES, _OPTION_PREFIX)

    def configure(self, props: Mapping[str, str]) -> None:
        super().configure(props)
        try:
            import fsspec
        except ImportError as exc:  # pragma: no cover
            raise RemoteStorageError("the fsspec backend needs fsspec: pip install 'tiered[s3]'") from exc
        url = self.options.string("url", required="the fsspec URL of the remote tier, e.g. s3://bucket/prefix")
        assert url is not None
        options: dict[str, Any] = {}
        credentials: dict[str, str | None] = {}
        for key, value in props.items():
            if key.startswith(_OPTION_PREFIX):
                name = key[len(_OPTION_PREFIX):]
                if not name:
                    raise self.options.bad(key, value, "names no storage option")
                text = self.options.string(key)
                parsed: Any = {"true": True, "false": False}.get(text.lower(), text) if text is not None else None
                if name in ("endpoint_url", "region_name"):
                    if name == "endpoint_url" and text is not None:
                        # Credentials in the URL go to s3fs's key/secret (unless given), never into the URL it uses.
                        parsed, user, password = self.options.url(key, ("http", "https"))
                        if user or password:
                            credentials["key"], credentials["secret"] = user, password
                    options.setdefault("client_kwargs", {})[name] = parsed
                else:
                    options[name] = parsed
        for option, secret in credentials.items():
            options.setdefault(option, secret)
        LIBRARY_LOG_REDACTION.redactor.add(*self.redact.secrets)
        LIBRARY_LOG_REDACTION.attach("fsspec", "s3fs", "aiobotocore", "aiobotocore.endpoint", "botocore.endpoint",
                                     "botocore.auth", "botocore.httpsession", "urllib3.connectionpool")
        try:
            self.fs, root = fsspec.core.url_to_fs(url, **options)
        except (ValueError, ImportError, TypeError) as exc:
            raise self.options.bad("url", url, self.redact(exc)) from None
        self._display = self.redact(url)
        self.root = root.rstrip("/")
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        self._needs_dirs = bool({"file", "local"} & set(protocols))  # object stores have no directories
        # pipe_file(mode="create") is atomic on s3fs (If-None-Match) and, by an exclusive create, on a local
        # filesystem; fsspec's other filesystems check for the file, then write it.
        self.conditional_writes = self._needs_dirs or bool({"s3", "s3a"} & set(protocols))

    def _target(self, key: str) -> str:
        """Where ``key`` is written: on a directory tree, its directories made and the original of each component
        stored shortened written beside it (:mod:`tiered.backends.long_names`), as the local-directory backend does."""
        path = self._path(key)
        if self._needs_dirs:
            self.fs.makedirs(self.fs._parent(path), exist_ok=True)
            parts = stored_parts(key)
            for i, original in shortened(parts):
                name_file = self._join([stored for _, stored in parts[:i]] + [parts[i][1] + NAME_FILE_SUFFIX])
                if not self.fs.exists(name_file):
                    self.fs.pipe_file(name_file, original.encode("utf-8"))
        return path

    def _path(self, key: str) -> str:
        if self._needs_dirs:  # a directory tree: a component too long for a file name is stored shortened
            return self._join([stored for _, stored in stored_parts(key)])
        return f"{self.root}/{key}" if self.root else key

    def _join(self, parts: list[str]) -> str:
        key = "/".join(parts)
        return f"{self.root}/{key}" if self.root else key

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}(url={getattr(self, '_display', None)!r}, prefix={self.prefix!r})"

    def put_file(self, key: str, path: Path) -> None:
        try:
            self.fs.put_file(str(path), self._target(key))
        except Exception as exc:
            self._fail(f"upload of {key} failed: {exc}", exc, retriable=isinstance(exc, OSError), key=key)

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        path = self._target(key)
        try:
            if not if_absent:
                self.fs.pipe_file(path, data)
            elif self._needs_dirs:
                exclusive_write(Path(self.fs._strip_protocol(path)), data)  # atomic on a local filesystem
            else:
                self.fs.pipe_file(path, data, mode="create")  # s3fs: If-None-Match; others check, then write
        except FileExistsError:
            raise ObjectExistsError(f"object {key!r} exists already in {self._display}", key=key) from None
        except Exception as exc:
            self._fail(f"put of {key} failed: {exc}", exc, retriable=isinstance(exc, OSError), key=key)

    def put_stream(self, key: str, chunks: Iterable[bytes]) -> None:
        """Written through the filesystem's file object (s3fs uploads it in multipart blocks as it fills)."""
        try:
            with self.fs.open(self._target(key), "wb") as out:
                for chunk in chunks:
                    out.write(chunk)
        except RemoteStorageError:
            raise
        except Exception as exc:
            self._fail(f"upload of {key} failed: {exc}", exc, retriable=isinstance(exc, OSError), key=key)

    def get_range(self, key: str, start: int = 0, end_inclusive: int | None = None) -> bytes:
        try:
            return bytes(self.fs.cat_file(self._path(key), start=start, end=None if end_inclusive is None else end_inclusive + 1))
        except FileNotFoundError:
            raise not_found(key) from None
        except Exception as exc:
            self._fail(f"get of {key} failed: {exc}", exc, retriable=isinstance(exc, OSError), key=key)

    def delete_many(self, keys: Iterable[str]) -> None:
        for key in keys:
            try:
                self.fs.rm_file(self._path(key))
            except FileNotFoundError:
                continue
            except Exception as exc:
                self._fail(f"delete of {key} failed: {exc}", exc, retriable=isinstance(exc, OSError), key=key)

    def list_keys(self, prefix: str) -> list[str]:
        strip = self.fs._strip_protocol
        root = strip(self.root).rstrip("/") if self.root else ""
        # Keys that begin with ``prefix``: everything under its last whole directory, filtered (``<topic>-`` is the
        # beginning of a name, which a filesystem's find does not match).
        search = prefix.rpartition("/")[0].strip("/")
        try:
            found = self.fs.find(self._path(search) if search else self.root)
        except FileNotFoundError:
            return []
        keys = (strip(p)[len(root):].lstrip("/") for p in found)
        if self._needs_dirs:
            keys = (self._original(k) for k in keys if not is_name_file(k.rpartition("/")[2]))
        return sorted(k for k in keys if k.startswith(prefix))

    def _original(self, stored_key: str) -> str:
        """The key a stored path holds: each shortened component's original read from its name file."""
        stored = stored_key.split("/")
        names = list(stored)
        for i, part in enumerate(stored):
            if is_shortened(part):
                try:
                    names[i] = self.fs.cat_file(self._join([*stored[:i], part + NAME_FILE_SUFFIX])).decode("utf-8")
                except (FileNotFoundError, UnicodeDecodeError):
                    pass  # a name that only looks shortened
        return "/".join(names)

    def exists(self, key: str) -> bool:
        return bool(self.fs.exists(self._path(key)))
