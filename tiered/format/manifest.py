"""The segment manifest: a small versioned JSON document describing how one remote segment is stored.

Version 1 (documented field by field in ``docs/remote-format.md``)::

    {"format": "tiered-segment-manifest", "version": 1, "segment_id": "<22-char Kafka uuid>",
     "log": {"size": N, "chunk_size": C, "stored_offsets": "<base64 of n+1 big-endian uint64>",
             "crc32c": "<base64 of n big-endian uint32>"},
     "compression": {"codec": "zstd", "level": 3} | null,
     "encryption": {"cipher": "AES-256-GCM", "key_id": "k1", "key_wrap": "RSA-OAEP-SHA512",
                    "wrapped_key": "<base64>", "nonce": "random-96", "aad": "tiered-chunk-v1"} | null,
     "indexes": {".index": {"offset": 0, "stored_size": 123, "size": 80, "crc32c": 305419896}, ...}}

Chunk ``i`` of the original ``.log`` covers bytes ``[i*C, min((i+1)*C, N))``; its stored form is bytes
``[stored_offsets[i], stored_offsets[i+1])`` of the stored ``.log`` object, whose crc32c is ``crc32c[i]``. So a
byte range of the original maps to a byte range of the object without reading anything else. A reader refuses a
version it does not know.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tiered.errors import RemoteStorageError

if TYPE_CHECKING:
    from tiered.store import ObjectStore

MANIFEST_SUFFIX = ".rsm-manifest"  # the manifest object of a segment: <segment key><suffix>
PACKED_INDEXES_SUFFIX = ".indexes"  # its packed indexes
FORMAT = "tiered-segment-manifest"
VERSION = 1
CIPHER = "AES-256-GCM"
NONCE_SCHEME = "random-96"  # a fresh random 96-bit nonce per chunk, stored in front of its ciphertext
AAD_SCHEME = "tiered-chunk-v1"  # see tiered.format.transforms.chunk_aad


@dataclass(frozen=True)
class Envelope:
    """The segment's data key, wrapped by key pair ``key_id`` of the ring with ``key_wrap``."""

    key_id: str
    key_wrap: str
    wrapped_key: bytes
    cipher: str = CIPHER
    nonce: str = NONCE_SCHEME
    aad: str = AAD_SCHEME

    def to_json(self) -> dict[str, Any]:
        return {"cipher": self.cipher, "key_id": self.key_id, "key_wrap": self.key_wrap,
                "wrapped_key": base64.b64encode(self.wrapped_key).decode("ascii"), "nonce": self.nonce, "aad": self.aad}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Envelope:
        env = cls(str(d["key_id"]), str(d["key_wrap"]), base64.b64decode(d["wrapped_key"], validate=True),
                  str(d["cipher"]), str(d["nonce"]), str(d["aad"]))
        if (env.cipher, env.nonce, env.aad) != (CIPHER, NONCE_SCHEME, AAD_SCHEME):
            raise ValueError(f"unknown encryption scheme {env.cipher}/{env.nonce}/{env.aad}")
        return env


@dataclass(frozen=True)
class IndexEntry:
    """One index packed in the ``.indexes`` object: its stored bytes ``[offset, offset+stored_size)``, its original
    size and the crc32c of its stored bytes."""

    offset: int
    stored_size: int
    size: int
    crc32c: int

    def to_json(self) -> dict[str, int]:
        return {"offset": self.offset, "stored_size": self.stored_size, "size": self.size, "crc32c": self.crc32c}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> IndexEntry:
        return cls(int(d["offset"]), int(d["stored_size"]), int(d["size"]), int(d["crc32c"]))


#: The largest byte offset of a stored object (a signed 64-bit file offset, as os.pread and HTTP ranges take).
MAX_STORED_OFFSET = 2**63 - 1


