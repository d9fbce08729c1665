"""LocalDirStore: the embedded default remote tier, a directory (like Kafka's LocalTieredStorage).

Config: ``dir`` (required). Objects are files named by their keys; writes go through a temp file and an atomic
rename, ranged reads use ``os.pread``. A key component longer than a file name can be (a 249-character topic's
``<topic>-<topicId>``) is stored under a shortened name, its original in a file beside it
(:mod:`tiered.backends.long_names`); every other key is its own path. ``put(..., if_absent=True)`` is an exclusive
create (a hard link refuses an existing name), and another process configured alike sees the same objects.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, BinaryIO, ClassVar

from local.checkpoint import exclusive_write
from tiered.backends.composed import ObjectStoreRemoteStorageManager
from tiered.backends.long_names import is_name_file, is_shortened, key_of, path_of, write_name_files
from tiered.errors import ObjectExistsError, RemoteStorageError
from tiered.options import Options
from tiered.store import ObjectStore, StoreCapabilities, not_found, read_all


class LocalDirStore(ObjectStore):
    root: Path
    CONFIG_KEYS = ("dir",)
    CONFIG_DOCS: ClassVar[dict[str, tuple[str, str, str]]] = {
        "dir": ("required", "a directory",
            "The directory holding the remote tier (created if missing)."),
    }
    capabilities = StoreCapabilities(conditional_writes=True, shared_across_processes=True)

    def configure(self, props: Mapping[str, str]) -> None:
        self.options = Options(props, known=self.CONFIG_KEYS)
        directory = self.options.string("dir", required="the directory of the local directory remote tier")
        self.root = Path(str(directory))
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self.options.bad("dir", directory, f"cannot create the directory: {exc.strerror or exc}") from None
        if not self.root.is_dir():
            raise self.options.bad("dir", directory, "not a directory")
        self._base = self.root.resolve()  # a relative dir stays where it was when the store was configured
        self._inside = os.path.join(self._base, "")

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}(dir={str(getattr(self, 'root', None))!r})"

    def _path(self, key: str) -> Path:
        # Checked lexically under the root resolved once (a resolve() of every object's path cost more than reading
        # a small object): a key's ".." cannot leave the directory.
        path = os.path.normpath(path_of(self._base, key))
        if not path.startswith(self._inside):
            raise RemoteStorageError(f"object key {key!r} escapes the remote directory", key=key)
        return Path(path)

    def _write(self, key: str, write: Callable[[IO[bytes]], object]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_name_files(self._base, key, lambda name_file, data: self._replace(name_file, lambda out: out.write(data)))
        self._replace(path, write)

    @staticmethod
    def _replace(path: Path, write: Callable[[IO[bytes]], object]) -> None:
        head = path.name.encode("utf-8", "surrogateescape")[:200].decode("utf-8", "ignore")  # a temp name fits too
        fd, tmp = tempfile.mkstemp(prefix=f".{head}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                write(out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def put(self, key: str, data: bytes | BinaryIO, *, if_absent: bool = False) -> None:
        if if_absent:
            path = self._path(key)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_name_files(self._base, key, lambda name_file, text: self._replace(name_file, lambda out: out.write(text)))
            try:
                exclusive_write(path, read_all(data))
            except FileExistsError:
                raise ObjectExistsError(f"object {key!r} exists already in {self.root}", key=key) from None
        elif isinstance(data, bytes | bytearray | memoryview):
            self._write(key, lambda out: out.write(data))
        else:
            self._write(key, lambda out: shutil.copyfileobj(data, out, 8 * 1024 * 1024))

    def put_stream(self, key: str, chunks: Iterable[bytes]) -> None:
        def write(out: IO[bytes]) -> None:
            for chunk in chunks:
                out.write(chunk)

        self._write(key, write)

    def get(self, key: str) -> bytes:
        return self._read(key, 0, None)

    def get_range(self, key: str, start: int, end_inclusive: int) -> bytes:
        return self._read(key, start, end_inclusive)

    def _read(self, key: str, start: int, end_inclusive: int | None) -> bytes:
        try:
            fd = os.open(self._path(key), os.O_RDONLY)
        except FileNotFoundError:
            raise not_found(key, str(self.root)) from None
        try:
            size = os.fstat(fd).st_size
            end = size if end_inclusive is None else min(size, end_inclusive + 1)
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

    def open_range(self, key: str, start: int, end_inclusive: int | None = None) -> IO[bytes]:
        return io.BytesIO(self._read(key, start, end_inclusive))

    def size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            raise not_found(key, str(self.root)) from None

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def list(self, prefix: str) -> list[str]:
        base = self._base
        start = self._path(prefix.rstrip("/")) if prefix.strip("/") else base
        search = start if start.is_dir() else start.parent
        if not search.exists():
            return []
        out = []
        originals: dict[Path, str] = {}
        # os.scandir, not Path.rglob: a Spark read lists each partition's metadata at every plan, and a Path and a
        # stat per entry cost more than the rest of the listing. As rglob: symlinked directories are not entered.
        relative = os.path.relpath(search, base)
        todo = [(str(search), "" if relative == "." else relative.replace(os.sep, "/") + "/")]
        while todo:
            directory, head = todo.pop()
            try:
                with os.scandir(directory) as entries:
                    found = list(entries)
            except (FileNotFoundError, NotADirectoryError):  # gone since, or not a directory: nothing there
                continue
            except PermissionError as exc:  # not "empty": a listing that hides objects reads as data missing
                raise RemoteStorageError(f"cannot list {directory} of the local remote tier {self.root}: "
                                         f"{exc.strerror or exc}") from exc
            for entry in found:
                if entry.is_dir(follow_symlinks=False):
                    todo.append((entry.path, head + entry.name + "/"))
                elif entry.name.endswith(".tmp") or not entry.is_file():
                    continue
                else:
                    name = head + entry.name
                    plain = not any(is_shortened(part) or is_name_file(part) for part in name.split("/"))
                    key = name if plain else key_of(base, Path(entry.path), originals)
                    if key is not None and key.startswith(prefix):
                        out.append(key)
        return sorted(out)

    def exists(self, key: str) -> bool:
        return self._path(key).exists()


class LocalDirRemoteStorageManager(ObjectStoreRemoteStorageManager):
    """The segment format on a :class:`LocalDirStore` (``remote.log.storage.manager.class.name=local``)."""

    store_class = LocalDirStore
