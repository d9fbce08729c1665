"""Every object of one remote segment read back and checked against the checksums recorded with its metadata
(:mod:`tiered.checksums`), for ``tiered verify`` and the plugin conformance suite. Changes nothing.

It lives with the scrub, above both the checksums and the stores that hold them: finding a segment's checksums
means opening the metadata store in the plugin's bucket, which itself builds on :mod:`tiered.checksums`.
"""

from __future__ import annotations

from tiered.checksums import LOG, MIB, ChecksumProblem, SegmentChecksums, check_range, object_name
from tiered.errors import RemoteResourceNotFoundError, RemoteStorageError
from tiered.metadata import RemoteLogMetadataStore
from tiered.rsm import IndexType, RemoteLogSegmentMetadata, RemoteStorageManager


def recorded_checksums(rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata) -> SegmentChecksums | None:
    """The checksums recorded with the segment's FINISHED metadata in ``rsm``'s store, or None."""
    return _resolve(rsm, metadata, None)


def verify_object_checksums(
    rsm: RemoteStorageManager,
    metadata: RemoteLogSegmentMetadata,
    checksums: SegmentChecksums | RemoteLogMetadataStore | None = None,
    *,
    read_bytes: int = 8 * MIB,
) -> list[ChecksumProblem]:
    """Read every object of the segment through ``rsm`` and list what does not match its recorded checksums:
    chunks whose crc32c differs, objects shorter or longer than recorded, objects missing or unreadable. Changes
    nothing. ``checksums``: the segment's checksums, or the metadata store to find them in (by default the store
    in ``rsm``'s own bucket, when it has the object API). A segment copied before checksums existed gives ``[]``
    (nothing to check against: see :func:`has_checksums`)."""
    sums = _resolve(rsm, metadata, checksums)
    if sums is None:
        return []
    sid = str(metadata.remote_log_segment_id)
    problems: list[ChecksumProblem] = []
    for suffix, obj in sorted(sums.objects.items()):
        name = object_name(rsm, metadata, suffix)
        try:
            check = ObjectCheck(sums, suffix, name, sid)
            if suffix == LOG:
                step = max(sums.chunk_bytes, read_bytes - read_bytes % sums.chunk_bytes)
                for lo in range(0, obj.size, step):
                    hi = min(lo + step, obj.size) - 1
                    with rsm.fetch_log_segment(metadata, lo, hi) as stream:
                        data = stream.read()
                    check.feed(data)
                    if len(data) < hi - lo + 1:
                        break
                else:
                    with rsm.fetch_log_segment(metadata, obj.size, obj.size + 1) as stream:
                        check.feed(stream.read())  # (any byte past the recorded end: the object is longer)
            else:
                with rsm.fetch_index(metadata, IndexType(suffix)) as stream:
                    check.feed(stream.read())
            problems.extend(check.finish())
        except RemoteResourceNotFoundError as exc:
            problems.append(ChecksumProblem("missing", name, 0, max(obj.size - 1, 0), str(exc), sid))
        except (RemoteStorageError, OSError) as exc:
            problems.append(ChecksumProblem("unreadable", name, 0, max(obj.size - 1, 0), str(exc), sid))
    return problems


def has_checksums(
    rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata, checksums: RemoteLogMetadataStore | None = None
) -> bool:
    return _resolve(rsm, metadata, checksums) is not None


def _resolve(
    rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, checksums: SegmentChecksums | RemoteLogMetadataStore | None
) -> SegmentChecksums | None:
    if isinstance(checksums, SegmentChecksums):
        return checksums
    if checksums is None:
        if rsm.object_store is None:
            return None
        checksums = RemoteLogMetadataStore.in_bucket(rsm)
    return checksums.segment_checksums(md)


class ObjectCheck:
    """The recorded checksums of one object checked against its bytes as they pass, in order, from its start: a read
    made for another purpose (the scrub's batch scan streams the ``.log`` and reads each index once) checks them
    too, with no second read. :meth:`finish` lists what does not match: each chunk whose crc32c differs, an object
    shorter than recorded (its last chunk, and nothing after it), or longer."""

    def __init__(self, sums: SegmentChecksums, suffix: str, name: str, segment_id: str) -> None:
        self.sums, self.suffix, self.name, self.segment_id = sums, suffix, name, segment_id
        self.size = sums.objects[suffix].size
        self.position = 0  # where the pending bytes start (a chunk boundary)
        self.pending = bytearray()
        self.extra = 0  # bytes seen past the recorded size
        self.problems: list[ChecksumProblem] = []

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        room = max(0, self.size - self.position - len(self.pending))
        if len(view) > room:
            self.extra += len(view) - room
            view = view[:room]
        c = self.sums.chunk_bytes
        if not self.pending and len(view) >= c:  # whole chunks straight from the caller's bytes: no copy
            whole = len(view) - len(view) % c
            self._check(view[:whole], whole)
            view = view[whole:]
        self.pending += view
        if len(self.pending) >= c:
            whole = len(self.pending) - len(self.pending) % c
            self._check(memoryview(self.pending)[:whole], whole)
            del self.pending[:whole]

    def _check(self, data: memoryview, n: int) -> None:
        c = self.sums.chunk_bytes
        for i in range(0, n, c):
            problem = check_range(self.sums, self.suffix, self.position + i, data[i : i + c], c, self.name,
                                  self.segment_id)
            if problem is not None:
                self.problems.append(problem)
        self.position += n

    def finish(self) -> list[ChecksumProblem]:
        """What did not match, once every byte was fed."""
        left = self.size - self.position
        if left > 0:  # the last chunk, or bytes missing from the recorded end
            problem = check_range(self.sums, self.suffix, self.position, self.pending, left, self.name, self.segment_id)
            if problem is not None:
                self.problems.append(problem)
        if self.extra:
            self.problems.append(ChecksumProblem("long", self.name, self.size, self.size + self.extra - 1,
                                                 f"the object is longer than the recorded {self.size} byte(s)",
                                                 self.segment_id))
        self.pending = bytearray()
        return self.problems
