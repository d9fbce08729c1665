"""The ``tiered`` source reading the columnar copy: Parquet pieces in the plan, their reader, and a streaming query.

The planning and the Parquet piece reader are checked without Spark (a file written here with the columnar
schema, row groups of 100 rows, aborted rows marked); the streaming query runs on a real local[2] Spark over the
topics of ``tests/spark/test_columnar.py``'s ``_build`` (``c``: a closed segment in the copy and an active one;
``tx``: aborted transactions in the copied segments), with appends and copies between triggers. The oracle is the
engine's own read (``_engine_rows``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from local import LogConfig, LogManager
from local.fetch import FetchIsolation
from tests.logutil import local_tier_props
from tests.spark.streams import run_to_parquet
from tests.spark.test_columnar import _append_c, _append_tx, _build, _engine_rows, _options, _rows
from tiered.columnar.keeper import columnar_schema
from tiered.columnar.location import columnar_root
from tiered.columnar.manifest import partition_dir, read_manifest, stored_file
from tiered.remote_log_manager import RemoteLogManager
from tiered.spark.arrow_records import ARROW_SCHEMA, Projection
from tiered.spark.options import SparkSourceOptionError, parse_options
from tiered.spark.planning import ColumnarFileGoneError, Piece, SparkSourceDataLossError, plan
from tiered.spark.reader import read_piece
from tiered.spark.source import TieredStreamReader

FIRST, ROWS, GROUP = 1000, 1000, 100  # the unit file: offsets [1000, 2000), row groups of 100
T_US = 1_700_000_000_000_000


def _aborted(offset: int) -> bool:
    return offset % 17 < 3


@pytest.fixture(scope="module")
def parquet_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    offsets = list(range(FIRST, FIRST + ROWS))
    table = pa.table({
        "key": [None if o % 5 == 0 else b"k%d" % o for o in offsets],
        "value": [b"v%d" % o for o in offsets],
        "topic": ["u"] * ROWS,
        "partition": pa.array([3] * ROWS, pa.int32()),
        "offset": pa.array(offsets, pa.int64()),
        "timestamp": pa.array([T_US + o * 1000 for o in offsets], pa.timestamp("us", tz="UTC")),
        "timestampType": pa.array([0] * ROWS, pa.int32()),
        "headers": [[{"key": "h", "value": b"%d" % o}] if o % 7 == 0 else [] for o in offsets],
        "leaderEpoch": pa.array([None if o % 11 == 0 else 4 for o in offsets], pa.int32()),
        "aborted": [_aborted(o) for o in offsets],
    }, schema=columnar_schema())
    path = tmp_path_factory.mktemp("parquet-piece") / "00000000000000001000-x.parquet"
    pq.write_table(table, path, row_group_size=GROUP)
    return path


def _piece(path: Path, lo: int, hi: int, **extra: Any) -> Piece:
    return Piece(topic="u", partition=3, from_offset=lo, until_offset=hi, start_position=0, end_position=None,
                 parquet_path=str(path), **extra)


def _offsets(batches: list[pa.RecordBatch]) -> list[int]:
    return [o for rb in batches for o in rb.column("offset").to_pylist()]


@settings(max_examples=40, deadline=None)
@given(lo=st.integers(FIRST - 50, FIRST + ROWS + 10), size=st.integers(0, ROWS + 60), committed=st.booleans())
def test_a_parquet_piece_is_its_offsets_once_each_in_the_source_schema(parquet_file: Path, lo: int, size: int,
                                                                       committed: bool) -> None:
    hi = lo + size
    batches = list(read_piece(_piece(parquet_file, lo, hi, read_committed=committed)))
    assert all(rb.schema == ARROW_SCHEMA for rb in batches)
    wanted = [o for o in range(max(lo, FIRST), min(hi, FIRST + ROWS)) if not (committed and _aborted(o))]
    assert _offsets(batches) == wanted
    rows = [r for rb in batches for r in rb.to_pylist()]
    for r in rows:
        o = r["offset"]
        assert r["value"] == b"v%d" % o and r["key"] == (None if o % 5 == 0 else b"k%d" % o)
        assert r["leaderEpoch"] == (None if o % 11 == 0 else 4) and r["partition"] == 3 and r["topic"] == "u"


def test_a_parquet_piece_reads_only_the_row_groups_of_its_offsets(parquet_file: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[int] = []
    original = pq.ParquetFile.read_row_group

    def spy(self: Any, i: int, *args: Any, **kwargs: Any) -> Any:
        read.append(i)
        return original(self, i, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    # [1250, 1420): cut inside row groups 2 and 4 (offsets 1200-1299, 1400-1499)
    assert _offsets(list(read_piece(_piece(parquet_file, 1250, 1420)))) == list(range(1250, 1420))
    assert read == [2, 3, 4]
    read.clear()
    floor_ms = (T_US + 1730 * 1000) // 1000  # a pushed timestamp floor: groups whose newest record is older go
    got = _offsets(list(read_piece(_piece(parquet_file, 1000, 2000, timestamp_lo_ms=floor_ms,
                                          filters=[("timestamp", ">=", T_US + 1730 * 1000)]))))
    assert got == list(range(1730, 2000)) and read == [7, 8, 9]


def test_a_parquet_piece_applies_the_projection_and_the_pushed_filters(parquet_file: Path) -> None:
    projection = Projection(("value", "offset"), pa.schema([pa.field("value", pa.binary()),
                                                            pa.field("offset", pa.int64())]))
    filters = [("offset", "in", frozenset({1003, 1110, 1111, 1500, 1999, 2500})), ("partition", "=", 3)]
    batches = list(read_piece(_piece(parquet_file, 1100, 2000, filters=filters, read_committed=True), projection))
    assert all(rb.schema == projection.schema for rb in batches)
    # 1003: before the piece; 1111 % 17 == 6 kept; 1110 % 17 == 5 kept; 1500 % 17 == 4 kept; 2500: past the file
    assert [r for rb in batches for r in rb.to_pylist()] == [
        {"value": b"v%d" % o, "offset": o} for o in (1110, 1111, 1500, 1999)]
    none = list(read_piece(_piece(parquet_file, 1000, 2000, filters=[("partition", "=", 4)]), projection))
    assert _offsets(none) == []
    late = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
    assert list(read_piece(_piece(parquet_file, 1000, 2000, timestamp_lo_ms=int(late.timestamp() * 1000)))) == []


def test_a_parquet_piece_whose_file_is_gone_says_so_and_to_rerun(tmp_path: Path) -> None:
    gone = tmp_path / "00000000000000000000-gone.parquet"
    with pytest.raises(ColumnarFileGoneError) as err:
        list(read_piece(_piece(gone, 0, 10)))
    message = str(err.value)
    assert str(gone) in message and "run the read again" in message and "\n" not in message


# With the engine's data ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("columnar-stream")
    _build(root, partitions=1, n=16_000)
    return root


def _manifest(root: Path, topic: str) -> Any:
    directory = partition_dir(columnar_root(LogConfig.from_properties(local_tier_props(root))), topic, 0)  # type: ignore[arg-type]
    m = read_manifest(directory)
    assert m is not None and m.files
    return directory, m


def test_the_plan_reads_the_copied_offsets_from_parquet_and_the_rest_from_the_log(root: Path) -> None:
    directory, m = _manifest(root, "c")
    nxt = m.next_offset
    pieces = plan(parse_options(_options(root, topics="c")))
    copied = [p for p in pieces if p.parquet_path is not None]
    assert [p.parquet_path for p in copied] == [str(stored_file(directory, f.name)) for f in m.files]
    assert [(p.from_offset, p.until_offset) for p in copied] == [(f.base_offset, f.end_offset + 1) for f in m.files]
    rest = [p for p in pieces if p.parquet_path is None]
    assert rest and min(p.from_offset for p in rest) == nxt and max(p.until_offset for p in rest) == 16_000
    # a range starting inside the copy: its first file cut, the rest of the log after it, meeting at next
    starting = json.dumps({"c": {"0": 10}})
    cut = plan(parse_options(_options(root, topics="c", startingOffsets=starting)))
    assert (cut[0].parquet_path, cut[0].from_offset) == (str(stored_file(directory, m.files[0].name)), 10)
    assert next(p.from_offset for p in cut if p.parquet_path is None) == nxt
    for option in ({"columnarCopy": "false"}, {"tiers": "local"}):
        assert all(p.parquet_path is None for p in plan(parse_options(_options(root, topics="c", **option))))
    with pytest.raises(SparkSourceOptionError, match="columnarCopy='yes': expected true or false"):
        parse_options(_options(root, topics="c", columnarCopy="yes"))
    # a micro-batch is planned the same way
    reader = TieredStreamReader(_options(root, topics="c"))
    parts = reader.partitions({"c": {"0": 5}}, {"c": {"0": nxt + 7}})
    batch = [p for part in parts for p in part.pieces]  # type: ignore[attr-defined]
    assert [(p.parquet_path is not None, p.from_offset) for p in batch][:len(m.files)] == [
        (True, max(5, f.base_offset)) for f in m.files]
    assert batch[-1].parquet_path is None and batch[-1].until_offset == nxt + 7


def _read_rows(pieces: list[Piece]) -> list[dict[str, Any]]:
    return [r for p in pieces for rb in read_piece(p) for r in rb.to_pylist()]


def test_a_parquet_piece_whose_file_is_gone_since_the_plan_reads_its_offsets_from_the_remote_tier(
        root: Path, tmp_path: Path) -> None:
    """A file retired by a merge or by retention, and deleted once its delay passed, under a read planned before: the
    read used to fail (ColumnarFileGoneError). The piece's offsets are read from the remote segments that hold them,
    the same rows (aborted ones dropped under read_committed); offsets retention deleted since the plan are data loss,
    or skipped with failOnDataLoss=false; an executor that cannot tell which records are aborted (the search for
    aborts needs the local transaction indexes and the data dir is not there) still names the file."""
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    committed = {"isolationLevel": "read_committed"}
    for topic, extra in (("c", {}), ("c", committed), ("tx", {}), ("tx", committed)):
        copied = [p for p in plan(parse_options(_options(copy, topics=topic, **extra))) if p.parquet_path is not None]
        assert copied and all(p.topic_id is not None for p in copied)
        whole = _read_rows(copied)
        assert whole and [r["offset"] for r in whole] == sorted({r["offset"] for r in whole})
        for p in copied:
            os.rename(p.parquet_path, f"{p.parquet_path}.gone")  # type: ignore[arg-type]
        assert _read_rows(copied) == whole, (topic, extra)
        if topic == "c" and extra:  # no transaction index in the remote tier: the search goes on to the local ones
            data = copy / "data"
            data.rename(copy / "elsewhere")  # an executor on a machine without the data dir
            with pytest.raises(ColumnarFileGoneError, match="cannot read its offsets from the log"):
                _read_rows(copied)
            (copy / "elsewhere").rename(data)
        for p in copied:
            os.rename(f"{p.parquet_path}.gone", p.parquet_path)  # type: ignore[arg-type]
    with LogManager(LogConfig.from_properties(local_tier_props(copy)), start_scheduler=False) as m:
        log = m.get_log("c", 0)
        rlm = m.remote_tier
        assert log is not None and isinstance(rlm, RemoteLogManager)
        _append_c(log, 0, 16_000, 30_000)
        log.roll()
        rlm.run_once(m.all_logs())  # the second segment's rows merged into the file with the first's
        piece = next(p for p in plan(parse_options(_options(copy, topics="c"))) if p.parquet_path is not None)
        first = rlm.finished_segments(rlm.topic_id_partition(log))[0]
        assert piece.from_offset == first.start_offset < first.end_offset + 1 < piece.until_offset
        log.delete_records(first.end_offset + 1)  # remote retention then deletes the first segment
        assert rlm.cleanup_remote_segments(log) >= 1
    os.rename(piece.parquet_path, f"{piece.parquet_path}.gone")  # type: ignore[arg-type]
    with pytest.raises(SparkSourceDataLossError, match=rf"offsets \[{first.start_offset}, {first.end_offset + 1}\) "
                                                       "are in no remote segment any more"):
        _read_rows([piece])
    piece.fail_on_data_loss = False
    assert [r["offset"] for r in _read_rows([piece])] == list(range(first.end_offset + 1, piece.until_offset))


def _committed(root: Path, topic: str) -> list[Any]:
    return _engine_rows(root, topic, FetchIsolation.TXN_COMMITTED)


def test_a_stream_from_earliest_reads_the_copy_then_the_log_each_offset_once(spark: Any, tmp_path: Path) -> None:
    root, out, checkpoint = tmp_path / "root", tmp_path / "out", tmp_path / "checkpoint"
    root.mkdir()
    _build(root, partitions=1, n=16_000)  # its own: it appends, so the module's root stays as the other tests see it

    def run() -> list[int]:
        stream = (spark.readStream.format("tiered")
                  .options(**_options(root, topics="c,tx", isolationLevel="read_committed",
                                      maxOffsetsPerTrigger="5000")).load())
        return run_to_parquet(stream, out, checkpoint)

    def check() -> list[Any]:
        got = spark.read.parquet(str(out))
        assert _rows(got.where("topic = 'c'")) == _committed(root, "c")
        tx_rows = _rows(got.where("topic = 'tx'"))
        assert tx_rows == _committed(root, "tx")  # the copy's aborted records dropped, each offset once
        return tx_rows

    first = run()
    assert len(first) >= 3 and max(first) <= 5000  # maxOffsetsPerTrigger still bounds the batches
    check()
    # Between triggers: appends, and a copy that takes in offsets the stream read from the log (the query is down:
    # a read-only open racing the writer's file deletions is another matter, see the report of this change).
    with LogManager(LogConfig.from_properties(local_tier_props(root)), start_scheduler=False) as m:
        c, tx = m.get_log("c", 0), m.get_log("tx", 0)
        assert c is not None and tx is not None
        _append_c(c, 0, 16_000, 24_000)
        c.roll()
        _append_tx(tx, range(6, 8))  # round 7 aborted
        tx.roll()
        rlm = m.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        rlm.run_once(m.all_logs())
    _directory, manifest = _manifest(root, "c")
    assert manifest.next_offset > 16_000  # the boundary moved past where the stream stood
    second = run()
    assert sum(second) == 8_000 + 15 + 3 and max(second) <= 5000  # c: 8000; tx: round 6, and round 7's plain records
    tx_rows = check()
    values = {r[3][:2] for r in tx_rows}
    assert {b"r0", b"r2", b"r4", b"r6"} <= values and not values & {b"r1", b"r3", b"r5", b"r7"}


def test_a_read_of_a_copied_file_deleted_under_the_manifest_names_the_file(spark: Any, tmp_path: Path) -> None:
    _build(tmp_path, partitions=1, n=16_000)
    directory, m = _manifest(tmp_path, "c")
    stored_file(directory, m.files[0].name).unlink()
    (directory / m.files[0].name).unlink()  # its link too (with the link there, the file is read through it)
    # named at the plan as damage the current manifest still lists (not "retired since the plan: run it again",
    # which would fail the same way for ever), with the way around it
    with pytest.raises(Exception, match="does not match the columnar manifest: missing") as err:
        spark.read.format("tiered").options(**_options(tmp_path, topics="c")).load().count()
    assert m.files[0].name in str(err.value) and "columnarCopy=false" in str(err.value)
    assert spark.read.format("tiered").options(**_options(tmp_path, topics="c", columnarCopy="false")).load().count() \
        == 16_000
