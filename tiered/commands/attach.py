"""``tiered attach --topic T``: a data dir adopts a topic's partitions from the remote store alone.

What a Kafka follower does when it starts from the remote tier (``buildRemoteLogAuxState``), done from the bucket:
the topic's remote metadata (``<topic>-<id>/<partition>/__remote_log_metadata/``, see :mod:`tiered.metadata`) gives
its topic id, its partitions and per partition the finished remote segments. Each partition dir is written as
Kafka's would be after that step:

- an owner record in the store (:mod:`tiered.ownership`): ownership of the partition's remote data, at a new owner
  epoch above every epoch the store knows, claimed with a conditional write; the data dir that owned it copies and
  deletes nothing more there once it sees the claim (its next copy or expiration);
- ``partition.metadata`` with the bucket's topic id (so reads address the same remote segments);
- ``remote-log-state`` with remote storage enabled, the highest remote offset (the partition holds remote data: no
  process trims it as local-only) and the claim;
- ``leader-epoch-checkpoint``: the claim's lineage, the segments' leader epochs (each with the first offset written
  in it) then the new owner epoch at the remote log end, which new appends carry;
- an empty active segment at the remote log end (highest remote offset + 1) and, when the last remote segment has
  one, its producer snapshot there (as Kafka restores it);
- ``tiered-topic.properties`` with ``remote.storage.enable=true``;
- the data dir's ``log-start-offset-checkpoint`` (the earliest remote offset) and ``recovery-point-offset-checkpoint``
  (the remote log end).

The engine then loads the log as usual: log start offset at the earliest remote offset, local log start and log end
at the remote log end, every offset below read from the remote tier. New records append after it.

The topic id comes from the bucket; ``--topic-id`` picks one when the bucket holds several (a topic deleted and
created again). A partition dir that exists with the same topic id is left as it is; one with a different topic id
(another topic of the same name) is refused before anything is written. The data dirs are locked while their
files are written. Exit codes: 0 attached, 1 nothing to attach or a conflict, 2 usage.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiered.commands._common import UsageError, check_topic_name, load_config
from tiered.rsm import TopicIdPartition


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", "-t", required=True, help="the topic to adopt from the remote store")
    parser.add_argument("--topic-id", metavar="ID",
                        help="the topic id (22-character base64) to adopt when the store holds several for the topic; "
                             "write --topic-id=ID (an id may start with '-')")


@dataclass(frozen=True)
class RemotePartition:
    """What the remote store knows of one partition: enough to write its partition dir."""

    partition: int
    log_start_offset: int  # the earliest remote offset (-1: no finished segment)
    highest_offset: int  # the last remote offset (-1: none)
    segments: int
    size_bytes: int
    epochs: list[tuple[int, int]]  # (leader epoch, first offset in it), ascending
    last_segment: Any  # RemoteLogSegmentMetadata of the segment holding highest_offset, or None
    next_offset: int = -1  # where the adopted log starts when no segment is left (-1: past highest_offset)

    @property
    def log_end_offset(self) -> int:
        """Where the adopted log continues: past the last remote offset, or past every offset the partition's
        remote history names when retention deleted every segment (offsets are never reused)."""
        return max(self.highest_offset + 1, self.next_offset)


class AttachError(Exception):
    """Nothing to attach, or a data dir that holds another topic of that name: exit 1, one line."""


def run(args: argparse.Namespace) -> int:
    check_topic_name(args.topic)
    config = load_config(args)
    try:
        attached = attach(config, args.topic, args.topic_id)
    except AttachError as exc:
        print(f"tiered attach: {exc}", file=sys.stderr)
        return 1
    for line in attached:
        print(line)
    return 0


def attach(config: Any, topic: str, topic_id_text: str | None = None) -> list[str]:
    """Adopt ``topic`` from the remote store into the data dirs; one line per partition saying what it holds."""
    from tiered.commands._remote import remote_plugin
    from tiered.composition import open_log_manager

    with remote_plugin(config, reader=True) as (rsm, store):
        topic_id = _pick_topic_id(store, topic, topic_id_text)
        remote = [_remote_partition(store, topic, topic_id, p) for p in sorted(_partitions(store, topic, topic_id))]
        snapshots = {r.partition: _snapshot(rsm, r) for r in remote if r.last_segment is not None}
        with _locked(config.log_dirs):
            placed = _check_existing(config, topic, topic_id, [r.partition for r in remote])
            claims = {r.partition: _claim(config, store, TopicIdPartition(topic_id, topic, r.partition), r)
                      for r in remote if r.partition not in placed}
            written = _write_partitions(config, topic, topic_id, remote, placed, snapshots, claims)
    lines = []
    # Load them as the engine does: proves the loader takes what was written (and writes its checkpoints back).
    with open_log_manager(config, start_scheduler=False) as manager:
        for r in remote:
            log = manager.get_log(topic, r.partition)
            state = "attached" if r.partition in written else "already attached"
            if log is None:
                raise AttachError(f"{topic}-{r.partition} did not load after attaching; see the log (-v)")
            owner = log.remote_log_state.owner_epoch
            lines.append(
                f"{state} {topic}-{r.partition}: {r.segments} remote segment(s), {r.size_bytes:,} bytes, log start "
                f"offset {log.log_start_offset}, log end offset {log.log_end_offset}"
                + (f", owner epoch {owner}" if owner >= 0 else "")
            )
    return lines


def _claim(config: Any, store: Any, tip: Any, r: RemotePartition) -> Any:
    """Take ownership of the partition's remote data (:mod:`tiered.ownership`): a new owner epoch above every epoch
    the store knows, whose lineage is the remote segments' epochs up to the remote log end, then the new epoch from
    there. The data dir that owned it finds, at its next copy or expiration, that it lost it."""
    import socket
    import time

    from tiered.errors import ObjectExistsError, RemoteStorageError
    from tiered.ownership import OwnerRecord, claim_lineage, put_claim

    epoch = max(store.max_epoch(tip), -1) + 1
    record = OwnerRecord(epoch, uuid.uuid4().hex, claim_lineage(r.epochs, r.log_end_offset, epoch),
                         int(time.time() * 1000), socket.gethostname(), tuple(str(d) for d in config.log_dirs))
    try:
        put_claim(store, tip, record)  # (a lost answer to a claim that stands is no failure)
    except ObjectExistsError:
        pass  # claimed by another attach at the same moment: the listing below names it
    except (RemoteStorageError, OSError) as exc:
        raise AttachError(
            f"{tip.topic}-{tip.partition}: the store did not answer the ownership claim of owner epoch {epoch} ({exc}); "
            "nothing was written here. A write that was not answered may still land, and then the partition's current "
            "owner stops tiering it: run attach again (it claims the next epoch)") from exc
    newest = store.owner_records(tip)[-1:]
    if not newest or newest[0].owner_id != record.owner_id:
        held = newest[0].describe() if newest else "nobody"
        raise AttachError(f"{tip.topic}-{tip.partition}: another data dir took ownership of its remote data at the same "
                          f"time ({held}): nothing was written here; run attach again to take it over")
    return record


# ------------------------------------------------------------------------------------------------------------
# The remote side


def _pick_topic_id(store: Any, topic: str, topic_id_text: str | None) -> uuid.UUID:
    from tiered import layout
    from tiered.layout import topic_ids_in_store

    found = topic_ids_in_store(store.store, store.prefix, topic)
    where = f"{store.store!r} under prefix {store.prefix!r}"  # (a prefix typo is the usual cause: name it)
    if topic_id_text is not None:
        try:
            wanted = layout.parse_kafka_uuid(topic_id_text)
        except ValueError as exc:
            raise UsageError(f"invalid --topic-id: {exc}") from None
        if wanted not in found:
            raise AttachError(f"no remote metadata of topic {topic!r} with id {topic_id_text} in {where}"
                              + (f" (ids found: {_ids(found)})" if found else ""))
        return wanted
    if not found:
        raise AttachError(f"no remote metadata of topic {topic!r} in {where}: nothing to attach (check the topic "
                          "name and rsm.config.prefix)")
    if len(found) > 1:
        first = layout.kafka_uuid(next(iter(found)))
        raise UsageError(f"the remote store holds topic {topic!r} under {len(found)} topic ids ({_ids(found)}): "
                         f"pick one with --topic-id=ID (e.g. --topic-id={first}; with the '=', an id that starts "
                         "with '-' is not taken for an option)")
    return next(iter(found))


def _ids(found: dict[uuid.UUID, set[int]]) -> str:
    from tiered import layout

    return ", ".join(f"{layout.kafka_uuid(i)} ({len(p)} partition(s))" for i, p in found.items())


def _partitions(store: Any, topic: str, topic_id: uuid.UUID) -> set[int]:
    from tiered.layout import topic_ids_in_store

    return topic_ids_in_store(store.store, store.prefix, topic)[topic_id]


def _remote_partition(store: Any, topic: str, topic_id: uuid.UUID, partition: int) -> RemotePartition:
    tip = TopicIdPartition(topic_id, topic, partition)
    segments = store.readable_segments(tip)
    unreadable = store.unreadable_events(tip) if hasattr(store, "unreadable_events") else {}
    if unreadable:
        # A FINISHED event not read is a segment not seen: the adopted log would end before what the store holds,
        # the next appends would take offsets it holds, and the next pass would delete that segment as theirs.
        key, why = sorted(unreadable.items())[0]
        raise AttachError(
            f"{topic}-{partition}: {len(unreadable)} remote metadata object(s) cannot be read, e.g. {key} ({why}); "
            "attaching now could adopt a log shorter than the remote tier holds. Nothing was attached (no partition "
            "of the topic: adopting some would change its partition count for keyed producers). Run attach again "
            "when the store answers; an object that stays unreadable is damage (tiered verify --remote names it): "
            "restore it from a backup or the bucket's object versioning")
    if not segments:  # none ever, or all deleted by retention: the log goes on where the partition's history ended
        ended = store.next_offset(tip) if hasattr(store, "next_offset") else 0
        return RemotePartition(partition, ended, -1, 0, 0, [], None, ended)
    epochs: list[tuple[int, int]] = []
    for md in segments:  # start offset order
        for epoch, start in sorted(md.segment_leader_epochs.items(), key=lambda e: e[1]):
            if not epochs or epoch > epochs[-1][0]:
                epochs.append((epoch, start))
    last = max(segments, key=lambda m: m.end_offset)
    return RemotePartition(
        partition,
        min(m.start_offset for m in segments),
        last.end_offset,
        len(segments),
        sum(m.segment_size_in_bytes for m in segments),
        epochs,
        last,
    )


def _snapshot(rsm: Any, remote: RemotePartition) -> bytes | None:
    """The producer snapshot uploaded with the last remote segment (None when it has none)."""
    from tiered.errors import RemoteResourceNotFoundError
    from tiered.rsm import IndexType

    try:
        with rsm.fetch_index(remote.last_segment, IndexType.PRODUCER_SNAPSHOT) as f:
            data = f.read()
    except RemoteResourceNotFoundError:
        return None
    return bytes(data) or None


# ------------------------------------------------------------------------------------------------------------
# The local side


def _check_existing(config: Any, topic: str, topic_id: uuid.UUID, partitions: list[int]) -> dict[int, Path]:
    """The partitions already present (with the same topic id), by partition dir; AttachError for a different id."""
    from local import filenames
    from local.checkpoint import PartitionMetadataFile, kafka_uuid_to_str

    present: dict[int, Path] = {}
    for data_dir in map(Path, config.log_dirs):
        for partition in partitions:
            pdir = data_dir / filenames.partition_dir_name(topic, partition)
            if not pdir.exists():
                continue
            meta = PartitionMetadataFile(pdir / filenames.PARTITION_METADATA_FILENAME)
            existing = meta.read() if meta.exists() else None
            if existing != topic_id:
                held = f"topic id {kafka_uuid_to_str(existing)}" if existing else "no topic id"
                raise AttachError(
                    f"{pdir} already holds {topic}-{partition} with {held}, not the remote store's "
                    f"{kafka_uuid_to_str(topic_id)}: refusing to attach over another topic of the same name (use an "
                    "empty data dir, or delete that topic's partition dirs first)")
            present[partition] = pdir
    return present


@contextmanager
def _locked(dirs: list[Path]) -> Iterator[None]:
    """Hold every data dir's ``.lock`` as a LogManager does (refused while a ``tiered run`` holds one)."""
    from local.manager import LOCK_FILENAME

    fds: list[int] = []
    try:
        for data_dir in map(Path, dirs):
            data_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(data_dir / LOCK_FILENAME, os.O_RDWR | os.O_CREAT, 0o644)
            fds.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise AttachError(f"data dir {data_dir} is locked by another process (a running tiered run?): stop "
                                  "it first") from None
        yield
    finally:
        for fd in fds:
            os.close(fd)


