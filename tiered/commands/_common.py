"""What several commands share: building the broker configuration from ``--config``/``--log-dirs``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from local.config import LogConfig


class UsageError(Exception):
    """A command line that cannot work: reported on stderr with exit code 2."""


def partition_number(text: str) -> int:
    """An argparse type: a partition number, 0..2^31-1 (Kafka's partitions are int32s)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid partition {text!r}: expected a whole number in 0..{2**31 - 1}") from None
    if not 0 <= value <= 2**31 - 1:
        raise argparse.ArgumentTypeError(f"invalid partition {value}: must be in 0..{2**31 - 1}")
    return value


def _whole_number(text: str, least: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected a whole number >= {least}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"invalid value {value}: {what}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (a count of records, batch sizes, partitions)."""
    return _whole_number(text, 1, "must be >= 1")


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number >= 0 (offsets, sizes that may be empty)."""
    return _whole_number(text, 0, "must be >= 0")


def check_partition_to_write(manager: Any, topic: str, partition: int) -> None:
    """Raise UnknownTopicOrPartitionError when ``topic`` exists without ``partition``: a write (produce, HTTP POST)
    creates a new topic at the partition it names, as Kafka's auto-create does, but never adds a partition to an
    existing topic behind its back (nor a second topic id); ``tiered topics alter --partitions N`` does that."""
    from local.errors import UnknownTopicOrPartitionError

    have = sorted(p for t, p in manager.partitions() if t == topic)
    if have and partition not in have:
        raise UnknownTopicOrPartitionError(
            f"topic {topic} has no partition {partition} (it has {len(have)}: {', '.join(map(str, have[:10]))}"
            f"{', ...' if len(have) > 10 else ''}); to add partitions: tiered topics alter --topic {topic} "
            f"--partitions {partition + 1}", topic=topic, partition=partition)


def check_topic_name(topic: str) -> str:
    """``topic`` when it is a valid topic name, else a UsageError saying why: every command that takes ``--topic``
    refuses a bad name in the same words and with exit code 2, before it opens anything."""
    from local import filenames

    try:
        return filenames.validate_topic(topic)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def load_config(args: argparse.Namespace) -> LogConfig:
    from local.config import LogConfig

    props: dict[str, Any] = {}
    config_file = getattr(args, "config", None)
    if config_file:
        props.update(LogConfig.read_properties(config_file) if hasattr(LogConfig, "read_properties") else _read(config_file))
    if getattr(args, "log_dirs", None):
        props["log.dirs"] = args.log_dirs
    for item in getattr(args, "override", []) or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--override expects KEY=VALUE, got {item!r}")
        props[key.strip()] = value.strip()
    if "log.dirs" not in props and "log.dir" not in props:
        raise UsageError("no data dir: pass --log-dirs DIR or --config FILE with log.dirs")
    return LogConfig.from_properties(props)


def _read(path: str) -> dict[str, str]:
    from local.config import parse_properties

    with open(path, encoding="utf-8") as f:
        return dict(parse_properties(f.read()))


def parse_topic_overrides(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--topic-config expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out
