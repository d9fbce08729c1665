"""The log cleaner's rules (issue 30), one case each, as Kafka's LogCleanerTest has them: the latest record of each
key, tombstones and their delete horizon, transactions and their markers, producer state, the active segment and
the lags, segment groups, the checkpoint, aborts, the threads of a LogManager, the remote-storage refusal, and the
``compact``, ``status`` and ``dump`` commands."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time as _time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatch

from local import LogConfig, LogManager
from local.cleaner.cleaner import Cleaner, LogToClean, Throttler, group_segments_by_size
from local.cleaner.log_cleaner import LogCleaner
from local.cleaner.manager import CLEANER_OFFSET_CHECKPOINT_FILENAME, cleanable_offsets
from local.cleaner.offset_map import SkimpyOffsetMap
from local.errors import ConfigError, LogCleaningAbortedError
from local.log import Log
from local.producer_state import AppendOrigin
from local.records import MemoryRecords, SimpleRecord
from local.scheduler import MockTime
from tests.logutil import topic_config

T0 = 1_700_000_000_000
DAY = 86_400_000


def _log(tmp_path: Path, time: MockTime | None = None, **fields: Any) -> Log:
    time = time or MockTime(ms=T0)
    config = dataclasses.replace(topic_config(tmp_path, cleanup_policy="compact", segment_bytes=4096,
                                              file_delete_delay_ms=0), min_cleanable_dirty_ratio=0.0, **fields)
    return Log.open(tmp_path / "t-0", config, time=time, scheduler=time.scheduler)


def _cleaner(tmp_path: Path, log: Log, **props: str) -> LogCleaner:
    config = LogConfig.from_properties({"log.dirs": str(tmp_path), **props})
    return LogCleaner(config, lambda: {("t", 0): log}, lambda tp: tmp_path, time=log.time)


def _put(log: Log, key: bytes, value: bytes | None, **kwargs: Any) -> int:
    log.time.sleep(1)
    return log.append(MemoryRecords.build([SimpleRecord(log.time.milliseconds(), key, value)], **kwargs)).first_offset


def _records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for b in log.batches_from(log.log_start_offset) if not b.is_control_batch
            for r in b.records()]


def _decodes(log: Log) -> None:
    for path in sorted(log.dir.glob("*.log")):
        data, pos = path.read_bytes(), 0
        while pos < len(data):
            size = int.from_bytes(data[pos + 8 : pos + 12], "big") + 12
            assert DefaultRecordBatch(data[pos : pos + size]).validate_crc()
            pos += size


def test_the_latest_record_of_each_key_stays_with_its_offset_and_timestamp(tmp_path: Path) -> None:
    log = _log(tmp_path)
    written = {}
    for i in range(300):
        key = b"k%d" % (i % 7)
        written[key] = (_put(log, key, b"v%d" % i), log.time.milliseconds())
    log.roll()
    reports = _cleaner(tmp_path, log).clean_pass()
    assert reports[0].cleaned and reports[0].records_read == 300 and reports[0].records_written == 7
    held = [(r.offset, r.key, r.timestamp) for b in log.batches_from(0) for r in b.records()]
    assert held == sorted((o, k, ts) for k, (o, ts) in written.items())
    assert (tmp_path / CLEANER_OFFSET_CHECKPOINT_FILENAME).read_text() == "0\n1\nt 0 300\n"  # Kafka's format
    _decodes(log)
    log.close()


def test_a_tombstone_stays_for_delete_retention_ms_after_the_cleaning_that_keeps_it(tmp_path: Path) -> None:
    time = MockTime(ms=T0)
    log = _log(tmp_path, time, delete_retention_ms=DAY)
    _put(log, b"a", b"1")
    gone = _put(log, b"a", None)
    _put(log, b"b", b"2")
    log.roll()
    cleaner = _cleaner(tmp_path, log)
    cleaner.clean_pass()
    assert _records(log) == [(gone, b"a", None), (gone + 1, b"b", b"2")]
    batch = next(b for b in log.batches_from(0) if b.base_offset <= gone <= b.last_offset)
    assert batch.delete_horizon_ms == time.milliseconds() + DAY  # set by the cleaning that first kept it
    _put(log, b"c", b"3")
    log.roll()
    time.sleep(DAY - 10)
    cleaner.clean_pass()
    assert (gone, b"a", None) in _records(log), "before its horizon the tombstone stays"
    _put(log, b"d", b"4")
    log.roll()
    time.sleep(20)
    for _ in range(3):
        cleaner.clean_pass()
    assert [k for _, k, _ in _records(log)] == [b"b", b"c", b"d"]
    _decodes(log)
    log.close()


def _txn(log: Log, pid: int, seq: int, key: bytes, value: bytes, commit: bool) -> int:
    offset = _put(log, key, value, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)
    log.append(MemoryRecords.end_transaction_marker(pid, 0, commit=commit, timestamp=log.time.milliseconds()),
               origin=AppendOrigin.COORDINATOR)
    return offset


def test_aborted_transactions_go_and_their_markers_follow_once_empty(tmp_path: Path) -> None:
    time = MockTime(ms=T0)
    log = _log(tmp_path, time, delete_retention_ms=1000)
    committed = _txn(log, 1, 0, b"x", b"kept", commit=True)
    aborted = _txn(log, 2, 0, b"y", b"aborted", commit=False)
    _put(log, b"z", b"plain")
    log.roll()
    cleaner = _cleaner(tmp_path, log)
    cleaner.clean_pass()
    # the aborted records go at once; each producer's last batch stays (emptied) for its producer state
    assert _records(log) == [(committed, b"x", b"kept"), (aborted + 2, b"z", b"plain")]
    assert [b.records_count for b in log.batches_from(0) if b.base_offset == aborted] == [0]
    # Kafka: the abort marker stays while this cleaning saw a batch of its transaction, and its index entry with it
    markers = [b.last_offset for b in log.batches_from(0) if b.is_control_batch]
    assert markers == [committed + 1, aborted + 1]
    assert [(t.producer_id, t.first_offset) for t in log.segments.first_segment.txn_index.all_aborted_txns()] == [
        (2, aborted)]  # type: ignore[union-attr]
    # newer transactions of both producers: the old batches are no longer their last; the old transactions empty
    _txn(log, 1, 1, b"x", b"newer", commit=True)
    _txn(log, 2, 1, b"y", b"committed", commit=True)
    log.roll()
    # each cleaning needs dirty data: the first sees the old batches go, the next finds the markers empty and sets
    # their delete horizon, the last (past it) removes them
    for _ in range(3):
        cleaner.clean_pass()
        time.sleep(5000)
        _put(log, b"w", b"w")
        log.roll()
    cleaner.clean_pass()
    markers = [b.last_offset for b in log.batches_from(0) if b.is_control_batch]
    assert committed + 1 not in markers and aborted + 1 not in markers, f"markers left: {markers}"
    assert log.segments.first_segment.txn_index.all_aborted_txns() == []  # type: ignore[union-attr]
    assert [k for _, k, _ in _records(log)] == [b"z", b"x", b"y", b"w"]
    _decodes(log)
    log.close()


def test_an_idempotent_producers_last_batch_survives_emptied_so_its_sequence_goes_on(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _put(log, b"k", b"first", producer_id=9, producer_epoch=0, base_sequence=0)
    _put(log, b"k", b"second")  # supersedes the producer's only record
    log.roll()
    _cleaner(tmp_path, log).clean_pass()
    batches = list(log.batches_from(0))
    assert (batches[0].producer_id, batches[0].records_count, batches[0].base_sequence) == (9, 0, 0)
    assert _records(log) == [(1, b"k", b"second")]
    log.close()
    log = _log(tmp_path)
    _put(log, b"k", b"third", producer_id=9, producer_epoch=0, base_sequence=1)  # no out-of-sequence error
    assert _records(log)[-1][2] == b"third"
    log.close()


def test_the_active_segment_and_segments_within_the_compaction_lag_are_not_cleaned(tmp_path: Path) -> None:
    time = MockTime(ms=T0)
    log = _log(tmp_path, time, min_compaction_lag_ms=60_000)
    for i in range(40):
        _put(log, b"k", b"v%d" % i)
        if i == 19:
            log.roll()
    offsets = cleanable_offsets(log, None, time.milliseconds())
    assert offsets.first_uncleanable_dirty_offset == 0, "the closed segment is within min.compaction.lag.ms"
    time.sleep(120_000)
    offsets = cleanable_offsets(log, None, time.milliseconds())
    assert offsets.first_uncleanable_dirty_offset == 20, "now only the active segment is uncleanable"
    _cleaner(tmp_path, log).clean_pass()
    assert [o for o, _, _ in _records(log)] == [19, *range(20, 40)]
    log.close()


def test_a_dirty_ratio_below_the_minimum_waits_unless_max_compaction_lag_is_past(tmp_path: Path) -> None:
    time = MockTime(ms=T0)
    log = _log(tmp_path, time)
    log.config = dataclasses.replace(log.config, min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=DAY)
    for i in range(30):
        _put(log, b"k%d" % (i % 3), b"v")
    log.roll()
    _put(log, b"k0", b"v")
    cleaner = _cleaner(tmp_path, log)
    report = cleaner.clean_pass()[0]
    assert not report.cleaned and report.why_not == "its dirty ratio 1.000 is not above min.cleanable.dirty.ratio 1.0"
    time.sleep(DAY + 1)
    assert cleaner.clean_pass()[0].cleaned, "past max.compaction.lag.ms a log is cleaned whatever its ratio"
    log.close()


def test_segments_are_grouped_by_size_with_64_bit_sizes_and_32_bit_offset_ranges() -> None:
    def seg(base: int, size: int, index: int = 0) -> Any:
        return SimpleNamespace(base_offset=base, size=size, offset_index=SimpleNamespace(size_in_bytes=index),
                               time_index=SimpleNamespace(size_in_bytes=index))

    big = 3 * 2**30  # KIP-1333 segments: sizes past 2^31
    segs = [seg(0, big), seg(10, big), seg(20, 2**30), seg(30, 1)]
    assert [[s.base_offset for s in g] for g in group_segments_by_size(segs, 4 * 2**30, 2**30, 40)] == [
        [0], [10, 20], [30]]
    by_index = [seg(0, 1, 600), seg(10, 1, 600), seg(20, 1, 300)]
    assert [[s.base_offset for s in g] for g in group_segments_by_size(by_index, 2**40, 1000, 30)] == [[0], [10, 20]]
    far = [seg(0, 1), seg(2**31 - 1, 1), seg(2**31 + 5, 1)]  # offsets relative to a group's base must fit an int32
    assert [[s.base_offset for s in g] for g in group_segments_by_size(far, 2**40, 2**30, 2**31 + 10)] == [
        [0], [2**31 - 1, 2**31 + 5]]
    assert [[s.base_offset for s in g] for g in group_segments_by_size(far, 2**40, 2**30, 2**32)] == [
        [0], [2**31 - 1], [2**31 + 5]]


def test_the_offset_map_stays_within_its_memory_and_a_full_map_cleans_in_several_passes(tmp_path: Path) -> None:
    offset_map = SkimpyOffsetMap(10 * 24 + 23)
    assert offset_map.slots == 10 and offset_map.size_in_bytes == 240
    log = _log(tmp_path)
    for i in range(200):
        _put(log, b"k%d" % (i % 40), b"v%d" % i)
    log.roll()
    cleaner = _cleaner(tmp_path, log, **{"log.cleaner.dedupe.buffer.size": str(10 * 24)})
    passes = 0
    while any(r.cleaned for r in cleaner.clean_pass()):
        passes += 1
        assert passes < 50
    assert passes > 1
    assert sorted(o for o, _, _ in _records(log)) == list(range(160, 200))
    log.close()


def test_a_cleaning_swaps_nothing_when_the_log_changed_under_it(tmp_path: Path) -> None:
    log = _log(tmp_path)
    for i in range(100):
        _put(log, b"k%d" % (i % 5), b"v%d" % i)
    log.roll()
    checks = []

    def truncate_once(the_log: Any) -> None:  # the cleaner's check: a truncation lands while it cleans
        checks.append(1)
        if len(checks) == 2:
            log.truncate_to(60)

    cleaner = Cleaner(0, SkimpyOffsetMap(1 << 16), 4096, 1 << 20, 0.9, Throttler(float("inf")), log.time, truncate_once)
    before = _records(log)
    with pytest.raises(LogCleaningAbortedError):
        cleaner.clean(LogToClean(log, 0, 100, 0, log.size_in_bytes))
    assert _records(log) == before[:60] and not list(log.dir.glob("*.cleaned"))
    log.close()


def test_a_min_compaction_lag_above_the_max_is_refused_as_kafka_does(tmp_path: Path) -> None:
    """Kafka's LogConfig.validateValues: min.compaction.lag.ms > max.compaction.lag.ms is a conflict, for a topic's
    configs (create and alter) and for the broker's defaults."""
    config = LogConfig.from_properties({"log.dirs": str(tmp_path / "d")})
    conflict = r"conflict topic config setting min\.compaction\.lag\.ms \(100\) > max\.compaction\.lag\.ms \(10\)"
    with pytest.raises(ConfigError, match=conflict):
        config.topic_config({"min.compaction.lag.ms": "100", "max.compaction.lag.ms": "10"})
    with pytest.raises(ConfigError, match=r"min\.compaction\.lag\.ms \(100\) > max\.compaction\.lag\.ms \(10\)"):
        LogConfig.from_properties({"log.dirs": str(tmp_path / "d"), "log.cleaner.max.compaction.lag.ms": "10"}).topic_config(
            {"min.compaction.lag.ms": "100"})
    with pytest.raises(ConfigError, match=r"log\.cleaner\.min\.compaction\.lag\.ms \(100\) > "
                                          r"log\.cleaner\.max\.compaction\.lag\.ms \(10\)"):
        LogConfig.from_properties({"log.dirs": str(tmp_path / "d"), "log.cleaner.min.compaction.lag.ms": "100",
                                   "log.cleaner.max.compaction.lag.ms": "10"})
    config.topic_config({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "10"})  # equal: allowed
    with LogManager(config, start_scheduler=False) as m:
        m.get_or_create_log("t", 0, {"cleanup.policy": "compact"})
        with pytest.raises(ConfigError, match=conflict):  # alter
            m.get_or_create_log("t", 0, {"cleanup.policy": "compact", "min.compaction.lag.ms": "100",
                                         "max.compaction.lag.ms": "10"})


