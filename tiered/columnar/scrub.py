"""``tiered verify`` of the columnar copies: every manifest against its files and against the log.

For each partition directory under the columnar root (``--topic``: only that topic's): the manifest decodes and its
files are contiguous (:func:`tiered.columnar.manifest.decode` checks that); each file it lists exists with the
manifest's size and crc32c (a flipped byte is found here), its Parquet footer counts the manifest's rows, and the
statistics of its ``offset`` column lie inside the file's range, its offsets rise strictly and each remote segment
it lists holds the rows the manifest says (its ``offset`` column is read); each segment's rows equal the records of
the segment's data batches wherever the scrub read that segment without a problem (the local segment, or the remote
one with ``--remote``: :attr:`tiered.scrub.report.PartitionReport.segment_records`), in number and in content (the
digest of :mod:`tiered.scrub.content`), with rows marked aborted where the transaction indexes say (where all of them
from the segment on were read; else only among its transactional batches'); no file holds offsets at or
past the log end offset, and the manifest's topic id is the partition's; the partition dir's links (what a plain directory read
sees) are exactly the published files. Parquet files that no manifest names are noted (a crash
leaves them; the partition's next writer removes them), not counted as problems. Nothing is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tiered.columnar.manifest import (
    FILES_DIR,
    MANIFEST_NAME,
    PARQUET_SUFFIX,
    ColumnarFile,
    ColumnarManifestError,
    published_file,
    read_manifest,
)
from tiered.scrub.report import PartitionReport, Problem

KIND = "columnar"


def scrub_columnar(root: Path, partitions: list[PartitionReport], topic: str | None = None,
                   remote_scanned: bool = False) -> None:
    """Add what is wrong with the copies under ``root`` to the reports in ``partitions`` (new ones for partitions
    the scrub had not seen); ``remote_scanned``: the scrub read the remote segments too."""
    if not root.is_dir():
        return
    reports = {(p.topic, p.partition): p for p in partitions}
    for directory in sorted(d for d in root.iterdir() if d.is_dir()):
        name, _, number = directory.name.rpartition("-")
        if not name or not number.isdigit() or (topic is not None and name != topic):
            continue
        report = reports.get((name, int(number)))
        if report is None:
            report = reports[(name, int(number))] = PartitionReport(name, int(number))
            report.notes.append("columnar copy only (no data dir or remote tier scrubbed holds this partition)")
            partitions.append(report)
        scrub_partition(directory, report, remote_scanned)


def scrub_partition(directory: Path, report: PartitionReport, remote_scanned: bool = False) -> None:
    import pyarrow.parquet as pq

    from local.crc import crc32c

    path = directory / MANIFEST_NAME
    try:
        m = read_manifest(directory)
    except (ColumnarManifestError, OSError) as exc:
        report.problems.append(Problem(KIND, f"cannot read the columnar manifest: {exc}", file=str(path)))
        return
    if m is None:
        if any(p.suffix == PARQUET_SUFFIX for p in directory.iterdir()):
            report.problems.append(Problem(KIND, "Parquet files but no manifest", file=str(path)))
        return
    if report.topic_id is not None and m.topic_id != report.topic_id:
        report.problems.append(Problem(KIND, f"the manifest is of topic id {m.topic_id}, the partition's is "
                                             f"{report.topic_id}", file=str(path)))
    compared = uncompared = 0
    for f in m.files:
        file = published_file(directory, f.name)
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            report.problems.append(Problem(KIND, f"missing: the manifest lists it for offsets {f.base_offset}-"
                                                 f"{f.end_offset}", file=str(file), offset=f.base_offset))
            continue
        except OSError as exc:
            report.problems.append(Problem("unreadable", f"cannot read: {exc}", file=str(file)))
            continue
        if len(data) != f.size:
            report.problems.append(Problem(KIND, f"{len(data)} bytes, the manifest says {f.size}", file=str(file)))
            continue
        crc = crc32c(data)
        if crc != f.crc32c:
            report.problems.append(Problem(KIND, f"crc32c {crc:#010x} of its bytes, the manifest says {f.crc32c:#010x}",
                                           file=str(file)))
            continue
        try:
            meta = pq.ParquetFile(file).metadata
        except Exception as exc:  # pyarrow raises several types for a bad footer
            report.problems.append(Problem(KIND, f"not a readable Parquet file: {exc}", file=str(file)))
            continue
        if meta.num_rows != f.rows:
            report.problems.append(Problem(KIND, f"{meta.num_rows} rows, the manifest says {f.rows}", file=str(file)))
        if f.rows > f.end_offset - f.base_offset + 1:
            report.problems.append(Problem(KIND, f"{f.rows} rows for the {f.end_offset - f.base_offset + 1} offsets "
                                                 f"{f.base_offset}-{f.end_offset}", file=str(file)))
        column = meta.schema.to_arrow_schema().get_field_index("offset")
        for i in range(meta.num_row_groups):
            stats = meta.row_group(i).column(column).statistics
            if stats is None or not stats.has_min_max:
                report.problems.append(Problem(KIND, f"row group {i} has no offset statistics", file=str(file)))
            elif stats.min < f.base_offset or stats.max > f.end_offset:
                report.problems.append(Problem(KIND, f"row group {i} holds offsets {stats.min}-{stats.max}, outside "
                                                     f"{f.base_offset}-{f.end_offset}", file=str(file),
                                               offset=int(stats.min)))
        if not f.segments:
            continue
        problems = _check_segment_rows(file, f, report.segment_records, report.segment_content, report)
        report.problems += problems
        if not problems:
            seen = sum(1 for s in f.segments if report.segment_records.get(s.base_offset, (None,))[0] == s.end_offset)
            compared += seen
            uncompared += len(f.segments) - seen
    if compared or uncompared:
        why = ("no tier scrubbed holds their segments now: deleted by retention, or unreadable" if remote_scanned
               else "not scanned here; --remote reads the remote segments")
        report.notes.append(f"columnar: the rows of {compared} segment(s) compared with the log's records"
                            + (f", {uncompared} not ({why})" if uncompared else ""))
    if m.files and report.log_end_offset is not None and m.files[-1].end_offset >= report.log_end_offset:
        report.problems.append(Problem(KIND, f"the columnar copy holds offsets up to {m.files[-1].end_offset}, past "
                                             f"the log end offset {report.log_end_offset}", file=str(path)))
    known = m.names()
    files = directory / FILES_DIR
    stored = sorted(p.name for p in files.iterdir()) if files.is_dir() else []
    strays = [n for n in stored if n.endswith(PARQUET_SUFFIX) and n not in known]
    if strays:
        report.notes.append(f"columnar: {len(strays)} file(s) no manifest names (left by a crash; removed by the "
                            f"next writer): {', '.join(strays[:3])}")
    published = {f.name for f in m.files}
    shown = {p.name for p in directory.iterdir() if p.suffix == PARQUET_SUFFIX}
    for what, names in (("not published", sorted(shown - published)), ("missing", sorted(published - shown))):
        if names:  # what spark.read.parquet(<partition dir>) would get wrong
            report.problems.append(Problem(KIND, f"a read of the directory sees the wrong files: {len(names)} {what} "
                                                 f"({', '.join(names[:3])}); the partition's next writer puts the "
                                                 "links right", file=str(directory)))


def _check_segment_rows(file: Path, f: ColumnarFile, records: dict[int, tuple[int, int]],
                        contents: dict[int, tuple[bytes, tuple[int, ...]]] | None = None,
                        report: PartitionReport | None = None) -> list[Problem]:
    """The file's offsets rise strictly, each listed segment holds the rows the manifest says, and those equal the
    log's records of that segment where the scrub counted them: as many, and, where it digested them (``contents``),
    the same (:mod:`tiered.scrub.content`), with rows marked aborted exactly where the transaction indexes say (only
    among its transactional batches' when they are not all known: :func:`_aborted_known`)."""
    import numpy as np
    import pyarrow.parquet as pq

    offsets = pq.read_table(file, columns=["offset"]).column("offset").to_numpy()
    if len(offsets) > 1 and not bool(np.all(offsets[1:] > offsets[:-1])):
        at = int(np.argmax(offsets[1:] <= offsets[:-1]))
        return [Problem(KIND, f"offsets do not rise: {offsets[at]} then {offsets[at + 1]} (a duplicate or a row out "
                              "of order)", file=str(file), offset=int(offsets[at + 1]))]
    problems = []
    bases = np.array([s.base_offset for s in f.segments], np.int64)
    ends = np.array([s.end_offset for s in f.segments], np.int64)
    counts = np.searchsorted(offsets, ends, side="right") - np.searchsorted(offsets, bases, side="left")
    for s, count in zip(f.segments, counts.tolist(), strict=True):
        if count != s.rows:
            problems.append(Problem(KIND, f"{count} rows of segment {s.segment_id} ({s.base_offset}-{s.end_offset}), "
                                          f"the manifest says {s.rows}", file=str(file), offset=s.base_offset))
            continue
        found = records.get(s.base_offset)
        if found is not None and found[0] == s.end_offset and found[1] != count:
            problems.append(Problem(KIND, f"{count} rows of segment {s.segment_id} ({s.base_offset}-{s.end_offset}), "
                                          f"but the segment has {found[1]} records", file=str(file),
                                    offset=s.base_offset))
    if problems or not contents:
        return problems
    digested = [s for s in f.segments if s.base_offset in contents and records.get(s.base_offset, (None,))[0] ==
                s.end_offset]
    if digested:
        problems += _check_contents(file, offsets, digested, contents, report)
    return problems


def _aborted_known(base: int, report: PartitionReport | None) -> dict[int, list[tuple[int, int]]] | None:
    """The aborted transactions that may hold records of the segment at ``base`` (producer id -> its (first offset,
    abort marker offset)s): those in the transaction indexes of the segments from it to the log end, when every one of
    them was scanned whole (an abort marker may lie in any later segment); None when one was not."""
    if report is None or report.log_end_offset is None:
        return None
    found: dict[int, list[tuple[int, int]]] = {}
    at = base
    while at < report.log_end_offset:
        scanned, entries = report.segment_records.get(at), report.segment_aborted.get(at)
        if scanned is None or entries is None:
            return None
        for pid, first, last in entries:
            found.setdefault(pid, []).append((first, last))
        at = scanned[0] + 1  # the next segment starts after this one's last offset
    return found


def _check_contents(file: Path, offsets: Any, segments: list[Any],
                    contents: dict[int, tuple[bytes, tuple[int, ...]]],
                    report: PartitionReport | None = None) -> list[Problem]:
    """Each segment's rows against the digest of its records, and its aborted marks against the transaction indexes
    (or, where not all of them are known, against its transactional batches)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tiered.scrub.content import rows_digest

    names = ["offset", "timestamp", "timestampType", "leaderEpoch", "key", "value", "headers", "aborted"]
    table = pq.read_table(file, columns=names)
    stamps = table.column("timestamp").cast(pa.int64())
    columns = {name: (stamps if name == "timestamp" else table.column(name)).to_pylist() for name in names[:-1]}
    aborted = table.column("aborted").to_numpy(zero_copy_only=False)
    problems = []
    for s in segments:
        digest, transactional = contents[s.base_offset]
        lo = int(np.searchsorted(offsets, s.base_offset, side="left"))
        hi = int(np.searchsorted(offsets, s.end_offset, side="right"))
        if rows_digest(columns, lo, hi) != digest:
            problems.append(Problem(KIND, f"the rows of segment {s.segment_id} ({s.base_offset}-{s.end_offset}) are "
                                          "not its records: an offset, timestamp, leader epoch, key, value or header "
                                          "differs", file=str(file), offset=s.base_offset))
            continue
        batches = np.array(transactional, np.int64).reshape(-1, 3)  # base, last offset, producer id
        txns = _aborted_known(s.base_offset, report)
        rows, marks = offsets[lo:hi], aborted[lo:hi].astype(bool)
        if txns is None:
            ranges, why = batches[:, :2], "its record is not in a transactional batch"
        else:  # Kafka's rule, as the keeper's: a batch of an aborted transaction of its producer
            ranges = batches[[any(first <= b <= last for first, last in txns.get(int(pid), ()))
                              for b, _l, pid in batches.tolist()], :2] if len(batches) else batches[:, :2]
            why = "the transaction indexes abort no transaction of its batch"
        i = np.searchsorted(ranges[:, 0], rows, side="right") - 1
        inside = (i >= 0) & (rows <= ranges[np.maximum(i, 0), 1]) if len(ranges) else np.zeros(len(rows), np.bool_)
        wrong = np.flatnonzero(marks & ~inside if txns is None else marks != inside)
        if len(wrong):
            at = int(rows[wrong[0]])
            what = (f"is marked aborted, but {why}" if marks[wrong[0]] else
                    "is not marked aborted, but the transaction indexes abort its batch's transaction")
            problems.append(Problem(KIND, f"row {at} of segment {s.segment_id} {what}", file=str(file), offset=at))
    return problems
