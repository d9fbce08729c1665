"""The v2 batch header, its builder and its errors, field by field (local/records/batch.py).

test_records_codec.py checks whole batches round trip against kafka-python; these tests pin what a round
trip does not reach: the builder's defaults and attribute bits when several are set together, LogAppendTime
and the delete horizon, the compression level, sequence wrapping (Kafka's own test values, and kafka-python's
``last_sequence``), the in-place timestamp patch on compressed and transactional batches, empty batches, and
each error's message and context. kafka-python reads every batch built here where it can.
"""

from __future__ import annotations

import re
import struct

import cramjam
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from local.errors import CorruptRecordError, InvalidRecordError, KafkaStorageError
from local.records import (
    CompressionType,
    ControlRecordType,
    EndTransactionMarker,
    MemoryRecords,
    RecordBatch,
    SimpleRecord,
    TimestampType,
    set_max_timestamp,
)
from local.records.batch import (
    RECORD_BATCH_OVERHEAD,
    build_batch,
    increment_sequence,
)

INT32_MAX = 2**31 - 1
RECORDS = [SimpleRecord(1_000 + 10 * i, b"k%d" % i, b"value-%d" % i * 20) for i in range(6)]


def _kp(data: bytes | bytearray) -> DefaultRecordBatch:
    batch = DefaultRecordBatch(bytearray(data))
    assert batch.validate_crc()
    return batch


def _raised(exc_type: type[KafkaStorageError], call: object) -> KafkaStorageError:
    with pytest.raises(exc_type) as info:
        call()  # type: ignore[operator]
    return info.value


def _empty_batch(base_offset: int = 50) -> bytes:
    """A valid batch with no records (61 bytes): what compaction leaves to keep a producer's state."""
    out = bytearray(build_batch([SimpleRecord(1, None, b"x")], base_offset=base_offset, producer_id=4,
                                producer_epoch=0, base_sequence=9))
    del out[RECORD_BATCH_OVERHEAD:]
    struct.pack_into(">i", out, 8, RECORD_BATCH_OVERHEAD - 12)
    struct.pack_into(">i", out, 57, 0)
    struct.pack_into(">I", out, 17, cramjam_crc(out))
    return bytes(out)


def cramjam_crc(out: bytearray) -> int:
    import crc32c

    return int(crc32c.crc32c(bytes(out[21:])))


# --- the builder ---------------------------------------------------------------------------------------


def test_build_batch_defaults_to_a_plain_batch_at_offset_zero() -> None:
    data = build_batch([SimpleRecord(5, None, b"v")])
    kp = _kp(data)
    assert (kp.base_offset, kp.is_transactional, kp.is_control_batch, kp.timestamp_type) == (0, False, False, 0)
    assert (kp.producer_id, kp.producer_epoch, kp.base_sequence, kp.leader_epoch) == (-1, -1, -1, -1)
    assert kp.attributes == 0
    with pytest.raises(ValueError, match=r"^a record batch needs at least one record$"):
        build_batch([])


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD])
def test_log_append_time_sets_its_bit_beside_the_others_and_stamps_every_record(codec: CompressionType) -> None:
    data = build_batch(RECORDS, codec, log_append_time=77_777, producer_id=3, producer_epoch=0, base_sequence=0,
                       is_transactional=True)
    kp = _kp(data)
    assert (kp.timestamp_type, kp.compression_type, kp.is_transactional) == (1, int(codec), True)
    assert kp.max_timestamp == 77_777 and kp.first_timestamp == RECORDS[0].timestamp
    assert [r.timestamp for r in kp] == [77_777] * len(RECORDS)
    ours = RecordBatch(data)
    assert ours.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in ours.records()] == [77_777] * len(RECORDS)


