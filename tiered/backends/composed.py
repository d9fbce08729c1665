"""ObjectStoreRemoteStorageManager: the RemoteStorageManager that composes an object store with the segment format.

The store (:class:`tiered.ObjectStore`) only moves bytes; this class lays a segment's files out in it. A failed
copy deletes whatever was uploaded (no orphans) and raises RemoteStorageError.

Which store: a subclass names one (``store_class``: the local-directory, S3 and fsspec backends, configured with
the ``rsm.config.*`` keys that are not the format's), a store is handed in (``ObjectStoreRemoteStorageManager(store)``,
configured already), or ``rsm.config.store.class`` names one by dotted path
(``remote.log.storage.manager.class.name=store``), configured with the ``rsm.config.store.*`` keys, prefix stripped.

Two layouts (``docs/remote-format.md``), settings in :mod:`tiered.format.settings`:

plain (``rsm.config.compression.enabled`` and ``rsm.config.encryption.enabled`` both false, the default)
    Kafka's files as they are: the ``.log`` first, then the indexes, the producer snapshot and the leader-epoch
    checkpoint, one object each. It stays the default because the objects are byte-identical to Kafka's files
    (readable by Kafka's own tools), a read costs no decoding, and the segment cache's warm path is unchanged.
manifest (either transform on)
    the ``.log`` as transformed chunks streamed into one upload, the indexes packed into one ``.indexes`` object,
    and the segment manifest (``tiered.format``) last. ``fetch_log_segment`` maps the original range to the
    stored chunks through the manifest (cached per segment), fetches only those, decodes them and returns the
    plaintext bytes asked for; ``fetch_index`` reads the packed object.

Reads find the layout per segment (a manifest object or none), so segments of both layouts live in one bucket and
a change of settings never strands what was written before.
"""

from __future__ import annotations

import importlib
import io
import logging
from collections.abc import Mapping
from typing import IO, Any, cast

from tiered import layout
from tiered.checksums import checksum_chunk_bytes
from tiered.errors import PluginConfigError, RemoteStorageError
from tiered.format.caches import NO_MANIFEST, SegmentCaches
from tiered.format.keyring import KeyProvider, NoKeyRing, RsaKeyRing, load_key_provider
from tiered.format.manifest import (
    MANIFEST_SUFFIX,
    PACKED_INDEXES_SUFFIX,
    SegmentManifest,
    read_manifest,
)
from tiered.format.segment import ChunkRangeReader, Decoders, log_chunks, pack_indexes, unpack_index
from tiered.format.settings import (
    FORMAT_DOCS,
    FORMAT_KEYS,
    KEY_PAIRS_PREFIX,
    KEY_PROVIDER_PREFIX,
    FormatSettings,
    format_settings,
)
from tiered.format.transforms import ChunkCodec, batches_are_compressed
from tiered.options import Options
from tiered.rsm import IndexType, LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageManager
from tiered.store import ObjectStore, not_found

__all__ = ["MANIFEST_SUFFIX", "PACKED_INDEXES_SUFFIX", "STORE_CLASS_KEY", "ObjectStoreRemoteStorageManager"]

logger = logging.getLogger(__name__)

STORE_PREFIX = "store."
STORE_CLASS_KEY = "store.class"
#: the ``rsm.config.*`` keys (prefix stripped) this class reads; ``checksum.chunk.bytes`` is the copy task's
#: (tiered.checksums), passed to every plugin with the rest
RSM_KEYS = ("prefix", "checksum.chunk.bytes", *FORMAT_KEYS)
RSM_DOCS: dict[str, tuple[str, str, str]] = {
    "prefix": ("\"\"", "a path",
        "Object key prefix of everything the tier writes."),
    "checksum.chunk.bytes": ("1 MiB", "[4096, 1 GiB]",
        "Bytes per crc32c of each uploaded object; every fetch is checked against them."),
}
RSM_DOCS.update(FORMAT_DOCS)
STORE_DOCS: dict[str, tuple[str, str, str]] = {
    "store.class": ("required", "a dotted path", "Your tiered.ObjectStore subclass (package.module.Class)."),
    "store.*": ("none", "per store", "Passed to the store's `configure`, prefix stripped."),
}


