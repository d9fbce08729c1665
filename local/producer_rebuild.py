"""The producer state a log derives from its batches: Kafka's ``UnifiedLog.rebuildProducerState`` (at load and after
truncation) and ``analyzeAndValidateProducerState`` (before an append is written).

Rebuilding reloads the latest producer snapshot at or below the target offset, then replays the batches that carry
a producer id from there, taking snapshots at the bases of the last two segments and at the target (as Kafka does,
so the next load starts from a snapshot). After a clean shutdown of an old broker that wrote no snapshots, empty
snapshots are written instead of a full scan. The per-append analysis checks every producer's batches against its
state and returns the updates, applied only once the batches are written, so a rejected batch leaves no trace.

Shared by :mod:`local.log` and :mod:`local.loader`, so neither imports the other for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from local.fetch import LogOffsetMetadata
from local.producer_state import AppendOrigin, CompletedTxn, ProducerAppendInfo, ProducerStateManager

if TYPE_CHECKING:
    from local.records import RecordBatch
    from local.scheduler import Time
    from local.segments import LogSegments


def analyze_producer_state(
    psm: ProducerStateManager, batches: Sequence[RecordBatch], origin: AppendOrigin
) -> tuple[list[ProducerAppendInfo], list[CompletedTxn]]:
    """Each producer's pending update and the transactions ``batches`` complete, validated against ``psm`` (raises,
    saying what is wrong, before anything is written); nothing in ``psm`` changes."""
    updated: dict[int, ProducerAppendInfo] = {}
    completed: list[CompletedTxn] = []
    for batch in batches:
        if not batch.has_producer_id:
            continue
        info = updated.get(batch.producer_id)
        if info is None:
            info = psm.prepare_update(batch.producer_id, origin)
            updated[batch.producer_id] = info
        txn = info.append_batch(batch, LogOffsetMetadata(batch.base_offset, -1, -1))
        if txn is not None:
            completed.append(txn)
    return list(updated.values()), completed


def rebuild_producer_state(
    psm: ProducerStateManager,
    segments: LogSegments,
    log_start_offset: int,
    last_offset: int,
    time: Time,
    reload_from_clean_shutdown: bool = False,
) -> None:
    """Kafka's ``rebuildProducerState``: reload the latest snapshot at or below ``last_offset``, then replay."""
    segs = list(segments.values())
    offsets_to_snapshot: list[int] = [last_offset]
    if segs:
        offsets_to_snapshot = [s.base_offset for s in segs[-2:]] + [last_offset]
    if psm.latest_snapshot_offset() is None and reload_from_clean_shutdown:
        # A clean shutdown without snapshots (an old broker): empty snapshots instead of a full scan.
        for offset in offsets_to_snapshot:
            psm.update_map_end_offset(offset)
            psm.take_snapshot()
        return
    psm.truncate_and_reload(log_start_offset, last_offset, time.milliseconds())
    if last_offset > psm.map_end_offset:
        for seg in segments.values(psm.map_end_offset, last_offset):
            start = max(seg.base_offset, psm.map_end_offset, log_start_offset)
            psm.update_map_end_offset(start)
            if seg.base_offset in offsets_to_snapshot[:-1]:
                psm.take_snapshot()
            info = seg.read(start, 2**62, None, False)
            if info is None:
                continue
            for batch in _iter_batches(info.records.batches(verify=False)):
                if batch.base_offset >= last_offset:
                    break
                if batch.has_producer_id:
                    txn = psm.apply_batch(batch)
                    if txn is not None:
                        psm.complete_txn(txn)
    psm.update_map_end_offset(last_offset)
    psm.take_snapshot()


def _iter_batches(batches: Iterable[Any]) -> Iterator[Any]:
    for batch in batches:
        yield batch.load() if hasattr(batch, "load") else batch
