"""Ownership of a partition's remote data: one writer per partition across machines that share a store.

Kafka fences with leader epochs: a new leader has a higher epoch, and a deposed leader's later writes are not in
the new leader's epoch lineage, so nothing acts on them. Here several data dirs (machines) may point at one bucket,
and ``tiered attach`` moves a partition to a new one while the old one may still be running, so the store itself
records who owns each partition's remote data.

Owner records
    ``<prefix>/<topic>-<topicId>/<partition>/__remote_log_metadata/owner-<10-digit owner epoch>.json``, one small
    immutable JSON object per claim (:class:`OwnerRecord`)::

        {"version": 0, "owner_epoch": 1, "owner_id": "<32 hex digits>", "claimed_at_ms": 1764200000000,
         "host": "machine-b", "log_dirs": ["/var/lib/tiered"], "lineage": [[0, 0], [1, 48000]]}

    The owner epoch is a leader epoch: the claimant's log appends in it from the claim on. ``lineage`` is the
    leader-epoch lineage the claimant adopted (each epoch with its first offset, Kafka's leader-epoch checkpoint),
    ending with its own epoch at the first offset it writes. The newest record (highest epoch) names the current
    owner. Records are never deleted.

Claiming
    A claim is a conditional create of the next record (S3 ``If-None-Match: *``, an exclusive create on a
    directory, see :func:`tiered.store.put_if_absent`): two claimants racing to one epoch cannot both win (on a store
    that declares conditional writes; on another, only within one process, and a warning says so), the loser gets :class:`tiered.errors.ObjectExistsError`. The claimant then lists the
    records again and owns the partition only if its record is the newest (a claim of a higher epoch made meanwhile
    wins). ``tiered attach`` claims epoch max(every epoch the store knows) + 1; a data dir that tiers a partition
    nobody claimed yet (a new topic, or remote data written before ownership existed) claims its log's latest leader
    epoch at its first copy or expiration. The data dir remembers its claim in ``remote-log-state``
    (:mod:`local.remote_state`), and a claim it is about to write as pending before the write: a write whose answer
    was lost (a 500 after the store took it, a timeout, a PUT held somewhere that reaches the store later) may land
    at any time, and the record it leaves is then known as this data dir's own. Until the store answers, the claim
    is made again with the same epoch and id.

A new owner epoch per ``tiered run``
    Kafka gives a partition a new leader epoch at every election, a broker's restart included. ``tiered run`` claims
    each partition its data dir owns again at its start, before it serves the partition
    (:meth:`OwnershipGuard.renew`): the next owner epoch, from the log end on. The claims are made behind the
    endpoints, so that the others are served meanwhile: a partition whose claim is under way is answered
    NOT_LEADER_OR_FOLLOWER over the Kafka protocol, as one whose leader is being elected, and its HTTP requests wait
    (at most 15 s, then it is served anyway). A copy of a data dir (a cloned machine, a restored backup) started
    beside its original then fences the one that started first, as a leader elected anew does: from the claim on,
    the other's copies lie outside the lineage, its writes are refused, and no record of the two is ever read as the
    other's. (Without it both would hold the same claim; the content check below finds that only once their remote
    segments overlap.) A data dir whose log ends before the partition's copies do, copies under way included, is not
    claimed anew (its lineage would drop them); the copies are listed again once a claim stands, and copies its
    former holder finished meanwhile past the claimant's log end are said in an ERROR (they lie outside its lineage,
    as records after an unclean leader election).
    A one-pass process (``tiered offload``) claims anew only where its first copy pass must delete
    copies left COPY_SEGMENT_STARTED under a claim it did not make: such a copy may be one that a copy of the data dir
    has under way, not one a crash left (:meth:`tiered.rlm_copy.RLMCopyTask._fenced_others`); the writer of a copy
    deleted meanwhile finds the deletion before its COPY_SEGMENT_FINISHED and does not count the copy
    (:func:`tiered.metadata.check_copy_not_deleted`).

Fencing
    Before each copy and expiration run, and again before each segment it copies (the first of a copy run
    excepted, which the run's own listing just covered) or deletes, the remote tier lists the partition's owner
    records (one LIST). A data dir whose claim is not the newest has lost the partition: it
    copies and deletes nothing more there, logs one ERROR, reports the state (``status``, ``/metrics``
    ``RemoteLogOwnership``, exit 1 from ``offload``), and its local data stays as it is. A copy lists them again
    before its COPY_SEGMENT_FINISHED event, once its objects are up (an upload can take minutes): in this process
    (:meth:`OwnershipGuard.ensure_owner`) and in the copier process, given up to 16 segments at once
    (:func:`tiered.metadata.check_owner_epoch`), which also ends with the process that started it (a SIGKILL of
    ``tiered run`` alone leaves no copy finishing behind it). The window left is between that listing and the event,
    and a deletion's between its listing and its DELETE event (Kafka's old leader has such a window). A copy
    finished in it lies outside the new lineage (below); a deletion finished in it was due by its retention rules
    when it decided.

Lineage
    Readers anywhere (a log's remote reads, ``consume``, Spark, ``attach``, ``status``) see only the FINISHED segments
    within the newest record's lineage (:func:`within_lineage`, Kafka's ``isRemoteSegmentWithinLeaderEpochs``): every
    leader epoch of the segment is in the lineage and its offsets end before the next epoch of the lineage starts. A
    deposed owner's copies made after the claim hold offsets past its epoch's end in the new lineage: they are never
    read, and the current owner's remote retention deletes them. A partition without owner records (remote data
    written before ownership existed, or by a metadata manager without ownership) is read as before.

Wrong store
    A data dir whose ``remote-log-state`` says a partition has remote data refuses a store that holds none of that
    partition's metadata (:class:`tiered.errors.RemoteStoreMismatchError`, naming both): no copy, expiration or read
    goes to a wrong bucket or ``rsm.config.prefix``.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from local.crc import crc32c
from local.remote_state import REMOTE_LOG_STATE_FILENAME
from tiered.errors import (
    NotPartitionOwnerError,
    ObjectExistsError,
    RemoteStorageError,
    RemoteStoreMismatchError,
)
from tiered.rsm import RemoteLogSegmentMetadata, TopicIdPartition
from tiered.sealed_json import seal, unseal

if TYPE_CHECKING:
    from local.log import Log

logger = logging.getLogger(__name__)

_VERSION = 0
Lineage = tuple[tuple[int, int], ...]  # (leader epoch, first offset), ascending


@dataclass(frozen=True, slots=True)
class OwnerRecord:
    """One claim of a partition's remote data (see the module docstring)."""

    owner_epoch: int
    owner_id: str
    lineage: Lineage
    claimed_at_ms: int
    host: str = ""
    log_dirs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.owner_epoch < 0:
            raise ValueError(f"owner epoch must be >= 0, got {self.owner_epoch}")
        if not self.lineage or self.lineage[-1][0] != self.owner_epoch:
            raise ValueError(f"the lineage {list(self.lineage)} must end with the owner epoch {self.owner_epoch}")
        epochs = [e for e, _ in self.lineage]
        starts = [s for _, s in self.lineage]
        if epochs != sorted(set(epochs)) or starts != sorted(starts) or starts[0] < 0:
            raise ValueError(f"the lineage {list(self.lineage)} must have ascending epochs and offsets")

    @property
    def start_offset(self) -> int:
        """The first offset the owner writes (its epoch's start in the lineage)."""
        return self.lineage[-1][1]

    def describe(self) -> str:
        where = f"{self.host}:{','.join(self.log_dirs)}" if self.host else ",".join(self.log_dirs) or "?"
        return f"owner epoch {self.owner_epoch} (claimed by {where}, from offset {self.start_offset})"

    def encode(self) -> bytes:
        return seal(json.dumps({
            "version": _VERSION, "owner_epoch": self.owner_epoch, "owner_id": self.owner_id,
            "claimed_at_ms": self.claimed_at_ms, "host": self.host, "log_dirs": list(self.log_dirs),
            "lineage": [list(entry) for entry in self.lineage],
        }, separators=(",", ":")))

    @classmethod
    def decode(cls, data: bytes) -> OwnerRecord:
        """The record in ``data``; ``ValueError`` naming what is wrong for anything else."""
        try:
            d = unseal(data)
            if d["version"] != _VERSION:
                raise ValueError(f"unsupported version {d['version']!r}")
            return cls(int(d["owner_epoch"]), str(d["owner_id"]),
                       tuple((int(e), int(s)) for e, s in d["lineage"]), int(d["claimed_at_ms"]),
                       str(d.get("host", "")), tuple(str(p) for p in d.get("log_dirs", ())))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"malformed owner record: {exc!r}") from None