class ObjectStoreRemoteStorageManager(RemoteStorageManager):
    """See the module docstring."""

    #: the store a subclass is built on (configured with the ``rsm.config.*`` keys that are not the format's);
    #: None: ``rsm.config.store.class`` names it
    store_class: type[ObjectStore] | None = None
    store: ObjectStore
    key_provider: KeyProvider | None = None  # wraps and unwraps data keys (the RSA key ring, or a KMS)
    format: FormatSettings = FormatSettings()
    props: dict[str, str]

    def __init__(self, store: ObjectStore | None = None) -> None:
        self._given_store = store
        if store is not None:
            self.store = self.object_store = store
        self.caches = SegmentCaches()
        self.decoders = Decoders()  # the threads decoding chunks ahead of this plugin's readers; stopped by close()

    def configure(self, props: Mapping[str, str]) -> None:
        self.props = dict(props)  # as given: what configures another one alike
        own = {k: v for k, v in props.items() if _is_rsm_key(k)}
        options = Options(own)
        if self.store_class is None and self._given_store is None:  # the keys a built-in store does not warn of
            Options(props, known=(*RSM_KEYS, STORE_CLASS_KEY), known_prefixes=(KEY_PAIRS_PREFIX, KEY_PROVIDER_PREFIX,
                                                                               STORE_PREFIX))
        self.prefix = (options.string("prefix", "") or "").strip("/")
        checksum_chunk_bytes(props)  # validated here too, so a bad value fails at configure
        self.format = format_settings(options)
        if self.format.key_provider_class:
            self.key_provider = load_key_provider(self.format, options.prefix)
        elif self.format.key_pairs:
            self.key_provider = RsaKeyRing.from_settings(self.format)
        self.decrypts = self.key_provider is not None
        if self._given_store is None:
            self.store = self.object_store = self._build_store(props)
        self.fetch_streams = self.store.capabilities.streams

    def _build_store(self, props: Mapping[str, str]) -> ObjectStore:
        if self.store_class is not None:
            store = self.store_class()
            store.configure({k: v for k, v in props.items() if not _is_rsm_key(k)})
            return store
        key = "rsm.config." + STORE_CLASS_KEY
        path = (props.get(STORE_CLASS_KEY) or "").strip()
        if not path:
            raise PluginConfigError(f"Missing required configuration {key}: the dotted path (package.module.Class) "
                                    "of the tiered.ObjectStore the segments go to", key=key)
        module_name, _, attr = path.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module_name), attr) if module_name else None
        except (ImportError, AttributeError) as exc:
            raise PluginConfigError(f"Invalid value {path} for configuration {key}: cannot load it: {exc}",
                                    key=key, value=path) from exc
        if not (isinstance(cls, type) and issubclass(cls, ObjectStore)):
            raise PluginConfigError(f"Invalid value {path} for configuration {key}: expected the dotted path of a "
                                    "subclass of tiered.ObjectStore", key=key, value=path)
        try:
            store = cls()
        except TypeError as exc:  # abstract methods left out, or a constructor that wants arguments
            raise PluginConfigError(f"Invalid value {path} for configuration {key}: cannot instantiate it: {exc}",
                                    key=key, value=path) from None
        store.configure({k[len(STORE_PREFIX):]: v for k, v in props.items()
                         if k.startswith(STORE_PREFIX) and k != STORE_CLASS_KEY})
        return store

    @classmethod
    def config_keys(cls) -> tuple[str, ...]:
        """The ``rsm.config.*`` keys it reads (prefix stripped; ``<prefix>*`` for a family), for the docs."""
        store_keys, store_prefixes = ((cls.store_class.CONFIG_KEYS, cls.store_class.CONFIG_KEY_PREFIXES)
                                      if cls.store_class is not None else ((STORE_CLASS_KEY,), (STORE_PREFIX,)))
        prefixes = (KEY_PAIRS_PREFIX, KEY_PROVIDER_PREFIX, *store_prefixes)
        return (*RSM_KEYS, *store_keys, *(p + "*" for p in prefixes))

    @classmethod
    def config_docs(cls) -> dict[str, tuple[str, str, str]]:
        """Each key of :meth:`config_keys` (and others described but not read: the generator refuses those) ->
        (default, valid values, description), for docs/configuration.md."""
        return {**RSM_DOCS, **(cls.store_class.CONFIG_DOCS if cls.store_class is not None else STORE_DOCS)}

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}({getattr(self, 'store', None)!r}, prefix={self.prefix!r})"

    def close(self) -> None:
        self.decoders.close()
        if hasattr(self, "store"):
            self.store.close()

    # Copies ----------------------------------------------------------------------------------------------
    def _uploads(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = [
            (layout.segment_key(self.prefix, metadata, layout.LOG_SUFFIX), data.log_segment),
            (layout.segment_key(self.prefix, metadata, IndexType.OFFSET.suffix), data.offset_index),
            (layout.segment_key(self.prefix, metadata, IndexType.TIMESTAMP.suffix), data.time_index),
        ]
        if data.transaction_index is not None:
            out.append((layout.segment_key(self.prefix, metadata, IndexType.TRANSACTION.suffix), data.transaction_index))
        out.append((layout.segment_key(self.prefix, metadata, IndexType.PRODUCER_SNAPSHOT.suffix), data.producer_snapshot_index))
        out.append((layout.segment_key(self.prefix, metadata, IndexType.LEADER_EPOCH.suffix), bytes(data.leader_epoch_index)))
        return out

    def _all_keys(self, metadata: RemoteLogSegmentMetadata) -> list[str]:
        """Every object a segment may have, in either layout."""
        return [*layout.segment_keys(self.prefix, metadata),
                layout.segment_key(self.prefix, metadata, PACKED_INDEXES_SUFFIX),
                layout.segment_key(self.prefix, metadata, MANIFEST_SUFFIX)]

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> bytes | None:
        uploaded = 0
        try:
            if self.format.transformed:
                self._copy_with_manifest(metadata, segment_data)
            else:
                for key, source in self._uploads(metadata, segment_data):
                    if isinstance(source, bytes):
                        self.store.put(key, source)
                    else:
                        with open(source, "rb") as f:
                            self.store.put(key, f)
                    uploaded += 1
        except Exception as exc:
            logger.warning("copy of %s failed after %d object(s): deleting them", metadata.remote_log_segment_id, uploaded)
            try:
                self.store.delete_many(self._all_keys(metadata))
            except Exception:
                logger.exception("cleanup after the failed copy of %s failed", metadata.remote_log_segment_id)
            if isinstance(exc, RemoteStorageError):
                raise
            raise RemoteStorageError(f"copy of {metadata.remote_log_segment_id} failed: {type(exc).__name__}: {exc}",
                                     retriable=isinstance(exc, OSError)) from exc
        return None

    def _copy_with_manifest(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> None:
        """Upload the chunked ``.log``, the packed indexes, then the manifest (see the module docstring)."""
        settings = self.format
        compress = settings.compression and not (settings.compression_heuristic and batches_are_compressed(data.log_segment))
        sid = metadata.remote_log_segment_id.id
        codec, envelope = ChunkCodec.writing(sid, settings, self.key_provider, compress=compress)
        offsets: list[int] = [0]
        crcs: list[int] = []
        size = data.log_segment.stat().st_size
        self.store.put_stream(layout.segment_key(self.prefix, metadata, layout.LOG_SUFFIX),
                              log_chunks(data.log_segment, settings.chunk_size, codec, offsets, crcs))
        if len(crcs) != -(-size // settings.chunk_size) or data.log_segment.stat().st_size != size:
            raise RemoteStorageError(f"{data.log_segment} changed size while it was being copied (a rolled segment "
                                     "never does)")
        indexes = {IndexType.OFFSET.suffix: data.offset_index.read_bytes(),
                   IndexType.TIMESTAMP.suffix: data.time_index.read_bytes()}
        if data.transaction_index is not None:
            indexes[IndexType.TRANSACTION.suffix] = data.transaction_index.read_bytes()
        indexes[IndexType.PRODUCER_SNAPSHOT.suffix] = data.producer_snapshot_index.read_bytes()
        indexes[IndexType.LEADER_EPOCH.suffix] = bytes(data.leader_epoch_index)
        packed, entries = pack_indexes(indexes, codec)
        self.store.put(layout.segment_key(self.prefix, metadata, PACKED_INDEXES_SUFFIX), packed)
        manifest = SegmentManifest(layout.kafka_uuid(sid), size, settings.chunk_size, tuple(offsets), tuple(crcs),
                                   settings.compression_level if compress else None, envelope, entries)
        self.store.put(layout.segment_key(self.prefix, metadata, MANIFEST_SUFFIX), manifest.encode())
        self.caches.remember(sid, manifest)

    # Manifests -------------------------------------------------------------------------------------------
    def manifest(self, metadata: RemoteLogSegmentMetadata) -> SegmentManifest | None:
        """The segment's manifest (cached), or None for a segment in the plain layout."""
        sid = metadata.remote_log_segment_id.id
        found = self.caches.manifest(sid)
        if found is not None:
            return found if isinstance(found, SegmentManifest) else None
        manifest = read_manifest(self.store, layout.segment_key(self.prefix, metadata, MANIFEST_SUFFIX),
                                 layout.kafka_uuid(sid))
        self.caches.remember(sid, NO_MANIFEST if manifest is None else manifest)
        return manifest

    def codec(self, metadata: RemoteLogSegmentMetadata, manifest: SegmentManifest) -> ChunkCodec:
        """The codec that decodes the segment's chunks, its data key unwrapped by the key provider once and kept
        with the cached manifest."""
        sid = metadata.remote_log_segment_id.id

        def make() -> ChunkCodec:
            data_key = None
            if manifest.envelope is not None:
                env = manifest.envelope
                try:
                    data_key = (self.key_provider or NoKeyRing()).unwrap(env.key_id, env.key_wrap, env.wrapped_key)
                except RemoteStorageError as exc:  # the key provider's error, with the segment it was reading
                    key = layout.segment_key(self.prefix, metadata, MANIFEST_SUFFIX)
                    raise type(exc)(f"segment {layout.kafka_uuid(sid)} (manifest {key}): {exc}",
                                    **{**exc.context, "key": key}) from None
            return ChunkCodec.reading(sid, manifest, data_key)

        return self.caches.codec(sid, manifest, make)

    # Reads -----------------------------------------------------------------------------------------------
    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> IO[bytes]:
        if start_position < 0 or (end_position is not None and end_position < start_position):
            raise RemoteStorageError(f"invalid range {start_position}..{end_position} of {metadata.remote_log_segment_id}")
        key = layout.segment_key(self.prefix, metadata, layout.LOG_SUFFIX)
        manifest = self.manifest(metadata)
        if manifest is None:
            return self.store.open_range(key, start_position, end_position)
        end = manifest.size - 1 if end_position is None else min(end_position, manifest.size - 1)
        if start_position > end:
            return io.BytesIO(b"")
        reader = ChunkRangeReader(manifest, self.codec(metadata, manifest), key,
                                  lambda s, e: self.store.open_range(key, s, e), start_position, end,
                                  streams=self.fetch_streams, decoders=self.decoders)
        return cast(IO[bytes], reader)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> IO[bytes]:
        manifest = self.manifest(metadata)
        if manifest is None:
            return io.BytesIO(self.store.get(layout.segment_key(self.prefix, metadata, index_type.suffix)))
        key = layout.segment_key(self.prefix, metadata, PACKED_INDEXES_SUFFIX)
        entry = manifest.indexes.get(index_type.suffix)
        if entry is None:
            raise not_found(f"{key} ({index_type.suffix})")
        packed = self.caches.packed(metadata.remote_log_segment_id.id, lambda: self.store.get(key))
        return io.BytesIO(unpack_index(packed, index_type.suffix, entry, self.codec(metadata, manifest), key))

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        self.store.delete_many(self._all_keys(metadata))
        self.caches.forget(metadata.remote_log_segment_id.id)


def _is_rsm_key(key: str) -> bool:
    """Whether an ``rsm.config.*`` key (prefix stripped) is this class's (the format's, the prefix, the checksums',
    a plugged store's) rather than a built-in store's."""
    return key in RSM_KEYS or key.startswith((KEY_PAIRS_PREFIX, KEY_PROVIDER_PREFIX, STORE_PREFIX))