def test_remote_storage_and_compaction_are_refused_together_naming_both_keys(tmp_path: Path) -> None:
    config = LogConfig.from_properties({"log.dirs": str(tmp_path / "d")})
    with pytest.raises(ConfigError, match="remote.storage.enable: remote log storage is unsupported for compacted "
                                          r"topics \(cleanup.policy=compact,delete\)"):
        config.topic_config({"cleanup.policy": "compact,delete", "remote.storage.enable": "true"})
    with LogManager(config, start_scheduler=False) as m:
        m.get_or_create_log("t", 0, {"cleanup.policy": "compact"})
        with pytest.raises(ConfigError, match=r"cleanup\.policy=compact"):
            m.get_or_create_log("t", 0, {"cleanup.policy": "compact", "remote.storage.enable": "true"})  # alter
    (tmp_path / "d" / "t-0" / "tiered-topic.properties").write_text("cleanup.policy=compact\nremote.storage.enable=true\n")
    with LogManager(config, start_scheduler=False) as m:  # at load: only that partition is offline, saying why
        assert m.get_log("t", 0) is None
        assert "remote.storage.enable" in m.offline_partitions[("t", 0)].reason
        assert "cleanup.policy=compact" in m.offline_partitions[("t", 0)].reason


def test_a_log_manager_runs_the_cleaner_threads_and_their_retention_of_compact_delete_logs(tmp_path: Path) -> None:
    config = LogConfig.from_properties({
        "log.dirs": str(tmp_path), "log.cleaner.backoff.ms": "10", "log.cleaner.min.cleanable.ratio": "0.01",
        "log.segment.delete.delay.ms": "0", "log.retention.check.interval.ms": "3600000"})
    with LogManager(config) as m:
        # Each of the two segments holds more than half a segment: a cleaning cannot merge the old one into the new
        # one (whose timestamps would then keep it), whether it runs before the new records come or after.
        log = m.get_or_create_log("c", 0, {"cleanup.policy": "compact,delete", "retention.ms": str(3 * DAY),
                                           "segment.bytes": str(1024 * 1024)})
        now = int(_time.time() * 1000)
        log.append(MemoryRecords.build([SimpleRecord(now - 10 * DAY, b"old", b"x" * 600_000)]))
        log.roll()
        for i in range(500):
            log.append(MemoryRecords.build([SimpleRecord(now, b"k%d" % (i % 10), b"v%d" % i + b"y" * 1200)]))
        log.roll()
        assert m.cleaner is not None
        deadline = _time.monotonic() + 60
        while m.cleaner.manager.all_cleaner_checkpoints().get(("c", 0), 0) < 501 or log.log_start_offset == 0:
            assert _time.monotonic() < deadline, "the cleaner threads never cleaned the log"
            threading.Event().wait(0.02)
        assert [r.key for b in log.batches_from(log.log_start_offset) for r in b.records()] == [
            b"k%d" % i for i in range(10)]
        assert m.cleaner.metric_values()["DeadThreadCount"] == 0
        from local import metrics

        names = {family.name for family in metrics.REGISTRY.collect()}
        assert {"max_dirty_percent", "cleaner_recopy_percent", "max_clean_time_secs", "max_compaction_delay_secs"} <= names


