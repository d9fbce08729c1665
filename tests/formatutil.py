"""Helpers for the remote-format tests: RSA key pairs on disk, segment files, and configs for each combination."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from tiered import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

T0 = 1_700_000_000_000
COMBOS = {"plain": {}, "zstd": {"compression.enabled": "true"}, "aes": {"encryption.enabled": "true"},
          "zstd+aes": {"compression.enabled": "true", "encryption.enabled": "true"}}


@dataclass(frozen=True)
class KeyPairPaths:
    key_id: str
    public: Path
    private: Path


def write_key_pair(directory: Path, key_id: str, bits: int = 2048) -> KeyPairPaths:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    directory.mkdir(parents=True, exist_ok=True)
    public, private = directory / f"{key_id}-public.pem", directory / f"{key_id}-private.pem"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return KeyPairPaths(key_id, public, private)


def ring_config(pairs: list[KeyPairPaths], active: str | None) -> dict[str, str]:
    out = {"encryption.key.pairs": ",".join(p.key_id for p in pairs)}
    if active is not None:
        out["encryption.key.pair.id"] = active
    for p in pairs:
        out[f"encryption.key.pairs.{p.key_id}.public.key.file"] = str(p.public)
        out[f"encryption.key.pairs.{p.key_id}.private.key.file"] = str(p.private)
    return out


def combo_config(combo: str, pairs: list[KeyPairPaths], chunk_size: int) -> dict[str, str]:
    out = {"chunk.size": str(chunk_size), **COMBOS[combo]}
    if "encryption.enabled" in out:
        out.update(ring_config(pairs, pairs[0].key_id))
    return out


def metadata(start: int = 100, end: int = 199, size: int = 1000) -> RemoteLogSegmentMetadata:
    tip = TopicIdPartition(uuid.uuid4(), "fmt", 0)
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), start, end, T0, 0, T0, size, {0: start})


def segment_files(directory: Path, log: bytes, *, txn: bool = True) -> LogSegmentData:
    """A segment's files with ``log`` as its ``.log`` and random bytes as its indexes."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {s: directory / f"00000000000000000100{s}" for s in (".log", ".index", ".timeindex", ".txnindex", ".snapshot")}
    paths[".log"].write_bytes(log)
    for suffix, size in ((".index", 4096), (".timeindex", 3000), (".txnindex", 340), (".snapshot", 123)):
        paths[suffix].write_bytes(os.urandom(size))
    return LogSegmentData(paths[".log"], paths[".index"], paths[".timeindex"], paths[".txnindex"] if txn else None,
                          paths[".snapshot"], b"0\n1\n0 100\n")


def text_like(size: int) -> bytes:
    """Compressible bytes (repeated words with counters), ``size`` long."""
    out = bytearray()
    i = 0
    while len(out) < size:
        out += b"order %08d customer=%05d status=shipped amount=%d.%02d\n" % (i, i % 9973, i % 1000, i % 100)
        i += 1
    return bytes(out[:size])


class ToyKms:
    """A key provider standing in for a KMS: AES key wrap (RFC 3394) under named 256-bit keys from its settings,
    ``keys=ID:HEX,ID:HEX`` and ``active=ID`` (``rsm.config.encryption.key.provider.keys`` / ``.active``)."""

    ALGORITHM = "AES-KW-256"

    def __init__(self) -> None:
        self.keys: dict[str, bytes] = {}
        self.active_key_id: str | None = None

    def configure(self, props: dict[str, str]) -> None:
        for item in props.get("keys", "").split(","):
            if item:
                kid, _, hex_key = item.partition(":")
                self.keys[kid] = bytes.fromhex(hex_key)
        self.active_key_id = props.get("active")

    def wrap(self, data_key: bytes, key_id: str | None = None) -> tuple[str, str, bytes]:
        from cryptography.hazmat.primitives.keywrap import aes_key_wrap

        kid = key_id or self.active_key_id
        assert kid is not None
        return kid, self.ALGORITHM, aes_key_wrap(self._key(kid), data_key)

    def unwrap(self, key_id: str, algorithm: str, wrapped: bytes) -> bytes:
        from cryptography.hazmat.primitives.keywrap import aes_key_unwrap

        return aes_key_unwrap(self._key(key_id), wrapped)

    def _key(self, kid: str) -> bytes:
        from tiered.errors import EncryptionKeyNotFoundError

        if kid not in self.keys:
            raise EncryptionKeyNotFoundError(f"the toy KMS has no key {kid!r}", key_id=kid)
        return self.keys[kid]