def segment_epoch_ranges(md: RemoteLogSegmentMetadata) -> list[tuple[int, int, int]]:
    """``(epoch, first offset, last offset)`` of each leader epoch of the segment, in offset order."""
    items = sorted(md.segment_leader_epochs.items(), key=lambda kv: kv[1])
    return [(epoch, start, items[i + 1][1] - 1 if i + 1 < len(items) else md.end_offset)
            for i, (epoch, start) in enumerate(items)]


def within_lineage(md: RemoteLogSegmentMetadata, lineage: Lineage) -> bool:
    """Whether every leader epoch of ``md`` lies within ``lineage`` (see the module docstring).

    An epoch of the lineage but its last must end before the lineage's next epoch starts (a deposed owner's later
    offsets do not); the first entry has no lower bound (the log start moves); epochs from the owner epoch on belong
    to the owner, from its start offset."""
    if not lineage:
        return True
    owner_epoch, owner_start = lineage[-1]
    position = {epoch: i for i, (epoch, _) in enumerate(lineage)}
    for epoch, first, last in segment_epoch_ranges(md):
        if epoch >= owner_epoch:
            if len(lineage) > 1 and first < owner_start:
                return False
            continue
        i = position.get(epoch)
        if i is None:
            return False
        if i > 0 and first < lineage[i][1]:
            return False
        if last >= lineage[i + 1][1]:
            return False
    return True


