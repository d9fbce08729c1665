"""What the scrub reports: a :class:`Problem` (a stable ``kind``, the local file or remote object, the byte position
and the offset when known, and what is wrong) and the per-partition and per-data-dir reports that hold them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from local.index.entries import LEGACY_OFFSET_ENTRY_SIZE

MAX_LISTED_PER_FILE = 20
"""Problems of one kind listed one by one per file; the rest are counted in one more problem."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing found wrong. ``kind`` is one of :data:`PROBLEM_KINDS`; ``file`` (a local path) or ``object`` (a
    remote key) says where, ``position`` is the byte position in it, ``offset`` the record offset concerned."""

    kind: str
    message: str
    file: str | None = None
    object: str | None = None
    position: int | None = None
    offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "file": self.file, "object": self.object, "position": self.position,
                "offset": self.offset, "message": self.message}

    def line(self) -> str:
        """``<file | remote object KEY>, position P, offset O: [kind] message`` (the parts known)."""
        parts = [self.file or (f"remote object {self.object}" if self.object else "")]
        if self.position is not None:
            parts.append(f"position {self.position}")
        if self.offset is not None:
            parts.append(f"offset {self.offset}")
        head = ", ".join(x for x in parts if x)
        return f"{head}: [{self.kind}] {self.message}" if head else f"[{self.kind}] {self.message}"


PROBLEM_KINDS = (
    "missing_dir",  # a data dir or remote directory named on the command line does not exist
    "unreadable",  # a file or object that cannot be read (I/O error, permission, store error)
    "crc_mismatch",  # a batch whose stored CRC is not the CRC of its bytes
    "corrupt_batch",  # a batch header that cannot be right (magic, length, delta, count, codec)
    "truncated_segment",  # trailing bytes that do not form a whole batch, or a batch running past the end
    "offset_order",  # batch offsets that go backwards, or outside the segment's range
    "offset_index",  # an offset index entry that is out of order or does not point at its batch
    "time_index",  # a time index entry out of order or not matching its batch's max timestamp
    "txn_index",  # a malformed transaction index entry
    "producer_snapshot",  # a producer snapshot with a bad version, CRC or length
    "checkpoint",  # a malformed checkpoint, or one naming an offset past the log end
    "partition_metadata",  # a malformed partition.metadata, or a missing one where the partition has remote data
    "topic_config",  # topic overrides that do not tier a partition holding remote data
    "remote_metadata",  # a remote metadata event that cannot be read or contradicts its object
    "missing_object",  # a remote object that the remote metadata says must exist
    "orphaned_object",  # a remote object that no live remote metadata names
    "object_size",  # a remote .log whose size is not the metadata's segment size
    "incomplete_remote_operation",  # a copy or delete left STARTED: its objects are garbage until cleaned
    "offset_gap",  # offsets held by neither tier between the log start and the log end
    "lost_offsets",  # offsets a recovery cut out of the middle of a log (recorded in tiered-lost-offsets)
    "checksum_mismatch",  # a remote object whose recorded chunk checksums do not match its bytes
    "outside_lineage",  # a remote segment outside the current owner's lineage (a former owner's late copy)
    "conflicting_segments",  # two remote segments of the owner's lineage holding the same offsets
    "not_owner",  # a data dir whose claim on a partition's remote data is not the current owner's
    "behind_remote",  # a data dir holding the claim whose log ends before the copies made under it (an older copy)
    "diverged",  # a remote segment holding other records than the local segment at its offsets (a copied data dir)
    "columnar",  # the columnar copy (tiered.columnar): a manifest, or a file it names, that is missing or wrong
)


def problem_at(name: str, remote: bool, kind: str, message: str, position: int | None = None,
               offset: int | None = None) -> Problem:
    """A problem in the local file or remote object ``name``."""
    return Problem(kind, message, file=None if remote else name, object=name if remote else None,
                   position=position, offset=offset)


def listed(problems: list[Problem], kind: str, items: Iterable[tuple[str, int, int | None]], name: str,
            remote: bool, total: int | None = None) -> None:
    """Append one problem per (message, position, offset), at most MAX_LISTED_PER_FILE, then a count of the rest
    (of ``total`` when given: ``items`` are then only the first ones)."""
    rows = list(items)
    for message, position, offset in rows[:MAX_LISTED_PER_FILE]:
        problems.append(problem_at(name, remote, kind, message, position, offset))
    total = len(rows) if total is None else total
    if total > MAX_LISTED_PER_FILE:
        problems.append(problem_at(name, remote, kind,
                                   f"{total - MAX_LISTED_PER_FILE} more problem(s) of this kind not listed"))


SegmentContent = tuple[bytes, tuple[int, ...]]
"""A segment's records' digest and its transactional data batches' (base, last offset, producer id), flat."""


