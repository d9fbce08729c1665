"""ProducerStateManager: the cases of Kafka's ProducerStateManagerTest that apply to a single node."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from local import filenames
from local.errors import InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceError
from local.producer_state import AppendOrigin, ProducerStateManager
from local.records import MemoryRecords, RecordBatch, SimpleRecord

T0 = 1_700_000_000_000


def data(pid: int, epoch: int, seq: int, offset: int, n: int = 1, txn: bool = False) -> RecordBatch:
    mr = MemoryRecords.build([SimpleRecord(T0, None, b"v")] * n, producer_id=pid, producer_epoch=epoch,
                             base_sequence=seq, base_offset=offset, is_transactional=txn)
    return next(iter(mr.batches()))  # type: ignore[return-value]


def marker(pid: int, epoch: int, offset: int, commit: bool, coordinator_epoch: int = 0) -> RecordBatch:
    mr = MemoryRecords.end_transaction_marker(pid, epoch, commit=commit, base_offset=offset, timestamp=T0,
                                              coordinator_epoch=coordinator_epoch)
    return next(iter(mr.batches()))  # type: ignore[return-value]


def append(psm: ProducerStateManager, batch: RecordBatch, origin: AppendOrigin = AppendOrigin.CLIENT):  # type: ignore[no-untyped-def]
    info = psm.prepare_update(batch.producer_id, origin)
    completed = info.append_batch(batch)
    psm.update(info)
    psm.update_map_end_offset(batch.last_offset + 1)
    if completed is not None:
        psm.complete_txn(completed)
    return completed


def test_basic_id_mapping_and_sequence_checks(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    append(psm, data(1, 0, 0, 0))
    append(psm, data(1, 0, 1, 1))
    assert psm.last_entry(1).last_seq == 1  # type: ignore[union-attr]
    with pytest.raises(OutOfOrderSequenceError, match="out of order"):
        append(psm, data(1, 0, 5, 2))
    # a new epoch must start at sequence 0
    with pytest.raises(OutOfOrderSequenceError, match="new epoch"):
        append(psm, data(1, 1, 3, 2))
    append(psm, data(1, 1, 0, 2))
    # fencing: an older epoch is refused from clients, tolerated from replication
    with pytest.raises(InvalidProducerEpochError):
        append(psm, data(1, 0, 2, 3))
    append(psm, data(1, 0, 2, 3), AppendOrigin.REPLICATION)


def test_sequence_wraps_around_int_max(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    append(psm, data(1, 0, 2**31 - 2, 0, n=2))  # sequences MAX-1, MAX
    append(psm, data(1, 0, 0, 2))
    assert psm.last_entry(1).last_seq == 0  # type: ignore[union-attr]


def test_dedup_keeps_the_last_five_batches(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    for i in range(7):
        append(psm, data(1, 0, i, i))
    assert psm.find_duplicate_batch(data(1, 0, 6, 99)) is not None
    assert psm.find_duplicate_batch(data(1, 0, 2, 99)) is not None
    assert psm.find_duplicate_batch(data(1, 0, 1, 99)) is None  # fell out of the window of 5
    assert psm.find_duplicate_batch(data(1, 1, 6, 99)) is None  # another epoch


def test_transactions_first_unstable_and_last_stable(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    append(psm, data(1, 0, 0, 10, txn=True))
    append(psm, data(2, 0, 0, 11, txn=True))
    assert psm.first_unstable_offset() == 10
    completed = append(psm, marker(1, 0, 12, commit=False))
    assert completed is not None and (completed.first_offset, completed.last_offset, completed.is_aborted) == (10, 12, True)
    assert psm.last_stable_offset(completed) == 11  # producer 2's transaction is still open
    psm.on_high_watermark_updated(13)
    assert psm.first_unstable_offset() == 11
    with pytest.raises(InvalidTxnStateError, match="expected a transactional write"):
        append(psm, data(2, 0, 1, 13, txn=False))
    append(psm, marker(2, 0, 13, commit=True))
    psm.on_high_watermark_updated(14)
    assert psm.first_unstable_offset() is None


def test_snapshot_take_load_and_truncate(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path, time=lambda: T0)
    append(psm, data(1, 0, 0, 0))
    append(psm, data(2, 3, 0, 1, txn=True))
    psm.take_snapshot()
    assert filenames.producer_snapshot_file(tmp_path, 2).exists()
    append(psm, data(1, 0, 1, 2))
    psm.take_snapshot()
    again = ProducerStateManager(tmp_path, time=lambda: T0)
    again.truncate_and_reload(0, 3, T0)
    assert again.last_entry(1).last_seq == 1  # type: ignore[union-attr]
    assert again.first_unstable_offset() == 1  # the open transaction came back from the snapshot
    again.truncate_and_reload(0, 2, T0)  # truncation below the newest snapshot drops it
    assert again.snapshot_offsets() == [2]
    assert again.last_entry(1).last_seq == 0  # type: ignore[union-attr]


def test_corrupt_snapshot_falls_back_to_the_previous(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    psm = ProducerStateManager(tmp_path, time=lambda: T0)
    append(psm, data(1, 0, 0, 0))
    psm.take_snapshot()
    append(psm, data(1, 0, 1, 1))
    psm.take_snapshot()
    newest = filenames.producer_snapshot_file(tmp_path, 2)
    newest.write_bytes(newest.read_bytes()[:-3])
    again = ProducerStateManager(tmp_path, time=lambda: T0)
    with caplog.at_level(logging.WARNING):
        again.truncate_and_reload(0, 5, T0)
    assert "failed to load producer snapshot" in caplog.text
    assert again.map_end_offset == 1 and not newest.exists()
    assert again.last_entry(1).last_seq == 0  # type: ignore[union-attr]


def test_stray_snapshots_removed(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    for offset in (0, 5, 7, 10, 12):
        psm.update_map_end_offset(offset)
        psm.take_snapshot()
    psm.remove_straggling_snapshots([0, 10])
    # snapshots at segment bases stay; of the strays only the newest, above every base, is kept
    assert psm.snapshot_offsets() == [0, 10, 12]


def test_expired_producers_not_loaded(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000, time=lambda: T0)
    append(psm, data(1, 0, 0, 0))
    psm.take_snapshot()
    later = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000, time=lambda: T0 + 5000)
    later.truncate_and_reload(0, 5, T0 + 5000)
    assert later.last_entry(1) is None
    psm.remove_expired_producers(T0 + 5000)
    assert psm.is_empty()
