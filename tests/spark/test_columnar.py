"""The columnar copy (tiered.columnar) and ``tiered.spark.read_topic`` on a real local[2] Spark.

Topic ``c`` (2 partitions; null keys, headers, two codecs) and topic ``tx`` (committed and aborted transactions) have
``remote.log.columnar.enable=true``: one pass of the copy tasks leaves their closed segments in the remote tier and
in Parquet, their active segments only in the data dir, so every read crosses the boundary between Spark's Parquet
reader and the ``tiered`` source. The oracle is the engine's own read (``Log.read`` through a read-only LogManager
with the consumer's aborted-transaction rule, ``tiered.commands.consume.records_from``); Spark's Parquet reader
and pyarrow read the files.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from local import LogConfig, LogManager
from local.errors import ConfigError, CorruptRecordError
from local.fetch import FetchIsolation
from local.records import CompressionType, MemoryRecords, SimpleRecord
from tests.logutil import local_tier_props
from tiered.columnar.location import check_topic, columnar_root
from tiered.columnar.manifest import FILES_DIR, partition_dir, read_manifest, stored_file
from tiered.columnar.scrub import scrub_columnar
from tiered.commands.consume import records_from
from tiered.remote_log_manager import RemoteLogManager
from tiered.scrub.report import PartitionReport
from tiered.spark import read_topic
from tiered.spark.columnar_read import plan_topic

pytestmark = pytest.mark.integration

T0 = int(time.time() * 1000) - 3_600_000  # recent: retention by time must not delete the records
N = 16_000  # records per partition of c: a closed segment of 1 MiB (or more) and an active one
COLUMNAR = {"remote.storage.enable": "true", "remote.log.columnar.enable": "true"}


def _value(i: int) -> bytes:
    return b"value-%08d-" % i + b"x" * (40 + i % 61)


def _append_c(log: Any, p: int, first: int, last: int) -> None:
    for start in range(first, last, 250):
        recs = [SimpleRecord(T0 + i * 10 + p, None if i % 7 == 0 else b"k%d" % i, _value(i),
                             headers=[("h", b"%d" % i)] if i % 13 == 0 else [])
                for i in range(start, min(start + 250, last))]
        log.append(MemoryRecords.build(recs, CompressionType.LZ4 if start % 1000 == 0 else CompressionType.NONE))


def _append_tx(log: Any, rounds: range) -> None:
    for round_ in rounds:
        pid, commit = 100 + round_, round_ % 2 == 0
        for seq in range(3):
            recs = [SimpleRecord(T0 + round_ * 100 + seq * 10 + j, b"p%d" % pid, b"r%d-%d-%d" % (round_, seq, j))
                    for j in range(4)]
            log.append(MemoryRecords.build(recs, producer_id=pid, producer_epoch=0, base_sequence=seq * 4,
                                           is_transactional=True))
            log.append(MemoryRecords.build([SimpleRecord(T0, None, b"plain-%d-%d" % (round_, seq))]))
        log.append(MemoryRecords.end_transaction_marker(pid, 0, commit=commit))
        if round_ in (1, 3):  # rounds 0-1 and 2-3 in closed segments, 4-5 (one aborted) in the active one
            log.roll()


def _build(root: Path, *, partitions: int = 2, n: int = N, extra: dict[str, str] | None = None) -> None:
    with LogManager(LogConfig.from_properties(local_tier_props(root)), start_scheduler=False) as m:
        for p in range(partitions):
            _append_c(m.get_or_create_log("c", p, {**COLUMNAR, **(extra or {})}), p, 0, n)
        _append_tx(m.get_or_create_log("tx", 0, {**COLUMNAR, "remote.log.columnar.file.bytes": "1"}), range(6))
        rlm = m.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        rlm.run_once(m.all_logs())


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("columnar-data")
    _build(root)
    return root


def _options(root: Path, **extra: str) -> dict[str, str]:
    return {**{f"config.{k}": v for k, v in local_tier_props(root).items()}, "cacheDir": str(root / "cache"), **extra}


def _rows(df: Any) -> list[tuple[Any, ...]]:
    out = []
    for r in df.selectExpr("partition", "offset", "key", "value", "unix_millis(timestamp) AS ts", "timestampType",
                           "headers", "leaderEpoch").collect():
        out.append((r["partition"], r["offset"], r["key"], r["value"], r["ts"], r["timestampType"],
                    tuple((h["key"], h["value"]) for h in r["headers"]), r["leaderEpoch"]))
    return sorted(out, key=lambda t: (t[0], t[1]))


def _engine_rows(root: Path, topic: str, isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK) -> list[Any]:
    out = []
    with LogManager(LogConfig.from_properties(local_tier_props(root)), start_scheduler=False, read_only=True) as m:
        for t, p in m.partitions():
            log = m.get_log(t, p)
            if t != topic or log is None:
                continue
            for batch, rec in records_from(log, log.log_start_offset, isolation):
                epoch = batch.partition_leader_epoch
                out.append((p, rec.offset, rec.key, rec.value, rec.timestamp, int(batch.timestamp_type),
                            tuple(rec.headers), epoch if epoch >= 0 else None))
    return sorted(out, key=lambda t: (t[0], t[1]))


def test_read_topic_is_the_engines_records_across_the_boundary(spark: Any, root: Path) -> None:
    plan = plan_topic({**_options(root), "topics": "c"})
    # each partition: its closed segments from Parquet, its active segment from the source, meeting exactly
    assert sorted((t, p) for t, p, _lo, _hi in plan.parquet_ranges) == [("c", 0), ("c", 1)]
    assert sorted((t, p) for t, p, _lo, _hi in plan.source_ranges) == [("c", 0), ("c", 1)]
    for (_t, p, lo, hi), (_t2, p2, lo2, hi2) in zip(sorted(plan.parquet_ranges), sorted(plan.source_ranges), strict=True):
        assert p == p2 and lo == 0 and 0 < hi == lo2 < hi2 == N
    assert plan.whole_files and len(plan.files) >= 2
    expected = _engine_rows(root, "c")
    assert len(expected) == 2 * N
    assert _rows(read_topic(spark, topics="c", **_options(root))) == expected


def test_read_committed_gives_the_same_rows_from_the_copy_and_the_source(spark: Any, root: Path) -> None:
    committed = _engine_rows(root, "tx", FetchIsolation.TXN_COMMITTED)
    uncommitted = _engine_rows(root, "tx")
    assert len(uncommitted) == 6 * 15 and len(committed) == 3 * 15 + 9
    plan = plan_topic({**_options(root), "topics": "tx"})
    assert plan.parquet_ranges and plan.source_ranges
    # the copy keeps the aborted records, marked
    directory = partition_dir(columnar_root(LogConfig.from_properties(local_tier_props(root))), "tx", 0)  # type: ignore[arg-type]
    manifest = read_manifest(directory)
    assert manifest is not None and len(manifest.files) >= 2
    marked = pq.read_table([directory / f.name for f in manifest.files], columns=["value", "aborted"]).to_pylist()
    assert {r["value"][:2] for r in marked if r["aborted"]} == {b"r1", b"r3"}
    assert not any(r["aborted"] for r in marked if r["value"].startswith((b"r0", b"r2", b"plain")))
    assert _rows(read_topic(spark, topics="tx", isolationLevel="read_committed", **_options(root))) == committed
    assert _rows(read_topic(spark, topics="tx", **_options(root))) == uncommitted
    source = spark.read.format("tiered").options(**_options(root), topics="tx", isolationLevel="read_committed").load()
    assert _rows(source) == committed


def test_offsets_timestamps_and_filters_across_the_boundary(spark: Any, root: Path) -> None:
    expected = _engine_rows(root, "c")
    boundary = plan_topic({**_options(root), "topics": "c"}).source_ranges[0][2]
    starting = json.dumps({"c": {"0": 5000, "1": boundary + 3}})
    ending = json.dumps({"c": {"0": boundary + 100, "1": N - 1}})
    got = _rows(read_topic(spark, topics="c", startingOffsets=starting, endingOffsets=ending, **_options(root)))
    assert got == [r for r in expected if (r[0] == 0 and 5000 <= r[1] < boundary + 100)
                   or (r[0] == 1 and boundary + 3 <= r[1] < N - 1)]
    df = read_topic(spark, topics="c", **_options(root)).where(f"offset >= 100 AND offset < {boundary + 50}")
    assert _rows(df) == [r for r in expected if 100 <= r[1] < boundary + 50]
    ts = T0 + 10_000 * 10
    got = _rows(read_topic(spark, topics="c", startingTimestamp=str(ts), **_options(root)))
    assert got == [r for r in expected if r[4] >= ts]


def test_an_end_inside_a_columnar_file_is_not_read_past(spark: Any, root: Path) -> None:
    # startingOffsets at the copy's first offset (earliest) and endingOffsets inside a file: the file is not read
    # whole (it used to be: the last file's last offset compared was the one already cut to the end)
    expected = _engine_rows(root, "c")
    ending = json.dumps({"c": {"0": 5000, "1": 77}})
    plan = plan_topic({**_options(root), "topics": "c", "endingOffsets": ending})
    assert not plan.source_ranges and not plan.whole_files
    got = _rows(read_topic(spark, topics="c", startingOffsets="earliest", endingOffsets=ending, **_options(root)))
    assert got == [r for r in expected if r[1] < (5000 if r[0] == 0 else 77)]
    ts = T0 + 3000 * 10
    got = _rows(read_topic(spark, topics="c", endingTimestamp=str(ts), **_options(root)))
    source = _rows(spark.read.format("tiered").options(**_options(root), topics="c", endingTimestamp=str(ts),
                                                       columnarCopy="false").load())
    assert got == source == [r for r in expected if r[4] < ts]


def test_read_topic_with_columnar_copy_false_reads_the_log_only(spark: Any, root: Path) -> None:
    plan = plan_topic({**_options(root), "topics": "c", "columnarCopy": "false"})
    assert not plan.files and sorted(r[1] for r in plan.source_ranges) == [0, 1]
    assert _rows(read_topic(spark, topics="c", columnarCopy=False, **_options(root))) == _engine_rows(root, "c")


def test_a_damaged_manifest_is_named_with_the_way_around_it(root: Path, tmp_path: Path) -> None:
    from tiered.columnar.manifest import ColumnarManifestError

    copy = tmp_path / "copy"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("cache"))
    manifest = copy / "remote-columnar" / "c-0" / "_manifest.json"
    manifest.write_bytes(manifest.read_bytes()[:40])  # torn by hand: no writer leaves it so
    with pytest.raises(ColumnarManifestError, match="not a columnar manifest") as err:
        plan_topic({**_options(copy), "topics": "c"})
    assert str(manifest) in str(err.value) and "columnarCopy=false" in str(err.value)
    assert not plan_topic({**_options(copy), "topics": "c", "columnarCopy": "false"}).files


def test_the_files_let_spark_prune_by_partition_offset_and_timestamp(spark: Any, root: Path) -> None:
    plan = plan_topic({**_options(root), "topics": "c"})
    for path in plan.files:
        meta = pq.ParquetFile(path).metadata
        names = meta.schema.to_arrow_schema().names
        previous = -1
        for i in range(meta.num_row_groups):
            group = meta.row_group(i)
            stats = {c: group.column(names.index(c)).statistics for c in ("partition", "offset", "timestamp")}
            assert all(s is not None and s.has_min_max for s in stats.values())
            assert stats["partition"].min == stats["partition"].max
            assert stats["offset"].min > previous  # row groups in offset order
            previous = stats["offset"].max
    df = read_topic(spark, topics="c", **_options(root)).where("offset < 100")
    scan = df._jdf.queryExecution().executedPlan().toString()
    assert "PushedFilters" in scan and "LessThan(offset,100)" in scan


def _append_and_copy(root: Path, first: int, last: int) -> None:
    """Records ``first``..``last - 1`` appended to partition 0 of ``c`` in a segment of their own, and a pass of the
    copy tasks (the columnar copy takes them too)."""
    with LogManager(LogConfig.from_properties(local_tier_props(root)), start_scheduler=False) as m:
        log = m.get_log("c", 0)
        assert log is not None
        _append_c(log, 0, first, last)
        log.roll()
        rlm = m.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        rlm.run_once(m.all_logs())


def test_appends_copies_and_merges_after_the_call_change_nothing(spark: Any, tmp_path: Path) -> None:
    _build(tmp_path, partitions=1, n=20_000)
    planned = plan_topic({**_options(tmp_path), "topics": "c"})
    assert len(planned.files) == 1 and planned.source_ranges  # a file, and the active segment's records
    df = read_topic(spark, topics="c", **_options(tmp_path))
    before = _engine_rows(tmp_path, "c")
    _append_and_copy(tmp_path, 20_000, 40_000)  # the source's part of the read is now in the columnar copy too
    now = read_manifest(partition_dir(tmp_path / "remote-columnar", "c", 0))
    # the new segments' rows went into a file that took the planned file's rows: it is retired, not yet deleted
    assert now is not None and now.next_offset == 40_000 and len(now.files) == 1
    assert Path(planned.files[0]).name in {r.name for r in now.retired} and Path(planned.files[0]).exists()
    # a plain read of the partition dir sees the published file only: each offset once, the retired one kept aside
    plain = spark.read.parquet(str(partition_dir(tmp_path / "remote-columnar", "c", 0))).select("offset").collect()
    assert sorted(r.offset for r in plain) == list(range(now.files[0].base_offset, 40_000))
    assert _rows(df) == before  # planned before: exactly the offsets of the call, once each
    after = _rows(read_topic(spark, topics="c", **_options(tmp_path)))
    assert after == _engine_rows(tmp_path, "c") and len(after) == 40_000
    assert plan_topic({**_options(tmp_path), "topics": "c"}).source_ranges == []


def test_a_file_deleted_between_the_plan_and_sparks_listing_is_planned_again(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass of the keeper between read_topic's plan and Spark's listing of the planned files merged a file into a
    new one and, with no delete delay, deleted it: read_topic failed with Spark's PATH_NOT_FOUND. It plans again."""
    from tiered.spark import columnar_read

    _build(tmp_path, partitions=1, n=20_000, extra={"remote.log.columnar.file.delete.delay.ms": "0"})
    real = columnar_read.plan_topic
    plans: list[Any] = []

    def plan_then_a_pass(options: dict[str, str]) -> Any:
        plan = real(options)
        plans.append(plan)
        if len(plans) == 1:
            _append_and_copy(tmp_path, 20_000, 40_000)
            assert not Path(plan.files[0]).exists()  # merged away and deleted at once
        return plan

    monkeypatch.setattr(columnar_read, "plan_topic", plan_then_a_pass)
    rows = _rows(read_topic(spark, topics="c", **_options(tmp_path)))
    assert len(plans) == 2 and plans[1].files != plans[0].files
    assert rows == _engine_rows(tmp_path, "c") and len(rows) == 40_000


