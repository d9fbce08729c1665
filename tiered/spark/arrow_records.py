"""Record batches decoded straight into Arrow: the hot path of the Spark source.

:class:`ArrowBatchBuilder` takes whole Kafka batches (v2, or legacy v0/v1 on a slower path) and returns
``pyarrow.RecordBatch``es in the source's schema (:data:`ARROW_SCHEMA`). A v2 batch is CRC-checked and its body
decompressed once; the bodies of many batches are concatenated into one buffer and their records are walked in
bulk: the record starts are found by guessing a uniform record size and checking the guess with numpy (exact: the
chain of lengths is verified), falling back to a loop that reads only each record's length. Every other field
(timestamp and offset deltas, key and value lengths) is decoded with vectorised varint reads over all records at
once, and keys and values are cut out of the buffer by Arrow itself (an offsets buffer over the concatenated
bodies, then a ``take`` of every other slice): no Python object is made per record. Records with headers are the
exception (rare): their headers are parsed record by record.

Where the build had a C compiler, the records are walked in C instead (``tiered/spark/_arrowdecode.c``): one pass
over the bodies as they are (no concatenation), writing each column's buffers (values, int32 offsets, validity) into
memory the process keeps from chunk to chunk (:class:`OutputMemory`), which Arrow then wraps without a copy; the
numpy path above stays the definition, and ``tests/property/test_arrow_decode.py`` holds the two to the same Arrow
data and the same refusals. Only the columns asked for are built (``columns``: a user schema), by either path.
With the C walk, the reader hands over a read's worth of plain batches at once (:meth:`ArrowBatchBuilder.add_run`:
found and CRC-checked by ``_arrowdecode.scan``, no Python per batch); anything else, one batch at a time (``add``).

Control batches never reach the output (a Kafka consumer never returns them); which transactional batches are
aborted is the caller's business (:mod:`tiered.spark.reader`). Errors: :class:`local.errors.CorruptRecordError`
for a bad CRC or a record that does not fit its batch, with the batch's offset; the caller adds where it was read.
"""

from __future__ import annotations

import struct
import sys
import threading
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from local.crc import crc32c
from local.errors import CorruptRecordError, InvalidRecordError
from local.extensions import fresh_extension
from local.records.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
)
from local.records.compression import CompressionType
from local.records.legacy import LegacyRecordBatch
from local.records.varint import decode_varint

if TYPE_CHECKING:
    from tiered.spark.raw_batches import RawBatches

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
ARROW_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
    pa.field("headers", pa.list_(HEADER_TYPE)),
    pa.field("leaderEpoch", pa.int32()),
])
SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int, "
    "headers array<struct<key:string,value:binary>>, leaderEpoch int"
)
COLUMNS = tuple(ARROW_SCHEMA.names)
# the record walk in C (tiered/spark/_arrowdecode.c), built where a compiler exists (and not from an older source);
# numpy's otherwise. (The extension alone, not the package: its __init__ imports this module.)
_arrowdecode: Any = fresh_extension("tiered.spark._arrowdecode")
NATIVE_DECODE = _arrowdecode is not None
_WANT = {"key": 1, "value": 2, "headers": 4}  # the variable-size columns _arrowdecode.decode builds on request
_PAD = bytes(16)  # a varint read near the end of the buffer never indexes past it
CHUNK_RECORDS = 64 * 1024
CHUNK_BYTES = 32 * 1024 * 1024
KEPT_MEMORY_BYTES = 64 * 1024 * 1024
_META_COLUMNS = 9  # per batch, as _arrowdecode.decode takes them (ArrowBatchBuilder.__init__)
_SCAN_ROWS = 1024  # batches one _arrowdecode.scan call may find
_NO_FLOOR = -(2**63)


