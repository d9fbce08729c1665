"""Remote log metadata, kept in the object store beside the segments.

Every state change of a remote segment is one small immutable JSON object,
``<partition>/__remote_log_metadata/<20-digit start>-<segment id>.<state>.json``, holding the whole metadata at
that state. Loading a partition lists those objects and keeps, per segment, the highest state: a new machine (or
a Spark job) finds every remote segment from the bucket alone, there is no read-modify-write, and a crash leaves
at worst a COPY_SEGMENT_STARTED without its FINISHED event, which :meth:`find_stale_copies` reports for cleanup.
A deleted segment's other events go with its DELETE_SEGMENT_FINISHED one, and that one too once a later segment
keeps what the partition's history needs of it (:meth:`RemoteLogMetadataStore.remove_leftover_events`): the events
of a partition under retention stay about as many as its live segments.

Each event ends with a CRC-32C of its own text (:mod:`tiered.sealed_json`): a damaged one is unreadable, which
:meth:`RemoteLogMetadataStore.load` reports and never takes for a stale copy.

The COPY_SEGMENT_FINISHED event of a segment copied with checksums also holds them (field ``checksums``, see
:mod:`tiered.checksums`): :meth:`RemoteLogMetadataStore.segment_checksums` gives them to readers. Events written
before checksums existed have no such field and decode as before.

A partition's owner records (``__remote_log_metadata/owner-<epoch>.json``, :mod:`tiered.ownership`) come with the
same listing: readers see only the FINISHED segments within the newest record's lineage, and
:meth:`RemoteLogMetadataStore.claim_ownership` creates a record with a conditional write.

The store implements :class:`tiered.rlmm.RemoteLogMetadataManager` on any :class:`tiered.ObjectStore`: the object
store of the RemoteStorageManager itself (:meth:`RemoteLogMetadataStore.in_bucket`, the ``bucket`` implementation)
or a directory of this machine (:meth:`RemoteLogMetadataStore.in_directory`, the ``local`` implementation, which
serves any RemoteStorageManager: the event objects are files there, written through a temp file, fsync and
rename). An owner claim is :func:`tiered.store.put_if_absent`: atomic on a store that declares conditional writes,
and on another one a check and a write serialized in this process only, which is said once in a warning (two
machines claiming one partition at the same moment may both believe they won).
"""

from __future__ import annotations

import base64
import bisect
import itertools
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from local.checkpoint import atomic_write, exclusive_write
from tiered import layout
from tiered.backends.long_names import key_of, path_of, write_name_files
from tiered.checksums import SegmentChecksums
from tiered.errors import (
    InvalidStateTransitionError,
    NotPartitionOwnerError,
    ObjectExistsError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    TieredStorageError,
)
from tiered.ownership import OwnerRecord, within_lineage
from tiered.rsm import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageManager,
    TopicIdPartition,
)
from tiered.sealed_json import seal, unseal
from tiered.store import ObjectStore, StoreCapabilities, get_all, not_found, put_if_absent, read_all

logger = logging.getLogger(__name__)
S = RemoteLogSegmentState
_WARNED_OWNER_RECORDS: set[str] = set()  # damaged owner records warned of in this process (each said once)


def check_copy_not_deleted(store: ObjectStore, prefix: str, md: RemoteLogSegmentMetadata) -> None:
    """Before a copy's COPY_SEGMENT_FINISHED event: raise :class:`InvalidStateTransitionError` when the store holds a
    DELETE_SEGMENT_STARTED or DELETE_SEGMENT_FINISHED event of ``md``'s segment. Another process that holds this
    data dir's claim (a copy of the data dir, or a backup of it, started beside it) took the copy under way for one a
    crash left, at its first pass, and deleted it: a FINISHED event now would name objects that are gone, and local
    retention would delete the local segment for them. One LIST of the segment's own events."""
    sid = md.remote_log_segment_id
    deleted = (int(S.DELETE_SEGMENT_STARTED), int(S.DELETE_SEGMENT_FINISHED))
    for key in store.list_keys(layout.segment_events_prefix(prefix, sid, md.start_offset)):
        named = layout.metadata_event_of_key(key)
        if named is not None and named[2] in deleted:
            raise InvalidStateTransitionError(
                f"remote segment {sid.id} (offsets {md.start_offset}-{md.end_offset}) of {sid.topic_id_partition} was "
                f"deleted by another process while this one copied it ({S(named[2]).name} is in the store): another "
                "data dir holds this one's claim (a copy of it, or a restored backup, run beside it?). The copy does "
                "not count; the next pass copies the segment again if this data dir still owns the partition")


def check_owner_epoch(store: ObjectStore, prefix: str, md: RemoteLogSegmentMetadata, owner_epoch: int) -> None:
    """Before a copy's COPY_SEGMENT_FINISHED event written by the copier process (a batch of segments checked once
    by its parent): raise :class:`NotPartitionOwnerError` when the store holds an owner record of ``md``'s partition
    newer than ``owner_epoch``, the claim the copy was made under (:mod:`tiered.ownership`): another data dir took
    the partition meanwhile, and the copy would land outside its lineage. One LIST of the owner records' keys."""
    tip = md.topic_id_partition
    epochs = (layout.owner_epoch_of_key(key) for key in store.list_keys(layout.owner_records_prefix(prefix, tip)))
    newest = max((e for e in epochs if e is not None), default=-1)
    if newest > owner_epoch:
        raise NotPartitionOwnerError(
            f"{tip.topic}-{tip.partition}: owner epoch {newest} claimed the partition's remote data while this data "
            f"dir (owner epoch {owner_epoch}) copied offsets {md.start_offset}-{md.end_offset}: the copy is not "
            "finished, and this data dir copies nothing more there", retriable=False)


