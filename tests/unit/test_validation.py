"""Kafka's LogValidator rules on append (local/validation.py), one test per rule, plus the cases of issue 13:
a decompression bomb refused in bounded memory, a lastOffsetDelta that lies, a body of 0xff bytes with a valid
CRC, legacy wrappers nested 1000 deep or holding nothing, and a 36-byte legacy entry.

Batches come from our builder and from kafka-python (an independent encoder); a broken batch is a valid one with
bytes changed and its CRC recomputed, so that only the rule under test can refuse it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from local.errors import CorruptRecordError, InvalidRecordError, KafkaStorageError
from local.log import Log
from local.producer_state import AppendOrigin
from local.records import MemoryRecords, RecordBatch, SimpleRecord
from local.records.batch import ATTRIBUTES_OFFSET, BATCH_HEADER, CRC_OFFSET, RECORD_BATCH_OVERHEAD
from local.records.compression import CompressionType, DecompressedSizeError
from local.records.legacy import LegacyRecordBatch, build_legacy_message
from local.records.record import encode_record
from local.records.varint import encode_varint
from local.validation import (
    DECOMPRESSED_SIZE_FLOOR,
    check_records,
    max_decompressed_bytes,
    plain_batch_ok,
    validate_batch,
    validate_legacy_batch,
)
from tests.logutil import make_log, read_all_values

T0 = 1_700_000_000_000
CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD]


# Helpers -------------------------------------------------------------------------------------------------------

def kp_batch(n: int = 3, codec: CompressionType = CompressionType.NONE, *, headers: bool = False,
             value: bytes = b"value") -> bytes:
    """A batch built by kafka-python (base offset 0, as a client sends it)."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=int(codec), is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 24)
    for i in range(n):
        b.append(i, timestamp=T0 + i, key=b"k%d" % i, value=value + b"%d" % i,
                 headers=[("trace", b"t%d" % i)] if headers else [])
    return bytes(b.build())


def batch_with(body: bytes, *, count: int, last_offset_delta: int | None = None, attributes: int = 0,
               producer_id: int = -1, base_sequence: int = -1) -> bytearray:
    """A v2 batch around ``body`` (records, compressed or not) with a correct CRC."""
    out = bytearray(RECORD_BATCH_OVERHEAD) + body
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    BATCH_HEADER.pack_into(out, 0, 0, len(out) - 12, -1, 2, 0, attributes, lod, T0, T0, producer_id, 0,
                           base_sequence, count)
    return restamp(out)


def restamp(buf: bytearray) -> bytearray:
    """Recompute the CRC after bytes changed (so only the rule under test can refuse the batch)."""
    buf[CRC_OFFSET:ATTRIBUTES_OFFSET] = crc32c.crc32c(bytes(buf[ATTRIBUTES_OFFSET:])).to_bytes(4, "big")
    return buf


def record_bytes(delta: int, key: bytes | None = b"k", value: bytes | None = b"v",
                 headers: tuple[tuple[str, bytes | None], ...] = ()) -> bytearray:
    out = bytearray()
    encode_record(out, delta, 0, key, value, headers)
    return out


def raw_record(fields: bytes) -> bytes:
    """A record whose fields (after the length) are given as bytes: the length is computed."""
    out = bytearray()
    encode_varint(len(fields), out)
    return bytes(out + fields)


def varints(*values: int) -> bytes:
    out = bytearray()
    for v in values:
        encode_varint(v, out)
    return bytes(out)


def assert_refused(log: Log, batch: bytes | bytearray, error: type[Exception], match: str,
                   origin: AppendOrigin = AppendOrigin.CLIENT) -> None:
    """The append raises ``error`` saying ``match`` and writes nothing."""
    end, size = log.log_end_offset, log.active_segment.size
    with pytest.raises(error, match=match):
        log.append(MemoryRecords(bytes(batch)), origin=origin)
    assert (log.log_end_offset, log.active_segment.size) == (end, size)


# Valid batches pass, on both paths ---------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name_lower)
@pytest.mark.parametrize("headers", [False, True])
def test_kafka_python_batches_are_accepted_and_read_back(tmp_path: Path, codec: CompressionType, headers: bool) -> None:
    log = make_log(tmp_path)
    for _ in range(2):
        log.append(MemoryRecords(kp_batch(5, codec, headers=headers)))
    assert log.log_end_offset == 10
    assert [v for _, v in read_all_values(log)] == [b"value%d" % i for i in range(5)] * 2


def test_plain_batches_take_the_fast_path_and_odd_ones_do_not() -> None:
    plain = bytearray(bytes(MemoryRecords.build([SimpleRecord(T0, b"k", b"v" * 1024) for _ in range(16)])))
    header = BATCH_HEADER.unpack_from(plain)
    assert plain_batch_ok(plain, len(plain), header[5], header[6], header[12])
    # headers, a compacted topic without keys: valid, but the fast walk leaves them to the general path
    with_headers = bytearray(kp_batch(3, headers=True))
    h = BATCH_HEADER.unpack_from(with_headers)
    assert not plain_batch_ok(with_headers, len(with_headers), h[5], h[6], h[12])
    keyless = bytearray(bytes(MemoryRecords.build([SimpleRecord(T0, None, b"v")])))
    h = BATCH_HEADER.unpack_from(keyless)
    assert plain_batch_ok(keyless, len(keyless), h[5], h[6], h[12])
    assert not plain_batch_ok(keyless, len(keyless), h[5], h[6], h[12], compacted=True)


