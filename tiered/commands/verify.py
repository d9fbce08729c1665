"""``tiered verify``: scrub data dirs and, with ``--remote``, the remote tier, changing nothing.

``tiered verify [--config F | --log-dirs D] [--remote | --remote-only] [--json] [--topic T]``. What is checked is described in
:mod:`tiered.scrub` (local: :mod:`tiered.scrub.data_dir`; remote: :mod:`tiered.scrub.remote_store`). Nothing is written: no lock,
checkpoint, clean-shutdown marker, cache or directory is created, nothing is recovered (the log engine is never loaded).

Text output: one line per problem (the partition, the file or remote object, the position and offset, the kind
in brackets and what is wrong), notes prefixed ``note:``, a verdict line per partition (``OK`` or ``FAILED``) and
a summary line. A progress bar (on stderr) is shown only when stderr is a terminal and ``--json`` is not given
(so ``tiered verify > report.txt`` or ``| tee`` in a terminal still shows it).

``--json`` prints one document (``"version": 1``)::

    {"version": 1, "ok": bool, "problems": N,
     "summary": {"partitions", "partitions_with_problems", "segments", "batches", "bytes",
                 "remote_segments", "remote_bytes"},
     "data_dirs": [{"path", "clean_shutdown", "problems": [...], "notes": [...]}],
     "remote": null | {"backend", "prefix", "objects", "segments", "problems": [...], "notes": [...]},
     "partitions": [{"partition" ("topic-N"), "topic", "partition_number", "topic_id", "data_dir", "ok",
                     "segments", "batches", "bytes", "log_start_offset", "local_start_offset", "log_end_offset",
                     "remote_segments", "remote_bytes", "remote_end_offset", "problems": [...], "notes": [...]}]}

and each problem is ``{"kind", "file", "object", "position", "offset", "message"}`` (``kind`` one of
``tiered.scrub.report.PROBLEM_KINDS``; ``file`` a local path or null, ``object`` a remote key or null).

Where the configuration gives the columnar copies a place (``remote.log.columnar.dir``, or beside the
local-directory tier), they are checked too (:mod:`tiered.columnar.scrub`; kind ``columnar``).

Exit codes: 0 nothing wrong, 1 problems found (or a data dir named by the config file is missing), 2 usage (bad
arguments, a missing config file, a data dir given with ``--log-dirs`` that does not exist, ``--remote`` without
a remote tier in the configuration).
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import sys
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiered.commands._common import UsageError, check_topic_name, check_typed_data_dirs, load_config

if TYPE_CHECKING:
    from tiered.scrub.remote_store import RemoteReport
    from tiered.scrub.report import DataDirReport, PartitionReport, Problem


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("Exit codes: 0 nothing wrong, 1 problems found, 2 usage. Text: one line per problem (file or "
                     "remote object, position, offset, [kind], what is wrong), a verdict per partition, a summary. "
                     "--json: {version, ok, problems, summary, data_dirs, remote, partitions[{..., problems[{kind, "
                     "file, object, position, offset, message}]}]}.")
    parser.add_argument("--remote", action="store_true",
                        help="also scrub the remote tier named by the configuration (metadata, objects, batches)")
    parser.add_argument("--remote-only", action="store_true",
                        help="scrub only the remote tier (e.g. from a machine without the data dirs)")
    parser.add_argument("--topic", "-t", help="only the partitions of this topic")
    parser.add_argument("--json", action="store_true", help="print one JSON document (see the module docs)")


def run(args: argparse.Namespace) -> int:
    from local.errors import ConfigError
    from local.filenames import FEATURES_FILENAME

    if args.topic is not None:
        check_topic_name(args.topic)
    config_file = getattr(args, "config", None)
    if config_file and not Path(config_file).is_file():
        raise UsageError(f"no config file {config_file}")
    try:
        config = load_config(args)
    except ConfigError as exc:
        if not str(getattr(exc, "path", "") or "").endswith(FEATURES_FILENAME):
            raise
        # A damaged feature file is damage to report (the scrub names it), not a usage error: scrub all the same.
        config = load_config(args, large_index_enabled=False)
    dirs = [] if args.remote_only else [Path(d) for d in config.log_dirs]
    if not args.remote_only:
        check_typed_data_dirs(args, config)
    rsm = _remote_tier(config) if args.remote or args.remote_only else None
    remote_by_default = bool(config.topic_config().remote_storage_enable)
    try:
        if rsm is not None and rsm.object_store is not None:
            rsm.object_store.check_access()  # an unreachable endpoint, a missing bucket or bad credentials: at once
        with _progress(enabled=not args.json and sys.stderr.isatty()) as progress:
            result = scrub(dirs, rsm, topic=args.topic, progress=progress, remote_by_default=remote_by_default,
                           content=_columnar_partitions(config))
        _scrub_columnar(config, result, args.topic, rsm is not None)
    finally:
        if rsm is not None:
            rsm.close()
    if args.topic is not None and not result.partitions:  # a typo'd topic is not "OK, 0 partitions" (status: exit 1)
        where = ", ".join([*map(str, dirs), *([] if rsm is None else ["the remote tier"])])
        print(f"tiered verify: no topic {args.topic!r} in {where or 'nothing scanned'}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print_text(result)
    return 0 if result.ok else 1


def _columnar_partitions(config: Any) -> set[tuple[str, int]]:
    """The partitions with a columnar copy (a manifest) where the configuration keeps them: their segments' records
    are compared with the copy's rows."""
    from tiered.columnar.location import columnar_root
    from tiered.columnar.manifest import MANIFEST_NAME

    root = columnar_root(config)
    if root is None or not root.is_dir():
        return set()
    out = set()
    for directory in root.iterdir():
        name, _, number = directory.name.rpartition("-")
        if name and number.isdigit() and (directory / MANIFEST_NAME).exists():
            out.add((name, int(number)))
    return out


