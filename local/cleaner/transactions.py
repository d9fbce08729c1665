"""What a cleaning knows of transactions as it walks a log: Kafka's ``CleanedTransactionMetadata``.

Kafka's rules (``LogCleaner``), which this follows:

- the cleaner never cleans past the last stable offset, so every transaction it meets is decided;
- the batches of an aborted transaction are removed at once, whatever their keys (the aborted transactions come from
  the transaction indexes ahead of the walk, so a data batch is known to be aborted when it is met);
- an ABORT marker stays while any batch of its transaction was still seen in this cleaning (the cleaned segment's
  transaction index then keeps the aborted transaction); a COMMIT marker stays while any batch of its transaction
  was seen; a marker whose transaction left no batch is "empty": it is kept until its delete horizon (set by the
  cleaning that first finds it empty, as for tombstones) has passed, then removed;
- a control batch that lost its record in an earlier cleaning is removed.
"""

from __future__ import annotations

import heapq
from typing import Any

from local.index.entries import AbortedTxn
from local.records.batch import ControlRecordType


class CleanedTransactionMetadata:
    """See the module docstring. ``cleaned_index`` (a ``TransactionIndex``) receives the aborted transactions the
    cleaned segment keeps, when set."""

    def __init__(self) -> None:
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, list[Any]] = {}  # producer id -> [AbortedTxn, last batch offset seen or None]
        self._aborted: list[tuple[int, int, AbortedTxn]] = []  # min-heap by first offset
        self._order = 0
        self.cleaned_index: Any = None

    def add_aborted_transactions(self, aborted: list[AbortedTxn]) -> None:
        for txn in aborted:
            self._order += 1
            heapq.heappush(self._aborted, (txn.first_offset, self._order, txn))

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            txn = heapq.heappop(self._aborted)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, None])

    def on_control_batch_read(self, batch: Any, control_type: ControlRecordType | None) -> bool:
        """A control batch met (``control_type`` None when it holds no record); whether it may be discarded."""
        self._consume_aborted_up_to(batch.last_offset)
        if control_type is None:
            return True  # emptied by an earlier cleaning
        producer_id = batch.producer_id
        if control_type is ControlRecordType.ABORT:
            state = self._ongoing_aborted.pop(producer_id, None)
            if state is not None and state[1] is not None:
                # Batches of the transaction were seen: the marker stays, and so does its index entry.
                if self.cleaned_index is not None:
                    self.cleaned_index.append(state[0])
                return False
            return True
        if control_type is ControlRecordType.COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False

    def on_batch_read(self, batch: Any) -> bool:
        """A data batch met; whether it belongs to an aborted transaction (and may be discarded)."""
        self._consume_aborted_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        state = self._ongoing_aborted.get(batch.producer_id)
        if state is not None:
            state[1] = batch.last_offset
            return True
        self._ongoing_committed.add(batch.producer_id)
        return False