def claim_lineage(epochs: Iterable[tuple[int, int]], end_offset: int, owner_epoch: int) -> Lineage:
    """The lineage of a claim at ``owner_epoch`` by a data dir whose log continues at ``end_offset``: the entries of
    ``epochs`` (ascending) that start before it, then the owner epoch from there (or from the first entry's start,
    when the owner epoch is the latest of ``epochs`` already)."""
    kept = [(e, s) for e, s in epochs if s < end_offset and e < owner_epoch]
    mine = [(e, s) for e, s in epochs if e == owner_epoch]
    start = mine[0][1] if mine else end_offset
    return (*kept, (owner_epoch, start))


class OwnershipStore(Protocol):
    """What the guard needs of the metadata store (:class:`tiered.metadata.RemoteLogMetadataStore` has it)."""

    def owner_records(self, tip: TopicIdPartition) -> list[OwnerRecord]: ...

    def claim_ownership(self, tip: TopicIdPartition, record: OwnerRecord) -> None: ...

    def holds_metadata(self, tip: TopicIdPartition) -> bool: ...

    def max_epoch(self, tip: TopicIdPartition) -> int: ...

    def readable_segments(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]: ...


# ------------------------------------------------------------------------------------------------------------
# The states a data dir's partition can be in, as the remote tier and `tiered status` report them

OWNER = "owner"
LOST = "lost"
WRONG_STORE = "wrong_store"
STATES = (OWNER, LOST, WRONG_STORE)


@dataclass(frozen=True, slots=True)
class Ownership:
    """Where a data dir's partition stands (``state`` one of :data:`STATES`); ``detail`` is the one-line reason."""

    state: str
    detail: str
    owner: OwnerRecord | None = None
    # OWNER, but the store lacks this data dir's own claim (its newest record is older: the claim's object was
    # deleted): the writer claims again above it (OwnershipGuard), as a Kafka leader never steps down for an older
    # leader epoch than its own.
    reclaim: bool = False


def assess(
    name: str, local_epoch: int, local_id: str, records: Sequence[OwnerRecord], *, has_remote_data: bool,
    below_local_start: bool, holds_metadata: bool, state_file: str, store: str, damaged: Mapping[int, str] | None = None,
    pending: tuple[int, str] | None = None,
) -> Ownership | None:
    """The ownership of partition ``name`` from its data dir's claim (``local_epoch``/``local_id``, -1/"" when none)
    and the store's ``records``; None when nobody claimed it yet and nothing is wrong (the data dir may claim it).
    ``damaged``: owner records that could not be read (epoch -> key): when one of them may be the newest, nothing
    can be told but that (a damaged record is not a wrong bucket). ``pending``: the (epoch, id) of a claim the data
    dir wrote without an answer: the newest record being it, the data dir owns the partition (its caller then
    remembers the claim as made)."""
    newest_epoch = records[-1].owner_epoch if records else -1
    suspect = {epoch: key for epoch, key in (damaged or {}).items() if epoch >= newest_epoch}
    if suspect:
        epoch, key = max(suspect.items())
        return Ownership(WRONG_STORE, f"{name}: its owner record {key} (owner epoch {epoch}) in {store} cannot be read "
                                      "(damaged): who owns the partition's remote data cannot be told, so nothing is "
                                      "copied, deleted or read there until the record is restored, or until tiered "
                                      "attach on the data dir that should own the partition claims it above")
    if records:
        newest = records[-1]
        newest_claim = (newest.owner_epoch, newest.owner_id)
        if newest_claim in ((local_epoch, local_id), pending):
            return Ownership(OWNER, f"{name}: this data dir owns its remote data at {newest.describe()}", newest)
        if local_epoch > newest.owner_epoch:
            # This data dir's own claim is missing: no claim above it stands (one would be the newest). Deposing it
            # for good in favour of an older claim (its own, often) stopped every write to the partition.
            return Ownership(OWNER, f"{name}: the owner record of this data dir's claim (owner epoch {local_epoch}, "
                                    f"{state_file}) is missing from {store}, whose newest is {newest.describe()} "
                                    "(deleted?): this data dir claims the partition again above it", reclaim=True)
        if local_epoch < 0 and pending is None:
            # (not "lost": it never had it. Another data dir's partition of the same topic id: B given A's topic)
            return Ownership(LOST, f"{name}: another data dir owns its remote data, {newest.describe()}, and this data "
                                   f"dir never claimed it ({state_file}): it copies and deletes nothing there; write to "
                                   "the owner's data dir, or run tiered attach here to take the partition over", newest)
        mine = f"this data dir's claim is owner epoch {local_epoch}" if local_epoch >= 0 else "this data dir never claimed it"
        if local_epoch == newest.owner_epoch:
            mine += " with another claim id (a copy of a data dir?)"
        if pending is not None:
            mine += (f"; its claim of owner epoch {pending[0]} is not the newest (another data dir's claim of that "
                     "epoch came first, or its write has not landed)")
        left = diverged_at(newest.lineage, local_epoch)
        where = (f"; its records from offset {left} on are not the partition's (the owner's history left this data "
                 "dir's claim there: export them before moving the partition dir aside, if they matter)"
                 if left is not None else "")
        return Ownership(LOST, f"{name}: this data dir lost ownership of its remote data to {newest.describe()} "
                               f"({mine}, {state_file}): it copies and deletes nothing there any more; its local data "
                               f"stays as it is{where}", newest)
    if local_epoch >= 0:
        return Ownership(WRONG_STORE, f"{name}: {state_file} says this data dir owns its remote data at owner epoch "
                                      f"{local_epoch}, but {store} holds no owner record of it: a wrong bucket or "
                                      "rsm.config.prefix? (nothing is copied, deleted or read there)")
    if has_remote_data and below_local_start and not holds_metadata:
        return Ownership(WRONG_STORE, f"{name}: {state_file} says it has remote data, but {store} holds no metadata "
                                      "of it: a wrong bucket or rsm.config.prefix? (nothing is copied, deleted or "
                                      "read there)")
    return None


