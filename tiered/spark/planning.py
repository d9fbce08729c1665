"""Planning a read on the driver: which byte ranges of which segments, local and remote, hold the records asked for.

Only metadata is read: each partition is opened read-only (``LogManager(config, read_only=True)``: nothing is
written to the data dir) for its offsets (log start, local log start, high watermark, last stable offset) and its
local segments (base offsets, sizes, offset indexes); the remote segments come from the remote tier's metadata
store, which lives in the bucket. The remote tier of the plans is kept by the process between plans
(:func:`planning_tier`: Spark keeps its planner process for the next query), each partition's metadata listed
again at every plan. A remote segment is used for the offsets below the local log start (with
``tiers=both``); a segment larger than ``maxBytesPerPartition`` is cut at batch boundaries taken from its offset
index, and consecutive pieces of a partition that together read no more than that are one input partition
(:func:`input_partitions`). Each :class:`Piece` carries everything an executor needs (the broker properties, the
segment's file path or its remote metadata, the byte range and the offsets wanted, the aborted transactions that
touch it, the pushed filters): nothing on the executor depends on the driver's state.

With ``columnarCopy=true`` (the default) and a columnar copy of the topic (:mod:`tiered.columnar`), the offsets of
``[start, end)`` that the partition's manifest lists (of the same topic id as the log; not with ``tiers=local``)
are planned as one piece per Parquet file (:attr:`Piece.parquet_path`), the offsets before and after them from the
log as above: the two meet at the files' first and next offsets, so each offset is planned once. Only the manifest
is trusted (a file being written or retired is never in it). Batch and streaming reads plan alike.
"""

from __future__ import annotations

import atexit
import bisect
import dataclasses
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from local.errors import OffsetOutOfRangeError
from local.filenames import LOST_OFFSETS_FILENAME
from local.scratch import ScratchDir
from tiered.errors import TieredStorageError
from tiered.spark.kept import Kept, TierInDir
from tiered.spark.options import EARLIEST, LATEST, SourceOptions, SparkSourceOptionError

if TYPE_CHECKING:
    from local.log import Log

logger = logging.getLogger(__name__)
FilterSpec = tuple[str, str, Any]  # (column, op, value): op in = < <= > >= in; timestamps in microseconds


@dataclass
class Bounds:
    """What pushed filters allow: partitions, an offset range [lo, hi), a timestamp floor (ms), and the filters
    themselves (applied exactly, record by record, on the executor)."""

    partitions: set[int] | None = None
    offset_lo: int = 0
    offset_hi: int = 2**63 - 1
    timestamp_lo_ms: int | None = None
    filters: list[FilterSpec] = field(default_factory=list)