@dataclass(frozen=True)
class SegmentManifest:
    segment_id: str
    size: int
    chunk_size: int
    stored_offsets: tuple[int, ...]
    crcs: tuple[int, ...]
    compression_level: int | None = None  # None: not compressed
    envelope: Envelope | None = None  # None: not encrypted
    indexes: Mapping[str, IndexEntry] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.chunk_size < 1 or self.size < 0:
            raise ValueError(f"invalid chunk size {self.chunk_size} or size {self.size}")
        n = self.chunk_count
        if len(self.stored_offsets) != n + 1 or len(self.crcs) != n:
            raise ValueError(f"{n} chunk(s) need {n + 1} stored offsets and {n} crcs, got {len(self.stored_offsets)} "
                             f"and {len(self.crcs)}")
        if self.stored_offsets[0] != 0 or any(b < a for a, b in zip(self.stored_offsets, self.stored_offsets[1:])):
            raise ValueError("stored offsets must start at 0 and never decrease")
        if self.stored_offsets[-1] > MAX_STORED_OFFSET:
            raise ValueError(f"stored offset {self.stored_offsets[-1]} is past the largest object offset "
                             f"({MAX_STORED_OFFSET})")
        for suffix, entry in self.indexes.items():
            if min(entry.offset, entry.stored_size, entry.size) < 0 or \
                    entry.offset + entry.stored_size > MAX_STORED_OFFSET:
                raise ValueError(f"index {suffix}: stored bytes [{entry.offset}, {entry.offset + entry.stored_size}) "
                                 "out of range")

    @property
    def chunk_count(self) -> int:
        return -(-self.size // self.chunk_size)

    @property
    def stored_size(self) -> int:
        return self.stored_offsets[-1]

    @property
    def transforms(self) -> list[str]:
        """The transforms in the order they are applied on write (undone in reverse on read)."""
        return (["zstd"] if self.compression_level is not None else []) + (["aes-256-gcm"] if self.envelope else [])

    def chunk_size_of(self, index: int) -> int:
        return min(self.chunk_size, self.size - index * self.chunk_size)

    def chunks_of(self, start: int, end_inclusive: int) -> range:
        """The chunks holding original bytes ``[start, end_inclusive]`` (both within the segment)."""
        return range(start // self.chunk_size, end_inclusive // self.chunk_size + 1)

    def with_envelope(self, envelope: Envelope) -> SegmentManifest:
        return SegmentManifest(self.segment_id, self.size, self.chunk_size, self.stored_offsets, self.crcs,
                               self.compression_level, envelope, self.indexes)

    # The codec -----------------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        n = self.chunk_count
        return {
            "format": FORMAT,
            "version": VERSION,
            "segment_id": self.segment_id,
            "log": {"size": self.size, "chunk_size": self.chunk_size,
                    "stored_offsets": _b64(struct.pack(f">{n + 1}Q", *self.stored_offsets)),
                    "crc32c": _b64(struct.pack(f">{n}I", *self.crcs))},
            "transforms": self.transforms,
            "compression": None if self.compression_level is None else {"codec": "zstd", "level": self.compression_level},
            "encryption": None if self.envelope is None else self.envelope.to_json(),
            "indexes": {suffix: entry.to_json() for suffix, entry in self.indexes.items()},
        }

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True).encode("utf-8")

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SegmentManifest:
        if d.get("format") != FORMAT:
            raise ValueError(f"not a segment manifest (format {d.get('format')!r})")
        if d.get("version") != VERSION:
            raise ValueError(f"segment manifest version {d.get('version')!r} is not supported (this reader knows "
                             f"version {VERSION})")
        log = d["log"]
        offsets = base64.b64decode(log["stored_offsets"], validate=True)
        crcs = base64.b64decode(log["crc32c"], validate=True)
        if len(offsets) % 8 or len(crcs) % 4:
            raise ValueError("stored offsets or crcs are not whole 64/32-bit values")
        compression = d.get("compression")
        if compression is not None and compression.get("codec") != "zstd":
            raise ValueError(f"unknown compression codec {compression.get('codec')!r}")
        encryption = d.get("encryption")
        return cls(
            str(d["segment_id"]), int(log["size"]), int(log["chunk_size"]),
            struct.unpack(f">{len(offsets) // 8}Q", offsets), struct.unpack(f">{len(crcs) // 4}I", crcs),
            None if compression is None else int(compression["level"]),
            None if encryption is None else Envelope.from_json(encryption),
            {str(k): IndexEntry.from_json(v) for k, v in d.get("indexes", {}).items()},
        )

    @classmethod
    def decode(cls, data: bytes) -> SegmentManifest:
        """The manifest in ``data``; ValueError saying what is wrong when it is not a valid one."""
        try:
            return cls.from_json(json.loads(data))
        except (KeyError, TypeError, AttributeError, UnicodeDecodeError, struct.error) as exc:
            raise ValueError(f"malformed segment manifest: {type(exc).__name__}: {exc}") from exc


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def read_manifest(store: ObjectStore, key: str, segment_id: str) -> SegmentManifest | None:
    """The manifest object ``key`` of segment ``segment_id`` (Kafka's base64 form), None when there is none (a
    segment in the plain layout); RemoteStorageError when it cannot be read or describes another segment."""
    try:
        raw = store.get(key)
    except FileNotFoundError:  # ObjectNotFoundError, or a store's own "no such file"
        return None
    try:
        manifest = SegmentManifest.decode(raw)
    except ValueError as exc:
        raise RemoteStorageError(f"segment manifest {key} cannot be read: {exc}", key=key) from exc
    if manifest.segment_id != segment_id:
        raise RemoteStorageError(f"segment manifest {key} describes segment {manifest.segment_id}, not "
                                 f"{segment_id}: refused", key=key)
    return manifest
