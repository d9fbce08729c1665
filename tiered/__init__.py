"""tiered: Kafka-compatible tiered log storage.

The remote tier (RemoteStorageManager plugins, remote log metadata, RemoteLogManager, the caches) and the
``tiered`` CLI. Names load lazily so that ``tiered dump`` starts fast and Spark is never imported unasked; the
``TYPE_CHECKING`` imports give type checkers the real names.

``open_log_manager(config)`` is ``local.LogManager(config)`` with this package's remote tier, built by the
composition root (:mod:`tiered.composition`, which also gives ``build_remote_tier``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tiered.cache.index_cache import RemoteIndexCache as RemoteIndexCache
    from tiered.composition import build_remote_tier as build_remote_tier
    from tiered.composition import open_log_manager as open_log_manager
    from tiered.remote_log_manager import RemoteLogManager as RemoteLogManager
    from tiered.rlmm import RemoteLogMetadataManager as RemoteLogMetadataManager
    from tiered.rsm import (
        IndexType as IndexType,
    )
    from tiered.rsm import (
        LogSegmentData as LogSegmentData,
    )
    from tiered.rsm import (
        RemoteLogSegmentId as RemoteLogSegmentId,
    )
    from tiered.rsm import (
        RemoteLogSegmentMetadata as RemoteLogSegmentMetadata,
    )
    from tiered.rsm import (
        RemoteLogSegmentMetadataUpdate as RemoteLogSegmentMetadataUpdate,
    )
    from tiered.rsm import (
        RemoteLogSegmentState as RemoteLogSegmentState,
    )
    from tiered.rsm import (
        RemoteStorageManager as RemoteStorageManager,
    )
    from tiered.rsm import (
        TopicIdPartition as TopicIdPartition,
    )
    from tiered.store import ObjectStore as ObjectStore
    from tiered.store import StoreCapabilities as StoreCapabilities

_EXPORTS = {
    "RemoteStorageManager": "tiered.rsm",
    "RemoteLogSegmentMetadata": "tiered.rsm",
    "RemoteLogSegmentMetadataUpdate": "tiered.rsm",
    "RemoteLogSegmentId": "tiered.rsm",
    "RemoteLogSegmentState": "tiered.rsm",
    "TopicIdPartition": "tiered.rsm",
    "LogSegmentData": "tiered.rsm",
    "IndexType": "tiered.rsm",
    "ObjectStore": "tiered.store",
    "StoreCapabilities": "tiered.store",
    "RemoteIndexCache": "tiered.cache.index_cache",
    "RemoteLogManager": "tiered.remote_log_manager",
    "RemoteLogMetadataManager": "tiered.rlmm",
    "build_remote_tier": "tiered.composition",
    "open_log_manager": "tiered.composition",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tiered' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
