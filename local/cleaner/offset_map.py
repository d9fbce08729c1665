"""The cleaner's key -> latest offset map within a fixed memory budget: Kafka's ``SkimpyOffsetMap``.

The map never holds keys: a slot is the key's 16-byte digest and the offset (8 bytes, big-endian), 24 bytes,
in one numpy array of ``memory // 24`` slots allocated once (``log.cleaner.dedupe.buffer.size`` divided among the
cleaner threads). Open addressing, Kafka's probe sequence: the attempt-th probe is the big-endian int32 at byte
``min(attempt, 12)`` of the digest plus ``max(0, attempt - 12)``, made non-negative (``Integer.MIN_VALUE`` -> 0) and
taken modulo the slot count. An all-zero slot is empty. No deletes; ``clear`` zeroes the table. Two keys whose
digests collide share a slot: the cleaner then keeps only the later one's records, as Kafka's does.

The cleaner fills the map a batch at a time (:meth:`put_many`, stopping when ``log.cleaner.io.buffer.load.factor``
of the slots are used, as Kafka's does before each put) and asks it a batch at a time (:meth:`get_many`), with the
digests ``local.cleaner.records.scan_records`` computed. The loops run in C (``local/cleaner/_cleancore.c``) where
it was built, else in Python; ``tests/property/test_cleancore.py`` holds them to the same answers.

The digest: Kafka takes the key's MD5; this map takes SipHash-2-4's 128-bit output under a key drawn at random
(``os.urandom``) each time the map is created or cleared (:func:`local.cleaner.records.key_digest` says why: nothing
persists the digests, it is several times cheaper, and nobody can craft two record keys that share a digest and
make the cleaner drop the earlier key's latest value). :attr:`hash_key` is what every digest of one cleaning is taken
under.

Not thread-safe: each cleaner thread has its own map.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import numpy as np

from local.cleaner.records import HASH_KEY_SIZE, HASH_SIZE, key_digest
from local.extensions import fresh_extension

# the loops in C, built where a compiler exists (local/cleaner/_cleancore.c), and not from an older source
_cleancore: Any = fresh_extension("local.cleaner._cleancore")

BYTES_PER_ENTRY = HASH_SIZE + 8
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_EMPTY = bytes(BYTES_PER_ENTRY)


def _position(digest: bytes, attempt: int, slots: int) -> int:
    """The byte position of the attempt-th probe (Kafka's ``positionOf``, its int32 arithmetic included)."""
    probe = _INT.unpack_from(digest, min(attempt, HASH_SIZE - 4))[0] + max(0, attempt - HASH_SIZE + 4)
    probe = (probe + 2**31) % 2**32 - 2**31  # Java int overflow
    if probe == -(2**31):
        probe = 0  # Utils.abs(Integer.MIN_VALUE)
    return abs(probe) % slots * BYTES_PER_ENTRY


def py_put_many(table: memoryview, slots: int, hashes: bytes, offsets: np.ndarray, entries: int,
                max_entries: int) -> tuple[int, int]:
    """Put ``offsets[i]`` for digest ``i`` until the map holds ``max_entries`` entries (checked before each put, as
    Kafka's cleaner does); (puts done, entries now). Offsets of -1 are skipped (a record without a key)."""
    for i in range(len(offsets)):
        offset = int(offsets[i])
        if offset < 0:
            continue
        if entries >= max_entries:
            return i, entries
        digest = hashes[i * HASH_SIZE : (i + 1) * HASH_SIZE]
        attempt = 0
        while True:
            pos = _position(digest, attempt, slots)
            slot = table[pos : pos + BYTES_PER_ENTRY]
            if slot == _EMPTY:
                table[pos : pos + HASH_SIZE] = digest
                _LONG.pack_into(table, pos + HASH_SIZE, offset)
                entries += 1
                break
            if slot[:HASH_SIZE] == digest:
                _LONG.pack_into(table, pos + HASH_SIZE, offset)
                break
            attempt += 1
    return len(offsets), entries


def py_get_many(table: memoryview, slots: int, hashes: bytes, count: int) -> np.ndarray:
    """The offset stored for each of ``count`` digests, -1 where absent (Kafka's ``get``)."""
    out = np.full(count, -1, dtype=np.int64)
    max_attempts = slots + HASH_SIZE - 4
    for i in range(count):
        digest = hashes[i * HASH_SIZE : (i + 1) * HASH_SIZE]
        for attempt in range(max_attempts):
            pos = _position(digest, attempt, slots)
            slot = table[pos : pos + BYTES_PER_ENTRY]
            if slot == _EMPTY:
                break
            if slot[:HASH_SIZE] == digest:
                out[i] = _LONG.unpack_from(table, pos + HASH_SIZE)[0]
                break
    return out


class SkimpyOffsetMap:
    """See the module docstring. ``memory``: the bytes the table may use (its slot count is ``memory // 24``)."""

    __slots__ = ("_get_many", "_put_many", "_table", "_used", "_view", "entries", "hash_key", "latest_offset", "native",
                 "slots")

    def __init__(self, memory: int, *, native: bool = True) -> None:
        self.slots = memory // BYTES_PER_ENTRY
        if self.slots < 1:
            raise ValueError(f"an offset map of {memory} bytes holds no entry of {BYTES_PER_ENTRY} bytes")
        self._table = np.zeros(self.slots * BYTES_PER_ENTRY, dtype=np.uint8)
        self._view = self._table.data.cast("B")
        self.entries = 0
        self.latest_offset = -1
        self.hash_key = os.urandom(HASH_KEY_SIZE)
        use_c = native and _cleancore is not None
        self.native = use_c  # the cleaner's C passes use the table directly (table_view)
        self._used = False
        self._put_many = _cleancore.map_put_many if use_c else py_put_many
        self._get_many = _cleancore.map_get_many if use_c else py_get_many

    @property
    def size_in_bytes(self) -> int:
        """The table's bytes: what the map holds on to."""
        return int(self._table.nbytes)

    @property
    def utilization(self) -> float:
        return self.entries / self.slots

    @property
    def table_view(self) -> memoryview:
        """The table's bytes, for the cleaner's C passes (which count entries through :attr:`entries`)."""
        self._used = True
        return self._view

    def clear(self) -> None:
        if self._used or self.entries:  # a fresh table is zero already (and untouched: no pages to fault in)
            self._table.fill(0)
        self._used = False
        self.entries = 0
        self.latest_offset = -1
        self.hash_key = os.urandom(HASH_KEY_SIZE)  # a new key: what one cleaning learns of it is gone with the map

    def put_many(self, hashes: bytes, offsets: np.ndarray, max_entries: int | None = None) -> int:
        """Put each digest's offset (-1: skip); stops before a put once the map holds ``max_entries`` entries
        (default: the slot count). Returns how many were looked at: ``len(offsets)`` unless the map filled. The
        latest offset becomes the last one put."""
        limit = self.slots if max_entries is None else min(max_entries, self.slots)
        self._used = True
        done, self.entries = self._put_many(self._view, self.slots, hashes, np.ascontiguousarray(offsets, np.int64),
                                            self.entries, limit)
        put = offsets[:done]
        kept = put[put >= 0]
        if len(kept):
            self.latest_offset = int(kept[-1])
        return int(done)

    def get_many(self, hashes: bytes, count: int) -> np.ndarray:
        """The offset of each of ``count`` digests (-1 where absent)."""
        found = self._get_many(self._view, self.slots, hashes, count)
        return np.frombuffer(found, dtype=np.int64) if isinstance(found, bytes) else found

    def put(self, key: bytes, offset: int) -> None:
        """One key (Kafka's ``put``): for tests and callers holding keys."""
        if self.entries >= self.slots:
            raise ValueError(f"attempted to add a new entry to a full offset map ({self.entries} entries, {self.slots} "
                             "slots)")
        self.put_many(key_digest(self.hash_key, key), np.array([offset], dtype=np.int64))

    def get(self, key: bytes) -> int:
        """The latest offset of ``key`` (-1: none; Kafka's ``get``)."""
        return int(self.get_many(key_digest(self.hash_key, key), 1)[0])

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset
