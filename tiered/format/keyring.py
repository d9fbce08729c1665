"""Key rings: what wraps and unwraps the segments' data keys.

:class:`KeyProvider` is the interface the remote tier uses, so a KMS can stand behind it: ``wrap`` a fresh data
key under a named key-encryption key (the active one by default), ``unwrap`` one given the id it was wrapped
under. :class:`RsaKeyRing` is the leading plugin's scheme: RSA key pairs read from PEM files
(``rsm.config.encryption.key.pairs.<id>.public.key.file`` / ``.private.key.file``), the data key wrapped with
RSA-OAEP with SHA-512 and MGF1-SHA-512 (the plugin uses SHA3-512, which the ``cryptography`` package does not offer
for OAEP; the manifest names the wrap algorithm, ``RSA-OAEP-SHA512``, so another one can be added beside it). A key
id the ring does not hold is :class:`tiered.errors.EncryptionKeyNotFoundError` naming it.

Another provider (a KMS client) is named by ``rsm.config.encryption.key.provider.class`` (a dotted path to a class
with a no-argument constructor, the three members of :class:`KeyProvider` and optionally ``configure(props)``,
which receives the ``rsm.config.encryption.key.provider.*`` settings with that prefix stripped); new segments are
then wrapped under its ``active_key_id`` unless ``encryption.key.pair.id`` names another of its keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tiered.errors import EncryptionKeyNotFoundError, RemoteConfigError, RemoteStorageError
from tiered.format.settings import FormatSettings

RSA_OAEP = "RSA-OAEP-SHA512"


@runtime_checkable
class KeyProvider(Protocol):
    """Wraps and unwraps data keys under named key-encryption keys."""

    @property
    def active_key_id(self) -> str | None:
        """The id new segments' data keys are wrapped under (None: this provider cannot wrap)."""

    def wrap(self, data_key: bytes, key_id: str | None = None) -> tuple[str, str, bytes]:
        """``(key_id, algorithm, wrapped key)``: ``data_key`` wrapped under ``key_id`` (the active key when None)."""

    def unwrap(self, key_id: str, algorithm: str, wrapped: bytes) -> bytes:
        """The data key ``wrapped`` under ``key_id`` with ``algorithm``; EncryptionKeyNotFoundError when the
        provider has no such key."""


@dataclass(frozen=True)
class RsaKeyPair:
    public: rsa.RSAPublicKey
    private: rsa.RSAPrivateKey


def _oaep() -> padding.OAEP:
    return padding.OAEP(mgf=padding.MGF1(hashes.SHA512()), algorithm=hashes.SHA512(), label=None)


class RsaKeyRing:
    """RSA-OAEP key pairs by id (see the module docstring)."""

    def __init__(self, pairs: Mapping[str, RsaKeyPair], active_key_id: str | None = None) -> None:
        if active_key_id is not None and active_key_id not in pairs:
            raise ValueError(f"active key pair {active_key_id!r} is not in the ring ({', '.join(pairs)})")
        self.pairs = dict(pairs)
        self._active = active_key_id

    @property
    def active_key_id(self) -> str | None:
        return self._active

    @classmethod
    def from_settings(cls, settings: FormatSettings) -> RsaKeyRing | None:
        """The ring of ``rsm.config.encryption.key.pairs`` (None when there is none); a PEM file that cannot be
        read or holds no RSA key of the right kind is a RemoteConfigError naming its configuration key."""
        if not settings.key_pairs:
            return None
        pairs = {}
        for key_id, files in settings.key_pairs.items():
            public = _load(files.public_key_file, files.public_key_config, private=False)
            private = _load(files.private_key_file, files.private_key_config, private=True)
            assert isinstance(public, rsa.RSAPublicKey) and isinstance(private, rsa.RSAPrivateKey)
            if public.public_numbers() != private.public_key().public_numbers():
                raise RemoteConfigError(f"Invalid value for configuration {files.public_key_config}: the public key "
                                        f"of key pair {key_id} does not belong to its private key "
                                        f"({files.private_key_config})", key=files.public_key_config)
            pairs[key_id] = RsaKeyPair(public, private)
        return cls(pairs, settings.key_pair_id)

    def wrap(self, data_key: bytes, key_id: str | None = None) -> tuple[str, str, bytes]:
        kid = key_id or self._active
        if kid is None:
            raise RemoteStorageError("no active key pair to wrap a data key: set rsm.config.encryption.key.pair.id")
        return kid, RSA_OAEP, self._pair(kid, "wrap data keys under it").public.encrypt(data_key, _oaep())

    def unwrap(self, key_id: str, algorithm: str, wrapped: bytes) -> bytes:
        if algorithm != RSA_OAEP:
            raise RemoteStorageError(f"data key wrapped with {algorithm!r}: this key ring unwraps {RSA_OAEP} only")
        try:
            return self._pair(key_id, "read segments wrapped under it").private.decrypt(wrapped, _oaep())
        except ValueError:
            raise RemoteStorageError(f"the data key wrapped under key pair {key_id!r} does not unwrap with it "
                                     "(altered, or a different key under the same id)", key_id=key_id) from None

    def _pair(self, key_id: str, purpose: str) -> RsaKeyPair:
        pair = self.pairs.get(key_id)
        if pair is None:
            raise EncryptionKeyNotFoundError(
                f"key pair {key_id!r} is not in the key ring (rsm.config.encryption.key.pairs: "
                f"{', '.join(self.pairs) or 'none'}): add its PEM files to {purpose}", key_id=key_id)
        return pair