@dataclass
class Piece:
    """One input partition: a byte range of one segment (local file or remote object), or the offsets
    ``[from_offset, until_offset)`` of one Parquet file of the columnar copy (``parquet_path``)."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    start_position: int
    end_position: int | None  # exclusive; None: to the end of the segment
    local_path: str | None = None
    remote_metadata: bytes | None = None  # tiered.metadata.encode_metadata
    props: dict[str, str] = field(default_factory=dict)
    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # (producer id, first offset, last offset)
    read_committed: bool = False
    fail_on_data_loss: bool = True
    cache_dir: str = ""
    filters: list[FilterSpec] = field(default_factory=list)
    timestamp_lo_ms: int | None = None
    parquet_path: str | None = None  # a file of the columnar copy (then no byte range: the offsets say what to read)
    topic_id: str | None = None  # a Parquet piece's: where its file is gone, the worker reads the log's remote segments

    @property
    def description(self) -> str:
        where = (self.parquet_path if self.parquet_path is not None else self.local_path
                 if self.local_path is not None else "remote segment")
        return f"{self.topic}-{self.partition} offsets [{self.from_offset}, {self.until_offset}) in {where}"


class SparkSourceDataLossError(OffsetOutOfRangeError):
    """Offsets asked for are gone (retention) and failOnDataLoss is true."""


class ColumnarFileGoneError(TieredStorageError, FileNotFoundError):
    """A planned Parquet file of the columnar copy is no longer there (retired, then deleted, since the plan)."""


def _metadata_tier(config: Any, cache_root: Path | None = None) -> Any:
    """The remote tier of a planning manager: no segment cache (planning reads metadata and indexes; a rare
    remote read, as an offset for a timestamp, goes to the store)."""
    from tiered.composition import build_remote_tier

    return build_remote_tier(config, cache_root, segment_cache=False)


MAX_PLANNING_TIERS = 4  # kept per process (a test session plans over many data dirs): the least recent is closed


_planning_tiers: Kept[tuple[int, tuple[tuple[str, str], ...], str], TierInDir] = Kept(
    lambda: MAX_PLANNING_TIERS, TierInDir.close)
_unusable_cache_dirs: set[str] = set()  # warned of once


@contextmanager
def planning_tier(props: dict[str, str], cache_dir: str) -> Iterator[Any | None]:
    """The planning remote tier (:func:`_metadata_tier`) this process keeps for ``props``, built at its first plan,
    its index cache in a directory of this process under ``cache_dir/index`` (removed when the tier is closed: at
    exit, or when :data:`MAX_PLANNING_TIERS` others were used since and no plan holds it). None where there is no
    remote tier, or its metadata manager is not :class:`tiered.metadata.RemoteLogMetadataStore` (only that one can
    be listed again: :func:`refresh_remote_metadata`): a plan then builds a tier of its own.

    Spark runs a read's planning in a Python worker it keeps for the next query (and a streaming query plans every
    micro-batch): building the tier again for each plan (its plugin, its index cache) and reading and decoding every
    metadata event object of each partition again cost more than the rest of the plan, and over S3 one GET per
    event. A kept tier lists each partition's events again at each plan and reads only the new ones."""
    from local import LogConfig

    config = LogConfig.from_properties(props)
    if not config.remote_log_storage_system_enable:
        yield None
        return
    key = (os.getpid(), tuple(sorted(props.items())), cache_dir)  # a forked child builds its own
    with _planning_tiers.use(key, lambda: _build_planning_tier(config, cache_dir)) as kept:
        yield None if kept is None else kept.tier


def process_index_dir(cache_dir: str, role: str) -> ScratchDir:
    """A new directory of this process (``<role>-*``) under ``cache_dir/index``, for the index cache it owns (an
    executor's, a planner's); OSError where it cannot be made. It is a :class:`local.scratch.ScratchDir`, locked
    while this process lives: a process Spark kills (executors and planners are, at a session's end) leaves its
    directory behind, and the next process of the same role on any machine sharing ``cache_dir`` sweeps it, while
    those of live processes, in other PID namespaces too, are left alone (the lock is the kernel's, not a PID)."""
    index = Path(cache_dir) / "index"
    index.mkdir(parents=True, exist_ok=True)
    return ScratchDir(f"{role}-", root=index)


def _build_planning_tier(config: Any, cache_dir: str) -> TierInDir | None:
    from tiered.metadata import RemoteLogMetadataStore

    try:
        own = process_index_dir(cache_dir, "planner")
    except OSError as exc:  # a read of local segments needs no cacheDir: plan as before, each plan its own tier
        if cache_dir not in _unusable_cache_dirs:
            _unusable_cache_dirs.add(cache_dir)
            logger.warning("cacheDir %s: cannot keep the planning tier's index cache in %s (%s); each plan builds "
                           "its own", cache_dir, Path(cache_dir) / "index", exc)
        return None
    try:
        tier = _metadata_tier(config, own.path)
    except BaseException:
        own.cleanup()
        raise
    kept = TierInDir(tier, own)
    if not isinstance(getattr(tier, "metadata", None), RemoteLogMetadataStore):
        kept.close()
        return None
    return kept


def _close_planning_tiers() -> None:
    """At exit: close every kept tier (and remove its directory)."""
    _planning_tiers.close_all()


atexit.register(_close_planning_tiers)


