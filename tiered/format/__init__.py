"""The stored form of a remote segment: a segment manifest, per-chunk zstd and AES-256-GCM, and a key ring.

A segment copied with ``rsm.config.compression.enabled`` or ``rsm.config.encryption.enabled`` is stored as three
objects (see ``docs/remote-format.md``):

``<segment>.log``
    the ``.log`` file cut into ``chunk.size`` chunks (the last one short), each transformed on its own (zstd, then
    AES-256-GCM) and the results concatenated;
``<segment>.indexes``
    the offset, time, transaction (when there is one) and producer-snapshot indexes and the leader-epoch checkpoint,
    each transformed as one piece and concatenated: one PUT, one GET;
``<segment>.rsm-manifest``
    :class:`~tiered.format.manifest.SegmentManifest` as JSON, uploaded last: where every chunk and index lies in
    the stored objects, their crc32c, the transforms applied and the encryption envelope (the segment's data key
    wrapped by a key pair of the ring).

A segment without a manifest object is in the plain layout (Kafka's files stored as they are): segments written
before the manifest existed, or with neither transform enabled, are read that way.
"""

from tiered.format.keyring import KeyProvider, RsaKeyRing
from tiered.format.manifest import Envelope, IndexEntry, SegmentManifest
from tiered.format.transforms import ChunkCodec, batches_are_compressed

__all__ = ["ChunkCodec", "Envelope", "IndexEntry", "KeyProvider", "RsaKeyRing", "SegmentManifest",
           "batches_are_compressed"]
