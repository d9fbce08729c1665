"""Entry-size detection of an existing offset index file (KIP-1333).

Offset index entries are 8 bytes (legacy: relative offset i32, position i32) or, once the large-index
feature is finalized, 12 bytes (relative offset i32, position i64). Files of both formats coexist in one
log dir (segments written before and after finalization), and nothing in the file says which it is, so the
reader decides from the file itself:

1. a missing or empty file: the requested size;
2. a length divisible by 12 only -> 12, by 8 only -> 8, by neither -> the requested size (the index's
   sanity check then reports the bad length);
3. a length divisible by both (a multiple of 24): the first entries (up to 32) are read both ways. A
   reading is valid when its offsets and positions are >= 0 and strictly increasing and no position
   exceeds the size of the companion ``.log`` (skipped when there is none). Exactly one valid reading wins;
   none -> CorruptIndexError; both -> the requested size (the feature-level hint), with a warning;
4. if the file length changes while detecting, detect once more; a second change -> CorruptIndexError.

Preallocated space is zero-filled, so a run of all-zero entries at the end of the sample is unwritten
space, not data, and is not judged (an index with only zero entries is valid both ways).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from local.errors import CorruptIndexError
from local.filenames import companion_log_file
from local.index.entries import (
    LARGE_OFFSET_DTYPE,
    LARGE_OFFSET_ENTRY_SIZE,
    LEGACY_OFFSET_DTYPE,
    LEGACY_OFFSET_ENTRY_SIZE,
)

logger = logging.getLogger(__name__)

SAMPLE_ENTRIES = 32
"""How many leading entries are read each way to tell an ambiguous file's format."""

_DTYPES = {LEGACY_OFFSET_ENTRY_SIZE: LEGACY_OFFSET_DTYPE, LARGE_OFFSET_ENTRY_SIZE: LARGE_OFFSET_DTYPE}


def detect_entry_size(path: str | os.PathLike[str], requested_entry_size: int) -> int:
    """The entry size (8 or 12) of the offset index at ``path``; see the module docstring for the rules.

    ``requested_entry_size`` is what a new index would use (12 once the large-index feature is finalized)
    and breaks ties. Raises CorruptIndexError when an ambiguous file reads validly neither way, or when its
    length keeps changing during detection.
    """
    if requested_entry_size not in _DTYPES:
        raise ValueError(f"requested entry size must be 8 or 12, got {requested_entry_size}")
    index_path = Path(path)
    lengths: list[int] = []
    for _attempt in range(2):
        before = _file_length(index_path)
        size = _detect_once(index_path, before, requested_entry_size)
        after = _file_length(index_path)
        if before == after:
            return size
        lengths += [before, after]
        logger.info("Offset index %s changed length during format detection (%d -> %d)", index_path, before, after)
    raise CorruptIndexError(
        f"offset index {index_path} kept changing length during format detection (lengths {lengths})",
        path=index_path,
        lengths=lengths,
    )


def _file_length(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _detect_once(path: Path, length: int, requested: int) -> int:
    if length == 0:
        return requested
    by_large = length % LARGE_OFFSET_ENTRY_SIZE == 0
    by_legacy = length % LEGACY_OFFSET_ENTRY_SIZE == 0
    if by_large != by_legacy:
        return LARGE_OFFSET_ENTRY_SIZE if by_large else LEGACY_OFFSET_ENTRY_SIZE
    if not by_large:
        return requested  # neither: the sanity check reports the length

    try:
        with open(path, "rb") as file:
            sample = file.read(SAMPLE_ENTRIES * LARGE_OFFSET_ENTRY_SIZE)
    except FileNotFoundError:
        return requested  # deleted meanwhile: the caller sees the length change
    log_size = _file_length_or_none(companion_log_file(path))
    legacy_ok = reading_is_valid(sample, LEGACY_OFFSET_ENTRY_SIZE, log_size)
    large_ok = reading_is_valid(sample, LARGE_OFFSET_ENTRY_SIZE, log_size)
    if legacy_ok and large_ok:
        logger.warning(
            "Offset index %s (%d bytes) reads validly as both 8-byte and 12-byte entries; using the "
            "requested %d-byte format",
            path, length, requested,
        )
        return requested
    if legacy_ok:
        return LEGACY_OFFSET_ENTRY_SIZE
    if large_ok:
        return LARGE_OFFSET_ENTRY_SIZE
    raise CorruptIndexError(
        f"offset index {path} ({length} bytes) is valid neither as 8-byte nor as 12-byte entries "
        f"(companion log size {log_size})",
        path=path,
        length=length,
        log_size=log_size,
    )


def _file_length_or_none(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def reading_is_valid(sample: bytes, entry_size: int, log_size: int | None) -> bool:
    """Whether the leading entries of ``sample`` make sense as ``entry_size``-byte offset index entries.

    Offsets and positions must be >= 0 and strictly increasing, and positions not beyond ``log_size``
    (when known). Trailing all-zero entries (preallocated space) are ignored.
    """
    count = min(SAMPLE_ENTRIES, len(sample) // entry_size)
    raw = np.frombuffer(sample, dtype=np.uint8, count=count * entry_size).reshape(count, entry_size)
    written = np.flatnonzero(raw.any(axis=1))
    count = int(written[-1]) + 1 if written.size else 0
    entries = np.frombuffer(sample, dtype=_DTYPES[entry_size], count=count)
    rel = entries["rel"].astype(np.int64)
    pos = entries["pos"].astype(np.int64)
    if (rel < 0).any() or (pos < 0).any():
        return False
    if (np.diff(rel) <= 0).any() or (np.diff(pos) <= 0).any():
        return False
    return not (log_size is not None and (pos > log_size).any())
