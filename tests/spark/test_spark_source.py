"""The ``tiered`` Spark source against the engine's own reads, on a real local[2] Spark.

One data dir: topic ``t`` (2 partitions) spread over the remote tier (local-directory backend) and local
segments, topic ``codecs`` (every codec, headers, null keys and values), topic ``txn`` (committed and aborted
transactions). A second dir holds a segment that starts with legacy v0/v1 messages. The oracle is the engine:
``Log.read`` through a read-only LogManager, with the consumer's aborted-transaction rule
(``tiered.commands.consume.records_from``).
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local import LogConfig, LogManager
from local.fetch import FetchIsolation
from local.records import CompressionType, MemoryRecords, SimpleRecord
from local.records.legacy import build_legacy_message
from tests.logutil import local_tier_props
from tests.spark.streams import run_to_parquet
from tiered.commands.consume import records_from

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
T0 = int(time.time() * 1000) - 3_600_000  # recent: remote retention must not expire the data
N = 24_000  # records per partition of topic t: 3+ segments of 1 MiB each
LIMIT_S = 300  # a bound on a stream query that must end by itself (not a timing)
COLUMNS = ("partition, offset, key, value, unix_millis(timestamp) AS ts, timestampType, headers, leaderEpoch")


_props = local_tier_props  # the embedded local-directory tier, 1 MiB segments


def _value(i: int) -> bytes:
    return b"value-%08d-" % i + b"x" * (60 + i % 97)


def _build(root: Path) -> None:
    with LogManager(LogConfig.from_properties(_props(root)), start_scheduler=False) as m:
        for p in range(2):
            log = m.get_or_create_log("t", p, {"remote.storage.enable": "true", "local.retention.bytes": str(MIB)})
            for first in range(0, N, 200):
                recs = [SimpleRecord(T0 + i * 10 + p, None if i % 7 == 0 else b"k%d" % i, _value(i),
                                     headers=[("h", b"%d" % i)] if i % 13 == 0 else [])
                        for i in range(first, first + 200)]
                log.append(MemoryRecords.build(recs, CompressionType.LZ4 if first % 1000 == 0 else CompressionType.NONE))
        log = m.get_or_create_log("codecs", 0)
        i = 0
        for codec in CompressionType:
            for size in (1, 5, 300):
                recs = []
                for _ in range(size):
                    key = None if i % 3 == 0 else b"key-%d" % i
                    value = None if i % 5 == 0 else (b"%d" % i) * (i % 40)
                    headers = [("a", b"1"), ("b", None), ("ü", b"\x00\xff")] if i % 4 == 0 else []
                    recs.append(SimpleRecord(T0 + i, key, value, headers=headers))
                    i += 1
                log.append(MemoryRecords.build(recs, codec))
        log = m.get_or_create_log("txn", 0)
        for round_ in range(6):
            pid, commit = 100 + round_, round_ % 2 == 0
            for seq in range(3):
                recs = [SimpleRecord(T0 + round_ * 100 + seq * 10 + j, b"p%d" % pid, b"r%d-%d-%d" % (round_, seq, j))
                        for j in range(4)]
                log.append(MemoryRecords.build(recs, producer_id=pid, producer_epoch=0, base_sequence=seq * 4,
                                               is_transactional=True))
                log.append(MemoryRecords.build([SimpleRecord(T0, None, b"plain-%d-%d" % (round_, seq))]))
            log.append(MemoryRecords.end_transaction_marker(pid, 0, commit=commit))
        rlm = m.remote_tier
        assert rlm is not None
        rlm.run_once(m.all_logs())
        m.cleanup_logs()
        t0 = m.get_log("t", 0)
        assert t0 is not None and t0.log_start_offset == 0 < t0.local_log_start_offset < N


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("spark-data")
    _build(root)
    return root


def _tier_copy(root: Path, tmp_path: Path) -> Path:
    """A copy of the module's data dir and remote tier, for a test that changes them."""
    copy = tmp_path / "copy"
    shutil.copytree(root / "data", copy / "data")
    shutil.copytree(root / "remote", copy / "remote")
    return copy


def _options(root: Path, **extra: str) -> dict[str, str]:
    opts = {f"config.{k}": v for k, v in _props(root).items()}
    opts["cacheDir"] = str(root / "cache")
    opts.update(extra)
    return opts


def _load(spark: Any, root: Path, **extra: str) -> Any:
    return spark.read.format("tiered").options(**_options(root, **extra)).load()


def _spark_rows(df: Any, where: str | None = None) -> list[tuple[Any, ...]]:
    df = df.selectExpr(*[c.strip() for c in COLUMNS.split(",")])
    if where:
        df = df.where(where)
    out = []
    for r in df.collect():
        headers = tuple((h["key"], h["value"]) for h in r["headers"])
        out.append((r["partition"], r["offset"], r["key"], r["value"], r["ts"], r["timestampType"], headers,
                    r["leaderEpoch"]))
    return sorted(out, key=lambda t: (t[0], t[1]))


def _engine_rows(root: Path, topic: str, isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
                 data_dir: str = "data", props: dict[str, str] | None = None) -> list[tuple[Any, ...]]:
    props = props or _props(root)
    out = []
    with LogManager(LogConfig.from_properties(props), start_scheduler=False, read_only=True) as m:
        for t, p in m.partitions():
            if t != topic:
                continue
            log = m.get_log(t, p)
            assert log is not None
            for batch, rec in records_from(log, log.log_start_offset, isolation):
                epoch = batch.partition_leader_epoch
                ts_type = int(batch.timestamp_type) if batch.magic == 2 else (
                    -1 if batch.magic == 0 else int(batch.timestamp_type))
                out.append((p, rec.offset, rec.key, rec.value, rec.timestamp if rec.timestamp >= 0 else None, ts_type,
                            tuple(rec.headers), epoch if epoch >= 0 else None))
    return sorted(out, key=lambda t: (t[0], t[1]))


def _remote_object(root: Path, suffix: str = ".log") -> Path:
    return sorted(p for p in (root / "remote").rglob(f"*{suffix}") if "/t-" in p.as_posix())[0]


# ------------------------------------------------------------------------------------------------------------

def test_both_tiers_match_the_engine_and_tiers_select_each(spark: Any, root: Path) -> None:
    expected = _engine_rows(root, "t")
    assert len(expected) == 2 * N
    df = _load(spark, root, topics="t")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>,leaderEpoch:int>")
    assert _spark_rows(df) == expected
    with LogManager(LogConfig.from_properties(_props(root)), start_scheduler=False, read_only=True) as m:
        log = m.get_log("t", 0)
        assert log is not None
        local_start = log.local_log_start_offset
        rlm = log.remote_tier
        assert rlm is not None
        remote_end = max(md.end_offset for md in rlm.finished_segments(rlm.topic_id_partition(log)))
    assert 0 < local_start <= remote_end + 1
    counts = {r["partition"]: (r["n"], r["lo"], r["hi"]) for r in _load(spark, root, topics="t", tiers="remote")
              .groupBy("partition").agg({"offset": "min"}).withColumnRenamed("min(offset)", "lo")
              .join(_load(spark, root, topics="t", tiers="remote").groupBy("partition")
                    .agg({"offset": "max", "*": "count"}).withColumnRenamed("max(offset)", "hi")
                    .withColumnRenamed("count(1)", "n"), "partition").collect()}
    assert counts[0] == (remote_end + 1, 0, remote_end)
    local = _load(spark, root, topics="t", tiers="local").where("partition = 0")
    assert local.selectExpr("min(offset)", "max(offset)", "count(*)").first() == (local_start, N - 1, N - local_start)


