"""LocalDirRemoteStorageManager: the embedded default remote tier, a directory (like Kafka's LocalTieredStorage).

Config: ``dir`` (required), ``prefix`` (optional). Objects are files named by their keys; writes go through a temp
file and an atomic rename, ranged reads use ``os.pread``. A key component longer than a file name can be (a
249-character topic's ``<topic>-<topicId>``) is stored under a shortened name, its original in a file beside it
(:mod:`tiered.backends.long_names`); every other key is its own path.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from local.checkpoint import exclusive_write
from tiered.backends.base import ObjectStoreRemoteStorageManager, not_found
from tiered.backends.long_names import key_of, path_of, write_name_files
from tiered.errors import ObjectExistsError, RemoteStorageError


class LocalDirRemoteStorageManager(ObjectStoreRemoteStorageManager):
    root: Path
    CONFIG_KEYS = (*ObjectStoreRemoteStorageManager.CONFIG_KEYS, "dir")
    shared_across_processes = True  # another process configured alike sees the same objects (copier process)
    conditional_writes = True  # an exclusive create: a hard link refuses an existing name

    def configure(self, props: Mapping[str, str]) -> None:
        super().configure(props)
        directory = self.options.string("dir", required="the directory of the local directory remote tier")
        self.root = Path(str(directory))
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self.options.bad("dir", directory, f"cannot create the directory: {exc.strerror or exc}") from None
        if not self.root.is_dir():
            raise self.options.bad("dir", directory, "not a directory")

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}(dir={str(self.root)!r}, prefix={self.prefix!r})"

    def _path(self, key: str) -> Path:
        path = path_of(self.root, key).resolve()
        if self.root.resolve() not in path.parents:
            raise RemoteStorageError(f"object key {key!r} escapes the remote directory", key=key)
        return path

    def _write(self, key: str, write: object) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_name_files(self.root, key, lambda name_file, data: self._replace(name_file, lambda out: out.write(data)))
        self._replace(path, write)

    @staticmethod
    def _replace(path: Path, write: object) -> None:
        head = path.name.encode("utf-8", "surrogateescape")[:200].decode("utf-8", "ignore")  # a temp name fits too
        fd, tmp = tempfile.mkstemp(prefix=f".{head}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                write(out)  # type: ignore[operator]
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def put_file(self, key: str, path: Path) -> None:
        def copy(out: object) -> None:
            with open(path, "rb") as src:
                shutil.copyfileobj(src, out, 8 * 1024 * 1024)  # type: ignore[arg-type]

        self._write(key, copy)

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        if not if_absent:
            self._write(key, lambda out: out.write(data))
            return
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_name_files(self.root, key, lambda name_file, text: self._replace(name_file, lambda out: out.write(text)))
        try:
            exclusive_write(path, data)
        except FileExistsError:
            raise ObjectExistsError(f"object {key!r} exists already in {self.root}", key=key) from None

    def put_stream(self, key: str, chunks: Iterable[bytes]) -> None:
        def write(out: object) -> None:
            for chunk in chunks:
                out.write(chunk)  # type: ignore[attr-defined]

        self._write(key, write)

    def get_range(self, key: str, start: int = 0, end_inclusive: int | None = None) -> bytes:
        try:
            fd = os.open(self._path(key), os.O_RDONLY)
        except FileNotFoundError:
            raise not_found(key) from None
        try:
            size = os.fstat(fd).st_size
            end = size if end_inclusive is None else min(size, end_inclusive + 1)
            if start >= end:
                return b""
            chunks = []
            pos = start
            while pos < end:
                data = os.pread(fd, min(end - pos, 64 * 1024 * 1024), pos)
                if not data:
                    break
                chunks.append(data)
                pos += len(data)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            raise not_found(key) from None

    def delete_many(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._path(key).unlink(missing_ok=True)

    def list_keys(self, prefix: str) -> list[str]:
        base = self.root.resolve()  # as _path's: a relative rsm.config.dir lists too
        start = self._path(prefix.rstrip("/")) if prefix.strip("/") else base
        search = start if start.is_dir() else start.parent
        if not search.exists():
            return []
        out = []
        originals: dict[Path, str] = {}
        for path in search.rglob("*"):
            if path.is_file() and not path.name.endswith(".tmp"):
                key = key_of(base, path, originals)
                if key is not None and key.startswith(prefix):
                    out.append(key)
        return sorted(out)

    def exists(self, key: str) -> bool:
        return self._path(key).exists()
