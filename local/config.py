"""Configuration with Kafka's names and defaults: broker keys (``log.*``, ``remote.log.*``...) and topic keys.

``LogConfig.from_properties(path_or_mapping)`` reads a Java-style ``.properties`` file or a mapping of broker keys;
``log_config.topic_config(overrides)`` gives a topic's effective :class:`TopicConfig` (topic keys such as
``segment.bytes`` override the broker's ``log.segment.bytes``). Every invalid value fails at load with a
:class:`ConfigError` naming the key, the value and the allowed range; unknown keys are logged as warnings.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local.errors import ConfigError
from local.features import large_index_finalized
from local.properties import parse_properties as parse_properties  # re-exported: its home was here
from local.properties import read_properties
from local.records.constants import INT32_MAX

logger = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
INT_MAX = INT32_MAX
MIB = 1024 * 1024
LARGE_INDEX_HINT = "tiered features upgrade --release-version 4.4 --config <file>"


# Value parsing -------------------------------------------------------------------------------------------

def _bad(key: str, value: Any, why: str) -> ConfigError:
    return ConfigError(f"Invalid value {value} for configuration {key}: {why}", key=key, value=value)


def _long(lo: int | None = None, hi: int = LONG_MAX) -> Callable[[str, Any], int]:
    def conv(key: str, value: Any) -> int:
        if isinstance(value, bool):
            raise _bad(key, value, "expected a whole number")
        try:
            v = int(str(value).strip())
        except ValueError:
            raise _bad(key, value, "expected a whole number") from None
        if lo is not None and v < lo:
            raise _bad(key, value, f"must be at least {lo}")
        if v > hi:
            raise _bad(key, value, f"must be at most {hi}")
        return v

    conv.valid = f"[{'...' if lo is None else lo}, {hi}]"  # type: ignore[attr-defined]  # for docs/configuration.md
    return conv


def _double(lo: float | None = None, hi: float | None = None) -> Callable[[str, Any], float]:
    def conv(key: str, value: Any) -> float:
        if isinstance(value, bool):
            raise _bad(key, value, "expected a number")
        try:
            v = float(str(value).strip())
        except ValueError:
            raise _bad(key, value, "expected a number") from None
        if v != v:  # NaN
            raise _bad(key, value, "expected a number")
        if lo is not None and v < lo:
            raise _bad(key, value, f"must be at least {lo}")
        if hi is not None and v > hi:
            raise _bad(key, value, f"must be at most {hi}")
        return v

    conv.valid = f"[{'...' if lo is None else lo}, {'...' if hi is None else hi}]"  # type: ignore[attr-defined]
    return conv


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise _bad(key, value, "expected true or false")


def _choice(*choices: str) -> Callable[[str, Any], str]:
    def conv(key: str, value: Any) -> str:
        text = str(value).strip()
        if text not in choices:
            raise _bad(key, value, f"must be one of {', '.join(choices)}")
        return text

    conv.valid = ", ".join(choices)  # type: ignore[attr-defined]
    return conv


def _string(key: str, value: Any) -> str:
    return str(value).strip()


def parse_host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6; port 0 picks a free one) as (host, port); ValueError when malformed."""
    host, sep, port_text = str(text).strip().rpartition(":")
    if not sep or not host:
        raise ValueError("expected HOST:PORT, e.g. 127.0.0.1:8080")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ValueError("the port must be a number in 0..65535 (0 picks a free one)")
    return host, port


def _host_port(key: str, value: Any) -> str:
    try:
        parse_host_port(str(value))
    except ValueError as exc:
        raise _bad(key, value, str(exc)) from None
    return str(value).strip()


def _local_dir(key: str, value: Any) -> str:
    """An absolute local path, or a ``file://`` URI of one; empty: unset."""
    text = str(value).strip()
    path = text[len("file://"):] if text.startswith("file://") else text
    if "://" in path:
        raise _bad(key, value, "a local path or file:// URI (Spark reads the copy with its own Parquet reader; an "
                               "object store's URI would need Hadoop's connector and credentials on every executor)")
    if path and not os.path.isabs(path):
        raise _bad(key, value, "an absolute path (a relative one would be each process's own, from where it was "
                               "started)")
    return text


def _gzip_level(key: str, value: Any) -> int:
    """Kafka's GzipCompression level: -1 (the codec's default) or 1..9."""
    level = _long(-1, 9)(key, value)
    if level == 0:
        raise _bad(key, value, "must be -1 or in [1, 9]")
    return level


