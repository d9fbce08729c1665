"""Every object of one remote segment read back and checked against the checksums recorded with its metadata
(:mod:`tiered.checksums`), for ``tiered verify`` and the plugin conformance suite. Changes nothing.

It lives with the scrub, above both the checksums and the stores that hold them: finding a segment's checksums
means opening the metadata store in the plugin's bucket, which itself builds on :mod:`tiered.checksums`.
"""

from __future__ import annotations

from collections.abc import Iterator

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
            if suffix == LOG:
                step = max(sums.chunk_bytes, read_bytes - read_bytes % sums.chunk_bytes)
                for lo in range(0, obj.size, step):
                    hi = min(lo + step, obj.size) - 1
                    with rsm.fetch_log_segment(metadata, lo, hi) as stream:
                        data = stream.read()
                    problem = check_range(sums, suffix, lo, data, hi - lo + 1, name, sid)
                    if problem is not None:
                        problems.append(problem)
                        if problem.kind != "mismatch":
                            break
                else:
                    with rsm.fetch_log_segment(metadata, obj.size, obj.size + 1) as stream:
                        extra = stream.read()
                    if extra:
                        problems.append(ChecksumProblem("long", name, obj.size, obj.size + len(extra) - 1,
                                                        f"the object is longer than the recorded {obj.size} byte(s)", sid))
            else:
                with rsm.fetch_index(metadata, IndexType(suffix)) as stream:
                    data = stream.read()
                problems.extend(_all_chunks(sums, suffix, data, name, sid))
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


def _all_chunks(sums: SegmentChecksums, suffix: str, data: bytes, name: str, sid: str) -> Iterator[ChecksumProblem]:
    size = sums.objects[suffix].size
    if len(data) != size:
        problem = check_range(sums, suffix, 0, data, size, name, sid)
        if problem is not None:
            yield problem
        return
    c = sums.chunk_bytes
    for lo in range(0, size, c):
        problem = check_range(sums, suffix, lo, memoryview(data)[lo : lo + c], min(c, size - lo), name, sid)
        if problem is not None:
            yield problem
