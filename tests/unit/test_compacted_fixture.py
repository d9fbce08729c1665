"""Every Kafka broker dir in tests/fixtures reads back completely (issue 30, item 2), the compacted one above all:
``__consumer_offsets-31`` as Kafka 3.x's cleaner leaves it (its first segment's first batch holds offset 2, a batch
re-encoded around removed records, a tombstone with its delete horizon, a segment ending before the next one's base
offset). kafka-python decodes the same files as the oracle; reads of offsets in gaps answer the next batch; `tiered
consume` and `verify` agree. The fixture is made by tests/fixtures/make_compacted_kraft_logs.py, which must still
reproduce it byte for byte."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords as KafkaPythonRecords

from local import LogConfig
from tiered.composition import open_log_manager

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
COMPACTED = FIXTURES / "compacted-kraft-logs"
BROKER_DIRS = [COMPACTED, FIXTURES / "kafka-4.0-kraft-logs"]

Record = tuple[int, bytes | None, bytes | None]


def _copy(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / source.name
    shutil.copytree(source, target)
    return target


def _partitions(data: Path) -> list[tuple[str, int]]:
    out = []
    for child in sorted(data.iterdir()):
        if child.is_dir() and any(child.glob("*.log")):
            topic, _, partition = child.name.rpartition("-")
            out.append((topic, int(partition)))
    return out


def _oracle(pdir: Path) -> list[Record]:
    """Every record of every segment as kafka-python decodes the files (control records included)."""
    out: list[Record] = []
    for path in sorted(pdir.glob("*.log")):
        records = KafkaPythonRecords(path.read_bytes())
        while (batch := records.next_batch()) is not None:
            out += [(r.offset, None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value))
                    for r in batch]
    return out


def _read_back(log: object, start: int) -> list[Record]:
    out: list[Record] = []
    offset = start
    while offset < log.log_end_offset:  # type: ignore[attr-defined]
        batches = list(log.read(offset).records.batches())  # type: ignore[attr-defined]
        assert batches, f"a read at {offset} below the log end answered nothing"
        for batch in batches:
            out += [(r.offset, r.key, r.value) for r in batch.records() if r.offset >= offset]
            offset = batch.last_offset + 1
    return out


def test_the_script_reproduces_the_compacted_fixture_byte_for_byte(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_fixture", FIXTURES / "make_compacted_kraft_logs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write(tmp_path / "made")
    made = {p.relative_to(tmp_path / "made"): p.read_bytes() for p in sorted((tmp_path / "made").rglob("*")) if p.is_file()}
    kept = {p.relative_to(COMPACTED): p.read_bytes() for p in sorted(COMPACTED.rglob("*")) if p.is_file()}
    assert made == kept


@pytest.mark.parametrize("source", BROKER_DIRS, ids=lambda p: p.name)
def test_every_broker_dir_reads_back_completely_as_kafka_python_decodes_it(source: Path, tmp_path: Path) -> None:
    data = _copy(source, tmp_path)
    config = LogConfig.from_properties({"log.dirs": str(data)})
    partitions = _partitions(data)
    assert partitions
    with open_log_manager(config, start_scheduler=False, read_only=True) as manager:
        for topic, partition in partitions:
            log = manager.get_log(topic, partition)
            assert log is not None, (topic, partition)
            expected = _oracle(data / f"{topic}-{partition}")
            assert expected and log.log_end_offset == expected[-1][0] + 1
            assert _read_back(log, log.log_start_offset) == expected


def test_reads_in_the_compacted_gaps_answer_the_next_batch(tmp_path: Path) -> None:
    data = _copy(COMPACTED, tmp_path)
    with open_log_manager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False,
                          read_only=True) as manager:
        log = manager.get_log("__consumer_offsets", 31)
        assert log is not None and log.log_start_offset == 0
        answers = {offset: next(log.read(offset).records.batches()).base_offset for offset in range(16)}
        assert answers == {0: 2, 1: 2, 2: 2, 3: 3, 4: 3, 5: 3, 6: 3, 7: 8, 8: 8, 9: 12, 10: 12, 11: 12,
                           12: 12, 13: 13, 14: 14, 15: 14}
        records = _read_back(log, 0)
        assert [o for o, _, _ in records] == [2, 4, 5, 8, 12, 13, 14, 15]
        assert [o for o, _, v in records if v is None] == [8], "the tombstone, as the cleaner kept it"


def test_consume_and_verify_take_the_compacted_dir_as_it_is(tmp_path: Path) -> None:
    data = _copy(COMPACTED, tmp_path)
    consume = subprocess.run([sys.executable, "-m", "tiered.cli", "consume", "--log-dirs", str(data), "-t",
                              "__consumer_offsets", "-p", "31", "--offset", "0", "--json"],
                             capture_output=True, text=True, timeout=300)
    assert consume.returncode == 0, consume.stderr
    assert [int(line.split(",")[0].split(":")[1]) for line in consume.stdout.splitlines()] == [2, 4, 5, 8, 12, 13, 14, 15]
    assert '"value": null' in consume.stdout.splitlines()[3]  # the tombstone
    verify = subprocess.run([sys.executable, "-m", "tiered.cli", "verify", "--log-dirs", str(data)],
                            capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0, verify.stdout + verify.stderr