def test_a_batch_with_many_records_and_large_values_is_accepted(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    recs = [SimpleRecord(T0 + i * 1000, b"key-%d" % i, os.urandom(i * 37 % 5000)) for i in range(300)]
    for codec in CODECS:
        info = log.append(MemoryRecords.build(recs, codec))
        assert info.last_offset - info.first_offset == 299


# The count rule -----------------------------------------------------------------------------------------------

def test_a_one_record_batch_claiming_last_offset_delta_one_million_is_refused(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(MemoryRecords(kp_batch(1)))
    batch = batch_with(bytes(record_bytes(0)), count=1, last_offset_delta=1_000_000)
    assert_refused(log, batch, InvalidRecordError, "lastOffsetDelta")
    assert log.log_end_offset == 1


@pytest.mark.parametrize(("count", "last_offset_delta"), [(0, -1), (-1, -2), (-(2**31), 0)])
def test_a_record_count_below_one_is_refused(tmp_path: Path, count: int, last_offset_delta: int) -> None:
    log = make_log(tmp_path)
    batch = batch_with(b"", count=count, last_offset_delta=last_offset_delta)
    assert_refused(log, batch, InvalidRecordError, f"declares {count} records")


def test_more_records_than_the_count_is_refused(tmp_path: Path) -> None:
    body = bytes(record_bytes(0) + record_bytes(1))
    assert_refused(make_log(tmp_path), batch_with(body, count=1), InvalidRecordError, "more bytes follow")


def test_fewer_records_than_the_count_is_refused(tmp_path: Path) -> None:
    body = bytes(record_bytes(0) + record_bytes(1))
    assert_refused(make_log(tmp_path), batch_with(body, count=3), InvalidRecordError, "ends after 2")


# Offset deltas ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("deltas", [[0, 2, 1], [1, 2, 3], [0, 0, 1], [0, 1, 70]])
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name_lower)
def test_offset_deltas_must_run_zero_to_n_minus_one(tmp_path: Path, deltas: list[int], codec: CompressionType) -> None:
    body = b"".join(bytes(record_bytes(d)) for d in deltas)
    compressed = codec.compress(body)
    batch = batch_with(compressed, count=len(deltas), attributes=int(codec))
    assert_refused(make_log(tmp_path), batch, InvalidRecordError, "offset delta")


# Malformed records, uncompressed and compressed ---------------------------------------------------------------

MALFORMED: dict[str, tuple[bytes, str]] = {
    "0xff body": (b"\xff" * 64, "varint longer than 5 bytes"),
    "key runs past the record": (raw_record(b"\x00" + varints(0, 0, 50) + b"key"), "key of 50 bytes"),
    "value runs past the record": (raw_record(b"\x00" + varints(0, 0, -1, 9) + b"v"), "value of 9 bytes"),
    "negative header count": (raw_record(b"\x00" + varints(0, 0, -1, -1, -3)), "-3 headers"),
    "header key not utf-8": (raw_record(b"\x00" + varints(0, 0, -1, -1, 1, 2) + b"\xc3\x28" + varints(-1)),
                             "not UTF-8"),
    "null header key": (raw_record(b"\x00" + varints(0, 0, -1, -1, 1, -1, -1)), "header 0 has a key of -1"),
    "fields shorter than the length": (raw_record(b"\x00" + varints(0, 0, -1, -1, 0) + b"extra"), "more than its fields"),
    "timestamp varlong of 11 bytes": (raw_record(b"\x00" + b"\x80" * 10 + b"\x00" + varints(0, -1, -1, 0)),
                                      "longer than 10 bytes"),
    "record length past the batch": (varints(500) + b"\x00\x00\x00", "past|ends first"),
    "empty record": (varints(0), "length of 0 bytes|is empty"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name_lower)
def test_malformed_records_are_refused(tmp_path: Path, name: str, codec: CompressionType) -> None:
    body, match = MALFORMED[name]
    batch = batch_with(codec.compress(body), count=1, attributes=int(codec))
    assert_refused(make_log(tmp_path), batch, InvalidRecordError, match)


def test_a_batch_of_0xff_bytes_with_a_valid_crc_is_refused(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    whole = bytearray(b"\xff" * 200)
    BATCH_HEADER.pack_into(whole, 0, 0, 188, -1, 2, 0, -1, -1, -1, -1, -1, -1, -1, -1)
    whole[ATTRIBUTES_OFFSET:] = b"\xff" * (200 - ATTRIBUTES_OFFSET)
    assert_refused(log, restamp(whole), CorruptRecordError, "unknown compression codec 7")
    body_only = batch_with(b"\xff" * 139, count=3)
    assert_refused(log, body_only, InvalidRecordError, "varint")


def test_a_compacted_topic_needs_keys(tmp_path: Path) -> None:
    log = make_log(tmp_path, cleanup_policy="compact")
    for codec in CODECS:
        assert_refused(log, bytes(MemoryRecords.build([SimpleRecord(T0, None, b"v")], codec)), InvalidRecordError,
                       "no key")
        log.append(MemoryRecords.build([SimpleRecord(T0, b"k", b"v")], codec))
    assert log.log_end_offset == len(CODECS)


def test_a_producer_id_needs_a_base_sequence_from_a_client(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    batch = bytes(MemoryRecords.build([SimpleRecord(T0, b"k", b"v")], producer_id=5, producer_epoch=0))
    assert_refused(log, batch, InvalidRecordError, "base sequence -1")


def test_control_batches_hold_control_records_and_a_marker_alone(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    two = batch_with(bytes(record_bytes(0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00") + record_bytes(1)),
                     count=2, attributes=0x30, producer_id=1)
    assert_refused(log, two, InvalidRecordError, "COMMIT marker batch holds 2 records")
    kraft = batch_with(bytes(record_bytes(0, b"\x00\x00\x00\x05", b"\x00\x00\x00\x01")
                             + record_bytes(1, b"\x00\x00\x00\x06", b"voters")), count=2, attributes=0x20)
    log.append(MemoryRecords(bytes(kraft)), origin=AppendOrigin.COORDINATOR)  # KRAFT_VERSION + KRAFT_VOTERS
    assert log.log_end_offset == 2
    bad_key = batch_with(bytes(record_bytes(0, b"\x00", b"x")), count=1, attributes=0x30, producer_id=1)
    assert_refused(log, bad_key, InvalidRecordError, "control record key")
    bad_marker = batch_with(bytes(record_bytes(0, b"\x00\x00\x00\x01", b"\x00")), count=1, attributes=0x30,
                            producer_id=1)
    assert_refused(log, bad_marker, InvalidRecordError, "marker value too short")


def test_an_unknown_codec_is_refused(tmp_path: Path) -> None:
    for codec_id in (5, 6, 7):
        batch = batch_with(bytes(record_bytes(0)), count=1, attributes=codec_id)
        assert_refused(make_log(tmp_path / str(codec_id)), batch, CorruptRecordError, f"codec {codec_id}")


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.name_lower)
def test_undecodable_and_truncated_compressed_data_is_refused(tmp_path: Path, codec: CompressionType) -> None:
    log = make_log(tmp_path)
    compressed = codec.compress(b"".join(bytes(record_bytes(i, value=b"v" * 300)) for i in range(20)))
    assert_refused(log, batch_with(b"\x01garbage" * 5, count=20, attributes=int(codec)), CorruptRecordError,
                   "cannot decompress|xerial|past the data")
    assert_refused(log, batch_with(compressed[:-3], count=20, attributes=int(codec)), KafkaStorageError,
                   "cannot decompress|xerial|past the data|ends")
    log.append(MemoryRecords(bytes(batch_with(compressed, count=20, attributes=int(codec)))))
    assert log.log_end_offset == 20


def test_legacy_batches_are_not_appended(tmp_path: Path) -> None:
    legacy = build_legacy_message(0, b"k", b"v", magic=1, timestamp=T0)
    assert_refused(make_log(tmp_path), legacy, InvalidRecordError, "only magic v2")


def test_follower_appends_keep_compacted_batches(tmp_path: Path) -> None:
    """A compacted batch holds fewer records than its offset range: a follower takes it as the leader wrote it."""
    log = make_log(tmp_path)
    batch = batch_with(bytes(record_bytes(0)), count=1, last_offset_delta=4)
    info = log.append_as_follower(MemoryRecords(bytes(batch)))
    assert (info.first_offset, info.last_offset) == (0, 4)
    with pytest.raises(InvalidRecordError, match="lastOffsetDelta"):
        log.append(MemoryRecords(bytes(batch)))


# Decompressed size ---------------------------------------------------------------------------------------------

def test_the_decompressed_bound_is_a_multiple_of_max_message_bytes() -> None:
    assert max_decompressed_bytes(1_048_588) == 32 * 1_048_588
    assert max_decompressed_bytes(1000) == DECOMPRESSED_SIZE_FLOOR
    assert max_decompressed_bytes(100 << 20) == 256 << 20


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD],
                         ids=lambda c: c.name_lower)
def test_a_batch_inflating_past_the_bound_is_refused(tmp_path: Path, codec: CompressionType) -> None:
    log = make_log(tmp_path, max_message_bytes=16 * 1024)  # bound: the 1 MiB floor
    recs = [SimpleRecord(T0, b"k%d" % i, bytes(64 * 1024)) for i in range(20)]  # 1.25 MiB of zeros
    batch = bytes(MemoryRecords.build(recs, codec))
    assert len(batch) <= 16 * 1024
    assert_refused(log, batch, DecompressedSizeError, "more than 1048576 bytes")
    log.append(MemoryRecords.build(recs[:15], codec))  # 960 KiB: within the bound
    assert log.log_end_offset == 15


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.name_lower)
def test_every_codec_stops_at_the_bound(codec: CompressionType) -> None:
    """(snappy inflates at most ~21x, so no batch within max.message.bytes reaches the bound: asked directly.)"""
    recs = [SimpleRecord(T0, b"k%d" % i, bytes(10_000)) for i in range(20)]
    batch = RecordBatch(MemoryRecords.build(recs, codec).buffer)
    with pytest.raises(DecompressedSizeError, match="more than 100000 bytes"):
        validate_batch(batch, 0, "t-0", from_client=True, max_decompressed=100_000)
    validate_batch(batch, 0, "t-0", from_client=True, max_decompressed=300_000)


def zstd_frame(parts: list[tuple[str, bytes, int]]) -> bytes:
    """A zstd frame assembled by hand: ("raw", data, 0) and ("rle", byte, count) blocks, 128 KiB at most each."""
    out = bytearray((0xFD2FB528).to_bytes(4, "little") + bytes([0x00, (17 - 10) << 3]))  # no content size; 128 KiB window
    blocks: list[tuple[int, int, bytes]] = []
    for kind, data, count in parts:
        if kind == "raw":
            for i in range(0, len(data), 1 << 17):
                piece = data[i : i + (1 << 17)]
                blocks.append((0, len(piece), piece))
        else:
            while count:
                n = min(count, 1 << 17)
                blocks.append((1, n, data))
                count -= n
    for i, (block_type, size, payload) in enumerate(blocks):
        header = (size << 3) | (block_type << 1) | (i == len(blocks) - 1)
        out += header.to_bytes(3, "little") + payload
    return bytes(out)


def bomb_batch(value_sizes: list[int]) -> bytes:
    """A zstd batch of records whose values are zeros of the given sizes: a few KiB that inflate to their sum."""
    parts: list[tuple[str, bytes, int]] = []
    for i, size in enumerate(value_sizes):
        fields = bytearray(b"\x00") + varints(0, i, -1, size)
        length = bytearray()
        encode_varint(len(fields) + size + 1, length)
        parts.append(("raw", bytes(length + fields), 0))
        parts.append(("rle", b"\x00", size))
        parts.append(("raw", b"\x00", 0))  # no headers
    return bytes(batch_with(zstd_frame(parts), count=len(value_sizes), attributes=int(CompressionType.ZSTD)))


def test_the_hand_made_zstd_frame_is_a_real_one() -> None:
    batch = RecordBatch(bomb_batch([10, 300_000]))
    assert [len(r.value or b"") for r in batch.records()] == [10, 300_000]


def test_a_64_kib_zstd_batch_inflating_to_2_gib_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """Peak RSS of a child process that appends the bomb, against the same child before it appends."""
    sizes = [20 << 20] + [30 << 20] * 68  # 20 MiB, then 2 GiB: the 32 MiB bound falls inside record 1
    batch = bomb_batch(sizes)
    assert len(batch) < 70 * 1024
    path = tmp_path / "bomb.bin"
    path.write_bytes(batch)
    script = textwrap.dedent(f"""
        import resource, sys
        from pathlib import Path
        from local.config import LogConfig
        from local.errors import InvalidRecordError
        from local.log import Log
        from local.records import MemoryRecords
        config = LogConfig.from_properties({{"log.dirs": {str(tmp_path)!r}}}).topic_config()
        log = Log.open(Path({str(tmp_path / "t-0")!r}), config)
        data = MemoryRecords(Path({str(path)!r}).read_bytes())
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            log.append(data)
        except InvalidRecordError as exc:
            print("refused", type(exc).__name__, exc, file=sys.stderr)
        else:
            raise SystemExit("accepted")
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(before, after, log.log_end_offset, log.active_segment.size)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "DecompressedSizeError" in done.stderr and "more than 33554816 bytes" in done.stderr
    before_kib, after_kib, end, size = map(int, done.stdout.split())
    assert (end, size) == (0, 0)
    assert after_kib - before_kib < 160 * 1024  # a record of 20 MiB and the bound, never the 2 GiB


def test_check_records_holds_one_record_and_one_chunk() -> None:
    """Fed in pieces, the checker finds the same errors as fed whole."""
    body = b"".join(bytes(record_bytes(i, b"k%d" % i, b"v" * (i * 13))) for i in range(50))
    pieces = [body[i : i + 7] for i in range(0, len(body), 7)]
    check_records(pieces, 50, 1 << 20)
    with pytest.raises(InvalidRecordError, match="ends after 50"):
        check_records(pieces, 51, 1 << 20)
    with pytest.raises(InvalidRecordError, match="declares a length of 5000 bytes"):
        check_records([varints(5000) + b"\x00"], 1, 100)


# Legacy (v0/v1) ------------------------------------------------------------------------------------------------

def legacy_wrapper(inner: bytes, *, magic: int = 1, offset: int = 0, codec: CompressionType = CompressionType.GZIP) -> bytes:
    return build_legacy_message(offset, None, codec.compress(inner), magic=magic, timestamp=T0, attributes=int(codec))


def test_a_legacy_wrapper_with_no_inner_messages_is_invalid() -> None:
    wrapper = LegacyRecordBatch(legacy_wrapper(b""))
    with pytest.raises(InvalidRecordError, match="no inner messages"):
        validate_legacy_batch(wrapper)
    with pytest.raises(InvalidRecordError, match="no inner messages"):
        _ = wrapper.base_offset  # was a bare StopIteration


def test_legacy_compression_nests_one_level_only() -> None:
    message = build_legacy_message(0, None, b"v", magic=0)
    for _ in range(1000):  # 1000 levels: was a RecursionError
        message = legacy_wrapper(message, magic=0)
    with pytest.raises(InvalidRecordError, match="nest one level"):
        validate_legacy_batch(LegacyRecordBatch(message))
    two = legacy_wrapper(legacy_wrapper(build_legacy_message(0, None, b"v", magic=1)))
    with pytest.raises(InvalidRecordError, match="nest one level"):
        list(LegacyRecordBatch(two).records())


def test_a_one_level_legacy_wrapper_decodes() -> None:
    inner = b"".join(build_legacy_message(i, b"k", b"v%d" % i, magic=1, timestamp=T0) for i in range(3))
    wrapper = LegacyRecordBatch(legacy_wrapper(inner, offset=12))
    validate_legacy_batch(wrapper)
    assert [(r.offset, r.value) for r in wrapper.records()] == [(10, b"v0"), (11, b"v1"), (12, b"v2")]


def test_a_36_byte_legacy_entry_is_corrupt_not_a_struct_error() -> None:
    body = bytearray(b"\x01\x00" + T0.to_bytes(8, "big") + (4).to_bytes(4, "big") + b"abcd\x00\x00")  # ends in the value length
    crc = zlib.crc32(bytes(body)).to_bytes(4, "big")
    entry = (0).to_bytes(8, "big") + (len(body) + 4).to_bytes(4, "big") + crc + bytes(body)
    assert len(entry) == 36
    with pytest.raises(CorruptRecordError, match="value length"):
        list(LegacyRecordBatch(entry).records())


@pytest.mark.parametrize("mutate", [
    lambda inner: inner[:-3],  # a partial inner message
    lambda inner: inner[:20] + bytes([inner[20] ^ 0xFF]) + inner[21:],  # an inner CRC mismatch
], ids=["partial inner message", "inner crc"])
def test_a_damaged_inner_message_set_is_corrupt(mutate: Callable[[bytes], bytes]) -> None:
    inner = b"".join(build_legacy_message(i, b"k", b"value", magic=1, timestamp=T0) for i in range(2))
    with pytest.raises(KafkaStorageError):
        validate_legacy_batch(LegacyRecordBatch(legacy_wrapper(mutate(inner))))


# Recovery truncates at a malformed batch, and the LogManager starts -------------------------------------------

def _legacy_36_bytes(offset: int) -> bytes:
    body = b"\x01\x00" + T0.to_bytes(8, "big") + (4).to_bytes(4, "big") + b"abcd\x00\x00"
    return offset.to_bytes(8, "big") + (len(body) + 4).to_bytes(4, "big") + zlib.crc32(body).to_bytes(4, "big") + body


def _nested_legacy(offset: int, levels: int) -> bytes:
    message = build_legacy_message(0, None, b"v", magic=0)
    for _ in range(levels):
        message = legacy_wrapper(message, magic=0, offset=offset)
    return message


def _v2_bad_crc() -> bytes:
    batch = bytearray(kp_batch(2))
    batch[-1] ^= 0x01
    return bytes(batch)


MALFORMED_BATCHES: dict[str, Callable[[int], bytes]] = {
    "empty legacy wrapper": lambda offset: legacy_wrapper(b"", offset=offset),
    "legacy nested 1000 deep": lambda offset: _nested_legacy(offset, 1000),
    "legacy nested twice": lambda offset: _nested_legacy(offset, 2),
    "36-byte legacy entry": _legacy_36_bytes,
    "legacy wrapper of garbage": lambda offset: build_legacy_message(offset, None, b"\x1f\x8b garbage", magic=1,
                                                                     timestamp=T0, attributes=1),
    "legacy wrapper with codec 6": lambda offset: build_legacy_message(offset, None, b"x", magic=1, timestamp=T0,
                                                                       attributes=6),
    "v2 with codec 7": lambda offset: bytes(batch_with(bytes(record_bytes(0)), count=1, attributes=7)),
    "v2 with a bad crc": lambda offset: _v2_bad_crc(),
}


@pytest.mark.parametrize("name", list(MALFORMED_BATCHES))
def test_recovery_truncates_a_segment_at_a_malformed_batch(tmp_path: Path, name: str) -> None:
    log = make_log(tmp_path)
    for _ in range(3):
        log.append(MemoryRecords(kp_batch(2)))
    expected = read_all_values(log)
    valid_bytes = log.active_segment.size
    log.close()
    bad = bytearray(MALFORMED_BATCHES[name](100))
    if bad[16] == 2:  # a v2 batch: at the next offset, as the log would have written it
        bad[0:8] = (6).to_bytes(8, "big")
    with open(tmp_path / "topic-0" / "00000000000000000000.log", "ab") as f:
        f.write(bad + kp_batch(1))  # and a valid batch after it, which goes too
    log = make_log(tmp_path, clean=False)
    assert log.active_segment.size == valid_bytes
    assert log.log_end_offset == 6
    assert read_all_values(log) == expected
    log.append(MemoryRecords(kp_batch(1)))
    assert log.log_end_offset == 7


@pytest.mark.parametrize("name", ["empty legacy wrapper", "legacy nested 1000 deep", "36-byte legacy entry"])
def test_the_log_manager_starts_on_a_segment_holding_a_malformed_batch(tmp_path: Path, name: str) -> None:
    from local import filenames
    from local.config import LogConfig
    from local.manager import LogManager

    data = tmp_path / "data"
    config = LogConfig.from_properties({"log.dirs": str(data)})
    with LogManager(config, start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0)
        log.append(MemoryRecords(kp_batch(2)))
        expected = read_all_values(log)
    with open(data / "t-0" / "00000000000000000000.log", "ab") as f:
        f.write(MALFORMED_BATCHES[name](100))
    (data / filenames.CLEAN_SHUTDOWN_FILENAME).unlink()  # an unclean shutdown: the segment is recovered
    with LogManager(config, start_scheduler=False) as manager:
        log2 = manager.get_log("t", 0)
        assert log2 is not None and read_all_values(log2) == expected
        assert log2.log_end_offset == 2


def test_gzip_reads_like_javas_gzip_input_stream() -> None:
    """Members one after the other are one stream; bytes after the last member that start no member are ignored."""
    gzip = CompressionType.GZIP
    assert gzip.decompress(gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"
    assert gzip.decompress(gzip.compress(b"ab") + b"\x00trailing") == b"ab"
    with pytest.raises(CorruptRecordError):
        gzip.decompress(gzip.compress(b"ab") + b"\x1f\x8b\x08")  # a member that is cut


@pytest.mark.parametrize("partition", ["foo-0", "__cluster_metadata-0"])
def test_every_batch_a_kafka_broker_wrote_passes_the_rules(partition: str) -> None:
    """The golden log dir: an idempotent producer's batches and KRaft's metadata and control batches."""
    segment = Path(__file__).resolve().parents[1] / "fixtures" / "kafka-4.0-kraft-logs" / partition
    batches = list(MemoryRecords((segment / "00000000000000000000.log").read_bytes()).batches())
    assert batches
    for batch in batches:
        assert isinstance(batch, RecordBatch)
        validate_batch(batch, 0, partition, from_client=False, max_decompressed=max_decompressed_bytes(1_048_588))


# --- boundaries found by mutation testing (TESTING.md) --------------------------------------------------------

@pytest.mark.parametrize(("base", "max_ts", "ok"), [
    (1000, 1050, True),  # the max timestamp exactly message.timestamp.after.max.ms ahead: accepted, as in Kafka
    (1000, 1051, False),
    (900, 1000, True),  # the base timestamp exactly message.timestamp.before.max.ms behind: accepted
    (899, 1000, False),
    (899, 1051, False),  # both bounds broken
    (0, 0, False),  # timestamp 0 is a timestamp (the epoch), far behind
    (-1, -1, True),  # no timestamp
])
def test_create_time_bounds_at_their_exact_limits(base: int, max_ts: int, ok: bool) -> None:
    from local.validation import timestamps_within_bounds

    assert timestamps_within_bounds(base, max_ts, 1000, before_max_ms=100, after_max_ms=50) is ok


def test_a_client_batch_with_producer_id_0_needs_a_base_sequence_and_errors_carry_the_position() -> None:
    body = bytes(record_bytes(0))
    refused = RecordBatch(bytes(batch_with(body, count=1, producer_id=0, base_sequence=-1)))
    with pytest.raises(InvalidRecordError, match=r"^batch at position 7 of an append to t-0 has producer id 0 but "
                                                 r"base sequence -1") as info:
        validate_batch(refused, 7, "t-0", from_client=True, max_decompressed=1 << 20)
    assert info.value.context["position"] == 7
    validate_batch(RecordBatch(bytes(batch_with(body, count=1, producer_id=0, base_sequence=0))), 7, "t-0",
                   from_client=True, max_decompressed=1 << 20)
    for count, lod, match in ((0, -1, "declares 0 records"), (2, 0, "must be lastOffsetDelta")):
        with pytest.raises(InvalidRecordError, match=match) as info:
            validate_batch(RecordBatch(bytes(batch_with(body, count=count, last_offset_delta=lod))), 9, "t-0",
                           from_client=True, max_decompressed=1 << 20)
        assert info.value.context["position"] == 9


def test_the_fast_path_question_in_python_refuses_each_unplain_header_alone() -> None:
    from local.validation import _plain_client_batch

    body = bytes(record_bytes(0))
    assert _plain_client_batch(batch_with(body, count=1), 1 << 20, 1 << 30) is not None
    assert _plain_client_batch(batch_with(body, count=1, producer_id=0, base_sequence=0), 1 << 20, 1 << 30) is None
    moved = batch_with(body, count=1)
    moved[0:8] = (5).to_bytes(8, "big")  # a base offset, no producer id
    assert _plain_client_batch(moved, 1 << 20, 1 << 30) is None
    longer = batch_with(body, count=1)
    longer[8:12] = (len(longer) - 11).to_bytes(4, "big")  # a length that is not the buffer's
    assert _plain_client_batch(longer, 1 << 20, 1 << 30) is None


def test_the_fast_path_refuses_an_empty_batch_and_a_control_batch_with_plain_records() -> None:
    empty = batch_with(b"", count=0, last_offset_delta=-1)
    assert not plain_batch_ok(empty, len(empty), 0, -1, 0)
    body = bytes(record_bytes(0))
    control = batch_with(body, count=1, attributes=0x20)
    assert plain_batch_ok(batch_with(body, count=1), len(control), 0, 0, 1)
    assert not plain_batch_ok(control, len(control), 0x20, 0, 1)
    from local.validation import plain_records_ok

    null_key = record_bytes(0, key=None)
    assert plain_records_ok(null_key, 0, len(null_key), 1)  # keys are optional unless asked for


# What each refusal says, and where ------------------------------------------------------------------------------
# (Written against the survivors of the second mutation run of local/validation.py: messages, their context and the
# exact bounds of each rule.)

GOOD = bytes(record_bytes(0))  # record 0 of every case below: plain, so the walk passes it and stops at record 1


def headed(fields: bytes) -> bytes:
    """Record 1 from its fields after the attributes and timestamp delta (offset delta first)."""
    return raw_record(b"\x00" + varints(0) + fields)


ONE_HEADER = varints(1, 1) + b"h" + varints(1) + b"x"  # a header count of 1, then key "h", value "x"
SIX_BYTE_VARINT = b"\x82" + b"\x80" * 4 + b"\x00"  # 1 in six bytes: one more than a 5-byte field may take

RECORD_1_REFUSALS: dict[str, tuple[bytes, int, str]] = {
    "empty": (varints(0), 2, "record 1 is empty"),
    "negative length": (varints(-2), 2, "record 1 declares a length of -2 bytes"),
    "length past the data, the data ending within 5 bytes": (varints(50) + b"\x00", 2,
                                                              "record 1 declares 50 bytes but the batch's data ends first"),
    "length past the data": (varints(50) + bytes(10), 2, "record 1 declares 50 bytes but the batch's data ends first"),
    "too few records": (b"", 2, "the batch declares 2 records but its data ends after 1"),
    "timestamp varint of 11 bytes": (raw_record(b"\x00" + b"\x80" * 10 + b"\x00"), 2,
                                     "record 1: its timestamp delta is a varint longer than 10 bytes"),
    "ends inside the timestamp": (raw_record(b"\x00\x80\x80"), 2, "record 1 ends inside its timestamp delta"),
    "offset delta of 6 bytes": (headed(SIX_BYTE_VARINT), 2, "record 1: its offset delta is a varint longer than 5 bytes"),
    "ends inside the offset delta": (headed(b"\x82"), 2, "record 1 ends inside its offset delta"),
    "wrong offset delta": (headed(varints(5, 2) + b"kk" + varints(-1) + ONE_HEADER), 2,
                           "record 1 has offset delta 5: offset deltas must run 0..n-1 in order"),
    "key length of 6 bytes": (headed(varints(1) + SIX_BYTE_VARINT), 2,
                              "record 1: its key length is a varint longer than 5 bytes"),
    "ends inside the key length": (headed(varints(1) + b"\x82"), 2, "record 1 ends inside its key length"),
    "key past the record": (headed(varints(1, 50) + b"key"), 2, "record 1: its key of 50 bytes runs past the record"),
    "key ending the record": (headed(varints(1, 2) + b"kk"), 2, "record 1 ends inside its value length"),
    "value length of 6 bytes": (headed(varints(1, -1) + SIX_BYTE_VARINT), 2,
                                "record 1: its value length is a varint longer than 5 bytes"),
    "value past the record": (headed(varints(1, -1, 9) + b"v"), 2, "record 1: its value of 9 bytes runs past the record"),
    "value ending the record": (headed(varints(1, -1, 2) + b"vv"), 2, "record 1 ends inside its header count"),
    "header count of 6 bytes": (headed(varints(1, -1, -1) + SIX_BYTE_VARINT), 2,
                                "record 1: its header count is a varint longer than 5 bytes"),
    "negative header count": (headed(varints(1, -1, -1, -3)), 2, "record 1 declares -3 headers"),
    "header key length of 6 bytes": (headed(varints(1, -1, -1, 1) + SIX_BYTE_VARINT), 2,
                                     "record 1: its header 0 key length is a varint longer than 5 bytes"),
    "null header key": (headed(varints(1, -1, -1, 1, -1, -1)), 2, "record 1: header 0 has a key of -1 bytes"),
    "header key past the record": (headed(varints(1, -1, -1, 1, 50) + b"h"), 2,
                                   "record 1: header 0 has a key of 50 bytes"),
    "header key ending the record": (headed(varints(1, -1, -1, 1, 2) + b"hk"), 2,
                                     "record 1 ends inside its header 0 value length"),
    "header key not UTF-8": (headed(varints(1, -1, -1, 1, 2) + b"\xc3\x28" + varints(-1)), 2,
                             "record 1: header 0's key is not UTF-8"),
    "header value length of 6 bytes": (headed(varints(1, -1, -1, 1, 1) + b"h" + SIX_BYTE_VARINT), 2,
                                       "record 1: its header 0 value length is a varint longer than 5 bytes"),
    "header value past the record": (headed(varints(1, -1, -1, 1, 1) + b"h" + varints(9) + b"x"), 2,
                                     "record 1: header 0's value runs past the record"),
    "second header's null key": (headed(varints(1, -1, -1, 2, 1) + b"h" + varints(-1, -1, -1)), 2,
                                 "record 1: header 1 has a key of -1 bytes"),
    "bytes beyond the fields": (raw_record(b"\x00" + varints(0, 1, -1, -1) + ONE_HEADER + b"xyz"), 2,
                                "record 1 declares 3 bytes more than its fields take"),
    "more bytes than the records": (b"\x00", 1, "the batch declares 1 records but more bytes follow the last one"),
    "length varint of 6 bytes": (b"\x80" * 5 + b"\x00", 2, "record 1: its length is a varint longer than 5 bytes"),
    "ends inside the length": (b"\x80\x80", 2, "record 1 ends inside its length"),
}


@pytest.mark.parametrize("name", list(RECORD_1_REFUSALS))
def test_each_record_refusal_names_the_record_and_the_field(name: str) -> None:
    tail, count, message = RECORD_1_REFUSALS[name]
    with pytest.raises(InvalidRecordError) as info:
        check_records([GOOD + tail], count, 1 << 20)
    assert str(info.value) == message
    assert info.value.context == {"record": 1}


def test_the_fields_rules_accept_their_exact_limits() -> None:
    """Empty keys (a compacted topic included), empty header keys, null header values, null values, and a record
    exactly as long as the limit, each on the slow walk (the records carry headers)."""
    cases = [
        headed(varints(1, 0, -1) + ONE_HEADER),  # an empty key
        headed(varints(1, -1, -1, 1, 0, 1) + b"x"),  # an empty header key
        headed(varints(1, -1, 1) + b"v" + varints(1, 1) + b"h" + varints(-1)),  # a null header value
    ]
    for record in cases:
        check_records([GOOD + record], 2, 1 << 20)
    check_records([GOOD + cases[0]], 2, 1 << 20, require_key=True)
    keyless = headed(varints(1, -1, -1) + ONE_HEADER)
    check_records([GOOD + keyless], 2, 1 << 20)  # keys are optional unless asked for
    with pytest.raises(InvalidRecordError, match=r"^record 1 has no key, which a compacted topic requires$") as info:
        check_records([GOOD + keyless], 2, 1 << 20, require_key=True)
    assert info.value.context == {"record": 1}
    plain_keyless = bytes(record_bytes(1, key=None))
    with pytest.raises(InvalidRecordError, match=r"^record 1 has no key"):  # the fast walk asked for keys too
        check_records([GOOD + plain_keyless], 2, 1 << 20, require_key=True)
    length = len(keyless) - 1  # its length varint is one byte
    check_records([GOOD + keyless], 2, length)
    with pytest.raises(InvalidRecordError, match=f"^record 1 declares a length of {length} bytes$"):
        check_records([GOOD + keyless], 2, length - 1)


def test_a_plain_batch_is_checked_by_the_fast_walk_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The record-by-record checker runs only for what the walk cannot pass (headers, anything odd)."""
    import local.validation as validation

    calls: list[int] = []
    real = validation.check_records

    def counted(chunks: Iterable[bytes | memoryview], count: int, limit: int, require_key: bool = False) -> None:
        calls.append(count)
        real(chunks, count, limit, require_key)

    monkeypatch.setattr(validation, "check_records", counted)
    plain = RecordBatch(bytes(MemoryRecords.build([SimpleRecord(T0, b"k%d" % i, b"v") for i in range(40)])))
    validate_batch(plain, 0, "t-0", from_client=True, max_decompressed=1 << 20)
    assert calls == []
    validate_batch(RecordBatch(kp_batch(4, headers=True)), 0, "t-0", from_client=True, max_decompressed=1 << 20)
    assert calls == [4]


def test_a_commit_marker_batch_is_accepted_from_the_coordinator() -> None:
    marker = batch_with(bytes(record_bytes(0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x07")), count=1,
                        attributes=0x30, producer_id=3, base_sequence=-1)
    validate_batch(RecordBatch(bytes(marker)), 0, "t-0", from_client=False, max_decompressed=1 << 20)


def test_a_max_timestamp_of_zero_is_a_timestamp() -> None:
    from local.validation import timestamps_within_bounds

    # (a clock at -100 ms: only to tell 0, a real timestamp, from -1, none)
    assert not timestamps_within_bounds(-1, 0, -100, before_max_ms=1 << 40, after_max_ms=50)
    assert timestamps_within_bounds(-1, -1, -100, before_max_ms=1 << 40, after_max_ms=50)
    assert not timestamps_within_bounds(0, -1, 1000, before_max_ms=50, after_max_ms=1 << 40)


def _analyze(buffer: bytes | bytearray, *, client: bool = True, follower: bool = False,
             max_message_bytes: int = 1 << 20, segment_bytes: int = 1 << 30) -> tuple[list[RecordBatch], bool]:
    """A leader's append (from a client, or from the coordinator when not ``client``), or a follower's."""
    from local.validation import analyze_and_validate

    return analyze_and_validate(bytearray(buffer), "t-0", max_message_bytes=max_message_bytes,
                                segment_bytes=segment_bytes, from_client=client and not follower,
                                assign_offsets=not follower)


def _at(batch: bytes | bytearray, base_offset: int) -> bytes:
    moved = bytearray(batch)
    moved[0:8] = base_offset.to_bytes(8, "big", signed=True)  # outside the CRC
    return bytes(moved)


def _refusal(buffer: bytes | bytearray, error: type[Exception], message: str, context: dict[str, object],
             **kwargs: object) -> None:
    with pytest.raises(error) as info:
        _analyze(buffer, **kwargs)  # type: ignore[arg-type]
    assert str(info.value).startswith(message), str(info.value)
    assert {k: info.value.context.get(k) for k in context} == context  # type: ignore[attr-defined]


def test_each_append_refusal_names_the_batch_position_and_the_limit() -> None:
    from local.errors import RecordBatchTooLargeError, RecordTooLargeError

    good = kp_batch(2)
    n = len(good)
    _analyze(good + good, segment_bytes=2 * n)  # exactly segment.bytes
    _refusal(good + good, RecordBatchTooLargeError, f"append of {2 * n} bytes to t-0 exceeds segment.bytes {2 * n - 1}",
             {"size": 2 * n}, segment_bytes=2 * n - 1)
    _analyze(good + good, max_message_bytes=n)  # each batch exactly max.message.bytes
    _refusal(good + good, RecordTooLargeError,
             f"batch of {n} bytes at position 0 exceeds max.message.bytes {n - 1} for t-0", {"position": 0, "size": n},
             max_message_bytes=n - 1)
    flipped = bytearray(good)
    flipped[-1] ^= 1
    _refusal(good + flipped, CorruptRecordError, f"record batch at offset 0 is corrupt: position {n} of an append to t-0",
             {"position": n})
    _refusal(good + _at(good, 5), InvalidRecordError,
             f"the base offset of a batch appended by a client to t-0 must be 0, got 5 at position {n}",
             {"position": n, "offset": 5})
    unknown = batch_with(bytes(record_bytes(0)), count=1, attributes=6)
    _refusal(good + unknown, CorruptRecordError,
             f"batch at position {n} of an append to t-0 names an unknown compression codec 6", {"position": n})
    headed_bad = batch_with(GOOD + headed(varints(1, -1, -1, -3)), count=2)
    _refusal(good + headed_bad, InvalidRecordError,
             f"batch at position {n} of an append to t-0: record 1 declares -3 headers", {"position": n, "record": 1})
    zstd_bad = batch_with(CompressionType.ZSTD.compress(GOOD + headed(varints(1, -1, -1, -3))), count=2,
                          attributes=int(CompressionType.ZSTD))
    _refusal(good + zstd_bad, InvalidRecordError,
             f"batch at position {n} of an append to t-0: record 1 declares -3 headers", {"position": n, "record": 1})
    marker = batch_with(bytes(record_bytes(0, b"\x00\x00\x00\x01", b"\x00")), count=1, attributes=0x30, producer_id=1)
    _refusal(good + marker, InvalidRecordError,
             f"batch at position {n} of an append to t-0: end transaction marker value too short", {"position": n},
             client=False)


def test_what_follows_the_last_whole_batch_is_named() -> None:
    good = kp_batch(2)
    n = len(good)
    legacy = build_legacy_message(0, b"k", b"v", magic=1, timestamp=T0)
    for before in (good, good + good, good + good + good):  # the position counts every batch before it
        at = len(before)
        _refusal(before + legacy, InvalidRecordError,
                 f"only magic v2 batches can be appended to t-0; got magic 1 at position {at}", {"position": at})
    _refusal(good + bytes(5), CorruptRecordError, f"append to t-0: truncated batch header at position {n}",
             {"position": n})
    _refusal(good + good[:-1], CorruptRecordError,
             f"append to t-0: truncated batch at position {n}: declares {n} bytes, {n - 1} present", {"position": n})
    small = bytearray(good)
    small[8:12] = (20).to_bytes(4, "big")
    _refusal(good + small, CorruptRecordError, f"append to t-0: batch at position {n} declares size 32, below the minimum",
             {"position": n})


def test_a_follower_append_of_many_batches_keeps_every_one_in_order() -> None:
    a, b, c = kp_batch(2), kp_batch(3), kp_batch(1)
    batches, producer_ids = _analyze(_at(a, 0) + _at(b, 5) + _at(c, 9), follower=True)
    assert [(x.base_offset, x.last_offset) for x in batches] == [(0, 1), (5, 7), (9, 9)] and not producer_ids
    at = len(a) + len(b)
    _refusal(_at(a, 0) + _at(b, 5) + _at(c, 7), InvalidRecordError,
             f"out of order offsets in append to t-0: batch at position {at} starts at 7, expected at least 8",
             {"position": at, "offset": 7}, follower=True)
    _analyze(_at(a, 0) + _at(b, 2), follower=True)  # right after the previous batch
    _refusal(_at(a, -1), InvalidRecordError, "out of order offsets in append to t-0: batch at position 0 starts at -1, "
             "expected at least 0", {"position": 0, "offset": -1}, follower=True)


def test_the_append_says_whether_any_batch_carries_a_producer_id() -> None:
    plain = kp_batch(2)
    idempotent = batch_with(bytes(record_bytes(0)), count=1, producer_id=0, base_sequence=0)
    assert _analyze(plain + plain)[1] is False
    assert _analyze(plain + idempotent)[1] is True  # producer id 0 is a producer id
    assert _analyze(idempotent + plain)[1] is True  # and a later plain batch does not forget it


def test_keys_are_required_only_when_the_topic_is_compacted() -> None:
    from local.validation import analyze_and_validate

    keyless = bytes(MemoryRecords.build([SimpleRecord(T0, None, b"v")]))
    analyze_and_validate(bytearray(keyless), "t-0", max_message_bytes=1 << 20, segment_bytes=1 << 30,
                         from_client=True, assign_offsets=True)
    with pytest.raises(InvalidRecordError, match="no key"):
        analyze_and_validate(bytearray(keyless), "t-0", max_message_bytes=1 << 20, segment_bytes=1 << 30,
                             from_client=True, assign_offsets=True, compacted=True)


@pytest.mark.parametrize(("base", "max_ts", "message"), [
    (T0, T0 + 51, f"timestamp {T0 + 51} of a batch appended to t-0 is more than message.timestamp.after.max.ms=50 "
                  f"ahead of the broker time {T0}"),
    (T0 - 101, T0, f"timestamp {T0 - 101} of a batch appended to t-0 is more than "
                   f"message.timestamp.before.max.ms=100 behind the broker time {T0}"),
    (T0 - 101, T0 + 51, f"timestamp {T0 + 51} of a batch appended to t-0 is more than "  # the future is told first
                        f"message.timestamp.after.max.ms=50 ahead of the broker time {T0}"),
    (T0 - 101, T0 + 50, f"timestamp {T0 - 101} of a batch appended to t-0 is more than "  # the future bound is met
                        f"message.timestamp.before.max.ms=100 behind the broker time {T0}"),
    (-1, 0, "timestamp 0 of a batch appended to t-0 is more than message.timestamp.after.max.ms=50 ahead of the "
            "broker time -100"),  # (a clock at -100 ms: 0 is a timestamp, -1 none)
    (-1, T0 + 50, None), (T0 - 100, -1, None), (-1, -1, None),
])
def test_validate_timestamps_names_the_bound_and_the_timestamp(base: int, max_ts: int, message: str | None) -> None:
    from local.errors import InvalidTimestampError
    from local.validation import validate_timestamps

    buf = batch_with(bytes(record_bytes(0)), count=1)
    BATCH_HEADER.pack_into(buf, 0, 0, len(buf) - 12, -1, 2, 0, 0, 0, base, max_ts, -1, 0, -1, 1)
    batch = RecordBatch(bytes(restamp(buf)))
    now = T0 if max_ts else -100
    if message is None:
        validate_timestamps(batch, now, 100, 50, "t-0")
        return
    with pytest.raises(InvalidTimestampError) as info:
        validate_timestamps(batch, now, 100, 50, "t-0")
    assert str(info.value) == message
    assert info.value.context == {"timestamp": int(message.split()[1])}
    control = bytearray(batch.buffer)
    control[21:23] = (0x20).to_bytes(2, "big")  # a control batch: exempt from both bounds
    validate_timestamps(RecordBatch(bytes(restamp(control))), now, 100, 50, "t-0")
