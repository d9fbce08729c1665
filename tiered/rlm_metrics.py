"""Kafka's RemoteLogManager metrics, registered once per process in a registry.

They use Kafka's names and live in ``local.metrics.REGISTRY`` by default, the registry the project exposes (beside
the log engine's own gauges); every RemoteLogManager of a process adds to them, as the one RemoteLogManager of a
Kafka broker does.
"""

from __future__ import annotations

import threading
from typing import Any

from tiered.ownership import STATES, Ownership
from tiered.rsm import TopicIdPartition


class RemoteLogMetrics:
    """Kafka's RemoteLogManager metrics (RemoteCopy/Fetch/Delete requests, bytes, errors; copy and delete lag;
    remote log size per partition). The process's one set, in the exposed registry: see :func:`remote_log_metrics`."""

    def __init__(self, registry: Any) -> None:
        from prometheus_client import Counter, Enum, Gauge

        r = self.registry = registry  # where they are exposed (`tiered run`'s /metrics serves it)
        self.copy_requests = Counter("RemoteCopyRequestsPerSec", "Segment copies attempted", registry=r)
        self.copy_bytes = Counter("RemoteCopyBytesPerSec", "Bytes copied to the remote tier", registry=r)
        self.copy_errors = Counter("RemoteCopyErrorsPerSec", "Failed segment copies", registry=r)
        self.fetch_requests = Counter("RemoteFetchRequestsPerSec", "Reads served by the remote tier", registry=r)
        self.fetch_bytes = Counter("RemoteFetchBytesPerSec", "Bytes read from the remote tier", registry=r)
        self.fetch_errors = Counter("RemoteFetchErrorsPerSec", "Failed remote reads", registry=r)
        self.delete_requests = Counter("RemoteDeleteRequestsPerSec", "Remote segments deleted", registry=r)
        self.delete_errors = Counter("RemoteDeleteErrorsPerSec", "Failed remote deletes", registry=r)
        labels = ["topic", "partition"]
        self.copy_lag_bytes = Gauge("RemoteCopyLagBytes", "Bytes eligible for copy not yet copied", labels, registry=r)
        self.copy_lag_segments = Gauge("RemoteCopyLagSegments", "Segments eligible for copy not yet copied", labels, registry=r)
        self.delete_lag_bytes = Gauge("RemoteDeleteLagBytes", "Bytes of remote segments pending deletion", labels, registry=r)
        self.delete_lag_segments = Gauge("RemoteDeleteLagSegments", "Remote segments pending deletion", labels, registry=r)
        self.log_size_bytes = Gauge("RemoteLogSizeBytes", "Bytes held in the remote tier", labels, registry=r)
        self.ownership = Enum(
            "RemoteLogOwnership", "Whether this data dir owns the partition's remote data (tiered.ownership): owner, "
            "lost (another data dir claimed it: nothing is copied or deleted here) or wrong_store (the store holds "
            "none of it)", labels, states=list(STATES), registry=r)

    def ownership_changed(self, tip: TopicIdPartition, found: Ownership) -> None:
        """``RemoteLogOwnership`` of ``tip`` follows what the ownership guard found (its ``on_change``)."""
        self.ownership.labels(tip.topic, tip.partition).state(found.state)


_metrics: dict[int, tuple[Any, RemoteLogMetrics]] = {}  # id(registry) -> (the registry, kept alive; its metrics)
_metrics_lock = threading.Lock()


def remote_log_metrics(registry: Any = None) -> RemoteLogMetrics:
    """The RemoteLogManager metrics registered in ``registry`` (default: ``local.metrics.REGISTRY``), created on
    first use: a registry holds one metric of a name, and every manager of the process shares it."""
    if registry is None:
        from local.metrics import REGISTRY

        registry = REGISTRY
    with _metrics_lock:
        held = _metrics.get(id(registry))
        if held is None:
            held = _metrics[id(registry)] = (registry, RemoteLogMetrics(registry))
        return held[1]