def diverged_at(lineage: Lineage, claim_epoch: int) -> int | None:
    """Where the partition's history, as ``lineage`` (the newest claim's) holds it, leaves the claim of owner epoch
    ``claim_epoch`` (a deposed data dir's): the first offset of the next epoch, from which that data dir's records
    are not the partition's; None when the lineage does not go past it (or it never claimed). Not the newest
    claim's start: the new owner claims again at every start, so that one moves."""
    if claim_epoch < 0:
        return None
    return next((start for epoch, start in lineage if epoch > claim_epoch), None)


def copies_end(segments: Iterable[RemoteLogSegmentMetadata], lineage: Lineage) -> int:
    """The last offset the copies among ``segments`` within ``lineage`` reach, copies under way
    (COPY_SEGMENT_STARTED) included, as one finishing later counts as much as one finished; -1 when none. (A former
    owner's late copies, outside the lineage, are garbage its retention deletes.)"""
    from tiered.rsm import RemoteLogSegmentState as S

    return max((md.end_offset for md in segments if md.state in (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED)
                and (not lineage or within_lineage(md, lineage))), default=-1)


def behind_detail(name: str, remote_end: int, log_end: int) -> str:
    """The one line for a data dir whose log ends before the copies made under the claim it holds: an older copy
    of the data dir that made them (a restored backup), or one whose local log lost records since."""
    return (f"{name}: the remote tier holds copies made under this data dir's claim up to offset {remote_end}, past "
            f"its log end {log_end} (a data dir restored from an older copy, beside the one that made them?): it does "
            "not claim the partition anew and deletes no copy under way there. To use this data dir in place of that "
            "one, stop it, move this partition dir aside and run tiered attach (the remote tier's records are read "
            "from there)")


def behind(name: str, segments: Iterable[RemoteLogSegmentMetadata], lineage: Lineage, log_end: int) -> str | None:
    """:func:`behind_detail` when the copies among ``segments`` within ``lineage`` (:func:`copies_end`) reach
    ``log_end`` or past it, else None: what offload, status and verify each ask of a data dir holding the claim."""
    remote_end = copies_end(segments, lineage)
    return behind_detail(name, remote_end, log_end) if remote_end >= log_end else None


_INT32_MAX = 2**31 - 1


def segment_differs(seg: Any, md: RemoteLogSegmentMetadata, checksums: Any) -> str | None:
    """Why the local segment ``seg`` (None: none starts at ``md``'s start; else anything with ``size`` and
    ``log.read(position, size)``) does not hold ``md``'s bytes, or None. ``checksums``: ``md``'s recorded ones."""
    if seg is None:
        return f"no local segment starts at offset {md.start_offset}"
    size = seg.size
    obj = checksums.objects.get(".log") if checksums is not None else None
    # the size its checksums recorded, else the metadata's (an int32: clamped for a segment of 2 GiB or more)
    there = obj.size if obj is not None else md.segment_size_in_bytes
    if size != there and (obj is not None or there < _INT32_MAX):
        return f"{size} bytes here, {there} there"
    if obj is None or not obj.crcs:
        return None  # (a copy made without checksums: its size is all there is to compare)
    chunk = checksums.chunk_bytes
    last = len(obj.crcs) - 1
    for n in sorted({0, last}):
        data = seg.log.read(n * chunk, min(chunk, size - n * chunk))
        if crc32c(data) != obj.crcs[n]:
            return f"bytes {n * chunk}..{n * chunk + len(data) - 1} differ"
    return None


def _local_damage(seg: Any) -> str | None:
    """Why the local segment ``seg`` is damaged (a batch fails its CRC, or a torn or garbled tail), or None: read
    whole, only where its bytes differ from its remote copy's checksums."""
    from local.errors import CorruptRecordError

    if seg is None:
        return None
    end = 0
    try:
        for batch in seg.log.batches(verify=True):
            end = batch.position + batch.size_in_bytes
    except (CorruptRecordError, OSError) as exc:
        return str(exc)
    size = seg.log.size_in_bytes
    return None if end == size else f"its batches end at byte {end} of its {size}"