def test_small_pieces_split_at_batch_boundaries_read_the_same(spark: Any, root: Path) -> None:
    whole = _load(spark, root, topics="t")
    split = _load(spark, root, topics="t", maxBytesPerPartition="65536")
    assert split.rdd.getNumPartitions() > 4 * whole.rdd.getNumPartitions()
    agg = ["count(*)", "sum(offset)", "sum(length(value))", "sum(crc32(value))", "sum(crc32(coalesce(key, X'00')))"]
    assert split.selectExpr(*agg).first() == whole.selectExpr(*agg).first()
    assert split.selectExpr("count(DISTINCT partition, offset)").first()[0] == 2 * N


def _covered(groups: list[list[Any]]) -> dict[int, list[tuple[int, int]]]:
    """Per partition, the offset ranges the groups' pieces read, in the order the tasks read them."""
    out: dict[int, list[tuple[int, int]]] = {}
    for group in groups:
        assert len({(p.topic, p.partition) for p in group}) == 1  # a task reads one topic partition
        for p in group:
            out.setdefault(p.partition, []).append((p.from_offset, p.until_offset))
    return out


def _extents(groups: list[list[Any]]) -> dict[tuple[int, Any], list[tuple[int, int]]]:
    """Per partition and segment, the byte ranges the groups read, in task order, joined where one ends as the
    next starts: equal for two plans that read the same bytes once each."""
    out: dict[tuple[int, Any], list[tuple[int, int]]] = {}
    for group in groups:
        for p in group:
            ranges = out.setdefault((p.partition, p.local_path or p.remote_metadata), [])
            if ranges and ranges[-1][1] == p.start_position:
                ranges[-1] = (ranges[-1][0], p.end_position)
            else:
                ranges.append((p.start_position, p.end_position))
    return out


def test_small_segments_are_packed_into_one_task_per_partition_up_to_max_bytes(root: Path) -> None:
    from tiered.spark.options import parse_options
    from tiered.spark.planning import input_partitions, pack, piece_bytes, plan

    opts = parse_options(_options(root, topics="t"))
    pieces = plan(opts)
    assert len(pieces) > 4  # 1 MiB segments, local and remote
    groups = input_partitions(opts)
    assert len(groups) == 2 and _covered(groups) == _covered([[p] for p in pieces])
    assert any(p.remote_metadata is not None for p in groups[0]) and any(p.local_path for p in groups[0])
    # up to maxBytesPerPartition: no group reads more, and no two neighbours of a partition would fit in one
    limit = 2 * max(piece_bytes(p) or 0 for p in pieces)
    small = pack(pieces, limit)
    assert len(small) > 2 and _covered(small) == _covered(groups)
    sizes = [sum(piece_bytes(p) or 0 for p in g) for g in small]
    assert all(n <= limit for n in sizes)
    assert all(a + (piece_bytes(b[0]) or 0) > limit for a, g, b in zip(sizes, small, small[1:])
               if g[0].partition == b[0].partition)
    # a piece larger than the limit, and a piece of unknown size (a file of the columnar copy), are tasks of their own
    assert pack(pieces, 1) == [[p] for p in pieces]
    parquet = dataclasses.replace(pieces[0], parquet_path="/x.parquet", end_position=None)
    assert pack([pieces[0], parquet, pieces[1]], 2**40) == [[pieces[0]], [parquet], [pieces[1]]]


def test_min_partitions_plans_smaller_parts_where_packing_makes_too_few(root: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import tiered.spark.planning as planning
    from tiered.spark.options import SparkSourceOptionError, parse_options

    whole = planning.input_partitions(parse_options(_options(root, topics="t")))
    monkeypatch.setattr(planning, "MIN_SPLIT_BYTES", 64 * 1024)  # the test's topic is a few MiB
    many = planning.input_partitions(parse_options(_options(root, topics="t", minPartitions="12")))
    assert len(many) >= 12 and _covered(whole) != _covered(many)
    assert _extents(many) == _extents(whole)  # the same bytes of the same segments, each once, in order
    # already enough: planned as without it
    assert _covered(planning.input_partitions(parse_options(_options(root, topics="t", minPartitions="2")))) == \
        _covered(whole)
    for bad in ("0", "-3", "two"):
        with pytest.raises(SparkSourceOptionError, match=f"minPartitions={bad!r}|minPartitions={bad}"):
            parse_options(_options(root, topics="t", minPartitions=bad))


def test_packed_reads_through_spark_and_min_partitions_cuts_no_task_below_4_mib(spark: Any, root: Path) -> None:
    agg = ["count(*)", "sum(offset)", "sum(crc32(value))"]
    whole = _load(spark, root, topics="t")
    assert whole.rdd.getNumPartitions() == 2  # one task per topic partition: its 1 MiB segments packed
    assert whole.selectExpr(*agg).first() == _load(spark, root, topics="t", maxBytesPerPartition="1048576") \
        .selectExpr(*agg).first()
    # a topic of a few MiB: minPartitions would cut parts smaller than MIN_SPLIT_BYTES, so it plans as without it
    fewer = _load(spark, root, topics="t", minPartitions="3")
    assert fewer.rdd.getNumPartitions() == 2
    assert fewer.selectExpr(*agg).first() == whole.selectExpr(*agg).first()


def test_local_sessions_python_workers_talk_over_unix_domain_sockets(spark: Any) -> None:
    """local_session's workers get their input without the TCP socket's ~40 ms wait per task."""
    assert spark.conf.get("spark.python.unix.domain.socket.enabled") == "true"
    seen = spark.sparkContext.parallelize(range(4), 2).map(
        lambda _: os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "unset").lower()).distinct().collect()
    assert seen == ["true"]