def encode_metadata(md: RemoteLogSegmentMetadata, checksums: SegmentChecksums | None = None) -> bytes:
    tip = md.topic_id_partition
    record: dict[str, Any] = {
        "version": 0,
        "topic_id": layout.kafka_uuid(tip.topic_id), "topic": tip.topic, "partition": tip.partition,
        "segment_id": layout.kafka_uuid(md.remote_log_segment_id.id),
        "start_offset": md.start_offset, "end_offset": md.end_offset, "max_timestamp_ms": md.max_timestamp_ms,
        "broker_id": md.broker_id, "event_timestamp_ms": md.event_timestamp_ms,
        "segment_size_in_bytes": md.segment_size_in_bytes,
        "segment_leader_epochs": {str(k): v for k, v in md.segment_leader_epochs.items()},
        "custom_metadata": base64.b64encode(md.custom_metadata).decode() if md.custom_metadata is not None else None,
        "state": int(md.state),
    }
    if checksums is not None:
        record["checksums"] = checksums.to_json()
    return seal(json.dumps(record, separators=(",", ":")))


def decode_metadata(data: bytes) -> RemoteLogSegmentMetadata:
    return decode_record(data)[0]


def decode_record(data: bytes) -> tuple[RemoteLogSegmentMetadata, SegmentChecksums | None]:
    """A metadata event: the segment's metadata and its checksums (None when the event has none). ``ValueError`` for
    an event whose text is damaged (:mod:`tiered.sealed_json`)."""
    d = unseal(data)
    if not isinstance(d, dict):
        raise ValueError(f"not a remote segment metadata event: JSON {type(d).__name__}, not an object of its fields")
    try:
        md = _decode_metadata(d)
    except KeyError as exc:  # (said as "KeyError: 'topic_id'" otherwise)
        raise ValueError(f"not a remote segment metadata event: no field {exc}") from None
    raw = d.get("checksums")
    if raw is None:
        return md, None
    try:
        return md, SegmentChecksums.from_json(raw)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        # The metadata itself is fine: dropping it would make a finished copy look unfinished (and be deleted).
        logger.error("unreadable checksums in the metadata of %s (its reads are not verified): %s",
                     md.remote_log_segment_id, exc)
        return md, None


def _decode_metadata(d: dict[str, Any]) -> RemoteLogSegmentMetadata:
    tip = TopicIdPartition(layout.parse_kafka_uuid(d["topic_id"]), d["topic"], int(d["partition"]))
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, layout.parse_kafka_uuid(d["segment_id"])),
        d["start_offset"], d["end_offset"], d["max_timestamp_ms"], d["broker_id"], d["event_timestamp_ms"],
        d["segment_size_in_bytes"], {int(k): v for k, v in d["segment_leader_epochs"].items()},
        base64.b64decode(d["custom_metadata"]) if d["custom_metadata"] is not None else None,
        RemoteLogSegmentState(d["state"]),
    )


class DirectoryObjects(ObjectStore):
    """Metadata event objects as files under ``root`` (key = relative path). ``read_only``: never creates anything
    (a missing ``root`` holds no objects; a write raises ``PermissionError``)."""

    capabilities = StoreCapabilities(conditional_writes=True, shared_across_processes=True)

    def __init__(self, root: Path, *, read_only: bool = False) -> None:
        self.root = root
        self.read_only = read_only
        if not read_only:
            root.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        if Path(key).is_absolute() or ".." in Path(key).parts:
            raise ValueError(f"remote log metadata key {key!r} escapes {self.root}")
        return path_of(self.root, key)  # a 249-character topic's directory is stored shortened, as local_dir does

    def put(self, key: str, data: bytes | BinaryIO, *, if_absent: bool = False) -> None:
        if self.read_only:
            raise PermissionError(f"remote log metadata dir {self.root} is open read-only: cannot write {key}")
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_name_files(self.root, key, atomic_write)
        if if_absent:
            try:
                exclusive_write(path, read_all(data))
            except FileExistsError:
                raise ObjectExistsError(f"remote log metadata file {path} exists already", key=key) from None
        else:
            atomic_write(path, read_all(data))

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise not_found(key, str(self.root)) from None

    def get_range(self, key: str, start: int, end_inclusive: int) -> bytes:
        return self.get(key)[start : end_inclusive + 1]

    def size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            raise not_found(key, str(self.root)) from None

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix.rstrip("/")) if prefix.strip("/") else self.root
        search = base if base.is_dir() else base.parent
        if not search.is_dir():
            return []
        originals: dict[Path, str] = {}
        keys = (key_of(self.root, p, originals) for p in search.rglob("*") if p.is_file())
        return sorted(k for k in keys if k is not None and k.startswith(prefix) and not k.endswith(".tmp"))

    def delete(self, key: str) -> None:
        if self.read_only:
            raise PermissionError(f"remote log metadata dir {self.root} is open read-only: cannot delete")
        self._path(key).unlink(missing_ok=True)