def _cli(*args: str) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "tiered.cli", *args], capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def test_tiered_compact_status_and_dump(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False) as m:
        log = m.get_or_create_log("c", 0, {"cleanup.policy": "compact"})
        for i in range(1000):
            log.append(MemoryRecords.build([SimpleRecord(T0, b"k%d" % (i % 20), b"v" * 100)]))
        log.roll()
        m.get_or_create_log("plain", 0)
    code, out, err = _cli("status", "--log-dirs", str(data))
    assert code == 0 and "compacted: never cleaned, dirty ratio 1.00" in out, out + err
    code, out, err = _cli("compact", "--log-dirs", str(data))
    assert code == 0, err
    assert out.startswith("c-0: cleaned offsets 0..999: 1,000 records (") and "20 (" in out
    assert "next cleaning starts at offset 1000" in out and "plain" not in out
    code, out, err = _cli("compact", "--log-dirs", str(data), "-t", "c", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["partitions"][0]["cleaned"] is False and "nothing to clean" in doc["partitions"][0]["why_not"]
    code, out, err = _cli("status", "--log-dirs", str(data))
    assert "compacted: cleaned below offset 1000, dirty ratio 0.00" in out
    code, out, err = _cli("dump", str(data / CLEANER_OFFSET_CHECKPOINT_FILENAME))
    assert code == 0 and "topic: c partition: 0 offset: 1000" in out
    code, out, err = _cli("compact", "--log-dirs", str(data), "-t", "nope")
    assert code == 1 and "no topic nope" in err
    code, out, err = _cli("compact", "--log-dirs", str(tmp_path / "typo"))  # a typo: no data dir made, exit 2
    assert code == 2 and f"no such data dir: {tmp_path / 'typo'}" in err and not (tmp_path / "typo").exists()


def test_a_damaged_batch_stops_the_cleaning_of_its_partition_and_loses_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False) as m:
        log = m.get_or_create_log("c", 0, {"cleanup.policy": "compact"})
        for i in range(200):
            log.append(MemoryRecords.build([SimpleRecord(T0, b"k%d" % (i % 20), b"v%d" % i)]))
        log.roll()
    segment = data / "c-0" / "00000000000000000000.log"
    raw = bytearray(segment.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    segment.write_bytes(bytes(raw))
    before = {p.name: p.read_bytes() for p in (data / "c-0").iterdir() if p.suffix == ".log"}
    code, out, _ = _cli("compact", "--log-dirs", str(data))
    assert code == 1 and out.startswith("c-0: cleaning FAILED: ") and "CRC" in out
    assert {p.name: p.read_bytes() for p in (data / "c-0").iterdir() if p.suffix == ".log"} == before
    assert not list((data / "c-0").glob("*.cleaned"))


def _damaged_compacted(data: Path, damage: Any) -> dict[str, bytes]:
    """A compacted partition of 200 records in batches of 5 (one closed segment), ``damage(raw, positions)`` done
    to its segment file: the segment files as they are then."""
    with LogManager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False) as m:
        log = m.get_or_create_log("c", 0, {"cleanup.policy": "compact"})
        for i in range(0, 200, 5):
            log.append(MemoryRecords.build([SimpleRecord(T0, b"k%d" % j, b"v%d" % j) for j in range(i, i + 5)]))
        log.roll()
    segment = data / "c-0" / "00000000000000000000.log"
    raw = bytearray(segment.read_bytes())
    positions, at = [], 0
    while at < len(raw):
        positions.append(at)
        at += int.from_bytes(raw[at + 8 : at + 12], "big") + 12
    damage(raw, positions)
    segment.write_bytes(bytes(raw))
    return {p.name: p.read_bytes() for p in (data / "c-0").iterdir() if p.suffix == ".log"}


