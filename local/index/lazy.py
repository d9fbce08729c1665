"""Lazily opened segment indexes (Kafka's ``LazyIndex``).

Opening an index maps its file and reads its entries; a broker with many segments would pay that for
segments nobody reads. A LazyIndex holds the path until :meth:`LazyIndex.get` is first called, then opens the
index once (thread-safe) and hands out the same instance. Renames, deletes, closes and parent-dir updates
work in both states, so a segment can be renamed (``.deleted``, ``.swap``) without loading its indexes.
The files themselves are described in :mod:`local.index.offset_index` and :mod:`local.index.time_index`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Generic, Self, TypeVar

from local.errors import KafkaStorageIOError
from local.index.base import AbstractIndex
from local.index.entries import DEFAULT_MAX_INDEX_SIZE
from local.index.offset_index import OffsetIndex
from local.index.time_index import TimeIndex
from local.native import LazyCore

logger = logging.getLogger(__name__)

IndexT = TypeVar("IndexT", bound=AbstractIndex)


class LazyIndex(LazyCore, Generic[IndexT]):
    """An index opened on first :meth:`get`. Build one with :meth:`for_offset` or :meth:`for_time`."""

    __slots__ = ("__dict__", "__weakref__", "_loader", "_lock", "_path")  # slots: see AbstractIndex

    def __init__(self, path: str | os.PathLike[str], loader: Callable[[Path], IndexT]) -> None:
        self._path = path if isinstance(path, Path) else Path(path)
        self._loader = loader
        self._index: IndexT | None = None
        self._lock = threading.Lock()

    @staticmethod
    def for_offset(
        path: str | os.PathLike[str],
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        writable: bool = True,
        use_large_format: bool = False,
    ) -> LazyIndex[OffsetIndex]:
        def load(file: Path) -> OffsetIndex:
            return OffsetIndex(file, base_offset, max_index_size, writable, use_large_format)

        return LazyIndex(path, load)

    @staticmethod
    def for_time(
        path: str | os.PathLike[str],
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        writable: bool = True,
    ) -> LazyIndex[TimeIndex]:
        def load(file: Path) -> TimeIndex:
            return TimeIndex(file, base_offset, max_index_size, writable)

        return LazyIndex(path, load)

    @property
    def is_loaded(self) -> bool:
        return self._index is not None

    @property
    def path(self) -> Path:
        index = self._index
        return index.path if index is not None else self._path

    def get(self) -> IndexT:
        """The index, opened on the first call. An OSError while opening becomes KafkaStorageIOError."""
        index = self._index
        if index is not None:
            return index
        with self._lock:
            if self._index is None:
                try:
                    self._index = self._loader(self._path)
                except OSError as e:
                    raise KafkaStorageIOError(f"error loading index file {self._path}: {e}", path=self._path) from e
            return self._index

    def rename_to(self, path: str | os.PathLike[str]) -> None:
        """Rename the file; before loading, a file that does not exist yet is not an error."""
        target = Path(path)
        with self._lock:
            if self._index is not None:
                self._index.rename_to(target)
                return
            try:
                os.replace(self._path, target)
            except FileNotFoundError:
                logger.debug("Index %s not renamed to %s: it does not exist yet", self._path, target)
            finally:
                self._path = target

    def delete_if_exists(self) -> bool:
        """Close (if loaded) and delete the file; False when it did not exist."""
        with self._lock:
            if self._index is not None:
                return self._index.delete_if_exists()
            try:
                self._path.unlink()
            except FileNotFoundError:
                return False
            return True

    def close(self) -> None:
        """Close the index if it was loaded (trimming it); nothing to do otherwise."""
        with self._lock:
            if self._index is not None:
                self._index.close()

    def close_handler(self) -> None:
        """Release the index's mapping without trimming, if it was loaded."""
        with self._lock:
            if self._index is not None:
                self._index.close_handler()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LazyIndex(path={str(self.path)!r}, loaded={self.is_loaded})"
