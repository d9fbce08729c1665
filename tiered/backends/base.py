"""ObjectStoreRemoteStorageManager: the RSM on a small object API, so each backend only moves bytes.

A backend implements ``put_file``, ``put_bytes``, ``get_range``, ``delete_many``, ``list_keys`` and ``exists`` (and
may override ``put_stream`` and ``open_range``). A failed copy deletes whatever was uploaded (no orphans) and
raises RemoteStorageError.

Two layouts (``docs/remote-format.md``):

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

import io
import logging
import tempfile
import threading
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn, cast

from tiered import layout
from tiered.backends.options import (
    FORMAT_KEYS,
    KEY_PAIRS_PREFIX,
    KEY_PROVIDER_PREFIX,
    FormatSettings,
    Options,
    Redactor,
    format_settings,
)
from tiered.checksums import checksum_chunk_bytes
from tiered.errors import ObjectExistsError, RemoteResourceNotFoundError, RemoteStorageError
from tiered.rsm import IndexType, LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageManager

if TYPE_CHECKING:
    from tiered.format import KeyProvider, SegmentManifest
    from tiered.format.segment import Decoders
    from tiered.format.transforms import ChunkCodec

MANIFEST_SUFFIX = ".rsm-manifest"
PACKED_INDEXES_SUFFIX = ".indexes"
_MANIFEST_CACHE_ENTRIES = 4096
_PACKED_CACHE_ENTRIES = 4
_NO_MANIFEST = object()

logger = logging.getLogger(__name__)


class ObjectStoreRemoteStorageManager(RemoteStorageManager):
    _ABSTRACT_HELPER = True
    prefix: str = ""
    #: the ``rsm.config.*`` keys (prefix stripped) a backend reads; others are warned about. ``checksum.chunk.bytes``
    #: is the copy task's (tiered.checksums), passed to every plugin with the rest.
    CONFIG_KEYS: tuple[str, ...] = ("prefix", "checksum.chunk.bytes", *FORMAT_KEYS)
    CONFIG_KEY_PREFIXES: tuple[str, ...] = (KEY_PAIRS_PREFIX, KEY_PROVIDER_PREFIX)
    redact: Redactor = Redactor()
    format: FormatSettings = FormatSettings()
    #: wraps and unwraps data keys; the RSA key ring of ``rsm.config.encryption.key.pairs`` unless replaced (a KMS)
    key_provider: KeyProvider | None = None

    def configure(self, props: Mapping[str, str]) -> None:
        self.options = Options(props, known=self.CONFIG_KEYS, known_prefixes=self.CONFIG_KEY_PREFIXES)
        self.redact = self.options.redactor
        self.prefix = (self.options.string("prefix", "") or "").strip("/")
        checksum_chunk_bytes(props)  # validated here too, so a bad value fails at configure
        self.format = format_settings(self.options)
        if self.format.key_provider_class:
            from tiered.format.keyring import load_key_provider

            self.key_provider = load_key_provider(self.format, self.options.prefix)
        elif self.format.key_pairs:
            from tiered.format.keyring import RsaKeyRing

            self.key_provider = RsaKeyRing.from_settings(self.format)

    def _failure(self, message: str, exc: BaseException | None, **context: Any) -> RemoteStorageError:
        """A RemoteStorageError whose message has no secret in it (and which is not chained to ``exc`` when that
        mentions one: a traceback would print it)."""
        err = RemoteStorageError(self.redact(message), **context)
        if exc is not None and not self.redact.leaks(exc):
            err.__cause__ = exc
        else:
            err.__suppress_context__ = True
        return err

    def _fail(self, message: str, exc: BaseException | None, **context: Any) -> NoReturn:
        """Raise :meth:`_failure`'s error, chained to ``exc`` only when that mentions no secret."""
        err = self._failure(message, exc, **context)
        raise err from err.__cause__

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}(prefix={self.prefix!r})"

    # The object API ---------------------------------------------------------------------------------------
    @abstractmethod
    def put_file(self, key: str, path: Path) -> None: ...

    #: Whether ``put_bytes(key, data, if_absent=True)`` is atomic on this backend: two writers racing to create one
    #: key cannot both succeed (S3's ``If-None-Match: *``, an exclusive create on a filesystem). Where False, it is
    #: an existence check followed by a write (see docs/operations.md, "Ownership").
    conditional_writes: bool = False

    @abstractmethod
    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        """Write ``data`` as ``key``. With ``if_absent``, only if ``key`` does not exist:
        :class:`tiered.errors.ObjectExistsError` when it does (atomically where :attr:`conditional_writes`)."""

    def _refuse_existing(self, key: str) -> None:
        """``if_absent`` on a backend without conditional writes: an existence check before the write (racy)."""
        if self.exists(key):
            raise ObjectExistsError(f"object {key!r} exists already in the remote store", key=key)

    def put_stream(self, key: str, chunks: Iterable[bytes]) -> None:
        """Upload the concatenation of ``chunks`` as ``key`` holding only a few of them in memory: by default
        spooled to a temporary file and uploaded with :meth:`put_file` (backends that can stream override it)."""
        with tempfile.NamedTemporaryFile(prefix="tiered-upload-") as spool:
            for chunk in chunks:
                spool.write(chunk)
            spool.flush()
            self.put_file(key, Path(spool.name))

    @abstractmethod
    def get_range(self, key: str, start: int = 0, end_inclusive: int | None = None) -> bytes:
        """Bytes [start, end_inclusive] of ``key`` (to the end when None; shorter at the object's end).

        Raises RemoteResourceNotFoundError when the object does not exist."""

    def open_range(self, key: str, start: int = 0, end_inclusive: int | None = None) -> IO[bytes]:
        """A readable stream of bytes [start, end_inclusive] of ``key``: by default the whole range read at once
        (a backend that can stream overrides this and sets ``fetch_streams``)."""
        return io.BytesIO(self.get_range(key, start, end_inclusive))

    @abstractmethod
    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete ``keys``; missing ones are ignored."""

    @abstractmethod
    def list_keys(self, prefix: str) -> list[str]: ...

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    # The RSM ----------------------------------------------------------------------------------------------
    def _uploads(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> list[tuple[str, Path | bytes]]:
        out: list[tuple[str, Path | bytes]] = [
            (layout.segment_key(self.prefix, metadata, layout.LOG_SUFFIX), data.log_segment),
            (layout.segment_key(self.prefix, metadata, IndexType.OFFSET.suffix), data.offset_index),
            (layout.segment_key(self.prefix, metadata, IndexType.TIMESTAMP.suffix), data.time_index),
        ]
        if data.transaction_index is not None:
            out.append((layout.segment_key(self.prefix, metadata, IndexType.TRANSACTION.suffix), data.transaction_index))
        out.append((layout.segment_key(self.prefix, metadata, IndexType.PRODUCER_SNAPSHOT.suffix), data.producer_snapshot_index))
        out.append((layout.segment_key(self.prefix, metadata, IndexType.LEADER_EPOCH.suffix), data.leader_epoch_index))
        return out

    def _all_keys(self, metadata: RemoteLogSegmentMetadata) -> list[str]:
        """Every object a segment may have, in either layout."""
        return [*layout.segment_keys(self.prefix, metadata),
                layout.segment_key(self.prefix, metadata, PACKED_INDEXES_SUFFIX),
                layout.segment_key(self.prefix, metadata, MANIFEST_SUFFIX)]

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> bytes | None:
        uploaded: list[str] = []
        try:
            if self.format.transformed:
                self._copy_with_manifest(metadata, segment_data)
            else:
                for key, source in self._uploads(metadata, segment_data):
                    if isinstance(source, Path):
                        self.put_file(key, source)
                    else:
                        self.put_bytes(key, source)
                    uploaded.append(key)
        except Exception as exc:
            logger.warning("copy of %s failed after %d object(s): deleting them", metadata.remote_log_segment_id, len(uploaded))
            try:
                self.delete_many(self._all_keys(metadata))
            except Exception:
                logger.exception("cleanup after the failed copy of %s failed", metadata.remote_log_segment_id)
            if isinstance(exc, RemoteStorageError):
                raise
            self._fail(f"copy of {metadata.remote_log_segment_id} failed: {exc}", exc, retriable=isinstance(exc, OSError))
        return None

    def _copy_with_manifest(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> None:
        """Upload the chunked ``.log``, the packed indexes, then the manifest (see the module docstring)."""
        from tiered.format.manifest import Envelope, SegmentManifest
        from tiered.format.segment import log_chunks, pack_indexes
        from tiered.format.transforms import ChunkCodec, batches_are_compressed, new_data_key

        settings = self.format
        compress = settings.compression and not (settings.compression_heuristic and batches_are_compressed(data.log_segment))
        level = settings.compression_level if compress else None
        envelope = data_key = None
        if settings.encryption:
            assert self.key_provider is not None
            data_key = new_data_key()
            key_id, algorithm, wrapped = self.key_provider.wrap(data_key)
            envelope = Envelope(key_id, algorithm, wrapped)
        sid = metadata.remote_log_segment_id.id
        codec = ChunkCodec(sid, level=level, data_key=data_key)
        offsets: list[int] = [0]
        crcs: list[int] = []
        size = data.log_segment.stat().st_size
        self.put_stream(layout.segment_key(self.prefix, metadata, layout.LOG_SUFFIX),
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
        self.put_bytes(layout.segment_key(self.prefix, metadata, PACKED_INDEXES_SUFFIX), packed)
        manifest = SegmentManifest(layout.kafka_uuid(sid), size, settings.chunk_size, tuple(offsets), tuple(crcs),
                                   level, envelope, entries)
        self.put_bytes(layout.segment_key(self.prefix, metadata, MANIFEST_SUFFIX), manifest.encode())
        self._remember(metadata, manifest)

    # Manifests -------------------------------------------------------------------------------------------
    def _manifest_cache(self) -> tuple[OrderedDict[Any, Any], threading.Lock]:
        """The manifests read so far (by segment id, LRU) and their lock; made on first use, so a subclass that
        never calls :meth:`configure` (a wrapper) has them too."""
        found = self.__dict__.get("_manifests")
        if found is None:
            found = self.__dict__.setdefault("_manifests", (OrderedDict(), threading.Lock()))
        return found

    def _remember(self, metadata: RemoteLogSegmentMetadata, manifest: Any) -> None:
        cache, lock = self._manifest_cache()
        with lock:
            cache[metadata.remote_log_segment_id.id] = manifest
            while len(cache) > _MANIFEST_CACHE_ENTRIES:
                cache.popitem(last=False)

    def manifest(self, metadata: RemoteLogSegmentMetadata) -> SegmentManifest | None:
        """The segment's manifest (cached), or None for a segment in the plain layout."""
        sid = metadata.remote_log_segment_id.id
        cache, lock = self._manifest_cache()
        with lock:
            found = cache.get(sid)
            if found is not None:
                cache.move_to_end(sid)
                return None if found is _NO_MANIFEST else found
        from tiered.format.manifest import SegmentManifest

        key = layout.segment_key(self.prefix, metadata, MANIFEST_SUFFIX)
        try:
            raw = self.get_range(key)
        except RemoteResourceNotFoundError:
            self._remember(metadata, _NO_MANIFEST)
            return None
        try:
            manifest = SegmentManifest.decode(raw)
        except ValueError as exc:
            raise RemoteStorageError(f"segment manifest {key} cannot be read: {exc}", key=key) from exc
        if manifest.segment_id != layout.kafka_uuid(sid):
            raise RemoteStorageError(f"segment manifest {key} describes segment {manifest.segment_id}, not "
                                     f"{layout.kafka_uuid(sid)}: refused", key=key)
        self._remember(metadata, manifest)
        return manifest

    def codec(self, metadata: RemoteLogSegmentMetadata, manifest: SegmentManifest) -> ChunkCodec:
        """The codec that decodes the segment's chunks, its data key unwrapped by the key provider once and kept
        with the cached manifest (a rotation re-wraps the same data key, so it stays valid)."""
        from tiered.format.keyring import NoKeyRing
        from tiered.format.transforms import ChunkCodec

        sid = metadata.remote_log_segment_id.id
        cache, lock = self._manifest_cache()
        with lock:
            found = self.__dict__.setdefault("_codecs", {}).get(sid)
        if found is not None and found[0] is manifest:
            return found[1]
        data_key = None
        if manifest.envelope is not None:
            env = manifest.envelope
            try:
                data_key = (self.key_provider or NoKeyRing()).unwrap(env.key_id, env.key_wrap, env.wrapped_key)
            except RemoteStorageError as exc:  # the key provider's error, with the segment it was reading
                key = layout.segment_key(self.prefix, metadata, MANIFEST_SUFFIX)
                raise type(exc)(f"segment {layout.kafka_uuid(sid)} (manifest {key}): {exc}",
                                **{**exc.context, "key": key}) from None
        codec = ChunkCodec(sid, level=manifest.compression_level, data_key=data_key)
        with lock:
            codecs = self.__dict__["_codecs"]
            codecs[sid] = (manifest, codec)
            for stale in [k for k in codecs if k not in cache]:
                del codecs[stale]  # only segments whose manifest is still cached keep a codec
        return codec

    def _packed_indexes(self, metadata: RemoteLogSegmentMetadata, key: str) -> bytes:
        """The segment's ``.indexes`` object: one GET serves the index fetches of a segment that come together
        (the last few segments' objects are kept)."""
        sid = metadata.remote_log_segment_id.id
        _, lock = self._manifest_cache()
        with lock:
            packed: OrderedDict[Any, bytes] = self.__dict__.setdefault("_packed", OrderedDict())
            data = packed.get(sid)
        if data is None:
            data = self.get_range(key)
            with lock:
                packed[sid] = data
                while len(packed) > _PACKED_CACHE_ENTRIES:
                    packed.popitem(last=False)
        return data

    # Reads -----------------------------------------------------------------------------------------------
    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> IO[bytes]:
        if start_position < 0 or (end_position is not None and end_position < start_position):
            raise RemoteStorageError(f"invalid range {start_position}..{end_position} of {metadata.remote_log_segment_id}")
        key = layout.segment_key(self.prefix, metadata, layout.LOG_SUFFIX)
        manifest = self.manifest(metadata)
        if manifest is None:
            return self.open_range(key, start_position, end_position)
        end = manifest.size - 1 if end_position is None else min(end_position, manifest.size - 1)
        if start_position > end:
            return io.BytesIO(b"")
        from tiered.format.segment import ChunkRangeReader

        reader = ChunkRangeReader(manifest, self.codec(metadata, manifest), key,
                                  lambda s, e: self.open_range(key, s, e), start_position, end,
                                  streams=self.fetch_streams, decoders=self._decoders())
        return cast(IO[bytes], reader)

    def _decoders(self) -> Decoders:
        """The threads that decode chunks ahead of this plugin's readers (started on a first multi-chunk read,
        stopped by :meth:`close`)."""
        from tiered.format.segment import Decoders

        found: Decoders | None = self.__dict__.get("_decoder_pool")
        return found if found is not None else self.__dict__.setdefault("_decoder_pool", Decoders())

    def close(self) -> None:
        """Stop the chunk decoders; a subclass that holds more (a client) closes it and calls this."""
        decoders = self.__dict__.get("_decoder_pool")
        if decoders is not None:
            decoders.close()

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> IO[bytes]:
        manifest = self.manifest(metadata)
        if manifest is None:
            return io.BytesIO(self.get_range(layout.segment_key(self.prefix, metadata, index_type.suffix)))
        key = layout.segment_key(self.prefix, metadata, PACKED_INDEXES_SUFFIX)
        entry = manifest.indexes.get(index_type.suffix)
        if entry is None:
            raise not_found(f"{key} ({index_type.suffix})")
        from tiered.format.segment import unpack_index

        packed = self._packed_indexes(metadata, key)
        return io.BytesIO(unpack_index(packed, index_type.suffix, entry, self.codec(metadata, manifest), key))

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        self.delete_many(self._all_keys(metadata))
        cache, lock = self._manifest_cache()
        with lock:
            for held in (cache, self.__dict__.get("_codecs", {}), self.__dict__.get("_packed", {})):
                held.pop(metadata.remote_log_segment_id.id, None)


def not_found(key: str) -> RemoteResourceNotFoundError:
    return RemoteResourceNotFoundError(f"no object {key!r} in the remote store", key=key)