@dataclass
class PartitionReport:
    """What the scrub found for one partition (local and/or remote)."""

    topic: str
    partition: int
    data_dir: str | None = None
    topic_id: str | None = None
    segments: int = 0
    batches: int = 0
    bytes: int = 0
    log_start_offset: int | None = None  # from the log-start-offset checkpoint
    local_start_offset: int | None = None
    log_end_offset: int | None = None
    remote_segments: int = 0
    remote_bytes: int = 0
    remote_end_offset: int | None = None
    remote_storage_enable: bool | None = None  # the topic override persisted beside the partition, if any
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Per segment scanned without a problem, local or remote: base offset -> (last offset, records of its data
    # batches). The columnar copy's rows are checked against it (tiered.columnar.scrub); not in the JSON report.
    segment_records: dict[int, tuple[int, int]] = field(default_factory=dict, repr=False)
    # Whether its segments' contents are digested as they are scanned (the partition has a columnar copy), and per
    # segment so digested: base offset -> (its records' digest, the (base, last) offsets of its transactional data
    # batches, flat) (tiered.scrub.content).
    check_content: bool = field(default=False, repr=False)
    segment_content: dict[int, SegmentContent] = field(default_factory=dict, repr=False)
    # Per segment scanned: its transaction index's aborted transactions (producer id, first offset, last offset; none
    # without an index), or None when the index could not be read whole: what the copy's aborted marks are checked
    # against, when every segment from theirs to the log end is known.
    segment_aborted: dict[int, tuple[tuple[int, int, int], ...] | None] = field(default_factory=dict, repr=False)

    def count_records(self, base: int, scan: Any) -> None:
        """Keep ``scan``'s record count for the segment at ``base`` (a :class:`tiered.scrub.batches.BatchScanner`
        that is finished), when it is exact, and its content digest when it made one."""
        if scan.records_known and not scan.problems and scan.stopped_at is None and len(scan.lasts):
            self.segment_records[base] = (int(scan.lasts[-1]), int(scan.records))
            if scan.content is not None:
                self.segment_content[base] = (scan.content.digest(), tuple(scan.transactional))

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.name, "topic": self.topic, "partition_number": self.partition, "topic_id": self.topic_id,
            "data_dir": self.data_dir, "ok": not self.problems, "segments": self.segments, "batches": self.batches,
            "bytes": self.bytes, "log_start_offset": self.log_start_offset,
            "local_start_offset": self.local_start_offset, "log_end_offset": self.log_end_offset,
            "remote_segments": self.remote_segments, "remote_bytes": self.remote_bytes,
            "remote_end_offset": self.remote_end_offset,
            "problems": [p.to_json() for p in self.problems], "notes": list(self.notes),
        }


@dataclass
class DataDirReport:
    """The data dir's own files (checkpoints, the clean-shutdown marker)."""

    path: str
    clean_shutdown: bool = False
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checkpoints: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    requested_entry_size: int = LEGACY_OFFSET_ENTRY_SIZE  # what a new offset index would use (ties in detection)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "clean_shutdown": self.clean_shutdown,
                "problems": [p.to_json() for p in self.problems], "notes": list(self.notes)}
