"""A topic's creation and deletion, whole across a crash (Kafka's KRaft controller writes a topic and all its
partitions, or its removal, as one atomic metadata batch).

A creation or deletion of several partitions first writes an intent, ``tiered-topic-intent-<uuid>.json``, into
every live data dir (the operation, the topic, its topic id, the partitions and the dirs it was written to, the
first of them its primary), fsynced, the primary's first; once every partition dir is made (or gone) the intents
are removed, the primary's first: that removal is the commit. A process killed in between finds the intent at its
next start (:func:`settle_intents`, for all the data dirs together, before any partition is loaded): a creation
whose primary intent is still there is rolled back in every data dir (the partition dirs it made, those of the
intent's topic id, are deleted: the topic does not exist, and a retried CreateTopics makes it whole), one whose
primary intent is gone had committed (its other intents are removed); a deletion is finished in every data dir.
An intent whose primary dir is not among the live dirs is left as it is, with a warning. Partition dirs are
deleted as Kafka deletes them:
renamed ``<topic>-<partition>.<uuid>-delete`` first (one atomic rename), then removed; a start removes the ones a
crash left (:func:`remove_deleted_dirs`), so a half-removed partition dir is never loaded as a log.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from local import filenames
from local.checkpoint import PartitionMetadataFile, atomic_write, fsync_dir

logger = logging.getLogger(__name__)

INTENT_PREFIX = "tiered-topic-intent-"
_DELETED_DIR = re.compile(r"^.+-[0-9]+\.[0-9a-f]{32}-delete$")


def write_intents(data_dirs: Sequence[Path], op: str, topic: str, topic_id: uuid.UUID | None,
                  partitions: Sequence[int]) -> list[Path]:
    """The intent of ``op`` ("create" or "delete") in each of ``data_dirs``, durable, the first (the primary)
    first; their paths, the primary's first."""
    body = json.dumps({"version": 0, "op": op, "topic": topic, "topic_id": str(topic_id) if topic_id else None,
                       "partitions": sorted(partitions), "dirs": [str(d) for d in data_dirs]}).encode()
    name = f"{INTENT_PREFIX}{uuid.uuid4().hex}.json"
    paths = []
    for data_dir in data_dirs:
        path = data_dir / name
        atomic_write(path, body)
        paths.append(path)
    return paths


def remove_intents(paths: Sequence[Path]) -> None:
    """The commit: each intent removed, the primary's first (:func:`write_intents`' order), each removal durable."""
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


@dataclass(frozen=True)
class _Settlement:
    """What a start does with one intent (:func:`settle_intents`), decided from the files alone."""

    name: str
    copies: list[Path]  # the intent's file in each data dir that holds it
    op: str
    topic: str
    partitions: int
    primary: Path
    committed: bool  # a creation whose primary intent is gone: nothing is undone
    doomed: list[Path]  # the partition dirs the start removes (a creation rolled back, a deletion finished)


def _settlements(data_dirs: Sequence[Path]) -> list[_Settlement]:
    """The intents found in ``data_dirs`` (the live ones) and what a start does with each; one that cannot be read,
    or a creation whose primary dir is not among them, is left as it is, with a warning."""
    found: dict[str, list[Path]] = {}
    for data_dir in data_dirs:
        for path in sorted(data_dir.glob(f"{INTENT_PREFIX}*.json")):
            found.setdefault(path.name, []).append(path)
    live = {str(d) for d in data_dirs}
    settlements = []
    for name, copies in sorted(found.items()):
        try:
            intent = json.loads(copies[0].read_bytes())
            op, topic, partitions = intent["op"], str(intent["topic"]), [int(p) for p in intent["partitions"]]
            topic_id = uuid.UUID(intent["topic_id"]) if intent.get("topic_id") else None
            written_to = [str(d) for d in intent.get("dirs") or [copies[0].parent]]
            if op not in ("create", "delete"):
                raise ValueError(f"unknown operation {op!r}")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("ignoring %s, which cannot be read (%s): delete it once the topic it names is as it "
                           "should be", copies[0], exc)
            continue
        primary = Path(written_to[0])
        if op == "create" and str(primary) not in live:
            logger.warning("%s: the creation of topic %s it names cannot be settled while its data dir %s is "
                           "offline: left as it is", copies[0], topic, primary)
            continue
        committed = op == "create" and not (primary / name).exists()
        doomed = [] if committed else [  # (a creation rolled back, or a deletion finished: in every live dir)
            pdir for data_dir in data_dirs for partition in partitions
            if (pdir := data_dir / filenames.partition_dir_name(topic, partition)).is_dir() and _of_topic(pdir, topic_id)
        ]
        settlements.append(_Settlement(name, copies, op, topic, len(partitions), primary, committed, doomed))
    return settlements


def unsettled_partition_dirs(data_dirs: Sequence[Path]) -> set[Path]:
    """The partition dirs the next start removes, as :func:`settle_intents` decides (changing nothing): those of a
    creation not committed yet, or cut by a crash, and of a deletion under way or cut. A read-only view leaves them
    out, as a writer's start does: the topic of a creation exists once it commits, whole, and a deletion's is gone
    once it starts."""
    return {pdir for settlement in _settlements(data_dirs) for pdir in settlement.doomed}


def settle_intents(data_dirs: Sequence[Path]) -> None:
    """Roll back the creations and finish the deletions a crash interrupted, in all of ``data_dirs`` (the live
    ones) together (see the module docstring). An intent that cannot be read is left where it is, with a warning,
    and nothing is deleted for it."""
    for data_dir in data_dirs:
        for cut in data_dir.glob(f"{INTENT_PREFIX}*.json.tmp"):  # (an intent's write a crash cut: nothing after it)
            cut.unlink(missing_ok=True)
    for settlement in _settlements(data_dirs):
        for pdir in settlement.doomed:
            delete_partition_dir(pdir)
        topic, removed = settlement.topic, len(settlement.doomed)
        if settlement.committed:
            logger.info("the creation of topic %s had committed when a crash came: its last intents are removed",
                        topic)
        elif settlement.op == "create":
            logger.warning("the creation of topic %s (%d partition(s)) was interrupted by a crash: it is rolled back "
                           "(%d partition dir(s) removed); create the topic again", topic, settlement.partitions,
                           removed)
        else:
            logger.warning("the deletion of topic %s was interrupted by a crash: it is finished (%d partition dir(s) "
                           "removed)", topic, removed)
        # The primary's copy last: a start cut short here decides the same way the next time.
        for path in sorted(settlement.copies, key=lambda p: p.parent == settlement.primary):
            path.unlink(missing_ok=True)
            fsync_dir(path.parent)


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
