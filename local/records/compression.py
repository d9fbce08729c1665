"""Compression codecs of record batches: gzip, snappy (xerial framing), lz4 (frame format), zstd.

All through ``cramjam``. The Java client frames snappy in xerial's stream format (magic ``\\x82SNAPPY\\x00``,
version and compatible version ints, then ``length i32 | snappy block`` chunks); plain snappy is read as well.
"""

from __future__ import annotations

import enum
import struct

import cramjam

from local.errors import CorruptRecordError, UnsupportedCompressionTypeError

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic | version (1) | compatible version (1)
_XERIAL_BLOCK = 32 * 1024
_I32 = struct.Struct(">i")


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

    def decompress(self, data: bytes | bytearray | memoryview) -> bytes:
        try:
            if self is CompressionType.NONE:
                return bytes(data)
            if self is CompressionType.GZIP:
                return bytes(cramjam.gzip.decompress(data))
            if self is CompressionType.SNAPPY:
                return _snappy_decompress(data)
            if self is CompressionType.LZ4:
                return bytes(cramjam.lz4.decompress(data))
            return bytes(cramjam.zstd.decompress(data))
        except cramjam.DecompressionError as exc:
            raise CorruptRecordError(f"cannot decompress {self.name_lower} data: {exc}", codec=self.name_lower) from exc


def _xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    out = bytearray(_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1))
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        out += _I32.pack(len(block))
        out += block
    return bytes(out)


def _snappy_decompress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    pos = _XERIAL_HEADER.size
    out = bytearray()
    while pos < len(view):
        if pos + 4 > len(view):
            raise CorruptRecordError("truncated xerial snappy block length", position=pos)
        (length,) = _I32.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > len(view):
            raise CorruptRecordError(f"xerial snappy block of {length} bytes runs past the data", position=pos)
        out += cramjam.snappy.decompress_raw(view[pos : pos + length])
        pos += length
    return bytes(out)