def test_retention_nothing_below_the_log_start_and_retired_files_go(spark: Any, tmp_path: Path) -> None:
    _build(tmp_path, partitions=1, n=30_000,
           extra={"remote.log.columnar.file.delete.delay.ms": "0", "remote.log.columnar.file.bytes": "1"})
    props = local_tier_props(tmp_path)
    directory = partition_dir(columnar_root(LogConfig.from_properties(props)), "c", 0)  # type: ignore[arg-type]
    first = read_manifest(directory)
    assert first is not None and len(first.files) >= 2
    cut = first.files[0].end_offset - 10  # inside the first file: it stays, filtered
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        log = m.get_log("c", 0)
        assert log is not None
        log.delete_records(cut)
    expected = _engine_rows(tmp_path, "c")
    assert expected[0][1] == cut
    assert _rows(read_topic(spark, topics="c", **_options(tmp_path))) == expected
    cut = first.files[0].end_offset + 1  # past the first file: it goes at the next pass
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        log = m.get_log("c", 0)
        assert log is not None
        log.delete_records(cut)
        rlm = m.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        rlm.run_once(m.all_logs())
    now = read_manifest(directory)
    assert now is not None and now.files == first.files[1:] and not now.retired
    assert sorted(p.name for p in directory.glob("*.parquet")) == sorted(f.name for f in now.files)
    expected = _engine_rows(tmp_path, "c")
    assert expected[0][1] == cut
    assert _rows(read_topic(spark, topics="c", **_options(tmp_path))) == expected


