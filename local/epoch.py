"""The leader-epoch cache: which leader epoch started at which offset (Kafka's ``LeaderEpochFileCache``).

Backed by ``leader-epoch-checkpoint`` (see :mod:`local.checkpoint`), rewritten atomically on every change.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from local.checkpoint import EpochEntry, LeaderEpochCheckpointFile

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "EpochEntry", "LeaderEpochFileCache"]


class LeaderEpochFileCache:
    def __init__(self, topic_partition: str, checkpoint: LeaderEpochCheckpointFile | None = None) -> None:
        self.topic_partition = topic_partition
        self.checkpoint = checkpoint
        self._lock = threading.RLock()
        self._entries: list[EpochEntry] = sorted(checkpoint.read(), key=lambda e: e.epoch) if checkpoint else []

    # ------------------------------------------------------------------------------------------------------

    def _flush(self) -> None:
        if self.checkpoint is not None:
            self.checkpoint.write(self._entries)

    flush = _flush

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (ignored unless it changes the lineage)."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid epoch entry ({epoch}, {start_offset}) for {self.topic_partition}")
        with self._lock:
            latest = self._entries[-1] if self._entries else None
            if latest is not None and not (epoch != latest.epoch or start_offset < latest.start_offset):
                return
            # Drop entries that would make the lineage non-monotonic.
            self._entries = [e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset]
            self._entries.append(EpochEntry(epoch, start_offset))
            self._flush()

    def latest_epoch(self) -> int | None:
        entries = self._entries
        return entries[-1].epoch if entries else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        entries = self._entries
        return entries[-1] if entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        entries = self._entries
        return entries[0] if entries else None

    def previous_epoch(self) -> int | None:
        entries = self._entries
        return entries[-2].epoch if len(entries) > 1 else None

    def epoch_entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def is_empty(self) -> bool:
        return not self._entries

    def epoch_for_offset(self, offset: int) -> int | None:
        previous = None
        for entry in self._entries:
            if entry.start_offset == offset:
                return entry.epoch
            if entry.start_offset > offset:
                return previous
            previous = entry.epoch
        return previous

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for a follower asking where ``requested_epoch`` ends (Kafka's endOffsetFor)."""
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            latest = self.latest_epoch()
            if latest is not None and latest == requested_epoch:
                return requested_epoch, log_end_offset
            higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
            if higher is None:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            floor = None
            for e in self._entries:
                if e.epoch <= requested_epoch:
                    floor = e
            if floor is None:
                return requested_epoch, higher.start_offset
            return floor.epoch, higher.start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        with self._lock:
            if end_offset >= 0 and self._entries and self._entries[-1].start_offset >= end_offset:
                self._entries = [e for e in self._entries if e.start_offset < end_offset]
                self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly below ``start_offset``; the epoch covering it now starts there."""
        with self._lock:
            removed = [e for e in self._entries if e.start_offset <= start_offset]
            if not removed:
                return
            kept = [e for e in self._entries if e.start_offset > start_offset]
            self._entries = [EpochEntry(removed[-1].epoch, start_offset), *kept]
            self._flush()

    def epoch_entries_in_range(self, start_offset: int, end_offset: int) -> list[EpochEntry]:
        """Entries whose range overlaps [start_offset, end_offset), the first clipped to ``start_offset``."""
        out: list[EpochEntry] = []
        entries = self._entries
        for i, e in enumerate(entries):
            nxt = entries[i + 1].start_offset if i + 1 < len(entries) else None
            if e.start_offset >= end_offset:
                break
            if nxt is not None and nxt <= start_offset:
                continue
            out.append(EpochEntry(e.epoch, max(e.start_offset, start_offset)))
        return out

    def clear_and_flush(self) -> None:
        with self._lock:
            self._entries = []
            self._flush()

    def write_to(self, writer: Callable[[list[EpochEntry]], None]) -> None:
        writer(list(self._entries))