def _write_partitions(
    config: Any, topic: str, topic_id: uuid.UUID, remote: list[RemotePartition], present: dict[int, Path],
    snapshots: dict[int, bytes | None], claims: dict[int, Any],
) -> set[int]:
    """Write the partition dirs not yet present (see the module docstring); returns their partitions."""
    from local import filenames
    from local.checkpoint import OffsetCheckpointFile

    dirs = [Path(d) for d in config.log_dirs]
    start_offsets: dict[Path, dict[tuple[str, int], int]] = {}
    recovery_points: dict[Path, dict[tuple[str, int], int]] = {}
    written: set[int] = set()
    for i, r in enumerate(p for p in remote if p.partition not in present):
        data_dir = dirs[i % len(dirs)]
        pdir = data_dir / filenames.partition_dir_name(topic, r.partition)
        _write_partition_dir(pdir, topic_id, r, snapshots.get(r.partition), claims[r.partition])
        end = r.log_end_offset
        start_offsets.setdefault(data_dir, {})[(topic, r.partition)] = max(r.log_start_offset, 0)
        recovery_points.setdefault(data_dir, {})[(topic, r.partition)] = end
        written.add(r.partition)
    for name, per_dir in ((filenames.LOG_START_OFFSET_CHECKPOINT_FILENAME, start_offsets),
                          (filenames.RECOVERY_POINT_CHECKPOINT_FILENAME, recovery_points)):
        for data_dir, offsets in per_dir.items():
            checkpoint = OffsetCheckpointFile(data_dir / name)
            merged = checkpoint.read() if checkpoint.path.exists() else {}
            merged.update(offsets)
            checkpoint.write(merged)
    return written


