"""What a reader of the manifest layout keeps between calls: per segment, its manifest (or that it has none), the
codec with its unwrapped data key, and the packed indexes object of the last few segments read."""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable

from tiered.format.manifest import SegmentManifest
from tiered.format.transforms import ChunkCodec

MANIFEST_ENTRIES = 4096
PACKED_ENTRIES = 4


class _NoManifest:
    """A segment in the plain layout (looked up once, remembered)."""


NO_MANIFEST = _NoManifest()


class SegmentCaches:
    """The three caches of :class:`tiered.backends.composed.ObjectStoreRemoteStorageManager`, under one lock. A codec
    is kept only while its segment's manifest is (a rotation re-wraps the same data key, so it stays valid)."""

    def __init__(self, manifest_entries: int = MANIFEST_ENTRIES, packed_entries: int = PACKED_ENTRIES) -> None:
        self._lock = threading.Lock()
        self._manifests: OrderedDict[uuid.UUID, SegmentManifest | _NoManifest] = OrderedDict()
        self._codecs: dict[uuid.UUID, tuple[SegmentManifest, ChunkCodec]] = {}
        self._packed: OrderedDict[uuid.UUID, bytes] = OrderedDict()
        self._manifest_entries = manifest_entries
        self._packed_entries = packed_entries

    def manifest(self, sid: uuid.UUID) -> SegmentManifest | _NoManifest | None:
        """The manifest remembered for ``sid``, :data:`NO_MANIFEST` for a plain segment, None when not known."""
        with self._lock:
            found = self._manifests.get(sid)
            if found is not None:
                self._manifests.move_to_end(sid)
            return found

    def remember(self, sid: uuid.UUID, manifest: SegmentManifest | _NoManifest) -> None:
        with self._lock:
            self._manifests[sid] = manifest
            self._manifests.move_to_end(sid)
            while len(self._manifests) > self._manifest_entries:
                gone, _ = self._manifests.popitem(last=False)
                self._codecs.pop(gone, None)

    def codec(self, sid: uuid.UUID, manifest: SegmentManifest, make: Callable[[], ChunkCodec]) -> ChunkCodec:
        with self._lock:
            found = self._codecs.get(sid)
        if found is not None and found[0] is manifest:
            return found[1]
        codec = make()
        with self._lock:
            if sid in self._manifests:
                self._codecs[sid] = (manifest, codec)
        return codec

    def packed(self, sid: uuid.UUID, read: Callable[[], bytes]) -> bytes:
        with self._lock:
            data = self._packed.get(sid)
        if data is None:
            data = read()
            with self._lock:
                self._packed[sid] = data
                while len(self._packed) > self._packed_entries:
                    self._packed.popitem(last=False)
        return data

    def forget(self, sid: uuid.UUID) -> None:
        with self._lock:
            self._manifests.pop(sid, None)
            self._codecs.pop(sid, None)
            self._packed.pop(sid, None)
