"""tiered: Kafka-compatible tiered log storage.

The remote tier (RemoteStorageManager plugins, remote log metadata, RemoteLogManager, the caches) and the
``tiered`` CLI. Names load lazily so that ``tiered dump`` starts fast and Spark is never imported unasked.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "RemoteStorageManager": "tiered.rsm",
    "RemoteLogSegmentMetadata": "tiered.rsm",
    "RemoteLogSegmentMetadataUpdate": "tiered.rsm",
    "RemoteLogSegmentId": "tiered.rsm",
    "RemoteLogSegmentState": "tiered.rsm",
    "TopicIdPartition": "tiered.rsm",
    "LogSegmentData": "tiered.rsm",
    "IndexType": "tiered.rsm",
    "RemoteIndexCache": "tiered.cache.index_cache",
    "RemoteLogManager": "tiered.remote_log_manager",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tiered' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