def test_files_below_a_log_start_remote_retention_moved_leave_the_manifest_in_the_same_pass(tmp_path: Path) -> None:
    """The keeper ran before the pass's remote retention: files wholly below the log start that retention moved stayed
    in the manifest (and their links in the directory) until the next pass (a helper's pass). The expiration task
    retires them as it moves the log start."""
    _build(tmp_path, partitions=1, n=30_000, extra={
        "remote.log.columnar.file.delete.delay.ms": "0", "remote.log.columnar.file.bytes": "1",
        "retention.ms": "60000"})  # every record is an hour old: each remote segment expires in the pass that copies it
    props = local_tier_props(tmp_path)
    directory = partition_dir(columnar_root(LogConfig.from_properties(props)), "c", 0)  # type: ignore[arg-type]
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        log = m.get_log("c", 0)
        assert log is not None
        start = log.log_start_offset
    assert start > 0  # remote retention moved it, in the pass that made the copy
    now = read_manifest(directory)
    assert now is not None and all(f.base_offset >= start for f in now.files), (start, now.files)
    assert not list((directory / FILES_DIR).glob("*.parquet")) or all(
        int(p.name.split("-", 1)[0]) >= start for p in (directory / FILES_DIR).glob("*.parquet"))
    assert sorted(p.name for p in directory.glob("*.parquet")) == sorted(f.name for f in now.files)


