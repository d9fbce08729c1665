"""A fault seam for any object store: a wrapper that goes down in the middle of a copy, as a store in an outage does
(every call fails, deletes included), until the test brings it back up. :func:`faulty_rsm` puts it under the
segment format of a configured backend."""

from __future__ import annotations

from collections.abc import Iterable
from typing import IO, BinaryIO

from tiered.backends.composed import ObjectStoreRemoteStorageManager
from tiered.errors import RemoteStorageError
from tiered.store import ObjectStore


class FaultyObjectStore(ObjectStore):
    """Delegates to ``inner``. ``fail_after_uploads(n)``: the ``n``-th upload from now lands, then the store goes down
    (that upload's reply is lost: the caller sees it fail) and stays down until :meth:`up`."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.capabilities = inner.capabilities
        self.down = False
        self._uploads_left: int | None = None
        self.uploads = 0

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

    def put(self, key: str, data: bytes | BinaryIO, *, if_absent: bool = False) -> None:
        self._check(key)
        self.inner.put(key, data, if_absent=if_absent)
        self._uploaded(key)

    def put_stream(self, key: str, chunks: Iterable[bytes]) -> None:
        self._check(key)
        self.inner.put_stream(key, chunks)
        self._uploaded(key)

    def get(self, key: str) -> bytes:
        self._check(key)
        return self.inner.get(key)

    def get_range(self, key: str, start: int, end_inclusive: int) -> bytes:
        self._check(key)
        return self.inner.get_range(key, start, end_inclusive)

    def open_range(self, key: str, start: int, end_inclusive: int | None = None) -> IO[bytes]:
        self._check(key)
        return self.inner.open_range(key, start, end_inclusive)

    def size(self, key: str) -> int:
        self._check(key)
        return self.inner.size(key)

    def delete(self, key: str) -> None:
        self._check(key)
        self.inner.delete(key)

    def delete_many(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        self._check(keys[0] if keys else "delete")
        self.inner.delete_many(keys)

    def list(self, prefix: str) -> Iterable[str]:
        self._check(prefix)
        return self.inner.list(prefix)

    def exists(self, key: str) -> bool:
        self._check(key)
        return self.inner.exists(key)


def faulty_rsm(rsm: ObjectStoreRemoteStorageManager) -> tuple[ObjectStoreRemoteStorageManager, FaultyObjectStore]:
    """``rsm``'s segment format (its configuration) on its store wrapped in a :class:`FaultyObjectStore`."""
    faulty = FaultyObjectStore(rsm.store)
    wrapped = ObjectStoreRemoteStorageManager(faulty)
    wrapped.configure(rsm.props)
    return wrapped, faulty
