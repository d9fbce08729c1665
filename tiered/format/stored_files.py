"""Reading stored segments outside a plugin (``tiered dump``): a manifest as items, and a stored ``.log`` or
``.indexes`` file decoded back to Kafka's files through the manifest beside it.

A local-directory remote tier keeps ``<segment>.log``, ``<segment>.indexes`` and ``<segment>.rsm-manifest`` side
by side; :func:`decode_beside` writes the original files (chunk by chunk: memory stays a few chunks) into a
directory, named as Kafka names them, so they can be dumped as local files are. Encrypted segments need a
:class:`~tiered.format.keyring.KeyProvider` (``tiered dump --config`` with the ring's ``rsm.config.encryption.*``).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from tiered import layout
from tiered.format.keyring import KeyProvider, NoKeyRing
from tiered.format.manifest import SegmentManifest
from tiered.format.segment import ChunkRangeReader
from tiered.format.transforms import ChunkCodec

MANIFEST_SUFFIX = ".rsm-manifest"
PACKED_SUFFIX = ".indexes"


def manifest_items(m: SegmentManifest) -> list[dict[str, Any]]:
    """The manifest as dump items: a summary, one per packed index, one per chunk."""
    env = m.envelope
    items: list[dict[str, Any]] = [{
        "segment_id": m.segment_id, "size": m.size, "chunk_size": m.chunk_size, "chunks": m.chunk_count,
        "stored_size": m.stored_size, "transforms": ",".join(m.transforms) or "none",
        "compression_level": m.compression_level, "key_id": env.key_id if env else None,
        "key_wrap": env.key_wrap if env else None,
    }]
    for suffix, e in m.indexes.items():
        items.append({"index": suffix, "stored_position": e.offset, "stored_size": e.stored_size, "size": e.size,
                      "crc32c": f"{e.crc32c:#010x}"})
    for i in range(m.chunk_count):
        items.append({"chunk": i, "position": i * m.chunk_size, "size": m.chunk_size_of(i),
                      "stored_position": m.stored_offsets[i], "stored_size": m.stored_offsets[i + 1] - m.stored_offsets[i],
                      "crc32c": f"{m.crcs[i]:#010x}"})
    return items


def manifest_beside(stored: Path) -> Path | None:
    """The manifest of a stored ``.log``/``.indexes`` file, when there is one beside it."""
    for suffix in (layout.LOG_SUFFIX, PACKED_SUFFIX):
        if stored.name.endswith(suffix):
            candidate = stored.with_name(stored.name[: -len(suffix)] + MANIFEST_SUFFIX)
            return candidate if candidate.is_file() else None
    return None


def _codec(m: SegmentManifest, provider: KeyProvider | None) -> ChunkCodec:
    data_key = None
    if m.envelope is not None:
        env = m.envelope
        data_key = (provider or NoKeyRing()).unwrap(env.key_id, env.key_wrap, env.wrapped_key)
    return ChunkCodec(layout.parse_kafka_uuid(m.segment_id), level=m.compression_level, data_key=data_key)


def decode_beside(stored: Path, manifest_path: Path, out_dir: Path, provider: KeyProvider | None) -> list[Path]:
    """Kafka's files decoded from ``stored`` (a ``.log`` or ``.indexes`` object) into ``out_dir``, named
    ``<base offset>.<suffix>``; raises TieredStorageError (a bad chunk, a missing key) or ValueError (a bad
    manifest)."""
    m = SegmentManifest.decode(manifest_path.read_bytes())
    codec = _codec(m, provider)
    base = stored.name.split("-", 1)[0]
    if stored.name.endswith(layout.LOG_SUFFIX):
        target = out_dir / f"{base}{layout.LOG_SUFFIX}"
        with open(stored, "rb") as src, open(target, "wb") as out:
            def opener(s: int, e: int) -> io.BufferedReader:
                src.seek(s)
                return io.BufferedReader(io.BytesIO(src.read(e - s + 1)))

            if m.size:
                reader = ChunkRangeReader(m, codec, str(stored), opener, 0, m.size - 1, streams=False)
                while block := reader.read(8 * 1024 * 1024):
                    out.write(block)
        return [target]
    packed = stored.read_bytes()
    files: list[Path] = []
    for suffix, entry in m.indexes.items():
        data = codec.decode(suffix, 0, packed[entry.offset : entry.offset + entry.stored_size], entry.size,
                            entry.crc32c, key=str(stored))
        name = f"{base}{suffix}" if suffix.startswith(".") else suffix
        (out_dir / name).write_bytes(data)
        files.append(out_dir / name)
    return files

