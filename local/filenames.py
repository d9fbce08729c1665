"""File names of a Kafka log dir, in one pure module (Kafka's ``LogFileUtils``).

A segment is named by its base offset, zero-padded to 20 digits, plus a suffix per file kind. Transient
states append a second suffix (``.deleted``, ``.cleaned``, ``.swap``) to the full name. Nothing here
touches the file system.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
TXN_INDEX_FILE_SUFFIX = ".txnindex"
PRODUCER_SNAPSHOT_FILE_SUFFIX = ".snapshot"

DELETED_FILE_SUFFIX = ".deleted"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"
TMP_FILE_SUFFIX = ".tmp"

TRANSIENT_SUFFIXES = (DELETED_FILE_SUFFIX, CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)
INDEX_SUFFIXES = (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX)
SEGMENT_SUFFIXES = (LOG_FILE_SUFFIX, *INDEX_SUFFIXES)

LEADER_EPOCH_CHECKPOINT_FILENAME = "leader-epoch-checkpoint"
PARTITION_METADATA_FILENAME = "partition.metadata"
RECOVERY_POINT_CHECKPOINT_FILENAME = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILENAME = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILENAME = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILENAME = ".kafka_cleanshutdown"
FEATURES_FILENAME = "tiered-features.properties"
LOST_OFFSETS_FILENAME = "tiered-lost-offsets"  # offsets a recovery cut out of a log (local.lost_offsets)

_PREFIX_RE = re.compile(r"^(\d{20})\.")
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def filename_prefix_from_offset(offset: int) -> str:
    """The 20-digit zero-padded form of ``offset`` that starts every segment file name."""
    if offset < 0:
        raise ValueError(f"segment base offset must be >= 0, got {offset}")
    return f"{offset:020d}"


def log_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix_from_offset(offset)}{LOG_FILE_SUFFIX}{suffix}"


def offset_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix_from_offset(offset)}{INDEX_FILE_SUFFIX}{suffix}"


def time_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix_from_offset(offset)}{TIME_INDEX_FILE_SUFFIX}{suffix}"


def transaction_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix_from_offset(offset)}{TXN_INDEX_FILE_SUFFIX}{suffix}"


def producer_snapshot_file(directory: Path, offset: int) -> Path:
    return directory / f"{filename_prefix_from_offset(offset)}{PRODUCER_SNAPSHOT_FILE_SUFFIX}"


def offset_from_file_name(name: str | Path) -> int:
    """The base offset a segment (or snapshot) file name starts with.

    Raises ValueError when the name does not start with 20 digits and a dot.
    """
    base = Path(name).name
    match = _PREFIX_RE.match(base)
    if match is None:
        raise ValueError(f"not a segment file name (expected 20 digits and a suffix): {base!r}")
    return int(match.group(1))


def strip_transient_suffix(name: str) -> str:
    """``00..0.log.swap`` -> ``00..0.log``; a name without a transient suffix is returned as is."""
    for suffix in TRANSIENT_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def companion_log_file(index_path: str | Path) -> Path:
    """The ``.log`` beside an index file, keeping a transient suffix: ``0.index.swap`` -> ``0.log.swap``."""
    path = Path(index_path)
    name = path.name
    transient = ""
    for suffix in TRANSIENT_SUFFIXES:
        if name.endswith(suffix):
            transient, name = suffix, name[: -len(suffix)]
            break
    for suffix in INDEX_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return path.with_name(f"{name}{LOG_FILE_SUFFIX}{transient}")


def validate_topic(topic: str) -> str:
    if not _TOPIC_RE.match(topic) or topic in (".", ".."):
        raise ValueError(f"invalid topic name {topic!r}: must match [a-zA-Z0-9._-]{{1,249}} and not be '.' or '..'")
    return topic


def colliding_topic(topic: str, existing: Iterable[str]) -> str | None:
    """The topic of ``existing`` whose name collides with ``topic`` (the same once '.' is read as '_', as Kafka's
    ``Topic.hasCollision``: their metric names would be one), or None. A topic does not collide with itself."""
    unified = topic.replace(".", "_")
    return next((other for other in existing if other != topic and other.replace(".", "_") == unified), None)


PARTITION_MAX = 2**31 - 1  # Kafka's partition numbers are int32s


def validate_partition(partition: object) -> int:
    """``partition`` when it is a partition number (an int in 0..2^31-1), else ValueError saying so."""
    if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition <= PARTITION_MAX:
        raise ValueError(f"invalid partition {partition!r}: must be a whole number in 0..{PARTITION_MAX}")
    return partition


def partition_dir_name(topic: str, partition: int) -> str:
    validate_topic(topic)
    validate_partition(partition)
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """``foo-bar-3`` -> ``("foo-bar", 3)``. Raises ValueError for names that are not ``topic-partition``."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"not a partition directory name (expected <topic>-<partition>): {name!r}")
    validate_topic(topic)
    return topic, validate_partition(int(partition))