def put_claim(store: OwnershipStore, tip: TopicIdPartition, record: OwnerRecord) -> None:
    """``store.claim_ownership(tip, record)``, where a failed answer is no failure when the claim stands: a 500 after
    the store wrote it, or a timeout, and the owner records read back end with this claim. Without that a data dir
    took its own stored claim, found at its next pass, for another's, and fenced the partition for good (and an
    attach deposed the owner while it said it failed). :class:`ObjectExistsError` (the epoch claimed already, by
    anyone) is the caller's."""
    try:
        store.claim_ownership(tip, record)
    except ObjectExistsError:
        raise
    except (RemoteStorageError, OSError):
        try:
            landed = store.owner_records(tip)
        except (RemoteStorageError, OSError):
            landed = []
        if not landed or landed[-1].owner_id != record.owner_id:
            raise
        logger.info("%s: the answer to its ownership claim was lost, but the claim stands: %s", tip, record.describe())


class OwnershipGuard:
    """Checks, and claims when nobody has, ownership of each partition's remote data for one remote tier (see the
    module docstring). Thread-safe; one per :class:`tiered.remote_log_manager.RemoteLogManager`."""

    def __init__(
        self, store: OwnershipStore, *, clock: Callable[[], int], store_name: str,
        log_dirs: Sequence[str] = (), on_change: Callable[[TopicIdPartition, Ownership], None] | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._store_name = store_name
        self._log_dirs = tuple(str(d) for d in log_dirs)
        self._host = socket.gethostname()
        self._on_change = on_change
        self._lock = threading.Lock()
        self._states: dict[TopicIdPartition, Ownership] = {}
        self._store_checked: set[TopicIdPartition] = set()
        self._claims: dict[TopicIdPartition, threading.Lock] = {}  # one claim of a partition at a time
        # The content check (:meth:`_foreign_segment`): remote segments found to hold this data dir's records, and
        # the partitions fenced for holding others' under this data dir's claim (sticky for the process).
        self._matched: set[uuid.UUID] = set()
        self._fenced: dict[TopicIdPartition, Ownership] = {}
        self._claimed_here: set[TopicIdPartition] = set()  # partitions whose current claim this process made
        self._listed_at: dict[TopicIdPartition, float] = {}  # (time.monotonic) each partition's last listed check

    def states(self) -> Mapping[TopicIdPartition, Ownership]:
        with self._lock:
            return dict(self._states)

    def state_of(self, tip: TopicIdPartition) -> Ownership | None:
        """``tip``'s entry of :meth:`states` (for each fetched or produced partition: no copy of the whole map)."""
        with self._lock:
            return self._states.get(tip)

    def checked_within(self, tip: TopicIdPartition, seconds: float) -> bool:
        """Whether :meth:`ensure_owner` or :meth:`renew` listed ``tip``'s owner records in the last ``seconds``: the
        expiration task, with nothing to delete, leaves the check to the copy task's pass (one LIST a pass, not two)."""
        with self._lock:
            at = self._listed_at.get(tip)
        return at is not None and time.monotonic() - at < seconds

    def _listed(self, tip: TopicIdPartition) -> None:
        with self._lock:
            self._listed_at[tip] = time.monotonic()

    def ensure_owner(self, log: Log, tip: TopicIdPartition) -> Ownership:
        """Raise unless this data dir owns ``tip``'s remote data, claiming it first when nobody has (see the module
        docstring). :class:`NotPartitionOwnerError` for a lost partition, :class:`RemoteStoreMismatchError` for a
        store that lacks it; a store error propagates (the caller retries at its next run)."""
        with self._lock:
            claim_lock = self._claims.setdefault(tip, threading.Lock())
        with claim_lock:  # the copy and expiration tasks: the one that finds the other's claim must know it as ours
            found = self._assess(log, tip, self._store.owner_records(tip))
            self._listed(tip)
            if found is None:
                self.warn_of_namesakes(log, tip)
                found = self._claim(log, tip)
            elif found.reclaim:
                found = self._claim_again(log, tip, found)
            else:
                self._confirm_pending(log, found)
            if found.state == OWNER:
                found = self._checked_content(log, tip, found)
        self._set(tip, found)
        if found.state == LOST:
            raise NotPartitionOwnerError(found.detail, retriable=False)
        if found.state == WRONG_STORE:
            raise RemoteStoreMismatchError(found.detail, retriable=False)
        return found

    def check(self, log: Log, tip: TopicIdPartition) -> Ownership | None:
        """Where ``tip`` stands as the store's owner records say now (one LIST), without claiming it or logging it:
        None when nobody claimed it yet (the first copy does). For a one-shot command (``tiered produce``,
        ``consume``), which runs no pass and says it itself."""
        return self._assess(log, tip, self._store.owner_records(tip))

    def warn_of_namesakes(self, log: Log, tip: TopicIdPartition) -> None:
        """Before a partition's first claim, and when ``tiered produce`` creates a tiered topic: a WARNING when the
        store holds another topic of the same name (a data dir that produced to a topic another machine created and
        tiers, instead of attaching it, made a topic of its own: its records go beside the other's, not after
        them). A store error here is only logged."""
        others = getattr(self._store, "other_topic_ids", None)
        if others is None:
            return
        try:
            found = others(tip)
        except Exception as exc:
            logger.debug("%s: cannot list the store's other topics of its name: %s", log.name, exc)
            return
        if found:
            from tiered.layout import kafka_uuid

            ids = ", ".join(f"{kafka_uuid(t)} (partitions {', '.join(map(str, sorted(p)))})" for t, p in found.items())
            logger.warning("%s: %s also holds remote data of another topic named %s, topic id %s: this data dir's %s "
                           "(topic id %s) is a different topic, tiered beside it. To read or extend that one here, "
                           "delete this topic's partitions here and run tiered attach -t %s", log.name,
                           self._store_name, tip.topic, ids, tip.topic, kafka_uuid(tip.topic_id), tip.topic)

    def trusts_remote_copies(self, log: Log, tip: TopicIdPartition) -> bool:
        """Whether local retention may rely on the partition's remote segments as copies of its local ones: False
        for a partition this data dir does not own (its local data stays as it is), and once a remote segment was
        found to hold other records than the local segment at its offsets (a copy of this data dir writing to the
        same bucket: :meth:`_checked_content`), checked here too, as retention may run before the copy task's
        first pass."""
        with self._lock:
            if tip in self._fenced:
                return False
        # The owner records as the store holds them now (one LIST): a claim made since this process last looked (a
        # copy of this data dir fencing it, whose first pass may delete what this one just copied) keeps the local
        # segments; so does a store that does not answer.
        try:
            found = self._assess(log, tip, self._store.owner_records(tip))
        except Exception as exc:
            logger.warning("%s: cannot list the owner records of its remote data (%s): local retention keeps its "
                           "segments this time", log.name, exc)
            return False
        if found is not None:
            self._set(tip, found)
            if found.state != OWNER:
                return False  # a lost partition's local data stays as it is (the owner's segments are not its copies)
        foreign = self._foreign_segment(log, tip)
        if foreign is None:
            return True
        self._set(tip, self._fence(log, tip, foreign))
        return False

    def _checked_content(self, log: Log, tip: TopicIdPartition, found: Ownership) -> Ownership:
        with self._lock:
            fenced = self._fenced.get(tip)
        if fenced is not None:
            return fenced
        foreign = self._foreign_segment(log, tip)
        return found if foreign is None else self._fence(log, tip, foreign)

    def _fence(self, log: Log, tip: TopicIdPartition, foreign: tuple[RemoteLogSegmentMetadata, str]) -> Ownership:
        """Fence ``tip`` for the foreign segment found: the partition's Ownership from now on (LOST)."""
        md, why = foreign
        fenced = Ownership(LOST, (
            f"{log.name}: remote segment {md.remote_log_segment_id.id} (offsets {md.start_offset}-{md.end_offset}) "
            f"holds other records than this data dir's at those offsets ({why}): another data dir writes this "
            "partition's remote data under this one's claim (a copy of this data dir: a cloned machine or a restored "
            "backup?). This data dir copies and deletes nothing there any more, and local retention keeps every "
            "local segment. Run tiered verify --remote, then tiered attach on the data dir that should own the "
            "partition"))
        with self._lock:
            self._fenced.setdefault(tip, fenced)
            return self._fenced[tip]

    def _foreign_segment(self, log: Log, tip: TopicIdPartition) -> tuple[RemoteLogSegmentMetadata, str] | None:
        """The first remote segment of the owner's lineage that overlaps this data dir's closed local segments and
        does not hold the same bytes (its start, size and first and last checksum chunks, where its copy recorded
        checksums), with why; None when every one does. Each remote segment found to match is not read again in
        this process: the check reads two chunks of a local segment once."""
        closed = list(log.segments.values())[:-1]
        if not closed:
            return None
        first, last = closed[0].base_offset, log.active_segment.base_offset - 1
        local = {seg.base_offset: seg for seg in closed}
        checksums = getattr(self._store, "segment_checksums", None)
        for md in self._store.readable_segments(tip):
            sid = md.remote_log_segment_id.id
            if md.end_offset < first or md.start_offset > last:
                continue  # no local records there: nothing to tell, nothing local to lose
            lost = log.lost_offsets.find(md.start_offset) if md.start_offset not in local else None
            if lost is not None and lost.first_offset == md.start_offset and md.end_offset <= lost.last_offset:
                continue  # the copy of a local segment lost (its file deleted by hand, recorded): the one left
            with self._lock:
                if sid in self._matched:
                    continue
            try:
                why = segment_differs(local.get(md.start_offset), md, checksums(md) if checksums is not None else None)
            except OSError:
                continue  # (the segment was deleted meanwhile, by retention in another thread: nothing to compare)
            if why is not None:
                damage = _local_damage(local.get(md.start_offset))
                if damage is None:
                    return md, why
                # The local segment is damaged (a flipped byte fails its batch CRC), not another data dir's: the
                # remote copy, whose checksums were taken from the local file when it was whole, is the good one.
                logger.error("%s: local segment %s is damaged (%s): its bytes no longer match remote segment %s, "
                             "copied from it; reads of those offsets fail until local retention removes it (the "
                             "remote copy holds them). Run tiered verify", log.name, local[md.start_offset].log.path,
                             damage, sid)
            with self._lock:
                self._matched.add(sid)
        return None

    def check_store(self, log: Log, tip: TopicIdPartition, action: str = "") -> None:
        """For reads: raise :class:`RemoteStoreMismatchError` when the store lacks the partition's metadata (asked
        once per partition while the answer is fine), its message starting with ``action`` (what was asked: "cannot
        read offset 10"). A lost partition still reads: the new owner's lineage."""
        if tip in self._store_checked:
            return
        state = log.remote_log_state
        if not state.has_remote_data and not state.claimed:
            return  # nothing remote to read there
        found = self._assess(log, tip, self._store.owner_records(tip))
        if found is not None and found.state == WRONG_STORE:
            self._set(tip, found)
            raise RemoteStoreMismatchError(f"{action}: {found.detail}" if action else found.detail, retriable=False)
        with self._lock:
            self._store_checked.add(tip)

    def _confirm_pending(self, log: Log, found: Ownership) -> None:
        """Remember as made a pending claim (see the module docstring) that ``found`` shows standing."""
        state = log.remote_log_state
        owner = found.owner
        if (found.state == OWNER and owner is not None and state.claim_pending
                and (state.pending_owner_epoch, state.pending_owner_id) == (owner.owner_epoch, owner.owner_id)):
            log.note_remote_owner(owner.owner_epoch, owner.owner_id)
            logger.info("%s: its claim whose write was not answered stands: %s", log.name, owner.describe())

    def _assess(self, log: Log, tip: TopicIdPartition, records: Sequence[OwnerRecord]) -> Ownership | None:
        state = log.remote_log_state
        return assess(
            log.name, state.owner_epoch, state.owner_id, records, has_remote_data=state.has_remote_data,
            below_local_start=log.log_start_offset < log.local_log_start_offset,
            holds_metadata=bool(records) or self._store.holds_metadata(tip),
            state_file=str(log.source_dir / REMOTE_LOG_STATE_FILENAME), store=self._store_name,
            damaged=damaged(tip) if (damaged := getattr(self._store, "damaged_owner_records", None)) else None,
            pending=(state.pending_owner_epoch, state.pending_owner_id) if state.claim_pending else None,
        )

    def renew(self, log: Log, tip: TopicIdPartition) -> Ownership | None:
        """Claim ``tip`` again at the next owner epoch when this data dir owns it (see the module docstring: a new
        owner epoch per ``tiered run``), unless this process made the claim it holds; its state (that claim, new or
        made before in this process), or None when it made no claim: it owns nothing there
        (never claimed, or lost: :meth:`ensure_owner` tells), or the remote tier reaches past its log end. A store
        error propagates."""
        with self._lock:
            claim_lock = self._claims.setdefault(tip, threading.Lock())
        with claim_lock:
            # One listing of the partition's metadata where the store can (its owner records and its events): a
            # start claims every partition, and on S3 each request counts (2,000 partitions took 15 s at four).
            found = self._assess(log, tip, self._owner_records_and_events(tip))
            self._listed(tip)
            if found is not None and found.reclaim:
                found = self._claim_again(log, tip, found)
                self._set(tip, found)
                return found if found.state == OWNER else None
            if found is None or found.state != OWNER or found.owner is None:
                return None
            self._confirm_pending(log, found)
            with self._lock:
                made_here = tip in self._claimed_here
            if made_here:  # (tiered run's start and a copy task's first pass may both ask: one new epoch)
                self._set(tip, found)
                return found
            lineage = found.owner.lineage  # (the claim held, as the former holder's copies are made under it)
            remote_end = self._remote_end(tip, lineage, listed=True)
            if remote_end >= log.log_end_offset:
                # Remote copies past the log end: this data dir is older than its claim (restored from a backup?). A
                # lineage from its log end would put them outside it, and retention would delete them.
                logger.warning("%s", behind_detail(log.name, remote_end, log.log_end_offset))
                return None
            claimed_at = log.log_end_offset
            found = self._claim(log, tip, above=found.owner.owner_epoch, read_back=self._owner_records_and_events)
            if found.state == OWNER:
                # Again, now that the claim stands (the claim's read-back listed the events too): copies the former
                # holder made between the listing above and the claim, past this data dir's log end, hold records it
                # never had; they lie outside its lineage, as after an unclean leader election in Kafka. Said, with
                # where they are, for an operator.
                remote_end = self._remote_end(tip, lineage, listed=True)
                if remote_end >= claimed_at:
                    logger.error("%s: its claim at a new owner epoch was made while the former holder of the claim "
                                 "copied offsets %d..%d, past this data dir's log end: those records lie outside its "
                                 "lineage and its remote retention deletes them (they may still be in the former "
                                 "holder's local log)", log.name, claimed_at, remote_end)
        self._set(tip, found)
        return found

    def _owner_records_and_events(self, tip: TopicIdPartition) -> list[OwnerRecord]:
        """The partition's owner records, listed now together with its metadata events where the store can (one
        LIST for both: ``refreshed_owner_records``); otherwise its events refreshed (where it can), then its owner
        records listed."""
        both = getattr(self._store, "refreshed_owner_records", None)
        if both is not None:
            records: list[OwnerRecord] = both(tip)
            return records
        refresh = getattr(self._store, "refresh", None)
        if refresh is not None:
            refresh(tip)
        return self._store.owner_records(tip)

    def _remote_end(self, tip: TopicIdPartition, lineage: Lineage, *, listed: bool = False) -> int:
        """The last offset the partition's copies within ``lineage`` reach as the store holds them now (listed again
        where the store can, unless the caller just did: ``listed``), copies under way included: one finishing after
        the listing counts as much as one finished. (A former owner's late copies, outside the lineage, are garbage
        its retention deletes.)"""
        refresh = getattr(self._store, "refresh", None)
        if refresh is not None and not listed:
            refresh(tip)
        listing = getattr(self._store, "list_remote_log_segments", None)
        if listing is None:
            return max((md.end_offset for md in self._store.readable_segments(tip)), default=-1)
        return copies_end(listing(tip), lineage)

    def _claim(
        self, log: Log, tip: TopicIdPartition, above: int = -1,
        read_back: Callable[[TopicIdPartition], list[OwnerRecord]] | None = None,
    ) -> Ownership:
        """Claim ``tip`` for this data dir at its log's latest leader epoch (at least every epoch the store knows, and
        more than ``above``), or make its pending claim again (the same epoch and id: its earlier write may land
        first, or this one). The owner records are read back after the write with ``read_back`` (the store's
        ``owner_records`` by default)."""
        epoch = max(log.latest_epoch or 0, self._store.max_epoch(tip), above + 1, 0)
        state = log.remote_log_state
        pending = state.claim_pending and state.pending_owner_epoch >= epoch
        if pending:
            epoch = state.pending_owner_epoch
        cached = log.leader_epoch_cache.epoch_entries()
        if not cached or cached[-1].epoch < epoch:
            log.assign_epoch_start_offset(epoch)  # appends from here on carry the owner epoch
        claim_id = state.pending_owner_id if pending else uuid.uuid4().hex
        record = OwnerRecord(epoch, claim_id, claim_lineage(self._known_epochs(log, tip), log.log_end_offset, epoch),
                             self._clock(), self._host, self._log_dirs or (str(log.dir.parent),))
        if not pending:
            log.note_pending_claim(epoch, claim_id)  # before the write: whenever it lands, it is known as ours
        try:
            put_claim(self._store, tip, record)
        except ObjectExistsError:
            pass  # another data dir claimed this epoch first, or our own write did and its answer was lost: below
        records = (read_back or self._store.owner_records)(tip)
        if not records:  # a metadata manager that keeps no owner records (a custom one): nothing to fence with
            return Ownership(OWNER, f"{log.name}: its metadata manager keeps no owner records (ownership not checked)")
        if records[-1].owner_id == record.owner_id:
            log.note_remote_owner(record.owner_epoch, record.owner_id)
            with self._lock:
                self._claimed_here.add(tip)
            logger.info("%s: claimed ownership of its remote data at %s", log.name, record.describe())
            return Ownership(OWNER, f"{log.name}: this data dir owns its remote data at {record.describe()}", record)
        found = self._assess(log, tip, records)
        assert found is not None and found.state != OWNER  # our id is not the newest record's, nor below it
        return found

    def _claim_again(self, log: Log, tip: TopicIdPartition, found: Ownership) -> Ownership:
        """Claim ``tip`` above this data dir's own claim, whose record the store lacks (``found.reclaim``)."""
        logger.error("%s", found.detail)
        return self._claim(log, tip, above=log.remote_log_state.owner_epoch)

    def _known_epochs(self, log: Log, tip: TopicIdPartition) -> list[tuple[int, int]]:
        """The leader epochs of the log (its cache) and of the remote segments this data dir copied before anyone
        claimed the partition (their epochs may reach below the cache's first entry), each with its first offset,
        ascending. The cache alone when the two disagree on the order."""
        cached = [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()]
        first: dict[int, int] = dict(cached)
        for md in self._store.readable_segments(tip):
            for epoch, start in md.segment_leader_epochs.items():
                first[epoch] = min(start, first.get(epoch, start))
        merged = sorted(first.items(), key=lambda kv: (kv[1], kv[0]))
        return merged if [e for e, _ in merged] == sorted(first) else cached

    def _set(self, tip: TopicIdPartition, found: Ownership) -> None:
        with self._lock:
            before = self._states.get(tip)
            self._states[tip] = found
        if before is None or before.state != found.state:
            if found.state != OWNER:
                logger.error("%s", found.detail)
            elif before is not None:
                logger.info("%s", found.detail)
            if self._on_change is not None:
                self._on_change(tip, found)



__all__ = [
    "LOST", "OWNER", "STATES", "WRONG_STORE", "Lineage", "OwnerRecord", "Ownership", "OwnershipGuard", "assess",
    "behind", "behind_detail", "claim_lineage", "copies_end", "diverged_at", "segment_epoch_ranges", "within_lineage",
]

