"""What several commands share: building the broker configuration from ``--config``/``--log-dirs``."""

from __future__ import annotations

import argparse
import contextlib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from local.config import LogConfig


class UsageError(Exception):
    """A command line that cannot work: reported on stderr with exit code 2."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command runs (:mod:`tiered.cli`): handled as Ctrl-C is, exit 143."""


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait for the block to end, then act as they would have (their handlers run): an append
    and its count are both done or neither, so that what an interrupted command says it wrote is what it wrote (a
    produce killed between the append's write and its bookkeeping said "nothing written" on a busy machine). Main
    thread only, where Python runs signal handlers; elsewhere the block runs as it is."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple[int, Any]] = []
    previous: dict[int, Any] = {}

    def hold(signum: int, frame: Any) -> None:
        caught.append((signum, frame))
        if len(caught) > 1:  # a second one: the block may hang (a store that does not answer); act at once
            _act(previous[signum], signum, frame)

    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not None:  # (None: set outside Python, which cannot be put back)
            previous[sig] = signal.signal(sig, hold)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if len(caught) == 1:  # (also when the block failed: the interrupt is what was asked for)
            _act(previous[caught[0][0]], *caught[0])


def _act(handler: Any, signum: int, frame: Any) -> None:
    """What ``signum`` would have done under ``handler``."""
    import signal

    if callable(handler):
        handler(signum, frame)  # (raises: KeyboardInterrupt, Terminated)
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signum)


def check_typed_data_dirs(args: argparse.Namespace, config: LogConfig) -> None:
    """A usage error (exit 2) for a data dir typed with ``--log-dirs`` that does not exist, is not a directory or
    holds someone's other files (:func:`local.manager.foreign_dir_reason`): the same answer from every command that never makes one. A dir of the config file that is missing is the
    command's to report (a disk that did not mount is a problem found, not a typo)."""
    from pathlib import Path

    if not getattr(args, "log_dirs", None):
        return
    from local.manager import foreign_dir_reason

    for d in map(Path, config.log_dirs):
        if not d.is_dir():
            raise UsageError(f"no such data dir: {d}" if not d.exists() else f"data dir {d} is not a directory")
        foreign = foreign_dir_reason(d)
        if foreign is not None:
            raise UsageError(foreign)


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