def _set_length(raw: bytearray, positions: list[int]) -> None:
    raw[positions[3] + 8 : positions[3] + 12] = (1 << 20).to_bytes(4, "big")  # past the segment's end


def _shift_base(delta: int) -> Any:
    def damage(raw: bytearray, positions: list[int]) -> None:
        at = positions[3]
        raw[at : at + 8] = (int.from_bytes(raw[at : at + 8], "big") + delta).to_bytes(8, "big")  # outside the CRC
    return damage


@pytest.mark.parametrize(("damage", "found"), [
    (_set_length, "not a whole batch at position"),  # it dropped the rest of the segment: 185 records, exit 0
    (_shift_base(3), "a batch out of order at position"),  # it rewrote the overlap into batches with valid CRCs
    (_shift_base(-3), "a batch out of order at position"),
    (_shift_base(1000), "a batch out of order at position"),  # it named the .cleaned index, not the damage
])
def test_damage_outside_the_crc_stops_the_cleaning_and_loses_nothing(tmp_path: Path, damage: Any, found: str) -> None:
    """A batch length pointing past the end of a closed segment is no torn tail (the load recovers those, in
    segments past the recovery point): the cleaner found the end of the data there and rewrote the segment without
    the 185 records after it, exit 0, and verify was OK afterwards. A base offset is outside the CRC too."""
    data = tmp_path / "data"
    before = _damaged_compacted(data, damage)
    code, out, _ = _cli("compact", "--log-dirs", str(data))
    assert code == 1 and out.startswith("c-0: cleaning FAILED: CorruptRecordError: ") and found in out, out
    assert "00000000000000000000.log" in out
    assert {p.name: p.read_bytes() for p in (data / "c-0").iterdir() if p.suffix == ".log"} == before
    assert not list((data / "c-0").glob("*.cleaned"))