@pytest.mark.parametrize(("conf", "expected"), [
    ({}, "/tmp"),
    ({"spark.driver.extraJavaOptions": "-Xmx1g -Djava.io.tmpdir=/var/tmp/x -Dy=z"}, "/var/tmp/x"),
    ({"spark.driver.extraJavaOptions": "-Djava.io.tmpdir=/" + "d" * 60}, "/" + "d" * 60),  # 61 bytes: the longest
    ({"spark.driver.extraJavaOptions": "-Djava.io.tmpdir=/" + "d" * 61}, None),
    ({"spark.python.unix.domain.socket.dir": "/s", "spark.driver.extraJavaOptions": "-Djava.io.tmpdir=/" + "d" * 90},
     "/s"),
    ({"spark.python.unix.domain.socket.dir": "/" + "é" * 31}, None),  # bytes, not characters
])
def test_unix_sockets_only_where_their_path_fits(conf: dict[str, str], expected: str | None) -> None:
    from tiered.spark import unix_socket_dir

    assert unix_socket_dir(conf) == expected


def test_every_codec_headers_and_nulls(spark: Any, root: Path) -> None:
    expected = _engine_rows(root, "codecs")
    assert len(expected) == len(CompressionType) * 306
    assert any(r[2] is None for r in expected) and any(r[3] is None for r in expected)
    assert any(len(r[6]) == 3 for r in expected)
    assert _spark_rows(_load(spark, root, topics="codecs")) == expected


def test_legacy_v0_v1_messages(spark: Any, tmp_path: Path) -> None:
    d = tmp_path / "data" / "legacy-0"
    d.mkdir(parents=True)
    inner = build_legacy_message(0, b"i0", b"inner0", magic=1, timestamp=T0) + build_legacy_message(
        1, None, b"inner1", magic=1, timestamp=T0 + 1)
    wrapper = build_legacy_message(3, None, CompressionType.GZIP.compress(inner), magic=1, timestamp=T0 + 1,
                                   attributes=int(CompressionType.GZIP))
    data = (build_legacy_message(0, b"k0", b"v0", magic=0) + build_legacy_message(1, None, b"v1", magic=1, timestamp=T0)
            + wrapper + bytes(MemoryRecords.build([SimpleRecord(T0 + 5, b"k4", None)], base_offset=4)))
    (d / "00000000000000000000.log").write_bytes(data)
    props = {"log.dirs": str(tmp_path / "data")}
    expected = _engine_rows(tmp_path, "legacy", props=props)
    assert [r[1] for r in expected] == [0, 1, 2, 3, 4]
    df = spark.read.format("tiered").option("config.log.dirs", props["log.dirs"]).option("topics", "legacy").load()
    assert _spark_rows(df) == expected


def test_read_committed_drops_aborted_and_control_batches(spark: Any, root: Path) -> None:
    committed = _engine_rows(root, "txn", FetchIsolation.TXN_COMMITTED)
    uncommitted = _engine_rows(root, "txn")
    values = [r[3] for r in committed]
    assert any(v.startswith(b"r0-") for v in values) and not any(v.startswith(b"r1-") for v in values)
    assert sum(v.startswith(b"plain") for v in values) == 18
    assert len(uncommitted) == 6 * (12 + 3)  # every data record, no control record
    assert _spark_rows(_load(spark, root, topics="txn", isolationLevel="read_committed")) == committed
    assert _spark_rows(_load(spark, root, topics="txn")) == uncommitted


@pytest.mark.parametrize("tiers", ["remote", "both"])
def test_read_committed_ends_before_an_abort_marker_segments_later_and_still_drops_the_aborted(
        tmp_path: Path, tiers: str) -> None:
    """A transaction's abort is in the transaction index of the segment holding its marker: a plan that ends before
    that segment searches on past its end, as Kafka's ``collectAbortedTransactions`` does (the plan used to look only
    at the segments it read, and delivered the aborted records)."""
    import json

    from tiered.remote_log_manager import RemoteLogManager
    from tiered.spark.options import parse_options
    from tiered.spark.planning import plan
    from tiered.spark.reader import read_piece

    props = _props(tmp_path)
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        log = m.get_or_create_log("t", 0, {"remote.storage.enable": "true"})
        plain = [MemoryRecords.build([SimpleRecord(T0, None, b"plain%d" % i)]) for i in range(5)]
        log.append(plain[0])  # 0
        log.append(MemoryRecords.build([SimpleRecord(T0, None, b"aborted%d" % j) for j in range(3)], producer_id=7,
                                       producer_epoch=0, base_sequence=0, is_transactional=True))  # 1-3
        log.append(plain[1])  # 4
        log.roll()
        log.append(plain[2])  # 5
        log.roll()
        log.append(MemoryRecords.end_transaction_marker(7, 0, commit=False))  # 6: its entry in this segment's index
        log.append(plain[3])  # 7
        log.roll()
        log.append(plain[4])  # 8
        rlm = m.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        rlm.run_once(m.all_logs())
        assert [(md.start_offset, md.end_offset) for md in rlm.finished_segments(rlm.topic_id_partition(log))] == [
            (0, 4), (5, 5), (6, 7)]
    if tiers == "both":  # as local retention leaves it: the copied segments gone from the data dir
        for name in ("00000000000000000000", "00000000000000000005", "00000000000000000006"):
            for suffix in (".log", ".index", ".timeindex", ".txnindex"):
                (tmp_path / "data" / "t-0" / f"{name}{suffix}").unlink(missing_ok=True)
    options = {**{f"config.{k}": v for k, v in props.items()}, "cacheDir": str(tmp_path / "cache"), "topics": "t",
               "isolationLevel": "read_committed", "tiers": tiers}
    for ending, wanted in ((5, [b"plain0", b"plain1"]), (6, [b"plain0", b"plain1", b"plain2"]),
                           (8, [b"plain0", b"plain1", b"plain2", b"plain3"])):
        pieces = plan(parse_options({**options, "endingOffsets": json.dumps({"t": {"0": ending}})}))
        assert all(p.from_offset < p.until_offset for p in pieces)
        assert [v for p in pieces for rb in read_piece(p) for v in rb.column("value").to_pylist()] == wanted, ending


def test_starting_and_ending_offsets_and_timestamps(spark: Any, root: Path) -> None:
    expected = _engine_rows(root, "t")
    df = _load(spark, root, topics="t", startingOffsets='{"t":{"0":100,"1":-2}}', endingOffsets='{"t":{"0":20000,"1":7}}')
    got = _spark_rows(df)
    assert got == [r for r in expected if (r[0] == 0 and 100 <= r[1] < 20000) or (r[0] == 1 and r[1] < 7)]
    df = _load(spark, root, topics="t", startingTimestamp=str(T0 + 5000 * 10), endingTimestamp=str(T0 + 6000 * 10))
    got = _spark_rows(df)
    assert got == [r for r in expected if 5000 <= r[1] < 6000]
    with pytest.raises(Exception, match="endingOffsets=earliest"):
        _load(spark, root, topics="t", endingOffsets="earliest").count()