class OutputMemory:
    """Memory the C decoder writes columns into, kept by the process from one chunk (and one Spark task) to the next.

    pyarrow's default pool (mimalloc) gives freed pages back to the OS within milliseconds. A Spark worker frees a
    chunk's buffers once it has sent them to the JVM and allocates the next task's a little later, so each chunk's
    ~12 MB came back as fresh pages, a page fault and a zeroed page every 4 KiB: measured, 1,100-1,400 faults and
    ~25 ms more system CPU in the workers for a query of 1M records, where a source yielding prebuilt batches has
    none. Here an array is handed out again once nothing else refers to it: Arrow's buffers over it
    (``pa.py_buffer``) hold a reference to the array, so one whose reference count is back to the list's own is
    free. Arrays are numpy's (``np.empty``: never zeroed; the decoder writes every byte it exposes). At most
    ``max_bytes`` of arrays are tracked; beyond, the oldest free ones are dropped (and freed), and a new one is
    tracked only while that bound holds. Thread-safe: the columnar copy decodes in the engine's threads."""

    def __init__(self, max_bytes: int = KEPT_MEMORY_BYTES) -> None:
        self.max_bytes = max_bytes
        self._arrays: list[np.ndarray] = []  # oldest first
        self._bytes = 0
        self._lock = threading.Lock()

    def take(self, size: int) -> np.ndarray:
        """A uint8 array of at least ``size`` bytes, unused by anyone else."""
        with self._lock:
            best = -1
            for i in range(len(self._arrays)):  # the smallest free one of at most twice the size asked
                nbytes = self._arrays[i].nbytes
                if size <= nbytes <= 2 * size + 4096 and self._free(i) and (
                        best < 0 or nbytes < self._arrays[best].nbytes):
                    best = i
            if best >= 0:
                arr = self._arrays.pop(best)
                self._arrays.append(arr)  # the most recently used last
                return arr
            arr = np.empty(max(size, 1), np.uint8)
            i = 0
            while self._bytes + arr.nbytes > self.max_bytes and i < len(self._arrays):
                if self._free(i):
                    self._bytes -= self._arrays.pop(i).nbytes
                else:
                    i += 1
            if self._bytes + arr.nbytes <= self.max_bytes:
                self._arrays.append(arr)
                self._bytes += arr.nbytes
            return arr

    def _free(self, i: int) -> bool:
        """Whether array ``i`` is referred to by the list alone (and getrefcount's argument)."""
        return sys.getrefcount(self._arrays[i]) == 2

    @property
    def tracked_bytes(self) -> int:
        """Bytes of the arrays tracked (in use or free)."""
        return self._bytes


_MEMORY = OutputMemory()


@dataclass(frozen=True)
class Projection:
    """The columns a read asked for (a user schema made of some of the source's columns): which of the source's
    columns, in the order asked, and the Arrow schema Spark expects back (the user's names and nullability, the
    source's types)."""

    columns: tuple[str, ...]
    schema: pa.Schema

    def apply(self, rb: pa.RecordBatch) -> pa.RecordBatch:
        """``rb`` (the source's columns, at least these) as the read asked for it."""
        return pa.RecordBatch.from_arrays([rb.column(c) for c in self.columns], schema=self.schema)


def _varints(arr: np.ndarray, pos: np.ndarray, max_bytes: int,
             strict: bool = True) -> tuple[np.ndarray, np.ndarray | int]:
    """Zigzag varints at every position of ``pos`` in ``arr``: (values, sizes in bytes; the int 1 when every one
    is a single byte). One longer than ``max_bytes`` raises, or when not ``strict`` (a guess being checked) gets
    size -1. 32-bit varints are assembled in int64, varlongs in uint64."""
    b = arr[pos]
    cont = np.flatnonzero(b & 0x80)
    if not len(cont):
        v = b.astype(np.int64)
        return (v >> 1) ^ -(v & 1), 1
    wide = max_bytes > 5
    dtype = np.uint64 if wide else np.int64
    result = (b & 0x7F).astype(dtype)
    size = np.ones(len(pos), np.int64)
    shift = 7
    j = 1
    while len(cont):
        if j >= max_bytes:
            if not strict:
                size[cont] = -1
                break
            raise CorruptRecordError(f"a varint of more than {max_bytes} bytes in a record at buffer position {int(pos[cont[0]])}")
        bj = arr[pos[cont] + j]
        result[cont] |= (bj & 0x7F).astype(dtype) << dtype(shift)
        size[cont] += 1
        cont = cont[bj >= 0x80]
        shift += 7
        j += 1
    if wide:
        value = (result >> np.uint64(1)).astype(np.int64) ^ -(result & np.uint64(1)).astype(np.int64)
    else:
        value = (result >> 1) ^ -(result & 1)
    return value, size


