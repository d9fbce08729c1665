"""Generate the reference docs from the code: ``python -m tiered.docsgen`` writes ``docs/configuration.md`` and
``docs/cli.md``; ``--check`` writes nothing and exits 1 naming each file that differs from what it would write.

- ``docs/configuration.md``: every broker and topic key of :func:`local.config.key_definitions` (default and valid
  values come from the definitions themselves), the other broker keys (:data:`local.config.OTHER_BROKER_KEYS`),
  and the ``rsm.config.*`` keys of each bundled backend (its ``CONFIG_KEYS``). The one-line descriptions are
  below; a key the code defines without a description here (or a description of a key the code no longer
  defines) is an error, so the reference cannot fall behind the code.
- ``docs/cli.md``: the ``--help`` of ``tiered`` and of every command in :data:`tiered.cli.COMMANDS` and its
  subcommands (found in the parsers, so a new command appears without a change here), at a fixed width.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1] / "docs"
WIDTH = 110
MIB = 1024 * 1024
LONG_MAX = 2**63 - 1

# ---------------------------------------------------------------------------------------------------------------
# One line per key. Kafka's meaning unless marked "ours".

DESCRIPTIONS: dict[str, str] = {
    # topic keys
    "segment.bytes": "Roll a new segment when the active one would grow past this size. Above 2 GiB needs the "
                     "large-index feature (`tiered features upgrade --release-version 4.4`).",
    "segment.ms": "Roll a new segment when the active one's first record is older than this, even if not full.",
    "segment.jitter.ms": "A random amount up to this is subtracted from `segment.ms`, so partitions do not roll at once.",
    "segment.index.bytes": "Maximum size of a segment's offset and time index files; a full index rolls the segment.",
    "index.interval.bytes": "Bytes of records between two offset/time index entries.",
    "flush.messages": "fsync the log after this many appended messages (default: leave it to the OS and checkpoints).",
    "flush.ms": "fsync the log when its oldest unflushed data is this old.",
    "retention.ms": "Delete segments whose newest record is older than this, from both tiers; -1: no time limit.",
    "retention.bytes": "Delete the oldest segments while the partition (both tiers together) is larger; -1: no size limit.",
    "file.delete.delay.ms": "How long a deleted segment's files stay (renamed `.deleted`) before they are removed.",
    "max.message.bytes": "Largest record batch accepted (after compression).",
    "message.timestamp.type": "CreateTime keeps the producer's timestamps; LogAppendTime stamps the append time.",
    "message.timestamp.before.max.ms": "Refuse batches whose timestamp is further in the past than this (CreateTime).",
    "message.timestamp.after.max.ms": "Refuse batches whose timestamp is further in the future than this (CreateTime).",
    "preallocate": "Preallocate the segment file when it is created.",
    "cleanup.policy": "delete (retention by time and size), compact (the log cleaner keeps the latest record of each "
                      "key), or both. compact cannot be combined with remote.storage.enable=true (as in Kafka).",
    "min.cleanable.dirty.ratio": "A compacted log is cleaned once its dirty bytes exceed this share of it (or a dirty "
                                 "segment is older than max.compaction.lag.ms).",
    "delete.retention.ms": "How long a tombstone (a record with a null value) stays after the cleaning that first "
                           "keeps it; also how long an empty transaction's marker stays.",
    "min.compaction.lag.ms": "A record stays uncompacted at least this long (segments newer than this are not cleaned).",
    "max.compaction.lag.ms": "A dirty segment older than this is cleaned whatever the dirty ratio; a compacted "
                             "topic's active segment is rolled once it is this old (with segment.ms, the shorter).",
    "min.insync.replicas": "Accepted for compatibility; there is one replica.",
    "compression.type": "Recompress appended batches with this codec; producer keeps the producer's.",
    "compression.gzip.level": "The gzip level of batches rebuilt in gzip (compression.type=gzip); -1: zlib's default.",
    "compression.lz4.level": "The lz4 level of batches rebuilt in lz4 (compression.type=lz4).",
    "compression.zstd.level": "The zstd level of batches rebuilt in zstd (compression.type=zstd).",
    "remote.storage.enable": "Tier this topic: closed segments are copied to the remote tier. Needs "
                             "`remote.log.storage.system.enable=true` on the broker.",
    "local.retention.ms": "How long segments stay on local disk once copied to the remote tier; -2: `retention.ms`; -1 (for ever) only where `retention.ms` is -1 (Kafka's rule, checked on create and alter).",
    "local.retention.bytes": "How much of the partition stays on local disk once copied; -2: `retention.bytes`; -1 (no limit) only where `retention.bytes` is -1.",
    "remote.log.copy.disable": "Stop copying new segments of a tiered topic; remote data stays readable and expires.",
    "remote.log.delete.on.disable": "Allow `remote.storage.enable=false` on a topic with remote data, deleting it.",
    "remote.log.columnar.enable": "Ours: keep a Parquet copy of the topic's remote segments (aborted records marked) "
                                  "in `remote.log.columnar.dir`, for `tiered.spark.read_topic`. Needs "
                                  "`remote.storage.enable=true` (docs/columnar.md).",
    "remote.log.columnar.file.bytes": "Ours: a columnar file takes the rows of the next remote segments until it "
                                      "holds this many bytes (Spark's default `maxPartitionBytes`: one task a "
                                      "file), so a topic of small segments is not read as many small files; 1: a file a "
                                      "segment.",
    "remote.log.columnar.file.delete.delay.ms": "Ours: how long a columnar file stays after it left the manifest "
                                                "(a larger file took its rows, or retention): a `read_topic` "
                                                "DataFrame made before reads it until then (`file.delete.delay.ms` "
                                                "is Kafka's minute, too short for a notebook's DataFrame).",
    # broker keys
    "broker.id": "The broker id recorded in remote segment metadata, and the node id of the Kafka protocol listener.",
    # the Kafka protocol listener (tiered run --kafka-listen; docs/kafka-protocol.md)
    "socket.request.max.bytes": "Largest request a Kafka client may send; a larger frame closes its connection.",
    "queued.max.request.bytes": "Bytes of requests read and not yet answered, over all connections, charged as they "
                                "arrive; a connection waits before reading more (Kafka's default is -1, no bound). "
                                "The same bound holds fetch answers written and not yet taken by their clients: past "
                                "it a fetch gets one batch.",
    "fetch.max.bytes": "Most record bytes one Fetch answer holds, whatever the client asks (one whole batch at "
                       "least).",
    "connections.max.idle.ms": "Close a Kafka client connection idle (or stalled mid-request) this long.",
    "max.connections": "Kafka client connections accepted at once; more are closed at once.",
    "num.io.threads": "Threads running Kafka requests against the engine.",
    "auto.create.topics.enable": "Create a topic a client's Metadata request names (with `num.partitions`).",
    "num.partitions": "Partitions of an auto-created topic, and of CreateTopics asking for the default (-1).",
    "delete.topic.enable": "Allow DeleteTopics.",
    "offsets.topic.num.partitions": "Partitions of `__consumer_offsets` when it is created.",
    "offsets.topic.segment.bytes": "`segment.bytes` of `__consumer_offsets`.",
    "offsets.retention.minutes": "Committed offsets of a group with no members expire after this long.",
    "offsets.retention.check.interval.ms": "How often expired committed offsets are removed.",
    "offset.metadata.max.bytes": "Largest metadata string of one committed offset.",
    "group.initial.rebalance.delay.ms": "How long the first rebalance of an empty group waits for more members.",
    "group.min.session.timeout.ms": "Smallest session timeout a consumer may ask for.",
    "group.max.session.timeout.ms": "Largest session timeout a consumer may ask for.",
    "transaction.state.log.num.partitions": "Partitions of `__transaction_state` when it is created.",
    "transaction.state.log.segment.bytes": "`segment.bytes` of `__transaction_state`.",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "How often transactions open longer than their "
                                                                   "timeout are aborted.",
    "num.recovery.threads.per.data.dir": "Threads per data dir loading (and recovering) partitions at startup.",
    "num.segment.loading.threads.per.data.dir": "Ours: threads per data dir opening the segments of one partition "
                                                "at startup.",
    "log.retention.check.interval.ms": "How often local retention runs.",
    "log.flush.scheduler.interval.ms": "How often the flusher checks `flush.ms`.",
    "log.flush.offset.checkpoint.interval.ms": "How often the recovery-point checkpoint is written.",
    "log.flush.start.offset.checkpoint.interval.ms": "How often the log-start-offset checkpoint is written.",
    "producer.id.expiration.ms": "Forget an idempotent producer's state after this long without a write.",
    "transaction.max.timeout.ms": "Longest transaction timeout a transactional producer may ask for "
                                  "(INVALID_TRANSACTION_TIMEOUT above it).",
    "remote.log.storage.system.enable": "Enable the remote tier on this broker (topics opt in with "
                                        "`remote.storage.enable`).",
    "remote.log.storage.manager.class.name": "The RemoteStorageManager: a backend of the table below (`local`, `s3`, "
                                             "`fsspec`, `store`: your own object store) or the dotted path of your "
                                             "own RemoteStorageManager (docs/custom-rsm.md).",
    "remote.log.storage.manager.class.path": "Accepted for compatibility (Java class path); unused.",
    "remote.log.storage.manager.impl.prefix": "Prefix of the keys passed to the RemoteStorageManager (prefix removed).",
    "remote.log.segment.cache.plaintext.disk.enable": "Ours: whether the segment cache may keep the plaintext chunks "
    "of encrypted segments (`rsm.config.encryption.enabled=true`, or a key ring or key provider configured to read "
    "them) on local disk; by default it keeps them in memory only, so what is encrypted at rest stays so.",
    "remote.log.metadata.manager.class.name": "Where remote segment metadata lives: `bucket` (beside the segments, "
    "in the plugin's object store), `local` (a directory, `rlmm.config.dir`) or the dotted path of a "
    "RemoteLogMetadataManager; default: `bucket` for object-store plugins, `local` for any other.",
    "remote.log.metadata.manager.impl.prefix": "Prefix of the keys passed to the remote log metadata manager.",
    "remote.log.metadata.custom.metadata.max.bytes": "Largest custom metadata a plugin may return for a copy; "
                                                     "a larger one fails the copy (its objects are deleted) and, "
                                                     "as in Kafka, stops the partition's copies until a restart.",
    "remote.log.index.file.cache.total.size.bytes": "Disk space of the cache of remote segments' indexes.",
    "remote.log.manager.task.interval.ms": "How often each partition's copy and expiration tasks run.",
    "remote.log.manager.copy.max.bytes.per.second": "Quota on bytes copied to the remote tier per second.",
    "remote.log.manager.fetch.max.bytes.per.second": "Quota on bytes read from the remote tier per second.",
    "remote.log.manager.copier.thread.pool.size": "Threads running the copy tasks.",
    "remote.log.manager.expiration.thread.pool.size": "Threads running the expiration tasks.",
    "remote.log.manager.copier.process.enable": "Ours: run each copy in a child process (for plugins that share "
                                                "their store across processes: the local-directory and S3 tiers; "
                                                "false for S3 mocked in-process by a test; see "
                                                "tiered/copier_process.py).",
    "remote.log.reader.threads": "Threads reading from the remote tier.",
    "remote.log.reader.max.pending.tasks": "Remote reads queued at most before new ones are refused.",
    "remote.fetch.max.wait.ms": "Longest a fetch waits for a remote read.",
    "remote.log.segment.cache.dir": "Ours: directory of the remote segment chunk cache (default: in the first data "
                                    "dir).",
    "remote.log.columnar.dir": "Ours: where the columnar (Parquet) copies of topics with "
                               "`remote.log.columnar.enable=true` live, a local or shared path Spark reads; default: "
                               "`<rsm.config.dir>-columnar` beside the local-directory backend's bucket, none for "
                               "other backends (docs/columnar.md).",
    "remote.log.segment.cache.total.size.bytes": (
        "Ours: disk space of the remote segment chunk cache; a process keeps up to a quarter of it (512 MiB at most) "
        "mapped, so that a working set read again is served from memory (see docs/operations.md, open files)."),
    "remote.log.segment.cache.chunk.size.bytes": "Ours: size of one cached chunk of a remote segment.",
    "remote.log.segment.cache.prefetch.chunks": "Ours: chunks read ahead of a sequential reader.",
    "tiered.http.listen": "Ours: where `tiered run` serves /metrics, produce, consume and /health (`--listen`).",
    "tiered.http.max.connections": "Ours: HTTP connections `tiered run` serves at once; more are answered 503 and "
                                   "closed (each holds a thread and a file descriptor).",
    "tiered.http.idle.timeout.ms": "Ours: close an HTTP connection that has not sent a whole request this long after "
                                   "the last answer (or its start; a body has 1 s more per 64 KiB), or whose client "
                                   "stalls this long reading an answer (a stalled body: 408).",
    "log.cleaner.enable": "Run the log cleaner threads (tiered run) for the compacted topics; off, they grow unbounded "
                          "and their retention does not run.",
    "log.cleaner.threads": "Cleaner threads; each cleans one log at a time with its share of the dedupe buffer.",
    "log.cleaner.backoff.ms": "How long a cleaner thread sleeps when no log needs cleaning.",
    "log.cleaner.dedupe.buffer.size": "Memory of the key -> offset maps of all cleaner threads (24 bytes a key; at most "
                                      "2 GiB a thread): keys a cleaning can dedupe at once.",
    "log.cleaner.io.buffer.load.factor": "How full a cleaner's map may get before the cleaning stops mapping keys "
                                         "(Kafka's name for the dedupe buffer's load factor).",
    "log.cleaner.io.buffer.size": "Memory of the cleaner threads' read and write buffers, split among them.",
    "log.cleaner.io.max.bytes.per.second": "Throttle of the cleaner threads' reads and writes together.",
}

# ---------------------------------------------------------------------------------------------------------------
# configuration.md


def _human(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f"`{value}`" if value else '""'
    if value == LONG_MAX:
        return "2^63-1 (none)"
    text = str(value)
    if key.endswith(".ms") and value >= 60_000 and value % 60_000 == 0:
        minutes = value // 60_000
        hint = f"{minutes // 1440} days" if minutes % 1440 == 0 else f"{minutes // 60} h" if minutes % 60 == 0 else f"{minutes} min"
        return f"{text} ({hint})"
    if key.endswith("bytes") and value >= MIB and value % MIB == 0:
        mib = value // MIB
        return f"{text} ({mib // 1024} GiB)" if mib % 1024 == 0 else f"{text} ({mib} MiB)"
    return text


def _valid(valid: str) -> str:
    return valid.replace(str(LONG_MAX), "2^63-1").replace(str(2**31 - 1), "2^31-1")


def _description(key: str) -> str:
    try:
        return DESCRIPTIONS[key]
    except KeyError:
        raise SystemExit(f"tiered.docsgen: configuration key {key} has no description: add one to DESCRIPTIONS") from None


def _backend_classes() -> dict[str, Any]:
    """Each backend of the table tiered.backends.BACKENDS, by name: its class."""
    from tiered.backends import BACKENDS

    out = {}
    for backend in BACKENDS:
        module, _, name = backend.class_path.rpartition(".")
        out[backend.name] = getattr(importlib.import_module(module), name)
    return out


def rsm_config_keys() -> dict[str, tuple[str, ...]]:
    """Each bundled backend's ``rsm.config.*`` keys as the code declares them (each class's ``config_keys()``)."""
    return {name: cls.config_keys() for name, cls in _backend_classes().items()}


def configuration_md() -> str:
    from local.config import OTHER_BROKER_KEYS, key_definitions

    defs = key_definitions()
    defined = {d.key for d in defs}
    stale = sorted(set(DESCRIPTIONS) - defined)
    if stale:
        raise SystemExit(f"tiered.docsgen: DESCRIPTIONS has keys the code does not define: {', '.join(stale)}")
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python -m tiered.docsgen` from local/config.py and the backends' CONFIG_KEYS; do not "
        "edit. -->",
        "",
        "Broker keys go in the `--config` properties file (or `-o KEY=VALUE`); topic keys are set per topic with "
        "`tiered topics create|alter` (or `produce --topic-config`), and their broker synonym sets the default for "
        "every topic. An invalid value fails at load naming the key, the value and the valid range; an unknown "
        "broker key is logged as a warning and ignored. Keys marked *ours* have no Kafka equivalent.",
        "",
        "## Topic keys",
        "",
        "| key | broker synonym (default for all topics) | default | valid values | description |",
        "|---|---|---|---|---|",
    ]
    for d in defs:
        if d.scope == "topic":
            synonym = f"`{d.synonym}`" if d.synonym and d.synonym != d.key else ("same key" if d.synonym else "none")
            lines.append(f"| `{d.key}` | {synonym} | {_human(d.key, d.default)} | {_valid(d.valid)} | "
                         f"{_description(d.key)} |")
    lines += ["", "## Broker keys", "", "| key | default | valid values | description |", "|---|---|---|---|"]
    for key, what in OTHER_BROKER_KEYS.items():
        lines.append(f"| `{key}` | | | {what} |")
    for d in defs:
        if d.scope == "broker":
            lines.append(f"| `{d.key}` | {_human(d.key, d.default)} | {_valid(d.valid)} | {_description(d.key)} |")
    lines += [
        "",
        "## Remote storage keys (`rsm.config.*`)",
        "",
        "Passed to the RemoteStorageManager chosen by `remote.log.storage.manager.class.name`, with the prefix "
        "removed. Secret values (keys, secrets, tokens, passwords, URL userinfo) never appear in errors or logs. "
        "An unknown key is logged as a warning.",
    ]
    from tiered.backends import BY_NAME

    for alias, cls in _backend_classes().items():
        keys, described = cls.config_keys(), cls.config_docs()
        missing = [k for k in keys if k not in described]
        extra = [k for k in described if k not in keys]
        if missing or extra:
            raise SystemExit(f"tiered.docsgen: rsm.config keys of the {alias} backend: undescribed {missing}, "
                             f"described but not declared {extra}: update the CONFIG_DOCS of its store")
        backend = BY_NAME[alias]
        needs = f" Needs `{backend.install_hint}`." if backend.extra else ""
        lines += ["", f"### `remote.log.storage.manager.class.name={alias}`", "",
                  f"{backend.description}{needs} Class `{backend.class_path}`.", "",
                  "| key | default | valid values | description |", "|---|---|---|---|"]
        for key in keys:
            default, valid, text = described[key]
            lines.append(f"| `rsm.config.{key}` | {default} | {valid} | {text} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# cli.md


def _parsers() -> Iterator[argparse.ArgumentParser]:
    """``tiered``'s parser, then each command's (built with its arguments) and their subcommands, depth first."""
    from tiered.cli import COMMANDS, build_parser, subparsers

    yield build_parser()
    for name in COMMANDS:
        command = dict(subparsers(build_parser(name)))[name]
        stack = [command]
        while stack:
            parser = stack.pop(0)
            yield parser
            stack[0:0] = [sub for _, sub in subparsers(parser)]


def cli_md() -> str:
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)  # argparse wraps help at the terminal width: fix it
    try:
        sections = [(parser.prog, parser.format_help()) for parser in _parsers()]
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    lines = [
        "# Command line reference",
        "",
        "<!-- Generated by `python -m tiered.docsgen` from the argparse parsers (tiered/cli.py, "
        "tiered/commands/); do not edit. -->",
        "",
        "Global options (`--config`, `--log-dirs`, `-o KEY=VALUE`, `-v`) go before or after the command. Exit "
        "codes: 0 ok, 1 a failure, 2 usage, 130 Ctrl-C, 143 SIGTERM (handled as Ctrl-C: what was done is said). "
        "Errors are one line on stderr; `-v` adds the traceback. Commands:",
        "",
    ]
    lines += [f"- [`{prog}`](#{_anchor(prog)})" for prog, _ in sections[1:]]
    for prog, text in sections:
        lines += ["", f"## {prog}", "", "```text", text.rstrip(), "```"]
    return "\n".join(lines) + "\n"


def _anchor(title: str) -> str:
    return "".join(c for c in title.lower().replace(" ", "-") if c.isalnum() or c in "-_")


# ---------------------------------------------------------------------------------------------------------------


def generated() -> dict[Path, str]:
    return {DOCS / "configuration.md": configuration_md(), DOCS / "cli.md": cli_md()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tiered.docsgen", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is stale")
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    for path in stale:
        print(f"{path} is stale: run python -m tiered.docsgen", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
