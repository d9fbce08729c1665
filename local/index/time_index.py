"""The time index ``.timeindex`` (KIP-33): a sparse map from timestamps to offsets in a segment.

Big-endian 12-byte entries, memory-mapped (see :mod:`local.index.base` for the file life cycle)::

    timestamp i64 | relativeOffset i32

An entry (T, O) means: the largest timestamp of any record at or before offset O is T, so a record with a
timestamp above T comes after O. Timestamps strictly increase from entry to entry (an entry is written only
when the segment's max timestamp grows); offsets never decrease. The last slot is kept back for the entry
the segment appends when it is rolled or closed, so that the last entry holds the segment's true max
timestamp. The format is unchanged by KIP-1333.

Not checksummed: after a crash the index may hold stale or zero entries; ``sanity_check`` finds them and
recovery rebuilds the index from the log.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

import numpy as np

from local.errors import CorruptIndexError, IndexFullError, InvalidIndexTimestampError, InvalidOffsetError
from local.index.base import AbstractIndex
from local.index.entries import (
    DEFAULT_MAX_INDEX_SIZE,
    INT32_MAX,
    NO_TIMESTAMP,
    TIME_DTYPE,
    TIME_ENTRY,
    TIME_ENTRY_SIZE,
    TimestampOffset,
    make_timestamp_offset,
)

logger = logging.getLogger(__name__)

_unpack_entry = TIME_ENTRY.unpack_from
_new_object = object.__new__
_set_timestamp = vars(TimestampOffset)["timestamp"].__set__
_set_offset = vars(TimestampOffset)["offset"].__set__


class TimeIndex(AbstractIndex):
    """A segment's time index (Kafka's ``TimeIndex``)."""

    __slots__ = ("_last_entry",)

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        writable: bool = True,
    ) -> None:
        self._last_entry = TimestampOffset(NO_TIMESTAMP, base_offset)
        # Full one slot early: the last slot is kept for the entry written when the segment rolls.
        super().__init__(
            path, base_offset, max_index_size, writable, entry_struct=TIME_ENTRY, entry_dtype=TIME_DTYPE,
            reserved_slots=1,
        )
        self._last_entry = self._last_entry_from_file()

    # ---------------------------------------------------------------------------------------------------

    def _keys_of(self, entries: np.ndarray[Any, np.dtype[Any]]) -> np.ndarray[Any, np.dtype[Any]]:
        return entries["ts"].astype(np.int64)

    def _value_at(self, n: int) -> int:
        mm = self._mmap
        if mm is None:
            raise self._closed_error()
        relative: int = TIME_ENTRY.unpack_from(mm, n * TIME_ENTRY.size)[1]
        return self._base_offset + relative

    def _parse_entry(self, n: int) -> TimestampOffset:
        mm = self._mmap
        if mm is None or self._closed:
            raise self._closed_error()
        timestamp, relative = TIME_ENTRY.unpack_from(mm, n * TIME_ENTRY.size)
        return make_timestamp_offset(timestamp, self._base_offset + relative)

    def _last_entry_from_file(self) -> TimestampOffset:
        count = self.entries
        if count == 0 or self._mmap is None:
            return TimestampOffset(NO_TIMESTAMP, self._base_offset)
        return self._parse_entry(count - 1)

    def _after_entries_changed(self) -> None:
        self._last_entry = self._last_entry_from_file()

    # ---------------------------------------------------------------------------------------------------
    # reads

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(-1, base_offset)`` when empty."""
        return self._last_entry

    def entry(self, n: int) -> TimestampOffset:
        """The ``n``-th entry; IndexError when ``n`` is not below ``entries``."""
        if not 0 <= n < self.entries:
            raise IndexError(
                f"attempt to fetch entry {n} from time index {self._path}, which has {self.entries} entries"
            )
        return self._parse_entry(n)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the greatest timestamp <= ``target_timestamp``; ``(-1, base_offset)`` if none."""
        # AbstractIndex._largest_lower_bound_slot inlined over a snapshot of the key mirror, then the slot's entry
        # read from the mapping; redone under the lock when a truncation and new appends rewrote that slot
        # meanwhile (its timestamp differs from the snapshot's key), as OffsetIndex.lookup does.
        keys, first_hot, first_hot_key = self._search
        if target_timestamp >= first_hot_key:
            slot = bisect_right(keys, target_timestamp, first_hot) - 1
        else:
            slot = bisect_right(keys, target_timestamp, 0, first_hot) - 1
        if slot < 0:
            if self._closed:
                raise self._closed_error()
            return make_timestamp_offset(NO_TIMESTAMP, self._base_offset)
        try:
            timestamp, relative = _unpack_entry(self._mmap, slot * TIME_ENTRY_SIZE)  # type: ignore[arg-type]
        except TypeError:  # the mapping was released by close()
            raise self._closed_error() from None
        if timestamp != keys[slot]:
            return self._locked_lookup(target_timestamp)
        entry: TimestampOffset = _new_object(TimestampOffset)  # make_timestamp_offset, inlined
        _set_timestamp(entry, timestamp)
        _set_offset(entry, self._base_offset + relative)
        return entry

    def _locked_lookup(self, target_timestamp: int) -> TimestampOffset:
        """:meth:`lookup` holding the lock: no slot changes under it."""
        with self._lock:
            slot = self._largest_lower_bound_slot(target_timestamp)
            return make_timestamp_offset(NO_TIMESTAMP, self._base_offset) if slot < 0 else self._parse_entry(slot)

    # ---------------------------------------------------------------------------------------------------
    # writes

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append ``(timestamp, offset)`` when ``timestamp`` is above the last entry's timestamp.

        Raises IndexFullError when full (unless ``skip_full_check``, used for the roll/close entry that the
        last slot is kept for), InvalidOffsetError when ``offset`` is below the last entry's offset and
        InvalidIndexTimestampError when ``timestamp`` is below the last entry's timestamp. An equal
        timestamp is a no-op (the same entry appended again on roll and on close).
        """
        if self._closed or type(timestamp) is not int or type(offset) is not int:
            self._check_entry_args(("timestamp", timestamp), ("offset", offset))
        with self._lock:
            count = self.entries
            last = self._last_entry
            if skip_full_check and count and timestamp == last.timestamp and offset >= last.offset:
                return  # the roll/close entry adds nothing: a no-op, even on a trimmed index
            if skip_full_check and not count and timestamp < 0:
                return  # an empty segment has no max timestamp to record
            if (not skip_full_check and self.is_full) or count >= self.max_entries:
                raise IndexFullError(
                    f"attempt to append to a full time index {self._path} ({count} entries)",
                    timestamp=timestamp,
                    offset=offset,
                    path=self._path,
                    entries=count,
                )
            if count and offset < last.offset:
                raise InvalidOffsetError(
                    f"attempt to append offset {offset} to slot {count} of time index {self._path}, below the "
                    f"last offset appended ({last.offset})",
                    offset=offset,
                    last_offset=last.offset,
                    path=self._path,
                )
            if count and timestamp < last.timestamp:
                raise InvalidIndexTimestampError(
                    f"attempt to append timestamp {timestamp} to slot {count} of time index {self._path}, below "
                    f"the last timestamp appended ({last.timestamp})",
                    timestamp=timestamp,
                    offset=offset,
                    last_timestamp=last.timestamp,
                    path=self._path,
                )
            if timestamp > last.timestamp:
                relative = self.relative_offset(offset)
                self._write_entry(timestamp, timestamp, relative)
                self._last_entry = TimestampOffset(timestamp, offset)
                logger.debug("Added time index entry %d => %d to %s", timestamp, offset, self._path)

    def append_many(self, timestamps: Sequence[int], offsets: Sequence[int]) -> None:
        """:meth:`maybe_append` of each pair in turn, checked and written in bulk (how recovery rebuilds an index).

        The bulk write takes strictly increasing timestamps above the last entry's; anything else (or a pair that
        would fail) is appended one by one, with :meth:`maybe_append`'s no-ops and errors.
        """
        if self._closed:
            raise self._closed_error()
        if not len(timestamps):
            return
        ts = np.asarray(timestamps, dtype=np.int64)
        offs = np.asarray(offsets, dtype=np.int64)
        with self._lock:
            n = len(self._keys)
            last = self._last_entry
            relative = offs - self._base_offset
            fits = (
                len(ts) == len(offs)
                and n + len(ts) <= self._length // TIME_ENTRY_SIZE - self._reserved_slots
                and ts[0] > last.timestamp
                and (not n or offs[0] >= last.offset)
                and bool((np.diff(ts) > 0).all())
                and bool((np.diff(offs) >= 0).all())
                and relative.min() >= 0
                and relative.max() <= INT32_MAX
            )
            if fits:
                self._write_entries(ts, ts, relative)
                self._last_entry = TimestampOffset(int(ts[-1]), int(offs[-1]))
                return
        for timestamp, offset in zip(timestamps, offsets, strict=True):
            self.maybe_append(int(timestamp), int(offset))

    def truncate_to(self, offset: int) -> None:
        """Drop every entry with an offset >= ``offset``."""
        with self._lock:
            self._truncate_to_entries(self._value_bisect_left(offset))

    # ---------------------------------------------------------------------------------------------------

    def sanity_check(self) -> None:
        """Kafka's checks (a last timestamp below the first, a last offset below the base offset, a length
        that is not a multiple of 12) plus a vectorised pass: timestamps must strictly increase and offsets
        must not decrease. Raises CorruptIndexError naming the file and the entry.
        """
        count = self.entries
        last = self._last_entry
        if count:
            first = self.entry(0)
            if last.timestamp < first.timestamp:
                raise CorruptIndexError(
                    f"corrupt time index {self._path}: non-zero size but the last timestamp {last.timestamp} is "
                    f"below the first timestamp {first.timestamp}",
                    path=self._path,
                    timestamp=last.timestamp,
                )
            if last.offset < self._base_offset:
                raise CorruptIndexError(
                    f"corrupt time index {self._path}: non-zero size but the last offset {last.offset} is "
                    f"below the base offset {self._base_offset}",
                    path=self._path,
                    offset=last.offset,
                    base_offset=self._base_offset,
                )
        if self._length % self._entry_size != 0:
            raise CorruptIndexError(
                f"time index file {self._path} is corrupt: found {self._length} bytes, which is not a "
                f"multiple of {self._entry_size}",
                path=self._path,
                length=self._length,
            )
        if count:
            n = first_bad_time_entry(self._entry_array(count))
            if n is not None:
                entry = self.entry(n)
                raise CorruptIndexError(
                    f"corrupt time index {self._path}: entry {n} ({entry.timestamp} -> {entry.offset}) has a "
                    "negative offset, a timestamp not above the previous one or an offset below it",
                    path=self._path,
                    entry=n,
                    timestamp=entry.timestamp,
                    offset=entry.offset,
                )