def test_a_corrupt_remote_object_fails_the_job_with_the_projects_error(spark: Any, root: Path, tmp_path: Path) -> None:
    copy = _tier_copy(root, tmp_path)
    obj = _remote_object(copy)
    raw = bytearray(obj.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    obj.write_bytes(bytes(raw))
    # The segment's recorded chunk checksums catch the damage first (a RemoteChecksumError is a CorruptRecordError);
    # a segment copied without checksums fails at the batch's CRC instead.
    with pytest.raises(Exception, match=r"RemoteChecksumError: remote object .*\.log \(segment .*: crc32c"):
        _load(spark, copy, topics="t").count()


def test_offsets_deleted_by_retention_are_data_loss_unless_told_otherwise(spark: Any, root: Path, tmp_path: Path) -> None:
    copy = _tier_copy(root, tmp_path)
    with LogManager(LogConfig.from_properties(_props(copy)), start_scheduler=False) as m:
        log = m.get_log("codecs", 0)
        assert log is not None
        log.delete_records(100)
    with pytest.raises(Exception, match="failOnDataLoss"):
        _load(spark, copy, topics="codecs", startingOffsets='{"codecs":{"0":0}}').count()
    from tiered.spark.options import parse_options
    from tiered.spark.planning import SparkSourceDataLossError, plan

    with pytest.raises(SparkSourceDataLossError, match=r"codecs-0: offset 0 was asked for, but the log starts at 100 "
                       r"\(records were deleted by retention since the offset was chosen: by startingOffsets, .*"
                       r"read_topic when it made the DataFrame"):  # (a read_topic's split named as the user's offset)
        plan(parse_options(_options(copy, topics="codecs", startingOffsets='{"codecs":{"0":0}}')))
    df = _load(spark, copy, topics="codecs", startingOffsets='{"codecs":{"0":0}}', failOnDataLoss="false")
    assert df.selectExpr("min(offset)", "count(*)").first() == (100, len(CompressionType) * 306 - 100)


def test_a_segment_file_gone_since_planning_is_data_loss(root: Path, tmp_path: Path) -> None:
    from tiered.spark.options import parse_options
    from tiered.spark.planning import SparkSourceDataLossError, plan
    from tiered.spark.reader import read_piece

    copy = _tier_copy(root, tmp_path)
    # the active segment's: never copied (one with a remote copy is read from it: test_planning_tier.py)
    piece = [p for p in plan(parse_options(_options(copy, topics="t"))) if p.local_path is not None][-1]
    assert sum(b.num_rows for b in read_piece(piece)) > 0
    os.unlink(piece.local_path)  # type: ignore[arg-type]
    with pytest.raises(SparkSourceDataLossError, match="failOnDataLoss=false"):
        list(read_piece(piece))
    piece.fail_on_data_loss = False
    assert list(read_piece(piece)) == []


def test_a_remote_segment_deleted_since_planning_is_data_loss(root: Path, tmp_path: Path) -> None:
    """A remote segment that retention deleted after the plan failed the task with ObjectNotFoundError, whatever
    failOnDataLoss said (a helper's pass): it is the documented data-loss error, or, with failOnDataLoss=false,
    skipped; a remote object missing while the metadata still names it stays an error (damage)."""
    from tiered.errors import RemoteResourceNotFoundError
    from tiered.spark.options import parse_options
    from tiered.spark.planning import SparkSourceDataLossError, plan
    from tiered.spark.reader import read_piece

    copy = _tier_copy(root, tmp_path)
    options = {**_options(copy, topics="t"), "cacheDir": str(tmp_path / "cache")}
    piece = next(p for p in plan(parse_options(options)) if p.remote_metadata is not None)
    log_file = next((copy / "remote").rglob(f"*{_segment_id_text(piece)}.log"))
    log_file.rename(log_file.with_name(log_file.name + ".hidden"))  # the object missing, its metadata still there
    with pytest.raises(RemoteResourceNotFoundError):
        list(read_piece(piece))
    log_file.with_name(log_file.name + ".hidden").rename(log_file)
    with LogManager(LogConfig.from_properties(_props(copy)), start_scheduler=False) as m:
        log = m.get_log("t", piece.partition)
        assert log is not None and m.remote_tier is not None
        log.delete_records(piece.until_offset)  # remote retention then deletes the planned segment
        assert m.remote_tier.cleanup_remote_segments(log) >= 1  # type: ignore[attr-defined]
    with pytest.raises(SparkSourceDataLossError, match="deleted by retention since the job was planned"):
        list(read_piece(piece))
    piece.fail_on_data_loss = False
    assert list(read_piece(piece)) == []


@pytest.mark.parametrize("damage", ["deleted", "flipped"])
def test_a_remote_segment_missing_from_the_metadata_is_data_loss_not_skipped(
    root: Path, tmp_path: Path, damage: str
) -> None:
    """A middle remote segment whose COPY_SEGMENT_FINISHED event is gone or damaged is in no finished segment: the
    plan went from the segment before it straight to the one after, and a read returned 3500 records fewer without
    an error (a helper's pass; `tiered consume` said "the remote tier has a gap"). It is data loss now, naming the
    offsets (and the unreadable event), or with failOnDataLoss=false skipped."""
    from tiered.rsm import RemoteLogSegmentState
    from tiered.spark.options import parse_options
    from tiered.spark.planning import SparkSourceDataLossError, plan

    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as m:
        log = m.get_or_create_log("g", 0, {"remote.storage.enable": "true"})
        for first in range(0, 4 * N // 3, 200):
            log.append(MemoryRecords.build([SimpleRecord(T0 + i, None, _value(i)) for i in range(first, first + 200)]))
        assert m.remote_tier is not None and m.remote_tier.run_once(m.all_logs()).segments_copied >= 3
        starts = [seg.base_offset for seg in log.segments.values()]
    ranges = list(itertools.pairwise(starts))  # the segments copied
    lo, hi = ranges[1]
    options = {**_options(tmp_path, topics="g", tiers="remote"), "cacheDir": str(tmp_path / "cache")}
    if damage == "deleted":  # (planned before: the planning process had read the event)
        assert sorted({(p.from_offset, p.until_offset) for p in plan(parse_options(options))}) == ranges
    finished = f".{int(RemoteLogSegmentState.COPY_SEGMENT_FINISHED)}.json"
    [event] = (tmp_path / "remote").rglob(f"{lo:020d}-*{finished}")
    if damage == "deleted":
        event.unlink()
    else:
        data = bytearray(event.read_bytes())
        data[len(data) // 2] ^= 0x01
        event.write_bytes(bytes(data))
    with pytest.raises(SparkSourceDataLossError, match=rf"g-0: offsets \[{lo}, {hi}\) are in no finished remote "
                                                       r"segment .*the remote tier has a gap") as lost:
        plan(parse_options(options))
    assert ("could not be read" in str(lost.value)) == (damage == "flipped")
    skipped = plan(parse_options({**options, "failOnDataLoss": "false"}))
    assert sorted({(p.from_offset, p.until_offset) for p in skipped if p.remote_metadata}) == [
        r for r in ranges if r != (lo, hi)]


def test_a_stream_starts_at_starting_timestamp_and_refuses_batch_only_options(root: Path) -> None:
    """A stream with startingTimestamp read from the log start, and one with endingOffsets or endingTimestamp read on
    past them, silently (a helper's pass): it starts at the first offset at or after the timestamp, as a batch read
    does, and the batch-only options are refused (Spark's Kafka source refuses them in a stream)."""
    from tiered.spark.options import SparkSourceOptionError
    from tiered.spark.source import TieredStreamReader

    at = T0 + 5000 * 10  # t-0's record 5000 (timestamps T0 + i*10 + p)
    begins = TieredStreamReader(_options(root, topics="t", startingTimestamp=str(at))).initialOffset()
    assert begins == {"t": {"0": 5000, "1": 5000}}, begins
    late = TieredStreamReader(_options(root, topics="t", startingTimestamp=str(T0 + N * 100))).initialOffset()
    assert late == {"t": {"0": N, "1": N}}  # no record that late: the stream starts at the end
    for option in ("endingOffsets", "endingTimestamp"):
        with pytest.raises(SparkSourceOptionError, match=f"{option} is for batch reads"):
            TieredStreamReader(_options(root, topics="t", **{option: "latest" if option == "endingOffsets" else "5"}))
    with pytest.raises(SparkSourceOptionError, match="startingTimestamp='-3': expected milliseconds"):
        TieredStreamReader(_options(root, topics="t", startingTimestamp="-3"))
    with pytest.raises(SparkSourceOptionError, match="maxOffsetsPerTrigger='abc'"):
        TieredStreamReader(_options(root, topics="t", maxOffsetsPerTrigger="abc"))
    past = TieredStreamReader(_options(root, topics="t", startingOffsets=f'{{"t":{{"0":{N + 5},"1":0}}}}'))
    with pytest.raises(SparkSourceOptionError, match=f"startingOffsets {N + 5} of t-0 is past its end {N}"):
        past.initialOffset()


def test_a_stream_behind_retention_spends_its_cap_on_offsets_still_there(root: Path, tmp_path: Path) -> None:
    """A stream whose checkpointed offsets retention passed, with failOnDataLoss=false and maxOffsetsPerTrigger, got
    micro-batches of deleted offsets only (each one empty) until its cap had walked up to the log start: the cap is
    now counted from the log start. With failOnDataLoss=true the end stays where the plan reports the loss."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from tiered.spark.source import TieredStreamReader

    copy = _tier_copy(root, tmp_path)
    with LogManager(LogConfig.from_properties(_props(copy)), start_scheduler=False) as m:
        log = m.get_log("t", 0)
        assert log is not None
        log.delete_records(5000)
    options = {**_options(copy, topics="t"), "cacheDir": str(tmp_path / "cache")}
    behind = {"t": {"0": 100, "1": N}}  # t-0 checkpointed at 100, t-1 caught up
    skipping = TieredStreamReader({**options, "failOnDataLoss": "false"})
    assert skipping.latestOffset(behind, ReadMaxRows(700)) == {"t": {"0": 5700, "1": N}}
    strict = TieredStreamReader(options)
    assert strict.latestOffset(behind, ReadMaxRows(700)) == {"t": {"0": 800, "1": N}}


def test_a_stream_restarted_over_partitions_gone_or_moved_back_is_data_loss(root: Path) -> None:
    """A checkpoint of topic t restarted with topics=codecs dropped t silently and read codecs from its start, even
    with failOnDataLoss=true; one past the log's end (a topic made again, another data dir) failed naming
    startingOffsets and endingOffsets the user never set (a helper's pass). Both are data loss now, as Spark's Kafka
    source reports them: an error naming the partition, or with failOnDataLoss=false a warning and a plan without it."""
    from tiered.spark.planning import SparkSourceDataLossError
    from tiered.spark.source import TieredStreamReader

    other = TieredStreamReader(_options(root, topics="codecs"))
    end = other.latestOffset({"t": {"0": 10, "1": 10}}, other.getDefaultReadLimit())
    assert "t" not in end
    with pytest.raises(SparkSourceDataLossError, match=r"t-0 of the stream's checkpoint is not in the data dirs "
                                                       r"\(a deleted topic, or the query restarted with other topics\?\) "
                                                       r"\(and 1 more\); set failOnDataLoss=false"):
        other.partitions({"t": {"0": 10, "1": 10}}, end)
    lenient = TieredStreamReader(_options(root, topics="codecs", failOnDataLoss="false"))
    planned = lenient.partitions({"t": {"0": 10, "1": 10}}, end)
    assert {piece.topic for part in planned for piece in part.pieces} == {"codecs"}  # type: ignore[attr-defined]
    ahead = {"t": {"0": N + 500, "1": 0}}
    stream = TieredStreamReader(_options(root, topics="t"))
    with pytest.raises(SparkSourceDataLossError, match=f"t-0: the stream's checkpoint is at offset {N + 500}, past the "
                                                       f"log's end {N}"):
        stream.partitions(ahead, {"t": {"0": N, "1": N}})
    # with maxOffsetsPerTrigger the end of such a partition was its checkpoint's offset: no loss seen (a review)
    capped = TieredStreamReader(_options(root, topics="t", maxOffsetsPerTrigger="700"))
    behind = {"t": {"0": N + 500, "1": 0}}
    assert capped.latestOffset(behind, capped.getDefaultReadLimit()) == {"t": {"0": N, "1": 700}}
    with pytest.raises(SparkSourceDataLossError, match=f"t-0: the stream's checkpoint is at offset {N + 500}"):
        capped.partitions(behind, {"t": {"0": N, "1": 700}})
    planned = TieredStreamReader(_options(root, topics="t", failOnDataLoss="false")).partitions(
        ahead, {"t": {"0": N, "1": N}})
    assert {(piece.topic, piece.partition) for part in planned for piece in part.pieces} == {("t", 1)}  # type: ignore[attr-defined]


def _segment_id_text(piece: Any) -> str:
    from tiered.layout import kafka_uuid
    from tiered.metadata import decode_metadata

    return kafka_uuid(decode_metadata(piece.remote_metadata).remote_log_segment_id.id)


# What the source refuses, and a user schema ----------------------------------------------------------------------

def test_unknown_options_are_refused_at_load_naming_the_known_ones(spark: Any, root: Path) -> None:
    with pytest.raises(Exception, match=r"unknown option startingoffset \(did you mean startingOffsets\?\); the "
                                        r"tiered source \(reads and writes\) takes config, topics, .*startingOffsets"):
        _load(spark, root, topics="codecs", startingOffset='{"codecs":{"0":5}}')  # load() itself refuses it
    with pytest.raises(Exception, match=r"unknown option batchsize; a read takes config, topics, subscribe"):
        _load(spark, root, topics="codecs", batchSize="5").count()  # a write's option, refused by the read
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match=r"unknown option startingoffsets; a write takes config, topic, batchSize"):
        (df.write.format("tiered").mode("append").option("config.log.dirs", str(root / "unused"))
         .option("topic", "x").option("startingOffsets", "earliest").save())


@pytest.mark.parametrize(("options", "message"), [
    ({"topics": "t", "startingOffsets": '{"t":{"0":5,"2":0}}'},
     r"startingOffsets names partition t-2, which does not exist \(t has partitions 0-1\)"),
    ({"topics": "t", "endingOffsets": '{"codecs":{"0":5}}'},
     r"endingOffsets names topic codecs, which this read does not include \(it reads t\)"),
    ({"topicPattern": "no.*thing"}, r"topicPattern='no.\*thing' matches no topic in "),
    ({"topics": "t,nosuch"}, r"no partition of topic\(s\) nosuch in "),
])
def test_a_subscription_the_data_dirs_do_not_have_is_refused(spark: Any, root: Path, options: dict[str, str],
                                                              message: str) -> None:
    with pytest.raises(Exception, match=message):
        _load(spark, root, **options).count()


def test_a_streaming_read_of_a_missing_topic_fails_clearly(spark: Any, root: Path, tmp_path: Path) -> None:
    stream = spark.readStream.format("tiered").options(**_options(root, topics="nosuch")).load()
    query = stream.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
    try:
        with pytest.raises(Exception, match=r"no partition of topic\(s\) nosuch in "):
            query.processAllAvailable()
    finally:
        query.stop()


def test_a_user_schema_of_some_columns_is_honoured(spark: Any, root: Path) -> None:
    from pyspark.sql.types import _parse_datatype_string

    from tiered.spark.arrow_records import SCHEMA_DDL
    from tiered.spark.source import projection

    assert projection(_parse_datatype_string(SCHEMA_DDL)) is None  # the source's own schema: nothing to project
    expected = _engine_rows(root, "t")
    df = spark.read.format("tiered").options(**_options(root, topics="t")).schema("offset long, value binary").load()
    assert df.columns == ["offset", "value"]
    got = sorted((r["offset"], r["value"]) for r in df.where("offset < 300").collect())  # the remote tier, pushed down
    assert got == sorted((r[1], r[3]) for r in expected if r[1] < 300)
    # any order, names in any case, a column never null declared NOT NULL; every codec, headers, null keys; no pushdown
    expected = _engine_rows(root, "codecs")
    df = (spark.read.format("tiered").options(**_options(root, topics="codecs", filterPushdown="false"))
          .schema("Partition int NOT NULL, headers array<struct<key:string,value:binary>>, KEY binary").load())
    assert df.columns == ["Partition", "headers", "KEY"]
    rows = df.collect()
    assert sorted(((r[0], r[2], tuple((h["key"], h["value"]) for h in r[1])) for r in rows), key=repr) == sorted(
        ((r[0], r[2], r[6]) for r in expected), key=repr)


def test_a_user_schema_with_unknown_columns_or_wrong_types_is_refused(spark: Any, root: Path) -> None:
    def read(schema: str) -> Any:
        return spark.read.format("tiered").options(**_options(root, topics="codecs")).schema(schema).load().count()

    with pytest.raises(Exception, match=r"schema struct<offset:int,nosuch:string,value:binary>: offset is int, not "
                                        r"bigint; unknown column nosuch \(the source's columns: key binary, "):
        read("offset int, nosuch string, value binary")
    with pytest.raises(Exception, match=r"value is NOT NULL, but the source's value can be null"):
        read("value binary NOT NULL")
    with pytest.raises(Exception, match=r"column offset twice"):
        read("offset long, OFFSET long")

def test_offsets_a_recovery_recorded_as_lost_are_data_loss_unless_told_otherwise(root: Path, tmp_path: Path) -> None:
    # planning alone (no JVM): a closed segment cut by hand in the middle of the log, recovered by a writer's load
    from tiered.spark.options import parse_options
    from tiered.spark.planning import SparkSourceDataLossError, plan

    copy = _tier_copy(root, tmp_path)
    pdir = copy / "data" / "t-0"
    logs = sorted(pdir.glob("*.log"))
    assert len(logs) >= 2
    os.truncate(logs[0], logs[0].stat().st_size // 2)  # the first local segment: a later one follows it
    with LogManager(LogConfig.from_properties(_props(copy)), start_scheduler=False) as m:
        log = m.get_log("t", 0)
        assert log is not None and log.lost_offsets.entries
        lost = log.lost_offsets.entries[0]
    with pytest.raises(SparkSourceDataLossError, match=f"offsets {lost.first_offset}..{lost.last_offset} were lost"):
        plan(parse_options(_options(copy, topics="t")))
    assert plan(parse_options(_options(copy, topics="t", failOnDataLoss="false")))
    assert plan(parse_options(_options(copy, topics="t", startingOffsets=f'{{"t":{{"0":{lost.last_offset + 1}}}}}')))


# Filter pushdown ---------------------------------------------------------------------------------------------

def _predicates() -> st.SearchStrategy[str]:
    ops = st.sampled_from(["=", "<", "<=", ">", ">="])
    partition = st.builds(lambda op, v: f"partition {op} {v}", ops, st.integers(-1, 2))
    offset = st.builds(lambda op, v: f"offset {op} {v}", ops, st.integers(-5, N + 5))
    offsets_in = st.builds(lambda vs: f"offset IN ({', '.join(map(str, vs))})",
                           st.lists(st.integers(0, N), min_size=1, max_size=4))
    stamp = st.builds(lambda op, i: f"timestamp {op} timestamp_millis({T0 + i})", ops, st.integers(-10, N * 10 + 10))
    return st.lists(st.one_of(partition, offset, offsets_in, stamp), min_size=1, max_size=3).map(" AND ".join)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=_predicates())
def test_pushdown_gives_the_same_rows_as_spark_filtering(spark: Any, root: Path, where: str) -> None:
    agg = ["count(*)", "sum(offset)", "sum(crc32(value))", "sum(partition)"]
    pushed = _load(spark, root, topics="t").where(where).selectExpr(*agg).first()
    plain = _load(spark, root, topics="t", filterPushdown="false").where(where).selectExpr(*agg).first()
    assert pushed == plain


def test_pushdown_prunes_segments_and_starts_at_the_offset(root: Path) -> None:
    from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan

    from tiered.spark.source import TieredFilteringReader

    def pieces(*filters: Any) -> list[Any]:
        reader = TieredFilteringReader(_options(root, topics="t"))
        rest = list(reader.pushFilters(list(filters)))
        assert rest == []
        return [p for part in reader.partitions() for p in part.pieces]  # type: ignore[attr-defined]

    everything = pieces()
    assert {p.partition for p in everything} == {0, 1}
    one = pieces(EqualTo(("partition",), 1), GreaterThanOrEqual(("offset",), N - 10))
    assert len(one) == 1 and one[0].partition == 1 and one[0].from_offset == N - 10 and one[0].local_path
    assert one[0].start_position > 0
    early = pieces(In(("partition",), (0,)), LessThan(("offset",), 50))
    assert len(early) == 1 and early[0].remote_metadata is not None and early[0].until_offset == 50
    # a timestamp floor: the read starts at the first offset with a timestamp at or after it (partition 0's record
    # i has timestamp T0 + 10 i), and segments wholly before it are not read
    floor = datetime.datetime.fromtimestamp((T0 + 10 * (N - 100)) / 1000)
    late = pieces(GreaterThanOrEqual(("timestamp",), floor), EqualTo(("partition",), 0))
    assert len(late) == 1 and late[0].from_offset == N - 100 and late[0].local_path


def test_planning_opens_no_segment_cache(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver reads metadata and indexes only: its remote tier has no chunk cache (a diskcache store opened and
    closed for every query cost more than the rest of the plan). A timestamp that needs a remote segment's bytes
    (offset for timestamp) reads them from the store."""
    import tiered.composition
    from tiered.spark.options import parse_options
    from tiered.spark.planning import plan

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("planning built a segment cache")

    monkeypatch.setattr(tiered.composition, "build_chunk_cache", refuse)
    pieces = plan(parse_options(_options(root, topics="t")))
    assert any(p.remote_metadata is not None for p in pieces) and any(p.local_path for p in pieces)
    start = datetime.datetime.fromtimestamp((T0 + 10 * 50) / 1000)
    late = plan(parse_options(_options(root, topics="t", startingTimestamp=str(int(start.timestamp() * 1000)))))
    first = min((p for p in late if p.partition == 0), key=lambda p: p.from_offset)
    assert first.from_offset == 50 and first.remote_metadata is not None


@pytest.mark.parametrize("seen_by", ["cache", "reader"])
def test_a_cached_chunk_damaged_on_disk_is_fetched_again_not_reported_as_the_remote_copys(
        root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
        seen_by: str) -> None:
    """An executor's segment cache holds the chunks it read as maps of their files. A chunk file damaged on local disk
    after that shows through the map. The cache sees that the file changed since it was mapped and reads the chunk
    back (its crc32c fails: fetched again); where the change escapes it (a write within the file system's timestamp
    granularity of the mapping: here, the cache's check switched off), the batch's CRC fails, the reader forgets
    the segment and reads on from that batch as fetched again. Either way the same records, each once. It used to
    fail the job saying the remote segment was corrupt."""
    import pyarrow as pa

    from tiered.cache import disk_store
    from tiered.cache.disk_store import DiskChunkStore
    from tiered.spark.options import parse_options
    from tiered.spark.planning import plan
    from tiered.spark.reader import read_piece, remote_log_manager

    monkeypatch.setattr(disk_store, "RECHECK_SECONDS", 0.0)  # the cache compares at every read, not once a second
    cache = tmp_path / "cache"
    piece = next(p for p in plan(parse_options(_options(root, topics="t", cacheDir=str(cache))))
                 if p.remote_metadata is not None)
    expected = pa.Table.from_batches(list(read_piece(piece)))
    assert expected.num_rows == piece.until_offset - piece.from_offset
    with remote_log_manager(piece.props, piece.cache_dir) as rlm:  # the one read_piece used, kept
        chunks = rlm.reader.segments.chunks
    chunks.flush()  # every chunk on disk, and held in memory as a map of its file from now on
    chunk = max((cache / "remote-log-segment-cache").rglob("*.val"), key=lambda f: f.stat().st_size)
    st = chunk.stat()
    with open(chunk, "r+b") as f:  # a byte in the middle of a chunk: inside some batch's records
        f.seek(st.st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x40]))
    os.utime(chunk, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))  # a time of its own (not within the granularity)
    if seen_by == "reader":
        monkeypatch.setattr(DiskChunkStore, "changed_on_disk", lambda self, chunk: False)
    with caplog.at_level("WARNING"):
        again = pa.Table.from_batches(list(read_piece(piece)))
    assert again.equals(expected)
    by_reader = [r for r in caplog.records if "reading it again from the remote store" in r.getMessage()]
    by_cache = [r for r in caplog.records if "changed on disk since it was checked and mapped" in r.getMessage()]
    if seen_by == "reader":
        assert by_reader and "is corrupt" in by_reader[0].getMessage() and not by_cache, caplog.text
    else:
        assert by_cache and not by_reader, caplog.text


def test_nothing_on_executors_comes_from_driver_state(root: Path) -> None:
    """Each piece pickles to bytes holding its properties and segment identity; reading it in a fresh process
    (another interpreter, another cache dir) gives the records."""
    import pickle
    import subprocess
    import sys

    from tiered.spark.options import parse_options
    from tiered.spark.planning import plan

    pieces = plan(parse_options(_options(root, topics="t", cacheDir=str(root / "other-cache"))))
    remote = next(p for p in pieces if p.remote_metadata is not None)
    blob = pickle.dumps(remote)
    code = ("import pickle, sys; from tiered.spark.reader import read_piece; "
            "p = pickle.loads(sys.stdin.buffer.read()); print(sum(b.num_rows for b in read_piece(p)))")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, check=True, env=env)
    assert int(out.stdout) == remote.until_offset - remote.from_offset


