"""Whole record batches out of a byte range read piece by piece: what the Spark source's executors and the columnar
copy (:mod:`tiered.columnar.keeper`) decode. Imports nothing of the remote tier (the keeper runs inside it)."""

from __future__ import annotations

import struct
from collections.abc import Callable

from local.errors import CorruptRecordError
from local.records.batch import HEADER_SIZE_UP_TO_MAGIC, RECORD_BATCH_OVERHEAD
from local.records.walk import checked_batch_size

READ_BYTES = 8 * 1024 * 1024
_HEAD = struct.Struct(">qi")  # base offset, length


class RawBatches:
    """The batches of the bytes from ``start`` to ``end`` (None: the end of the data) of ``read``, up to the first
    batch at or past ``until_offset``: one at a time (:meth:`next_batch`), or many at once as the bytes of one read
    (:meth:`window`, then :meth:`skip` past those the caller took). A batch cut short by the end of the range or of
    the data raises ``CorruptRecordError`` naming ``where`` and its position.

    Reads are ``READ_BYTES`` long and each starts where the previous one ended (the remote reader's sign of a
    sequential reader, which it reads ahead for). A batch is a view into the read that holds it; only one that
    straddles two reads is copied (joining whole reads cost a copy of everything: a third of the source's time)."""

    def __init__(self, read: Callable[[int, int], bytes | memoryview], start: int, end: int | None,
                 until_offset: int, where: str) -> None:
        self._read = read
        self._end = end
        self._until = until_offset
        self._where = where
        self._pieces: list[tuple[int, bytes | memoryview]] = []  # the reads, (position, data), covering [pos, at)
        self._at = start
        self.position = start
        """Where the next batch starts."""
        self._eof = False
        self._done = False

    def _ensure(self, need: int) -> int:
        """Bytes available from ``position``, after reading more when fewer than ``need`` are."""
        end = self._end
        while self._at - self.position < need and not self._eof:
            want = max(need - (self._at - self.position), READ_BYTES)
            if end is not None:
                want = min(want, end - self._at)
            data = self._read(self._at, want) if want > 0 else b""
            if not len(data):  # a read may return fewer bytes than asked (a remote one stops at its chunk's end)
                self._eof = True
            else:
                self._pieces.append((self._at, data))
                self._at += len(data)
        return self._at - self.position

    def _first(self) -> tuple[int, bytes | memoryview]:
        """The read holding ``position`` (available)."""
        pieces = self._pieces
        while pieces[0][0] + len(pieces[0][1]) <= self.position:
            pieces.pop(0)
        return pieces[0]

    def _view(self, n: int) -> memoryview:
        """``n`` bytes (available) from ``position``: a view into one read, or a copy joining several."""
        first, data = self._first()
        rel = self.position - first
        if rel + n <= len(data):
            return memoryview(data)[rel:rel + n]
        parts, got = [memoryview(data)[rel:]], len(data) - rel
        for _first, more in self._pieces[1:]:
            parts.append(memoryview(more)[:n - got])
            got += len(parts[-1])
            if got >= n:
                break
        return memoryview(b"".join(parts))

    def window(self) -> tuple[bytes | memoryview, int]:
        """(data, start): the read holding ``position`` and where ``position`` is in it. Every byte from there to
        the read's end lies within the range; a batch may run past it (into the next read, or past the range's end,
        which :meth:`next_batch` refuses). Empty data at the end."""
        if self._done or not self._ensure(RECORD_BATCH_OVERHEAD):
            return b"", 0
        first, data = self._first()
        return data, self.position - first

    def skip(self, n: int) -> None:
        """Move past ``n`` bytes of whole batches (from :meth:`window`, each before ``until_offset``)."""
        self.position += n

    def next_batch(self) -> memoryview | None:
        """The whole batch at ``position`` (``position`` moves past it), or None at the end."""
        if self._done:
            return None
        end, pos = self._end, self.position
        if end is not None and pos >= end:
            self._done = True
            return None
        have = self._ensure(HEADER_SIZE_UP_TO_MAGIC)
        if have == 0 and end is None:
            self._done = True
            return None
        if have < HEADER_SIZE_UP_TO_MAGIC:
            raise CorruptRecordError(f"{self._where}: truncated batch header at position {pos}", position=pos)
        header = self._view(HEADER_SIZE_UP_TO_MAGIC)
        base_offset, _ = _HEAD.unpack_from(header, 0)
        size = checked_batch_size(header, 0, pos, self._where, {"offset": base_offset})
        if base_offset >= self._until:
            self._done = True
            return None
        if self._ensure(size) < size:
            raise CorruptRecordError(f"{self._where}: batch at position {pos} ({size} bytes) is cut short by the end "
                                     f"of the {'range' if end is not None else 'segment'}", position=pos,
                                     offset=base_offset)
        batch = self._view(size)
        self.position = pos + size
        return batch

