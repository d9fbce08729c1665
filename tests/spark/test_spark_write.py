"""Writes through ``format("tiered")``, ``tiered import`` and ``tiered export --incremental``, on a real local[2] Spark.

The oracles: the engine's own reads (a read-only LogManager's ``Log.read`` via the consumer's record walk),
kafka-python's murmur2 partitioner for keyed rows without a partition, and a full (not incremental) export.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from local import LogConfig, LogManager
from local.fetch import FetchIsolation
from local.records import CompressionType, MemoryRecords, SimpleRecord
from tiered.commands.consume import records_from

pytestmark = pytest.mark.integration

T0 = int(time.time() * 1000) - 3_600_000
SCHEMA = ("key binary, value binary, headers array<struct<key:string,value:binary>>, partition int, "
          "timestamp timestamp")


def _rows(n: int, tag: str) -> list[tuple[Any, ...]]:
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else b"%s-k%d" % (tag.encode(), i % 37)
        value = None if i % 11 == 0 else b"%s-v%d-" % (tag.encode(), i) + b"y" * (i % 50)
        headers = [("h", b"%d" % i), ("n", None)] if i % 7 == 0 else []
        partition = i % 2 if i % 3 == 0 else None
        stamp = datetime.datetime.fromtimestamp((T0 + i) / 1000, datetime.UTC)
        out.append((key, value, headers, partition, stamp))
    return out


def _engine(props: dict[str, str], topic: str) -> dict[int, list[tuple[Any, ...]]]:
    """Per partition, in offset order: (offset, key, value, headers, timestamp ms)."""
    out: dict[int, list[tuple[Any, ...]]] = {}
    with LogManager(LogConfig.from_properties(props), start_scheduler=False, read_only=True) as m:
        for t, p in sorted(m.partitions()):
            log = m.get_log(t, p)
            if t != topic or log is None:
                continue
            out[p] = [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp)
                      for _b, r in records_from(log, log.log_start_offset, FetchIsolation.HIGH_WATERMARK)]
    return out


def _write(df: Any, props: dict[str, str], **options: str) -> None:
    (df.write.format("tiered").mode("append").option("config.log.dirs", props["log.dirs"])
     .options(**options).save())


def _log_end_offsets(props: dict[str, str], topic: str) -> dict[int, int]:
    with LogManager(LogConfig.from_properties(props), start_scheduler=False, read_only=True) as m:
        return {p: m.get_log(t, p).log_end_offset for t, p in m.partitions() if t == topic}


def test_write_then_read_back(spark: Any, tmp_path: Path) -> None:
    from kafka.partitioner.default import murmur2

    props = {"log.dirs": str(tmp_path / "data")}
    rows = _rows(3000, "a")
    df = spark.createDataFrame(rows, SCHEMA).repartition(3)
    _write(df, props, topic="w", numPartitions="2", compression="zstd", batchSize="4096")
    got = _engine(props, "w")
    assert sorted(got) == [0, 1]
    for recs in got.values():
        assert [r[0] for r in recs] == list(range(len(recs)))  # contiguous offsets from 0
    flat = sorted(((r[1], r[2], r[3], r[4]) for recs in got.values() for r in recs), key=repr)
    want = sorted(((k, v, tuple(h), int(ts.timestamp() * 1000)) for k, v, h, _p, ts in rows), key=repr)
    assert flat == want
    where = {(r[1], r[2], r[4]): p for p, recs in got.items() for r in recs}
    for k, v, _h, p, ts in rows:
        expected = p if p is not None else (murmur2(k) & 0x7FFFFFFF) % 2 if k is not None else None
        if expected is not None:
            assert where[(k, v, int(ts.timestamp() * 1000))] == expected
    with LogManager(LogConfig.from_properties(props), start_scheduler=False, read_only=True) as m:
        batches = [b for p in (0, 1) for b in m.get_log("w", p).batches_from(0, FetchIsolation.HIGH_WATERMARK)]
    assert all(b.compression_type == CompressionType.ZSTD for b in batches)
    assert len(batches) >= 3000 * 60 // 4096 // 2  # batchSize held (about 60 bytes a record)
    # the source reads back what the engine reads; a second write appends after the first
    back = spark.read.format("tiered").option("config.log.dirs", props["log.dirs"]).option("topics", "w").load()
    assert back.count() == 3000
    _write(spark.createDataFrame(_rows(500, "b"), SCHEMA).selectExpr("value", "key"), props, topic="w")
    again = _engine(props, "w")
    assert sum(len(v) for v in again.values()) == 3500
    assert all(again[p][: len(got[p])] == got[p] for p in (0, 1))
    with pytest.raises(Exception, match="append-only"):
        df.write.format("tiered").mode("overwrite").option("config.log.dirs", props["log.dirs"]).option(
            "topic", "w").save()
    with pytest.raises(Exception, match=r"does not exist.*numPartitions"):
        _write(df, props, topic="missing")
    with pytest.raises(Exception, match="unknown column extra"):
        _write(df.withColumn("extra", df["partition"]), props, topic="w")


def test_an_aborted_job_leaves_nothing_visible(spark: Any, tmp_path: Path) -> None:
    props = {"log.dirs": str(tmp_path / "data")}
    _write(spark.createDataFrame(_rows(100, "a"), SCHEMA), props, topic="x", numPartitions="2")
    before = _log_end_offsets(props, "x")
    assert sum(before.values()) == 100

    # four tasks on two cores: the last (ids 3000-3999) starts once another has staged its batches, and fails at
    # its last row, after staging batches of its own (batchSize 256)
    df = spark.range(0, 4000, numPartitions=4).selectExpr(
        "CASE WHEN id = 3999 THEN raise_error('planted task failure') ELSE CAST(CAST(id AS STRING) AS BINARY) END "
        "AS value")
    with pytest.raises(Exception, match="planted task failure"):
        _write(df, props, topic="x", batchSize="256")
    assert _log_end_offsets(props, "x") == before
    staging = tmp_path / "data.spark-staging"
    assert not staging.exists()
    back = spark.read.format("tiered").option("config.log.dirs", props["log.dirs"]).option("topics", "x").load()
    assert back.count() == 100


def _build_source(props: dict[str, str], topic: str, start: int, n: int) -> None:
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        for p in range(2):
            log = m.get_or_create_log(topic, p, {"segment.bytes": "1048576"})
            for first in range(start, start + n, 100):
                log.append(MemoryRecords.build(
                    [SimpleRecord(T0 + i * 1000, None if i % 4 == 0 else b"k%d" % i, b"e%d-%d-" % (p, i) + b"z" * 500,
                                  headers=[("i", b"%d" % i)] if i % 9 == 0 else [])
                     for i in range(first, first + 100)], CompressionType.LZ4))


def test_import_reverses_export(spark: Any, tmp_path: Path) -> None:
    from tiered.cli import main

    src = {"log.dirs": str(tmp_path / "src")}
    _build_source(src, "e", 0, 2000)
    for fmt in ("parquet", "jsonl"):
        out, dst = tmp_path / f"out-{fmt}", {"log.dirs": str(tmp_path / f"dst-{fmt}")}
        assert main(["export", "--log-dirs", src["log.dirs"], "--topic", "e", "--format", fmt, str(out)]) == 0
        assert main(["import", "--log-dirs", dst["log.dirs"], "--topic", "f", "--format", fmt, "--compression", "gzip",
                     str(out)]) == 0
        want, got = _engine(src, "e"), _engine(dst, "f")
        assert sorted(got) == [0, 1]
        for p in (0, 1):
            assert got[p] == want[p]  # same offsets too: the topic was new and the order is the exported offsets'


def test_incremental_export_exports_only_new_records(spark: Any, tmp_path: Path) -> None:
    import pyarrow.dataset as ds

    from tiered.cli import main
    from tiered.commands.export import state_path

    src, out, args = _incremental_export(tmp_path, 1500)
    state = json.loads(Path(state_path(str(out))).read_text())
    assert state["next_offsets"] == {"g": {"0": 1500, "1": 1500}}
    first = ds.dataset(str(out), format="parquet", partitioning="hive").to_table().num_rows
    assert first == 3000
    _build_source(src, "g", 1500, 700)
    assert main(args) == 0
    assert json.loads(Path(state_path(str(out))).read_text())["next_offsets"] == {"g": {"0": 2200, "1": 2200}}
    full = tmp_path / "full"
    assert main(["export", "--log-dirs", src["log.dirs"], "--topic", "g", str(full)]) == 0

    def rows(path: Path) -> list[tuple[Any, ...]]:
        t = ds.dataset(str(path), format="parquet", partitioning="hive").to_table()
        cols = [t.column(c).to_pylist() for c in ("partition", "offset", "key", "value")]
        return sorted(zip(*cols, strict=True), key=repr)

    inc, whole = rows(out), rows(full)
    assert len(inc) == len(set(inc)) == 4400  # nothing exported twice
    assert inc == whole
    assert main(args) == 0  # nothing new: nothing added
    assert rows(out) == whole
    assert main(["export", "--log-dirs", src["log.dirs"], "--topic", "g", "--incremental", "--from", "5",
                 str(out)]) == 2


def _exported(path: Path) -> list[tuple[Any, ...]]:
    import pyarrow.dataset as ds

    t = ds.dataset(str(path), format="parquet", partitioning="hive").to_table()
    return sorted(zip(*[t.column(c).to_pylist() for c in ("partition", "offset", "value")], strict=True))


@pytest.mark.parametrize("stopped", ["before_pending", "mid_move"])
def test_an_incremental_run_stopped_anywhere_leaves_each_offset_once(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stopped: str) -> None:
    """A run killed after Spark had put its files in OUT but before the state said so was exported again by the next
    run: 1000 offsets twice (a helper's SIGKILL loop). The job now writes a staging directory, the state records the
    run as pending before its files are renamed into OUT, and the next run finishes a pending run (or removes a
    staging directory no state names). The stop is a BaseException at the two places a kill matters."""
    import tiered.commands.export as export
    from tiered.cli import main

    src, out, args = _incremental_export(tmp_path, 1500)
    _build_source(src, "g", 1500, 700)

    class Killed(BaseException):
        pass

    if stopped == "before_pending":
        def stop(*_a: Any) -> None:
            raise Killed
        monkeypatch.setattr(export, "_commit_run", stop)
    else:
        def move_one_then_stop(staged: str, target: str) -> None:
            first = export._data_files(staged)[0]
            os.makedirs(os.path.dirname(os.path.join(target, first)), exist_ok=True)
            os.rename(os.path.join(staged, first), os.path.join(target, first))
            raise Killed
        monkeypatch.setattr(export, "_move_into", move_one_then_stop)
    with pytest.raises(Killed):
        main(args)
    monkeypatch.undo()
    state = json.loads(Path(export.state_path(str(out))).read_text())
    assert ("pending" in state) == (stopped == "mid_move")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".inc.export-")]  # the staging dir is left
    assert main(args) == 0
    assert json.loads(Path(export.state_path(str(out))).read_text()) == {
        "format": "parquet", "next_offsets": {"g": {"0": 2200, "1": 2200}}, "topic": "g"}
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".inc.export-")]
    full = tmp_path / "full"
    assert main(["export", "--log-dirs", src["log.dirs"], "--topic", "g", str(full)]) == 0
    inc = _exported(out)
    assert len(inc) == len(set(inc)) == 4400 and inc == _exported(full)


def test_an_incremental_export_past_retention_says_so_before_spark_and_goes_on_when_told(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Retention passed the offset an incremental export stopped at: the error said "set failOnDataLoss=false",
    which export had no way to take, so the export was stuck for good (a helper's pass). It is said before Spark
    starts, naming the offsets, and --no-fail-on-data-loss goes on from the log start."""
    from tiered.cli import main

    src, out, args = _incremental_export(tmp_path, 1000)
    _build_source(src, "g", 1000, 1000)
    with LogManager(LogConfig.from_properties(src), start_scheduler=False) as m:
        log = m.get_log("g", 0)
        assert log is not None
        log.delete_records(1500)
    capsys.readouterr()
    assert main(args) == 1
    err = capsys.readouterr().err
    assert ("g-0: the last incremental export stopped at offset 1000, but the log now starts at 1500 (offsets "
            "1000..1499 were deleted by retention): pass --no-fail-on-data-loss to export from 1500 on") in err, err
    assert main([*args[:-1], "--no-fail-on-data-loss", str(out)]) == 0
    offsets = {p: sorted(o for q, o, _v in _exported(out) if q == p) for p in (0, 1)}
    assert offsets[0] == [*range(1000), *range(1500, 2000)] and offsets[1] == list(range(2000))


def test_an_export_of_nothing_is_refused_and_leaves_nothing(spark: Any, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """--from 10 --to 5 and --from past the end failed in Spark (UNABLE_TO_INFER_SCHEMA, counting what was written)
    and left an OUT of only _SUCCESS; --from @-5 failed after Spark started, naming its startingTimestamp option (a
    helper's pass)."""
    from tiered.cli import main

    src = {"log.dirs": str(tmp_path / "src")}
    _build_source(src, "g", 0, 200)
    out = tmp_path / "out"
    base = ["export", "--log-dirs", src["log.dirs"], "--topic", "g"]
    capsys.readouterr()
    for extra, message in ((["--from", "10", "--to", "5"], "--from 10 is not before --to 5: nothing to export"),
                           (["--from", "@-5"], "--from '@-5': epoch milliseconds are >= 0"),
                           (["--from", "1969-12-31T23:00:00"], "before 1970-01-01T00:00Z")):
        assert main([*base, *extra, str(out)]) == 2
        assert message in capsys.readouterr().err
    assert main([*base, "--from", "5000", str(out)]) == 1
    assert "no record of g in the range asked: nothing written" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def _incremental_export(tmp_path: Path, n: int) -> tuple[dict[str, str], Path, list[str]]:
    """Topic g of ``n`` records a partition, exported once with --incremental: its broker props, OUT and the
    command's arguments (for the next runs)."""
    from tiered.cli import main

    src = {"log.dirs": str(tmp_path / "src")}
    _build_source(src, "g", 0, n)
    out = tmp_path / "inc"
    args = ["export", "--log-dirs", src["log.dirs"], "--topic", "g", "--incremental", str(out)]
    assert main(args) == 0
    return src, out, args


def _build_incompressible(props: dict[str, str], topic: str, per_partition: int) -> None:
    import random

    rnd = random.Random(28)
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        for p in range(2):
            log = m.get_or_create_log(topic, p)
            for first in range(0, per_partition, 100):
                log.append(MemoryRecords.build(
                    [SimpleRecord(T0 + i, b"k%d" % i, rnd.randbytes(1000 + i % 200),
                                  headers=[("i", b"%d" % i)] if i % 9 == 0 else [])
                     for i in range(first, min(first + 100, per_partition))], CompressionType.ZSTD))


def test_import_of_a_multi_mib_export_with_defaults_and_one_mib_segments(spark: Any, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28: the import's default 1 MiB batches counted payload only (a partition above ~1 MiB failed with
    RecordTooLargeError), and its driver appended chunks above a 1 MiB segment.bytes."""
    from tiered.cli import main

    src = {"log.dirs": str(tmp_path / "src")}
    _build_incompressible(src, "big", 1500)  # 1.6 MiB of incompressible values in each of two partitions
    out = tmp_path / "out"
    assert main(["export", "--log-dirs", src["log.dirs"], "--topic", "big", str(out)]) == 0
    want = _engine(src, "big")
    for name, extra in (("defaults", []), ("small-segments", ["-o", "log.segment.bytes=1048576"])):
        dst = {"log.dirs": str(tmp_path / name)}
        assert main(["import", "--log-dirs", dst["log.dirs"], *extra, "--topic", "big", str(out)]) == 0, \
            capsys.readouterr().err
        assert _engine(dst, "big") == want
    with LogManager(LogConfig.from_properties({"log.dirs": str(tmp_path / "small-segments")}),
                    start_scheduler=False, read_only=True) as m:
        log = m.get_log("big", 0)
        assert log is not None and log.number_of_segments() >= 2


def test_export_and_import_check_their_inputs_before_spark(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from tiered.cli import main
    from tiered.commands import _spark

    def no_spark(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Spark was started")

    monkeypatch.setattr(_spark, "session", no_spark)
    data = tmp_path / "data"
    _build_source({"log.dirs": str(data)}, "e", 0, 100)
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.properties").write_text(f"log.dirs={data}\nlog.retention.ms=soon\n")
    cases = [
        (["export", "--log-dirs", str(data), "--topic", "nosuch", str(tmp_path / "o")], 1,
         f"tiered export: topic nosuch not found in {data}"),
        (["export", "--log-dirs", str(data), "--topic", "e,nosuch,other", str(tmp_path / "o")], 1,
         f"tiered export: topics nosuch, other not found in {data}"),
        (["export", "--config", str(tmp_path / "missing.properties"), "--topic", "e", str(tmp_path / "o")], 2,
         "tiered export: cannot read configuration file"),
        (["export", "--config", str(tmp_path / "bad.properties"), "--topic", "e", str(tmp_path / "o")], 2,
         "tiered export: Invalid value soon for configuration log.retention.ms"),
        (["export", "--log-dirs", str(data), "--topic", "e/..", str(tmp_path / "o")], 2,
         "tiered export: invalid topic name 'e/..'"),
        (["import", "--log-dirs", str(data), "--topic", "f", str(tmp_path / "nothing")], 2,
         f"tiered import: {tmp_path / 'nothing'}: no such directory"),
        (["import", "--log-dirs", str(data), "--topic", "f", str(tmp_path / "empty")], 2,
         f"tiered import: {tmp_path / 'empty'} holds no parquet data files"),
        (["import", "--config", str(tmp_path / "missing.properties"), "--topic", "f", str(tmp_path / "empty")], 2,
         "tiered import: cannot read configuration file"),
    ]
    for argv, code, message in cases:
        assert main(argv) == code, argv
        err = capsys.readouterr().err
        assert err.startswith(message) and err.count("\n") == 1, (argv, err)
    assert not (tmp_path / "o").exists()


def test_a_failed_export_leaves_no_output_and_says_why_in_one_line(spark: Any, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    import traceback

    from tiered.cli import main

    src = {"log.dirs": str(tmp_path / "src")}
    _build_source(src, "e", 0, 300)
    out = tmp_path / "out"
    assert main(["export", "--log-dirs", src["log.dirs"], "--topic", "e", "--format", "jsonl", str(out)]) == 0
    before = sorted(p.name for p in out.iterdir())
    segment = tmp_path / "src" / "e-1" / "00000000000000000000.log"
    raw = bytearray(segment.read_bytes())
    raw[100] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    segment.write_bytes(bytes(raw))
    capsys.readouterr()
    for argv in (["export", "--log-dirs", src["log.dirs"], "--topic", "e", str(tmp_path / "new")],
                 ["export", "--log-dirs", src["log.dirs"], "--topic", "e", "--overwrite", str(out)]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("tiered export: ") and "is corrupt" in err, err
        assert "Traceback" not in err and "\tat " not in err
    assert not (tmp_path / "new").exists()
    assert sorted(p.name for p in out.iterdir()) == before  # the failed --overwrite kept the old export
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src"]  # and left no staging dir beside it
    with caplog.at_level("ERROR", logger="tiered.cli"):
        assert main(["-v", "export", "--log-dirs", src["log.dirs"], "--topic", "e", str(tmp_path / "new")]) == 1
    logged = ["".join(traceback.format_exception(*r.exc_info)) for r in caplog.records if r.exc_info]
    assert any("PythonException" in text and "is corrupt" in text for text in logged)  # Spark's whole error


def test_a_failed_import_commit_keeps_nothing_and_says_why_in_one_line(spark: Any, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tiered.cli import main

    dst = {"log.dirs": str(tmp_path / "dst")}
    _build_source(dst, "f", 0, 200)
    before = _engine(dst, "f")
    exported = tmp_path / "in" / "partition=0"
    exported.mkdir(parents=True)
    now = int(time.time() * 1000)
    stamps = [now - 1000] * 999 + [now + 7_200_000]  # the last: beyond message.timestamp.after.max.ms (1 h)
    pq.write_table(pa.table({"value": pa.array([b"x%d" % i for i in range(1000)], pa.binary()),
                             "offset": pa.array(range(1000), pa.int64()),
                             "timestamp": pa.array(stamps, pa.timestamp("ms", tz="UTC"))}), exported / "a.parquet")
    capsys.readouterr()
    assert main(["import", "--log-dirs", dst["log.dirs"], "--topic", "f", "--batch-size", "1000",
                 str(tmp_path / "in")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "commit of the write to f failed at f-0 (InvalidTimestampError" in err and "nothing of it was kept" in err
    assert _engine(dst, "f") == before
    assert not (tmp_path / "dst.spark-staging").exists()
