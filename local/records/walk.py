"""The one walk over batch headers, in a buffer or a file: where each batch starts and how long it is.

Every reader (``MemoryRecords``, ``FileRecords``), segment recovery, dump, scrub and the remote read path size
batches with :func:`batch_size` (directly, or through :func:`walk_batches`), so they agree on what a torn tail
is and what a corrupt size is. No batch body is parsed and no checksum computed here.

The rule is Kafka's (``ByteBufferLogInputStream.nextBatchSize``, ``FileLogInputStream.nextBatch``), for the
batch at ``position`` with ``remaining`` bytes left in the buffer or file:

1. fewer than ``LOG_OVERHEAD`` (12) bytes left: the walk ends (a torn tail);
2. a size field below ``RECORD_OVERHEAD_V0`` (14, the smallest legacy message; "V0 has the smallest overhead,
   stricter checking is done later"): corrupt;
3. fewer than ``HEADER_SIZE_UP_TO_MAGIC`` (17) bytes left: the walk ends;
4. a magic byte other than 0, 1 or 2: corrupt;
5. a whole batch smaller than its format's minimum (``min_batch_size``: 61 for v2 as
   ``DefaultRecordBatch.RECORD_BATCH_OVERHEAD``; 26 for v0, 34 for v1): corrupt. Kafka finds this one later, in
   ``ensureValid``, when the batch is used; every caller here uses what it walks, so the walk checks it at once;
6. a batch running past the end: the walk ends (a torn tail, or a read clipped at ``max_bytes``).

A corrupt size raises ``CorruptRecordError`` naming the position (and ``origin``, the file or remote segment).

Two hot loops size v2 batches inline, as part of one header unpack they need anyway: the append's
``local.validation.analyze_and_validate`` (appends take v2 only) and the scrub's fast path
(``tiered.scrub.batches.BatchScanner._parse_sound_v2``). Each accepts only batches these rules accept (size >= 61
and the batch whole) and hands anything else to this module, whose answer (and error) is the one reported.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from local.errors import CorruptRecordError
from local.records.constants import (
    CURRENT_MAGIC,
    HEADER_SIZE_UP_TO_MAGIC,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    OFFSET_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORD_OVERHEAD_V0,
    SIZE_OFFSET,
    min_batch_size,
)

Buffer = bytes | bytearray | memoryview
ReadInto = Callable[[int, memoryview], int]
"""``read_into(position, buffer)``: fill ``buffer`` from ``position`` of a file; the number of bytes read."""

READ_WINDOW = 64 * 1024
"""Bytes a file walk reads at a time; a larger batch gets a read of its own size."""

_unpack_size = struct.Struct(">i").unpack_from  # also the last offset delta
_unpack_offset = struct.Struct(">q").unpack_from


def batch_size(
    buf: Buffer, at: int, remaining: int, position: int | None = None, origin: str | None = None,
    context: Mapping[str, Any] | None = None,
) -> int | None:
    """The size (``LOG_OVERHEAD`` included) of the batch at ``buf[at:]``, or None when the walk ends there (rules
    1, 3 and 6 of the module docstring); raises ``CorruptRecordError`` (rules 2, 4, 5).

    ``remaining`` is how many bytes the buffer or file holds from there; ``buf`` must hold at least
    ``min(remaining, HEADER_SIZE_UP_TO_MAGIC)`` of them. ``position`` (default ``at``), ``origin`` and
    ``context`` (more fields for the error) name the batch in an error."""
    if remaining < LOG_OVERHEAD:
        return None
    size = _unpack_size(buf, at + SIZE_OFFSET)[0] + LOG_OVERHEAD
    if size < LOG_OVERHEAD + RECORD_OVERHEAD_V0:
        raise _corrupt(f"declares size {size}, below the minimum {LOG_OVERHEAD + RECORD_OVERHEAD_V0}",
                       at if position is None else position, origin, context, size=size)
    if remaining < HEADER_SIZE_UP_TO_MAGIC:
        return None
    magic = buf[at + MAGIC_OFFSET]
    if magic > CURRENT_MAGIC:  # a signed byte: a negative magic reads as > 127 here
        raise _corrupt(f"has unknown magic {magic if magic < 128 else magic - 256}", at if position is None else position,
                       origin, context, magic=magic)
    if size < RECORD_BATCH_OVERHEAD and size < min_batch_size(magic):
        raise _corrupt(f"declares size {size}, below the minimum {min_batch_size(magic)} of magic {magic}",
                       at if position is None else position, origin, context, size=size)
    return size if size <= remaining else None


def walk_batches(
    source: Buffer | ReadInto,
    end: int | None = None,
    start: int = 0,
    *,
    whole: bool = True,
    reuse: bool = False,
    window: int = READ_WINDOW,
    origin: str | None = None,
    base_position: int = 0,
    context: Mapping[str, Any] | None = None,
) -> Iterator[tuple[int, int, memoryview, int]]:
    """``(position, size, view, at)`` for each batch from ``start`` to ``end``, by the rule of :func:`batch_size`;
    ``view[at:]`` holds the batch (all of it when ``whole``, else at least its header up to
    ``RECORD_BATCH_OVERHEAD`` bytes or the end). The walk stops quietly at a torn tail: a caller that needs the
    source to end on a batch boundary compares the position after the last batch with ``end``.

    ``source`` is a buffer (``end`` defaults to its length; every view is the buffer itself, nothing is copied) or
    a file's ``read_into`` (``end`` required; read ``window`` bytes at a time). With ``reuse`` a file walk refills
    one buffer, so a view is valid only until the walk moves on; without it every read is a fresh buffer.
    Errors name ``origin`` and the position plus ``base_position`` (where the source starts in its file), with
    the fields of ``context``.
    """
    where = (origin, base_position, context)
    if isinstance(source, bytes | bytearray | memoryview):
        return _walk_buffer(memoryview(source), len(source) if end is None else end, start, where)
    if end is None:
        raise ValueError("a file walk needs the end position")
    return _walk_file(source, end, start, whole, reuse, window, where)


_Where = tuple[str | None, int, Mapping[str, Any] | None]


# Both walks first try the common case inline: a v2 batch of at least RECORD_BATCH_OVERHEAD bytes that fits passes
# every rule of batch_size (it is at least the v0 minimum, holds its magic byte, knows its magic and is whole), so
# only the rest is sized by batch_size; a call per batch of it would cost recovery a third of its time on small
# batches.


def _walk_buffer(view: memoryview, end: int, pos: int, where: _Where) -> Iterator[tuple[int, int, memoryview, int]]:
    origin, base, context = where
    while True:
        remaining = end - pos
        if remaining >= RECORD_BATCH_OVERHEAD:
            size = _unpack_size(view, pos + SIZE_OFFSET)[0] + LOG_OVERHEAD
            if RECORD_BATCH_OVERHEAD <= size <= remaining and view[pos + MAGIC_OFFSET] == MAGIC_V2:
                yield pos, size, view, pos
                pos += size
                continue
        checked = batch_size(view, pos, remaining, base + pos, origin, context)
        if checked is None:
            return
        yield pos, checked, view, pos
        pos += checked


def _walk_file(
    read_into: ReadInto, end: int, pos: int, whole: bool, reuse: bool, window: int, where: _Where
) -> Iterator[tuple[int, int, memoryview, int]]:
    origin, base, context = where
    buffer = bytearray()
    view = memoryview(buffer)
    view_start = pos
    while (remaining := end - pos) >= LOG_OVERHEAD:
        at = pos - view_start
        if len(view) - at < (RECORD_BATCH_OVERHEAD if remaining > RECORD_BATCH_OVERHEAD else remaining):
            buffer, view = _fill(read_into, pos, buffer, window, end - pos, reuse)
            view_start, at = pos, 0
            if len(view) < min(HEADER_SIZE_UP_TO_MAGIC, remaining):
                return  # the file shrank under the walk
        size = _unpack_size(view, at + SIZE_OFFSET)[0] + LOG_OVERHEAD
        # (size <= remaining and size >= RECORD_BATCH_OVERHEAD: the view holds the magic byte, see the refill above)
        if not (RECORD_BATCH_OVERHEAD <= size <= remaining and view[at + MAGIC_OFFSET] == MAGIC_V2):
            checked = batch_size(view, at, remaining, base + pos, origin, context)
            if checked is None:
                return
            size = checked
        if whole and len(view) - at < size:
            buffer, view = _fill(read_into, pos, buffer, max(window, size), remaining, reuse)
            view_start, at = pos, 0
            if len(view) < size:
                return
        yield pos, size, view, at
        pos += size


def _fill(
    read_into: ReadInto, pos: int, buffer: bytearray, want: int, remaining: int, reuse: bool
) -> tuple[bytearray, memoryview]:
    want = min(want, remaining)
    if not reuse or len(buffer) < want:
        buffer = bytearray(want)
    n = read_into(pos, memoryview(buffer)[:want])
    return buffer, memoryview(buffer)[:n]


def _corrupt(
    what: str, position: int, origin: str | None, context: Mapping[str, Any] | None, **fields: int
) -> CorruptRecordError:
    where = f" of {origin}" if origin else ""
    return CorruptRecordError(f"batch at position {position}{where} {what}", **{**(context or {}), **fields, "position": position})


_UNBOUNDED = 2**63


def checked_batch_size(
    buf: Buffer, at: int, position: int | None = None, origin: str | None = None,
    context: Mapping[str, Any] | None = None,
) -> int:
    """The size of the batch whose first ``HEADER_SIZE_UP_TO_MAGIC`` bytes are at ``buf[at:]``, checked by rules 2,
    4 and 5 of the module docstring (``CorruptRecordError``), for a stream whose end is not known yet (a remote
    object read in ranges): whether the whole batch follows is the caller's business."""
    size = batch_size(buf, at, _UNBOUNDED, position, origin, context)
    assert size is not None  # never partial with an unbounded remainder
    return size


def last_offset(buf: Buffer, at: int) -> int:
    """The last offset of the batch whose header is at ``buf[at:]`` (``RECORD_BATCH_OVERHEAD`` bytes for v2, 17 for
    a legacy entry): v2's base offset plus its last offset delta; a legacy entry's offset field, which holds its
    last offset."""
    (offset,) = _unpack_offset(buf, at + OFFSET_OFFSET)
    if buf[at + MAGIC_OFFSET] == MAGIC_V2:
        return int(offset + _unpack_size(buf, at + LAST_OFFSET_DELTA_OFFSET)[0])
    return int(offset)