def refresh_remote_metadata(log: Log) -> None:
    """List the remote metadata of ``log``'s partition again (a kept planning tier's view is of its last plan)."""
    from tiered.metadata import RemoteLogMetadataStore

    rlm: Any = log.remote_tier
    metadata = getattr(rlm, "metadata", None)
    if isinstance(metadata, RemoteLogMetadataStore) and log.topic_id is not None:  # none: no remote segments
        metadata.load(rlm.topic_id_partition(log))


@contextmanager
def open_read_only(props: dict[str, str], cache_dir: str | None = None) -> Iterator[Any]:
    """The data dirs of ``props`` open read-only (nothing is written to them), with a remote tier for metadata
    (:func:`_metadata_tier`), closed on exit. With ``cache_dir``, the tier is the one this process keeps
    (:func:`planning_tier`): call :func:`refresh_remote_metadata` for each log opened before its remote segments
    are read."""
    from local import LogConfig
    from tiered.composition import open_log_manager

    config = LogConfig.from_properties(props)
    with ExitStack() as stack:
        tier = stack.enter_context(planning_tier(props, cache_dir)) if cache_dir is not None else None
        if tier is not None:
            manager = open_log_manager(config, start_scheduler=False, read_only=True, remote_tier=tier,
                                       owns_remote_tier=False)
        else:
            manager = open_log_manager(config, start_scheduler=False, read_only=True, remote_tier_factory=_metadata_tier)
        try:
            yield manager
        finally:
            manager.close()


def _resolve(spec: int | dict[str, dict[int, int]], topic: str, partition: int, default: int) -> int:
    if isinstance(spec, int):
        return spec
    return spec.get(topic, {}).get(partition, default)


def check_subscription(opts: SourceOptions, wanted: list[tuple[str, int]]) -> None:
    """Refuse a read whose topics are not there: a topic of ``topics`` without partitions, a ``topicPattern`` that
    matches no topic, a topic or partition of ``startingOffsets``/``endingOffsets`` that the read does not include
    (``wanted``: the partitions it matched)."""
    where = opts.props.get("log.dirs", opts.props.get("log.dir"))
    have: dict[str, list[int]] = {}
    for topic, partition in sorted(wanted):
        have.setdefault(topic, []).append(partition)
    if opts.topics is not None:
        missing = [t for t in opts.topics if t not in have]
        if missing:
            raise SparkSourceOptionError(f"no partition of topic(s) {', '.join(missing)} in {where}")
    elif not have:
        raise SparkSourceOptionError(f"topicPattern={opts.topic_pattern!r} matches no topic in {where}")
    for name, spec in (("startingOffsets", opts.starting), ("endingOffsets", opts.ending)):
        if isinstance(spec, int):
            continue
        for topic, parts in spec.items():
            if topic not in have:
                raise SparkSourceOptionError(
                    f"{name} names topic {topic}, which this read does not include (it reads {', '.join(have)})")
            unknown = sorted(set(parts) - set(have[topic]))
            if unknown:
                raise SparkSourceOptionError(
                    f"{name} names partition {topic}-{unknown[0]}, which does not exist ({topic} has partitions "
                    f"{_ranges(have[topic])})")


def _ranges(numbers: list[int]) -> str:
    """``0-3, 7``: sorted numbers as ranges."""
    groups: list[list[int]] = []
    for n in numbers:
        if groups and n == groups[-1][-1] + 1:
            groups[-1].append(n)
        else:
            groups.append([n])
    return ", ".join(str(g[0]) if len(g) == 1 else f"{g[0]}-{g[-1]}" for g in groups)


def plan(opts: SourceOptions, bounds: Bounds | None = None, check: bool = True) -> list[Piece]:
    """Every input partition of a batch read (see the module docstring); ``check``: refuse a subscription that
    does not match the data dirs (:func:`check_subscription`)."""
    bounds = bounds or Bounds()
    pieces: list[Piece] = []
    with open_read_only(opts.props, opts.cache_dir) as manager:
        wanted = sorted(tp for tp in manager.partitions() if opts.topic_matches(tp[0]))
        if check:
            check_subscription(opts, wanted)
        root = None
        if opts.columnar_copy and opts.tiers != "local":
            from tiered.columnar.location import columnar_root

            root = columnar_root(manager.config)
        for topic, partition in wanted:
            if bounds.partitions is not None and partition not in bounds.partitions:
                continue
            if not all(_passes(partition, op, value) for column, op, value in bounds.filters if column == "partition"):
                continue
            log = manager.get_log(topic, partition)
            if log is None:
                continue
            refresh_remote_metadata(log)
            pieces.extend(_plan_partition(log, topic, partition, opts, bounds, root))
    return pieces


