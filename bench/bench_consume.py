"""Consume with CRC checks against the same consume without them (issue 13: verified reads).

A consumer reads the whole log with ``Log.read`` from where its last read ended and decodes every record
(``records.batches()`` then ``batch.records()``, what ``tiered consume`` does). With checks (the default) each
batch's CRC-32C is computed before it is decoded; ``batches(verify=False)`` is Kafka's ``check.crcs=false``.
Target: >= 0.85x. The last line (no target) is the worst case, a walk of the batches that decodes no record,
where the CRC is all the work there is.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from bench._util import report
from local.config import LogConfig
from local.log import Log
from local.records import MemoryRecords, SimpleRecord
from local.scheduler import Scheduler

TOTAL_BYTES = 32 * 1024 * 1024
FETCH_BYTES = 1024 * 1024


def _fill(log: Log, value_size: int, per_batch: int) -> int:
    value = b"v" * value_size
    batch = MemoryRecords.build([SimpleRecord(1_700_000_000_000, b"key-%d" % i, value) for i in range(per_batch)])
    count = TOTAL_BYTES // len(batch)
    for _ in range(count):
        log.append(batch)
    return count * per_batch


def _consume(log: Log, verify: bool, decode: bool) -> int:
    offset, end, total = 0, log.log_end_offset, 0
    while offset < end:
        info = log.read(offset, FETCH_BYTES)
        for batch in info.records.batches(verify=verify):
            if decode:
                for rec in batch.records():
                    total += len(rec.value)
            offset = batch.last_offset + 1
    return total


def _compare(log: Log, records: int, name: str, decode: bool, target: float | None) -> None:
    # CPU time of this process (the data is in the page cache: the consume is CPU-bound), interleaved and best of
    # 9, so that other processes on a shared machine weigh on both sides alike and as little as possible.
    checked = unchecked = float("inf")
    for _ in range(9):
        start = time.process_time()
        _consume(log, True, decode)
        checked = min(checked, time.process_time() - start)
        start = time.process_time()
        _consume(log, False, decode)
        unchecked = min(unchecked, time.process_time() - start)
    report(name, records / checked / 1e3, records / unchecked / 1e3, "k records/s", "without CRC checks", target=target)


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-consume-"))
    scheduler = Scheduler("bench")
    scheduler.startup()
    try:
        config = LogConfig.from_properties({"log.dirs": str(tmp)}).topic_config({"segment.bytes": 64 * 1024 * 1024})
        for name, value_size, per_batch in (("consume 100 x 200 B records/batch", 200, 100),
                                            ("consume 16 x 1 KiB records/batch", 1024, 16)):
            log = Log.open(tmp / f"bench-{value_size}-0", config, scheduler=scheduler)
            try:
                records = _fill(log, value_size, per_batch)
                log.flush()
                _consume(log, True, True)  # warm the page cache
                _compare(log, records, f"{name}, CRC checked", True, 0.85)
                if value_size == 1024:
                    _compare(log, records, "batch walk without decoding (worst case), CRC checked", False, None)
            finally:
                log.close()
    finally:
        scheduler.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