def _scrub_columnar(config: Any, result: ScrubResult, topic: str | None, remote_scanned: bool) -> None:
    """The columnar copies (tiered.columnar.scrub), where the configuration gives them a place."""
    from tiered.columnar.location import columnar_root, root_problem

    root = columnar_root(config)
    if root is None:
        return
    if not root.is_dir():
        problem = root_problem(root)
        if problem is not None and _any_columnar_topic(config, result):
            from tiered.scrub.report import Problem

            result.problems.append((str(root), Problem(
                "columnar", f"the columnar copies cannot be kept there (remote.log.columnar.dir): {problem}",
                file=str(root))))
        return
    from tiered.columnar.location import MISSING_PYARROW, pyarrow_missing

    if pyarrow_missing():  # the copies cannot be read here; the rest of the verdict stands
        print(f"tiered verify: the columnar copies in {root} are not checked: {MISSING_PYARROW}", file=sys.stderr)
        return
    from tiered.columnar.scrub import scrub_columnar

    scrub_columnar(root, result.partitions, topic, remote_scanned)
    result.partitions.sort(key=lambda p: (p.topic, p.partition, p.data_dir or "", p.topic_id or ""))


def _remote_tier(config: Any) -> Any:
    """The configured plugin, loaded without creating anything (a local-directory tier's missing dir is an error,
    not a directory to make)."""
    from tiered.composition import build_remote_storage_manager
    from tiered.errors import TieredStorageError

    if not config.remote_log_storage_system_enable:
        raise UsageError("--remote needs the remote tier's configuration: remote.log.storage.system.enable=true, "
                         "remote.log.storage.manager.class.name and rsm.config.* (pass --config FILE)")
    directory = config.rsm_config.get("dir")
    if directory and not Path(directory).is_dir():
        raise UsageError(f"the remote tier's directory {directory} (rsm.config.dir) does not exist")
    try:
        rsm = build_remote_storage_manager(config)
    except (TieredStorageError, ValueError) as exc:
        raise UsageError(f"cannot load the remote tier: {exc}") from exc
    if rsm.object_store is None:
        rsm.close()
        raise UsageError(f"{type(rsm).__qualname__} is not built on an object store (listing, ranged reads): its "
                         "remote tier cannot be verified")
    return rsm


# ------------------------------------------------------------------------------------------------------------


def _any_columnar_topic(config: Any, result: ScrubResult) -> bool:
    """Whether the broker default or a partition's topic overrides turn the columnar copy on."""
    from local.errors import ConfigError
    from local.filenames import partition_dir_name
    from local.manager import TOPIC_CONFIG_FILENAME
    from local.properties import read_properties

    if config.topic_config().remote_log_columnar_enable:
        return True
    for p in result.partitions:
        if p.data_dir is None:  # in the remote tier only: no overrides here
            continue
        overrides = Path(p.data_dir) / partition_dir_name(p.topic, p.partition) / TOPIC_CONFIG_FILENAME
        try:
            if read_properties(overrides).get("remote.log.columnar.enable", "").strip().lower() == "true":
                return True
        except (OSError, ValueError, ConfigError):  # (a damaged overrides file is reported on its own)
            continue
    return False