class NoKeyRing:
    """The provider when no key pair is configured: every unwrap names the missing key id."""

    active_key_id = None

    def wrap(self, data_key: bytes, key_id: str | None = None) -> tuple[str, str, bytes]:
        raise RemoteStorageError("no key ring configured: set rsm.config.encryption.key.pairs")

    def unwrap(self, key_id: str, algorithm: str, wrapped: bytes) -> bytes:
        raise EncryptionKeyNotFoundError(f"key pair {key_id!r} is needed to read this segment but no key ring is "
                                         "configured (rsm.config.encryption.key.pairs)", key_id=key_id)


def load_key_provider(settings: FormatSettings, prefix: str = "rsm.config.") -> KeyProvider:
    """The provider class of ``encryption.key.provider.class``, made and configured; a RemoteConfigError naming the
    key when it cannot be loaded, is not a KeyProvider, or has no key to wrap new segments under."""
    import importlib

    key = f"{prefix}encryption.key.provider.class"
    path = str(settings.key_provider_class)
    module_name, _, attr = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr) if module_name else None
    except (ImportError, AttributeError) as exc:
        raise RemoteConfigError(f"Invalid value {path} for configuration {key}: cannot load it: {exc}", key=key) from None
    if cls is None:
        raise RemoteConfigError(f"Invalid value {path} for configuration {key}: expected a dotted path "
                                "(package.module.Class)", key=key)
    try:
        provider = cls()
        configure = getattr(provider, "configure", None)
        if callable(configure):
            configure(dict(settings.key_provider_config))
    except (TypeError, ValueError) as exc:
        raise RemoteConfigError(f"Invalid value {path} for configuration {key}: cannot make and configure it: "
                                f"{exc}", key=key) from None
    if not isinstance(provider, KeyProvider):
        raise RemoteConfigError(f"Invalid value {path} for configuration {key}: not a key provider (it needs "
                                "active_key_id, wrap and unwrap)", key=key)
    if settings.key_pair_id is not None:
        provider = _Pinned(provider, settings.key_pair_id)
    if settings.encryption and provider.active_key_id is None:
        raise RemoteConfigError(f"Invalid value {path} for configuration {key}: it has no active key to wrap new "
                                f"segments' data keys under (set {prefix}encryption.key.pair.id)", key=key)
    return provider


class _Pinned:
    """A provider whose active key is the one ``encryption.key.pair.id`` names."""

    def __init__(self, inner: KeyProvider, key_id: str) -> None:
        self.inner, self.active_key_id = inner, key_id

    def wrap(self, data_key: bytes, key_id: str | None = None) -> tuple[str, str, bytes]:
        return self.inner.wrap(data_key, key_id or self.active_key_id)

    def unwrap(self, key_id: str, algorithm: str, wrapped: bytes) -> bytes:
        return self.inner.unwrap(key_id, algorithm, wrapped)


def _load(path: object, config_key: str, *, private: bool) -> object:
    from pathlib import Path

    file = Path(str(path))
    try:
        pem = file.read_bytes()
    except OSError as exc:
        raise RemoteConfigError(f"Invalid value {'[hidden]' if private else file} for configuration {config_key}: "
                                f"cannot read the PEM file: {exc.strerror or exc}", key=config_key) from None
    try:
        key = (serialization.load_pem_private_key(pem, password=None) if private
               else serialization.load_pem_public_key(pem))
    except (ValueError, TypeError) as exc:
        raise RemoteConfigError(f"Invalid value {'[hidden]' if private else file} for configuration {config_key}: "
                                f"not a PEM {'private' if private else 'public'} key: {exc}", key=config_key) from None
    wanted = rsa.RSAPrivateKey if private else rsa.RSAPublicKey
    if not isinstance(key, wanted):
        raise RemoteConfigError(f"Invalid value {'[hidden]' if private else file} for configuration {config_key}: "
                                f"an RSA key is needed, the file holds a {type(key).__name__}", key=config_key)
    return key
