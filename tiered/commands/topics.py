"""``tiered topics create|describe|alter|list``: topics and their configs, with Kafka's ``kafka-topics`` and
``kafka-configs`` semantics, kept in the data dirs.

A topic is its partition dirs (``<topic>-<partition>``, one topic id in every ``partition.metadata``); its config
overrides are the ``tiered-topic.properties`` file in each partition dir (Kafka keeps them in its metadata log),
over the broker's defaults (``log.segment.bytes`` for ``segment.bytes``, ...) over Kafka's.

- ``create --topic T [--partitions N] [--topic-config K=V ...]``: N empty partitions with one new topic id and the
  overrides given; refused when any partition of T exists.
- ``alter --topic T [--add-config K=V[,K=V]] [--delete-config K[,K]] [--partitions N]``: changes only the keys given,
  like ``kafka-configs --alter``; a value holding commas goes in brackets (``cleanup.policy=[compact,delete]``);
  deleting a key the topic does not override is refused, as kafka-configs does. ``--partitions N`` grows the topic
  to N partitions with its topic id and overrides (``kafka-topics --alter --partitions``; never fewer). A write
  (``produce``, the HTTP endpoint) to a partition an existing topic does not have is refused, as Kafka answers
  UNKNOWN_TOPIC_OR_PARTITION; a new topic is created at the partition a write names.
- ``describe [--topic T]``: per topic its id, partitions and every topic config with its value and where the value
  comes from (``topic`` override, ``broker`` config with its key, or Kafka's ``default``), ``remote.storage.enable``
  included. Reads files only: works beside a running ``tiered run``.
- ``list``: the topic names.

Keys and values are checked by the engine's config definitions (an unknown key or a bad value names the key, the
value and the range; exit 2). ``remote.storage.enable=true`` needs ``remote.log.storage.system.enable=true`` in the
broker config, as in Kafka; turning it off on a partition that holds remote data is refused unless
``remote.log.delete.on.disable=true`` (Kafka's ``validateTurningOffRemoteStorageWithDelete``).
Exit codes: 0 ok, 1 a failure (no such topic, topic exists, a key to delete not set, a data dir locked), 2 usage or an invalid config.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tiered.commands._common import UsageError, check_topic_name, load_config, partition_count

ACTIONS = ("create", "describe", "alter", "list")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=ACTIONS, help="create, describe, alter or list topics")
    parser.add_argument("--topic", "-t", help="the topic (required by create and alter; describe: only this one)")
    parser.add_argument("--partitions", type=partition_count, default=None, metavar="N",
                        help="create: the number of partitions (default: 1); alter: grow the topic to N partitions "
                             "(never fewer, as in Kafka)")
    parser.add_argument("--topic-config", action="append", default=[], metavar="KEY=VALUE",
                        help="create: a topic config override, e.g. remote.storage.enable=true (repeatable)")
    parser.add_argument("--add-config", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE...]",
                        help="alter: set these topic configs, keeping the others (repeatable; a value with commas "
                             "goes in brackets: cleanup.policy=[compact,delete])")
    parser.add_argument("--delete-config", action="append", default=[], metavar="KEY[,KEY...]",
                        help="alter: remove these overrides, back to the broker's or Kafka's default (repeatable)")
    parser.add_argument("--json", action="store_true", help="describe, list: print one JSON document")


def run(args: argparse.Namespace) -> int:
    config = load_config(args)
    _check_options(args)
    if args.action == "create":
        return create(config, args.topic, args.partitions or 1, parse_pairs(args.topic_config, "--topic-config"))
    if args.action == "alter":
        adds: dict[str, str] = {}
        for item in args.add_config:
            adds.update(parse_pairs(split_config_list(item), "--add-config"))
        deletes = [k.strip() for item in args.delete_config for k in item.split(",") if k.strip()]
        return alter(config, args.topic, adds, deletes, args.partitions)
    topics = local_topics(config)
    if args.action == "list":
        names = sorted(topics)
        print(json.dumps(names) if args.json else "\n".join(names)) if names or args.json else None
        return 0
    if args.topic is not None and args.topic not in topics:
        print(f"tiered topics: no topic {args.topic!r} in {_dirs(config)}", file=sys.stderr)
        return 1
    described = [describe(config, name, topics[name]) for name in sorted(topics) if args.topic in (None, name)]
    if args.json:
        print(json.dumps(described, indent=2))
    else:
        for d in described:
            print_description(d)
    return 0


def _check_options(args: argparse.Namespace) -> None:
    given = {"--topic-config": bool(args.topic_config), "--add-config": bool(args.add_config),
             "--delete-config": bool(args.delete_config), "--partitions": args.partitions is not None}
    allowed = {"create": {"--topic-config", "--partitions"},
               "alter": {"--add-config", "--delete-config", "--partitions"}}.get(args.action, set())
    wrong = [name for name, present in given.items() if present and name not in allowed]
    if wrong:
        raise UsageError(f"{', '.join(wrong)} does not apply to 'topics {args.action}'")
    if args.action in ("create", "alter") and not args.topic:
        raise UsageError(f"'topics {args.action}' needs --topic TOPIC")
    if args.action == "alter" and not (args.add_config or args.delete_config or args.partitions is not None):
        raise UsageError("'topics alter' needs --add-config KEY=VALUE, --delete-config KEY or --partitions N")
    if args.topic is not None:
        check_topic_name(args.topic)


# ------------------------------------------------------------------------------------------------------------
# Parsing


def split_config_list(text: str) -> list[str]:
    """``a=1,b=[x,y]`` -> ``["a=1", "b=x,y"]`` (kafka-configs' syntax: brackets keep commas in a value)."""
    items: list[str] = []
    current, depth = "", 0
    for ch in text:
        if ch == "[":
            depth += 1
            if depth == 1:
                continue
        elif ch == "]" and depth:
            depth -= 1
            if depth == 0:
                continue
        elif ch == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        current += ch
    if depth:
        raise UsageError(f"unbalanced '[' in {text!r}")
    items.append(current)
    return [i for i in items if i.strip()]


def parse_pairs(items: list[str], option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{option} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


# ------------------------------------------------------------------------------------------------------------
# Reading the data dirs (files only, no lock)


def local_topics(config: Any, *, missing_ok: bool = False) -> dict[str, dict[int, Path]]:
    """Every topic of the data dirs: topic -> partition -> partition dir. A missing data dir is a usage error
    unless ``missing_ok`` (create makes it)."""
    from local import filenames

    topics: dict[str, dict[int, Path]] = {}
    for data_dir in config.log_dirs:
        data_dir = Path(data_dir)
        if not data_dir.is_dir():
            if missing_ok and not data_dir.exists():
                continue
            raise UsageError(f"no such data dir: {data_dir}")
        for child in sorted(data_dir.iterdir()):
            try:
                topic, partition = filenames.parse_partition_dir_name(child.name)
            except ValueError:
                continue
            if child.is_dir():
                topics.setdefault(topic, {})[partition] = child
    return topics


def topic_overrides(partition_dir: Path) -> dict[str, str]:
    from local.config import read_properties
    from local.manager import TOPIC_CONFIG_FILENAME

    path = partition_dir / TOPIC_CONFIG_FILENAME
    return dict(read_properties(path)) if path.exists() else {}


def topic_id_of(partition_dir: Path) -> str | None:
    from local import filenames
    from local.checkpoint import PartitionMetadataFile, kafka_uuid_to_str

    meta = PartitionMetadataFile(partition_dir / filenames.PARTITION_METADATA_FILENAME)
    return kafka_uuid_to_str(meta.read()) if meta.exists() else None


def describe(config: Any, topic: str, partitions: dict[int, Path]) -> dict[str, Any]:
    """One topic as a JSON-ready dict: id, partitions (with their data dir) and every config with its source."""
    from local.config import topic_config_keys

    first = partitions[min(partitions)]
    overrides = topic_overrides(first)
    effective = config.topic_config(overrides, persisted=True).to_properties()
    configs = []
    for key, broker_key in topic_config_keys().items():
        if key in overrides:
            source = "topic"
        elif broker_key is not None and broker_key in config.originals:
            source = f"broker {broker_key}"
        else:
            source = "default"
        configs.append({"name": key, "value": effective[key], "source": source})
    return {
        "topic": topic,
        "topic_id": topic_id_of(first),
        "partitions": [{"partition": p, "dir": str(d.parent)} for p, d in sorted(partitions.items())],
        "overrides": overrides,
        "configs": configs,
    }


def print_description(d: dict[str, Any]) -> None:
    overrides = ",".join(f"{k}={v}" for k, v in sorted(d["overrides"].items()))
    print(f"Topic: {d['topic']}\tTopicId: {d['topic_id'] or '-'}\tPartitionCount: {len(d['partitions'])}\t"
          f"Configs: {overrides}")
    for p in d["partitions"]:
        print(f"\tTopic: {d['topic']}\tPartition: {p['partition']}\tDataDir: {p['dir']}")
    print(f"All configs for topic {d['topic']} are:")
    for c in d["configs"]:
        print(f"  {c['name']}={c['value']}  ({c['source']})")


def _dirs(config: Any) -> str:
    return ",".join(str(d) for d in config.log_dirs)


# ------------------------------------------------------------------------------------------------------------
# Changing topics


def _check_remote_allowed(config: Any, overrides: dict[str, str]) -> None:
    """Kafka refuses remote.storage.enable=true on a broker without the remote storage system; we refuse
    remote.log.columnar.enable=true where it cannot work (tiered.columnar.location.check_topic)."""
    from tiered.columnar.location import check_topic

    check_topic(config, config.topic_config(overrides))
    if config.topic_config(overrides).remote_storage_enable and not config.remote_log_storage_system_enable:
        from local.errors import ConfigError

        raise ConfigError(
            "Invalid value true for configuration remote.storage.enable: the broker's remote storage system is not "
            "enabled; set remote.log.storage.system.enable=true and remote.log.storage.manager.class.name in the "
            "broker config (--config FILE) first", key="remote.storage.enable", value="true")


def _manager(config: Any) -> Any:
    """A writable LogManager of the data dirs without the remote tier: changing topic configs needs no store."""
    from local import LogManager

    return LogManager(config.with_overrides(remote_log_storage_system_enable=False), start_scheduler=False)


def create(config: Any, topic: str, partitions: int, overrides: dict[str, str]) -> int:
    import uuid

    config.topic_config(overrides)  # every key and value checked before anything is written
    _check_remote_allowed(config, overrides)
    topics = local_topics(config, missing_ok=True)
    existing = topics.get(topic)
    if existing:
        print(f"tiered topics: topic {topic!r} already exists ({len(existing)} partition(s) in {_dirs(config)})",
              file=sys.stderr)
        return 1
    from local.filenames import colliding_topic

    other = colliding_topic(topic, topics)
    if other is not None:
        print(f"tiered topics: topic {topic!r} collides with existing topic {other!r} (the same name once '.' is read "
              "as '_', as Kafka refuses: their metric names would be one)", file=sys.stderr)
        return 1
    from local.errors import TooManyPartitionsError

    topic_id = uuid.uuid4()
    with _manager(config) as manager:
        try:  # all or none: a creation that fails part way deletes what it made
            manager.create_partitions(topic, range(partitions), dict(overrides), topic_id=topic_id)
        except TooManyPartitionsError as exc:
            print(f"tiered topics: {exc}", file=sys.stderr)
            return 1
    from local.checkpoint import kafka_uuid_to_str

    print(f"Created topic {topic} with {partitions} partition(s), topic id {kafka_uuid_to_str(topic_id)}",
          file=sys.stderr)
    return 0


def alter(config: Any, topic: str, adds: dict[str, str], deletes: list[str], partition_count: int | None = None) -> int:
    from local.config import topic_config_keys
    from local.errors import ConfigError, TooManyPartitionsError

    known = topic_config_keys()
    for key in [*adds, *deletes]:
        if key not in known:
            raise ConfigError(f"Unknown topic configuration {key!r}", key=key)
    partitions = local_topics(config).get(topic)
    if not partitions:
        print(f"tiered topics: no topic {topic!r} in {_dirs(config)}", file=sys.stderr)
        return 1
    current = topic_overrides(partitions[min(partitions)])
    unset = [k for k in deletes if k not in current]
    if unset:  # kafka-configs refuses these too: a typo'd delete must not report success
        print(f"tiered topics: Invalid config(s): {', '.join(unset)}: not set for topic {topic}, nothing to delete",
              file=sys.stderr)
        return 1
    if partition_count is not None and partition_count <= len(partitions):
        # kafka-topics --alter --partitions: a partition count only grows (keys would move between partitions)
        print(f"tiered topics: topic {topic} has {len(partitions)} partition(s): --partitions can only increase it, "
              f"got {partition_count}", file=sys.stderr)
        return 1
    new = {k: v for k, v in current.items() if k not in deletes}
    new.update(adds)
    new_config = config.topic_config(new)  # validated before anything changes
    _check_remote_allowed(config, new)
    from local.manager import _validate_turning_off_remote_storage, open_files_refusal

    # before any config changes, and from the count: a list of a huge --partitions would take all memory first
    growth = max(0, (partition_count or 0) - len(partitions))
    refusal = open_files_refusal(growth)
    if refusal is not None:
        print(f"tiered topics: cannot add {growth} partition(s) to {topic}: {refusal}", file=sys.stderr)
        return 1
    added = [p for p in range(partition_count or 0) if p not in partitions]
    with _manager(config) as manager:
        logs = [manager.get_log(topic, p) for p in sorted(partitions)]
        for log in logs:  # every partition checked before any changes
            if log is not None:
                _validate_turning_off_remote_storage(log, new_config)
        for p in sorted(partitions):
            manager.get_or_create_log(topic, p, new if adds or deletes else None)
        topic_id = next((log.topic_id for log in logs if log is not None and log.topic_id is not None), None)
        try:  # the topic's id and overrides, as its other partitions have; all or none
            manager.create_partitions(topic, added, new, topic_id=topic_id)
        except TooManyPartitionsError as exc:
            print(f"tiered topics: {exc}", file=sys.stderr)
            return 1
    changed = sorted(set(adds) | set(deletes))
    if changed:
        print(f"Completed updating config for topic {topic}: {', '.join(changed)}", file=sys.stderr)
    if added:
        print(f"Added partition(s) {', '.join(map(str, added))} to topic {topic}: {len(partitions) + len(added)} in "
              "all", file=sys.stderr)
    return 0