def _cleanup_policy(key: str, value: Any) -> str:
    parts = [p.strip() for p in str(value).split(",")]
    if any(p not in ("delete", "compact") for p in parts):  # an empty element too, as Kafka's ValidList refuses it
        raise _bad(key, value, "must be a list of delete and/or compact")
    return ",".join(parts)


_bool.valid = "true, false"  # type: ignore[attr-defined]
_string.valid = "a string"  # type: ignore[attr-defined]
_host_port.valid = "HOST:PORT (port 0: a free one)"  # type: ignore[attr-defined]
_cleanup_policy.valid = "a list of delete, compact"  # type: ignore[attr-defined]
_local_dir.valid = "an absolute path or file:// URI"  # type: ignore[attr-defined]
_gzip_level.valid = "[1, 9] or -1"  # type: ignore[attr-defined]


@dataclass(frozen=True)
class _Def:
    topic_key: str | None
    broker_key: str | None
    attr: str
    conv: Callable[[str, Any], Any]
    default: Any


# topic key, broker key (synonym), attribute, converter, Kafka's default
_TOPIC_DEFS = [
    _Def("segment.bytes", "log.segment.bytes", "segment_bytes", _long(MIB), 1024 * MIB),
    _Def("segment.ms", "log.roll.ms", "segment_ms", _long(1), 7 * 24 * 3600 * 1000),
    _Def("segment.jitter.ms", "log.roll.jitter.ms", "segment_jitter_ms", _long(0), 0),
    _Def("segment.index.bytes", "log.index.size.max.bytes", "segment_index_bytes", _long(4, INT_MAX), 10 * MIB),
    _Def("index.interval.bytes", "log.index.interval.bytes", "index_interval_bytes", _long(0, INT_MAX), 4096),
    _Def("flush.messages", "log.flush.interval.messages", "flush_messages", _long(1), LONG_MAX),
    _Def("flush.ms", "log.flush.interval.ms", "flush_ms", _long(0), LONG_MAX),
    _Def("retention.ms", "log.retention.ms", "retention_ms", _long(-1), 7 * 24 * 3600 * 1000),
    _Def("retention.bytes", "log.retention.bytes", "retention_bytes", _long(-1), -1),
    _Def("file.delete.delay.ms", "log.segment.delete.delay.ms", "file_delete_delay_ms", _long(0), 60_000),
    _Def("max.message.bytes", "message.max.bytes", "max_message_bytes", _long(0, INT_MAX), 1_048_588),
    _Def("message.timestamp.type", "log.message.timestamp.type", "message_timestamp_type",
         _choice("CreateTime", "LogAppendTime"), "CreateTime"),
    _Def("message.timestamp.before.max.ms", "log.message.timestamp.before.max.ms", "message_timestamp_before_max_ms",
         _long(0), LONG_MAX),
    _Def("message.timestamp.after.max.ms", "log.message.timestamp.after.max.ms", "message_timestamp_after_max_ms",
         _long(0), 3_600_000),
    _Def("preallocate", "log.preallocate", "preallocate", _bool, False),
    _Def("cleanup.policy", "log.cleanup.policy", "cleanup_policy", _cleanup_policy, "delete"),
    # The log cleaner's topic keys (local.cleaner), with Kafka's broker synonyms and defaults.
    _Def("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", "min_cleanable_dirty_ratio", _double(0, 1), 0.5),
    _Def("delete.retention.ms", "log.cleaner.delete.retention.ms", "delete_retention_ms", _long(0), 86_400_000),
    _Def("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", "min_compaction_lag_ms", _long(0), 0),
    _Def("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", "max_compaction_lag_ms", _long(1), LONG_MAX),
    _Def("min.insync.replicas", "min.insync.replicas", "min_insync_replicas", _long(1, INT_MAX), 1),
    _Def("compression.type", "compression.type", "compression_type",
         _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"), "producer"),
    # KIP-390: the level of the topic's codec where batches are rebuilt in it (Kafka's ranges and defaults).
    _Def("compression.gzip.level", "compression.gzip.level", "compression_gzip_level", _gzip_level, -1),
    _Def("compression.lz4.level", "compression.lz4.level", "compression_lz4_level", _long(1, 17), 9),
    _Def("compression.zstd.level", "compression.zstd.level", "compression_zstd_level", _long(-131072, 22), 3),
    _Def("remote.storage.enable", None, "remote_storage_enable", _bool, False),
    _Def("local.retention.ms", "log.local.retention.ms", "local_retention_ms", _long(-2), -2),
    _Def("local.retention.bytes", "log.local.retention.bytes", "local_retention_bytes", _long(-2), -2),
    _Def("remote.log.copy.disable", None, "remote_log_copy_disable", _bool, False),
    _Def("remote.log.delete.on.disable", None, "remote_log_delete_on_disable", _bool, False),
    _Def("remote.log.columnar.enable", None, "remote_log_columnar_enable", _bool, False),
    _Def("remote.log.columnar.file.bytes", None, "remote_log_columnar_file_bytes", _long(1), 128 * MIB),
    _Def("remote.log.columnar.file.delete.delay.ms", None, "remote_log_columnar_file_delete_delay_ms", _long(0),
         3_600_000),
]

_BROKER_DEFS = [
    _Def(None, "broker.id", "broker_id", _long(-1, INT_MAX), 0),
    # The Kafka protocol listener of `tiered run --kafka-listen` (tiered/kafka/): Kafka's keys and defaults, but
    # queued.max.request.bytes (Kafka: -1, no bound), so that what clients send is bounded in memory.
    _Def(None, "socket.request.max.bytes", "socket_request_max_bytes", _long(1, INT_MAX), 104_857_600),
    _Def(None, "queued.max.request.bytes", "queued_max_request_bytes", _long(1), 512 * MIB),
    _Def(None, "fetch.max.bytes", "fetch_max_bytes", _long(1024, INT_MAX), 57_671_680),
    _Def(None, "connections.max.idle.ms", "connections_max_idle_ms", _long(1), 600_000),
    _Def(None, "max.connections", "max_connections", _long(0, INT_MAX), INT_MAX),
    _Def(None, "num.io.threads", "num_io_threads", _long(1, INT_MAX), 8),
    _Def(None, "auto.create.topics.enable", "auto_create_topics_enable", _bool, True),
    _Def(None, "num.partitions", "num_partitions", _long(1, INT_MAX), 1),
    _Def(None, "delete.topic.enable", "delete_topic_enable", _bool, True),
    _Def(None, "offsets.topic.num.partitions", "offsets_topic_num_partitions", _long(1, INT_MAX), 50),
    _Def(None, "offsets.topic.segment.bytes", "offsets_topic_segment_bytes", _long(MIB, INT_MAX), 100 * MIB),
    _Def(None, "offsets.retention.minutes", "offsets_retention_minutes", _long(1, INT_MAX), 10_080),
    _Def(None, "offsets.retention.check.interval.ms", "offsets_retention_check_interval_ms", _long(1), 600_000),
    _Def(None, "offset.metadata.max.bytes", "offset_metadata_max_bytes", _long(0, INT_MAX), 4096),
    _Def(None, "group.initial.rebalance.delay.ms", "group_initial_rebalance_delay_ms", _long(0, INT_MAX), 3000),
    _Def(None, "group.min.session.timeout.ms", "group_min_session_timeout_ms", _long(0, INT_MAX), 6000),
    _Def(None, "group.max.session.timeout.ms", "group_max_session_timeout_ms", _long(0, INT_MAX), 1_800_000),
    _Def(None, "transaction.state.log.num.partitions", "transaction_state_log_num_partitions", _long(1, INT_MAX), 50),
    _Def(None, "transaction.state.log.segment.bytes", "transaction_state_log_segment_bytes", _long(MIB, INT_MAX),
         100 * MIB),
    _Def(None, "transaction.abort.timed.out.transaction.cleanup.interval.ms",
         "transaction_abort_timed_out_transaction_cleanup_interval_ms", _long(1, INT_MAX), 10_000),
    _Def(None, "num.recovery.threads.per.data.dir", "num_recovery_threads_per_data_dir", _long(1, INT_MAX), 1),
    _Def(None, "num.segment.loading.threads.per.data.dir", "num_segment_loading_threads_per_data_dir", _long(1, INT_MAX), 1),
    _Def(None, "log.retention.check.interval.ms", "log_retention_check_interval_ms", _long(1), 300_000),
    _Def(None, "log.flush.scheduler.interval.ms", "log_flush_scheduler_interval_ms", _long(1), LONG_MAX),
    _Def(None, "log.flush.offset.checkpoint.interval.ms", "log_flush_offset_checkpoint_interval_ms", _long(0, INT_MAX), 60_000),
    _Def(None, "log.flush.start.offset.checkpoint.interval.ms", "log_flush_start_offset_checkpoint_interval_ms",
         _long(0, INT_MAX), 60_000),
    _Def(None, "producer.id.expiration.ms", "producer_id_expiration_ms", _long(1, INT_MAX), 86_400_000),
    _Def(None, "transaction.max.timeout.ms", "transaction_max_timeout_ms", _long(1, INT_MAX), 900_000),
    _Def(None, "remote.log.storage.system.enable", "remote_log_storage_system_enable", _bool, False),
    _Def(None, "remote.log.storage.manager.class.name", "remote_log_storage_manager_class_name", _string,
         "tiered.backends.local_dir.LocalDirRemoteStorageManager"),
    _Def(None, "remote.log.storage.manager.class.path", "remote_log_storage_manager_class_path", _string, ""),
    _Def(None, "remote.log.storage.manager.impl.prefix", "remote_log_storage_manager_impl_prefix", _string, "rsm.config."),
    # "" = chosen by the plugin: "bucket" (beside the segments) for an object-store backend, else "local" (tiered.rlmm)
    _Def(None, "remote.log.metadata.manager.class.name", "remote_log_metadata_manager_class_name", _string, ""),
    _Def(None, "remote.log.metadata.manager.impl.prefix", "remote_log_metadata_manager_impl_prefix", _string, "rlmm.config."),
    _Def(None, "remote.log.metadata.custom.metadata.max.bytes", "remote_log_metadata_custom_metadata_max_bytes",
         _long(0, INT_MAX), 128),
    _Def(None, "remote.log.index.file.cache.total.size.bytes", "remote_log_index_file_cache_total_size_bytes",
         _long(1), 1024 * MIB),
    _Def(None, "remote.log.manager.task.interval.ms", "remote_log_manager_task_interval_ms", _long(1), 30_000),
    _Def(None, "remote.log.manager.copy.max.bytes.per.second", "remote_log_manager_copy_max_bytes_per_second",
         _long(1), LONG_MAX),
    _Def(None, "remote.log.manager.fetch.max.bytes.per.second", "remote_log_manager_fetch_max_bytes_per_second",
         _long(1), LONG_MAX),
    _Def(None, "remote.log.manager.copier.thread.pool.size", "remote_log_manager_copier_thread_pool_size", _long(1, INT_MAX), 10),
    _Def(None, "remote.log.manager.expiration.thread.pool.size", "remote_log_manager_expiration_thread_pool_size",
         _long(1, INT_MAX), 10),
    # Ours (no Kafka equivalent): copy segments in a child process, see tiered/copier_process.py.
    _Def(None, "remote.log.manager.copier.process.enable", "remote_log_manager_copier_process_enable", _bool, True),
    _Def(None, "remote.log.reader.threads", "remote_log_reader_threads", _long(1, INT_MAX), 10),
    _Def(None, "remote.log.reader.max.pending.tasks", "remote_log_reader_max_pending_tasks", _long(1, INT_MAX), 100),
    _Def(None, "remote.fetch.max.wait.ms", "remote_fetch_max_wait_ms", _long(1, INT_MAX), 500),
    _Def(None, "remote.log.segment.cache.dir", "remote_log_segment_cache_dir", _string, ""),
    _Def(None, "remote.log.columnar.dir", "remote_log_columnar_dir", _local_dir, ""),
    _Def(None, "remote.log.segment.cache.total.size.bytes", "remote_log_segment_cache_total_size_bytes", _long(0), 2048 * MIB),
    _Def(None, "remote.log.segment.cache.chunk.size.bytes", "remote_log_segment_cache_chunk_size_bytes",
         _long(4096, INT_MAX), 4 * MIB),
    _Def(None, "remote.log.segment.cache.prefetch.chunks", "remote_log_segment_cache_prefetch_chunks", _long(0, 64), 2),
    _Def(None, "remote.log.segment.cache.plaintext.disk.enable", "remote_log_segment_cache_plaintext_disk_enable",
         _bool, False),
    # Kafka's CleanerConfig (local.cleaner): the log cleaner threads of LogManager.
    _Def(None, "log.cleaner.enable", "log_cleaner_enable", _bool, True),
    _Def(None, "log.cleaner.threads", "log_cleaner_threads", _long(0, INT_MAX), 1),
    _Def(None, "log.cleaner.backoff.ms", "log_cleaner_backoff_ms", _long(0), 15_000),
    _Def(None, "log.cleaner.dedupe.buffer.size", "log_cleaner_dedupe_buffer_size", _long(0), 128 * MIB),
    _Def(None, "log.cleaner.io.buffer.load.factor", "log_cleaner_io_buffer_load_factor", _double(0, 1), 0.9),
    _Def(None, "log.cleaner.io.buffer.size", "log_cleaner_io_buffer_size", _long(0, INT_MAX), 512 * 1024),
    _Def(None, "log.cleaner.io.max.bytes.per.second", "log_cleaner_io_max_bytes_per_second", _double(0),
         1.7976931348623157e308),
    # Ours: where `tiered run` serves /metrics, produce, consume and /health (tiered/http_server.py).
    _Def(None, "tiered.http.listen", "tiered_http_listen", _host_port, "127.0.0.1:8080"),
    _Def(None, "tiered.http.max.connections", "tiered_http_max_connections", _long(1, INT_MAX), 64),
    _Def(None, "tiered.http.idle.timeout.ms", "tiered_http_idle_timeout_ms", _long(1), 30_000),
]

# Broker keys Kafka spells in hours/minutes too: (key, factor to ms, the ms key it feeds)
_TIME_SYNONYMS = [
    ("log.retention.minutes", 60_000, "log.retention.ms"),
    ("log.retention.hours", 3_600_000, "log.retention.ms"),
    ("log.roll.hours", 3_600_000, "log.roll.ms"),
    ("log.roll.jitter.hours", 3_600_000, "log.roll.jitter.ms"),
]

_TOPIC_BY_KEY = {d.topic_key: d for d in _TOPIC_DEFS if d.topic_key}
_KNOWN_BROKER_KEYS = {d.broker_key for d in _TOPIC_DEFS + _BROKER_DEFS if d.broker_key} | {
    "log.dirs", "log.dir", *[k for k, _, _ in _TIME_SYNONYMS], "remote.log.tier.factory",
}


@dataclass(frozen=True, slots=True)
class KeyDefinition:
    """One configuration key as ``docs/configuration.md`` lists it (generated by ``python -m tiered.docsgen``)."""

    key: str
    scope: str  # "topic" (set per topic; ``synonym`` is the broker key giving its default) or "broker"
    synonym: str | None
    default: Any
    valid: str


def key_definitions() -> list[KeyDefinition]:
    """Every key the configuration defines, topic keys first, in definition order. Keys read elsewhere
    (``log.dirs``, the hour/minute synonyms, ``remote.log.tier.factory``) are in :data:`OTHER_BROKER_KEYS`."""
    out = [KeyDefinition(d.topic_key, "topic", d.broker_key, d.default, getattr(d.conv, "valid", ""))
           for d in _TOPIC_DEFS if d.topic_key]
    out += [KeyDefinition(d.broker_key, "broker", None, d.default, getattr(d.conv, "valid", ""))
            for d in _BROKER_DEFS if d.broker_key]
    return out


#: Broker keys outside the definitions above: (key, what it takes).
OTHER_BROKER_KEYS: dict[str, str] = {
    "log.dirs": "required: a comma-separated list of data dirs",
    "log.dir": "a single data dir, used when log.dirs is not set",
    **{key: f"a whole number; sets {target} to it times {factor} when {target} is not set"
       for key, factor, target in _TIME_SYNONYMS},
    "remote.log.tier.factory": "module:callable building the remote tier from the LogConfig (tests and embedders)",
}


@dataclass(frozen=True)
class TopicConfig:
    """A topic's effective configuration (topic keys in snake_case)."""

    segment_bytes: int
    segment_ms: int
    segment_jitter_ms: int
    segment_index_bytes: int
    index_interval_bytes: int
    flush_messages: int
    flush_ms: int
    retention_ms: int
    retention_bytes: int
    file_delete_delay_ms: int
    max_message_bytes: int
    message_timestamp_type: str
    message_timestamp_before_max_ms: int
    message_timestamp_after_max_ms: int
    preallocate: bool
    cleanup_policy: str
    min_cleanable_dirty_ratio: float
    delete_retention_ms: int
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    min_insync_replicas: int
    compression_type: str
    compression_gzip_level: int
    compression_lz4_level: int
    compression_zstd_level: int
    remote_storage_enable: bool
    local_retention_ms: int
    local_retention_bytes: int
    remote_log_copy_disable: bool
    remote_log_delete_on_disable: bool
    remote_log_columnar_enable: bool
    remote_log_columnar_file_bytes: int
    remote_log_columnar_file_delete_delay_ms: int

    @property
    def compact(self) -> bool:
        """``cleanup.policy`` holds ``compact``: the log cleaner dedupes it (Kafka's ``LogConfig.compact``)."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def compression_level(self) -> int | None:
        """The level batches rebuilt in ``compression.type``'s codec take (KIP-390's per-codec keys); None for the
        codec's own default (gzip's -1) or a codec without levels."""
        level = {"gzip": self.compression_gzip_level, "lz4": self.compression_lz4_level,
                 "zstd": self.compression_zstd_level}.get(self.compression_type)
        return None if level is None or level == -1 else level

    @property
    def max_segment_ms(self) -> int:
        """How long a segment stays active at most (Kafka's ``LogConfig.maxSegmentMs``): ``segment.ms``, or a
        compacted topic's ``max.compaction.lag.ms`` where that is shorter (KIP-354: a record must become cleanable
        within it, and the active segment never is)."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @property
    def delete(self) -> bool:
        """``cleanup.policy`` holds ``delete``: retention deletes its old segments."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def effective_local_retention_ms(self) -> int:
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        return self.retention_bytes if self.local_retention_bytes == -2 else self.local_retention_bytes

    def to_properties(self) -> dict[str, str]:
        out = {}
        for d in _TOPIC_DEFS:
            v = getattr(self, d.attr)
            out[d.topic_key or d.attr] = str(v).lower() if isinstance(v, bool) else str(v)
        return out


def _validate_topic(cfg: TopicConfig, large_index_enabled: bool, source: str, *, broker_remote: bool = False,
                    persisted: bool = False) -> None:
    """The rules across keys. The local retention ones apply to a topic with ``remote.storage.enable=true`` and, as
    Kafka's ``validateBrokerLogConfigValues`` does, to the broker's defaults when ``broker_remote`` (the broker has
    ``remote.log.storage.system.enable=true``), named by their broker keys."""
    if cfg.segment_bytes > INT_MAX and not large_index_enabled:
        raise ConfigError(
            f"Invalid value {cfg.segment_bytes} for configuration {source}: segments above {INT_MAX} bytes need the "
            f"large-index feature (KIP-1333); finalize it first with `{LARGE_INDEX_HINT}`",
            key=source, value=cfg.segment_bytes,
        )
    if cfg.min_compaction_lag_ms > cfg.max_compaction_lag_ms:
        # Kafka's LogConfig.validateValues (topic configs, and the broker defaults through
        # validateBrokerLogConfigValues): a record could never be both old enough and not too old to be compacted.
        broker = source.startswith("log.")
        lo, hi = (("log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms") if broker
                  else ("min.compaction.lag.ms", "max.compaction.lag.ms"))
        raise ConfigError(
            f"conflict topic config setting {lo} ({cfg.min_compaction_lag_ms}) > {hi} ({cfg.max_compaction_lag_ms})",
            key=lo, value=cfg.min_compaction_lag_ms)
    if cfg.remote_storage_enable and cfg.compact:
        # Kafka's LogConfig.validateNoRemoteStorageForCompactedTopic: a cleaner rewriting segments the remote tier
        # already holds has no remote counterpart.
        raise ConfigError(
            f"Invalid value true for configuration remote.storage.enable: remote log storage is unsupported for "
            f"compacted topics (cleanup.policy={cfg.cleanup_policy}); use cleanup.policy=delete, or keep the topic "
            "local", key="remote.storage.enable", value=True)
    if (cfg.remote_storage_enable or broker_remote) and not persisted:
        # (Not for a partition's persisted config at a start: Kafka checks these on create and alter only, and a
        # broker default changed since, or a rule added since, must not take the partition offline.)
        prefix = "log." if broker_remote else ""
        lrb, rb = cfg.local_retention_bytes, cfg.retention_bytes
        # Kafka's LogConfig.validateRemoteStorageRetentionSize/Time: -1 (keep for ever locally) under a finite total
        # retention is refused, as a local limit above the total one is.
        if lrb == -1 and rb != -1:
            raise _bad(f"{prefix}local.retention.bytes", lrb,
                       f"Value must not be -1 as {prefix}retention.bytes value is set as {rb}")
        if lrb not in (-2, -1) and rb != -1 and lrb > rb:
            raise _bad(f"{prefix}local.retention.bytes", lrb, f"must not exceed {prefix}retention.bytes ({rb})")
        lrm, rm = cfg.local_retention_ms, cfg.retention_ms
        if lrm == -1 and rm != -1:
            raise _bad(f"{prefix}local.retention.ms", lrm,
                       f"Value must not be -1 as {prefix}retention.ms value is set as {rm}")
        if lrm not in (-2, -1) and rm != -1 and lrm > rm:
            raise _bad(f"{prefix}local.retention.ms", lrm, f"must not exceed {prefix}retention.ms ({rm})")


class LogConfig:
    """The broker's log configuration; see the module docstring."""

    broker_id: int
    socket_request_max_bytes: int
    queued_max_request_bytes: int
    fetch_max_bytes: int
    connections_max_idle_ms: int
    max_connections: int
    num_io_threads: int
    auto_create_topics_enable: bool
    num_partitions: int
    delete_topic_enable: bool
    offsets_topic_num_partitions: int
    offsets_topic_segment_bytes: int
    offsets_retention_minutes: int
    offsets_retention_check_interval_ms: int
    offset_metadata_max_bytes: int
    group_initial_rebalance_delay_ms: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    transaction_state_log_num_partitions: int
    transaction_state_log_segment_bytes: int
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int
    num_recovery_threads_per_data_dir: int
    num_segment_loading_threads_per_data_dir: int
    log_retention_check_interval_ms: int
    log_flush_scheduler_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    log_flush_start_offset_checkpoint_interval_ms: int
    producer_id_expiration_ms: int
    transaction_max_timeout_ms: int
    remote_log_storage_system_enable: bool
    remote_log_storage_manager_class_name: str
    remote_log_storage_manager_class_path: str
    remote_log_storage_manager_impl_prefix: str
    remote_log_metadata_manager_class_name: str
    remote_log_metadata_manager_impl_prefix: str
    remote_log_metadata_custom_metadata_max_bytes: int
    remote_log_index_file_cache_total_size_bytes: int
    remote_log_manager_task_interval_ms: int
    remote_log_manager_copy_max_bytes_per_second: int
    remote_log_manager_fetch_max_bytes_per_second: int
    remote_log_manager_copier_thread_pool_size: int
    remote_log_manager_expiration_thread_pool_size: int
    remote_log_manager_copier_process_enable: bool
    remote_log_reader_threads: int
    remote_log_reader_max_pending_tasks: int
    remote_fetch_max_wait_ms: int
    remote_log_segment_cache_dir: str
    remote_log_columnar_dir: str
    remote_log_segment_cache_total_size_bytes: int
    remote_log_segment_cache_chunk_size_bytes: int
    remote_log_segment_cache_prefetch_chunks: int
    remote_log_segment_cache_plaintext_disk_enable: bool
    log_cleaner_enable: bool
    log_cleaner_threads: int
    log_cleaner_backoff_ms: int
    log_cleaner_dedupe_buffer_size: int
    log_cleaner_io_buffer_load_factor: float
    log_cleaner_io_buffer_size: int
    log_cleaner_io_max_bytes_per_second: float
    tiered_http_listen: str
    tiered_http_max_connections: int
    tiered_http_idle_timeout_ms: int

    def __init__(self, originals: Mapping[str, Any], large_index_enabled: bool | None = None) -> None:
        props = {str(k).strip(): v for k, v in originals.items()}
        self.originals = dict(props)
        dirs = props.get("log.dirs", props.get("log.dir"))
        if dirs is None or not str(dirs).strip():
            raise ConfigError("Missing required configuration log.dirs (a comma-separated list of data dirs)", key="log.dirs")
        if isinstance(dirs, (list, tuple)) and all(isinstance(d, (str, os.PathLike)) for d in dirs):
            dirs = ",".join(os.fspath(d) for d in dirs)  # (a list of paths: what a Python caller means by "dirs")
        elif isinstance(dirs, os.PathLike):
            dirs = os.fspath(dirs)
        if not isinstance(dirs, str):  # (str() of bytes or of a list made a directory named by its repr)
            raise ConfigError(f"Invalid value {dirs!r} for configuration log.dirs: a comma-separated list of data dirs "
                              "(a str, a path, or a list of them)", key="log.dirs")
        self.log_dirs: list[Path] = [Path(p.strip()) for p in dirs.split(",") if p.strip()]
        if not self.log_dirs:  # (",,": a list of variables that all expanded empty)
            raise ConfigError(f"log.dirs={dirs!r} names no data dir (a comma-separated list of data dirs)",
                              key="log.dirs")
        seen: dict[Path, Path] = {}
        for listed in self.log_dirs:
            same = seen.setdefault(listed.resolve(), listed)
            if same is not listed:  # (its lock, taken twice, would blame "another process")
                raise ConfigError(f"log.dirs names one data dir twice: {same} and {listed}", key="log.dirs")
        for key, factor, target in _TIME_SYNONYMS:
            if key in props and target not in props:
                props[target] = _long(-1 if "retention" in key else 0)(key, props[key]) * factor
                if props[target] < 0:
                    props[target] = -1
        prefix = str(props.get("remote.log.storage.manager.impl.prefix", "rsm.config."))
        self.rsm_config: dict[str, str] = {k[len(prefix):]: str(v) for k, v in props.items() if k.startswith(prefix)}
        rlmm_prefix = str(props.get("remote.log.metadata.manager.impl.prefix", "rlmm.config."))
        self.rlmm_config: dict[str, str] = {k[len(rlmm_prefix):]: str(v) for k, v in props.items() if k.startswith(rlmm_prefix)}
        for key in props:
            if key not in _KNOWN_BROKER_KEYS and not key.startswith((prefix, rlmm_prefix)):
                logger.warning("unknown configuration key %r is ignored", key)
        self._topic_defaults: dict[str, Any] = {}
        for d in _TOPIC_DEFS:
            raw = props.get(d.broker_key) if d.broker_key else None
            self._topic_defaults[d.attr] = d.default if raw is None else d.conv(d.broker_key or d.attr, raw)
        for d in _BROKER_DEFS:
            raw = props.get(d.broker_key) if d.broker_key else None
            setattr(self, d.attr, d.default if raw is None else d.conv(d.broker_key or d.attr, raw))
        self.remote_tier_factory: str | None = props.get("remote.log.tier.factory")
        if large_index_enabled is None:
            large_index_enabled = large_index_finalized(self.log_dirs)
        self.large_index_enabled = large_index_enabled
        self._default_topic = TopicConfig(**self._topic_defaults)
        _validate_topic(self._default_topic, large_index_enabled, "log.segment.bytes",
                        broker_remote=self.remote_log_storage_system_enable)

    @classmethod
    def from_properties(cls, source: str | os.PathLike[str] | Mapping[str, Any], *,
                        large_index_enabled: bool | None = None) -> LogConfig:
        props = dict(source) if isinstance(source, Mapping) else read_properties(source)
        return cls(props, large_index_enabled=large_index_enabled)

    read_properties = staticmethod(read_properties)

    def topic_config(self, overrides: Mapping[str, Any] | None = None, *, persisted: bool = False) -> TopicConfig:
        """The effective config of a topic with ``overrides`` (topic keys) applied over the broker defaults.

        ``persisted``: the overrides a partition dir holds, loaded at a start: the relations between local and total
        retention are not checked (Kafka checks them when a topic is created or altered only)."""
        if not overrides:
            return self._default_topic
        values = dict(self._topic_defaults)
        for key, raw in overrides.items():
            d = _TOPIC_BY_KEY.get(str(key).strip())
            if d is None:
                raise ConfigError(f"Unknown topic configuration {key!r}", key=key)
            values[d.attr] = d.conv(d.topic_key or d.attr, raw)
        cfg = TopicConfig(**values)
        _validate_topic(cfg, self.large_index_enabled, "segment.bytes", persisted=persisted)
        return cfg

    def with_overrides(self, **attrs: Any) -> LogConfig:
        clone = object.__new__(LogConfig)
        clone.__dict__.update(self.__dict__)
        clone.__dict__.update(attrs)
        return clone

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"log.dirs": ",".join(str(p) for p in self.log_dirs)}
        for d in _BROKER_DEFS:
            out[d.broker_key or d.attr] = getattr(self, d.attr)
        for d in _TOPIC_DEFS:
            out[d.broker_key or d.topic_key or d.attr] = self._topic_defaults[d.attr]
        return out

    def __repr__(self) -> str:
        return f"LogConfig(log_dirs={[str(p) for p in self.log_dirs]}, large_index_enabled={self.large_index_enabled})"


def topic_config_keys() -> dict[str, str | None]:
    """Every topic-level key with its broker-level synonym (None when the key has none), in definition order:
    what ``tiered topics describe`` lists and where each default comes from."""
    return {d.topic_key: d.broker_key for d in _TOPIC_DEFS if d.topic_key}