class ScrubResult:
    """Everything one run found: per data dir, per partition, the remote tier's own report."""

    def __init__(self) -> None:
        self.data_dirs: list[DataDirReport] = []
        self.partitions: list[PartitionReport] = []
        self.remote: RemoteReport | None = None
        self.problems: list[tuple[str, Problem]] = []  # problems outside any partition: (where, problem)

    @property
    def problem_count(self) -> int:
        return len(self.problems) + sum(len(p.problems) for p in self.partitions)

    @property
    def ok(self) -> bool:
        return self.problem_count == 0

    def to_json(self) -> dict[str, Any]:
        parts = self.partitions
        return {
            "version": 1, "ok": self.ok, "problems": self.problem_count,
            "summary": {
                "partitions": len(parts), "partitions_with_problems": sum(1 for p in parts if p.problems),
                "segments": sum(p.segments for p in parts), "batches": sum(p.batches for p in parts),
                "bytes": sum(p.bytes for p in parts), "remote_segments": sum(p.remote_segments for p in parts),
                "remote_bytes": sum(p.remote_bytes for p in parts),
            },
            "data_dirs": [d.to_json() for d in self.data_dirs],
            "remote": self.remote.to_json() if self.remote is not None else None,
            "partitions": [p.to_json() for p in parts],
        }


def scrub(dirs: list[Path], rsm: Any, *, topic: str | None = None, progress: Any = None,
          remote_by_default: bool = False, content: Collection[tuple[str, int]] = ()) -> ScrubResult:
    """Scrub ``dirs`` and, when ``rsm`` is given, its remote tier (``remote_by_default``: the broker's default of
    the topic key ``remote.storage.enable``, for partitions without an override); the segments of the partitions in
    ``content`` (those with a columnar copy) have their records' contents digested too."""
    from tiered.scrub.data_dir import log_bytes, partition_dirs, scrub_data_dir_files
    from tiered.scrub.data_dir import scrub_partition as scrub_local_partition
    from tiered.scrub.report import DataDirReport, Problem

    progress = progress or _NoProgress()
    result = ScrubResult()
    local_scans: dict[int, Callable[[], PartitionReport]] = {}  # id(a partition's report) -> its local scan again
    present = [d for d in dirs if d.is_dir()]
    progress.add_total(sum(log_bytes(d) for d in present))
    for d in dirs:
        if d not in present:
            report = DataDirReport(str(d))
            report.problems.append(Problem("missing_dir", "the data dir does not exist" if not d.exists()
                                           else "the data dir is not a directory", file=str(d)))
            result.data_dirs.append(report)
            result.problems += [(str(d), p) for p in report.problems]
            continue
        dir_report = scrub_data_dir_files(d)
        result.data_dirs.append(dir_report)
        result.problems += [(str(d), p) for p in dir_report.problems]
        scanned: list[tuple[PartitionReport, Callable[[], PartitionReport]]] = []
        for pdir, name, number in partition_dirs(d):
            if topic is None or name == topic:
                progress.describe(pdir.name)
                scanned.append((scrub_local_partition(pdir, name, number, dir_report, progress=progress.advance,
                                                      check_content=(name, number) in content),
                                functools.partial(scrub_local_partition, pdir, name, number, dir_report,
                                                  check_content=(name, number) in content)))
        reports = _read_again(scanned)
        result.partitions += reports
        local_scans.update({id(report): again for report, (_, again) in zip(reports, scanned, strict=True)})
    if rsm is not None:
        _scrub_remote(rsm, result, topic, progress, remote_by_default, dirs_read=bool(dirs), content=content,
                      local_scans=local_scans)
    result.partitions.sort(key=lambda p: (p.topic, p.partition, p.data_dir or "", p.topic_id or ""))
    if len({p.name for p in result.partitions}) < len(result.partitions):
        _note_duplicates(result.partitions)
    return result


READ_AGAIN = 2  # how many times more a partition whose scan found problems is scanned
READ_AGAIN_PAUSE_S = 0.25


