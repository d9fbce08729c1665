"""The per-segment files checked against the segment's batches, as bytes (local files and remote objects alike):
offset, time and transaction indexes, producer snapshots and leader-epoch checkpoints. Bytes in, problems out."""

from __future__ import annotations

import itertools
import struct
from typing import Any

import numpy as np

from local.errors import KafkaStorageError
from local.index.detect import reading_is_valid
from local.index.entries import (
    ABORTED_TXN,
    ABORTED_TXN_CURRENT_VERSION,
    ABORTED_TXN_SIZE,
    LARGE_OFFSET_DTYPE,
    LARGE_OFFSET_ENTRY_SIZE,
    LEGACY_OFFSET_DTYPE,
    LEGACY_OFFSET_ENTRY_SIZE,
    TIME_DTYPE,
    TIME_ENTRY_SIZE,
)
from tiered.scrub.batches import BatchScanner
from tiered.scrub.report import MAX_LISTED_PER_FILE, Problem, listed, problem_at


def offset_entry_sizes_of_bytes(data: bytes, log_size: int | None) -> tuple[int, ...]:
    """The entry sizes an offset index read as bytes (a remote object, no feature level to break ties) may have,
    by ``local.index.detect_entry_size``'s rules: one size, both (8, 12) when an ambiguous length reads validly
    both ways, none when it reads validly neither way. A length that is a multiple of neither gives 8 (the
    length problem is reported by the check)."""
    by_large, by_legacy = len(data) % LARGE_OFFSET_ENTRY_SIZE == 0, len(data) % LEGACY_OFFSET_ENTRY_SIZE == 0
    if not data or not (by_large or by_legacy):
        return (LEGACY_OFFSET_ENTRY_SIZE,)
    if by_large != by_legacy:
        return (LARGE_OFFSET_ENTRY_SIZE,) if by_large else (LEGACY_OFFSET_ENTRY_SIZE,)
    sizes = (LEGACY_OFFSET_ENTRY_SIZE, LARGE_OFFSET_ENTRY_SIZE)
    return tuple(size for size in sizes if reading_is_valid(data, size, log_size))


def _zero_tail(raw: np.ndarray[Any, Any], entry_size: int, keep_first: bool) -> int:
    """How many entries remain once trailing all-zero entries (preallocated space) are cut; with ``keep_first``
    an all-zero first entry stays (offset index: the base offset at position 0 is a real entry)."""
    rows = raw.view(np.uint8).reshape(-1, entry_size)
    written = np.flatnonzero(rows.any(axis=1))
    kept = int(written[-1]) + 1 if written.size else 0
    return max(kept, 1) if keep_first and len(rows) else kept


