"""Per-chunk transforms: zstd, then AES-256-GCM; undone in reverse, each step checked.

A stored chunk is ``zstd(plain)`` when compressed, then, when encrypted, ``nonce (12 bytes) || AES-256-GCM
ciphertext || tag (16 bytes)`` under the segment's data key with a fresh random nonce. The additional
authenticated data binds the chunk to its place (:func:`chunk_aad`): the segment id, the object (``log`` or an
index suffix), the chunk's number and its original length; so a flipped byte, a chunk swapped with another of
the same or another segment, a truncated object or a wrong key all fail the tag, and decoding raises
:class:`tiered.errors.RemoteChunkError` naming the object and the chunk.

Before any of that the crc32c of the stored bytes is checked against the manifest's (so damage is found, and
named as such, without a key), and a decompressed chunk must have exactly its recorded size.

:func:`batches_are_compressed` is the compression heuristic (``compression.heuristic.enabled``): a segment whose
first batch is already compressed by the producer is stored uncompressed.
"""

from __future__ import annotations

import os
import struct
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from local.checkpoint import kafka_uuid_to_str
from local.crc import crc32c
from tiered.errors import RemoteChunkError

if TYPE_CHECKING:
    from tiered.format.keyring import KeyProvider
    from tiered.format.manifest import Envelope, SegmentManifest
    from tiered.format.settings import FormatSettings

NONCE_BYTES = 12
TAG_BYTES = 16
DATA_KEY_BYTES = 32
LOG_OBJECT = "log"
_AAD_MAGIC = b"tiered-chunk-v1"


def chunk_aad(segment_id: uuid.UUID, obj: str, index: int, size: int) -> bytes:
    """The AAD of chunk ``index`` (original length ``size``) of object ``obj`` of segment ``segment_id``."""
    name = obj.encode("utf-8")
    return _AAD_MAGIC + segment_id.bytes + struct.pack(">H", len(name)) + name + struct.pack(">QI", index, size)


def new_data_key() -> bytes:
    return os.urandom(DATA_KEY_BYTES)


class ChunkTransform:
    """One step of a chunk's transformation; its :attr:`name` is what the manifest lists in ``transforms``. A
    transform keeps no state between chunks but per-thread (de)compressors: safe to share between threads."""

    name: str

    def encode(self, obj: str, index: int, size: int, data: bytes) -> bytes:
        """``data`` (the previous step's output for chunk ``index`` of ``obj``, whose original length is ``size``)
        transformed."""
        raise NotImplementedError

    def decode(self, obj: str, index: int, size: int, data: bytes) -> bytes:
        """:meth:`encode` undone; ValueError saying why when ``data`` is refused."""
        raise NotImplementedError


class Zstd(ChunkTransform):
    """zstd at ``level``; a decompressed chunk is never longer than its original length."""

    name = "zstd"

    def __init__(self, level: int) -> None:
        self.level = level
        self._local = threading.local()

    def encode(self, obj: str, index: int, size: int, data: bytes) -> bytes:
        c = getattr(self._local, "compressor", None)
        if c is None:
            c = self._local.compressor = zstandard.ZstdCompressor(level=self.level or 3)  # 0: the default
        return bytes(c.compress(data))

    def decode(self, obj: str, index: int, size: int, data: bytes) -> bytes:
        d = getattr(self._local, "decompressor", None)
        if d is None:
            d = self._local.decompressor = zstandard.ZstdDecompressor()
        try:
            return bytes(d.decompress(data, max_output_size=size))
        except zstandard.ZstdError as exc:
            raise ValueError(f"zstd cannot decompress it: {exc}") from None


class AesGcm(ChunkTransform):
    """AES-256-GCM under the segment's data key: a fresh random nonce in front, the tag behind, the chunk's place
    (:func:`chunk_aad`) authenticated with it."""

    name = "aes-256-gcm"

    def __init__(self, segment_id: uuid.UUID, data_key: bytes) -> None:
        if len(data_key) != DATA_KEY_BYTES:
            raise ValueError(f"an AES-256 data key has {DATA_KEY_BYTES} bytes, got {len(data_key)}")
        self.segment_id = segment_id
        self._aead = AESGCM(data_key)

    def encode(self, obj: str, index: int, size: int, data: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, data, chunk_aad(self.segment_id, obj, index, size))

    def decode(self, obj: str, index: int, size: int, data: bytes) -> bytes:
        if len(data) < NONCE_BYTES + TAG_BYTES:
            raise ValueError(f"{len(data)} bytes cannot hold a nonce and a tag")
        try:
            return self._aead.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], chunk_aad(self.segment_id, obj, index, size))
        except InvalidTag:
            raise ValueError("AES-GCM authentication failed (altered, moved from another position or segment, or "
                             "the data key is wrong)") from None