def _read_again(scanned: list[tuple[PartitionReport, Callable[[], PartitionReport]]]) -> list[PartitionReport]:
    """The reports of ``scanned`` (each with the scan that made it), those with problems scanned again before their
    problems are reported (:data:`READ_AGAIN` times at most, one pause before each round for all of them): a writer
    beside verify (``tiered run``) deletes producer snapshots, trims indexes and rolls segments while they are read,
    and a scan that met such a moment called the writer's normal work damage (a helper's pass: verify FAILED in 6 of
    7 runs beside a rolling ``tiered run``, OK once it stopped). A problem is reported when every scan of its
    partition finds it; the last scan is the report."""
    def found(report: PartitionReport) -> set[str]:
        return {json.dumps(problem.to_json(), sort_keys=True) for problem in report.problems}

    reports = [report for report, _ in scanned]
    history: dict[int, list[PartitionReport]] = {i: [r] for i, r in enumerate(reports) if r.problems}
    for _ in range(READ_AGAIN):
        if not history:
            break
        time.sleep(READ_AGAIN_PAUSE_S)  # (a roll or a retention pass in progress ends meanwhile)
        for i in list(history):
            again = scanned[i][1]()
            reports[i] = again
            if not again.problems or found(again) == found(history[i][-1]):
                del history[i]  # gone (a moment of the writer's), or the same twice (damage): as found now
            else:
                history[i].append(again)
    for scans in history.values():  # different each time: what every scan found
        every = set.intersection(*(found(report) for report in scans))
        last = scans[-1]
        changing = len(found(last) - every)
        last.problems = [problem for problem in last.problems if json.dumps(problem.to_json(), sort_keys=True) in every]
        last.notes.append(f"{changing} problem(s) not found by every read of the partition are left out: its files "
                          "changed while they were read (a writer such as tiered run beside verify)")
    return reports


def _scrub_remote(rsm: Any, result: ScrubResult, topic: str | None, progress: Any, remote_by_default: bool,
                  dirs_read: bool = True, content: Collection[tuple[str, int]] = (),
                  local_scans: dict[int, Callable[[], PartitionReport]] | None = None) -> None:
    """The remote tier's partitions, each into its data dir's report (or one of its own). A partition whose scan
    finds problems is scanned again as local ones are (:func:`_read_again`), from a listing of its own, its local
    partition with it: beside a running ``tiered run``, the one listing of the whole tier at the start, made a page
    at a time, could hold a copy's FINISHED event and not its objects, a copy under way, or a copy of a segment rolled
    after the local scan read the log end (a helper's pass: FAILED in 4 of 10 runs, missing objects included, on a
    healthy tier)."""
    from tiered.errors import TieredStorageError
    from tiered.scrub.remote_store import RemoteScrub, check_tier_gap, topic_id_text
    from tiered.scrub.report import PartitionReport, Problem

    remote = RemoteScrub(rsm, progress=progress.advance, add_total=progress.add_total)
    result.remote = remote.report
    try:
        groups = remote.discover()
    except (TieredStorageError, OSError) as exc:
        remote.report.problems.append(Problem("unreadable", f"cannot list the remote tier: {exc}"))
        result.problems += [("remote tier", p) for p in remote.report.problems]
        return
    local_scans = local_scans or {}

    def scan(report: PartitionReport, tip: Any, group: Any) -> PartitionReport:
        tid = topic_id_text(tip.topic_id)
        if report.topic_id is None:
            report.topic_id = tid
        report.check_content = (tip.topic, tip.partition) in content
        latest = remote.load_metadata(group, report)
        owners = remote.load_owners(group, report)
        remote.scrub_partition(group, latest, report, owners)
        if report.data_dir is not None and owners:
            _check_claim(report, owners[-1], latest)
        if report.data_dir is not None and not any(p.kind == "not_owner" for p in report.problems):
            # (a former owner's records differ from the owner's)
            _check_same_records(report, latest, owners, remote.recorded_checksums)
        return report

    def remote_only(tip: Any) -> PartitionReport:
        report = PartitionReport(tip.topic, tip.partition, topic_id=topic_id_text(tip.topic_id))
        report.notes.append("in the remote tier only (no data dir holds this partition with this topic id)"
                            if dirs_read else "in the remote tier (--remote-only: the data dirs were not read)")
        return report

    local = {(p.topic, p.partition): p for p in result.partitions}
    scanned: list[tuple[PartitionReport, Callable[[], PartitionReport]]] = []
    for tip, group in sorted(groups.items(), key=lambda kv: (kv[0].topic, kv[0].partition, str(kv[0].topic_id))):
        if topic is not None and tip.topic != topic:
            continue
        tid = topic_id_text(tip.topic_id)
        report = local.get((tip.topic, tip.partition))
        if report is None or (report.topic_id is not None and report.topic_id != tid):
            report = remote_only(tip)
            result.partitions.append(report)
            again_local: Callable[[], PartitionReport] = functools.partial(remote_only, tip)
        else:
            again_local = local_scans.get(id(report), functools.partial(copy.deepcopy, copy.deepcopy(report)))
        progress.describe(f"{tip.topic}-{tip.partition} (remote)")
        scan(report, tip, group)

        def again(tip: Any = tip, again_local: Callable[[], PartitionReport] = again_local) -> PartitionReport:
            return scan(again_local(), tip, remote.relist(tip))

        scanned.append((report, again))
    finals = _read_again(scanned)
    for (first, _), final in zip(scanned, finals, strict=True):
        if final is not first:
            at = next(i for i, p in enumerate(result.partitions) if p is first)
            result.partitions[at] = final
            if local.get((final.topic, final.partition)) is first:
                local[(final.topic, final.partition)] = final
    remote.report.segments = sum(p.remote_segments for p in finals)  # (the scans again counted theirs too)
    for report in local.values():
        enabled = report.remote_storage_enable if report.remote_storage_enable is not None else remote_by_default
        if enabled or report.remote_segments:
            # (a topic without the remote tier may carry a stale log start offset: the loader raises it to the
            # first segment's base offset, so a gap there is not data lost)
            check_tier_gap(report)
    result.problems += [("remote tier", p) for p in remote.report.problems]


