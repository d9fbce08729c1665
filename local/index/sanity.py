"""Phase 1 of startup for one segment's index files: are they sound? Answered from their bytes.

The loader (:mod:`local.loader`) asks this of every segment before it opens any index; a worker process
(:mod:`local.load_worker`) may ask it instead. The indexes are not opened as index objects: mapping every index of
a partition at startup would cost two descriptors a segment (an mmap holds one) and exhaust the limit at a few
thousand segments; they stay unloaded until first used, as in Kafka. The rules themselves live with each index:
:func:`local.index.offset_index.check_offset_index`, :func:`local.index.time_index.check_time_index` and
:meth:`TransactionIndex.sanity_check`.
"""

from __future__ import annotations

import os

from local import filenames
from local.errors import CorruptIndexError
from local.index.offset_index import check_offset_index
from local.index.time_index import check_time_index
from local.index.txn_index import TransactionIndex

_FIRST_READ_BYTES = 64 << 10


def _read(path: str) -> bytes:
    """The whole file in one descriptor's lifetime (b"" when missing)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return b""
    try:
        # A first read sized for a closed segment's trimmed index: asking for megabytes up front makes the
        # allocator map (and then unmap) that much memory on every call.
        data = os.read(fd, _FIRST_READ_BYTES)
        if len(data) < _FIRST_READ_BYTES:
            return data
        chunks = [data]
        while chunk := os.read(fd, 1 << 24):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def check_segment_index_files(
    directory: str, base: int, log_size: int, has_offset_index: bool, has_txn_index: bool, requested_entry_size: int
) -> str | None:
    """Phase 1's sanity check of one segment's index files, from their bytes: None when they are sound,
    "missing" when there is no offset index, else what is wrong, naming the file.

    A pure function of the files, so a worker process can run it.
    """
    if not has_offset_index:
        return "missing"
    prefix = filenames.filename_prefix_from_offset(base)
    offset_index = prefix + filenames.INDEX_FILE_SUFFIX
    problem = check_offset_index(_read(os.path.join(directory, offset_index)), base, log_size, requested_entry_size)
    if problem is not None:
        return f"{offset_index}: {problem}"
    time_index = prefix + filenames.TIME_INDEX_FILE_SUFFIX
    if (problem := check_time_index(_read(os.path.join(directory, time_index)))) is not None:
        return f"{time_index}: {problem}"
    if has_txn_index:
        try:
            TransactionIndex(base, os.path.join(directory, prefix + filenames.TXN_INDEX_FILE_SUFFIX)).sanity_check()
        except CorruptIndexError as exc:
            return str(exc)
    return None