# Byte-level check (no mapping): the rule of ``sanity_check``, run on a file's bytes at startup ---------------

def first_bad_time_entry(entries: np.ndarray[Any, np.dtype[Any]]) -> int | None:
    """The first entry with a negative relative offset, a timestamp not above its predecessor's or an offset
    below it (the rule :meth:`TimeIndex.sanity_check` applies)."""
    ts = entries["ts"].astype(np.int64)
    rel = entries["rel"].astype(np.int64)
    bad = rel < 0
    bad[1:] |= (ts[1:] <= ts[:-1]) | (rel[1:] < rel[:-1])
    hits = np.flatnonzero(bad)
    return int(hits[0]) if hits.size else None


def check_time_index(data: bytes) -> str | None:
    """What is wrong with the bytes of a time index (None when nothing), as :meth:`TimeIndex.sanity_check` sees
    it, without mapping the file."""
    if len(data) % TIME_ENTRY_SIZE:
        return f"time index of {len(data)} bytes is not a whole number of {TIME_ENTRY_SIZE}-byte entries"
    if not data:
        return None
    entries = np.frombuffer(data, TIME_DTYPE)
    n = first_bad_time_entry(entries)
    if n is not None:
        return f"time index entry {n} ({int(entries['ts'][n])} -> +{int(entries['rel'][n])}) is negative or goes backwards"
    return None
