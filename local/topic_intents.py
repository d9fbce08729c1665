"""A topic's creation and deletion, whole across a crash (Kafka's KRaft controller writes a topic and all its
partitions, or its removal, as one atomic metadata batch).

A creation or deletion of several partitions first writes an intent, ``tiered-topic-intent-<uuid>.json``, into
every live data dir (the operation, the topic, its topic id and the partitions), fsynced; it is removed once every
partition dir is made (or gone), and that removal is the commit. A process killed in between finds the intent at
its next start (:func:`settle_intents`, before the partitions are loaded): an unfinished creation is rolled back
(the partition dirs it made, those of the intent's topic id, are deleted: the topic does not exist, and a retried
CreateTopics makes it whole), an unfinished deletion is finished. Partition dirs are deleted as Kafka deletes them:
renamed ``<topic>-<partition>.<uuid>-delete`` first (one atomic rename), then removed; a start removes the ones a
crash left (:func:`remove_deleted_dirs`), so a half-removed partition dir is never loaded as a log.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path

from local import filenames
from local.checkpoint import PartitionMetadataFile, atomic_write, fsync_dir

logger = logging.getLogger(__name__)

INTENT_PREFIX = "tiered-topic-intent-"
_DELETED_DIR = re.compile(r"^.+-[0-9]+\.[0-9a-f]{32}-delete$")


def write_intents(data_dirs: Iterable[Path], op: str, topic: str, topic_id: uuid.UUID | None,
                  partitions: Sequence[int]) -> list[Path]:
    """The intent of ``op`` ("create" or "delete") in each of ``data_dirs``, durable; their paths."""
    body = json.dumps({"version": 0, "op": op, "topic": topic, "topic_id": str(topic_id) if topic_id else None,
                       "partitions": sorted(partitions)}).encode()
    name = f"{INTENT_PREFIX}{uuid.uuid4().hex}.json"
    paths = []
    for data_dir in data_dirs:
        path = data_dir / name
        atomic_write(path, body)
        paths.append(path)
    return paths


def remove_intents(paths: Iterable[Path]) -> None:
    """The commit: each intent removed, the removal durable."""
    for path in paths:
        path.unlink(missing_ok=True)
        fsync_dir(path.parent)


def delete_partition_dir(pdir: Path) -> None:
    """Remove a partition dir as Kafka does: renamed ``<name>.<uuid>-delete`` (atomic, made durable), then removed;
    a crash during the removal leaves only a ``-delete`` dir, which the next start removes."""
    if not pdir.exists():
        return
    doomed = pdir.with_name(f"{pdir.name}.{uuid.uuid4().hex}-delete")
    try:
        pdir.rename(doomed)
        fsync_dir(pdir.parent)
    except OSError:
        doomed = pdir  # (a rename refused: removed where it is, as before)
    shutil.rmtree(doomed, ignore_errors=True)


def remove_deleted_dirs(data_dir: Path) -> None:
    """The ``-delete`` dirs a crash left in ``data_dir`` (Kafka's start removes them too)."""
    for child in data_dir.iterdir():
        if _DELETED_DIR.match(child.name) and child.is_dir():
            logger.info("removing %s, a partition dir whose deletion a crash interrupted", child)
            shutil.rmtree(child, ignore_errors=True)


def settle_intents(data_dir: Path) -> None:
    """Roll back the creations and finish the deletions a crash interrupted in ``data_dir`` (see the module
    docstring). An intent that cannot be read is left where it is, with a warning, and nothing is deleted for it."""
    for path in sorted(data_dir.glob(f"{INTENT_PREFIX}*.json")):
        try:
            intent = json.loads(path.read_bytes())
            op, topic, partitions = intent["op"], str(intent["topic"]), [int(p) for p in intent["partitions"]]
            topic_id = uuid.UUID(intent["topic_id"]) if intent.get("topic_id") else None
            if op not in ("create", "delete"):
                raise ValueError(f"unknown operation {op!r}")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("ignoring %s, which cannot be read (%s): delete it once the topic it names is as it "
                           "should be", path, exc)
            continue
        removed = []
        for partition in partitions:
            pdir = data_dir / filenames.partition_dir_name(topic, partition)
            if pdir.is_dir() and _of_topic(pdir, topic_id):
                delete_partition_dir(pdir)
                removed.append(partition)
        if op == "create":
            logger.warning("the creation of topic %s (%d partition(s)) was interrupted by a crash: it is rolled back "
                           "(%d partition dir(s) removed from %s); create the topic again", topic, len(partitions),
                           len(removed), data_dir)
        else:
            logger.warning("the deletion of topic %s was interrupted by a crash: it is finished (%d partition dir(s) "
                           "removed from %s)", topic, len(removed), data_dir)
        path.unlink(missing_ok=True)
        fsync_dir(data_dir)


def _of_topic(pdir: Path, topic_id: uuid.UUID | None) -> bool:
    """Whether ``pdir`` belongs to the intent's topic: its ``partition.metadata`` names ``topic_id`` (a partition
    dir without one, or with one that cannot be read, was made by the interrupted creation: it writes it first)."""
    if topic_id is None:
        return True
    meta = PartitionMetadataFile(pdir / filenames.PARTITION_METADATA_FILENAME)
    try:
        return not meta.exists() or meta.read() == topic_id
    except (OSError, ValueError):
        return True