def partition_count(text: str) -> int:
    """An argparse type: a number of partitions, 1..2^31-1 (Kafka's partition count is an int32)."""
    value = _whole_number(text, 1, "must be >= 1")
    if value > 2**31 - 1:
        raise argparse.ArgumentTypeError(f"invalid value {value}: a topic has at most {2**31 - 1} partitions")
    return value


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number >= 0 (offsets, sizes that may be empty)."""
    return _whole_number(text, 0, "must be >= 0")


def non_negative_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds >= 0 (durations, timeouts)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected a number of seconds >= 0") from None
    if not 0 <= value < float("inf"):  # NaN fails both comparisons
        raise argparse.ArgumentTypeError(f"invalid value {text}: expected a number of seconds >= 0")
    return value


def check_partition_to_write(manager: Any, topic: str, partition: int) -> None:
    """Raise UnknownTopicOrPartitionError when a write (produce, HTTP POST) to ``topic``-``partition`` would make a
    partition nobody asked for: a write creates a missing topic with one partition, 0 (as Kafka's auto-create with
    ``num.partitions=1``), never a topic made of partition 5 alone, and never adds a partition to an existing topic
    behind its back (nor a second topic id). ``tiered topics create --partitions N`` and ``tiered topics alter
    --partitions N`` do those."""
    from local.errors import InvalidTopicError, UnknownTopicOrPartitionError
    from tiered.internal_topics import HIDDEN_TOPICS, INTERNAL_TOPICS

    if topic in INTERNAL_TOPICS | HIDDEN_TOPICS:  # (Kafka's INVALID_TOPIC_EXCEPTION, as the listener answers)
        raise InvalidTopicError(f"{topic} is an internal topic: clients cannot write to it (its coordinator does)")
    existing = manager.partitions()
    have = sorted(p for t, p in existing if t == topic)
    if not have:
        from local.filenames import colliding_topic

        other = colliding_topic(topic, {t for t, _ in existing})
        if other is not None:  # (Kafka's Topic.hasCollision, as CreateTopics and the listener's auto-create refuse it)
            raise InvalidTopicError(f"Topic '{topic}' collides with existing topic: {other} (their names are one once "
                                    "'.' is read as '_')")
    if not have and partition != 0:
        raise UnknownTopicOrPartitionError(
            f"topic {topic} does not exist and a write creates a topic only at partition 0 (one partition); for a "
            f"topic of {partition + 1} partitions: tiered topics create --topic {topic} --partitions {partition + 1}",
            topic=topic, partition=partition)
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


def load_config(args: argparse.Namespace, *, large_index_enabled: bool | None = None) -> LogConfig:
    """The broker config of ``--config``, ``--log-dirs`` and ``-o``; ``large_index_enabled`` as
    :class:`local.config.LogConfig` takes it (None: from the data dirs' feature levels)."""
    from local.config import LogConfig

    props: dict[str, Any] = {}
    config_file = getattr(args, "config", None)
    if config_file:
        props.update(LogConfig.read_properties(config_file))  # ISO-8859-1, as Java reads a .properties file
    if getattr(args, "log_dirs", None):
        props["log.dirs"] = args.log_dirs
    for item in getattr(args, "override", []) or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--override expects KEY=VALUE, got {item!r}")
        if not key.strip():
            raise UsageError(f"--override expects KEY=VALUE with a key, got {item!r}")
        props[key.strip()] = value.strip()
    if "log.dirs" not in props and "log.dir" not in props:
        raise UsageError("no data dir: pass --log-dirs DIR or --config FILE with log.dirs")
    return LogConfig.from_properties(props, large_index_enabled=large_index_enabled)


def parse_topic_overrides(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--topic-config expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def own_places(config: LogConfig, config_file: str | None = None) -> list[tuple[str, Path]]:
    """What a command must never write over or into, each with what it is: the data dirs, the local-directory remote
    tier (``rsm.config.dir``), the remote log metadata directory (``rlmm.config.dir``), the columnar copies and the
    config file."""
    from pathlib import Path

    from tiered.columnar.location import columnar_root

    places = [("the data dir", Path(d)) for d in config.log_dirs]
    for what, value in (("the remote tier's directory (rsm.config.dir)", config.rsm_config.get("dir")),
                        ("the remote log metadata directory (rlmm.config.dir)", config.rlmm_config.get("dir"))):
        if value and value.strip() and "://" not in value:
            places.append((what, Path(value.strip())))
    try:
        columnar = columnar_root(config)
    except ValueError:
        columnar = None
    if columnar is not None:
        places.append(("the columnar copies (remote.log.columnar.dir)", columnar))
    if config_file:
        places.append(("the config file", Path(config_file)))
    return places


def check_output_place(out: str, config: LogConfig, config_file: str | None, option: str) -> None:
    """A usage error (exit 2) when the output directory ``out`` is, holds or lies inside one of the config's own
    places (:func:`own_places`): writing it, or replacing it (``--overwrite``), would destroy the data it reads."""
    from pathlib import Path

    target = Path(out).expanduser().resolve()
    for what, place in own_places(config, config_file):
        place = place.expanduser().resolve()
        if target == place or target in place.parents or place in target.parents:
            relation = "is" if target == place else "holds" if target in place.parents else "lies inside"
            raise UsageError(f"{option} {out} {relation} {what} {place}: choose a directory outside it")


_SPARK_MASTER = re.compile(r"local(\[(\*|[1-9][0-9]*)(,[1-9][0-9]*)?\])?|local-cluster\[[1-9][0-9]*,[1-9][0-9]*,[1-9][0-9]*\]"
                           r"|(spark|k8s|mesos)://\S+|yarn")


def spark_master(text: str) -> str:
    """An argparse type: a Spark master URL (``local``, ``local[N]``, ``local[*]``, ``local[N,F]``,
    ``local-cluster[N,C,M]``, ``spark://``, ``k8s://``, ``mesos://``, ``yarn``), checked before Spark starts (a wrong
    one was a Java stack trace and "Java gateway process exited")."""
    if not _SPARK_MASTER.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"invalid Spark master {text!r}: expected local, local[N], local[*], "
                                         "local-cluster[N,C,M], spark://HOST:PORT, k8s://..., or yarn")
    return text.strip()