def test_log_append_time_type_without_a_time_keeps_the_records_max_timestamp() -> None:
    data = build_batch(RECORDS, CompressionType.GZIP, timestamp_type=TimestampType.LOG_APPEND_TIME)
    kp = _kp(data)
    assert (kp.timestamp_type, kp.compression_type) == (1, int(CompressionType.GZIP))
    assert kp.max_timestamp == max(r.timestamp for r in RECORDS)


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD])
def test_delete_horizon_is_the_base_timestamp_with_its_bit_beside_the_others(codec: CompressionType) -> None:
    horizon = 500  # below every record's timestamp: deltas stay positive
    data = build_batch(RECORDS, codec, delete_horizon_ms=horizon, producer_id=3, producer_epoch=0, base_sequence=0,
                       is_transactional=True)
    kp = _kp(data)
    assert kp.first_timestamp == horizon
    assert kp.attributes & 0x40 and kp.is_transactional and kp.compression_type == int(codec)
    assert [r.timestamp for r in kp] == [r.timestamp for r in RECORDS]
    ours = RecordBatch(data)
    assert (ours.has_delete_horizon, ours.delete_horizon_ms) == (True, horizon)
    assert [r.timestamp for r in ours.records()] == [r.timestamp for r in RECORDS]
    plain = RecordBatch(build_batch(RECORDS, codec))
    assert (plain.has_delete_horizon, plain.delete_horizon_ms, plain.base_timestamp) == (False, None, 1_000)


def test_the_compression_level_reaches_the_compressor() -> None:
    body = build_batch(RECORDS * 20)[RECORD_BATCH_OVERHEAD:]
    fast = build_batch(RECORDS * 20, CompressionType.GZIP, compression_level=1)[RECORD_BATCH_OVERHEAD:]
    best = build_batch(RECORDS * 20, CompressionType.GZIP, compression_level=9)[RECORD_BATCH_OVERHEAD:]
    assert fast == bytes(cramjam.gzip.compress(body, 1))
    assert best == bytes(cramjam.gzip.compress(body, 9))
    assert fast != best, "levels 1 and 9 must differ on this data for the test to mean anything"


# --- sequences -----------------------------------------------------------------------------------------


def test_increment_sequence_wraps_like_kafka() -> None:
    # DefaultRecordBatchTest.testIncrementSequence, and the exact boundary either side
    assert increment_sequence(5, 5) == 10
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 5, 10) == 4
    assert increment_sequence(INT32_MAX - 5, 5) == INT32_MAX
    assert increment_sequence(INT32_MAX - 5, 6) == 0
    assert increment_sequence(INT32_MAX - 1, 0) == INT32_MAX - 1


@pytest.mark.parametrize("base_sequence", [0, INT32_MAX - 9, INT32_MAX - 8, INT32_MAX - 3, INT32_MAX])
def test_last_sequence_matches_kafka_python_across_the_wrap(base_sequence: int) -> None:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=1,
                                        producer_epoch=0, base_sequence=base_sequence, batch_size=1 << 20)
    for i in range(10):
        builder.append(i, timestamp=i, key=None, value=b"v", headers=[])
    data = bytes(builder.build())
    assert RecordBatch(data).last_sequence == _kp(data).last_sequence


# --- in-place patches ----------------------------------------------------------------------------------


def test_set_max_timestamp_flips_only_the_timestamp_bit_of_a_compressed_transactional_batch() -> None:
    buf = bytearray(build_batch(RECORDS, CompressionType.GZIP, producer_id=3, producer_epoch=0, base_sequence=0,
                                is_transactional=True) + build_batch(RECORDS, base_offset=6))
    second = len(buf) - len(build_batch(RECORDS, base_offset=6))
    set_max_timestamp(buf, 0, TimestampType.LOG_APPEND_TIME, 90_000)
    kp = _kp(buf[:second])
    assert (kp.timestamp_type, kp.compression_type, kp.is_transactional) == (1, int(CompressionType.GZIP), True)
    assert kp.max_timestamp == 90_000 and [r.timestamp for r in kp] == [90_000] * len(RECORDS)
    set_max_timestamp(buf, 0, TimestampType.CREATE_TIME, 2_000)
    kp = _kp(buf[:second])
    assert (kp.timestamp_type, kp.compression_type, kp.is_transactional) == (0, int(CompressionType.GZIP), True)
    assert kp.max_timestamp == 2_000 and [r.timestamp for r in kp] == [r.timestamp for r in RECORDS]
    # a batch further into the buffer: positions are relative to it, and its CRC covers it only
    set_max_timestamp(buf, second, TimestampType.LOG_APPEND_TIME, 123)
    kp = _kp(buf[second:])
    assert (kp.base_offset, kp.timestamp_type, kp.max_timestamp) == (6, 1, 123)
    assert _kp(buf[:second]).max_timestamp == 2_000


