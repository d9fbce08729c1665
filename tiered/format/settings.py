"""The format's settings: ``rsm.config.chunk.size``, ``compression.*`` and ``encryption.*`` (how new segments are
stored, see ``docs/remote-format.md``), read and checked whatever store the segments go to."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tiered.options import Options

FORMAT_KEYS = ("chunk.size", "compression.enabled", "compression.heuristic.enabled", "compression.level",
               "encryption.enabled", "encryption.key.pair.id", "encryption.key.pairs", "encryption.key.provider.class")
KEY_PAIRS_PREFIX = "encryption.key.pairs."
KEY_PROVIDER_PREFIX = "encryption.key.provider."  # the settings of a key provider class (a KMS), prefix stripped
DEFAULT_CHUNK_SIZE = 4 * 1024 * 1024
MIN_CHUNK_SIZE = 1024
MAX_CHUNK_SIZE = 1024 * 1024 * 1024
_KEY_PAIR_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: key (``<prefix>*`` for a family) -> (default, valid values, description), for docs/configuration.md
FORMAT_DOCS: dict[str, tuple[str, str, str]] = {
    "chunk.size": ("4 MiB", "[1 KiB, 1 GiB]",
        "Bytes of the original segment per stored chunk (the unit of compression, encryption and "
        "ranged reads)."),
    "compression.enabled": ("false", "true, false",
        "zstd per chunk."),
    "compression.heuristic.enabled": ("false", "true, false",
        "Skip compression of a segment whose first batch is already compressed (needs "
        "`compression.enabled`)."),
    "compression.level": ("3", "[-7, 22]",
        "zstd level."),
    "encryption.enabled": ("false", "true, false",
        "AES-256-GCM per chunk under a random data key per segment, wrapped by the key pair "
        "`encryption.key.pair.id`."),
    "encryption.key.pair.id": ("none", "an id of `encryption.key.pairs`",
        "The key pair that wraps new segments' data keys (`tiered keys rotate` re-wraps old ones)."),
    "encryption.key.pairs": ("none", "comma-separated ids",
        "The key ring: ids of RSA key pairs, each with `encryption.key.pairs.<id>.public.key.file` "
        "and `.private.key.file` (PEM)."),
    "encryption.key.pairs.*": ("none", "PEM file paths",
        "`<id>.public.key.file` and `<id>.private.key.file` of each key pair of the ring."),
    "encryption.key.provider.class": ("none", "a dotted path",
        "A KeyProvider class (a KMS client) instead of the PEM key ring."),
    "encryption.key.provider.*": ("none", "per provider",
        "Settings passed to the key provider class, prefix stripped."),
}


@dataclass(frozen=True)
class KeyPairFiles:
    """The PEM files of one RSA key pair of the ring (``encryption.key.pairs.<id>.public.key.file`` and
    ``.private.key.file``) and the full names of those keys, for errors."""

    key_id: str
    public_key_file: Path
    private_key_file: Path
    public_key_config: str
    private_key_config: str


@dataclass(frozen=True)
class FormatSettings:
    """How new segments are stored (see ``docs/remote-format.md``): ``transformed`` is False for the plain layout."""

    chunk_size: int = DEFAULT_CHUNK_SIZE
    compression: bool = False
    compression_heuristic: bool = False
    compression_level: int = 3
    encryption: bool = False
    key_pair_id: str | None = None
    key_pairs: Mapping[str, KeyPairFiles] = field(default_factory=dict)
    key_provider_class: str | None = None
    key_provider_config: Mapping[str, str] = field(default_factory=dict)

    @property
    def transformed(self) -> bool:
        return self.compression or self.encryption


def format_settings(o: Options) -> FormatSettings:
    """The ``rsm.config.chunk.size``/``compression.*``/``encryption.*`` settings, each checked: a bad value, an
    encryption without a key pair id, an id not in ``encryption.key.pairs``, or a key pair without both of its PEM
    files raises RemoteConfigError naming the key."""
    compression = o.boolean("compression.enabled", False)
    heuristic = o.boolean("compression.heuristic.enabled", False)
    if heuristic and not compression:
        raise o.bad("compression.heuristic.enabled", "true", f"needs {o.prefix}compression.enabled=true")
    ids_text = o.string("encryption.key.pairs") or ""
    ids = [i.strip() for i in ids_text.split(",") if i.strip()]
    pairs: dict[str, KeyPairFiles] = {}
    for key_id in ids:
        if not _KEY_PAIR_ID.match(key_id):
            raise o.bad("encryption.key.pairs", ids_text, f"key pair id {key_id!r}: expected 1..64 characters out of "
                        "A-Z, a-z, 0-9, '_' and '-'")
        if key_id in pairs:
            raise o.bad("encryption.key.pairs", ids_text, f"key pair id {key_id!r} is listed twice")
        public = f"{KEY_PAIRS_PREFIX}{key_id}.public.key.file"
        private = f"{KEY_PAIRS_PREFIX}{key_id}.private.key.file"
        files = [o.string(k, required=f"the PEM file of key pair {key_id}'s {k.split('.')[-3]} key") for k in (public, private)]
        pairs[key_id] = KeyPairFiles(key_id, Path(str(files[0])), Path(str(files[1])), o.prefix + public, o.prefix + private)
    stray = sorted(k for k in o.props if k.startswith(KEY_PAIRS_PREFIX) and k[len(KEY_PAIRS_PREFIX):].split(".")[0] not in pairs)
    if stray:
        raise o.bad(stray[0], o.props[stray[0]], f"key pair {stray[0][len(KEY_PAIRS_PREFIX):].split('.')[0]!r} is not "
                    f"listed in {o.prefix}encryption.key.pairs ({ids_text or 'empty'})")
    encryption = o.boolean("encryption.enabled", False)
    key_pair_id = o.string("encryption.key.pair.id")
    provider = o.string("encryption.key.provider.class")
    provider_config = {k[len(KEY_PROVIDER_PREFIX):]: str(v) for k, v in o.props.items()
                       if k.startswith(KEY_PROVIDER_PREFIX) and k != "encryption.key.provider.class" and v is not None}
    if provider is not None:
        if pairs:
            raise o.bad("encryption.key.provider.class", provider, f"set either it or {o.prefix}encryption.key.pairs, "
                        "not both")
        chunk_size = o.integer("chunk.size", DEFAULT_CHUNK_SIZE, MIN_CHUNK_SIZE, MAX_CHUNK_SIZE)
        level = o.integer("compression.level", 3, -7, 22)
        assert chunk_size is not None and level is not None
        return FormatSettings(chunk_size, compression, heuristic, level, encryption, key_pair_id, {}, provider,
                              provider_config)
    if encryption and key_pair_id is None:
        raise o.missing("encryption.key.pair.id", "the id of the key pair that wraps new segments' data keys "
                        "(rsm.config.encryption.enabled=true)")
    if key_pair_id is not None and key_pair_id not in pairs:
        raise o.bad("encryption.key.pair.id", key_pair_id, f"not one of {o.prefix}encryption.key.pairs "
                    f"({', '.join(pairs) or 'none configured'})")
    chunk_size = o.integer("chunk.size", DEFAULT_CHUNK_SIZE, MIN_CHUNK_SIZE, MAX_CHUNK_SIZE)
    level = o.integer("compression.level", 3, -7, 22)
    assert chunk_size is not None and level is not None
    return FormatSettings(chunk_size, compression, heuristic, level, encryption, key_pair_id, pairs)
