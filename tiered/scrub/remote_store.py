"""The remote half of ``tiered verify``: remote metadata against the objects in the store, and every remote batch.

Read-only: it lists keys and reads objects (metadata events with ``get_range``, segments through the plugin's
``fetch_log_segment``/``fetch_index``), never writes, deletes or cleans up. It needs a backend with the object
store (the plugin's ``object_store``, a :class:`tiered.ObjectStore`): listing the bucket is how orphans are found.

Per partition found in the store (``<prefix>/<topic>-<topicId>/<partition>/``):

* every metadata event parses and agrees with its key (segment id, start offset, state); the highest state of a
  segment is its state;
* a COPY_SEGMENT_FINISHED segment has its ``.log``, ``.index``, ``.timeindex``, ``.snapshot`` and
  ``leader-epoch-checkpoint`` (``.txnindex`` is optional) - in the manifest layout (``docs/remote-format.md``) its
  ``.log``, ``.indexes`` and ``.rsm-manifest``, the manifest readable and listing those indexes, every stored chunk
  checked (crc32c, AES-GCM tag, size: a bad one is an ``unreadable`` problem naming the chunk) as it is read; its ``.log`` is streamed in chunks and every batch's
  header and CRC checked (:class:`tiered.scrub.batches.BatchScanner`), its size compared with ``segment_size_in_bytes``
  (which is clamped at 2^31-1), its last offset with ``end_offset``; its indexes are checked against those
  batches as local ones are; the producer snapshot and epoch checkpoint parse; the recorded per-chunk checksums
  are checked on the bytes the scan reads (:class:`tiered.scrub.object_checksums.ObjectCheck`: each object is read once);
* a segment left COPY_SEGMENT_STARTED or DELETE_SEGMENT_STARTED is an incomplete operation (its objects are
  garbage until the next copy pass removes them); objects of a DELETE_SEGMENT_FINISHED segment, and objects no
  metadata names, are orphans;
* consecutive FINISHED segments leave no offsets uncovered; with the local data dir, no offsets between the log
  start offset and the local log start are in neither tier;
* ownership (:mod:`tiered.ownership`): every owner record parses and agrees with its key; a FINISHED segment outside
  the newest record's lineage (a former owner's copy made after it lost the partition) and two segments of the
  lineage holding the same offsets are problems; so is, with the local data dir, a claim that is not the newest
  record's (the data dir lost the partition). The checks above apply to the lineage's segments.
"""

from __future__ import annotations

import itertools
import re
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from local.records.constants import INT32_MAX
from tiered import layout
from tiered.checksums import ChecksumProblem, SegmentChecksums, object_name
from tiered.errors import RemoteChunkError, RemoteResourceNotFoundError, TieredStorageError
from tiered.format.manifest import MANIFEST_SUFFIX, PACKED_INDEXES_SUFFIX, SegmentManifest, read_manifest
from tiered.ownership import OwnerRecord, within_lineage
from tiered.rsm import IndexType, RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from tiered.scrub.batches import CHUNK_BYTES, BatchScanner, Progress
from tiered.scrub.files import (
    aborted_transactions,
    check_leader_epoch_checkpoint,
    check_offset_index,
    check_producer_snapshot,
    check_time_index,
    check_txn_index,
    offset_entry_sizes_of_bytes,
)
from tiered.scrub.object_checksums import ObjectCheck
from tiered.scrub.report import PartitionReport, Problem
from tiered.store import ObjectStore, get_all

S = RemoteLogSegmentState
_ID = r"[A-Za-z0-9_-]{22}"
_SEGMENT_OBJECT = re.compile(rf"^(\d{{20}})-({_ID})\.(.+)$")
_REQUIRED = (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.PRODUCER_SNAPSHOT, IndexType.LEADER_EPOCH)
_MANIFEST = MANIFEST_SUFFIX
_PACKED = PACKED_INDEXES_SUFFIX
_SUFFIX_NAMES = {layout.LOG_SUFFIX.lstrip("."): layout.LOG_SUFFIX, **{t.suffix.lstrip("."): t.suffix for t in IndexType},
                 _MANIFEST[1:]: _MANIFEST, _PACKED[1:]: _PACKED}


