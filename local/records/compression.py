"""Compression codecs of record batches: gzip, snappy (xerial framing), lz4 (frame format), zstd.

Compression through ``cramjam``. The Java client frames snappy in xerial's stream format (magic
``\\x82SNAPPY\\x00``, version and compatible version ints, then ``length i32 | snappy block`` chunks); plain snappy
is read as well.

Decompression is a stream with a ceiling (:func:`stream_decompress`): it yields the output in chunks of at most
``chunk_size`` bytes and raises :class:`DecompressedSizeError` as soon as more than ``limit`` bytes come out, so a
small batch that inflates to gigabytes costs at most ``limit`` bytes of work and one chunk of memory. The streaming
APIs used: zlib's ``decompressobj(max_length=)`` (gzip), lz4's ``LZ4FrameDecompressor(max_length=)``, zstandard's
``stream_reader`` (with a walk of the frame's block headers, which zstandard does not check, to refuse a truncated
frame), and snappy's per-block declared length, checked before each block is inflated. Undecodable, truncated or
trailing bytes are a :class:`CorruptRecordError`. :meth:`CompressionType.decompress` gathers the stream, bounded by
``MAX_DECOMPRESSED_BATCH_BYTES`` unless told otherwise.
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Generator, Iterator

import cramjam
import lz4.frame
import zstandard

from local.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionTypeError

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic | version (1) | compatible version (1)
_XERIAL_BLOCK = 32 * 1024
_I32 = struct.Struct(">i")

MAX_DECOMPRESSED_BATCH_BYTES = 256 << 20
"""The most one batch may decompress to when it is decoded (appends use a lower bound, see local.validation)."""
DECOMPRESS_CHUNK_BYTES = 256 << 10
"""The largest piece :func:`stream_decompress` yields at once."""


class DecompressedSizeError(InvalidRecordError):
    """Compressed data that inflates to more than the bound its reader allows (a decompression bomb)."""


MAX_CODEC_ID = 4
"""The highest codec id in attributes bits 0-2 (zstd); 5-7 name no codec."""


class CompressionType(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def name_lower(self) -> str:
        return self.name.lower()

    @classmethod
    def from_id(cls, codec_id: int) -> CompressionType:
        try:
            return cls(codec_id)
        except ValueError:
            raise UnsupportedCompressionTypeError(
                f"unknown compression codec id {codec_id} (known: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)",
                codec=codec_id,
            ) from None

    @classmethod
    def from_name(cls, name: str | CompressionType | None) -> CompressionType:
        if isinstance(name, CompressionType):
            return name
        if name is None:
            return cls.NONE
        try:
            return cls[str(name).strip().upper()]
        except KeyError:
            raise UnsupportedCompressionTypeError(
                f"unknown compression type {name!r} (known: none, gzip, snappy, lz4, zstd)", codec=name
            ) from None

    def compress(self, data: bytes | bytearray | memoryview, level: int | None = None) -> bytes:
        if self is CompressionType.NONE:
            return bytes(data)
        if self is CompressionType.GZIP:
            return bytes(cramjam.gzip.compress(data, level))
        if self is CompressionType.SNAPPY:
            return _xerial_compress(data)
        if self is CompressionType.LZ4:
            return bytes(cramjam.lz4.compress(data, level))
        return bytes(cramjam.zstd.compress(data, level))

    def decompress(self, data: bytes | bytearray | memoryview, limit: int = MAX_DECOMPRESSED_BATCH_BYTES) -> bytes:
        """All of ``data`` decompressed; :class:`DecompressedSizeError` past ``limit`` bytes, CorruptRecordError if
        it cannot be decoded."""
        if self is CompressionType.NONE:
            return bytes(data)
        chunks = list(stream_decompress(self, data, limit))
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    out = bytearray(_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1))
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        out += _I32.pack(len(block))
        out += block
    return bytes(out)


# Streaming, bounded decompression ---------------------------------------------------------------------

def stream_decompress(
    codec: CompressionType, data: bytes | bytearray | memoryview, limit: int, chunk_size: int = DECOMPRESS_CHUNK_BYTES
) -> Iterator[bytes]:
    """Yield the decompressed bytes of ``data`` in chunks of at most ``chunk_size``; see the module docstring."""
    view = data if isinstance(data, memoryview) else memoryview(data)
    if codec is CompressionType.NONE:
        if len(view) > limit:
            raise _too_large(codec, limit)
        yield view.tobytes()
        return
    pieces: Generator[bytes, None, None] = {
        CompressionType.GZIP: _gzip_stream,
        CompressionType.SNAPPY: _snappy_stream,
        CompressionType.LZ4: _lz4_stream,
        CompressionType.ZSTD: _zstd_stream,
    }[codec](view, chunk_size, limit)
    total = 0
    try:
        for piece in pieces:
            total += len(piece)
            if total > limit:
                raise _too_large(codec, limit)
            if piece:
                yield piece
    except (zlib.error, RuntimeError, zstandard.ZstdError, cramjam.DecompressionError, ValueError, EOFError) as exc:
        # lz4 raises RuntimeError, zstandard ZstdError, zlib zlib.error: all are undecodable input here.
        raise CorruptRecordError(f"cannot decompress {codec.name_lower} data: {exc}", codec=codec.name_lower) from exc
    finally:
        pieces.close()


def _too_large(codec: CompressionType, limit: int) -> DecompressedSizeError:
    return DecompressedSizeError(
        f"{codec.name_lower} data decompresses to more than {limit} bytes", codec=codec.name_lower, limit=limit)


def _corrupt(codec: str, why: str) -> CorruptRecordError:
    return CorruptRecordError(f"cannot decompress {codec} data: {why}", codec=codec)


def _gzip_stream(view: memoryview, chunk_size: int, limit: int) -> Generator[bytes, None, None]:
    """RFC 1952 members, one after the other; bytes after a member that do not start another are ignored, as
    Java's GZIPInputStream (what Kafka reads gzip batches with) ignores them."""
    if not len(view):
        raise _corrupt("gzip", "no data")
    pending: bytes | memoryview = view
    while True:
        d = zlib.decompressobj(31)
        while True:
            out = d.decompress(pending, chunk_size)
            pending = d.unconsumed_tail
            if out:
                yield out
            if d.eof:
                break
            if not out and not pending:
                raise _corrupt("gzip", "the data ends inside a member")
        pending = d.unused_data
        if pending[:2] != b"\x1f\x8b":
            return