def check_offset_index(data: bytes, entry_size: int, base_offset: int, scan: BatchScanner, name: str, *,
                       remote: bool, zero_tail_ok: bool = False) -> tuple[list[Problem], list[str]]:
    """Problems and notes of an offset index (``entry_size`` 8 or 12) against its segment's batches."""
    problems: list[Problem] = []
    notes: list[str] = []
    if len(data) % entry_size:
        problems.append(problem_at(name, remote, "offset_index",
                                   f"length {len(data)} is not a multiple of the {entry_size}-byte entry size"))
    dtype = LEGACY_OFFSET_DTYPE if entry_size == LEGACY_OFFSET_ENTRY_SIZE else LARGE_OFFSET_DTYPE
    entries = np.frombuffer(data, dtype=dtype, count=len(data) // entry_size)
    if zero_tail_ok and entries.size:
        keep = _zero_tail(entries, entry_size, keep_first=len(scan.positions) > 0)
        if keep < entries.size:
            notes.append(f"{name}: {entries.size - keep} zero-filled (preallocated) entries at the end; recovery "
                         "at the next start rebuilds this index")
            entries = entries[:keep]
    rel = entries["rel"].astype(np.int64)
    pos = entries["pos"].astype(np.int64)
    offsets = base_offset + rel
    bad = (rel < 0) | (pos < 0)
    bad[1:] |= (rel[1:] <= rel[:-1]) | (pos[1:] < pos[:-1])  # the loader's rule: equal positions pass
    positions, bases, lasts, _ts = scan.columns()
    idx = np.searchsorted(positions, pos)
    hit = idx < positions.size
    hit[hit] = positions[idx[hit]] == pos[hit]
    holds = np.zeros(entries.size, np.bool_)
    holds[hit] = (bases[idx[hit]] <= offsets[hit]) & (offsets[hit] <= lasts[idx[hit]])

    def order(i: int) -> str:
        return f"entry {i} (offset {offsets[i]}, position {pos[i]}) is negative or below the entry before it"

    def nowhere(i: int) -> str:
        beyond = pos[i] >= scan.valid_end
        return (f"entry {i} (offset {offsets[i]}) points at log position {pos[i]}, which is "
                + ("past the last whole batch" if beyond else "not the start of a batch"))

    def elsewhere(i: int) -> str:
        b = idx[i]
        return (f"entry {i} (offset {offsets[i]}, position {pos[i]}) points at the batch of offsets "
                f"{bases[b]}..{lasts[b]}, which does not hold it")

    rows, total = _first_rows([(bad, order), (~hit & ~bad, nowhere), (hit & ~bad & ~holds, elsewhere)],
                              entry_size, offsets)
    listed(problems, "offset_index", rows, name, remote, total=total)
    return problems, notes


def check_time_index(data: bytes, base_offset: int, scan: BatchScanner, name: str, *, remote: bool,
                     zero_tail_ok: bool = False) -> tuple[list[Problem], list[str]]:
    """Problems and notes of a time index against its segment's batches."""
    problems: list[Problem] = []
    notes: list[str] = []
    if len(data) % TIME_ENTRY_SIZE:
        problems.append(problem_at(name, remote, "time_index",
                                   f"length {len(data)} is not a multiple of the {TIME_ENTRY_SIZE}-byte entry size"))
    entries = np.frombuffer(data, dtype=TIME_DTYPE, count=len(data) // TIME_ENTRY_SIZE)
    if zero_tail_ok and entries.size:
        keep = _zero_tail(entries, TIME_ENTRY_SIZE, keep_first=False)
        if keep < entries.size:
            notes.append(f"{name}: {entries.size - keep} zero-filled (preallocated) entries at the end; recovery "
                         "at the next start rebuilds this index")
            entries = entries[:keep]
    ts = entries["ts"].astype(np.int64)
    rel = entries["rel"].astype(np.int64)
    offsets = base_offset + rel
    bad = rel < 0
    bad[1:] |= (ts[1:] <= ts[:-1]) | (rel[1:] < rel[:-1])  # TimeIndex appends only a larger timestamp

    def order(i: int) -> str:
        return (f"entry {i} (timestamp {ts[i]}, offset {offsets[i]}) does not go above the entry before it (or has a "
                "negative offset)")

    _positions, bases, lasts, max_ts = scan.columns()
    if lasts.size and not (np.diff(lasts) > 0).all():
        # batch offsets out of order (reported with the segment): entries cannot be matched to batches
        rows, total = _first_rows([(bad, order)], TIME_ENTRY_SIZE, offsets)
        listed(problems, "time_index", rows, name, remote, total=total)
        return problems, notes
    idx = np.searchsorted(lasts, offsets)
    inside = idx < lasts.size
    inside[inside] = bases[idx[inside]] <= offsets[inside]
    matches = np.zeros(entries.size, np.bool_)
    matches[inside] = max_ts[idx[inside]] == ts[inside]

    def nowhere(i: int) -> str:
        return f"entry {i} (timestamp {ts[i]}) names offset {offsets[i]}, which no batch of the segment holds"

    def other(i: int) -> str:
        b = idx[i]
        return (f"entry {i} (timestamp {ts[i]}, offset {offsets[i]}) does not match the max timestamp {max_ts[b]} of "
                f"the batch of offsets {bases[b]}..{lasts[b]}")

    rows, total = _first_rows([(bad, order), (~inside & ~bad, nowhere), (inside & ~bad & ~matches, other)],
                              TIME_ENTRY_SIZE, offsets)
    listed(problems, "time_index", rows, name, remote, total=total)
    return problems, notes


def check_txn_index(data: bytes, base_offset: int, segment_last: int | None, name: str, *,
                    remote: bool) -> list[Problem]:
    problems: list[Problem] = []
    if len(data) % ABORTED_TXN_SIZE:
        problems.append(problem_at(name, remote, "txn_index",
                                   f"length {len(data)} is not a multiple of the {ABORTED_TXN_SIZE}-byte entry size"))
    entries = np.frombuffer(data, dtype=_ABORTED_TXN_DTYPE, count=len(data) // ABORTED_TXN_SIZE)
    version = entries["version"].astype(np.int64)
    pid, first, last = (entries[f].astype(np.int64) for f in ("pid", "first", "last"))
    unknown = (version > ABORTED_TXN_CURRENT_VERSION) | (version < 0)
    inverted = ~unknown & (first > last)
    outside = ~unknown & ~inverted & ((last < base_offset) | (last > segment_last if segment_last is not None else False))

    def unknown_version(i: int) -> str:
        return f"unknown aborted transaction version {version[i]}"

    def above(i: int) -> str:
        return f"producer {pid[i]}: first offset {first[i]} above last offset {last[i]}"

    def elsewhere(i: int) -> str:
        return f"producer {pid[i]}: abort marker offset {last[i]} is outside the segment ({base_offset}..{segment_last})"

    rows, total = _first_rows([(unknown, unknown_version), (inverted, above), (outside, elsewhere)], ABORTED_TXN_SIZE,
                              None, offsets_of=[None, first, last])
    listed(problems, "txn_index", rows, name, remote, total=total)
    return problems


_ABORTED_TXN_DTYPE = np.dtype([("version", ">i2"), ("pid", ">i8"), ("first", ">i8"), ("last", ">i8"), ("lso", ">i8")])
assert _ABORTED_TXN_DTYPE.itemsize == ABORTED_TXN.size


def aborted_transactions(data: bytes) -> tuple[tuple[int, int, int], ...]:
    """The (producer id, first offset, last offset) entries of a transaction index's bytes (whole entries only)."""
    entries = np.frombuffer(data, dtype=_ABORTED_TXN_DTYPE, count=len(data) // ABORTED_TXN_SIZE)
    return tuple(zip(entries["pid"].tolist(), entries["first"].tolist(), entries["last"].tolist(), strict=True))


def _first_rows(kinds: list[tuple[Any, Any]], entry_size: int, offsets: Any,
                offsets_of: list[Any] | None = None) -> tuple[list[tuple[str, int, int | None]], int]:
    """The problem rows (message, position, offset) of the entries each mask of ``kinds`` marks, in entry order (an
    entry's kinds in the order given), as many as are listed, with how many there are in all: a damaged index of
    millions of entries formats only the rows it lists. Each kind is (mask, its message of an entry index); the
    row's offset is ``offsets`` (or the kind's own array of ``offsets_of``; None: no offset) at the entry."""
    total = 0
    first: list[tuple[int, int]] = []  # (entry, kind): the first listed of each kind, which holds the first overall
    for k, (mask, _) in enumerate(kinds):
        total += int(np.count_nonzero(mask))
        first += [(int(i), k) for i in np.flatnonzero(mask)[:MAX_LISTED_PER_FILE]]
    rows = []
    for i, k in sorted(first)[:MAX_LISTED_PER_FILE]:
        source = offsets if offsets_of is None else offsets_of[k]
        rows.append((kinds[k][1](i), i * entry_size, None if source is None else int(source[i])))
    return rows, total


def check_producer_snapshot(data: bytes, name: str, *, remote: bool) -> list[Problem]:
    from local.producer_state import decode_snapshot

    try:
        decode_snapshot(data, name)
    except (KafkaStorageError, ValueError, struct.error) as exc:
        return [problem_at(name, remote, "producer_snapshot", str(exc))]
    return []


def check_leader_epoch_checkpoint(data: bytes, name: str, *, remote: bool) -> list[Problem]:
    from local.checkpoint import decode_leader_epoch_checkpoint

    try:
        entries = decode_leader_epoch_checkpoint(data, name)
    except (KafkaStorageError, ValueError) as exc:
        return [problem_at(name, remote, "checkpoint", f"malformed leader-epoch-checkpoint: {exc}")]
    for before, after in itertools.pairwise(entries):
        if after.epoch <= before.epoch or after.start_offset < before.start_offset:
            return [problem_at(name, remote, "checkpoint",
                               f"leader epochs out of order: epoch {before.epoch} at {before.start_offset} then epoch "
                               f"{after.epoch} at {after.start_offset}", offset=after.start_offset)]
    return []
