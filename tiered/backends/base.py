"""ObjectStoreRemoteStorageManager: the RSM on a small object API, so each backend only moves bytes.

A backend implements ``put_file``, ``put_bytes``, ``get_range``, ``delete_many``, ``list_keys`` and ``exists``. Copies
upload the ``.log`` first, then the indexes, the producer snapshot and the leader-epoch checkpoint; a failure
deletes whatever was uploaded (no orphans) and raises RemoteStorageError.
"""

from __future__ import annotations

import io
import logging
from abc import abstractmethod
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any, NoReturn

from tiered import layout
from tiered.backends.options import Options, Redactor
from tiered.errors import RemoteResourceNotFoundError, RemoteStorageError
from tiered.rsm import IndexType, LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageManager

logger = logging.getLogger(__name__)


class ObjectStoreRemoteStorageManager(RemoteStorageManager):
    _ABSTRACT_HELPER = True
    prefix: str = ""
    #: the ``rsm.config.*`` keys (prefix stripped) a backend reads; others are warned about. ``checksum.chunk.bytes``
    #: is the copy task's (tiered.checksums), passed to every plugin with the rest.
    CONFIG_KEYS: tuple[str, ...] = ("prefix", "checksum.chunk.bytes")
    CONFIG_KEY_PREFIXES: tuple[str, ...] = ()
    redact: Redactor = Redactor()

    def configure(self, props: Mapping[str, str]) -> None:
        self.options = Options(props, known=self.CONFIG_KEYS, known_prefixes=self.CONFIG_KEY_PREFIXES)
        self.redact = self.options.redactor
        self.prefix = (self.options.string("prefix", "") or "").strip("/")
        from tiered.checksums import checksum_chunk_bytes

        checksum_chunk_bytes(props)  # validated here too, so a bad value fails at configure

    def _failure(self, message: str, exc: BaseException | None, **context: Any) -> RemoteStorageError:
        """A RemoteStorageError whose message has no secret in it (and which is not chained to ``exc`` when that
        mentions one: a traceback would print it)."""
        err = RemoteStorageError(self.redact(message), **context)
        if exc is not None and not self.redact.leaks(exc):
            err.__cause__ = exc
        else:
            err.__suppress_context__ = True
        return err

    def _fail(self, message: str, exc: BaseException | None, **context: Any) -> NoReturn:
        """Raise :meth:`_failure`'s error, chained to ``exc`` only when that mentions no secret."""
        err = self._failure(message, exc, **context)
        raise err from err.__cause__

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}(prefix={self.prefix!r})"

    # The object API ---------------------------------------------------------------------------------------
    @abstractmethod
    def put_file(self, key: str, path: Path) -> None: ...

    @abstractmethod
    def put_bytes(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def get_range(self, key: str, start: int = 0, end_inclusive: int | None = None) -> bytes:
        """Bytes [start, end_inclusive] of ``key`` (to the end when None; shorter at the object's end).

        Raises RemoteResourceNotFoundError when the object does not exist."""

    def open_range(self, key: str, start: int = 0, end_inclusive: int | None = None) -> IO[bytes]:
        """A readable stream of bytes [start, end_inclusive] of ``key``: by default the whole range read at once
        (a backend that can stream overrides this and sets ``fetch_streams``)."""
        return io.BytesIO(self.get_range(key, start, end_inclusive))

    @abstractmethod
    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete ``keys``; missing ones are ignored."""

    @abstractmethod
    def list_keys(self, prefix: str) -> list[str]: ...

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    # The RSM ----------------------------------------------------------------------------------------------
    def _uploads(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> list[tuple[str, Path | bytes]]:
        out: list[tuple[str, Path | bytes]] = [
            (layout.segment_key(self.prefix, metadata, layout.LOG_SUFFIX), data.log_segment),
            (layout.segment_key(self.prefix, metadata, IndexType.OFFSET.suffix), data.offset_index),
            (layout.segment_key(self.prefix, metadata, IndexType.TIMESTAMP.suffix), data.time_index),
        ]
        if data.transaction_index is not None:
            out.append((layout.segment_key(self.prefix, metadata, IndexType.TRANSACTION.suffix), data.transaction_index))
        out.append((layout.segment_key(self.prefix, metadata, IndexType.PRODUCER_SNAPSHOT.suffix), data.producer_snapshot_index))
        out.append((layout.segment_key(self.prefix, metadata, IndexType.LEADER_EPOCH.suffix), data.leader_epoch_index))
        return out

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> bytes | None:
        uploaded: list[str] = []
        try:
            for key, source in self._uploads(metadata, segment_data):
                if isinstance(source, Path):
                    self.put_file(key, source)
                else:
                    self.put_bytes(key, source)
                uploaded.append(key)
        except Exception as exc:
            logger.warning("copy of %s failed after %d object(s): deleting them", metadata.remote_log_segment_id, len(uploaded))
            try:
                self.delete_many(layout.segment_keys(self.prefix, metadata))
            except Exception:
                logger.exception("cleanup after the failed copy of %s failed", metadata.remote_log_segment_id)
            if isinstance(exc, RemoteStorageError):
                raise
            self._fail(f"copy of {metadata.remote_log_segment_id} failed: {exc}", exc, retriable=isinstance(exc, OSError))
        return None

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> IO[bytes]:
        if start_position < 0 or (end_position is not None and end_position < start_position):
            raise RemoteStorageError(f"invalid range {start_position}..{end_position} of {metadata.remote_log_segment_id}")
        key = layout.segment_key(self.prefix, metadata, layout.LOG_SUFFIX)
        return self.open_range(key, start_position, end_position)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> IO[bytes]:
        return io.BytesIO(self.get_range(layout.segment_key(self.prefix, metadata, index_type.suffix)))

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        self.delete_many(layout.segment_keys(self.prefix, metadata))


def not_found(key: str) -> RemoteResourceNotFoundError:
    return RemoteResourceNotFoundError(f"no object {key!r} in the remote store", key=key)