# tiered export --------------------------------------------------------------------------------------------------

def test_export_to_parquet_read_back_by_spark_and_pyarrow(spark: Any, root: Path, tmp_path: Path) -> None:
    import pyarrow.dataset as ds

    from tiered.cli import main

    props = tmp_path / "broker.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in _props(root).items()))
    out = tmp_path / "export"
    assert main(["export", "--config", str(props), "--topic", "t", "--from", "10", "--to", "20010",
                 "--format", "parquet", str(out)]) == 0
    expected = [r for r in _engine_rows(root, "t") if 10 <= r[1] < 20010]
    parts = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert parts == ["partition=0", "partition=1"]
    assert all(d.name.startswith("date=") for d in (out / "partition=0").iterdir())
    # pyarrow, reading the hive-partitioned files on its own
    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    assert table.num_rows == len(expected)
    got = sorted(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(),
                     table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True))
    assert got == sorted((r[0], r[1], r[2], r[3]) for r in expected)
    # Spark's own Parquet reader
    back = spark.read.parquet(str(out))
    assert back.count() == len(expected)
    assert back.selectExpr("min(offset)", "max(offset)").first() == (10, 20009)
    assert main(["export", "--config", str(props), "--topic", "t", "--format", "parquet", str(out)]) != 0  # exists