def test_verify_finds_a_flipped_byte_and_a_missing_file(root: Path, tmp_path: Path) -> None:
    source = columnar_root(LogConfig.from_properties(local_tier_props(root)))
    assert source is not None
    copy = tmp_path / "columnar"
    shutil.copytree(source, copy)
    reports: list[PartitionReport] = []
    scrub_columnar(copy, reports)
    assert sorted(r.name for r in reports) == ["c-0", "c-1", "tx-0"] and not any(r.problems for r in reports)
    flipped = sorted((copy / "c-0" / FILES_DIR).glob("*.parquet"))[0]
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0x01
    flipped.write_bytes(bytes(data))
    for gone in (copy / "c-1" / FILES_DIR, copy / "c-1"):  # the file and its link: a copytree made them two files
        sorted(gone.glob("*.parquet"))[-1].unlink()
    reports = []
    scrub_columnar(copy, reports, topic="c")
    problems = {r.name: [p.message for p in r.problems] for r in reports}
    assert sorted(problems) == ["c-0", "c-1"] and len(problems["c-0"]) == 1 and len(problems["c-1"]) == 2
    assert "crc32c" in problems["c-0"][0] and problems["c-1"][0].startswith("missing")
    assert problems["c-1"][1].startswith("a read of the directory sees the wrong files: 1 missing")


