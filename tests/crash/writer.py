"""The writer process the SIGKILL tests kill: ``python writer.py PARTITION_DIR SEED T0``.

It opens the log as a broker restarting after a crash would (unclean, from the recovery point in the side file
``PARTITION_DIR/../recovery-point``), prints ``READY <log end offset>``, then loops forever: appends idempotent
batches whose content is derived from their offsets (see :func:`expected_value`), rolls now and then, runs
retention and removes the segments it renamed ``.deleted``, takes producer snapshots, and after every
``flush()`` prints ``ACK <last offset>``: everything up to that offset must survive any crash from then on.
After some flushes it also writes the recovery point to the side file (temp file, fsync, rename), as
LogManager's checkpoint would.

Batches come from one idempotent producer whose sequence numbers equal the offsets (base sequence = base offset),
so after any crash the producer state can be checked: a retry of the last batch must be a duplicate. Record
timestamps are ``T0 + offset`` with T0 the test's start time: far older timestamps would make the producer look
expired (``producer.id.expiration.ms``) when its state is reloaded from a snapshot, as in Kafka.
"""

from __future__ import annotations

import dataclasses
import os
import random
import sys
from pathlib import Path

from local.config import LogConfig, TopicConfig
from local.log import Log
from local.records import MemoryRecords, SimpleRecord

PRODUCER_ID = 4242
PRODUCER_EPOCH = 0
SEGMENT_BYTES = 3000
RETENTION_BYTES = 24_000


def expected_value(offset: int) -> bytes:
    """The value of the record at ``offset``: its offset, padded to a length that varies with it."""
    return b"v%d:" % offset + bytes([65 + offset % 26]) * (offset % 97)


def expected_timestamp(t0: int, offset: int) -> int:
    return t0 + offset


def build_batch(t0: int, base_offset: int, count: int) -> MemoryRecords:
    """The batch the writer appends at ``base_offset`` (as a client sends it: base offset 0)."""
    simple = [
        SimpleRecord(expected_timestamp(t0, o), b"k%d" % o, expected_value(o))
        for o in range(base_offset, base_offset + count)
    ]
    return MemoryRecords.build(
        simple, producer_id=PRODUCER_ID, producer_epoch=PRODUCER_EPOCH, base_sequence=base_offset
    )


def crash_config(data_dir: Path) -> TopicConfig:
    base = LogConfig.from_properties({"log.dirs": str(data_dir)}).topic_config()
    return dataclasses.replace(
        base,
        segment_bytes=SEGMENT_BYTES,
        retention_bytes=RETENTION_BYTES,
        retention_ms=-1,
        index_interval_bytes=256,
        segment_index_bytes=4096,
        file_delete_delay_ms=0,
    )


def read_recovery_point(partition_dir: Path) -> int:
    try:
        return int((partition_dir.parent / "recovery-point").read_text())
    except (FileNotFoundError, ValueError):
        return 0


def write_recovery_point(partition_dir: Path, offset: int) -> None:
    target = partition_dir.parent / "recovery-point"
    tmp = target.with_name("recovery-point.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, str(offset).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)


def main(partition_dir: Path, seed: int, t0: int) -> None:
    rng = random.Random(seed)
    log = Log.open(
        partition_dir,
        crash_config(partition_dir.parent),
        had_clean_shutdown=False,
        recovery_point=read_recovery_point(partition_dir),
        num_segment_loading_threads=rng.choice((1, 3)),
    )
    out = sys.stdout
    out.write(f"READY {log.log_end_offset}\n")
    out.flush()
    flushes = 0
    while True:
        for _ in range(rng.randint(1, 4)):
            log.append(build_batch(t0, log.log_end_offset, rng.randint(1, 6)))
        action = rng.random()
        if action < 0.05:
            log.roll()
        elif action < 0.15:
            log.delete_old_segments()
            if rng.random() < 0.7:
                log.delete_pending_segments()
        elif action < 0.2:
            log.producer_state_manager.take_snapshot()
        log.flush()
        out.write(f"ACK {log.log_end_offset - 1}\n")
        out.flush()
        flushes += 1
        if flushes % 5 == 0:
            write_recovery_point(partition_dir, log.recovery_point)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