def _walk_lengths(data: bytes, start: int, end: int, count: int, base_offset: int) -> list[int]:
    """Positions of the ``count`` records of a batch body in ``data[start:end]``, by reading their lengths only
    (one- and two-byte lengths inline: records under 8 KiB)."""
    try:
        return _walk(data, start, end, count, base_offset)
    except IndexError:
        raise CorruptRecordError(f"batch at offset {base_offset}: its records run past its end", offset=base_offset) from None


def _walk(data: bytes, start: int, end: int, count: int, base_offset: int) -> list[int]:
    out = [0] * count
    pos = start
    for i in range(count):
        out[i] = pos
        b = data[pos]
        if b < 0x80:
            pos += 1 + (b >> 1)
            continue
        b2 = data[pos + 1]
        if b2 < 0x80:
            pos += 2 + (((b & 0x7F) | (b2 << 7)) >> 1)
            continue
        value, nxt = decode_varint(data, pos)
        if value < 0:
            raise CorruptRecordError(f"record of negative length in the batch at offset {base_offset}", offset=base_offset)
        pos = nxt + value
        if pos > end:
            raise CorruptRecordError(f"batch at offset {base_offset}: record {i} runs past the batch", offset=base_offset)
    return out


_GUESS_MIN_RUN = 8


def _record_starts(data: bytes, arr: np.ndarray, start: int, end: int, count: int, base_offset: int,
                   out: np.ndarray) -> None:
    """Fill ``out`` with the positions of a batch body's ``count`` records.

    Guess that the records from here on have the size of the current one, and check the guess for all of them at
    once (the length read at each guessed start must lead to the next guessed start): the verified prefix of the
    chain is exact. Where a guess fails early (records of varied sizes), walk the next records one by one,
    doubling the walk each time guessing keeps failing. ``_decode`` checks the chain again in full."""
    i = 0
    pos = start
    walk = 16
    while i < count:
        remaining = count - i
        if remaining >= _GUESS_MIN_RUN and pos < end:
            length, nxt = decode_varint(data, pos)
            stride = nxt - pos + length
            if stride > 0:
                m = min(remaining, max(1, (end - pos) // stride))
                cand = pos + stride * np.arange(m, dtype=np.int64)
                lens, sizes = _varints(arr, cand, 5, strict=False)
                ok = (sizes + lens == stride) & (sizes > 0)
                run = m if ok.all() else int(np.argmin(ok))
                if run >= _GUESS_MIN_RUN or run == remaining:
                    out[i:i + run] = cand[:run]
                    i += run
                    pos += stride * run
                    walk = 16
                    continue
        w = min(walk, remaining)
        got = _walk_lengths(data, pos, end, w + 1 if w < remaining else w, base_offset)
        out[i:i + w] = got[:w]
        i += w
        if i < count:
            pos = got[w]
        walk = min(walk * 2, 4096)


_INLINE = np.arange(12, dtype=np.int64)


def _slices(arr: np.ndarray, data_buf: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary array of ``data[starts[i] : starts[i] + lengths[i]]`` (null where the length is -1), cut by Arrow:
    a binary-view array over the buffer (16 bytes per slice: the length, then either the slice itself when it
    fits in 12 bytes or its first 4 bytes and its position), cast to a plain binary array (one memcpy each)."""
    n = len(starts)
    if n == 0:
        return pa.array([], pa.binary())
    valid = lengths >= 0
    if not valid.any():
        return pa.nulls(n, pa.binary())
    lens = np.where(valid, lengths, 0)
    views = arr[starts[:, None] + _INLINE]  # (n, 12): the first 12 bytes from each start
    views *= lens[:, None] > _INLINE  # zero past each slice's end
    out = np.zeros((n, 16), np.uint8)
    out[:, 4:] = views
    words = out.view(np.int32)
    words[:, 0] = lens
    long = np.nonzero(lens > 12)[0]
    words[long, 2] = 0  # buffer index
    words[long, 3] = starts[long]
    validity = None
    null_count = 0
    if not valid.all():
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        null_count = int(n - valid.sum())
    view = pa.Array.from_buffers(pa.binary_view(), n, [validity, pa.py_buffer(out), data_buf], null_count)
    return view.cast(pa.binary())


class ArrowBatchBuilder:
    """Collects whole batches of one partition and turns them into Arrow record batches (module docstring).

    ``add`` returns record batches when the collected ones reach :data:`CHUNK_RECORDS`; ``flush`` the rest. Only
    the records with ``from_offset <= offset < until_offset`` are kept. ``columns``: build only these of the
    source's columns (in the schema's order; None: all of them). ``native``: decode with the C walk
    (``tiered.spark._arrowdecode``) or the numpy one, which stays the definition (None: C where it was built)."""

    def __init__(self, topic: str, partition: int, from_offset: int = 0, until_offset: int = 2**63 - 1,
                 columns: Collection[str] | None = None, native: bool | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.from_offset = from_offset
        self.until_offset = until_offset
        unknown = set(columns or ()) - set(COLUMNS)
        if unknown:
            raise ValueError(f"not columns of the source: {', '.join(sorted(unknown))}")
        self.columns = COLUMNS if columns is None else tuple(c for c in COLUMNS if c in columns)
        self.schema = ARROW_SCHEMA if columns is None else pa.schema([ARROW_SCHEMA.field(c) for c in self.columns])
        if native and not NATIVE_DECODE:
            raise ValueError("tiered.spark._arrowdecode was not built (no C compiler when tiered was installed)")
        self.native = NATIVE_DECODE if native is None else native
        # The batches collected: the buffers holding their bodies, and a row of _META_COLUMNS per batch (base offset,
        # base timestamp, max timestamp, attributes, epoch, records, then its source, body start and length), in
        # blocks (those of a run found by scan) and rows (those added one by one) not yet in a block.
        self._sources: list[bytes | memoryview] = []
        self._blocks: list[np.ndarray] = []
        self._rows: list[tuple[int, ...]] = []
        self._scan_rows: np.ndarray | None = None  # scan's output, kept
        self._records = 0
        self._bytes = 0
        self._partial = False  # some batch straddles from/until: records need masking

    # ------------------------------------------------------------------------------------------------------
    @staticmethod
    def check_crc(view: memoryview) -> None:
        """CRC-check a v2 batch that is dropped without being decoded (an aborted one)."""
        (crc,) = struct.unpack_from(">I", view, 17)
        computed = crc32c(view[ATTRIBUTES_OFFSET:])
        if computed != crc:
            (base_offset,) = struct.unpack_from(">q", view, 0)
            raise CorruptRecordError(
                f"record batch at offset {base_offset} is corrupt: stored crc {crc:#010x}, computed {computed:#010x}",
                offset=base_offset, crc=crc, computed=computed)

    def add(self, buf: memoryview | bytes) -> list[pa.RecordBatch]:
        """One whole batch (its full bytes, header included). Control batches are checked and dropped."""
        view = buf if isinstance(buf, memoryview) else memoryview(buf)
        magic = view[16]
        if magic != 2:
            out = self.flush()
            legacy = self._legacy(view)
            if legacy is not None:
                out.append(legacy)
            return out
        (base_offset, _length, epoch, _magic, crc, attributes, last_delta, base_ts, max_ts, _pid, _pepoch, _seq,
         count) = BATCH_HEADER.unpack_from(view, 0)
        computed = crc32c(view[ATTRIBUTES_OFFSET:])
        if computed != crc:
            raise CorruptRecordError(
                f"record batch at offset {base_offset} is corrupt: stored crc {crc:#010x}, computed {computed:#010x}",
                offset=base_offset, crc=crc, computed=computed)
        if attributes & CONTROL_FLAG_MASK or count <= 0:
            return []
        last = base_offset + last_delta
        if last < self.from_offset or base_offset >= self.until_offset:
            return []
        if base_offset < self.from_offset or last >= self.until_offset:
            self._partial = True
        codec = attributes & COMPRESSION_CODEC_MASK
        body: bytes | memoryview = view[RECORD_BATCH_OVERHEAD:]
        if codec:
            body = CompressionType.from_id(codec).decompress(body)
        self._rows.append((base_offset, base_ts, max_ts, attributes, epoch, count, len(self._sources), 0, len(body)))
        self._sources.append(body)
        self._records += count
        self._bytes += len(body)
        if self._records >= CHUNK_RECORDS or self._bytes >= CHUNK_BYTES:
            return self.flush()
        return []

    def add_run(self, data: bytes | memoryview, start: int, ts_floor: int | None = None,
                transactional: bool = True) -> tuple[int, list[pa.RecordBatch]]:
        """Take the plain batches at the start of ``data[start:]`` at once: (the bytes of whole batches taken, the
        record batches that completed). Plain: whole in ``data``, v2, uncompressed, not control batches, every
        record within the builder's offsets, a max timestamp at or above ``ts_floor`` (None: any), transactional
        ones only when ``transactional`` (a read_committed caller passes False where it has aborted transactions to
        drop), and a matching CRC. They are found and CRC-checked in C (``_arrowdecode.scan``: per batch, Python
        cost as much as walking its records); what is not plain is the caller's to pass to :meth:`add` (or to skip)
        one batch at a time, which names what is wrong. Takes nothing (0) without the C decoder."""
        if not self.native:
            return 0, []
        if self._scan_rows is None:
            self._scan_rows = np.empty((_SCAN_ROWS, _META_COLUMNS), np.int64)
        consumed, batches, records, nbytes = _arrowdecode.scan(
            data, start, len(data), self.from_offset, self.until_offset, _NO_FLOOR if ts_floor is None else ts_floor,
            transactional, CHUNK_RECORDS - self._records, CHUNK_BYTES - self._bytes, len(self._sources),
            self._scan_rows)
        if not batches:
            return 0, []
        if self._rows:
            self._blocks.append(np.array(self._rows, np.int64))
            self._rows = []
        self._blocks.append(self._scan_rows[:batches].copy())
        self._sources.append(data)
        self._records += records
        self._bytes += nbytes
        if self._records >= CHUNK_RECORDS or self._bytes >= CHUNK_BYTES:
            return consumed, self.flush()
        return consumed, []

    def add_runs(self, raw: RawBatches, ts_floor: int | None = None,
                 transactional: bool = True) -> Iterator[pa.RecordBatch]:
        """:meth:`add_run` over the reads of ``raw`` for as long as it takes batches (moving ``raw`` past them): the
        record batches that complete, as they do. It stops at the first batch a run does not take (or at the end),
        which the caller passes to :meth:`add` or skips, before calling again."""
        while True:
            data, start = raw.window()
            taken, out = self.add_run(data, start, ts_floor, transactional) if len(data) else (0, [])
            if not taken:
                return
            raw.skip(taken)
            yield from out

    def flush(self) -> list[pa.RecordBatch]:
        if not self._sources:
            return []
        if self._rows:
            self._blocks.append(np.array(self._rows, np.int64))
        sources, blocks, partial = self._sources, self._blocks, self._partial
        meta = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
        self._sources, self._blocks, self._rows, self._records, self._bytes, self._partial = [], [], [], 0, 0, False
        if self.native:
            rb = self._decode_native(sources, meta, partial)
            if rb is not None:
                return [rb]
        try:
            return [self._decode(sources, meta, partial)]
        except InvalidRecordError as exc:  # a bad varint in a record: its batch is corrupt, as for every other flaw
            raise CorruptRecordError(str(exc), position=exc.context.get("position")) from exc

    # ------------------------------------------------------------------------------------------------------
    def _decode(self, sources: list[bytes | memoryview], meta: np.ndarray, partial: bool) -> pa.RecordBatch:
        bodies = [memoryview(sources[s])[a:a + n] for s, a, n in meta[:, 6:].tolist()]
        data = b"".join([*bodies, _PAD])
        arr = np.frombuffer(data, np.uint8)
        total_len = len(data) - len(_PAD)
        m = meta[:, :6]
        counts = m[:, 5]
        sizes = np.fromiter((len(b) for b in bodies), np.int64, len(bodies))
        body_ends = np.cumsum(sizes)
        body_starts = body_ends - sizes
        n = int(counts.sum())
        # 1. record starts (the position of each record's length varint)
        starts = np.empty(n, np.int64)
        k = 0
        for i in range(len(bodies)):
            c = int(counts[i])
            _record_starts(data, arr, int(body_starts[i]), int(body_ends[i]), c, int(m[i, 0]), starts[k:k + c])
            k += c
        rec_len, len_size = _varints(arr, starts, 5)
        body = starts + len_size
        rec_end = body + rec_len
        batch_of = np.repeat(np.arange(len(bodies)), counts)
        expected_next = np.empty(n, np.int64)
        expected_next[:-1] = starts[1:]
        last_in_batch = np.cumsum(counts) - 1
        expected_next[last_in_batch] = body_ends
        bad = np.nonzero((rec_len < 0) | (rec_end != expected_next))[0]
        if len(bad):
            b = int(batch_of[bad[0]])
            raise CorruptRecordError(
                f"the records of the batch at offset {int(m[b, 0])} do not fill its {int(sizes[b])}-byte body",
                offset=int(m[b, 0]))
        # 2. fields, vectorised over every record
        pos = body + 1  # attributes (unused)
        ts_delta, sz = _varints(arr, pos, 10)
        pos = pos + sz
        off_delta, sz = _varints(arr, pos, 5)
        pos = pos + sz
        key_len, sz = _varints(arr, pos, 5)
        key_start = pos + sz
        pos = key_start + np.maximum(key_len, 0)
        self._check_within(pos, rec_end, batch_of, m)
        value_len, sz = _varints(arr, pos, 5)
        value_start = pos + sz
        pos = value_start + np.maximum(value_len, 0)
        self._check_within(pos, rec_end, batch_of, m)
        header_count, sz = _varints(arr, pos, 5)
        header_start = pos + sz
        has_headers = header_count != 0
        plain = ~has_headers
        if (header_start[plain] != rec_end[plain]).any() or (header_count < 0).any():
            self._check_within(rec_end + 1, rec_end, batch_of, m)  # raises with the batch's offset
        data_buf = pa.py_buffer(data)
        wanted = self.columns
        keys = _slices(arr, data_buf, key_start, key_len) if "key" in wanted else None
        values = _slices(arr, data_buf, value_start, value_len) if "value" in wanted else None
        base_offsets = m[:, 0][batch_of]
        offsets = base_offsets + off_delta
        attrs = m[:, 3][batch_of]
        log_append = (attrs & TIMESTAMP_TYPE_MASK) != 0
        timestamps = np.where(log_append, m[:, 2][batch_of], m[:, 1][batch_of] + ts_delta)
        epochs = m[:, 4][batch_of].astype(np.int32)
        if has_headers.any():  # parsed (so checked) whether the column is wanted or not, as the C walk does
            headers = self._headers(data, header_start, header_count, rec_end, n)
        else:
            headers = _empty_headers(n) if "headers" in wanted else None
        del total_len
        rb = self._assemble(keys, values, offsets, timestamps, log_append.astype(np.int32), headers, epochs, n)
        if partial:
            keep = (offsets >= self.from_offset) & (offsets < self.until_offset)
            if not keep.all():
                rb = rb.filter(pa.array(keep))
        return rb

    def _decode_native(self, sources: list[bytes | memoryview], meta: np.ndarray, partial: bool) -> pa.RecordBatch | None:
        """:meth:`_decode` by the C walk (``_arrowdecode``), into buffers from pyarrow's memory pool (which reuses
        freed memory: fresh pages cost a page fault each, as much as the walk itself). The same Arrow data and the
        same records refused as :meth:`_decode`; None when a header key is not UTF-8 (the numpy path replaces what
        is not, as ``bytes.decode`` does, and runs instead)."""
        want = sum(bit for column, bit in _WANT.items() if column in self.columns)
        n = int(meta[:, 5].sum())
        size = int(meta[:, 8].sum())
        bitmap = (n + 7) // 8
        take = _MEMORY.take
        epoch = "leaderEpoch" in self.columns
        out: list[np.ndarray | None] = [  # offsets; timestamps, their types, epochs and their bitmap when asked for
            take(8 * n), take(8 * n) if "timestamp" in self.columns else None,
            take(4 * n) if "timestampType" in self.columns else None, take(4 * n) if epoch else None,
            take(bitmap) if epoch else None]
        for column in ("key", "value"):
            out += [take(k) for k in (4 * (n + 1), size, bitmap)] if column in self.columns else [None, None, None]
        try:
            rows, epoch_nulls, key_nulls, key_bytes, value_nulls, value_bytes, hdrs = _arrowdecode.decode(
                sources, meta, want, self.from_offset, self.until_offset, partial, out)
        except ValueError as exc:
            if len(exc.args) != 2 or not isinstance(exc.args[0], int):
                raise
            base = int(meta[exc.args[0], 0])
            raise CorruptRecordError(f"the batch at offset {base}: {exc.args[1]}", offset=base) from None
        headers = None
        if hdrs is not None and hdrs[1] == 0:  # no record has a header
            headers = _empty_headers(rows)
        elif hdrs is not None:
            list_offsets, count, key_offsets, key_data, value_offsets, value_data, value_valid, value_nulls_h = hdrs
            keys = pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(key_offsets), pa.py_buffer(key_data)])
            try:
                keys.validate(full=True)
            except pa.ArrowInvalid:
                return None
            values = pa.Array.from_buffers(pa.binary(), count, [
                None if value_valid is None else pa.py_buffer(value_valid), pa.py_buffer(value_offsets),
                pa.py_buffer(value_data)], value_nulls_h)
            items = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE))
            headers = pa.Array.from_buffers(pa.list_(HEADER_TYPE), rows, [None, pa.py_buffer(list_offsets)],
                                            children=[items])

        bitmap = (rows + 7) // 8

        def used(i: int, size: int) -> pa.Buffer:
            """Buffer ``i`` cut to what was written: Arrow sends a buffer whole to Spark, unused bytes too."""
            buf = out[i]
            assert buf is not None
            return pa.py_buffer(buf[:size])

        def binary(first: int, nulls: int, size: int) -> pa.Array:
            validity = used(first + 2, bitmap) if nulls else None
            return pa.Array.from_buffers(pa.binary(), rows, [validity, used(first, 4 * (rows + 1)), used(first + 1, size)],
                                         nulls)

        def fixed(kind: pa.DataType, i: int, width: int) -> pa.Array:
            return pa.Array.from_buffers(kind, rows, [None, used(i, width * rows)])

        build = {
            "key": lambda: binary(5, key_nulls, key_bytes),
            "value": lambda: binary(8, value_nulls, value_bytes),
            "topic": lambda: _repeated(self.topic, pa.string(), rows),
            "partition": lambda: _repeated(self.partition, pa.int32(), rows),
            "offset": lambda: fixed(pa.int64(), 0, 8),
            "timestamp": lambda: fixed(pa.timestamp("us", tz="UTC"), 1, 8),
            "timestampType": lambda: fixed(pa.int32(), 2, 4),
            "headers": lambda: headers,
            "leaderEpoch": lambda: pa.Array.from_buffers(
                pa.int32(), rows, [used(4, bitmap) if epoch_nulls else None, used(3, 4 * rows)], epoch_nulls),
        }
        return pa.RecordBatch.from_arrays([build[c]() for c in self.columns], schema=self.schema)

    @staticmethod
    def _check_within(pos: np.ndarray, rec_end: np.ndarray, batch_of: np.ndarray, m: np.ndarray) -> None:
        bad = np.nonzero(pos > rec_end)[0]
        if len(bad):
            b = int(batch_of[bad[0]])
            raise CorruptRecordError(
                f"a record of the batch at offset {int(m[b, 0])} runs past its declared length", offset=int(m[b, 0]))

    @staticmethod
    def _headers(data: bytes, start: np.ndarray, count: np.ndarray, end: np.ndarray, n: int) -> pa.Array:
        """The slow path: headers parsed record by record (only records that have some)."""
        list_offsets = np.zeros(n + 1, np.int32)
        list_offsets[1:] = np.cumsum(np.maximum(count, 0))
        hkeys: list[str] = []
        hvalues: list[bytes | None] = []
        for i in np.nonzero(count)[0].tolist():
            pos = int(start[i])
            limit = int(end[i])
            for _ in range(int(count[i])):
                klen, pos = decode_varint(data, pos)
                if klen < 0 or pos + klen > limit:
                    raise CorruptRecordError(f"a record header runs past its record (buffer position {pos})")
                hkeys.append(data[pos:pos + klen].decode("utf-8", "replace"))
                pos += klen
                vlen, pos = decode_varint(data, pos)
                if vlen < 0:
                    hvalues.append(None)
                else:
                    if pos + vlen > limit:
                        raise CorruptRecordError(f"a record header runs past its record (buffer position {pos})")
                    hvalues.append(data[pos:pos + vlen])
                    pos += vlen
            if pos != limit:
                raise CorruptRecordError(f"a record's headers do not end where the record does (buffer position {pos})")
        items = pa.StructArray.from_arrays([pa.array(hkeys, pa.string()), pa.array(hvalues, pa.binary())],
                                           fields=list(HEADER_TYPE))
        return pa.ListArray.from_arrays(pa.array(list_offsets), items, type=pa.list_(HEADER_TYPE))

    def _assemble(self, keys: pa.Array | None, values: pa.Array | None, offsets: np.ndarray, timestamps: np.ndarray,
                  ts_type: np.ndarray, headers: pa.Array | None, epochs: np.ndarray, n: int) -> pa.RecordBatch:
        build = {
            "key": lambda: keys,
            "value": lambda: values,
            "topic": lambda: _repeated(self.topic, pa.string(), n),
            "partition": lambda: _repeated(self.partition, pa.int32(), n),
            "offset": lambda: pa.array(offsets, pa.int64()),
            "timestamp": lambda: pa.array(timestamps * 1000, pa.int64()).view(pa.timestamp("us", tz="UTC")),
            "timestampType": lambda: pa.array(ts_type, pa.int32()),
            "headers": lambda: headers,
            "leaderEpoch": lambda: (pa.array(epochs, pa.int32(), mask=epochs < 0) if (epochs < 0).any()
                                    else pa.array(epochs, pa.int32())),
        }
        return pa.RecordBatch.from_arrays([build[c]() for c in self.columns], schema=self.schema)

    # ------------------------------------------------------------------------------------------------------
    def _legacy(self, view: memoryview) -> pa.RecordBatch | None:
        """A v0/v1 entry (the slow path: legacy data is old and rare)."""
        batch = LegacyRecordBatch(view)
        batch.ensure_valid()
        recs = [r for r in batch.records() if self.from_offset <= r.offset < self.until_offset]
        if not recs:
            return None
        n = len(recs)
        ts_type = 1 if batch.magic == 1 and batch.attributes & 0x08 else 0
        timestamps = np.array([r.timestamp for r in recs], np.int64)
        ts = pa.array(timestamps * 1000, pa.int64(), mask=timestamps < 0).view(pa.timestamp("us", tz="UTC"))
        full = pa.RecordBatch.from_arrays([
            pa.array([r.key for r in recs], pa.binary()), pa.array([r.value for r in recs], pa.binary()),
            pa.repeat(pa.scalar(self.topic, pa.string()), n), pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            pa.array([r.offset for r in recs], pa.int64()), ts,
            pa.array([ts_type if batch.magic == 1 else -1] * n, pa.int32()), _empty_headers(n),
            pa.nulls(n, pa.int32()),
        ], schema=ARROW_SCHEMA)
        return full if self.schema is ARROW_SCHEMA else full.select(list(self.columns))


_REPEATED: dict[tuple[Any, pa.DataType], pa.Array] = {}
_REPEATED_KEPT = 64
_REPEATED_ROWS = CHUNK_RECORDS + 4096  # a chunk's rows: CHUNK_RECORDS and the last batch's


def _repeated(value: Any, kind: pa.DataType, n: int) -> pa.Array:
    """``n`` times ``value`` (None: the empty headers list): a slice of an array the process keeps for it. A column
    of one value (the topic, the partition, no headers) was made again for each chunk, ~1 MB with nine columns, in
    memory the default pool gives back to the OS between Spark tasks; a slice is free, and Arrow's IPC writer
    sends only the slice. The most recent ``_REPEATED_KEPT`` values are kept."""
    key = (value, kind)
    arr = _REPEATED.pop(key, None)
    if arr is None or len(arr) < n:
        size = max(n, _REPEATED_ROWS)
        if value is None:
            empty = pa.StructArray.from_arrays([pa.array([], pa.string()), pa.array([], pa.binary())],
                                               fields=list(HEADER_TYPE))
            arr = pa.ListArray.from_arrays(pa.array(np.zeros(size + 1, np.int32)), empty, type=kind)
        else:
            arr = pa.repeat(pa.scalar(value, kind), size)
    _REPEATED[key] = arr  # the most recently used last
    while len(_REPEATED) > _REPEATED_KEPT:
        del _REPEATED[next(iter(_REPEATED))]
    return arr if len(arr) == n else arr.slice(0, n)


def _empty_headers(n: int) -> pa.Array:
    return _repeated(None, pa.list_(HEADER_TYPE), n)


def batches_to_table(topic: str, partition: int, batches: list[Any]) -> pa.Table:
    """Convenience for tests and tools: whole batch buffers -> one table."""
    builder = ArrowBatchBuilder(topic, partition)
    out: list[pa.RecordBatch] = []
    for b in batches:
        out.extend(builder.add(b))
    out.extend(builder.flush())
    return pa.Table.from_batches(out, schema=ARROW_SCHEMA)