@pytest.mark.parametrize(("remote_scanned", "why"), [
    (False, "not scanned here; --remote reads the remote segments"),
    (True, "no tier scrubbed holds their segments now"),
])
def test_verify_says_why_segments_were_not_compared(root: Path, remote_scanned: bool, why: str) -> None:
    """No segment records in the report (as when local retention deleted the segments and the remote ones were not
    read, or are gone too): the note says which, not to pass --remote when it was passed."""
    source = columnar_root(LogConfig.from_properties(local_tier_props(root)))
    assert source is not None
    reports: list[PartitionReport] = []
    scrub_columnar(source, reports, topic="c", remote_scanned=remote_scanned)
    notes = [n for r in reports for n in r.notes if n.startswith("columnar: the rows of 0 segment(s) compared")]
    assert len(notes) == 2 and all(why in n for n in notes), notes


def test_verify_compares_each_segments_rows_with_the_log(root: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """``tiered verify --remote`` counts each remote segment's records and the rows the copy holds of it: a row
    dropped from a file whose manifest was made to agree (rows, size, crc32c) is found only that way."""
    import crc32c
    import pyarrow.compute as pc

    from tiered.cli import main
    from tiered.columnar.manifest import write_manifest

    copy = tmp_path / "copy"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("cache"))
    config = tmp_path / "broker.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in local_tier_props(copy).items()))
    assert main(["--config", str(config), "verify", "--remote"]) == 0
    out = capsys.readouterr().out
    assert "c-0" in out and "compared with the log's records" in out and ", 0 not" not in out
    directory = copy / "remote-columnar" / "c-0"
    m = read_manifest(directory)
    assert m is not None
    f = m.files[0]
    victim = f.segments[-1].base_offset + 3
    table = pq.read_table(stored_file(directory, f.name))
    pq.write_table(table.filter(pc.not_equal(table.column("offset"), victim)), stored_file(directory, f.name),
                   compression="snappy")
    data = stored_file(directory, f.name).read_bytes()
    segments = (*f.segments[:-1], replace(f.segments[-1], rows=f.segments[-1].rows - 1))
    write_manifest(directory, replace(m, files=(replace(f, rows=f.rows - 1, size=len(data), crc32c=crc32c.crc32c(data),
                                                        segments=segments), *m.files[1:])))
    assert main(["--config", str(config), "verify", "--remote"]) == 1
    out = capsys.readouterr().out
    s = f.segments[-1]
    assert f"{s.rows - 1} rows of segment {s.segment_id} ({s.base_offset}-{s.end_offset}), but the segment has " \
           f"{s.rows} records" in out


def _rewritten(directory: Path, index: int, table: Any) -> None:
    """File ``index`` of the manifest in ``directory`` rewritten to ``table`` (as many rows), its manifest entry made
    to agree (size, crc32c, footer): what a keeper that decoded or marked rows wrongly would have written."""
    import crc32c

    from tiered.columnar.keeper import columnar_schema
    from tiered.columnar.manifest import footer_crc32c, write_manifest

    m = read_manifest(directory)
    assert m is not None
    f = m.files[index]
    path = stored_file(directory, f.name)
    path.unlink()
    (directory / f.name).unlink()
    pq.write_table(table.cast(columnar_schema()), path, compression="snappy", write_page_checksum=True)
    (directory / f.name).hardlink_to(path)
    data = path.read_bytes()
    files = list(m.files)
    files[index] = replace(f, size=len(data), crc32c=crc32c.crc32c(data), footer_crc32c=footer_crc32c(path))
    write_manifest(directory, replace(m, files=tuple(files)))