def _check_claim(report: Any, owner: Any, latest: dict[str, Any]) -> None:
    """A data dir whose claim on the partition's remote data is not the newest owner record's has lost it; one that
    holds the claim but ends before the copies made under it (``latest``: the segments' metadata, copies under way
    included) is an older copy of the data dir that made them."""
    from local.errors import KafkaStorageError
    from local.remote_state import REMOTE_LOG_STATE_FILENAME, RemoteLogStateFile
    from tiered.ownership import behind
    from tiered.scrub.report import Problem

    pdir = Path(report.data_dir) / f"{report.topic}-{report.partition}"
    try:
        state = RemoteLogStateFile(pdir).read()
    except KafkaStorageError:
        return  # the local scrub reports the file
    newest = (owner.owner_epoch, owner.owner_id)
    # (a pending claim that landed is this data dir's own: its next pass remembers it as made)
    if newest != (state.owner_epoch, state.owner_id) and newest != (state.pending_owner_epoch, state.pending_owner_id):
        mine = f"owner epoch {state.owner_epoch}" if state.claimed else "no claim"
        report.problems.append(Problem(
            "not_owner", f"this data dir ({mine}) does not own the partition's remote data: the store's current owner "
            f"is {owner.describe()}; it copies and deletes nothing there", file=str(pdir / REMOTE_LOG_STATE_FILENAME)))
    elif report.log_end_offset is not None:
        why = behind(pdir.name, latest.values(), owner.lineage, report.log_end_offset)
        if why is not None:
            report.problems.append(Problem("behind_remote", why.split(": ", 1)[1], file=str(pdir),
                                           offset=report.log_end_offset))


