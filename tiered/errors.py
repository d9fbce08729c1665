"""Errors of the remote tier. One root, :class:`TieredStorageError`; each says whether a retry may help."""

from __future__ import annotations

from typing import Any


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


class RemoteStorageTimeoutError(RemoteStorageError, TimeoutError):
    """A store call did not finish in time; retriable."""

    def __init__(self, message: str, **context: Any) -> None:
        context.setdefault("retriable", True)
        super().__init__(message, **context)


class CustomMetadataSizeExceededError(RemoteStorageError):
    """Custom metadata returned by a plugin is larger than remote.log.metadata.custom.metadata.max.bytes."""


class InvalidStateTransitionError(TieredStorageError, ValueError):
    """A remote segment state change that Kafka's state machine does not allow."""


class PluginLoadError(TieredStorageError, ImportError):
    """remote.log.storage.manager.class.name names something that cannot be loaded or is not a plugin."""
