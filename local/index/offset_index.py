"""The offset index ``.index``: a sparse map from offsets to byte positions in a segment's ``.log``.

Big-endian fixed-size entries, memory-mapped (see :mod:`local.index.base` for the file life cycle)::

    legacy, 8 bytes:              relativeOffset i32 | position i32
    large (KIP-1333), 12 bytes:   relativeOffset i32 | position i64

``relativeOffset`` is the offset minus the segment's base offset. The owner adds an entry every
``index.interval.bytes`` of appended batches, so lookups return the nearest indexed batch at or before an
offset and the log is scanned from there. New files use 12-byte entries once the large-index feature is
finalized; an existing file keeps its format, found by :func:`local.index.detect.detect_entry_size`.

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

from local.errors import (
    CorruptIndexError,
    IndexFullError,
    InvalidOffsetError,
    LegacyIndexPositionOverflowError,
)
from local.index.base import AbstractIndex
from local.index.detect import SAMPLE_ENTRIES, detect_entry_size, reading_is_valid
from local.index.entries import (
    DEFAULT_MAX_INDEX_SIZE,
    INT32_MAX,
    LARGE_OFFSET_DTYPE,
    LARGE_OFFSET_ENTRY,
    LARGE_OFFSET_ENTRY_SIZE,
    LEGACY_OFFSET_DTYPE,
    LEGACY_OFFSET_ENTRY,
    LEGACY_OFFSET_ENTRY_SIZE,
    OffsetPosition,
    make_offset_position,
)

logger = logging.getLogger(__name__)

_new_object = object.__new__
_set_offset = vars(OffsetPosition)["offset"].__set__
_set_position = vars(OffsetPosition)["position"].__set__

FINALIZE_LARGE_INDEX_HINT = "tiered features upgrade --release-version 4.4"


class OffsetIndex(AbstractIndex):
    """A segment's offset index (Kafka's ``OffsetIndex``), legacy 8-byte or KIP-1333 12-byte entries.

    ``use_large_format`` picks the entry size of a new (or empty) file; an existing file keeps the format
    it was written in (auto-detected). Appends must have strictly increasing offsets; lookups are lock-free.
    """

    __slots__ = ("_unpack_entry",)

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        writable: bool = True,
        use_large_format: bool = False,
    ) -> None:
        requested = LARGE_OFFSET_ENTRY_SIZE if use_large_format else LEGACY_OFFSET_ENTRY_SIZE
        entry_size = detect_entry_size(path, requested)
        large = entry_size == LARGE_OFFSET_ENTRY_SIZE
        super().__init__(
            path,
            base_offset,
            max_index_size,
            writable,
            entry_struct=LARGE_OFFSET_ENTRY if large else LEGACY_OFFSET_ENTRY,
            entry_dtype=LARGE_OFFSET_DTYPE if large else LEGACY_OFFSET_DTYPE,
        )
        # Bound once: lookups are the hot path.
        self._unpack_entry = self._entry_struct.unpack_from

    # ---------------------------------------------------------------------------------------------------

    @property
    def is_large_format(self) -> bool:
        """True for 12-byte (KIP-1333) entries."""
        return self._entry_size == LARGE_OFFSET_ENTRY_SIZE

    @property
    def last_offset(self) -> int:
        """The offset of the last entry, or the base offset when empty."""
        keys = self._keys
        return keys[-1] if keys else self._base_offset

    def _keys_of(self, entries: np.ndarray[Any, np.dtype[Any]]) -> np.ndarray[Any, np.dtype[Any]]:
        return entries["rel"].astype(np.int64) + self._base_offset

    def _value_at(self, n: int) -> int:
        mm = self._mmap
        if mm is None:
            raise self._closed_error()
        position: int = self._unpack_entry(mm, n * self._entry_size)[1]
        return position

    def _parse_entry(self, n: int) -> OffsetPosition:
        mm = self._mmap
        if mm is None or self._closed:
            raise self._closed_error()
        rel, position = self._unpack_entry(mm, n * self._entry_size)
        return make_offset_position(self._base_offset + rel, position)

    # ---------------------------------------------------------------------------------------------------
    # reads

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the greatest offset <= ``target_offset``; ``(base_offset, 0)`` when there is none."""
        # The hot path of every fetch: AbstractIndex._largest_lower_bound_slot inlined (same warm-section
        # search) over a snapshot of the key mirror, then the slot's entry read from the mapping. The entry is
        # the one the snapshot saw unless a truncation and new appends rewrote the slot meanwhile: its offset
        # then differs from the snapshot's key (the snapshot's key with the new entry's position could point
        # past the target and skip data), and the lookup is redone under the lock.
        keys, first_hot, first_hot_key = self._search
        if target_offset >= first_hot_key:
            slot = bisect_right(keys, target_offset, first_hot) - 1
        else:
            slot = bisect_right(keys, target_offset, 0, first_hot) - 1
        if slot < 0:
            if self._closed:
                raise self._closed_error()
            return make_offset_position(self._base_offset, 0)
        try:
            relative, position = self._unpack_entry(self._mmap, slot * self._entry_size)  # type: ignore[arg-type]
        except TypeError:  # the mapping was released by close()
            raise self._closed_error() from None
        key = keys[slot]
        if relative != key - self._base_offset:
            return self._locked_lookup(target_offset)
        entry: OffsetPosition = _new_object(OffsetPosition)  # make_offset_position, inlined
        _set_offset(entry, key)
        _set_position(entry, position)
        return entry

    def _locked_lookup(self, target_offset: int) -> OffsetPosition:
        """:meth:`lookup` holding the lock: no slot changes under it."""
        with self._lock:
            slot = self._largest_lower_bound_slot(target_offset)
            return make_offset_position(self._base_offset, 0) if slot < 0 else self._parse_entry(slot)

    def entry(self, n: int) -> OffsetPosition:
        """The ``n``-th entry; IndexError when ``n`` is not below ``entries``."""
        if not 0 <= n < self.entries:
            raise IndexError(f"attempt to fetch entry {n} from index {self._path}, which has {self.entries} entries")
        return self._parse_entry(n)

    def fetch_upper_bound_offset(self, fetch_offset: OffsetPosition, fetch_size: int) -> OffsetPosition | None:
        """An entry guaranteed to lie past a fetch of ``fetch_size`` bytes from ``fetch_offset``, if any.

        The first entry whose position is >= ``fetch_offset.position + fetch_size``: the batch there is not
        fetched, so its offset bounds the fetch (not tightly in general: the index is sparse). None when no
        indexed position is that far.
        """
        if self._closed:
            raise self._closed_error()
        slot = self._value_bisect_left(fetch_offset.position + fetch_size)
        return None if slot >= self.entries else self._parse_entry(slot)

    # ---------------------------------------------------------------------------------------------------
    # writes

    def append(self, offset: int, position: int) -> None:
        """Append ``offset -> position``.

        Raises IndexFullError when full, InvalidOffsetError unless ``offset`` is above the last offset,
        IndexOffsetOverflowError when ``offset`` is not within 2^31-1 of the base offset, and
        LegacyIndexPositionOverflowError for a position past 2^31-1 in the legacy 8-byte format.
        """
        if self._closed or type(offset) is not int or type(position) is not int:
            self._check_entry_args(("offset", offset), ("position", position))
        with self._lock:
            keys = self._keys
            n = len(keys)
            if position < 0:
                raise ValueError(f"position must be >= 0, got {position} for offset {offset} in {self._path}")
            if n >= self._length // self._entry_size:
                raise IndexFullError(
                    f"attempt to append offset {offset} to a full index {self._path} ({n} entries)",
                    offset=offset,
                    path=self._path,
                    entries=n,
                )
            if n and offset <= keys[-1]:
                raise InvalidOffsetError(
                    f"attempt to append offset {offset} to slot {n} of {self._path}, no larger than the "
                    f"last offset appended ({keys[-1]})",
                    offset=offset,
                    last_offset=keys[-1],
                    path=self._path,
                )
            relative = offset - self._base_offset
            if relative < 0 or relative > INT32_MAX:
                self.relative_offset(offset)  # raises IndexOffsetOverflowError
            if position > INT32_MAX and self._entry_size != LARGE_OFFSET_ENTRY_SIZE:
                raise LegacyIndexPositionOverflowError(
                    f"position {position} of offset {offset} does not fit the legacy 8-byte offset index "
                    f"{self._path} (max {INT32_MAX}). Positions past 2 GiB need the 12-byte index format of "
                    f"KIP-1333: finalize the large-index feature with `{FINALIZE_LARGE_INDEX_HINT}`, or keep "
                    "segment.bytes at or below 2147483647",
                    offset=offset,
                    position=position,
                    path=self._path,
                )
            self._write_entry(offset, relative, position)

    def append_many(self, offsets: Sequence[int], positions: Sequence[int]) -> None:
        """:meth:`append` of each pair in turn, checked and written in bulk (how recovery rebuilds an index).

        When any pair would fail, the pairs are appended one by one instead, so the valid prefix is kept and the
        error is the one :meth:`append` raises for the first bad pair.
        """
        if self._closed:
            raise self._closed_error()
        if not len(offsets):
            return
        offs = np.asarray(offsets, dtype=np.int64)
        pos = np.asarray(positions, dtype=np.int64)
        with self._lock:
            keys = self._keys
            n = len(keys)
            relative = offs - self._base_offset
            position_limit = INT32_MAX if self._entry_size != LARGE_OFFSET_ENTRY_SIZE else np.iinfo(np.int64).max
            fits = (
                len(offs) == len(pos)
                and n + len(offs) <= self._length // self._entry_size
                and (not n or offs[0] > keys[-1])
                and bool((np.diff(offs) > 0).all())
                and relative.min() >= 0
                and relative.max() <= INT32_MAX
                and pos.min() >= 0
                and pos.max() <= position_limit
            )
            if fits:
                self._write_entries(offs, relative, pos)
                return
        for offset, position in zip(offsets, positions, strict=True):
            self.append(int(offset), int(position))

    def truncate_to(self, offset: int) -> None:
        """Drop every entry with an offset >= ``offset``."""
        with self._lock:
            slot = self._largest_lower_bound_slot(offset)
            if slot < 0:
                count = 0
            elif self._keys[slot] == offset:
                count = slot
            else:
                count = slot + 1
            self._truncate_to_entries(count)

    # ---------------------------------------------------------------------------------------------------

    def sanity_check(self) -> None:
        """Raise CorruptIndexError for a length that is not a whole number of entries, a last offset below
        the base offset, or (KIP-1333) any entry whose offset or position is negative or goes backwards.
        """
        if self._length % self._entry_size != 0:
            raise CorruptIndexError(
                f"index file {self._path} is corrupt: found {self._length} bytes, which is not a multiple of "
                f"the entry size {self._entry_size}",
                path=self._path,
                length=self._length,
                entry_size=self._entry_size,
            )
        count = self.entries
        if count == 0:
            return
        last = self.last_offset
        if last < self._base_offset:
            raise CorruptIndexError(
                f"corrupt index {self._path}: {count} entries but the last offset {last} is below the base "
                f"offset {self._base_offset}",
                path=self._path,
                offset=last,
                base_offset=self._base_offset,
            )
        bad = first_bad_offset_entry(self._entry_array(count))
        if bad is not None:
            entry = self.entry(bad)
            previous = self.entry(bad - 1) if bad > 0 else None
            raise CorruptIndexError(
                f"corrupt index {self._path}: entry {bad} ({entry.offset} -> {entry.position}) has a negative or "
                f"non-increasing offset or a negative or decreasing position (previous entry: {previous})",
                path=self._path,
                entry=bad,
                offset=entry.offset,
                position=entry.position,
            )