def _write_partition_dir(pdir: Path, topic_id: uuid.UUID, r: RemotePartition, snapshot: bytes | None, claim: Any) -> None:
    from local import filenames
    from local.checkpoint import EpochEntry, LeaderEpochCheckpointFile, PartitionMetadataFile, atomic_write
    from local.manager import TOPIC_CONFIG_FILENAME
    from local.remote_state import RemoteLogState, RemoteLogStateFile
    from local.segment import LogSegment

    pdir.mkdir(parents=True)
    end = r.log_end_offset
    LogSegment.open(pdir, end).close()  # the empty active segment at the remote log end
    if snapshot is not None:
        atomic_write(filenames.producer_snapshot_file(pdir, end), snapshot)
    # The claim's lineage: the remote epochs, then the new owner epoch from the log end (new appends carry it).
    LeaderEpochCheckpointFile(pdir / filenames.LEADER_EPOCH_CHECKPOINT_FILENAME).write(
        EpochEntry(epoch, start) for epoch, start in claim.lineage
    )
    RemoteLogStateFile(pdir).write(RemoteLogState(True, r.highest_offset, claim.owner_epoch, claim.owner_id))
    atomic_write(pdir / TOPIC_CONFIG_FILENAME, b"remote.storage.enable=true\n")
    PartitionMetadataFile(pdir / filenames.PARTITION_METADATA_FILENAME).write(topic_id)  # last: marks it complete