def test_verify_compares_the_rows_contents_and_aborted_marks_with_the_log(root: Path, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """verify compared only how many rows each segment had (a helper's pass): a copy whose values, or whose aborted
    marks, a keeper bug had written wrong, with a manifest that agrees, was OK. Each segment's rows are now
    compared with its records as the engine's decoder reads them, and its aborted marks with the transaction
    indexes of it and every later segment (with --remote all are read here)."""
    import pyarrow as pa

    from tiered.cli import main

    copy = tmp_path / "copy"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("cache"))
    config = tmp_path / "broker.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in local_tier_props(copy).items()))
    c0, tx = copy / "remote-columnar" / "c-0", copy / "remote-columnar" / "tx-0"
    m, t = read_manifest(c0), read_manifest(tx)
    assert m is not None and t is not None
    table = pq.read_table(stored_file(c0, m.files[0].name))
    values = table.column("value").to_pylist()
    values[7] = values[7][:-1] + b"?"  # one byte of one value
    _rewritten(c0, 0, table.set_column(table.schema.get_field_index("value"), "value", pa.array(values, pa.binary())))
    first, second = t.files[0], t.files[1]
    rows = pq.read_table(stored_file(tx, first.name))
    plain = next(i for i, v in enumerate(rows.column("value").to_pylist()) if v.startswith(b"plain"))
    marks = rows.column("aborted").to_pylist()
    marks[plain] = True  # a committed record marked aborted
    _rewritten(tx, 0, rows.set_column(rows.schema.get_field_index("aborted"), "aborted", pa.array(marks)))
    later = pq.read_table(stored_file(tx, second.name))
    marks = later.column("aborted").to_pylist()
    unmarked = marks.index(True)
    marks[unmarked] = False  # an aborted record not marked
    _rewritten(tx, 1, later.set_column(later.schema.get_field_index("aborted"), "aborted", pa.array(marks)))
    assert main(["--config", str(config), "verify", "--remote"]) == 1
    out = capsys.readouterr().out
    s = m.files[0].segments[0]
    assert f"the rows of segment {s.segment_id} ({s.base_offset}-{s.end_offset}) are not its records" in out, out
    offset = rows.column("offset")[plain].as_py()
    assert f"row {offset} of segment {first.segments[0].segment_id} is marked aborted, but the transaction indexes " \
           "abort no transaction of its batch" in out, out
    offset = later.column("offset")[unmarked].as_py()
    assert f"row {offset} of segment {second.segments[0].segment_id} is not marked aborted, but the transaction " \
           "indexes abort its batch's transaction" in out, out
    assert out.count("are not its records") == 1 and out.count("marked aborted") == 2, out


def test_a_file_kept_only_as_its_link_is_read_as_verify_reads_it(root: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A published file whose _files/ entry is gone while its link in the partition dir holds the same bytes (a copy
    made before _files/, kept by a data dir whose keeping is off): verify read the link and said OK, the planner
    refused the file as missing and told the user verify reports it (a helper's pass). Both read the link now."""
    from tiered.cli import main

    copy = tmp_path / "copy"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("cache"))
    config = tmp_path / "broker.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in local_tier_props(copy).items()))
    directory = copy / "remote-columnar" / "c-0"
    m = read_manifest(directory)
    assert m is not None and len(m.files) >= 1
    for f in m.files:
        stored_file(directory, f.name).unlink()
    assert main(["--config", str(config), "verify", "--topic", "c"]) == 0, capsys.readouterr()
    capsys.readouterr()
    plan = plan_topic({**_options(copy), "topics": "c"})
    planned = {Path(p).name: Path(p) for p in plan.files}
    assert {f.name for f in m.files} <= set(planned)
    assert all(planned[f.name].parent == directory for f in m.files)


def test_a_flipped_bit_in_a_columnar_file_fails_the_read_instead_of_returning_other_bytes(
        spark: Any, root: Path, tmp_path: Path) -> None:
    """Snappy has no checksum: without the pages' CRCs most flipped bits read back as other bytes. read_topic
    (Spark's reader) and the source's Parquet pieces (pyarrow) both check them."""
    from tiered.spark.options import parse_options
    from tiered.spark.planning import plan
    from tiered.spark.reader import read_piece

    copy = tmp_path / "copy"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("cache"))
    directory = copy / "remote-columnar" / "c-0"
    m = read_manifest(directory)
    assert m is not None
    file = stored_file(directory, m.files[0].name)
    meta = pq.ParquetFile(file).metadata
    value = meta.schema.to_arrow_schema().get_field_index("value")
    data = bytearray(file.read_bytes())
    data[meta.row_group(0).column(value).data_page_offset + 200] ^= 0x04  # inside the first page's snappy bytes
    file.write_bytes(bytes(data))
    with pytest.raises(Exception, match="CRC checksum verification failed") as err:
        read_topic(spark, topics="c", **_options(copy)).selectExpr("sum(length(value))").first()
    assert m.files[0].name in str(err.value)
    pieces = [p for p in plan(parse_options(_options(copy, topics="c"))) if p.parquet_path == str(file)]
    assert len(pieces) == 1
    with pytest.raises(CorruptRecordError, match="CRC checksum verification failed") as damaged:
        list(read_piece(pieces[0]))
    assert str(file) in str(damaged.value) and "columnarCopy=false" in str(damaged.value)  # named, with the way around