def test_a_cleaned_segment_whose_indexes_fill_leaves_the_rest_unindexed_and_the_partition_cleanable(
        tmp_path: Path) -> None:
    """The grouping counts its sources' index entries, but a segment's first batch, or a segment smaller than
    index.interval.bytes, has none, while the cleaned segment indexes every interval of its own bytes: with a small
    segment.index.bytes and time-rolled segments the cleaned one's index filled (IndexFullError), and every later
    cleaning failed the same way."""
    log = _log(tmp_path, segment_index_bytes=96, index_interval_bytes=64)
    written = {}
    for i in range(120):
        key = b"k%d" % i
        written[key] = _put(log, key, b"v%d-" % i + b"x" * 50)
        log.roll()  # one batch a segment: no index entry in any of them
    log.roll()
    assert all(s.offset_index.entries == 0 for s in log.segments.values()) and len(log.segments.values()) > 100
    reports = _cleaner(tmp_path, log).clean_pass()
    assert reports[0].cleaned, reports
    assert [(o, k) for o, k, _ in _records(log)] == sorted((o, k) for k, o in written.items())
    for offset in written.values():  # every offset is found through the (sparse) indexes
        (batch, *_) = log.batches_from(offset)
        assert batch.base_offset <= offset <= batch.last_offset
    _decodes(log)
    log.close()