class _LocalSegmentFile:
    """A closed local segment's .log file, as :func:`tiered.ownership.segment_differs` reads one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = path.stat().st_size
        self.log = self

    def read(self, position: int, size: int) -> bytes:
        with open(self.path, "rb") as f:
            f.seek(position)
            return f.read(size)


def _check_same_records(report: Any, latest: dict[str, Any], owners: list[Any],
                        recorded_checksums: Callable[[Any], Any]) -> None:
    """A remote segment of the owner's lineage that overlaps this data dir's closed local segments must hold their
    bytes (start, size, first and last checksum chunks): else another data dir writes the partition's remote data
    (a copy of this one: tiered.ownership fences it at its next pass). ``recorded_checksums``: a segment's checksums
    as the remote scrub read them (a lookup in the store per segment would list and read the partition's every
    event: quadratic)."""
    from tiered.ownership import segment_differs, within_lineage
    from tiered.rsm import RemoteLogSegmentState
    from tiered.scrub.report import Problem

    pdir = Path(report.data_dir) / f"{report.topic}-{report.partition}"
    logs = sorted((int(p.name[:20]), p) for p in pdir.glob("*.log") if p.name[:20].isdigit())
    if len(logs) < 2:
        return
    local = dict(logs[:-1])
    first, last = logs[0][0], logs[-1][0] - 1
    lineage = owners[-1].lineage if owners else ()
    for md in sorted(latest.values(), key=lambda m: m.start_offset):
        if md.state is not RemoteLogSegmentState.COPY_SEGMENT_FINISHED or not within_lineage(md, lineage):
            continue
        if md.end_offset < first or md.start_offset > last:
            continue
        path = local.get(md.start_offset)
        if path is not None and any(p.file == str(path) for p in report.problems):
            continue  # a damaged local segment: its own problem says why it differs
        try:
            why = segment_differs(_LocalSegmentFile(path) if path is not None else None, md, recorded_checksums(md))
        except OSError as exc:
            why = f"cannot read {path}: {exc}"
        if why is not None:
            report.problems.append(Problem(
                "diverged", f"remote segment {md.remote_log_segment_id.id} (offsets {md.start_offset}-{md.end_offset}) "
                f"holds other records than this data dir's at those offsets ({why}): another data dir writes this "
                "partition's remote data under this one's claim (a copy of this data dir?)",
                file=str(path) if path is not None else str(pdir), offset=md.start_offset))
            return  # (one is enough: the offsets after it are the other data dir's too)


def _note_duplicates(partitions: list[PartitionReport]) -> None:
    seen: dict[str, PartitionReport] = {}
    for p in partitions:
        if p.name in seen and p.data_dir and seen[p.name].data_dir and p.topic_id == seen[p.name].topic_id:
            p.notes.append(f"also in data dir {seen[p.name].data_dir}")
        seen.setdefault(p.name, p)


# ------------------------------------------------------------------------------------------------------------


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def print_text(result: ScrubResult) -> None:
    out = sys.stdout
    for where, problem in result.problems:
        out.write(f"{where}: {problem.line()}\n")
    for d in result.data_dirs:
        for note in d.notes:
            out.write(f"{d.path}: note: {note}\n")
    if result.remote is not None:
        for note in result.remote.notes:
            out.write(f"remote tier: note: {note}\n")
    for p in result.partitions:
        for problem in p.problems:
            out.write(f"{p.name}: {problem.line()}\n")
        for note in p.notes:
            out.write(f"{p.name}: note: {note}\n")
        detail = f"{p.segments} segment(s), {p.batches} batch(es), {_size(p.bytes)}"
        if p.remote_segments or result.remote is not None:
            detail += f"; remote: {p.remote_segments} segment(s), {_size(p.remote_bytes)}"
        where = f" in {p.data_dir}" if p.data_dir else " (remote tier)"
        verdict = "OK" if not p.problems else f"FAILED ({len(p.problems)} problem(s))"
        out.write(f"{p.name}{where}: {verdict}: {detail}\n")
    parts = result.partitions
    bad = sum(1 for p in parts if p.problems)
    scope = f"{len(result.data_dirs)} data dir(s)" + (" and the remote tier" if result.remote is not None else "")
    verdict = "OK" if result.ok else "FAILED"
    out.write(
        f"verify {verdict}: {scope}, {len(parts)} partition(s), {bad} with problems, {result.problem_count} "
        f"problem(s); {sum(p.segments for p in parts)} local segment(s), {sum(p.batches for p in parts)} batch(es), "
        f"{_size(sum(p.bytes for p in parts))}; {sum(p.remote_segments for p in parts)} remote segment(s), "
        f"{_size(sum(p.remote_bytes for p in parts))}\n"
    )


# ------------------------------------------------------------------------------------------------------------


class _NoProgress:
    def add_total(self, n: int) -> None:
        pass

    def advance(self, n: int) -> None:
        pass

    def describe(self, text: str) -> None:
        pass

    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class _RichProgress(_NoProgress):
    """A bytes progress bar on stderr (rich), removed when done."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        self._progress = Progress(TextColumn("verify {task.description}"), BarColumn(), DownloadColumn(),
                                  TimeRemainingColumn(), console=Console(stderr=True), transient=True)
        self._task = self._progress.add_task("", total=0)

    def add_total(self, n: int) -> None:
        total = self._progress.tasks[0].total or 0
        self._progress.update(self._task, total=total + n)

    def advance(self, n: int) -> None:
        self._progress.advance(self._task, n)

    def describe(self, text: str) -> None:
        self._progress.update(self._task, description=text)

    def __enter__(self) -> _RichProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()


def _progress(enabled: bool) -> _NoProgress:
    return _RichProgress() if enabled else _NoProgress()