class ChunkCodec:
    """The transforms of one segment's chunks, in the order they apply on write (:class:`Zstd` at ``level`` when it
    is not None, then :class:`AesGcm` under ``data_key`` when it is not None), undone in reverse on read. Safe to
    share between threads."""

    def __init__(self, segment_id: uuid.UUID, *, level: int | None = None, data_key: bytes | None = None) -> None:
        self.segment_id = segment_id
        self.level = level
        steps: list[ChunkTransform] = []
        if level is not None:
            steps.append(Zstd(level))
        if data_key is not None:
            steps.append(AesGcm(segment_id, data_key))
        self.transforms: tuple[ChunkTransform, ...] = tuple(steps)

    @classmethod
    def writing(cls, segment_id: uuid.UUID, settings: FormatSettings, key_provider: KeyProvider | None, *,
                compress: bool) -> tuple[ChunkCodec, Envelope | None]:
        """The codec of a new segment under ``settings`` (zstd when ``compress``; with encryption, a fresh data key
        wrapped by ``key_provider``) and the envelope its manifest keeps (None when not encrypted)."""
        from tiered.format.manifest import Envelope

        level = settings.compression_level if compress else None
        if not settings.encryption:
            return cls(segment_id, level=level), None
        if key_provider is None:
            raise ValueError("encryption is on and no key provider wraps the data keys")
        data_key = new_data_key()
        key_id, algorithm, wrapped = key_provider.wrap(data_key)
        return cls(segment_id, level=level, data_key=data_key), Envelope(key_id, algorithm, wrapped)

    @classmethod
    def reading(cls, segment_id: uuid.UUID, manifest: SegmentManifest, data_key: bytes | None) -> ChunkCodec:
        """The codec that undoes the transforms ``manifest`` names, with its envelope's data key unwrapped."""
        return cls(segment_id, level=manifest.compression_level, data_key=data_key)

    @property
    def identity(self) -> bool:
        return not self.transforms

    def encode(self, obj: str, index: int, plain: bytes) -> bytes:
        data = plain
        for step in self.transforms:
            data = step.encode(obj, index, len(plain), data)
        return data

    def decode(self, obj: str, index: int, stored: bytes, size: int, crc: int, *, key: str) -> bytes:
        """The original bytes of a stored chunk, or RemoteChunkError naming object ``key`` and the chunk."""
        def fail(why: str) -> RemoteChunkError:
            where = f"chunk {index}" if obj == LOG_OBJECT else f"the {obj} index"
            sid = kafka_uuid_to_str(self.segment_id)  # as in the object's name
            return RemoteChunkError(f"{where} of remote object {key} (segment {sid}) is refused: {why}",
                                    key=key, chunk=index, segment_id=sid)

        actual = crc32c(stored)
        if actual != crc:
            raise fail(f"crc32c {actual:#010x} of its {len(stored)} stored bytes, the manifest says {crc:#010x}")
        data = stored
        for step in reversed(self.transforms):
            try:
                data = step.decode(obj, index, size, data)
            except ValueError as exc:
                raise fail(str(exc)) from None
        if len(data) != size:
            raise fail(f"it decodes to {len(data)} bytes, the manifest says {size}")
        return data


def batches_are_compressed(log_file: Path) -> bool:
    """Whether the first record batch of a ``.log`` file is compressed (its attributes' codec bits are not 0):
    the heuristic's view of the whole segment, as the leading plugin's. An empty file counts as not compressed."""
    with open(log_file, "rb") as f:
        head = f.read(23)
    if len(head) < 18:
        return False
    if head[16] >= 2:  # v2 batch: baseOffset 8, length 4, leaderEpoch 4, magic 1, crc 4, attributes int16
        return len(head) == 23 and (struct.unpack_from(">h", head, 21)[0] & 0x07) != 0
    return (head[17] & 0x07) != 0  # v0/v1 message: offset 8, size 4, crc 4, magic 1, attributes int8