def _gap_then_segment(tmp_path: Path) -> Log:
    """Segment 0 holding key ``cold`` at 0 and ``hot`` at 1..3, ending in a gap (4..9); segment 10 holding ``hot`` at
    10..12; the active segment 20 holding ``other``. A cleaning merges 0 and 10 into one segment holding 0 and 12."""
    log = _log(tmp_path)
    now = log.time.milliseconds()
    log.append_as_follower(MemoryRecords.build([SimpleRecord(now, b"cold", b"c")], base_offset=0))
    log.append_as_follower(MemoryRecords.build([SimpleRecord(now, b"hot", b"h%d" % i) for i in range(3)], base_offset=1))
    log.roll(10)
    log.append_as_follower(MemoryRecords.build([SimpleRecord(now, b"hot", b"h%d" % i) for i in range(3)], base_offset=10))
    log.roll(20)
    log.append_as_follower(MemoryRecords.build([SimpleRecord(now, b"other", b"o")], base_offset=20))
    log.update_high_watermark(log.log_end_offset)
    assert log.segments.base_offsets() == [0, 10, 20]
    return log


def test_a_read_in_a_gap_while_the_cleaner_swaps_segments_is_answered_not_taken_for_damage(tmp_path: Path) -> None:
    """The swap put the merged segment 0 (0 and 12, a gap between) in the lookup list, then removed segment 10 only
    after renaming files: a read of offset 5 in between found batch 12 after the gap, the last of its segment, and
    "the next segment" starting at 10, below it: CORRUPT_MESSAGE to Kafka clients (a helper's pass, librdkafka
    and kafka-python). The list now changes in one step."""
    log = _gap_then_segment(tmp_path)
    seen: list[tuple[list[int], int]] = []
    delete = log._async_delete

    def read_during_the_swap(segment: Any) -> None:
        if not seen:  # the first old segment about to be renamed .deleted: the swap is under way
            info = log.read(5)
            seen.append((log.segments.base_offsets(), next(info.records.batches()).base_offset))
        delete(segment)

    log._async_delete = read_during_the_swap  # type: ignore[method-assign]
    try:
        assert _cleaner(tmp_path, log).clean_pass()[0].cleaned
        assert seen == [([0, 20], 10)]  # the batch holding 12 (a cleaned batch keeps its base offset, as Kafka's)
        assert _records(log) == [(0, b"cold", b"c"), (12, b"hot", b"h2"), (20, b"other", b"o")]
        cleaned = log.segments.get(0)
        assert cleaned is not None  # its errors name the file as it is called now, not the cleaning's .cleaned
        assert str(cleaned.log.source_path) == str(log.dir / "00000000000000000000.log")
    finally:
        log.close()


