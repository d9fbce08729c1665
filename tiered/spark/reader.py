"""Reading one planned :class:`~tiered.spark.planning.Piece` on an executor, into Arrow record batches.

A local piece reads its segment file directly, read-only (``FileRecords`` opened ``mutable=False``: nothing is
written to the data dir). A remote piece reads through the project's remote read path, the
:class:`~tiered.remote_log_reader.RemoteLogReader` of a :class:`~tiered.remote_log_manager.RemoteLogManager` built
from the piece's broker properties, with its caches
(index cache and the ``diskcache`` segment chunk cache, which is process-safe) under the piece's ``cache_dir``,
one per machine so that every executor there shares it; one manager per Python worker process, reused across
tasks. Bytes are read in large ranges and cut into whole batches by their headers (runs of plain batches a read
at a time, in C; the rest one by one); every batch is CRC-checked before it is decoded
(:mod:`tiered.spark.arrow_records`); a bad one raises ``CorruptRecordError`` naming the file or
remote segment, the position and the offset. Aborted transactional batches are dropped under read_committed,
control batches always; pushed filters are applied exactly.

A Parquet piece (a file of the columnar copy, :mod:`tiered.columnar`) is read with pyarrow one row group at a
time, each page's CRC checked: only the row groups whose ``offset`` statistics meet the piece's offsets (and whose ``timestamp`` ones reach a
pushed timestamp floor), only the columns needed, rows cut to ``[from_offset, until_offset)``, ``NOT aborted``
under read_committed, then the pushed filters and the projection as for the log. A file deleted since the plan
(retention or a merge retired it, and ``remote.log.columnar.file.delete.delay.ms`` passed) is read from the
partition's remote segments instead (:func:`_log_pieces_instead`); where this executor cannot do that, it raises
:class:`~tiered.spark.planning.ColumnarFileGoneError` naming it: a new read, or a restarted streaming query, plans
again from the current manifest.
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime as _dt
import logging
import struct
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from local.errors import CorruptRecordError
from tiered.spark.arrow_records import ARROW_SCHEMA, COLUMNS, ArrowBatchBuilder, Projection
from tiered.spark.kept import Kept, TierInDir
from tiered.spark.planning import (
    ColumnarFileGoneError,
    Piece,
    SparkSourceDataLossError,
    assign_aborted,
    process_index_dir,
)
from tiered.spark.raw_batches import READ_BYTES, RawBatches

__all__ = ["READ_BYTES", "apply_filters", "read_piece", "remote_log_manager", "timestamp_micros"]
logger = logging.getLogger(__name__)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
_TXN_AND_PID = (21, 43)  # attributes (i16) and producer id (i64) positions in a v2 header

MAX_WORKER_TIERS = 4  # remote log managers kept per process: the least recently used beyond is closed
_managers: Kept[tuple[tuple[str, str], ...], TierInDir] = Kept(lambda: MAX_WORKER_TIERS, TierInDir.close)


@atexit.register
def _remove_index_dirs() -> None:
    """At exit, the kept managers' index directories (closing the managers themselves there fails: their caches'
    thread pools are shut down before atexit runs)."""
    for kept in _managers.values():
        kept.directory.cleanup()


@contextmanager
def remote_log_manager(props: dict[str, str], cache_dir: str) -> Iterator[Any]:
    """The worker's RemoteLogManager for these properties, built at its first use in this process and kept for
    the next task (:class:`tiered.spark.kept.Kept`: the :data:`MAX_WORKER_TIERS` most recently used), held while the
    block runs.

    Built by the composition root (:func:`tiered.composition.build_remote_tier`), but with the two caches placed for executors: the
    segment chunk cache (``diskcache``, process-safe) in ``cache_dir`` itself, shared by every executor of the
    machine; the index cache, which one process owns (it clears leftovers of its directory when it starts), in a
    directory of this process under it, removed when the manager is closed or the process exits (or, when it is
    killed, by the next executor's sweep: :func:`tiered.spark.planning.process_index_dir`)."""
    key = (*sorted(props.items()), ("__cache_dir", cache_dir))
    with _managers.use(key, lambda: _build_remote_log_manager(props, cache_dir)) as kept:
        assert kept is not None  # (the build returns one or raises)
        yield kept.tier


def _build_remote_log_manager(props: dict[str, str], cache_dir: str) -> TierInDir:
    """The worker process's remote reader: the chunk cache in ``cache_dir`` (shared by the executors of one
    machine), the index cache private to the process (removed at exit)."""
    from local import LogConfig
    from tiered.composition import build_remote_tier
    from tiered.spark.options import SparkSourceOptionError

    config = LogConfig.from_properties(props)
    root = Path(cache_dir)
    try:
        own = process_index_dir(cache_dir, "worker")
    except OSError as exc:
        raise SparkSourceOptionError(
            f"cacheDir={cache_dir}: an executor cannot keep its remote segment cache there ({exc.strerror or exc}: "
            f"{exc.filename or root / 'index'}); give the option a directory each executor's machine can write") from exc
    try:  # (a process Spark kills leaves the directory to the next one's sweep)
        return TierInDir(build_remote_tier(config, cache_root=own.path, index_cache_dir=own.path,
                                           segment_cache_dir=root / "remote-log-segment-cache"), own)
    except BaseException:
        own.cleanup()
        raise


_chunk_sizes: dict[tuple[tuple[str, str], ...], int] = {}


def _cache_chunk_size(props: dict[str, str]) -> int:
    """The remote segment cache's chunk size under these broker properties."""
    key = tuple(sorted(props.items()))
    size = _chunk_sizes.get(key)
    if size is None:
        from local import LogConfig

        size = _chunk_sizes[key] = LogConfig.from_properties(props).remote_log_segment_cache_chunk_size_bytes
    return size


def _remote_range_reader(piece: Piece, rlm: Any) -> tuple[Callable[[int, int], bytes | memoryview], str, int | None,
                                                          Callable[[], None]]:
    """(read, where, size, forget) through ``rlm``: ``forget`` drops the segment from the worker's segment cache, so
    that the next read fetches it again."""
    from tiered.cache.segment_cache import object_size
    from tiered.metadata import decode_metadata

    assert piece.remote_metadata is not None
    md = decode_metadata(piece.remote_metadata)
    reader = rlm.reader
    chunk = _cache_chunk_size(piece.props)

    def read(position: int, n: int) -> bytes | memoryview:
        # The remote read path (RemoteLogReader: segment cache, read-ahead, quota, checksums), within the cache chunk
        # holding `position`: the cache answers that with a view of its chunk, a range across chunks with a copy.
        return reader.read_range(md, position, position + min(n, chunk - position % chunk))

    def forget() -> None:
        reader.segments.invalidate(md)

    where = f"remote segment {md.remote_log_segment_id} ({md.start_offset}-{md.end_offset})"
    return read, where, object_size(md), forget


def read_piece(piece: Piece, projection: Projection | None = None) -> Iterator[pa.RecordBatch]:
    """The records of one piece, as Arrow record batches (see the module docstring): the source's columns, or those
    of ``projection`` (only they, and those the pushed filters need, are built)."""
    if piece.parquet_path is not None:
        yield from _read_parquet(piece, projection)
    elif piece.local_path is not None:
        from local.file_records import FileRecords

        path = piece.local_path
        try:
            records = FileRecords.open(path, mutable=False)
        except FileNotFoundError:
            copied = _remote_copy_of(piece)
            if copied is not None:  # copied to the remote tier, then deleted by local retention: nothing is lost
                yield from read_piece(copied, projection)
                return
            if piece.fail_on_data_loss:
                raise SparkSourceDataLossError(
                    f"{piece.description}: the segment file is gone (deleted by retention since the job was planned); "
                    "set failOnDataLoss=false to skip it", path=path) from None
            return
        try:
            end = piece.end_position if piece.end_position is not None else records.size_in_bytes
            yield from _decode(piece, records.read, piece.start_position, min(end, records.size_in_bytes), path,
                               projection)
        finally:
            records.close_handlers()
    else:
        from tiered.errors import RemoteResourceNotFoundError

        with remote_log_manager(piece.props, piece.cache_dir) as rlm:
            read, where, size, forget = _remote_range_reader(piece, rlm)
            try:
                yield from _decode(piece, read, piece.start_position,
                                   piece.end_position if piece.end_position is not None else size, where, projection,
                                   forget)
            except RemoteResourceNotFoundError:
                if not _deleted_since_the_plan(piece, rlm):
                    raise  # its metadata still says it is there: a missing object is damage
                if piece.fail_on_data_loss:
                    raise SparkSourceDataLossError(
                        f"{piece.description}: the remote segment is gone (deleted by retention since the job was "
                        "planned); set failOnDataLoss=false to skip it") from None
                logger.warning("%s: the remote segment was deleted since the plan (failOnDataLoss=false): skipped",
                               piece.description)


def _deleted_since_the_plan(piece: Piece, rlm: Any) -> bool:
    """Whether ``piece``'s remote segment is no longer a readable one once the partition's metadata is listed again
    (remote retention deleted it after the plan: Kafka's source reports that as data loss, or skips it)."""
    from tiered.metadata import decode_metadata

    assert piece.remote_metadata is not None
    md = decode_metadata(piece.remote_metadata)
    return all(m.remote_log_segment_id != md.remote_log_segment_id for m in _segments_now(rlm, md.topic_id_partition))


def _segments_now(rlm: Any, tip: Any) -> list[Any]:
    """The partition's remote segments as its metadata lists them now (the worker's view may be of a plan before a
    copy or a deletion): the current owner's readable ones, never another data dir's."""
    from tiered.metadata import RemoteLogMetadataStore

    metadata = rlm.metadata
    if isinstance(metadata, RemoteLogMetadataStore):
        metadata.load(tip)
        return metadata.readable_segments(tip)
    return list(metadata.list_remote_log_segments(tip))


def _remote_copy_of(piece: Piece) -> Piece | None:
    """``piece`` (of a local segment whose file is gone) as a piece of the segment's remote copy, or None when the
    remote tier holds none: a closed segment is deleted locally once it is copied (local retention), which may
    happen between the plan and the read. The copy holds the segment's bytes as they were, so the planned byte
    range is the same in it."""
    from local import LogConfig, filenames
    from local.checkpoint import PartitionMetadataFile
    from local.errors import KafkaStorageError
    from tiered.metadata import encode_metadata
    from tiered.rsm import RemoteLogSegmentState, TopicIdPartition

    assert piece.local_path is not None
    path = Path(piece.local_path)
    if not piece.cache_dir or not LogConfig.from_properties(piece.props).remote_log_storage_system_enable:
        return None
    try:
        base = filenames.offset_from_file_name(path.name)
        topic_id = PartitionMetadataFile(path.parent / filenames.PARTITION_METADATA_FILENAME).read()
    except (ValueError, OSError, KafkaStorageError):
        return None
    tip = TopicIdPartition(topic_id, piece.topic, piece.partition)
    with remote_log_manager(piece.props, piece.cache_dir) as rlm:
        for md in _segments_now(rlm, tip):
            if (md.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED and md.start_offset == base
                    and md.end_offset >= piece.until_offset - 1
                    and (piece.end_position is None or piece.end_position <= md.segment_size_in_bytes)):
                logger.info("%s: the local segment is gone; reading its remote copy %s", piece.description,
                            md.remote_log_segment_id.id)
                return dataclasses.replace(piece, local_path=None, remote_metadata=encode_metadata(md))
    return None


def _decode(piece: Piece, read: Callable[[int, int], bytes | memoryview], start: int, end: int | None,
            where: str, projection: Projection | None,
            forget: Callable[[], None] | None = None) -> Iterator[pa.RecordBatch]:
    """The records of ``[start, end)``. ``forget`` (a remote piece's): a batch whose bytes are damaged (its CRC does
    not match, or its framing is broken) is read again once, from where it starts, after the segment cache forgot
    the segment. The cache's copy is the likelier culprit: a chunk file damaged on local disk after this process
    mapped it, which the chunk's own checksum finds only when it is read back from disk again. A batch still
    damaged as fetched from the store again is the remote copy's, and raises."""
    columns = None if projection is None else {*projection.columns, *(f[0] for f in piece.filters)}
    builder = ArrowBatchBuilder(piece.topic, piece.partition, piece.from_offset, piece.until_offset, columns)
    aborted = piece.aborted if piece.read_committed else []
    ts_floor = piece.timestamp_lo_ms
    position = start
    while True:
        try:
            raw = RawBatches(read, position, end, piece.until_offset, where)
            yield from _delivered(_decode_from(builder, raw, where, aborted, ts_floor), piece, projection)
            break
        except _DamagedBatch as damaged:
            if forget is None:
                raise damaged.error from damaged.error.__cause__
            logger.warning("%s; reading it again from the remote store (the segment cache's copy may be damaged)",
                           damaged.error)
            forget()
            forget = None
            position = damaged.position  # the batches before it are whole and in the builder: none is read twice
    try:
        rest = builder.flush()
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"{where}: {exc}") from exc
    yield from _delivered(rest, piece, projection)