def test_export_to_json_lines_by_time(spark: Any, root: Path, tmp_path: Path) -> None:
    import base64
    import json

    from tiered.cli import main

    out = tmp_path / "jsonl"
    frm = _dt_iso(T0 + 10 * 100)
    overrides = [arg for k, v in _props(root).items() if k != "log.dirs" for arg in ("-o", f"{k}={v}")]
    assert main(["export", "--log-dirs", str(root / "data"), *overrides,
                 "--topic", "t", "--from", frm, "--to", f"@{T0 + 10 * 200}", "--format", "jsonl", str(out)]) == 0
    rows = [json.loads(line) for f in sorted(out.glob("part-*")) for line in f.read_text().splitlines()]
    expected = [r for r in _engine_rows(root, "t") if T0 + 1000 <= r[4] < T0 + 2000]
    assert sorted((r["partition"], r["offset"], base64.b64decode(r["value"])) for r in rows) == sorted(
        (r[0], r[1], r[3]) for r in expected)


def test_a_compacted_topic_and_a_real_brokers_compacted_partition_read_with_their_gaps(
    spark: Any, tmp_path: Path
) -> None:
    """Issue 30: offsets a cleaner removed are gaps; Spark and `tiered export` read what is there, exactly, from a
    topic our cleaner compacted and from the broker dir of tests/fixtures/compacted-kraft-logs."""
    import json
    import shutil

    from tiered.cli import main

    root = tmp_path / "c"
    props = {**_props(root), "log.cleaner.min.cleanable.ratio": "0.01"}
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        log = m.get_or_create_log("comp", 0, {"cleanup.policy": "compact"})
        rng = random.Random(30)
        keys = [rng.randrange(400) for _ in range(6000)]  # the latest of each key spread over the log: gaps
        for first in range(0, 6000, 100):
            log.append(MemoryRecords.build([SimpleRecord(T0 + i, b"key-%d" % keys[i], None if i % 777 == 5 else
                                                         b"v%d" % i) for i in range(first, first + 100)]))
        log.roll()
        assert m.cleaner is not None and m.cleaner.clean_pass()[0].cleaned
    expected = _engine_rows(root, "comp", props=props)
    offsets = [r[1] for r in expected]
    assert len(offsets) == len(set(keys)) and offsets[-1] - offsets[0] > 2 * len(offsets), "the cleaning left gaps"
    assert _spark_rows(_load(spark, root, topics="comp")) == expected
    out = tmp_path / "jsonl"
    overrides = [arg for k, v in props.items() if k != "log.dirs" for arg in ("-o", f"{k}={v}")]
    assert main(["export", "--log-dirs", str(root / "data"), *overrides, "--topic", "comp", "--format", "jsonl",
                 str(out)]) == 0
    rows = [json.loads(line) for f in sorted(out.glob("part-*")) for line in f.read_text().splitlines()]
    assert sorted(r["offset"] for r in rows) == offsets
    broker = tmp_path / "broker"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "compacted-kraft-logs", broker)
    df = spark.read.format("tiered").options(**{"config.log.dirs": str(broker), "topics": "__consumer_offsets",
                                                "cacheDir": str(tmp_path / "cache")}).load()
    assert sorted(r["offset"] for r in df.select("offset").collect()) == [2, 4, 5, 8, 12, 13, 14, 15]
    assert df.where("offset = 8").first()["value"] is None  # the tombstone