def test_a_read_whose_segment_is_swapped_out_under_it_skips_none_of_its_replacements_records(tmp_path: Path) -> None:
    """A read of offset 5 found nothing in segment 0 (its tail is a gap) and went on to the segment after it; a
    cleaning that merged 0 and 10 in between made that the segment after the merged one: the read answered with
    offset 20 and skipped 12, silently. It now reads the segment that replaced its own."""
    log = _gap_then_segment(tmp_path)
    old = log.segments.get(0)
    assert old is not None
    cleaner = _cleaner(tmp_path, log)
    read = old.read
    reports: list[Any] = []

    def read_then_swap(*args: Any, **kwargs: Any) -> Any:
        info = read(*args, **kwargs)
        if info is None and not reports:  # nothing at 5 or after in the old segment: the cleaning swaps it now
            reports.extend(cleaner.clean_pass())
        return info

    old.read = read_then_swap  # type: ignore[method-assign]
    try:
        info = log.read(5)
        assert reports and reports[0].cleaned and log.segments.get(0) is not old
        assert [r.offset for r in next(info.records.batches()).records()] == [12]
    finally:
        log.close()


def test_a_cleaned_segment_with_more_batches_than_its_index_room_is_recovered_after_a_crash(tmp_path: Path) -> None:
    """segment.index.bytes=24 (valid: Kafka's minimum is 4) holds 3 offset and 2 time entries, so the log rolls every
    2 batches; a cleaning merges two such segments into one of 4 batches, whose indexes have room for fewer entries
    than index.interval.bytes=1 asks (the cleaner leaves the rest unindexed). A crash before the next flush recovers
    that segment: the rebuilt indexes must stop where they are full, not fail the load with IndexFullError."""
    time = MockTime(ms=1_700_000_000_000)
    config = dataclasses.replace(topic_config(tmp_path, cleanup_policy="compact", index_interval_bytes=1,
                                              segment_index_bytes=24, file_delete_delay_ms=0),
                                 min_cleanable_dirty_ratio=0.0)
    log = Log.open(tmp_path / "t-0", config, time=time, scheduler=time.scheduler)
    for i in range(8):
        time.sleep(1)
        log.append(MemoryRecords.build([SimpleRecord(time.milliseconds(), b"k%d" % i, b"v%d" % i)]))
    assert [s.base_offset for s in log.segments.values()] == [0, 2, 4, 6]
    cleaner = LogCleaner(LogConfig.from_properties({"log.dirs": str(tmp_path)}), lambda: {("t", 0): log},
                         lambda tp: tmp_path, time=time)
    assert any(r.cleaned for r in cleaner.clean_pass())
    log.delete_pending_segments()
    assert [s.base_offset for s in log.segments.values()] == [0, 4, 6]
    log.close_handlers()  # a crash: the recovery point is still 0
    log = Log.open(tmp_path / "t-0", config, time=time, scheduler=time.scheduler, had_clean_shutdown=False)
    try:
        assert [(r.offset, r.value) for b in log.batches_from(0) for r in b.records()] == [
            (i, b"v%d" % i) for i in range(8)]
        for i in range(8):
            assert next(iter(log.read(i, 100).records.batches())).base_offset == i
        assert log.offset_for_timestamp(1_700_000_000_000 + 3).offset == 2
    finally:
        log.close_handlers()
