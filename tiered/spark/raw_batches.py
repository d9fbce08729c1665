"""Whole record batches out of a byte range read piece by piece: what the Spark source's executors and the columnar
copy (:mod:`tiered.columnar.keeper`) decode. Imports nothing of the remote tier (the keeper runs inside it)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

from local.errors import CorruptRecordError
from local.records.batch import HEADER_SIZE_UP_TO_MAGIC
from local.records.walk import checked_batch_size

READ_BYTES = 8 * 1024 * 1024
_HEAD = struct.Struct(">qi")  # base offset, length


def iter_raw_batches(read: Callable[[int, int], bytes | memoryview], start: int, end: int | None, until_offset: int,
                     where: str) -> Iterator[tuple[int, memoryview]]:
    """(position, whole batch) from ``start`` to ``end`` (None: the end of the data), stopping at the first batch
    at or past ``until_offset``. A batch cut short by the end of the range or of the data raises.

    Reads are ``READ_BYTES`` long and each starts where the previous one ended (the remote reader's sign of a
    sequential reader, which it reads ahead for). A batch is a view into the read that holds it; only one that
    straddles two reads is copied (joining whole reads cost a copy of everything: a third of the source's time)."""
    pieces: list[tuple[int, bytes | memoryview]] = []  # the reads, (position, data), covering [pos, at) in order
    at = pos = start
    eof = False

    def ensure(need: int) -> int:
        """Bytes available from ``pos``, after reading more when fewer than ``need`` are."""
        nonlocal at, eof
        while at - pos < need and not eof:
            want = max(need - (at - pos), READ_BYTES)
            if end is not None:
                want = min(want, end - at)
            data = read(at, want) if want > 0 else b""
            if not len(data):  # a read may return fewer bytes than asked (a remote one stops at its chunk's end)
                eof = True
            else:
                pieces.append((at, data))
                at += len(data)
        return at - pos

    def view(n: int) -> memoryview:
        """``n`` bytes (available) from ``pos``: a view into one read, or a copy joining several."""
        while pieces[0][0] + len(pieces[0][1]) <= pos:
            pieces.pop(0)
        first, data = pieces[0]
        rel = pos - first
        if rel + n <= len(data):
            return memoryview(data)[rel:rel + n]
        parts, got = [memoryview(data)[rel:]], len(data) - rel
        for _first, more in pieces[1:]:
            parts.append(memoryview(more)[:n - got])
            got += len(parts[-1])
            if got >= n:
                break
        return memoryview(b"".join(parts))

    while end is None or pos < end:
        have = ensure(HEADER_SIZE_UP_TO_MAGIC)
        if have == 0 and end is None:
            return
        if have < HEADER_SIZE_UP_TO_MAGIC:
            raise CorruptRecordError(f"{where}: truncated batch header at position {pos}", position=pos)
        header = view(HEADER_SIZE_UP_TO_MAGIC)
        base_offset, _ = _HEAD.unpack_from(header, 0)
        size = checked_batch_size(header, 0, pos, where, {"offset": base_offset})
        if base_offset >= until_offset:
            return
        if ensure(size) < size:
            raise CorruptRecordError(f"{where}: batch at position {pos} ({size} bytes) is cut short by the end of the "
                                     f"{'range' if end is not None else 'segment'}", position=pos, offset=base_offset)
        yield pos, view(size)
        pos += size