def _delivered(batches: Iterable[pa.RecordBatch], piece: Piece,
               projection: Projection | None) -> Iterator[pa.RecordBatch]:
    """``batches`` as the read returns them: the pushed filters applied, empty ones dropped, the projection's columns."""
    for rb in batches:
        rb = apply_filters(rb, piece.filters)
        if rb.num_rows:
            yield rb if projection is None else projection.apply(rb)


class _DamagedBatch(Exception):
    """A batch whose bytes are damaged (CRC mismatch, broken framing) at ``position``: nothing of it reached the
    builder, so a read may start again there."""

    def __init__(self, error: CorruptRecordError, position: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.position = position


def _decode_from(builder: ArrowBatchBuilder, raw: RawBatches, where: str, aborted: list[tuple[int, int, int]],
                 ts_floor: int | None) -> Iterator[pa.RecordBatch]:
    """The builder's record batches as it takes the batches of ``raw`` in; :class:`_DamagedBatch` for a batch whose
    bytes are damaged (other errors, as a record that does not decode in a batch whose CRC matched, raise as they
    are). Runs of plain batches go to the builder a read at a time (:meth:`ArrowBatchBuilder.add_run`); the rest,
    and whatever the run stops at, one at a time here."""
    transactional = not aborted  # with aborted transactions to drop, each transactional batch is looked at here
    while True:
        yield from builder.add_runs(raw, ts_floor, transactional)
        pos = raw.position
        try:
            batch = raw.next_batch()
        except CorruptRecordError as exc:  # the framing: a header or a length that does not hold
            position = exc.context.get("position")
            if not isinstance(position, int):
                raise
            raise _DamagedBatch(exc, position) from exc
        if batch is None:
            return
        if batch[16] == 2:
            if ts_floor is not None and _I64.unpack_from(batch, 35)[0] < ts_floor:
                continue  # no record of it reaches the pushed timestamp floor (its max timestamp is below)
            if aborted and _I16.unpack_from(batch, 21)[0] & 0x10:
                base = _I64.unpack_from(batch, 0)[0]
                pid = _I64.unpack_from(batch, 43)[0]
                if any(p == pid and first <= base <= last for p, first, last in aborted):
                    try:
                        builder.check_crc(batch)
                    except CorruptRecordError as exc:
                        raise _DamagedBatch(_named(exc, where, pos), pos) from exc
                    continue
        try:
            out = builder.add(batch)
        except CorruptRecordError as exc:
            if "computed" in exc.context:  # its CRC: nothing of it was taken
                raise _DamagedBatch(_named(exc, where, pos), pos) from exc
            raise _named(exc, where, pos) from exc
        yield from out


def _named(exc: CorruptRecordError, where: str, pos: int) -> CorruptRecordError:
    """``exc`` naming the file or remote segment and the position (caused by ``exc``)."""
    error = CorruptRecordError(f"{where}: {exc} at position {pos}", position=pos)
    error.__cause__ = exc
    return error


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def _read_parquet(piece: Piece, projection: Projection | None) -> Iterator[pa.RecordBatch]:
    """The records of a Parquet piece (module docstring), one row group at a time; a damaged file fails the read
    naming it."""
    import pyarrow.parquet as pq

    path = piece.parquet_path
    assert path is not None
    try:
        parquet = pq.ParquetFile(path, page_checksum_verification=True)  # holds the file open: a deletion from now on does not stop the read
    except FileNotFoundError:
        instead = _log_pieces_instead(piece)
        if instead is None:
            raise ColumnarFileGoneError(
                f"{piece.description}: the columnar copy's file is gone (retention or a merge retired it after the read "
                "was planned) and this executor cannot read its offsets from the log instead; run the read again (a "
                "restarted streaming query plans the batch again)", path=path) from None
        logger.info("%s: the columnar copy's file is gone since the plan; reading its offsets from the remote tier "
                    "(%d segments)", piece.description, len(instead))
        for log_piece in instead:
            yield from read_piece(log_piece, projection)
        return
    except (OSError, pa.ArrowException) as exc:
        raise _damaged(piece, exc) from exc
    try:
        yield from _read_row_groups(piece, parquet, projection)
    except (OSError, pa.ArrowException) as exc:  # a damaged page (its checksum), a truncated column chunk
        raise _damaged(piece, exc) from exc
    finally:
        parquet.close()


def _log_pieces_instead(piece: Piece) -> list[Piece] | None:
    """The offsets of a Parquet piece whose file is gone (a merge or retention retired it, and its delete delay passed,
    since the plan), as pieces of the partition's remote segments listed now; None where this executor cannot tell
    which records of them are aborted under read_committed (the search for aborts reaches past the remote segments
    and the partition's data dir is not here). Offsets no remote segment holds any more (retention) are data loss:
    :class:`SparkSourceDataLossError`, or skipped with a warning under failOnDataLoss=false."""
    from local.checkpoint import kafka_uuid_from_str
    from tiered.metadata import encode_metadata
    from tiered.remote_tier_parts import collect_aborted_transactions
    from tiered.rsm import TopicIdPartition

    if piece.topic_id is None or not piece.cache_dir:
        return None
    tip = TopicIdPartition(kafka_uuid_from_str(piece.topic_id), piece.topic, piece.partition)
    pieces: list[Piece] = []
    missing: list[tuple[int, int]] = []
    with remote_log_manager(piece.props, piece.cache_dir) as rlm:
        cursor, until = piece.from_offset, piece.until_offset
        for md in _segments_now(rlm, tip):
            if md.end_offset < cursor:
                continue
            if md.start_offset >= until:
                break
            if md.start_offset > cursor:
                missing.append((cursor, md.start_offset))
            lo, hi = max(cursor, md.start_offset), min(md.end_offset + 1, until)
            start = 0 if lo <= md.start_offset else rlm.index_cache.get_index_entry(md).offset_index.lookup(lo).position
            pieces.append(dataclasses.replace(piece, from_offset=lo, until_offset=hi, start_position=start,
                                              end_position=None, remote_metadata=encode_metadata(md), parquet_path=None))
            cursor = hi
        if cursor < until:
            missing.append((cursor, until))
        if piece.read_committed and pieces:
            local = _LocalTxnIndexes(piece)
            found = collect_aborted_transactions(rlm.metadata, rlm.index_cache, local, tip, pieces[0].from_offset, until)
            if local.needed_but_absent:
                return None
            assign_aborted(pieces, found)
    if missing:
        gone = ", ".join(f"[{a}, {b})" for a, b in missing)
        if piece.fail_on_data_loss:
            raise SparkSourceDataLossError(
                f"{piece.description}: the columnar copy's file is gone since the plan and offsets {gone} are in no "
                "remote segment any more (deleted by retention); set failOnDataLoss=false to skip them",
                offset=missing[0][0])
        logger.warning("%s: offsets %s were deleted by retention since the plan (failOnDataLoss=false): skipped",
                       piece.description, gone)
    return pieces


class _LocalTxnIndexes:
    """The partition's local transaction indexes, read from its directory under ``log.dirs`` where this machine has
    it (as a log's ``collect_aborted_transactions``; nothing is written); ``needed_but_absent`` once a search
    needed them and the directory is not here."""

    def __init__(self, piece: Piece) -> None:
        self.piece = piece
        self.needed_but_absent = False

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[Any]:
        from local import LogConfig, filenames
        from local.index.txn_index import TransactionIndex

        name = f"{self.piece.topic}-{self.piece.partition}"
        dirs = [Path(d) / name for d in LogConfig.from_properties(self.piece.props).log_dirs]
        found = [d for d in dirs if d.is_dir()]
        if not found:
            self.needed_but_absent = True
            return []
        files = sorted(found[0].glob(f"*{filenames.TXN_INDEX_FILE_SUFFIX}"))
        aborted: list[Any] = []
        for path in files:
            try:
                base = filenames.offset_from_file_name(path.name)
            except ValueError:
                continue
            result = TransactionIndex(base, path).collect_aborted_txns(start_offset, upper_bound_offset)
            aborted.extend(result.aborted_txns)
            if result.is_complete:
                break
        return aborted


def _damaged(piece: Piece, exc: BaseException) -> CorruptRecordError:
    return CorruptRecordError(f"{piece.description}: {exc} (the columnar copy's file is damaged: tiered verify reports "
                              "it; set the option columnarCopy=false to read the log only)", path=piece.parquet_path)


def _read_row_groups(piece: Piece, parquet: Any, projection: Projection | None) -> Iterator[pa.RecordBatch]:
    import pyarrow.compute as pc

    from tiered.columnar.keeper import ABORTED

    wanted = set(COLUMNS) if projection is None else {*projection.columns, *(f[0] for f in piece.filters)}
    columns = [c for c in COLUMNS if c in wanted]
    schema = pa.schema([ARROW_SCHEMA.field(c) for c in columns])
    committed = piece.read_committed
    meta = parquet.metadata
    leaf = {meta.schema.column(j).path: j for j in range(meta.num_columns)}
    floor = None if piece.timestamp_lo_ms is None else _EPOCH + _dt.timedelta(milliseconds=piece.timestamp_lo_ms)
    lo, hi = piece.from_offset, piece.until_offset
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        offsets = group.column(leaf["offset"]).statistics
        if offsets is not None and offsets.has_min_max and (offsets.max < lo or offsets.min >= hi):
            continue
        if floor is not None and "timestamp" in leaf:
            ts = group.column(leaf["timestamp"]).statistics
            latest = ts.max if ts is not None and ts.has_min_max else None
            if isinstance(latest, _dt.datetime) and latest.tzinfo is not None and latest < floor:
                continue  # no record of it reaches the pushed timestamp floor
        read = [*columns, *(["offset"] if "offset" not in wanted else []), *([ABORTED] if committed else [])]
        table = parquet.read_row_group(i, columns=read)
        whole = offsets is not None and offsets.has_min_max and lo <= offsets.min and offsets.max < hi
        mask = None if whole else pc.and_(pc.greater_equal(table["offset"], lo), pc.less(table["offset"], hi))
        if committed:
            kept = pc.invert(table[ABORTED])
            mask = kept if mask is None else pc.and_(mask, kept)
        if mask is not None:
            table = table.filter(mask)
        table = table.select(columns)
        if table.schema != schema:  # the files' types are the source's: a cast only if a writer differed
            table = table.cast(schema)
        yield from _delivered(table.to_batches(), piece, projection)


def timestamp_micros(value: Any) -> int:
    """A filter's timestamp value (a datetime; naive ones are local time, as PySpark makes them) in microseconds."""
    if isinstance(value, _dt.datetime):
        aware = value if value.tzinfo is not None else value.astimezone()
        return (aware - _EPOCH) // _dt.timedelta(microseconds=1)
    raise TypeError(f"not a timestamp: {value!r}")


def apply_filters(rb: pa.RecordBatch, filters: list[tuple[str, str, Any]]) -> pa.RecordBatch:
    """Keep the rows that pass every pushed filter (the source promised Spark to apply them exactly)."""
    if not filters or rb.num_rows == 0:
        return rb
    mask = np.ones(rb.num_rows, np.bool_)
    for column, op, value in filters:
        col = rb.column(column)
        if column == "timestamp":
            arr = col.view(pa.int64()).to_numpy(zero_copy_only=False)
        else:
            arr = col.to_numpy(zero_copy_only=False)
        if op == "=":
            mask &= arr == value
        elif op == "<":
            mask &= arr < value
        elif op == "<=":
            mask &= arr <= value
        elif op == ">":
            mask &= arr > value
        elif op == ">=":
            mask &= arr >= value
        elif op == "in":
            mask &= np.isin(arr, np.array(sorted(value), dtype=np.int64))
        else:  # pragma: no cover - only the ops accepted by pushFilters get here
            raise ValueError(f"unknown filter op {op}")
    if mask.all():
        return rb
    return rb.filter(pa.array(mask))
