"""read_committed through the Spark source's planner and executor reader against a simple model of a transactional
history (no Spark: :func:`tiered.spark.planning.plan` and :func:`tiered.spark.reader.read_piece` are what the
driver and the executors run).

A history of six producers: plain records, transactions that interleave and span segments, commit and abort markers
segments after their records, transactions left open (which hold the last stable offset back), rolls, copies to the
remote tier at random points, the columnar copy (one file per segment, or merged files) and, for some, the copied
local segments removed as local retention removes them. The model keeps each offset's value and its transaction's
fate: a read_committed read of ``[start, end)`` returns the plain records and the committed ones below the last
stable offset, each once, whatever the tiers, the columnar copy and the piece sizes.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from tests.logutil import local_tier_props
from tiered.remote_log_manager import RemoteLogManager
from tiered.spark.options import parse_options
from tiered.spark.planning import input_partitions, plan
from tiered.spark.reader import read_piece

PRODUCERS = range(1000, 1006)
STEPS = 240


def _props(root: Path) -> dict[str, str]:
    return local_tier_props(root, **{"log.index.interval.bytes": "128"})  # index entries close together: splits


def _history(root: Path, rnd: random.Random, columnar: bool) -> tuple[dict[int, bytes], int, int, int, int, int]:
    """Write the history; the model's read_committed records (offset -> value) below its last stable offset, and
    (log start, local log start, remote end + 1, last stable offset, log end) as the engine has them."""
    now = int(time.time() * 1000)
    values: dict[int, tuple[bytes, tuple[int, int] | None]] = {}  # offset -> (value, its transaction or None)
    fate: dict[tuple[int, int], str] = {}
    open_txn: dict[int, int | None] = dict.fromkeys(PRODUCERS)
    count = dict.fromkeys(PRODUCERS, 0)
    sequence = dict.fromkeys(PRODUCERS, 0)
    with LogManager(LogConfig.from_properties(_props(root)), start_scheduler=False) as m:
        config = {"remote.storage.enable": "true"}
        if columnar:
            config |= {"remote.log.columnar.enable": "true",
                       "remote.log.columnar.file.bytes": str(rnd.choice([1, 10**8]))}
        log = m.get_or_create_log("x", 0, config)
        rlm = m.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        for step in range(STEPS):
            pid, r = rnd.choice(PRODUCERS), rnd.random()
            if r < 0.25:
                records = [SimpleRecord(now, b"k", b"plain-%d-%d" % (step, j)) for j in range(rnd.randint(1, 3))]
                info = log.append(MemoryRecords.build(records))
                for j, offset in enumerate(range(info.first_offset, info.last_offset + 1)):
                    values[offset] = (records[j].value or b"", None)
            elif r < 0.75 or open_txn[pid] is None:
                txn = open_txn[pid]
                if txn is None:
                    txn = open_txn[pid] = count[pid]
                    count[pid] += 1
                    fate[pid, txn] = "open"
                records = [SimpleRecord(now, b"k", b"tx-%d-%d-%d-%d" % (pid, txn, step, j))
                           for j in range(rnd.randint(1, 4))]
                info = log.append(MemoryRecords.build(records, producer_id=pid, producer_epoch=0,
                                                      base_sequence=sequence[pid], is_transactional=True))
                sequence[pid] += len(records)
                for j, offset in enumerate(range(info.first_offset, info.last_offset + 1)):
                    values[offset] = (records[j].value or b"", (pid, txn))
            elif step < STEPS * 0.85 or rnd.random() < 0.5:  # (late on, half the transactions are left open)
                commit = rnd.random() < 0.5
                log.append(MemoryRecords.end_transaction_marker(pid, 0, commit=commit))
                fate[pid, open_txn[pid]] = "commit" if commit else "abort"  # type: ignore[index]
                open_txn[pid] = None
            if rnd.random() < 0.04:
                log.roll()
            if rnd.random() < 0.03:
                rlm.run_once(m.all_logs())
        rlm.run_once(m.all_logs())
        finished = rlm.finished_segments(rlm.topic_id_partition(log))
        ends = (log.log_start_offset, log.local_log_start_offset, max((md.end_offset for md in finished), default=-1) + 1,
                log.last_stable_offset, log.log_end_offset)
    firsts = [min(o for o, (_, t) in values.items() if t == key) for key, f in fate.items() if f == "open"]
    lso = min(firsts, default=ends[4])
    assert ends[3] == lso  # the engine's last stable offset is the model's
    committed = {o: v for o, (v, t) in values.items() if o < lso and (t is None or fate[t] == "commit")}
    return committed, *ends


def _remove_copied_local_segments(root: Path, remote_end: int) -> int:
    """What local retention does: the local segments wholly in the remote tier removed; the new local start."""
    directory = root / "data" / "x-0"
    bases = sorted(int(f.stem) for f in directory.glob("*.log"))
    start = bases[0]
    for base, following in itertools.pairwise(bases):
        if following > remote_end:
            break
        for suffix in (".log", ".index", ".timeindex", ".txnindex", ".snapshot"):
            (directory / f"{base:020d}{suffix}").unlink(missing_ok=True)
        start = following
    return start


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), columnar=st.booleans(), drop_local=st.booleans())
def test_read_committed_reads_are_the_models_records_once_each(tmp_path_factory: pytest.TempPathFactory, seed: int,
                                                                columnar: bool, drop_local: bool) -> None:
    root = tmp_path_factory.mktemp("model")
    rnd = random.Random(seed)
    committed, _log_start, local_start, remote_end, lso, log_end = _history(root, rnd, columnar)
    if drop_local:
        local_start = _remove_copied_local_segments(root, remote_end)
    base: dict[str, Any] = {**{f"config.{k}": v for k, v in _props(root).items()}, "cacheDir": str(root / "cache"),
                            "topics": "x", "isolationLevel": "read_committed", "failOnDataLoss": "false"}
    for _ in range(12):
        start = rnd.randint(0, log_end)
        end = rnd.randint(start, log_end + 2)
        tiers = rnd.choice(["both", "remote", "local"])
        options = {**base, "startingOffsets": json.dumps({"x": {"0": start}}),
                   "endingOffsets": json.dumps({"x": {"0": end}}), "tiers": tiers,
                   "columnarCopy": rnd.choice(["true", "false"]),
                   "maxBytesPerPartition": rnd.choice(["1024", "100000000"])}
        if rnd.random() < 0.3:
            options["minPartitions"] = str(rnd.choice([2, 5, 50]))
            pieces = [p for group in input_partitions(parse_options(options)) for p in group]
        else:
            pieces = plan(parse_options(options))
        lo, hi = start, min(end, lso)
        if tiers == "remote":
            hi = min(hi, remote_end)
        elif tiers == "local":
            lo = max(lo, local_start)
        got = [(o, v) for p in pieces for rb in read_piece(p)
               for o, v in zip(rb.column("offset").to_pylist(), rb.column("value").to_pylist(), strict=True)]
        assert sorted(got) == sorted((o, v) for o, v in committed.items() if lo <= o < hi), options  # (once each)