# --- views ---------------------------------------------------------------------------------------------


def test_an_empty_batch_of_just_the_header_parses_with_no_records() -> None:
    data = _empty_batch()
    assert len(data) == RECORD_BATCH_OVERHEAD
    assert list(_kp(data)) == []
    batch = RecordBatch(data)
    batch.ensure_valid()
    assert (len(batch), batch.size_in_bytes, batch.records_count) == (61, 61, 0)
    assert list(batch.records()) == []
    assert (batch.producer_id, batch.base_sequence) == (4, 9)


def test_len_is_the_size_in_bytes() -> None:
    data = build_batch(RECORDS)
    assert len(RecordBatch(data)) == RecordBatch(data).size_in_bytes == len(data) == _kp(data).size_in_bytes


def test_timestamp_type_from_name_reads_the_config_spellings() -> None:
    for name in ("CreateTime", "createtime", "CREATE_TIME", "create_time"):
        assert TimestampType.from_name(name) is TimestampType.CREATE_TIME
    for name in ("LogAppendTime", "LOG_APPEND_TIME", "log_append_time"):
        assert TimestampType.from_name(name) is TimestampType.LOG_APPEND_TIME
    with pytest.raises(ValueError, match=r"^unknown timestamp type 'Create-Time': CreateTime or LogAppendTime$"):
        TimestampType.from_name("Create-Time")


# --- control records -----------------------------------------------------------------------------------


def test_control_keys_and_end_transaction_markers_are_kafkas_bytes() -> None:
    # version 0, then the type, both int16 (ControlRecordType.java; EndTransactionMarker.java)
    assert ControlRecordType.COMMIT.key_bytes() == b"\x00\x00\x00\x01"
    assert ControlRecordType.ABORT.key_bytes() == b"\x00\x00\x00\x00"
    assert ControlRecordType.parse(b"\x00\x00\x00\x05") is ControlRecordType.KRAFT_VERSION
    assert ControlRecordType.parse(b"\x00\x00\x7f\x00") is ControlRecordType.UNKNOWN
    assert ControlRecordType.parse(b"\x00\x01\xff\xff") is ControlRecordType.UNKNOWN, "type -1 is read signed"
    marker = EndTransactionMarker(ControlRecordType.COMMIT, 7)
    assert marker.control_type is ControlRecordType.COMMIT
    assert marker.encode() == b"\x00\x00\x00\x00\x00\x07"
    decoded = EndTransactionMarker.decode(ControlRecordType.ABORT, b"\x00\x00\x00\x00\x00\x09")
    assert (decoded.control_type, decoded.coordinator_epoch) == (ControlRecordType.ABORT, 9)


def test_control_key_and_marker_errors_name_what_is_wrong() -> None:
    for key in (None, b"\x00\x00\x01"):
        with pytest.raises(InvalidRecordError, match="^" + re.escape(f"control record key must be at least 4 bytes, got {key!r}") + "$"):
            ControlRecordType.parse(key)
    with pytest.raises(InvalidRecordError, match=r"^invalid control record key version -1$"):
        ControlRecordType.parse(b"\xff\xff\x00\x01")
    for value in (None, b"\x00\x00\x00\x00\x01"):
        with pytest.raises(InvalidRecordError, match="^" + re.escape(f"end transaction marker value too short: {value!r}") + "$"):
            EndTransactionMarker.decode(ControlRecordType.COMMIT, value)
    with pytest.raises(InvalidRecordError, match=r"^invalid end transaction marker version -2$"):
        EndTransactionMarker.decode(ControlRecordType.COMMIT, b"\xff\xfe\x00\x00\x00\x01")
    with pytest.raises(ValueError, match=r"^an end transaction marker is COMMIT or ABORT, not LEADER_CHANGE$"):
        EndTransactionMarker(ControlRecordType.LEADER_CHANGE, 1)


