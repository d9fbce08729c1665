"""A log cleaning killed for real in the middle of each step of Kafka's swap protocol (``.cleaned`` -> ``.swap`` ->
the plain names, the old segments ``.deleted``): a child process (``clean_child.py``) cleans a compacted topic and
stops at a chosen step; the test SIGKILLs it there, so nothing of the cleaning's own cleanup runs. Then, in this
process, a writer loads the dir (the loader deletes ``.cleaned`` files, finishes complete ``.swap`` sets, removes
``.deleted`` ones) and:

- no ``.cleaned``, ``.swap`` or ``.deleted`` file is left;
- every key's latest value is there (tombstones included), read through the log, and nothing else but older values
  of those keys (the cleaning was cut, so some duplicates may remain);
- kafka-python decodes every batch of every segment, and ``tiered verify`` finds nothing wrong;
- a cleaning pass afterwards leaves exactly the latest value of each key below the active segment.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from tests.crash.clean_child import STEPS, props
from tests.crash.stopping import LIMIT, REPO, kill_at

pytestmark = pytest.mark.crash

CHILD = Path(__file__).with_name("clean_child.py")
KEYS = 400
RECORDS = 14_000


def _value(i: int) -> bytes | None:
    return None if i % 997 == 0 else (b"%06d" % i) * 30


def _write(data: Path) -> dict[bytes, tuple[int, bytes | None]]:
    """A compacted topic of several closed segments; the latest (offset, value) of each key."""
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    now = int(time.time() * 1000)
    with LogManager(LogConfig.from_properties(props(data)), start_scheduler=False) as m:
        log = m.get_or_create_log("c", 0, {"cleanup.policy": "compact"})
        for first in range(0, RECORDS, 50):
            batch = [SimpleRecord(now, b"k%d" % (i % KEYS), _value(i)) for i in range(first, first + 50)]
            info = log.append(MemoryRecords.build(batch))
            for i, rec in zip(range(info.first_offset, info.last_offset + 1), batch, strict=True):
                latest[rec.key] = (i, rec.value)  # type: ignore[index]
        log.roll()
        assert log.number_of_segments() >= 4
    return latest


def _run_child_to(data: Path, step: str) -> None:
    kill_at(CHILD, [str(data), step], step)


@pytest.mark.parametrize("step", STEPS)
def test_a_cleaning_killed_at_each_step_loses_no_latest_value(tmp_path: Path, step: str) -> None:
    data = tmp_path / "data"
    latest = _write(data)
    _run_child_to(data, step)
    pdir = data / "c-0"
    left = sorted(p.name for p in pdir.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted")))
    assert left, f"the kill at {step} left no transient file: the step was not mid-swap"
    with LogManager(LogConfig.from_properties(props(data)), start_scheduler=False) as m:
        log = m.get_log("c", 0)
        assert log is not None
        assert not [p for p in pdir.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted"))]
        held: dict[bytes, tuple[int, bytes | None]] = {}
        for batch in log.batches_from(0):
            for rec in batch.records():
                assert rec.key is not None
                assert rec.value == _value(rec.offset), f"offset {rec.offset} reads a value it was not written with"
                held[rec.key] = (rec.offset, rec.value)
        assert held == latest, f"after a kill at {step}, latest values are missing or stale"
        for path in sorted(pdir.glob("*.log")):
            raw = path.read_bytes()
            pos = 0
            while pos < len(raw):
                size = int.from_bytes(raw[pos + 8 : pos + 12], "big") + 12
                assert DefaultRecordBatch(raw[pos : pos + size]).validate_crc()
                pos += size
        assert m.cleaner is not None
        for _ in range(10):
            if not any(r.cleaned for r in m.cleaner.clean_pass()):
                break
        kept = [(r.offset, r.key) for b in log.batches_from(0) for r in b.records()]
        assert sorted(kept) == sorted((o, k) for k, (o, _) in latest.items())
    verify = subprocess.run([sys.executable, "-m", "tiered.cli", "verify", "--log-dirs", str(data)], cwd=REPO,
                            capture_output=True, text=True, timeout=LIMIT)
    assert verify.returncode == 0, verify.stdout + verify.stderr