MIN_SPLIT_BYTES = 4 * 1024 * 1024  # minPartitions cuts no input partition smaller (Spark's openCostInBytes)


def piece_bytes(piece: Piece) -> int | None:
    """The bytes ``piece`` reads, where the plan knows them (a byte range of a segment); None for a file of the
    columnar copy."""
    if piece.parquet_path is not None or piece.end_position is None:
        return None
    return piece.end_position - piece.start_position


def pack(pieces: list[Piece], max_bytes: int) -> list[list[Piece]]:
    """``pieces`` (in plan order) grouped into input partitions: consecutive pieces of one topic partition while
    together they read at most ``max_bytes``. Where segments are small this makes fewer, larger tasks, as Spark's
    file sources pack small files: each task costs Spark a round trip to a Python worker, worth tens of milliseconds
    (bench/RESULTS.md). A piece of unknown size (a file of the columnar copy) is a group of its own."""
    groups: list[list[Piece]] = []
    room = -1  # the bytes the last group can still take; -1: none
    for piece in pieces:
        n = piece_bytes(piece)
        last = groups[-1] if groups else None
        if (last is not None and n is not None and n <= room
                and (last[-1].topic, last[-1].partition) == (piece.topic, piece.partition)):
            last.append(piece)
            room -= n
        else:
            groups.append([piece])
            room = max_bytes - n if n is not None else -1
    return groups