class ScrubStopped(Exception):
    """A segment's scan ended because the scrub was stopped (its report is not used)."""


SEGMENT_THREADS = 8  # a partition's remote segments scrubbed at once (each reads and scans one object at a time)


def _checksum_problems(rsm: Any, metadata: RemoteLogSegmentMetadata, keys: dict[str, str],
                       found: list[ChecksumProblem]) -> list[Problem]:
    """The per-chunk crc32c checksums recorded with a segment's FINISHED metadata (:mod:`tiered.checksums`) that
    the segment's objects did not match, as the scrub reports them: one ``checksum_mismatch`` problem per chunk that
    differs, per object shorter or longer than recorded. ``keys`` maps each suffix present to its object key (for
    the report when the store names objects differently: the packed ``.indexes``)."""
    from tiered.checksums import object_name

    stored = {object_name(rsm, metadata, suffix): (suffix, key) for suffix, key in keys.items()}
    problems = []
    for problem in found:
        suffix, key = stored.get(problem.object, ("", problem.object))
        part = f" (its {suffix} part)" if key != problem.object else ""
        problems.append(Problem("checksum_mismatch", f"{problem.kind}{part}: {problem.detail} (bytes "
                                f"{problem.start}..{problem.end})", object=key, position=problem.start))
    return problems


@dataclass
class RemoteReport:
    """What the remote scrub found outside any one partition, and its counters."""

    backend: str
    prefix: str
    objects: int = 0
    segments: int = 0
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "prefix": self.prefix, "objects": self.objects, "segments": self.segments,
                "problems": [p.to_json() for p in self.problems], "notes": list(self.notes)}


@dataclass
class _RemotePartition:
    tip: TopicIdPartition
    metadata_keys: list[str] = field(default_factory=list)
    owner_keys: list[str] = field(default_factory=list)
    objects: dict[tuple[int, str], dict[str, str]] = field(default_factory=dict)  # (start, id) -> suffix -> key
    stray: list[str] = field(default_factory=list)  # keys under the partition matching no layout name


def _group_keys(keys: list[str], prefix: str, report: RemoteReport) -> dict[TopicIdPartition, _RemotePartition]:
    groups: dict[TopicIdPartition, _RemotePartition] = {}
    head = f"{prefix}/" if prefix else ""
    for key in keys:
        parts = key[len(head):].split("/")
        tip = _parse_partition(parts[:2]) if len(parts) >= 3 else None
        if tip is None:
            report.notes.append(f"object {key} is not in the tiered layout (ignored)")
            continue
        group = groups.setdefault(tip, _RemotePartition(tip))
        if len(parts) == 4 and parts[2] == layout.METADATA_DIR and layout.metadata_event_of_key(parts[3]):
            group.metadata_keys.append(key)
            continue
        if len(parts) == 4 and parts[2] == layout.METADATA_DIR and layout.owner_epoch_of_key(parts[3]) is not None:
            group.owner_keys.append(key)
            continue
        match = _SEGMENT_OBJECT.match(parts[2]) if len(parts) == 3 else None
        suffix = _SUFFIX_NAMES.get(match.group(3)) if match else None
        if match is None or suffix is None:
            group.stray.append(key)
            continue
        group.objects.setdefault((int(match.group(1)), match.group(2)), {})[suffix] = key
    return groups


def _parse_partition(parts: list[str]) -> TopicIdPartition | None:
    name, number = parts
    if len(name) < 24 or name[-23] != "-" or not number.isdigit():
        return None
    try:
        return TopicIdPartition(layout.parse_kafka_uuid(name[-22:]), name[:-23], int(number))
    except ValueError:
        return None