# --- errors: message and context -----------------------------------------------------------------------


def test_header_errors_name_the_batch_and_carry_their_context() -> None:
    good = build_batch(RECORDS, base_offset=300)
    short = _raised(CorruptRecordError, lambda: RecordBatch(good[:60]))
    assert str(short) == "record batch of 60 bytes is shorter than the 61-byte header"
    assert short.context == {"size": 60}
    magic = bytearray(good)
    magic[16] = 1
    wrong = _raised(CorruptRecordError, lambda: RecordBatch(bytes(magic)))
    assert str(wrong) == "batch at offset 300 has magic 1, expected 2"
    assert wrong.context == {"offset": 300}
    cut = _raised(CorruptRecordError, lambda: RecordBatch(good[:-1]))
    assert str(cut) == f"batch at offset 300 declares {len(good)} bytes but {len(good) - 1} were given"
    assert cut.context == {"offset": 300}


def test_crc_error_carries_stored_and_computed_crcs() -> None:
    bad = bytearray(build_batch(RECORDS, base_offset=8))
    bad[-1] ^= 0xFF
    batch = RecordBatch(bytes(bad))
    computed = batch.compute_checksum()
    assert computed != batch.crc and not batch.is_valid()
    error = _raised(CorruptRecordError, batch.ensure_valid)
    assert str(error) == (f"record batch at offset 8 is corrupt: stored crc {batch.crc:#010x}, computed "
                          f"{computed:#010x} ({len(bad)} bytes)")
    assert error.context == {"offset": 8, "crc": batch.crc, "computed": computed}


def test_record_decoding_errors_name_the_batch_offset() -> None:
    good = build_batch(RECORDS, base_offset=40)
    negative = bytearray(good)
    struct.pack_into(">i", negative, 57, -1)
    error = _raised(InvalidRecordError, lambda: list(RecordBatch(bytes(negative)).records()))
    assert str(error) == "batch at offset 40 declares -1 records"
    assert error.context == {"offset": 40}
    more = bytearray(good)
    struct.pack_into(">i", more, 57, len(RECORDS) + 1)
    error = _raised(InvalidRecordError, lambda: list(RecordBatch(bytes(more)).records()))
    assert str(error).startswith(f"invalid batch at offset 40: batch declares {len(RECORDS) + 1} records")
    assert error.context == {"offset": 40}
    # a record length pointing past the data: the record decoder's own error, wrapped with the batch offset
    torn = bytearray(good)
    torn[RECORD_BATCH_OVERHEAD] = 0x7E  # the first record's length varint: 63 bytes, more than there are
    torn = torn[: RECORD_BATCH_OVERHEAD + 20]
    struct.pack_into(">i", torn, 8, len(torn) - 12)
    error = _raised(InvalidRecordError, lambda: list(RecordBatch(bytes(torn)).records()))
    assert str(error).startswith("invalid batch at offset 40: ")
    assert error.context == {"offset": 40}


def test_control_record_errors_name_the_batch_offset() -> None:
    plain = RecordBatch(build_batch(RECORDS, base_offset=12))
    error = _raised(InvalidRecordError, plain.control_record)
    assert str(error) == "batch at offset 12 is not a control batch"
    assert error.context == {"offset": 12}
    empty = bytearray(_empty_batch(base_offset=70))
    struct.pack_into(">h", empty, 21, 0x30)  # transactional control batch, no record
    struct.pack_into(">I", empty, 17, cramjam_crc(empty))
    error = _raised(InvalidRecordError, RecordBatch(bytes(empty)).control_record)
    assert str(error) == "control batch at offset 70 holds no record"
    assert error.context == {"offset": 70}
    marker = next(MemoryRecords.end_transaction_marker(1, 0, commit=False, coordinator_epoch=4, timestamp=9).batches())
    assert isinstance(marker, RecordBatch)
    kind, value = marker.control_record()
    assert kind is ControlRecordType.ABORT and EndTransactionMarker.decode(kind, value).coordinator_epoch == 4