def _lz4_stream(view: memoryview, chunk_size: int, limit: int) -> Generator[bytes, None, None]:
    """LZ4 frames, one after the other."""
    if not len(view):
        raise _corrupt("lz4", "no data")
    pending: bytes | memoryview = view
    while True:
        d = lz4.frame.LZ4FrameDecompressor()
        while True:
            out = d.decompress(pending, max_length=chunk_size)
            pending = b""
            if out:
                yield out
            if d.eof:
                break
            if d.needs_input:
                raise _corrupt("lz4", "the data ends inside a frame")
        pending = d.unused_data
        if not pending:
            return


_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE_MASK = 0xFFFFFFF0
_ZSTD_SKIPPABLE_MAGIC = 0x184D2A50


def _zstd_frames_end(view: memoryview) -> None:
    """Walk the frames' headers and block headers: raise unless ``view`` is whole frames and nothing else."""
    n = len(view)
    pos = 0
    if not n:
        raise _corrupt("zstd", "no data")
    while pos < n:
        if n - pos < 5:
            raise _corrupt("zstd", f"truncated frame header at byte {pos}")
        magic = int.from_bytes(view[pos : pos + 4], "little")
        if magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE_MAGIC:
            if n - pos < 8:
                raise _corrupt("zstd", f"truncated skippable frame at byte {pos}")
            pos += 8 + int.from_bytes(view[pos + 4 : pos + 8], "little")
            continue
        if magic != _ZSTD_MAGIC:
            raise _corrupt("zstd", f"no frame magic at byte {pos}")
        descriptor = view[pos + 4]
        single_segment = descriptor >> 5 & 1
        pos += 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
        pos += (single_segment, 2, 4, 8)[descriptor >> 6]
        while True:
            if n - pos < 3:
                raise _corrupt("zstd", f"the data ends inside a frame (block header at byte {pos})")
            header = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
            block_type = header >> 1 & 3
            pos += 3 + (1 if block_type == 1 else header >> 3)
            if block_type == 3:
                raise _corrupt("zstd", "reserved block type")
            if header & 1:
                break
        if descriptor & 0x04:
            pos += 4  # content checksum
    if pos != n:
        raise _corrupt("zstd", "the data ends inside a frame")


def _zstd_stream(view: memoryview, chunk_size: int, limit: int) -> Generator[bytes, None, None]:
    _zstd_frames_end(view)
    reader = zstandard.ZstdDecompressor().stream_reader(view, read_across_frames=True, read_size=chunk_size)
    with reader:
        while True:
            out = reader.read(chunk_size)
            if not out:
                return
            yield out


def _snappy_stream(view: memoryview, chunk_size: int, limit: int) -> Generator[bytes, None, None]:
    """xerial-framed blocks, or one plain snappy block; each block's declared size is checked against what is left
    of ``limit`` before the block is inflated."""
    if bytes(view[:8]) != XERIAL_MAGIC:
        yield from _snappy_block(view, chunk_size, limit, limit)
        return
    if len(view) < _XERIAL_HEADER.size:
        raise _corrupt("snappy", "truncated xerial header")
    pos = _XERIAL_HEADER.size
    left = limit
    while pos < len(view):
        if pos + 4 > len(view):
            raise CorruptRecordError("truncated xerial snappy block length", position=pos)
        (length,) = _I32.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > len(view):
            raise CorruptRecordError(f"xerial snappy block of {length} bytes runs past the data", position=pos)
        for out in _snappy_block(view[pos : pos + length], chunk_size, left, limit):
            left -= len(out)
            yield out
        pos += length


def _snappy_block(block: memoryview, chunk_size: int, left: int, limit: int) -> Iterator[bytes]:
    declared = _snappy_declared_length(block)
    if declared > left:
        raise _too_large(CompressionType.SNAPPY, limit)
    out = bytes(cramjam.snappy.decompress_raw(block))
    if len(out) != declared:
        raise _corrupt("snappy", f"a block declares {declared} bytes but holds {len(out)}")
    if len(out) <= chunk_size:
        yield out
        return
    view = memoryview(out)
    for start in range(0, len(out), chunk_size):
        yield view[start : start + chunk_size].tobytes()


def _snappy_declared_length(block: memoryview) -> int:
    value = shift = 0
    for i in range(min(5, len(block))):
        b = block[i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value
        shift += 7
    raise _corrupt("snappy", "bad block length preamble")