def test_an_available_now_stream_reads_to_the_ends_it_started_with_a_cap_at_a_time(spark: Any, tmp_path: Path) -> None:
    """The reader did not implement SupportsTriggerAvailableNow: an availableNow query restarted with a batch pending
    ran that batch and stopped (1050 of 3000 offsets; a helper's pass). It now takes the partitions' ends when the
    query starts as its target and reads to them, maxOffsetsPerTrigger at a time; what is appended later waits."""
    from tiered.spark.source import TieredStreamReader

    props = {"log.dirs": str(tmp_path / "data")}
    _append(props, "s", 0, 1000)
    options = {"config.log.dirs": props["log.dirs"], "topics": "s", "maxOffsetsPerTrigger": "700"}
    reader = TieredStreamReader(options)
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    _append(props, "s", 1000, 500)  # after the query started: not read by it
    ends = []
    while (end := reader.latestOffset(start, reader.getDefaultReadLimit())) != start:
        ends.append(end)
        start = end
    assert start == {"s": {"0": 1000, "1": 1000}} and len(ends) == 3  # 2000 offsets, 700 a batch
    assert reader.reportLatestOffset() == {"s": {"0": 1500, "1": 1500}}
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (spark.readStream.format("tiered").options(**options).load().selectExpr("partition", "offset")
             .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(LIMIT_S)
        batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
    assert sum(batches) == 3000 and max(batches) <= 700
    got = sorted((r["partition"], r["offset"]) for r in spark.read.parquet(str(out)).collect())
    assert got == [(p, i) for p in range(2) for i in range(1500)]


def _dt_iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat()


# Streaming ------------------------------------------------------------------------------------------------------

def _append(props: dict[str, str], topic: str, start: int, n: int) -> None:
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        for p in range(2):
            log = m.get_or_create_log(topic, p)
            for first in range(start, start + n, 50):
                log.append(MemoryRecords.build([SimpleRecord(T0 + i, None, b"s%d-%d" % (p, i))
                                                for i in range(first, first + 50)]))


def test_streaming_restart_loses_and_repeats_nothing(spark: Any, tmp_path: Path) -> None:
    props = {"log.dirs": str(tmp_path / "data")}
    _append(props, "s", 0, 1000)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> Any:
        stream = (spark.readStream.format("tiered").option("config.log.dirs", props["log.dirs"]).option("topics", "s")
                  .option("maxOffsetsPerTrigger", "700").load().selectExpr("partition", "offset", "value"))
        return run_to_parquet(stream, out, checkpoint)

    first = run()
    assert sum(first) == 2000 and max(first) <= 700 and len(first) >= 3  # maxOffsetsPerTrigger held
    _append(props, "s", 1000, 500)  # new records while the query is down
    second = run()
    assert sum(second) == 1000
    rows = spark.read.parquet(str(out)).collect()
    got = sorted((r["partition"], r["offset"], r["value"]) for r in rows)
    assert got == [(p, i, b"s%d-%d" % (p, i)) for p in range(2) for i in range(1500)]


@pytest.mark.parametrize(("option", "value", "message"), [
    ("startingOffsets", '{"t":{"0":5998.7}}', "offset 5998.7 is not a whole number"),
    ("startingOffsets", '{"t":{"0":true}}', "offset True is not a whole number"),
    ("startingOffsets", '{"t":{"0":"5998"}}', "offset '5998' is not a whole number"),
    ("endingOffsets", '{"t":{"0":-2}}', r"-2 \(earliest\) for t-0 is not allowed as an ending offset"),
    ("topics", " , ", "no topic name"),
])
def test_careless_offsets_and_topics_are_refused(root: Path, option: str, value: str, message: str) -> None:
    """5998.7 read from 5998, true from 1, "5998" as 5998; -2 as an ending offset read nothing; topics " , " read
    nothing, all without a word (a helper's pass)."""
    from tiered.spark.options import SparkSourceOptionError, parse_options

    options = {**_options(root, topics="t"), option: value}
    with pytest.raises(SparkSourceOptionError, match=message):
        parse_options(options)