class RemoteScrub:
    """Scrubs every partition of one remote tier; see the module docstring."""

    def __init__(self, rsm: Any, *, progress: Progress, add_total: Callable[[int], None]) -> None:
        self.rsm = rsm
        self.store: ObjectStore = rsm.object_store
        self.prefix = rsm.prefix
        self.progress = progress
        self.add_total = add_total
        self.report = RemoteReport(f"{type(rsm).__module__}.{type(rsm).__qualname__}", self.prefix)
        # Per segment id: the checksums recorded with its events, as load_metadata read them (read once each).
        self._checksums: dict[str, SegmentChecksums] = {}
        # Set when the scrub ends early (Ctrl-C): the segments being read stop at their next chunk.
        self._stopping = threading.Event()

    def recorded_checksums(self, md: RemoteLogSegmentMetadata) -> SegmentChecksums | None:
        """The checksums recorded with ``md``'s events (its FINISHED one), as :meth:`load_metadata` read them; None
        for a copy made before checksums existed, or a segment whose partition was not loaded."""
        return self._checksums.get(layout.kafka_uuid(md.remote_log_segment_id.id))

    def discover(self) -> dict[TopicIdPartition, _RemotePartition]:
        keys = self.store.list_keys(f"{self.prefix}/" if self.prefix else "")
        self.report.objects = len(keys)
        return _group_keys(keys, self.prefix, self.report)

    def relist(self, tip: TopicIdPartition) -> _RemotePartition:
        """``tip``'s keys listed again, its metadata events first, then its objects: the objects of a copy whose
        FINISHED event is listed are in place by the second listing (a listing of the whole partition in pages could
        hold the event, listed after the upload ended, and not the objects, listed before; the events a second listing
        holds are not taken: they could be of an upload that ended between its pages)."""
        head = layout.partition_prefix(self.prefix, tip)
        events = self.store.list_keys(f"{head}/{layout.METADATA_DIR}/")
        objects = [key for key in self.store.list_keys(f"{head}/") if f"/{layout.METADATA_DIR}/" not in key]
        notes: list[str] = []  # (a key in neither layout was noted by the first listing already)
        return _group_keys([*events, *objects], self.prefix, RemoteReport("", "", notes=notes)).get(
            tip, _RemotePartition(tip))

    def load_metadata(self, group: _RemotePartition, out: PartitionReport) -> dict[str, RemoteLogSegmentMetadata]:
        from tiered.metadata import decode_record

        latest: dict[str, RemoteLogSegmentMetadata] = {}
        events: dict[str, list[tuple[int, str]]] = {}
        fetched = get_all(self.store, list(group.metadata_keys))  # (in parallel: each GET a round trip on S3)
        for key in group.metadata_keys:
            event = layout.metadata_event_of_key(key)
            assert event is not None  # grouped as an event by its key
            start, segment_id, state = event
            sid = layout.kafka_uuid(segment_id)
            events.setdefault(sid, []).append((state, key))
            data = fetched[key]
            if isinstance(data, TieredStorageError | OSError):
                out.problems.append(Problem("unreadable", f"cannot read remote metadata: {data}", object=key))
                continue
            if isinstance(data, Exception):
                raise data
            try:
                md, sums = decode_record(data)
            except (ValueError, KeyError, TypeError, AttributeError, TieredStorageError) as exc:
                out.problems.append(Problem("remote_metadata", f"malformed remote metadata event: {exc!r}", object=key))
                continue
            found = (md.start_offset, layout.kafka_uuid(md.remote_log_segment_id.id), int(md.state),
                     md.topic_id_partition)
            if found != (start, sid, state, group.tip):
                out.problems.append(Problem(
                    "remote_metadata", f"the event holds segment {found[1]} of {found[3]} at start offset {found[0]} "
                    f"in state {found[2]}, not what its key says", object=key))
                continue
            if sid not in latest or md.state > latest[sid].state:
                latest[sid] = md
            if sums is not None:  # (the FINISHED event carries them; as the metadata store keeps them)
                self._checksums[sid] = sums
        for sid, md in latest.items():
            if md.state is S.DELETE_SEGMENT_FINISHED:  # its other events were deleted with it; one here landed later
                for state, key in sorted(events[sid]):
                    if state != S.DELETE_SEGMENT_FINISHED:
                        out.problems.append(Problem(
                            "orphaned_object", f"a metadata event of segment {sid}, whose deletion finished (a write "
                            "that reached the store after the deletion, or a crash in its cleanup): nothing reads it; "
                            "the owner's next retention pass deletes it", object=key, offset=md.start_offset))
        for md in latest.values():
            if md.state is S.COPY_SEGMENT_FINISHED:
                self.add_total(max(0, md.segment_size_in_bytes))
        return latest

    def load_owners(self, group: _RemotePartition, out: PartitionReport) -> list[OwnerRecord]:
        """The partition's owner records by ascending epoch; a record that cannot be read is a problem."""
        records: dict[int, OwnerRecord] = {}
        for key in group.owner_keys:
            epoch = layout.owner_epoch_of_key(key)
            try:
                record = OwnerRecord.decode(self.store.get(key))
            except (TieredStorageError, OSError) as exc:
                out.problems.append(Problem("unreadable", f"cannot read the owner record: {exc}", object=key))
                continue
            except ValueError as exc:
                out.problems.append(Problem("remote_metadata", str(exc), object=key))
                continue
            if record.owner_epoch != epoch:
                out.problems.append(Problem("remote_metadata", f"the owner record holds owner epoch "
                                            f"{record.owner_epoch}, not what its key says", object=key))
                continue
            records[record.owner_epoch] = record
        return [records[e] for e in sorted(records)]

    def scrub_partition(self, group: _RemotePartition, latest: dict[str, RemoteLogSegmentMetadata],
                        out: PartitionReport, owners: list[OwnerRecord] | None = None) -> None:
        for key in group.stray:
            out.problems.append(Problem("orphaned_object", "object name matches no remote segment object", object=key))
        named = {(md.start_offset, sid) for sid, md in latest.items() if md.state is not S.DELETE_SEGMENT_FINISHED}
        for (start, sid), objects in sorted(group.objects.items()):
            if (start, sid) in named:
                continue
            md = latest.get(sid)
            why = ("its segment's deletion finished" if md is not None and md.state is S.DELETE_SEGMENT_FINISHED
                   else "no remote metadata names this segment")
            for key in sorted(objects.values()):
                out.problems.append(Problem("orphaned_object", f"orphaned object: {why}", object=key, offset=start))
        finished = sorted((md for md in latest.values() if md.state is S.COPY_SEGMENT_FINISHED),
                          key=lambda m: (m.start_offset, m.end_offset))
        finished = self._check_lineage(finished, owners or [], out)
        damaged = {event[1]: p.object for p in out.problems
                   if p.kind == "remote_metadata" and p.object and (event := layout.metadata_event_of_key(p.object))}
        for sid, md in sorted(latest.items(), key=lambda kv: kv[1].start_offset):
            if md.state in (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED):
                bad_event = damaged.get(md.remote_log_segment_id.id)
                local_start = out.local_start_offset
                if bad_event is not None:
                    why = (f"is left in {md.state.name} in its readable events, but its event {bad_event} cannot be "
                           "read: it may be a finished copy (its objects the only copy of its records), so no copy "
                           "pass deletes it; repair or remove that event")
                elif md.state is S.COPY_SEGMENT_STARTED and local_start is not None and md.start_offset < local_start:
                    # (what the copy task says of it: rlm_copy's stale-copy cleanup keeps it)
                    why = (f"is left in COPY_SEGMENT_STARTED, but the local log starts at {local_start}: its copy "
                           "finished once (local retention removed its records) and its COPY_SEGMENT_FINISHED event "
                           "is gone. No copy pass deletes it (its objects may be the only copy of those records): "
                           "restore the event, or remove the segment's objects by hand if the records are not needed")
                else:
                    why = (f"is left in {md.state.name}: a copy or delete that never finished (its objects are garbage "
                           "until the next copy pass removes them)")
                out.problems.append(Problem(
                    "incomplete_remote_operation", f"segment {sid} ({md.start_offset}..{md.end_offset}) {why}",
                    object=layout.metadata_event_key(self.prefix, md.remote_log_segment_id, md.start_offset,
                                                     int(md.state)), offset=md.start_offset))
        for part in self._scrub_segments(finished, group, out):
            out.problems += part.problems
            out.notes += part.notes
            out.remote_bytes += part.remote_bytes
            out.segment_records.update(part.segment_records)
            out.segment_content.update(part.segment_content)
            out.segment_aborted.update(part.segment_aborted)
        reach = None  # the segment reaching the highest end offset so far
        for before, after in itertools.pairwise(finished):
            reach = before if reach is None or before.end_offset > reach.end_offset else reach
            if after.start_offset <= reach.end_offset:
                out.problems.append(Problem(
                    "conflicting_segments", f"segments {layout.kafka_uuid(reach.remote_log_segment_id.id)} "
                    f"({reach.start_offset}..{reach.end_offset}) and {layout.kafka_uuid(after.remote_log_segment_id.id)} "
                    f"({after.start_offset}..{after.end_offset}) both hold offsets {after.start_offset}.."
                    f"{min(reach.end_offset, after.end_offset)}: reads take the first", offset=after.start_offset))
            elif after.start_offset > reach.end_offset + 1:
                out.problems.append(Problem(
                    "offset_gap", f"offsets {reach.end_offset + 1}..{after.start_offset - 1} are in no remote segment "
                    f"(between segments {layout.kafka_uuid(reach.remote_log_segment_id.id)} and "
                    f"{layout.kafka_uuid(after.remote_log_segment_id.id)})", offset=reach.end_offset + 1))
        out.remote_segments += len(finished)
        out.remote_end_offset = max((md.end_offset for md in finished), default=out.remote_end_offset)
        self.report.segments += len(finished)

    def _scrub_segments(self, finished: list[RemoteLogSegmentMetadata], group: _RemotePartition,
                        out: PartitionReport) -> Iterator[PartitionReport]:
        """Each segment of ``finished`` scrubbed into a report of its own, in order; up to :data:`SEGMENT_THREADS`
        at once (on S3 a segment's reads are round trips: one at a time, verify of a partition of 1,800 segments
        took 3 minutes against SeaweedFS on loopback)."""
        def one(md: RemoteLogSegmentMetadata) -> PartitionReport:
            part = PartitionReport(out.topic, out.partition, check_content=out.check_content)
            self._scrub_segment(md, group.objects.get((md.start_offset, layout.kafka_uuid(md.remote_log_segment_id.id)),
                                                      {}), part)
            return part

        if len(finished) <= 1 or SEGMENT_THREADS <= 1:
            yield from map(one, finished)
            return
        with ThreadPoolExecutor(SEGMENT_THREADS, thread_name_prefix="verify-segment") as pool:
            # (submitted a window at a time: a partition's reports are not all held at once)
            pending: deque[Future[PartitionReport]] = deque()
            try:
                for md in finished:
                    pending.append(pool.submit(one, md))
                    if len(pending) >= 2 * SEGMENT_THREADS:
                        yield pending.popleft().result()
                while pending:
                    yield pending.popleft().result()
            except BaseException:
                # Ended early (Ctrl-C, an error): the segments under way stop at their next chunk, the others never
                # start; the pool's exit waited for a whole segment each (minutes for a 1 GiB one on S3).
                self._stopping.set()
                for future in pending:
                    future.cancel()
                raise

    def _check_lineage(self, finished: list[RemoteLogSegmentMetadata], owners: list[OwnerRecord],
                       out: PartitionReport) -> list[RemoteLogSegmentMetadata]:
        """The segments of ``finished`` within the newest owner record's lineage; the others are problems."""
        if not owners:
            return finished
        owner = owners[-1]
        kept = []
        for md in finished:
            if within_lineage(md, owner.lineage):
                kept.append(md)
                continue
            epochs = ", ".join(f"{e} from {s}" for e, s in sorted(md.segment_leader_epochs.items(), key=lambda kv: kv[1]))
            lineage = ", ".join(f"{e} from {s}" for e, s in owner.lineage)
            out.problems.append(Problem(
                "outside_lineage", f"segment {layout.kafka_uuid(md.remote_log_segment_id.id)} ({md.start_offset}.."
                f"{md.end_offset}, leader epochs {epochs}) lies outside the lineage of the current owner "
                f"({owner.describe()}; lineage {lineage}): a former owner copied it after it lost the partition; it is "
                "never read, and the owner's remote retention deletes it",
                object=layout.metadata_event_key(self.prefix, md.remote_log_segment_id, md.start_offset,
                                                 int(md.state)), offset=md.start_offset))
        return kept

    def _manifest(self, md: RemoteLogSegmentMetadata) -> SegmentManifest | None:
        return read_manifest(self.store, layout.segment_key(self.prefix, md, _MANIFEST),
                             layout.kafka_uuid(md.remote_log_segment_id.id))

    def _manifest_layout(self, md: RemoteLogSegmentMetadata, present: dict[str, str], keys: dict[str, str],
                         out: PartitionReport) -> dict[str, str] | None:
        """For a segment in the manifest layout: the objects that hold its parts (each index present maps to the
        packed ``.indexes`` object), or None when its manifest cannot be read (reported)."""
        manifest_key = present[_MANIFEST]
        try:
            manifest = self._manifest(md)
        except (TieredStorageError, OSError) as exc:
            out.problems.append(Problem("unreadable", f"cannot read the segment manifest: {exc}", object=manifest_key))
            return None
        if manifest is None:
            out.problems.append(Problem("missing_object", "the segment manifest vanished while being read",
                                        object=manifest_key))
            return None
        packed = layout.segment_key(self.prefix, md, _PACKED)
        for suffix in manifest.indexes:
            keys[suffix] = packed
        listed = {s: packed for s in manifest.indexes} if _PACKED in present else {}  # else: each index is missing
        if layout.LOG_SUFFIX in present:
            listed[layout.LOG_SUFFIX] = present[layout.LOG_SUFFIX]
        return listed

    def _scrub_segment(self, md: RemoteLogSegmentMetadata, present: dict[str, str], out: PartitionReport) -> None:
        keys = {s: layout.segment_key(self.prefix, md, s) for s in layout.SEGMENT_SUFFIXES}
        sid = layout.kafka_uuid(md.remote_log_segment_id.id)
        if _PACKED in present and _MANIFEST not in present:  # the manifest layout without its manifest: unreadable
            out.problems.append(Problem("missing_object", f"segment {sid} ({md.start_offset}..{md.end_offset}) is "
                                        f"COPY_SEGMENT_FINISHED but its {_MANIFEST} object is missing (its "
                                        f"{_PACKED} object is there): its chunks cannot be read without it",
                                        object=layout.segment_key(self.prefix, md, _MANIFEST), offset=md.start_offset))
            return
        if _MANIFEST in present:
            found = self._manifest_layout(md, present, keys, out)
            if found is None:
                return
            present = found
        for suffix in (layout.LOG_SUFFIX, *(t.suffix for t in _REQUIRED)):
            if suffix not in present:
                out.problems.append(Problem("missing_object", f"segment {sid} ({md.start_offset}..{md.end_offset}) is "
                                            f"COPY_SEGMENT_FINISHED but its {suffix} object is missing",
                                            object=keys[suffix], offset=md.start_offset))
        if layout.LOG_SUFFIX not in present:
            return
        # The checksums recorded with the segment (none for a copy made before they existed) are checked on the
        # bytes the scan reads anyway: each object is read once (an object missing is the listing's to report).
        sums = self.recorded_checksums(md)
        checks = {} if sums is None else {
            suffix: ObjectCheck(sums, suffix, object_name(self.rsm, md, suffix), str(md.remote_log_segment_id))
            for suffix in sums.objects if suffix in present}
        scan = self._scan_log(md, keys[layout.LOG_SUFFIX], out, checks.get(layout.LOG_SUFFIX))
        if scan is None:
            return
        checked = self._check_indexes(md, present, keys, scan, out, checks)
        mismatched = [p for suffix, check in checks.items() if suffix == layout.LOG_SUFFIX or suffix in checked
                      for p in check.finish()]
        out.problems += _checksum_problems(self.rsm, md, {s: keys[s] for s in present}, mismatched)

    def _scan_log(self, md: RemoteLogSegmentMetadata, key: str, out: PartitionReport,
                  check: ObjectCheck | None = None) -> BatchScanner | None:
        """The ``.log`` object's batches scanned (and, with ``check``, its recorded checksums fed), read once."""
        size = md.segment_size_in_bytes
        known = 0 <= size < INT32_MAX
        scan = BatchScanner(key, remote=True, segment_base=md.start_offset, min_offset=md.start_offset,
                            total_size=size if known else None, progress=self.progress, content=out.check_content)
        try:
            for chunk in self._log_chunks(md):
                if self._stopping.is_set():
                    raise ScrubStopped(f"{key}: the scrub was stopped")
                scan.feed(chunk)
                if check is not None:
                    check.feed(chunk)
        except RemoteResourceNotFoundError as exc:
            out.problems.append(Problem("missing_object", f"the object vanished while being read: {exc}", object=key))
            return None
        except (TieredStorageError, OSError) as exc:
            out.problems.append(Problem("unreadable", f"cannot read the object: {exc}", object=key,
                                        position=self._failed_position(md, exc, scan.bytes_seen)))
            return None
        scan.finish()
        out.problems += scan.problems
        out.count_records(md.start_offset, scan)
        out.remote_bytes += scan.bytes_seen
        if (known and scan.bytes_seen != size) or (not known and scan.bytes_seen < INT32_MAX):
            out.problems.append(Problem("object_size", f"the object holds {scan.bytes_seen} bytes but the remote "
                                        f"metadata says {size}", object=key))
        if scan.lasts and scan.lasts[-1] > md.end_offset:
            out.problems.append(Problem("remote_metadata", f"batches run to offset {scan.lasts[-1]}, past the "
                                        f"metadata's end offset {md.end_offset}", object=key, offset=md.end_offset))
        if scan.lasts and not scan.problems and scan.max_timestamp != md.max_timestamp_ms:
            out.notes.append(f"{key}: the batches' max timestamp is {scan.max_timestamp}, the remote metadata says "
                             f"{md.max_timestamp_ms}")
        return scan

    def _failed_position(self, md: RemoteLogSegmentMetadata, exc: Exception, scanned: int) -> int:
        """Where in the segment a read failed: a refused stored chunk's own start (the scan may not have reached it:
        a window of chunks is fetched at once), else how far the scan got."""
        if isinstance(exc, RemoteChunkError):
            manifest = self._manifest(md)
            if manifest is not None:
                return int(exc.chunk) * manifest.chunk_size
        return scanned

    def _log_chunks(self, md: RemoteLogSegmentMetadata) -> Iterator[bytes]:
        """The remote ``.log`` in chunks: one streamed GET when the backend streams, else ranged fetches."""
        if self.rsm.fetch_streams:
            stream = self.rsm.fetch_log_segment(md, 0)
            try:
                while chunk := stream.read(CHUNK_BYTES):
                    yield chunk
            finally:
                stream.close()
            return
        position = 0
        while True:
            stream = self.rsm.fetch_log_segment(md, position, position + CHUNK_BYTES - 1)
            try:
                chunk = stream.read()
            finally:
                stream.close()
            if chunk:
                yield chunk
                position += len(chunk)
            if len(chunk) < CHUNK_BYTES:
                return

    def _fetch_index(self, md: RemoteLogSegmentMetadata, kind: IndexType, key: str, out: PartitionReport) -> bytes | None:
        try:
            stream = self.rsm.fetch_index(md, kind)
            try:
                return bytes(stream.read())
            finally:
                stream.close()
        except RemoteResourceNotFoundError as exc:
            out.problems.append(Problem("missing_object", f"the object vanished while being read: {exc}", object=key))
        except (TieredStorageError, OSError) as exc:
            out.problems.append(Problem("unreadable", f"cannot read the object: {exc}", object=key))
        return None

    def _check_indexes(self, md: RemoteLogSegmentMetadata, present: dict[str, str], keys: dict[str, str],
                       scan: BatchScanner, out: PartitionReport, checks: dict[str, ObjectCheck]) -> set[str]:
        """Each index present read once, checked against the batches and fed to its checksum check (``checks``);
        the suffixes of those read."""
        base = md.start_offset
        read: set[str] = set()
        if out.check_content:
            out.segment_aborted[base] = ()  # (no transaction index: no aborted transaction)
        for kind in IndexType:
            key = keys[kind.suffix]
            if kind.suffix not in present:
                continue
            data = self._fetch_index(md, kind, key, out)
            if data is None:
                if kind is IndexType.TRANSACTION:
                    out.segment_aborted[base] = None
                continue
            read.add(kind.suffix)
            if kind.suffix in checks:
                checks[kind.suffix].feed(data)
            if kind is IndexType.OFFSET:
                sizes = offset_entry_sizes_of_bytes(data, scan.bytes_seen)
                if not sizes:
                    out.problems.append(Problem("offset_index", f"{len(data)} bytes read validly neither as 8-byte "
                                                "nor as 12-byte entries", object=key))
                    continue
                # an ambiguous length: the reading that fits the segment's batches (uploaded before and after the
                # large-index feature was finalized, both formats live in one bucket)
                problems, notes = min((check_offset_index(data, size, base, scan, key, remote=True) for size in sizes),
                                      key=lambda found: len(found[0]))
            elif kind is IndexType.TIMESTAMP:
                problems, notes = check_time_index(data, base, scan, key, remote=True)
            elif kind is IndexType.TRANSACTION:
                problems, notes = check_txn_index(data, base, md.end_offset, key, remote=True), []
                if out.check_content:
                    out.segment_aborted[base] = None if problems else aborted_transactions(data)
            elif kind is IndexType.PRODUCER_SNAPSHOT:
                problems, notes = check_producer_snapshot(data, key, remote=True), []
            else:
                problems, notes = check_leader_epoch_checkpoint(data, key, remote=True), []
            out.problems += problems
            out.notes += notes
        return read


def check_tier_gap(report: PartitionReport) -> None:
    """Offsets between the log start offset and the local log start that no remote segment holds."""
    start, local, remote_end = report.log_start_offset, report.local_start_offset, report.remote_end_offset
    if start is None or local is None or start >= local:
        return
    first_missing = start if remote_end is None else max(start, remote_end + 1)
    if first_missing < local:
        remote = (f"the remote tier (which ends at {remote_end})" if remote_end is not None else
                  "the remote tier (which holds no segment of the partition here: a wrong bucket or rsm.config.prefix?)")
        report.problems.append(Problem(
            "offset_gap", f"offsets {first_missing}..{local - 1} are above the log start offset {start} but in neither "
            f"{remote} nor the local segments (which start at {local})", offset=first_missing))


def topic_id_text(topic_id: uuid.UUID) -> str:
    return layout.kafka_uuid(topic_id)
