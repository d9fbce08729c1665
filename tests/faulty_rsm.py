"""A fault seam for any object-store backend: a wrapper that goes down in the middle of a copy, as a store in an
outage does (every call fails, deletes included), until the test brings it back up."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO

from tiered.backends.base import ObjectStoreRemoteStorageManager
from tiered.errors import RemoteStorageError


class FaultyObjectStore(ObjectStoreRemoteStorageManager):
    """Delegates to ``inner``. ``fail_after_uploads(n)``: the ``n``-th upload from now lands, then the store goes down
    (that upload's reply is lost: the caller sees it fail) and stays down until :meth:`up`."""

    def __init__(self, inner: ObjectStoreRemoteStorageManager) -> None:
        self.inner = inner
        self.prefix = inner.prefix
        self.fetch_streams = inner.fetch_streams
        self.down = False
        self._uploads_left: int | None = None
        self.uploads = 0

    def configure(self, props: Mapping[str, str]) -> None:
        raise AssertionError("configure the inner backend")

    def fail_after_uploads(self, n: int) -> None:
        self._uploads_left = n

    def up(self) -> None:
        self.down = False

    def _check(self, what: str) -> None:
        if self.down:
            raise RemoteStorageError(f"{what}: connection refused (the store is down)", retriable=True)

    def _uploaded(self, key: str) -> None:
        self.uploads += 1
        if self._uploads_left is not None:
            self._uploads_left -= 1
            if self._uploads_left <= 0:
                self._uploads_left, self.down = None, True
                raise RemoteStorageError(f"put of {key}: connection reset", retriable=True)

    def put_file(self, key: str, path: Path) -> None:
        self._check(key)
        self.inner.put_file(key, path)
        self._uploaded(key)

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        self._check(key)
        self.inner.put_bytes(key, data, if_absent=if_absent)
        self._uploaded(key)

    def get_range(self, key: str, start: int = 0, end_inclusive: int | None = None) -> bytes:
        self._check(key)
        return self.inner.get_range(key, start, end_inclusive)

    def open_range(self, key: str, start: int = 0, end_inclusive: int | None = None) -> IO[bytes]:
        self._check(key)
        return self.inner.open_range(key, start, end_inclusive)

    def delete_many(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        self._check(keys[0] if keys else "delete")
        self.inner.delete_many(keys)

    def list_keys(self, prefix: str) -> list[str]:
        self._check(prefix)
        return self.inner.list_keys(prefix)

    def exists(self, key: str) -> bool:
        self._check(key)
        return self.inner.exists(key)
