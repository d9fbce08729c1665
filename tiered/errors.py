"""Errors of the remote tier. One root, :class:`TieredStorageError`; each says whether a retry may help."""

from __future__ import annotations

from typing import Any

from local.errors import ConfigError, CorruptRecordError


class TieredStorageError(Exception):
    """Root of every error raised by :mod:`tiered`."""

    def __init__(self, message: str, *, retriable: bool = False, **context: Any) -> None:
        super().__init__(message)
        self.retriable = retriable
        self.context = context
        for key, value in context.items():
            setattr(self, key, value)


class RemoteStorageError(TieredStorageError):
    """A RemoteStorageManager call failed (Kafka's RemoteStorageException)."""


class RemoteResourceNotFoundError(RemoteStorageError, FileNotFoundError):
    """The object asked for does not exist in the remote store (Kafka's RemoteResourceNotFoundException)."""


class ObjectNotFoundError(RemoteResourceNotFoundError):
    """An object store (:class:`tiered.ObjectStore`) has no object under the key asked for (``key``)."""


class RemoteStorageTimeoutError(RemoteStorageError, TimeoutError):
    """A store call did not finish in time; retriable."""

    def __init__(self, message: str, **context: Any) -> None:
        context.setdefault("retriable", True)
        super().__init__(message, **context)


class ObjectExistsError(RemoteStorageError, FileExistsError):
    """A conditional write (``ObjectStore.put(key, data, if_absent=True)``) found the object already there: another writer
    created it first. Names the object (``key``)."""

    key: str


class NotPartitionOwnerError(RemoteStorageError):
    """This data dir does not own the partition's remote data (see :mod:`tiered.ownership`): another data dir took
    ownership with a higher owner epoch (``tiered attach``), or claimed the same epoch first. Nothing is copied to or
    deleted from the partition's remote data here any more; its local data stays as it is. Not retriable."""


class RemoteStoreMismatchError(RemoteStorageError):
    """The configured remote store holds none of the metadata of a partition whose data dir says it has remote data
    there: a wrong bucket or ``rsm.config.prefix`` (see :mod:`tiered.ownership`). Nothing is copied or read. Not
    retriable."""


class CustomMetadataSizeExceededError(RemoteStorageError):
    """Custom metadata returned by a plugin is larger than remote.log.metadata.custom.metadata.max.bytes."""


class InvalidStateTransitionError(TieredStorageError, ValueError):
    """A remote segment state change that Kafka's state machine does not allow."""


class PluginLoadError(TieredStorageError, ImportError):
    """remote.log.storage.manager.class.name names something that cannot be loaded or is not a plugin."""


class RemoteChecksumError(RemoteStorageError, CorruptRecordError):
    """Bytes fetched from the remote store do not match the crc32c recorded for them when they were uploaded (after
    one refetch). Names the object (``key``), the byte range (``start``..``end`` inclusive) and the segment; also a
    :class:`local.errors.CorruptRecordError`, so whoever handles corrupt local data handles it too."""

    key: str
    start: int
    end: int
    segment_id: str
    kind: str  # mismatch, short or long (see tiered.checksums.ChecksumProblem)
    position: int  # = start: where in the object the damaged chunk begins


class RemoteConfigError(RemoteStorageError, ConfigError):
    """An invalid ``rsm.config.*`` value: the message names the key, the value (hidden for a secret) and the allowed
    range; also a :class:`local.errors.ConfigError`, so the CLI reports it as a usage error (exit 2)."""

    key: str


class PluginConfigError(PluginLoadError, ConfigError):
    """``remote.log.storage.manager.class.name`` names no loadable plugin: a configuration error (the CLI reports it
    as a usage error, exit 2) naming the key and the value."""


class RemoteChunkError(RemoteStorageError, CorruptRecordError):
    """A stored chunk of a remote object (see :mod:`tiered.format`) fails its check: its crc32c does not match the
    manifest's, its AES-GCM tag does not verify (a flipped byte, a chunk moved from another position or segment, a
    wrong key) or it does not decompress to its recorded size. Names the object (``key``), the chunk (``chunk``,
    counted from 0) and the segment (``segment_id``)."""

    key: str
    chunk: int
    segment_id: str


class EncryptionKeyNotFoundError(RemoteStorageError):
    """A segment's data key is wrapped under a key pair (``key_id``) that the configured key ring does not hold; the
    message names it and the ring's ids."""

    key_id: str


def one_line_cause(error: BaseException) -> str:
    """An error in one line, with its innermost cause where another error wraps it
    (``RemoteStorageError: ... <- OSError: [Errno 28] No space left on device: ...``)."""
    inner = error
    for _ in range(10):  # (a cycle of causes ends here)
        nxt = inner.__cause__ or (None if inner.__suppress_context__ else inner.__context__)
        if nxt is None:
            break
        inner = nxt
    line = f"{type(error).__name__}: {error}"
    return line if inner is error else f"{line} <- {type(inner).__name__}: {inner}"