def input_partitions(opts: SourceOptions, bounds: Bounds | None = None, check: bool = True) -> list[list[Piece]]:
    """The input partitions of a read, each a list of pieces read in one task: :func:`plan`'s pieces packed by
    :func:`pack` up to ``maxBytesPerPartition``. With ``minPartitions``, where that makes fewer, the read is planned
    again in smaller parts (the total over ``minPartitions``, at least :data:`MIN_SPLIT_BYTES`; segments split at
    batch boundaries), so that a small topic still spreads over the cores."""
    pieces = plan(opts, bounds, check)
    groups = pack(pieces, opts.max_bytes_per_partition)
    if opts.min_partitions is not None and len(groups) < opts.min_partitions:
        total = sum(n for p in pieces if (n := piece_bytes(p)) is not None)
        target = max(MIN_SPLIT_BYTES, -(-total // opts.min_partitions))
        if target < opts.max_bytes_per_partition:
            groups = pack(plan(dataclasses.replace(opts, max_bytes_per_partition=target), bounds, check), target)
    return groups


def offset_range(log: Log, topic: str, partition: int, opts: SourceOptions, bounds: Bounds) -> tuple[int, int]:
    """The offsets [start, end) to read from one partition."""
    log_start = log.log_start_offset
    bound = log.last_stable_offset if opts.read_committed else log.high_watermark
    start = _resolve(opts.starting, topic, partition, EARLIEST)
    end = _resolve(opts.ending, topic, partition, LATEST)
    if start >= 0 and end >= 0 and start > end:  # (as Spark's Kafka source, whatever failOnDataLoss says)
        raise SparkSourceOptionError(f"{topic}-{partition}: startingOffsets {start} is after endingOffsets {end}")
    start = log_start if start == EARLIEST else bound if start == LATEST else start
    end = bound if end == LATEST else min(end, bound)
    if opts.starting_timestamp is not None:
        found = log.offset_for_timestamp(opts.starting_timestamp)
        start = max(start, found.offset if found is not None else bound)
    if opts.ending_timestamp is not None:
        found = log.offset_for_timestamp(opts.ending_timestamp)
        if found is not None:
            end = min(end, found.offset)
    if start < log_start:
        if opts.fail_on_data_loss:
            raise SparkSourceDataLossError(
                f"{topic}-{partition}: offset {start} was asked for, but the log starts at {log_start} (records were "
                "deleted by retention since the offset was chosen: by startingOffsets, a stream's checkpoint, or "
                "read_topic when it made the DataFrame, which a new read_topic call plans again); set "
                f"failOnDataLoss=false to read from {log_start}", offset=start)
        start = log_start
    start = max(start, bounds.offset_lo)
    end = min(end, bounds.offset_hi)
    if bounds.timestamp_lo_ms is not None and start < end:
        found = log.offset_for_timestamp(bounds.timestamp_lo_ms)
        start = max(start, found.offset if found is not None else end)
    return start, end


def _plan_partition(log: Log, topic: str, partition: int, opts: SourceOptions, bounds: Bounds,
                    columnar_root: Path | None = None) -> list[Piece]:
    """The pieces of one partition (module docstring); ``columnar_root``: where the columnar copies are (None: read
    the log only)."""
    start, end = offset_range(log, topic, partition, opts, bounds)
    if start >= end:
        return []
    lost = log.lost_offsets.overlapping(start, end)  # a recovery cut them out of the log (local.lost_offsets)
    if lost is not None and opts.fail_on_data_loss:
        raise SparkSourceDataLossError(
            f"{topic}-{partition}: offsets {lost.first_offset}..{lost.last_offset} were lost (a recovery cut "
            f"{lost.segment} at byte {lost.position}, recorded in {LOST_OFFSETS_FILENAME}); set failOnDataLoss=false "
            "to skip them", offset=lost.first_offset)
    base: dict[str, Any] = {
        "topic": topic, "partition": partition, "props": opts.props, "read_committed": opts.read_committed,
        "fail_on_data_loss": opts.fail_on_data_loss, "cache_dir": opts.cache_dir, "filters": bounds.filters,
        "timestamp_lo_ms": bounds.timestamp_lo_ms,
    }
    copied = _columnar_pieces(log, start, end, columnar_root, base) if columnar_root is not None else []
    if not copied:
        return _plan_log(log, start, end, opts, bounds, base)
    lo, hi = copied[0].from_offset, copied[-1].until_offset
    before = _plan_log(log, start, lo, opts, bounds, base) if start < lo else []
    after = _plan_log(log, hi, end, opts, bounds, base) if hi < end else []
    return [*before, *copied, *after]


def columnar_files(log: Log, start: int, end: int, root: Path) -> list[tuple[str, int, int, int]]:
    """The files of the partition's columnar manifest that hold offsets of ``[start, end)``, in offset order and
    contiguous: (path to open, first offset, last offset to read, the file's own last offset: a file is read whole
    only where the two are equal); none when the manifest is missing, empty or of another topic id (a topic made
    again). On a data dir deposed since the copy's last file was added (its claim is older than the manifest's
    ``owner_epoch``), only offsets below its local log start. A manifest that does not decode is named, with the way
    around it; so is a file whose size or footer is not what the manifest says
    (:func:`tiered.columnar.manifest.file_problem`): a read would trust its row groups' statistics to skip rows."""
    from local.checkpoint import kafka_uuid_to_str
    from tiered.columnar.manifest import (
        ColumnarManifestError,
        file_problem,
        partition_dir,
        published_file,
        read_manifest,
    )

    directory = partition_dir(root, log.topic, log.partition)
    for _attempt in range(3):
        try:
            m = read_manifest(directory)
        except ColumnarManifestError as exc:
            raise ColumnarManifestError(f"{exc} (set the option columnarCopy=false to read the log only)") from exc
        if m is not None and (m.topic, m.partition) != (log.topic, log.partition):
            # (another partition's copy put here: its topic id is the same, and its rows would be read as this one's)
            raise ColumnarManifestError(
                f"{directory}: its manifest is the copy of {m.topic}-{m.partition}, not of {log.name} (damaged: "
                "tiered verify reports it; set the option columnarCopy=false to read the log only)")
        if m is None or not m.files or log.topic_id is None or m.topic_id != kafka_uuid_to_str(log.topic_id):
            return []
        until = end
        if m.owner_epoch > log.remote_log_state.owner_epoch:
            # The copy is kept by a data dir that claimed the partition after this one (tiered attach): this data
            # dir's log from its local start on may be another history (it went on appending after it lost the
            # partition); below that its reads are the new owner's remote segments, as the copy's rows are.
            until = min(end, log.local_log_start_offset)
        used, damaged = [], None
        for f in m.files:
            if f.end_offset >= start and f.base_offset < until:
                path = published_file(directory, f.name)
                problem = file_problem(path, f)  # its size and footer (ranged reads skip row groups by its statistics)
                if problem is not None:
                    damaged = (path, f, problem)
                    break
                used.append((str(path), f.base_offset, min(f.end_offset, until - 1), f.end_offset))
        if damaged is None:
            return used
        # (a file retired and deleted since the manifest was read, with a delete delay of 0, is not damage: the
        # manifest read again no longer names it)
    assert damaged is not None
    path, f, problem = damaged
    raise ColumnarManifestError(
        f"{path} ({log.topic}-{log.partition} offsets {f.base_offset}-{f.end_offset}) does not match the columnar "
        f"manifest: {problem} (damaged: tiered verify reports it; set the option columnarCopy=false to read the log "
        "only)")


def _columnar_pieces(log: Log, start: int, end: int, root: Path, base: dict[str, Any]) -> list[Piece]:
    """One piece per file of the columnar copy holding offsets of ``[start, end)`` (:func:`columnar_files`)."""
    from local.checkpoint import kafka_uuid_to_str

    files = columnar_files(log, start, end, root)
    topic_id = kafka_uuid_to_str(log.topic_id) if files and log.topic_id is not None else None
    return [Piece(**base, from_offset=max(start, first), until_offset=min(end, last + 1), start_position=0,
                  end_position=None, parquet_path=path, topic_id=topic_id)
            for path, first, last, _file_last in files]


def _plan_log(log: Log, start: int, end: int, opts: SourceOptions, bounds: Bounds, base: dict[str, Any]) -> list[Piece]:
    """The pieces of ``[start, end)`` of one partition from its log: remote segments, then local ones."""
    topic, partition = log.topic, log.partition
    pieces: list[Piece] = []
    local_start = log.local_log_start_offset
    rlm: Any = log.remote_tier  # tiered's RemoteLogManager (local only knows the RemoteTier protocol)
    cursor = start
    if opts.tiers in ("both", "remote") and rlm is not None and getattr(rlm, "metadata", None) is not None:
        from tiered.metadata import encode_metadata
        from tiered.remote_log_reader import allows_gaps, unread_metadata_note

        tip = rlm.topic_id_partition(log)
        remote_end = end if opts.tiers == "remote" else min(end, local_start)
        gaps = allows_gaps(log)  # (a compacted topic's segments may leave offsets out)
        for md in rlm.finished_segments(tip):
            if cursor >= remote_end:
                break
            if md.end_offset < cursor:
                continue
            if md.start_offset > cursor and opts.fail_on_data_loss and not gaps:
                # (the read's log start may be older than the listing: the owner's retention deleted them since)
                why = ("deleted by remote retention since the read's start was chosen (read again), or lost"
                       if cursor == start else "the remote tier has a gap")
                note = unread_metadata_note(rlm.metadata, tip)
                raise SparkSourceDataLossError(
                    f"{topic}-{partition}: offsets [{cursor}, {md.start_offset}) are in no finished remote segment (the "
                    f"next starts at {md.start_offset}): {why}{f' ({note})' if note else ''}; set failOnDataLoss=false "
                    "to skip them", offset=cursor)
            if bounds.timestamp_lo_ms is not None and md.max_timestamp_ms < bounds.timestamp_lo_ms:
                cursor = md.end_offset + 1
                continue
            lo, hi = max(cursor, md.start_offset), min(md.end_offset + 1, remote_end)
            size = md.segment_size_in_bytes if 0 <= md.segment_size_in_bytes < 2**31 - 1 else None

            def index(md: Any = md) -> Any:  # fetched only to start inside the segment or to split it
                return rlm.index_cache.get_index_entry(md).offset_index

            for a, b in _byte_ranges(index, md.start_offset, lo, size, opts.max_bytes_per_partition):
                pieces.append(Piece(**base, from_offset=lo, until_offset=hi, start_position=a, end_position=b,
                                    remote_metadata=encode_metadata(md)))
            cursor = md.end_offset + 1
    if opts.tiers == "both" and cursor < min(local_start, end) and opts.fail_on_data_loss:
        if rlm is None:
            note = " (the remote tier is not configured)"
        else:
            from tiered.remote_log_reader import unread_metadata_note

            unread = (unread_metadata_note(getattr(rlm, "metadata", None), rlm.topic_id_partition(log))
                      if log.topic_id is not None else "")
            note = f" ({unread})" if unread else ""
        raise SparkSourceDataLossError(
            f"{topic}-{partition}: offsets [{cursor}, {min(local_start, end)}) are neither local nor in a finished remote "
            f"segment{note}; set failOnDataLoss=false to skip them", offset=cursor)
    if opts.tiers in ("both", "local"):
        segs = list(log.segments.values())
        cursor = max(cursor, local_start)
        for i, seg in enumerate(segs):
            seg_end = segs[i + 1].base_offset if i + 1 < len(segs) else log.log_end_offset
            if seg_end <= cursor or cursor >= end:
                continue
            if bounds.timestamp_lo_ms is not None and seg.largest_timestamp < bounds.timestamp_lo_ms:
                continue
            lo, hi = max(cursor, seg.base_offset), min(seg_end, end)
            if lo >= hi:
                continue  # the segment starts at or after the end

            def local_index(seg: Any = seg) -> Any:
                return seg.offset_index

            for a, b in _byte_ranges(local_index, seg.base_offset, lo, seg.size, opts.max_bytes_per_partition):
                pieces.append(Piece(**base, from_offset=lo, until_offset=hi, start_position=a, end_position=b,
                                    local_path=str(_original_path(log, seg))))
    if opts.read_committed and pieces:
        first = pieces[0].from_offset
        if any(p.remote_metadata is not None for p in pieces):  # (a remote piece comes first: rlm is the tier)
            found = rlm.parts.collect_aborted_transactions(log, rlm.topic_id_partition(log), first, end)
        else:
            found = log.collect_aborted_transactions(first, end)
        assign_aborted(pieces, found)
    return pieces


def assign_aborted(pieces: list[Piece], found: Iterable[Any]) -> None:
    """Give each piece the aborted transactions of ``found`` (``AbortedTxn``) that touch its offsets."""
    unique = sorted({(t.producer_id, t.first_offset, t.last_offset) for t in found})
    for p in pieces:
        p.aborted = [t for t in unique if t[1] < p.until_offset and t[2] >= p.from_offset]


def _passes(x: int, op: str, value: Any) -> bool:
    if op == "in":
        return x in value
    return {"=": x == value, "<": x < value, "<=": x <= value, ">": x > value, ">=": x >= value}[op]


def _original_path(log: Log, seg: Any) -> Any:
    """The segment's file in the data dir (a read-only log's scratch dir links to it)."""
    path = Path(seg.log.path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _byte_ranges(offset_index: Callable[[], Any], base_offset: int, from_offset: int, size: int | None,
                 max_bytes: int) -> list[tuple[int, int | None]]:
    """Byte ranges of a segment, cut at batch boundaries from its offset index, each about ``max_bytes``; the first
    starts at the batch holding ``from_offset`` (the index's floor entry). ``offset_index`` gives the index, asked
    for only when it is needed (a remote one is fetched: the whole segment in one range needs none)."""
    start = 0 if from_offset <= base_offset else offset_index().lookup(from_offset).position
    if size is None or size - start <= max_bytes:
        return [(start, size)]
    index = offset_index()
    n = index.entries
    positions = [index.entry(i).position for i in range(n)]
    ranges: list[tuple[int, int | None]] = []
    a = start
    while True:
        target = a + max_bytes
        if target >= size:
            break
        j = bisect.bisect_left(positions, target)
        if j >= n:
            break
        b = positions[j]
        if b <= a:
            break
        ranges.append((a, b))
        a = b
    ranges.append((a, size))
    return ranges