# Byte-level checks (no mapping): the rules of ``sanity_check``, run on a file's bytes at startup -------------

def first_bad_offset_entry(entries: np.ndarray[Any, np.dtype[Any]]) -> int | None:
    """The first entry with a negative field, an offset not above its predecessor's or a position below it
    (the rule :meth:`OffsetIndex.sanity_check` applies; a last offset below the base offset is a negative one)."""
    rel = entries["rel"].astype(np.int64)
    pos = entries["pos"].astype(np.int64)
    bad = (rel < 0) | (pos < 0)
    bad[1:] |= (rel[1:] <= rel[:-1]) | (pos[1:] < pos[:-1])
    hits = np.flatnonzero(bad)
    return int(hits[0]) if hits.size else None


LAST_ENTRY_PAST_LOG = "past the log's"
"""In :func:`check_offset_index`'s answer when the index's last entry points past the end of its log: the log held
more than it does now (cut short), which the loader records as lost offsets (:mod:`local.lost_offsets`)."""


def check_offset_index(data: bytes, base_offset: int, log_size: int, requested_entry_size: int) -> str | None:
    """What is wrong with the bytes of an offset index (None when nothing): :meth:`OffsetIndex.sanity_check` plus
    the segment's check that the last entry points inside its ``log_size``-byte log, without mapping the file.
    The entry size is the one :func:`detect_entry_size` picks from the same bytes."""
    length = len(data)
    if length == 0:
        return None
    by_large, by_legacy = length % LARGE_OFFSET_ENTRY_SIZE == 0, length % LEGACY_OFFSET_ENTRY_SIZE == 0
    if not (by_large or by_legacy):
        return f"{length} bytes is not a whole number of 8- or 12-byte entries"
    if by_large != by_legacy:
        return _entries_problem(data, base_offset, log_size, LARGE_OFFSET_ENTRY_SIZE if by_large else LEGACY_OFFSET_ENTRY_SIZE)[0]
    # Ambiguous length: the size detect_entry_size picks, by its rules, from the same leading entries. Reading
    # them in the requested size passes those rules when the full check passes and the leading positions
    # strictly increase (the full check allows equal ones); detection then picks the requested size.
    problem, sample_strict = _entries_problem(data, base_offset, log_size, requested_entry_size)
    if problem is None and sample_strict:
        return None
    sample = data[: SAMPLE_ENTRIES * LARGE_OFFSET_ENTRY_SIZE]
    legacy_ok = reading_is_valid(sample, LEGACY_OFFSET_ENTRY_SIZE, log_size)
    large_ok = reading_is_valid(sample, LARGE_OFFSET_ENTRY_SIZE, log_size)
    if not (legacy_ok or large_ok):
        return f"{length} bytes read validly neither as 8-byte nor as 12-byte entries"
    entry_size = requested_entry_size if legacy_ok and large_ok else LEGACY_OFFSET_ENTRY_SIZE if legacy_ok else LARGE_OFFSET_ENTRY_SIZE
    return _entries_problem(data, base_offset, log_size, entry_size)[0]


def _entries_problem(data: bytes, base_offset: int, log_size: int, entry_size: int) -> tuple[str | None, bool]:
    """What is wrong with ``data`` read as ``entry_size``-byte entries, and whether the positions of the first
    ``SAMPLE_ENTRIES`` entries strictly increase."""
    entries = np.frombuffer(data, LARGE_OFFSET_DTYPE if entry_size == LARGE_OFFSET_ENTRY_SIZE else LEGACY_OFFSET_DTYPE)
    n = first_bad_offset_entry(entries)
    if n is not None:
        return (
            f"{entry_size}-byte entry {n} ({base_offset + int(entries['rel'][n])} -> {int(entries['pos'][n])}) is "
            "negative or not above the entry before it"
        ), False
    pos = entries["pos"].astype(np.int64)
    if int(pos[-1]) >= log_size:
        return f"the last entry points at position {int(pos[-1])}, {LAST_ENTRY_PAST_LOG} {log_size} bytes", False
    return None, bool((np.diff(pos[:SAMPLE_ENTRIES]) > 0).all())
