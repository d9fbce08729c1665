"""Property tests of the remote format: the manifest codec round-trips, the chunk transforms round-trip, and any
original byte range read through the manifest equals the same slice of the original."""

from __future__ import annotations

import io
import os
import threading
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from tiered.format import ChunkCodec, Envelope, IndexEntry, SegmentManifest
from tiered.format.segment import ChunkRangeReader, Decoders, log_chunks

_KEY = os.urandom(32)


@st.composite
def manifests(draw: st.DrawFn) -> SegmentManifest:
    chunk = draw(st.integers(1, 1 << 30))
    n = draw(st.integers(0, 40))
    size = 0 if n == 0 else (n - 1) * chunk + draw(st.integers(1, chunk))
    sizes = draw(st.lists(st.integers(0, 1 << 32), min_size=n, max_size=n))
    offsets = [0]
    for s in sizes:
        offsets.append(offsets[-1] + s)
    crcs = draw(st.lists(st.integers(0, 2**32 - 1), min_size=n, max_size=n))
    level = draw(st.none() | st.integers(-7, 22))
    envelope = draw(st.none() | st.builds(Envelope, st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True),
                                          st.just("RSA-OAEP-SHA512"), st.binary(min_size=1, max_size=512)))
    names = st.sampled_from([".index", ".timeindex", ".txnindex", ".snapshot", "leader-epoch-checkpoint"])
    entries = st.builds(IndexEntry, st.integers(0, 1 << 40), st.integers(0, 1 << 31), st.integers(0, 1 << 31),
                        st.integers(0, 2**32 - 1))
    indexes = draw(st.dictionaries(names, entries))
    return SegmentManifest(str(uuid.uuid4()), size, chunk, tuple(offsets), tuple(crcs), level, envelope, indexes)


@given(manifests())
def test_the_manifest_codec_round_trips(m: SegmentManifest) -> None:
    again = SegmentManifest.decode(m.encode())
    assert again == m
    assert again.transforms == m.transforms


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=5000), st.booleans(), st.booleans(), st.integers(0, 100))
def test_chunk_transforms_round_trip(data: bytes, compress: bool, encrypt: bool, index: int) -> None:
    from crc32c import crc32c

    codec = ChunkCodec(uuid.uuid4(), level=3 if compress else None, data_key=_KEY if encrypt else None)
    stored = codec.encode("log", index, data)
    assert codec.decode("log", index, stored, len(data), crc32c(stored), key="k") == data
    if encrypt:
        assert len(stored) >= 28


_DECODERS = Decoders(2)  # the threads a plugin's readers decode ahead on (closed with the module)


def teardown_module() -> None:
    _DECODERS.close()


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_range_read_through_the_manifest_is_the_original_slice(tmp_path_factory, data: st.DataObject) -> None:  # type: ignore[no-untyped-def]
    original = data.draw(st.binary(min_size=1, max_size=6000))
    chunk = data.draw(st.integers(1, 2000))
    codec = ChunkCodec(uuid.uuid4(), level=data.draw(st.none() | st.just(1)), data_key=data.draw(st.none() | st.just(_KEY)))
    path = tmp_path_factory.mktemp("p") / "seg.log"
    path.write_bytes(original)
    offsets, crcs = [0], []  # type: ignore[var-annotated]
    stored = b"".join(log_chunks(path, chunk, codec, offsets, crcs))
    m = SegmentManifest("s", len(original), chunk, tuple(offsets), tuple(crcs), codec.level)
    start = data.draw(st.integers(0, len(original) - 1))
    end = data.draw(st.integers(start, len(original) - 1))
    streams = data.draw(st.booleans())
    decoders = _DECODERS if data.draw(st.booleans()) else None  # decoded ahead on threads, or as reached
    reader = ChunkRangeReader(m, codec, "k", lambda s, e: io.BytesIO(stored[s : e + 1]), start, end, streams=streams,
                              decoders=decoders)
    sizes = data.draw(st.lists(st.integers(1, 3000), max_size=5))
    got = b"".join(reader.read(n) for n in sizes) + reader.read()
    assert got == original[start : end + 1]


def test_closed_decoders_decode_in_the_caller_and_start_no_thread() -> None:
    ran_on: list[threading.Thread] = []

    def decode(i: int, stored: bytes) -> bytes:
        ran_on.append(threading.current_thread())
        return stored

    decoders = Decoders(2)
    assert decoders.submit(decode, 0, b"x").result() == b"x"
    [worker] = ran_on
    assert worker.name.startswith("tiered-decode")
    decoders.close()
    assert not worker.is_alive()  # close() stopped it
    assert decoders.submit(decode, 1, b"y").result() == b"y"
    assert ran_on[1] is threading.current_thread()  # closed: decoded by the caller


@settings(max_examples=80, deadline=None)
@given(st.binary(min_size=1, max_size=3000), st.booleans(), st.booleans(), st.data())
def test_any_flipped_bit_of_a_stored_chunk_is_refused(data: bytes, compress: bool, check_crc: bool,
                                                     draw: st.DataObject) -> None:
    """With the manifest's crc (any change is caught by it) and with a crc fixed up by whoever changed the bytes
    (then the AES-GCM tag catches it)."""
    import pytest
    from crc32c import crc32c

    from tiered.errors import RemoteChunkError

    codec = ChunkCodec(uuid.uuid4(), level=3 if compress else None, data_key=_KEY)
    stored = bytearray(codec.encode("log", 4, data))
    crc = crc32c(bytes(stored))
    bit = draw.draw(st.integers(0, len(stored) * 8 - 1))
    stored[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(RemoteChunkError, match="chunk 4 of remote object obj") as info:
        codec.decode("log", 4, bytes(stored), len(data), crc if check_crc else crc32c(bytes(stored)), key="obj")
    assert info.value.chunk == 4 and info.value.key == "obj"