class RemoteLogMetadataStore:
    """See the module docstring. ``store``: where the event objects live (the plugin's object store, or
    :class:`DirectoryObjects`); ``prefix``: the key prefix of the objects (the plugin's ``rsm.config.prefix``)."""

    _unfenced_warned = False

    def __init__(self, store: ObjectStore, prefix: str = "") -> None:
        self.store = store
        self.prefix = prefix
        self._lock = threading.RLock()
        self._segments: dict[TopicIdPartition, dict[uuid.UUID, RemoteLogSegmentMetadata]] = {}
        # Per partition, built at the first query after a change: the FINISHED segments in (start offset, event
        # time) order, their start offsets, and the running maximum of their end offsets. A read finds its
        # segment by bisection instead of sorting every segment of the partition.
        self._readable: dict[TopicIdPartition, tuple[list[RemoteLogSegmentMetadata], list[int], list[int]]] = {}
        self._checksums: dict[uuid.UUID, SegmentChecksums] = {}  # per segment id, from its FINISHED event
        # Per partition, its owner records (tiered.ownership) by ascending epoch, as last listed; each record's
        # object is read once (records are immutable).
        self._owners: dict[TopicIdPartition, list[OwnerRecord]] = {}
        self._owner_objects: dict[TopicIdPartition, dict[str, OwnerRecord]] = {}  # per partition, by key
        self._damaged_owners: dict[TopicIdPartition, dict[int, str]] = {}  # at the last listing: epoch -> key
        # Per partition, the events decoded at its last load, by key: an event object is written once per segment
        # and state (its key says which), so a load again (a Spark planner kept across plans) reads and decodes only
        # the keys new since; what the listing no longer has is dropped with it.
        self._decoded: dict[TopicIdPartition, dict[str, tuple[RemoteLogSegmentMetadata, SegmentChecksums | None]]] = {}
        # Per partition, at its last load: the event objects that could not be read (damaged), by key, with what
        # their keys name (start offset, segment id, state; None for a key of another form) and why. A segment with
        # such an event is never taken for a stale copy: its FINISHED event may be the damaged one.
        self._unreadable: dict[TopicIdPartition, dict[str, tuple[tuple[int, uuid.UUID, int] | None, str]]] = {}
        # Each partition's event keys at its last listing, with what each names (start offset, segment, state).
        self._event_names: dict[TopicIdPartition, dict[str, tuple[int, uuid.UUID, int] | None]] = {}
        self._warned_unreadable: set[str] = set()
        # (time.monotonic) of each partition's last load: a view holding unreadable events is loaded again once
        # ``unreadable_reload_s`` passed (an event corrupted on its way, or a store that did not answer, is read anew).
        self._loaded_at: dict[TopicIdPartition, float] = {}
        # The segments this process recorded an event of (written here, or by its copier process): the only ones
        # unfinished_segments names, whatever a reload brings in of other writers' copies under way.
        self._recorded_here: set[uuid.UUID] = set()

    @classmethod
    def in_bucket(cls, rsm: RemoteStorageManager) -> RemoteLogMetadataStore:
        """The ``bucket`` implementation: events beside the segments, in the plugin's object store
        (``rsm.object_store``) under its ``prefix``."""
        if rsm.object_store is None:
            raise ValueError(f"{type(rsm).__qualname__} is not built on an object store: its metadata cannot be kept "
                             "in the bucket")
        return cls(rsm.object_store, rsm.prefix)

    @classmethod
    def in_directory(cls, directory: Path, *, read_only: bool = False) -> RemoteLogMetadataStore:
        """The ``local`` implementation: events as files under ``directory`` (created unless ``read_only``)."""
        return cls(DirectoryObjects(directory, read_only=read_only))

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}({self.store!r})"

    def close(self) -> None:
        """Nothing to release: every event is written through when recorded."""

    # Loading ----------------------------------------------------------------------------------------------
    #: Listings a load makes at most when a segment's every listed event is gone by the time it is read.
    load_attempts = 3

    def load(self, tip: TopicIdPartition) -> dict[uuid.UUID, RemoteLogSegmentMetadata]:
        """(Re)build the partition's view from the object store, keeping what this process recorded that is newer
        than the listing (an event whose object the listing missed). A segment all of whose listed events are gone
        when read was deleted since the listing, and the owner's retention may since have removed the deleted event
        that the history's end rested on (remove_leftover_events): the partition is listed again then."""
        for _ in range(self.load_attempts):
            view, vanished = self._load_once(tip)
            if not vanished:
                break
            logger.debug("%s: a segment's events were deleted since the listing; listing again", tip)
        return view

    def _load_once(self, tip: TopicIdPartition) -> tuple[dict[uuid.UUID, RemoteLogSegmentMetadata], bool]:
        vanished = False
        latest: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        checksums: dict[uuid.UUID, SegmentChecksums] = {}
        with self._lock:
            known = self._decoded.get(tip, {})
        decoded: dict[str, tuple[RemoteLogSegmentMetadata, SegmentChecksums | None]] = {}
        unreadable: dict[str, tuple[tuple[int, uuid.UUID, int] | None, str]] = {}
        keys = [key for key in self.store.list_keys(layout.metadata_prefix(self.prefix, tip)) if key.endswith(".json")]
        owner_keys: list[str] = []
        names: dict[str, tuple[int, uuid.UUID, int] | None] = {}
        for key in keys:
            if layout.owner_epoch_of_key(key) is not None:
                owner_keys.append(key)
            else:
                names[key] = layout.metadata_event_of_key(key)
        # Of each segment's events only the newest is read (it holds the segment's whole metadata, a FINISHED one its
        # checksums): a lower one only when that one cannot be read, so a copied segment costs one GET, not two.
        # An event whose key names no segment is read too. The GETs of each round overlap (a round trip each on S3).
        lower: dict[uuid.UUID, list[tuple[int, str]]] = {}  # each segment's (state, key), the newest last
        wanted = []
        for key, named in names.items():
            if named is None:
                wanted.append(key)
            else:
                lower.setdefault(named[1], []).append((named[2], key))
        for segment_keys in lower.values():
            segment_keys.sort()
            wanted.append(segment_keys.pop()[1])
        while wanted:
            fetched = get_all(self.store, [key for key in wanted if key not in known])
            again = []
            for key in wanted:
                named = names[key]
                event = known.get(key)
                if event is None:
                    try:
                        data = fetched[key]
                        if isinstance(data, Exception):
                            raise data
                        event = decode_record(data)
                        _check_event_key(event[0], named, tip)
                    except RemoteResourceNotFoundError:
                        # deleted since the listing: its segment's deletion removes its events (states move on)
                        if named is None or not lower.get(named[1]):
                            vanished = True  # nothing of the segment left to read: list again
                    except (ValueError, KeyError, TypeError, AttributeError, TieredStorageError) as exc:
                        if isinstance(exc, RemoteStorageError) and exc.retriable:
                            # The store did not answer (a reset, a timeout): not damage. Failing the load keeps no
                            # view, so the next query loads again; recorded as unreadable, the segment's FINISHED
                            # event would stay unread (the segment unreadable) until something re-listed.
                            raise
                        unreadable[key] = (named, f"{type(exc).__name__}: {exc}")
                        if key not in self._warned_unreadable:  # (a Spark planner loads again at every plan)
                            self._warned_unreadable.add(key)
                            logger.warning("ignoring unreadable remote metadata object %s: %s", key, exc)
                if event is None:
                    if named is not None and lower.get(named[1]):
                        again.append(lower[named[1]].pop()[1])  # the segment's next newest event
                    continue
                decoded[key] = event
                md, sums = event
                sid = md.remote_log_segment_id.id
                if sid not in latest or md.state > latest[sid].state:
                    latest[sid] = md
                if sums is not None:
                    checksums[sid] = sums
            wanted = again
        with self._lock:
            # An event this process recorded while the listing above ran (another thread's first query of the
            # partition racing a copy's STARTED, or a stale-copy reload racing a deletion) is newer than what the
            # listing saw: keep it, or the copy's next update finds no segment. States only move forward. Only such
            # events: a state an earlier listing found, which the store no longer holds (its event deleted or damaged
            # since), is not kept (a reader's plan went on reading a segment whose FINISHED event was gone).
            kept = {
                sid: md
                for sid, md in (self._segments.get(tip) or {}).items()
                if sid in self._recorded_here and (sid not in latest or md.state > latest[sid].state)
            }
            for sid in latest.keys() - kept.keys():
                self._checksums.pop(sid, None)  # the store's events replace what this view knew
            for sid in kept:
                checksums.pop(sid, None)  # a kept event's checksums (if any) are already known
            latest.update(kept)
            self._segments[tip] = latest
            self._decoded[tip] = decoded
            self._event_names[tip] = names
            self._unreadable[tip] = unreadable
            self._loaded_at[tip] = time.monotonic()
            self._readable.pop(tip, None)
            self._checksums.update(checksums)
        self._read_owner_records(tip, owner_keys)
        return latest, vanished

    def refresh(self, tip: TopicIdPartition) -> None:
        """Bring the partition's view up to date with the store (:meth:`load`): one listing, and a read of each event
        new since the last load. The copy task's way to see what another data dir wrote under this one's claim."""
        self.load(tip)

    def refreshed_owner_records(self, tip: TopicIdPartition) -> list[OwnerRecord]:
        """:meth:`refresh`, then the partition's owner records as that one listing found them (the events and the
        owner records share the partition's metadata prefix): :meth:`owner_records` and :meth:`refresh` in one LIST."""
        self.load(tip)
        with self._lock:
            return list(self._owners.get(tip, []))

    #: Seconds after which a partition's view that holds unreadable events is listed and read again at its next query.
    unreadable_reload_s = 10.0

    def _reload_if_unreadable(self, tip: TopicIdPartition) -> None:
        """Load ``tip`` again when its view holds unreadable events and was loaded ``unreadable_reload_s`` ago: an
        event may have been damaged on its way only (no transport checksum), or the store may not have answered, and
        nothing else lists an idle partition again: its segments would stay unreadable until a restart."""
        if not self._unreadable.get(tip):
            return  # (the common case, on every query: no lock taken)
        with self._lock:
            stale = (tip in self._segments and bool(self._unreadable.get(tip))
                     and time.monotonic() - self._loaded_at.get(tip, 0.0) >= self.unreadable_reload_s)
            if stale:
                self._loaded_at[tip] = time.monotonic()  # (one reload at a time, a failed one not retried at once)
        if stale:
            try:
                self.load(tip)
            except Exception as exc:
                logger.warning("listing the remote metadata of %s again failed: %s", tip, exc)

    def _view(self, tip: TopicIdPartition) -> dict[uuid.UUID, RemoteLogSegmentMetadata]:
        self._reload_if_unreadable(tip)
        with self._lock:
            view = self._segments.get(tip)
        return view if view is not None else self.load(tip)

    # Ownership (tiered.ownership) -----------------------------------------------------------------------------
    def owner_records(self, tip: TopicIdPartition) -> list[OwnerRecord]:
        """The partition's owner records by ascending epoch, listed from the store now (one LIST; each record
        object is read once). A record that cannot be read is skipped with a warning (``tiered verify`` reports it)."""
        return self._read_owner_records(tip, self.store.list_keys(layout.owner_records_prefix(self.prefix, tip)))

    def other_topic_ids(self, tip: TopicIdPartition) -> dict[uuid.UUID, set[int]]:
        """Other topics of ``tip``'s name the store holds remote data of (topic id -> partitions): another data
        dir's topic of the same name. One "directory" listing under ``<topic>-`` when there is none
        (:func:`tiered.layout.topic_ids_in_store`)."""
        return layout.topic_ids_in_store(self.store, self.prefix, tip.topic, skip=tip.topic_id)

    def damaged_owner_records(self, tip: TopicIdPartition) -> dict[int, str]:
        """The partition's owner records that could not be read at their last listing: owner epoch (as the key
        names it) -> key."""
        with self._lock:
            return dict(self._damaged_owners.get(tip, {}))

    def _read_owner_records(self, tip: TopicIdPartition, keys: Iterable[str]) -> list[OwnerRecord]:
        records: dict[int, OwnerRecord] = {}
        damaged: dict[int, str] = {}
        # The records this listing holds, read once each; one it no longer holds is forgotten, so that a key deleted
        # and then created again (another data dir's claim of that epoch) is read anew (both took themselves for the
        # owner).
        with self._lock:
            known = self._owner_objects.get(tip, {})
        kept: dict[str, OwnerRecord] = {}
        for key in keys:
            epoch = layout.owner_epoch_of_key(key)
            if epoch is None:
                continue
            record = known.get(key)
            if record is None:
                try:
                    record = OwnerRecord.decode(self.store.get(key))
                except RemoteResourceNotFoundError:
                    continue
                except ValueError as exc:
                    if key not in _WARNED_OWNER_RECORDS:  # (read again at every listing, by every view, while damaged)
                        _WARNED_OWNER_RECORDS.add(key)
                        logger.warning("ignoring unreadable owner record %s: %s", key, exc)
                    damaged[epoch] = key
                    continue
                if record.owner_epoch != epoch:
                    if key not in _WARNED_OWNER_RECORDS:
                        _WARNED_OWNER_RECORDS.add(key)
                        logger.warning("ignoring owner record %s: it holds owner epoch %d", key, record.owner_epoch)
                    damaged[epoch] = key
                    continue
            kept[key] = record
            records[epoch] = record
        ordered = [records[e] for e in sorted(records)]
        with self._lock:
            self._owner_objects[tip] = kept
            self._damaged_owners[tip] = damaged
            if self._owners.get(tip, []) != ordered:
                self._owners[tip] = ordered
                self._readable.pop(tip, None)  # the lineage readers follow may have changed
        return ordered

    def claim_ownership(self, tip: TopicIdPartition, record: OwnerRecord) -> None:
        """Create ``record``'s object with a conditional write: :class:`ObjectExistsError` when that epoch is claimed
        already (by anyone). The caller then lists the records to see whether its claim is the newest."""
        if not self.store.capabilities.conditional_writes and not self._unfenced_warned:
            self._unfenced_warned = True
            logger.warning("the remote store %r has no atomic conditional writes: ownership claims are serialized in "
                           "this process only, so two data dirs on different machines claiming one partition at the "
                           "same moment may both believe they own it (run one attach at a time per partition)",
                           self.store)
        key = layout.owner_record_key(self.prefix, tip, record.owner_epoch)
        put_if_absent(self.store, key, record.encode())
        if self.store.capabilities.conditional_writes:
            # The object at that key is this record (created only if absent; records are never rewritten): its
            # read-back does not GET it again. (Without conditional writes another writer may have replaced it.)
            with self._lock:
                self._owner_objects.setdefault(tip, {})[key] = record

    def holds_metadata(self, tip: TopicIdPartition) -> bool:
        """Whether the store holds any metadata of the partition (an event of any state, or an owner record)."""
        view = self._view(tip)
        with self._lock:
            return bool(view) or bool(self._owners.get(tip))

    def purge_partition(self, tip: TopicIdPartition, owner_epoch: int | None = None) -> int:
        """Delete every object the store holds under the partition (its metadata events, owner records, any segment
        objects) and forget it: what a topic deleted while it held no remote data left behind. The caller checks
        first that nothing readable is there, and that the newest claim is its own, at ``owner_epoch``: when the
        listing holds a claim above it (another data dir claimed the partition since the check), nothing is deleted,
        and a claim made after the listing is not in it, nor is anything written under that claim. How many
        objects."""
        keys = self.store.list_keys(layout.partition_prefix(self.prefix, tip) + "/")
        if owner_epoch is not None:
            newer = [key for key in keys if (epoch := layout.owner_epoch_of_key(key)) is not None and epoch > owner_epoch]
            if newer:
                logger.warning("%s: not deleting the partition's remote objects: %s claimed it since", tip, newer[0])
                return 0
        self.store.delete_many(keys)
        with self._lock:
            for cache in (self._segments, self._readable, self._owners, self._owner_objects, self._damaged_owners,
                          self._decoded, self._unreadable, self._event_names):
                cache.pop(tip, None)
        return len(keys)

    def next_offset(self, tip: TopicIdPartition) -> int:
        """One past the last offset the partition's remote history names (0 when none): the segments it copied within
        the current owner's lineage, deleted ones too (the last one's DELETE_SEGMENT_FINISHED event is kept), and the start of
        the newest claim (the claimer's log end then). Offsets below it were the partition's once: a log adopting the
        partition with no readable segment left starts there, never reusing one, as Kafka's log start never goes
        back after retention."""
        view = self._view(tip)
        with self._lock:
            segments = list(view.values())
            owners = list(self._owners.get(tip, []))
        lineage = owners[-1].lineage if owners else ()
        ends = [m.end_offset + 1 for m in segments
                if m.state is not S.COPY_SEGMENT_STARTED and (not lineage or within_lineage(m, lineage))]
        if lineage:
            ends.append(lineage[-1][1])
        return max(ends, default=0)

    def max_epoch(self, tip: TopicIdPartition) -> int:
        """The highest leader epoch the store knows of the partition (its owner records' and its segments'), -1 when
        none. A damaged owner record's epoch (its key's) counts: a claim above every epoch is above it too."""
        view = self._view(tip)
        with self._lock:
            owners = list(self._owners.get(tip, []))
            damaged = list(self._damaged_owners.get(tip, {}))
        epochs = [r.owner_epoch for r in owners] + damaged
        epochs += [e for md in view.values() for e in md.segment_leader_epochs]
        return max(epochs, default=-1)

    def current_owner(self, tip: TopicIdPartition) -> OwnerRecord | None:
        """The newest owner record this view knows (as of the last listing), None when the partition has none."""
        self._view(tip)
        with self._lock:
            owners = self._owners.get(tip)
            return owners[-1] if owners else None

    def foreign_segments(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """Segments copied (or being copied) outside the current owner's lineage: a former owner's copies made after
        it lost the partition. Never read; the owner's remote retention deletes them. Empty without owner records."""
        owner = self.current_owner(tip)
        if owner is None:
            return []
        return [m for m in self.list_remote_log_segments(tip)
                if m.state in (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED) and not within_lineage(m, owner.lineage)]

    # Events -----------------------------------------------------------------------------------------------
    def _record(self, md: RemoteLogSegmentMetadata, checksums: SegmentChecksums | None = None) -> None:
        sid = md.remote_log_segment_id
        key = layout.metadata_event_key(self.prefix, sid, md.start_offset, int(md.state))
        self.store.put(key, encode_metadata(md, checksums))
        with self._lock:
            self._recorded_here.add(sid.id)
            self._view(md.topic_id_partition)[sid.id] = md
            self._readable.pop(md.topic_id_partition, None)
            if checksums is not None:
                self._checksums[sid.id] = checksums

    def add_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata) -> None:
        if md.state is not S.COPY_SEGMENT_STARTED:
            raise ValueError(f"a new remote segment starts in COPY_SEGMENT_STARTED, not {md.state.name}")
        self._record(md)

    def update_remote_log_segment_metadata(
        self, update: RemoteLogSegmentMetadataUpdate, checksums: SegmentChecksums | None = None
    ) -> RemoteLogSegmentMetadata:
        """Record a state change. ``checksums`` (those of the objects just copied) go with COPY_SEGMENT_FINISHED."""
        sid = update.remote_log_segment_id
        current = self._view(sid.topic_id_partition).get(sid.id)
        if current is None:
            raise KeyError(f"no remote segment {sid} to update")
        md = current.create_with_updates(update)  # validates the transition
        if md.state is S.COPY_SEGMENT_FINISHED:
            check_copy_not_deleted(self.store, self.prefix, md)  # (the state the store holds may be past this view's)
        self._record(md, checksums)
        if md.state is S.COPY_SEGMENT_FINISHED:
            # Again after the write: a deletion whose DELETE event landed between the check and the write is found
            # here (the window left is the deleter's own, between its listing and its DELETE event).
            check_copy_not_deleted(self.store, self.prefix, md)
        if md.state is S.DELETE_SEGMENT_FINISHED:
            # The segment is gone: its events are garbage now (a crash here leaves them, and they are ignored).
            keys = [layout.metadata_event_key(self.prefix, sid, md.start_offset, int(s)) for s in S if s is not S.DELETE_SEGMENT_FINISHED]
            self.store.delete_many(keys)
            with self._lock:
                self._checksums.pop(sid.id, None)
        return md

    def remove_leftover_events(self, tip: TopicIdPartition) -> int:
        """Delete the events, as of the partition's last load, of segments whose deletion had finished: what a crash
        between DELETE_SEGMENT_FINISHED and the removal of the segment's other events left, or an event whose write
        reached the store after the deletion. Readers ignore them (a segment's newest state wins), but nothing else
        would ever remove them. Then the DELETE_SEGMENT_FINISHED events nothing needs any more
        (:meth:`_superseded_deletions`): without that, a partition under retention would keep one event per segment
        it ever had, each read at every first load. For the partition's owner (its expiration task); how many events
        were deleted."""
        return self._remove_events_of_deleted(tip) + self._remove_superseded_deletions(tip)

    def _superseded_deletions(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """The deleted segments (DELETE_SEGMENT_FINISHED) whose event the partition's history no longer needs.

        A deleted segment's event is read for two figures only: :meth:`next_offset` (the end of the copies within
        the owner's lineage) and :meth:`max_epoch` (the highest leader epoch of any segment). Every deleted segment
        within the lineage may go but the one that ends last among the segments kept there and the one with the
        highest epoch among all kept ones (a copy under way is not kept: it may be purged): both figures stay what
        they were. A later claim keeps them too: a segment within the new lineage ends before the claim's start, which
        :meth:`next_offset` counts, and the new owner epoch is above every epoch here. A deposed owner's deleted copy
        (outside the lineage) is kept, and nothing goes while an event or an owner record cannot be read (what it
        holds is unknown)."""
        with self._lock:
            view = list((self._segments.get(tip) or {}).values())
            owners = list(self._owners.get(tip, []))
            if self._damaged_owners.get(tip) or self._unreadable.get(tip):
                return []
        lineage = owners[-1].lineage if owners else ()
        kept = [m for m in view if m.state is not S.COPY_SEGMENT_STARTED]
        ours = [m for m in kept if not lineage or within_lineage(m, lineage)]
        # Outside the lineage but wholly before the newest claim's start, at epochs below its owner epoch: the
        # owner's own history whose epochs the claim's lineage no longer names (the leader-epoch cache a restart
        # claims with is truncated at the log start), not a deposed owner's late copy (those end at or past the
        # claim's start). next_offset does not count it (outside) and counts the claim's start above its end.
        behind = [m for m in kept if lineage and not within_lineage(m, lineage) and m.end_offset < lineage[-1][1]
                  and max(m.segment_leader_epochs, default=-1) < owners[-1].owner_epoch]
        if not ours and not behind:
            return []
        last = max(ours, key=lambda m: (m.end_offset, m.start_offset)) if ours else None
        highest = max(kept, key=lambda m: (max(m.segment_leader_epochs, default=-1), m.end_offset, m.start_offset))
        return sorted((m for m in [*ours, *behind]
                       if m.state is S.DELETE_SEGMENT_FINISHED and m is not last and m is not highest),
                      key=lambda m: m.start_offset)

    def _remove_superseded_deletions(self, tip: TopicIdPartition) -> int:
        superseded = self._superseded_deletions(tip)
        if not superseded:
            return 0
        finished = int(S.DELETE_SEGMENT_FINISHED)
        keys = [layout.metadata_event_key(self.prefix, m.remote_log_segment_id, m.start_offset, finished)
                for m in superseded]
        logger.debug("deleting the events of %d remote segment(s) of %s deleted before offset %d", len(keys), tip,
                     superseded[-1].end_offset + 1)
        self.store.delete_many(keys)
        with self._lock:
            view = self._segments.get(tip, {})
            known = self._decoded.get(tip, {})
            listed = self._event_names.get(tip, {})
            for md, key in zip(superseded, keys, strict=True):
                if view.get(md.remote_log_segment_id.id) is md:
                    del view[md.remote_log_segment_id.id]
                known.pop(key, None)
                listed.pop(key, None)
            self._readable.pop(tip, None)
        return len(keys)

    def _remove_events_of_deleted(self, tip: TopicIdPartition) -> int:
        with self._lock:
            decoded = dict(self._decoded.get(tip, {}))
            names = dict(self._event_names.get(tip, {}))
        gone = {md.remote_log_segment_id.id for md, _ in decoded.values() if md.state is S.DELETE_SEGMENT_FINISHED}
        # By the names of the listed keys (only each segment's newest event is read), and by content for an event
        # whose key names no segment.
        found = {key: (named[1], named[2]) for key, named in names.items() if named is not None}
        found.update((key, (md.remote_log_segment_id.id, int(md.state))) for key, (md, _) in decoded.items())
        keys = sorted(key for key, (sid, state) in found.items()
                      if sid in gone and state != int(S.DELETE_SEGMENT_FINISHED))
        if keys:
            logger.info("deleting %d leftover metadata event(s) of remote segments of %s whose deletion finished",
                        len(keys), tip)
            self.store.delete_many(keys)
            with self._lock:
                known = self._decoded.get(tip, {})
                listed = self._event_names.get(tip, {})
                for key in keys:
                    known.pop(key, None)
                    listed.pop(key, None)
        return len(keys)

    def record_written(self, md: RemoteLogSegmentMetadata, checksums: SegmentChecksums | None = None) -> None:
        """Record in this view an event another process already wrote to the store (the copier process's batch
        copies, tiered.copier_process.BatchCopier): as add/update would, the transition checked, without writing
        it again."""
        sid = md.remote_log_segment_id
        current = self._view(md.topic_id_partition).get(sid.id)
        S.check_transition(current.state if current is not None else None, md.state)
        with self._lock:
            self._recorded_here.add(sid.id)
            self._view(md.topic_id_partition)[sid.id] = md
            self._readable.pop(md.topic_id_partition, None)
            if checksums is not None:
                self._checksums[sid.id] = checksums

    def purge(self, md: RemoteLogSegmentMetadata) -> None:
        """Delete every event of a copy that never finished (for one whose STARTED event may or may not have
        reached the store: a put that failed on the client's side) and forget it. Deleting what is gone is fine."""
        sid = md.remote_log_segment_id
        self.store.delete_many([layout.metadata_event_key(self.prefix, sid, md.start_offset, int(s)) for s in S])
        with self._lock:
            view = self._segments.get(md.topic_id_partition)
            if view is not None:
                view.pop(sid.id, None)
            self._readable.pop(md.topic_id_partition, None)
            self._checksums.pop(sid.id, None)

    def segment_checksums(self, md: RemoteLogSegmentMetadata) -> SegmentChecksums | None:
        """The checksums recorded when ``md``'s copy finished; None for a copy made before checksums existed."""
        sid = md.remote_log_segment_id
        sums = self._checksums.get(sid.id)
        if sums is None and md.topic_id_partition not in self._segments:
            self._view(md.topic_id_partition)  # a store that has not loaded the partition yet (a new reader)
            sums = self._checksums.get(sid.id)
        return sums

    # Queries ----------------------------------------------------------------------------------------------
    def list_remote_log_segments(self, tip: TopicIdPartition, leader_epoch: int | None = None) -> list[RemoteLogSegmentMetadata]:
        """Every known segment of the partition not yet deleted, ordered by start offset."""
        view = self._view(tip)
        with self._lock:  # a copy's event may be recorded meanwhile (another thread's _record adds to the view)
            segs = [m for m in view.values() if m.state is not S.DELETE_SEGMENT_FINISHED]
        if leader_epoch is not None:
            segs = [m for m in segs if leader_epoch in m.segment_leader_epochs]
        return sorted(segs, key=lambda m: (m.start_offset, m.event_timestamp_ms))

    def readable_segments(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """The FINISHED segments of the partition within the current owner's lineage (every FINISHED segment when it
        has no owner records), ordered by start offset: what reads, retention, ``status`` and ``attach`` see."""
        return list(self._readable_index(tip)[0])

    def _readable_index(self, tip: TopicIdPartition) -> tuple[list[RemoteLogSegmentMetadata], list[int], list[int]]:
        self._reload_if_unreadable(tip)
        with self._lock:
            index = self._readable.get(tip)
            if index is None:
                listed = self.list_remote_log_segments(tip)  # loads the partition (and its owners) when new
                owners = self._owners.get(tip)
                lineage = owners[-1].lineage if owners else ()
                segs = [m for m in listed if m.state is S.COPY_SEGMENT_FINISHED and within_lineage(m, lineage)]
                max_ends = list(itertools.accumulate((m.end_offset for m in segs), max))
                index = self._readable[tip] = (segs, [m.start_offset for m in segs], max_ends)
            return index

    def remote_log_segment_metadata(
        self, tip: TopicIdPartition, offset: int, leader_epoch: int | None = None
    ) -> RemoteLogSegmentMetadata | None:
        """The first readable segment (:meth:`readable_segments`), in start offset order, holding ``offset`` (in
        ``leader_epoch``'s range, when given). Segments overlap only across lineages, so the scan back from the bisection point is short: it
        stops where no earlier segment reaches the offset."""
        segs, starts, max_ends = self._readable_index(tip)
        found = None
        i = bisect.bisect_right(starts, offset) - 1
        while i >= 0 and max_ends[i] >= offset:
            md = segs[i]
            if md.end_offset >= offset and (leader_epoch is None or _epoch_covers(md, leader_epoch, offset)):
                found = md
            i -= 1
        return found

    def find_stale_copies(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """Copies left STARTED (or DELETE_STARTED) by a crash: their objects must be deleted. Reloads the partition
        from the store. A segment one of whose events cannot be read is not one (:meth:`_not_damaged`)."""
        view = self.load(tip)
        with self._lock:  # the loaded dict is the view, which another thread's _record adds to
            stale = [m for m in view.values() if m.state in (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED)]
        return self._not_damaged(tip, stale)

    def unfinished_segments(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """The segments this process recorded that are left COPY_SEGMENT_STARTED or DELETE_SEGMENT_STARTED (no reload;
        e.g. a copy whose cleanup failed in an outage), but those with an event that cannot be read
        (:meth:`_not_damaged`). Never another writer's copy under way that a :meth:`refresh` brought in."""
        with self._lock:
            view = self._segments.get(tip)
            segs = [m for m in view.values() if m.remote_log_segment_id.id in self._recorded_here] if view else []
        return self._not_damaged(tip, [m for m in segs if m.state in (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED)])

    def unreadable_events(self, tip: TopicIdPartition) -> dict[str, str]:
        """The partition's metadata event objects its last listing could not read or decode (key: why), whatever
        the cause: damage, or a store that did not answer. What is known of the partition then may be short of
        what the store holds."""
        with self._lock:
            return {key: why for key, (_named, why) in (self._unreadable.get(tip) or {}).items()}

    def _not_damaged(self, tip: TopicIdPartition, segs: list[RemoteLogSegmentMetadata]) -> list[RemoteLogSegmentMetadata]:
        """``segs`` but those with a metadata event that could not be read: a segment left STARTED in the readable
        events may be a finished copy whose FINISHED event is the damaged one, its objects intact and the only copy
        of its records. Deleting it as a stale copy would turn one flipped byte of metadata into lost data; it is
        left as it is (neither read nor deleted) and said in an error each time, until the event is repaired or
        removed (``tiered verify --remote`` reports it)."""
        with self._lock:
            unreadable = dict(self._unreadable.get(tip) or {})
        damaged = {named[1]: key for key, (named, _) in unreadable.items() if named}
        nameless = sorted(key for key, (named, _) in unreadable.items() if named is None)
        if nameless and segs:  # an event whose key names no segment (a damaged name) could be any segment's
            logger.error("%d stale copies of %s are not deleted: the metadata object %s cannot be read and its key "
                         "names no segment (repair or remove it; tiered verify --remote reports it)", len(segs), tip,
                         nameless[0])
            return []
        kept = []
        for md in segs:
            key = damaged.get(md.remote_log_segment_id.id)
            if key is None:
                kept.append(md)
                continue
            logger.error("remote segment %s (offsets %d-%d) of %s is left %s in the readable metadata, but its event "
                         "%s cannot be read: it is not deleted as a stale copy (it may be a finished one); repair or "
                         "remove the event (tiered verify --remote reports it)", md.remote_log_segment_id.id,
                         md.start_offset, md.end_offset, tip, md.state.name, key)
        return kept

    def partitions(self) -> list[TopicIdPartition]:
        with self._lock:
            return list(self._segments)


def _check_event_key(md: RemoteLogSegmentMetadata, named: tuple[int, uuid.UUID, int] | None,
                     tip: TopicIdPartition) -> None:
    """ValueError unless the event is the one its key names (start offset, segment, state) in the partition listed:
    a damaged byte can leave valid JSON (a state of 0 where 1 was) that says something else, and an event taken for
    another state than its own (a FINISHED one read as STARTED) would make a finished copy look like a stale one."""
    if named is None:
        return  # (an event key of another form: nothing to hold it to)
    found = (md.start_offset, md.remote_log_segment_id.id, int(md.state))
    if found != named or md.topic_id_partition != tip:
        raise ValueError(f"the event holds segment {md.remote_log_segment_id.id} of {md.topic_id_partition} at start "
                         f"offset {md.start_offset} in state {int(md.state)}, not what its key says")


def _epoch_covers(md: RemoteLogSegmentMetadata, epoch: int, offset: int) -> bool:
    if len(md.segment_leader_epochs) == 1:  # most segments: one epoch, covering the whole segment from its start
        start = md.segment_leader_epochs.get(epoch)
        return start is not None and start <= offset <= md.end_offset
    epochs: list[tuple[int, Any]] = sorted(md.segment_leader_epochs.items())
    for i, (e, start) in enumerate(epochs):
        end = epochs[i + 1][1] - 1 if i + 1 < len(epochs) else md.end_offset
        if e == epoch:
            return start <= offset <= end
    return False
