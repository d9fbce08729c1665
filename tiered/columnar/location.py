"""Where a broker keeps the columnar copies, and the settings that cannot go together with them.

``remote.log.columnar.dir`` (broker) names the directory; unset, the local-directory backend's copies go beside its
bucket (``<rsm.config.dir>-columnar``), and other backends have none. A path (or ``file://`` URI) on a filesystem
that Spark's executors see as the writer does (local for ``local[*]``, a shared mount for a cluster): Spark's own
Parquet reader then reads it with no extra jars, which a bucket of S3 or another object store would need (the
Hadoop connector and its credentials). The copy is not kept in the remote tier's bucket for that reason.

``remote.log.columnar.dir`` is an absolute path or ``file://`` URI (:mod:`local.config` refuses another scheme, or a
relative path, which each process would resolve from where it started).

Refused, naming both settings (:func:`check_topic`): ``remote.log.columnar.enable=true`` without pyarrow (the
``columnar`` extra), without a location, in a location that is not a directory (or under a file), without
``remote.storage.enable=true`` (the columnar copy follows the remote segments), or with encrypted remote segments
(``rsm.config.encryption.enabled=true``: the Parquet copy would hold their plaintext; Parquet modular encryption
is not implemented).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from local.errors import ConfigError

if TYPE_CHECKING:
    from local.config import LogConfig, TopicConfig

LOCAL_BACKENDS = ("local", "tiered.backends.local_dir.LocalDirRemoteStorageManager")


def columnar_root(config: LogConfig) -> Path | None:
    """The directory of ``config``'s columnar copies (module docstring), None when it has none."""
    configured = (config.remote_log_columnar_dir or "").strip()
    if configured:
        return Path(configured[len("file://"):] if configured.startswith("file://") else configured)
    name = (config.remote_log_storage_manager_class_name or "").strip()
    bucket = (config.rsm_config.get("dir") or "").strip()
    if name in LOCAL_BACKENDS and bucket:
        path = Path(bucket)
        return path.with_name(path.name + "-columnar")
    return None


def root_problem(root: Path) -> str | None:
    """Why the columnar copies cannot be kept in ``root``, as far as the file system tells now, or None: ``root``,
    or the nearest of its parents that exists, is not a directory."""
    at = root
    while not at.exists():
        if at.parent == at:
            return None
        at = at.parent
    if not at.is_dir():
        return f"{at} is not a directory" if at == root else f"{at}, a parent of {root}, is not a directory"
    return None


def encrypted(config: LogConfig) -> bool:
    return str(config.rsm_config.get("encryption.enabled", "false")).strip().lower() == "true"


MISSING_PYARROW = "the columnar copy is written with pyarrow, which is not installed: pip install 'tiered[columnar]'"


def pyarrow_missing() -> bool:
    return importlib.util.find_spec("pyarrow") is None


def check_topic(config: LogConfig, topic_config: TopicConfig) -> None:
    """Refuse a topic config with ``remote.log.columnar.enable=true`` that cannot work (module docstring)."""
    if not topic_config.remote_log_columnar_enable:
        return
    key = "remote.log.columnar.enable"
    if pyarrow_missing():
        raise ConfigError(f"Invalid value true for configuration {key}: {MISSING_PYARROW}", key=key, value="true")
    if not topic_config.remote_storage_enable:
        raise ConfigError(f"Invalid value true for configuration {key}: the columnar copy follows the remote tier; set "
                          "remote.storage.enable=true on the topic too", key=key, value="true")
    root = columnar_root(config)
    if root is None:
        raise ConfigError(
            f"Invalid value true for configuration {key}: no place for the columnar copy; set remote.log.columnar.dir "
            "in the broker config (a directory Spark's executors can read), or use the local-directory backend",
            key=key, value="true")
    problem = root_problem(root)
    if problem is not None:
        raise ConfigError(f"Invalid value true for configuration {key}: the columnar copy's place "
                          f"(remote.log.columnar.dir) cannot hold it: {problem}", key=key, value="true")
    if encrypted(config):
        raise ConfigError(
            f"Invalid value true for configuration {key}: the remote segments are encrypted "
            "(rsm.config.encryption.enabled=true) and the columnar copy would hold them in plaintext; Parquet "
            "encryption is not supported", key=key, value="true")