def test_a_flipped_bit_in_a_files_statistics_fails_the_plan_instead_of_hiding_rows(
        spark: Any, root: Path, tmp_path: Path) -> None:
    """The footer holds the row groups' offset statistics, by which a ranged read skips row groups; page checksums
    do not cover it. One bit lowering a row group's max offset hid its last rows from every ranged read, silently:
    a plan now checks each file's footer against the manifest (footer_crc32c), for read_topic and the source."""
    import struct

    from tiered.spark.options import parse_options
    from tiered.spark.planning import plan

    copy = tmp_path / "copy"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("cache"))
    directory = copy / "remote-columnar" / "c-0"
    m = read_manifest(directory)
    assert m is not None and m.files[0].footer_crc32c is not None
    f = m.files[0]
    file = stored_file(directory, f.name)
    data = bytearray(file.read_bytes())
    footer = len(data) - 8 - struct.unpack("<i", data[-8:-4])[0]
    at = max(i for i in range(footer, len(data) - 8) if data[i:i + 8] == struct.pack("<q", f.end_offset))
    bit = f.end_offset.bit_length() - 1  # its highest bit (>= 8: the file holds thousands of offsets)
    data[at + bit // 8] ^= 1 << (bit % 8)  # one bit of the max offset statistic: now lower by 2**bit
    file.write_bytes(bytes(data))
    meta = pq.ParquetFile(file).metadata
    offset = meta.schema.to_arrow_schema().get_field_index("offset")
    assert meta.row_group(meta.num_row_groups - 1).column(offset).statistics.max == f.end_offset - (1 << bit)
    ranged = {"startingOffsets": json.dumps({"c": {"0": f.end_offset - 100, "1": -2}}),
              "endingOffsets": json.dumps({"c": {"0": f.end_offset + 1, "1": 0}})}  # (c-1: nothing)
    with pytest.raises(Exception, match="does not match the columnar manifest: its footer has crc32c") as err:
        read_topic(spark, topics="c", **_options(copy), **ranged).count()
    assert f.name in str(err.value) and "columnarCopy=false" in str(err.value)
    with pytest.raises(Exception, match="its footer has crc32c"):
        plan(parse_options(_options(copy, topics="c", **ranged)))
    rows = read_topic(spark, topics="c", **_options(copy), **ranged, columnarCopy="false").count()
    assert rows == 101  # the way around it reads the log


def test_a_columnar_topic_that_cannot_work_is_refused_naming_both_settings(tmp_path: Path) -> None:
    s3 = LogConfig.from_properties({"log.dirs": str(tmp_path), "remote.log.storage.system.enable": "true",
                                    "remote.log.storage.manager.class.name": "s3", "rsm.config.bucket": "b"})
    with pytest.raises(ConfigError, match=r"remote\.log\.columnar\.enable.*remote\.log\.columnar\.dir"):
        check_topic(s3, s3.topic_config(COLUMNAR))
    local = LogConfig.from_properties(local_tier_props(tmp_path, **{"rsm.config.encryption.enabled": "true"}))
    with pytest.raises(ConfigError, match=r"remote\.log\.columnar\.enable.*rsm\.config\.encryption\.enabled"):
        check_topic(local, local.topic_config(COLUMNAR))
    with pytest.raises(ConfigError, match=r"remote\.log\.columnar\.enable.*remote\.storage\.enable"):
        check_topic(local, local.topic_config({"remote.log.columnar.enable": "true"}))
    chosen = LogConfig.from_properties({**local_tier_props(tmp_path), "remote.log.columnar.dir": f"file://{tmp_path}/p"})
    assert columnar_root(chosen) == tmp_path / "p"
    check_topic(chosen, chosen.topic_config(COLUMNAR))


def test_a_copy_enabled_later_is_made_from_the_remote_tier(tmp_path: Path) -> None:
    """Local retention deleted the segments before the topic asked for a columnar copy: it is read back from the
    remote tier (the keeper's other source), from the log start on."""
    props = local_tier_props(tmp_path)
    plain = {"remote.storage.enable": "true", "local.retention.bytes": "1", "file.delete.delay.ms": "0",
             "remote.log.columnar.file.delete.delay.ms": "0"}
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        log = m.get_or_create_log("c", 0, plain)
        _append_c(log, 0, 0, 30_000)
        rlm = m.remote_tier
        assert isinstance(rlm, RemoteLogManager) and rlm.columnar is not None
        rlm.run_once(m.all_logs())
        m.cleanup_logs()
        remote = rlm.finished_segments(rlm.topic_id_partition(log))
        assert len(remote) >= 2 and log.local_log_start_offset > remote[0].end_offset
        assert not (rlm.columnar.root / "c-0").exists()
        log = m.get_or_create_log("c", 0, {**plain, "remote.log.columnar.enable": "true"})
        assert log.config.remote_log_columnar_enable
        rlm.run_once(m.all_logs())
        manifest = read_manifest(partition_dir(rlm.columnar.root, "c", 0))
    assert manifest is not None
    assert [(s.base_offset, s.end_offset) for f in manifest.files for s in f.segments] == [
        (md.start_offset, md.end_offset) for md in remote]
    rows = pq.read_table([partition_dir(tmp_path / "remote-columnar", "c", 0) / f.name for f in manifest.files],
                         columns=["offset", "key", "value"]).to_pylist()
    expected = [(r[1], r[2], r[3]) for r in _engine_rows(tmp_path, "c") if r[1] <= remote[-1].end_offset]
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == expected


def test_a_file_whose_manifest_could_not_be_written_is_not_left_behind(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition dir where the manifest cannot be replaced (made read-only, a full disk): the pass fails, and the
    file it wrote for the manifest goes with it, pass after pass (the sweep of unnamed files runs once a process)."""
    from tiered.columnar import keeper

    props = local_tier_props(tmp_path)
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        log = m.get_or_create_log("c", 0, {**COLUMNAR, "remote.log.columnar.file.bytes": "1"})
        rlm = m.remote_tier
        assert isinstance(rlm, RemoteLogManager) and rlm.columnar is not None
        _append_c(log, 0, 0, 10_000)
        log.roll()
        rlm.run_once(m.all_logs())  # a manifest and its file, the sweep done
        directory = partition_dir(rlm.columnar.root, "c", 0)
        before = sorted(p.name for p in (directory / FILES_DIR).iterdir())
        assert len(before) == 1
        real = keeper.write_manifest

        def refused(where: Path, manifest: Any) -> None:
            raise PermissionError(13, "Permission denied", str(where / "_manifest.json.tmp"))

        monkeypatch.setattr(keeper, "write_manifest", refused)
        for first in (10_000, 20_000):
            _append_c(log, 0, first, first + 10_000)
            log.roll()
            rlm.run_once(m.all_logs())  # the copy's failure is logged; the segments are copied all the same
            assert sorted(p.name for p in (directory / FILES_DIR).iterdir()) == before
        monkeypatch.setattr(keeper, "write_manifest", real)
        rlm.run_once(m.all_logs())
        manifest = read_manifest(directory)
        remote = rlm.finished_segments(rlm.topic_id_partition(log))
    assert manifest is not None and manifest.next_offset == remote[-1].end_offset + 1  # caught up once it could
    assert {p.name for p in (directory / FILES_DIR).iterdir()} == manifest.names()


def test_a_deposed_data_dir_reads_the_new_owners_copy_only_below_its_local_start(tmp_path: Path) -> None:
    """A data dir that lost the partition to tiered attach, on a columnar dir shared with the new owner, went on
    appending its own records; its reads took the new owner's copy for offsets its own log holds, then its own log
    after: two histories in one DataFrame (a helper's pass). The manifest names the owner epoch of the data dir that
    last added a file; a data dir whose claim is older reads the copy only below its local log start (where its
    reads of the remote tier are the new owner's too), and its own log from there."""
    from dataclasses import replace

    from tiered.columnar.manifest import write_manifest

    _build(tmp_path, partitions=1, n=40_000, extra={"local.retention.bytes": str(3 * 2**19)})  # keeps copied ones
    props = local_tier_props(tmp_path)
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        log = m.get_log("c", 0)
        assert log is not None
        m.cleanup_logs()
        local_start, end, epoch = log.local_log_start_offset, log.log_end_offset, log.remote_log_state.owner_epoch
    assert 0 < local_start < end and epoch >= 0
    directory = partition_dir(columnar_root(LogConfig.from_properties(props)), "c", 0)  # type: ignore[arg-type]
    kept = read_manifest(directory)
    assert kept is not None and kept.owner_epoch == epoch  # the keeper names its data dir's claim
    options = {**_options(tmp_path), "topics": "c"}
    owned = plan_topic(options)
    assert owned.parquet_ranges == [("c", 0, 0, kept.next_offset)] and kept.next_offset is not None
    assert kept.next_offset > local_start  # the owner reads its copy past its local start

    write_manifest(directory, replace(kept, owner_epoch=epoch + 1))  # as a newer owner's keeper writes it
    deposed = plan_topic(options)
    assert deposed.parquet_ranges == [("c", 0, 0, local_start)]
    assert deposed.source_ranges == [("c", 0, local_start, end)]
