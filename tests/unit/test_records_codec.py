"""The v2 record batch codec against kafka-python (an oracle nobody here wrote) and real Kafka files.

kafka-python decodes what we encode wherever it can: every hypothesis example of the batch round trip is also
parsed by kafka-python's DefaultRecordBatch, batches kafka-python builds from hypothesis records are parsed
by ours, and our varints are compared byte for byte with ``kafka.record.util``. (kafka-python has no reader
for the broker's producer-state snapshots; those are checked against Kafka's own files in
test_producer_state.py.)
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import util as kp_util
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from local.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionTypeError
from local.records import (
    CompressionType,
    ControlRecordType,
    EndTransactionMarker,
    LegacyRecordBatch,
    MemoryRecords,
    RecordBatch,
    SimpleRecord,
    TimestampType,
    set_base_offset,
    set_max_timestamp,
    set_partition_leader_epoch,
)
from local.records.legacy import build_legacy_message
from local.records.record import encode_record, record_size
from local.records.varint import decode_varint, decode_varlong, encode_varint, size_of_varint

CODECS = list(CompressionType)


def _kp_build(codec: int, n: int = 10, **kw: object) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=kw.get("transactional", False),
        producer_id=kw.get("producer_id", -1), producer_epoch=kw.get("producer_epoch", -1),
        base_sequence=kw.get("base_sequence", -1), batch_size=1 << 20,
    )
    for i in range(n):
        builder.append(i, timestamp=1_000 + i, key=(b"k%d" % i) if i % 2 else None,
                       value=None if i == 3 else b"v" * i * 40, headers=[("h", b"x"), ("n", None)] if i % 3 == 0 else [])
    return bytes(builder.build())


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name_lower)
def test_kafka_python_batches_parse_in_ours(codec: CompressionType) -> None:
    data = _kp_build(int(codec), producer_id=9, producer_epoch=2, base_sequence=40)
    batch = RecordBatch(data)
    batch.ensure_valid()
    assert batch.compression_type is codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence) == (9, 2, 40, 49)
    recs = list(batch.records())
    assert [r.offset for r in recs] == list(range(10))
    assert [r.timestamp for r in recs] == [1_000 + i for i in range(10)]
    assert [r.key for r in recs] == [(b"k%d" % i) if i % 2 else None for i in range(10)]
    assert [r.value for r in recs] == [None if i == 3 else b"v" * i * 40 for i in range(10)]
    assert recs[0].headers == (("h", b"x"), ("n", None))
    assert [r.sequence for r in recs] == list(range(40, 50))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name_lower)
def test_our_batches_parse_in_kafka_python(codec: CompressionType) -> None:
    simple = [SimpleRecord(5_000 + i, b"key%d" % i, b"value" * i, [("a", b"1")]) for i in range(20)]
    data = bytes(MemoryRecords.build(simple, codec, producer_id=3, producer_epoch=1, base_sequence=7, base_offset=100))
    kp = DefaultRecordBatch(bytearray(data))
    assert kp.validate_crc()
    assert kp.base_offset == 100 and kp.producer_id == 3 and kp.base_sequence == 7
    got = list(kp)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == [
        (100 + i, 5_000 + i, b"key%d" % i, b"value" * i, [("a", b"1")]) for i in range(20)
    ]


def test_golden_foo_log_reproduced_byte_for_byte(golden_dir: Path) -> None:
    data = (golden_dir / "foo-0" / "00000000000000000000.log").read_bytes()
    rebuilt = bytearray()
    for batch in MemoryRecords(data).batches(strict=True):
        recs = [SimpleRecord(r.timestamp, r.key, r.value, r.headers) for r in batch.records()]
        rebuilt += bytes(MemoryRecords.build(
            recs, batch.compression_type, base_offset=batch.base_offset, producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
            partition_leader_epoch=batch.partition_leader_epoch, is_transactional=batch.is_transactional,
        ))
    assert bytes(rebuilt) == data


def test_golden_cluster_metadata_batches(golden_dir: Path) -> None:
    data = (golden_dir / "__cluster_metadata-0" / "00000000000000000000.log").read_bytes()
    batches = list(MemoryRecords(data).batches(strict=True))
    assert sum(b.size_in_bytes for b in batches) == len(data)
    offsets = [(b.base_offset, b.last_offset) for b in batches]
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(offsets))
    controls = [b for b in batches if b.is_control_batch]
    assert controls, "the KRaft log starts with control batches"
    assert all(b.control_record()[0] is not ControlRecordType.UNKNOWN for b in controls)
    for b in batches:
        assert len(list(b.records())) == b.records_count


def test_bad_input_errors_name_what_is_wrong() -> None:
    good = bytes(MemoryRecords.build([SimpleRecord(b"a"), SimpleRecord(b"b")]))
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="crc"):
        RecordBatch(bad_crc).ensure_valid()
    with pytest.raises(CorruptRecordError, match="position 0"):
        MemoryRecords(bytes(bad_crc)).validate()
    with pytest.raises(CorruptRecordError, match="truncated batch at position 0"):
        MemoryRecords(good[:-4]).validate()
    assert list(MemoryRecords(good + good[:20]).batches()) and len(list(MemoryRecords(good + good[:20]).batches())) == 1
    wrong_magic = bytearray(good)
    wrong_magic[16] = 7
    with pytest.raises(CorruptRecordError, match="magic"):
        list(MemoryRecords(bytes(wrong_magic)).batches())
    count = bytearray(good)
    count[57:61] = (5).to_bytes(4, "big")
    with pytest.raises(InvalidRecordError, match="declares 5 records"):
        list(RecordBatch(bytes(count)).records())
    codec = bytearray(good)
    codec[22] |= 0x07
    with pytest.raises(UnsupportedCompressionTypeError, match="codec id 7"):
        list(RecordBatch(bytes(codec)).records())
    with pytest.raises(InvalidRecordError, match="longer than 5 bytes"):
        decode_varint(b"\xff\xff\xff\xff\xff\xff", 0)
    with pytest.raises(InvalidRecordError, match="longer than 10 bytes"):
        decode_varlong(b"\xff" * 11, 0)


def test_in_place_patches_keep_the_crc_valid() -> None:
    buf = bytearray(bytes(MemoryRecords.build([SimpleRecord(10, None, b"x")])))
    set_base_offset(buf, 0, 1234)
    set_partition_leader_epoch(buf, 0, 7)
    batch = RecordBatch(buf)
    assert (batch.base_offset, batch.partition_leader_epoch) == (1234, 7)
    batch.ensure_valid()
    set_max_timestamp(buf, 0, TimestampType.LOG_APPEND_TIME, 99_999)
    batch = RecordBatch(buf)
    batch.ensure_valid()
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in batch.records()] == [99_999]


def test_end_transaction_marker_is_78_bytes() -> None:
    marker = MemoryRecords.end_transaction_marker(5, 1, commit=True, coordinator_epoch=3)
    assert marker.size_in_bytes == 78
    batch = next(marker.batches())
    kind, value = batch.control_record()
    assert kind is ControlRecordType.COMMIT and batch.is_transactional and batch.is_control_batch
    assert EndTransactionMarker.decode(kind, value).coordinator_epoch == 3


def test_simple_record_overloads() -> None:
    assert SimpleRecord(b"v").value == b"v" and SimpleRecord(b"v").key is None
    assert (SimpleRecord(b"k", b"v").key, SimpleRecord(b"k", b"v").value) == (b"k", b"v")
    r = SimpleRecord(5, b"k", b"v", [("h", b"1")])
    assert (r.timestamp, r.key, r.value, r.headers) == (5, b"k", b"v", (("h", b"1"),))
    assert SimpleRecord(value=b"v", key=b"k", timestamp=3).timestamp == 3
    with pytest.raises(TypeError, match="bytes"):
        SimpleRecord("text")


def test_legacy_message_sets_iterate_and_check_crc() -> None:
    msgs = build_legacy_message(0, b"k", b"v0", magic=0) + build_legacy_message(1, None, b"v1", magic=1, timestamp=77)
    batches = list(MemoryRecords(msgs).batches(strict=True))
    assert [type(b) for b in batches] == [LegacyRecordBatch, LegacyRecordBatch]
    assert [(r.offset, r.value) for b in batches for r in b.records()] == [(0, b"v0"), (1, b"v1")]
    assert batches[1].max_timestamp == 77
    inner = build_legacy_message(0, None, b"a") + build_legacy_message(1, None, b"b")
    wrapper = build_legacy_message(1, None, CompressionType.GZIP.compress(inner), magic=0, attributes=1)
    wb = next(MemoryRecords(wrapper).batches(strict=True))
    assert [(r.offset, r.value) for r in wb.records()] == [(0, b"a"), (1, b"b")]
    assert (wb.base_offset, wb.last_offset) == (0, 1)
    broken = bytearray(msgs)
    broken[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="legacy message at offset 1"):
        MemoryRecords(bytes(broken)).validate()


def test_snappy_reads_plain_and_xerial() -> None:
    import cramjam

    data = b"hello snappy " * 1000
    assert CompressionType.SNAPPY.decompress(bytes(cramjam.snappy.compress_raw(data))) == data
    framed = CompressionType.SNAPPY.compress(data)
    assert framed.startswith(b"\x82SNAPPY\x00") and CompressionType.SNAPPY.decompress(framed) == data


headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16))), max_size=3)
simple_records = st.lists(
    st.builds(
        lambda ts, k, v, h: SimpleRecord(ts, k, v, h),
        st.integers(0, 2**40), st.one_of(st.none(), st.binary(max_size=32)),
        st.one_of(st.none(), st.binary(max_size=200)), headers,
    ),
    min_size=1, max_size=20,
)


@settings(max_examples=150, deadline=None)
@given(simple_records, st.sampled_from(CODECS), st.integers(-1, 2**40), st.integers(-1, 2**31 - 1), st.booleans())
def test_round_trip_property(recs: list[SimpleRecord], codec: CompressionType, pid: int, seq: int, txn: bool) -> None:
    mr = MemoryRecords.build(recs, codec, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                             base_sequence=seq if pid >= 0 else -1, is_transactional=txn and pid >= 0)
    batch = next(mr.batches(strict=True))
    got = list(batch.records())
    assert [(r.timestamp, r.key, r.value, r.headers) for r in got] == [(r.timestamp, r.key, r.value, r.headers) for r in recs]
    assert batch.max_timestamp == max(r.timestamp for r in recs)
    assert batch.records_count == len(recs)
    # the oracle: kafka-python reads the same batch
    kp = DefaultRecordBatch(bytearray(bytes(mr)))
    assert kp.validate_crc()
    assert (kp.base_offset, kp.producer_id, kp.producer_epoch, kp.base_sequence) == (
        0, pid, 0 if pid >= 0 else -1, seq if pid >= 0 else -1)
    assert kp.is_transactional == (txn and pid >= 0) and kp.compression_type == int(codec)
    assert kp.max_timestamp == batch.max_timestamp and kp.last_offset_delta == len(recs) - 1
    assert [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in kp] == [
        (i, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for i, r in enumerate(recs)
    ]


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(-(2**62), 2**62), st.one_of(st.none(), st.binary(max_size=300)),
       st.one_of(st.none(), st.binary(max_size=300)), headers)
def test_record_size_is_what_encode_record_writes(offset_delta: int, timestamp_delta: int, key: bytes | None,
                                                  value: bytes | None, hs: list[tuple[str, bytes | None]]) -> None:
    out = bytearray()
    encode_record(out, offset_delta, timestamp_delta, key, value, hs)
    assert record_size(offset_delta, timestamp_delta, key, value, hs) == len(out)
    # the oracle: kafka-python's DefaultRecordBatchBuilder.size_in_bytes (utf-8 header keys, as Kafka's)
    kp_headers = [(k, v) for k, v in hs]
    assert DefaultRecordBatchBuilder.size_in_bytes(offset_delta, timestamp_delta, key, value, kp_headers) == len(out)


@settings(max_examples=100, deadline=None)
@given(simple_records, st.sampled_from(CODECS), st.integers(0, 2**40), st.integers(0, 2**31 - 1))
def test_kafka_python_built_batches_parse_in_ours_property(
    recs: list[SimpleRecord], codec: CompressionType, base_offset: int, seq: int
) -> None:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=int(codec), is_transactional=False,
                                        producer_id=5, producer_epoch=1, base_sequence=seq, batch_size=1 << 24)
    for i, r in enumerate(recs):
        assert builder.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=list(r.headers)) is not None
    data = bytearray(builder.build())
    set_base_offset(data, 0, base_offset)
    chosen = DefaultRecordBatch(bytearray(data)).compression_type  # none when compressing would not shrink it
    assert chosen in (int(codec), 0)
    batch = RecordBatch(bytes(data))
    batch.ensure_valid()
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (base_offset, base_offset + len(recs) - 1, len(recs))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (5, 1, seq)
    assert batch.compression_type is CompressionType(chosen)
    assert batch.max_timestamp == max(r.timestamp for r in recs)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()] == [
        (base_offset + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(recs)
    ]


def _kp_varint(value: int) -> bytes:
    out = bytearray()
    kp_util.encode_varint(value, out.append)
    return bytes(out)


INT32_EDGES = [0, 1, -1, 63, -64, 64, -65, 2**31 - 1, -(2**31), 2**13, -(2**13) - 1, 2**20, -(2**27)]
INT64_EDGES = [*INT32_EDGES, 2**31, -(2**31) - 1, 2**34, -(2**34) - 1, 2**63 - 1, -(2**63), 2**62, -(2**62) - 1]


@given(st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from(INT32_EDGES)))
def test_varint_matches_kafka_python(value: int) -> None:
    out = bytearray(b"\x07")  # appended to what is there
    encode_varint(value, out)
    assert bytes(out[1:]) == _kp_varint(value)
    assert size_of_varint(value) == len(out) - 1 == kp_util.size_of_varint(value) <= 5
    assert decode_varint(bytes(out), 1) == (value, len(out)) == kp_util.decode_varint(bytearray(out), 1)


@given(st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from(INT64_EDGES)))
def test_varlong_matches_kafka_python(value: int) -> None:
    out = bytearray()
    encode_varint(value, out)
    assert bytes(out) == _kp_varint(value)
    assert size_of_varint(value) == len(out) == kp_util.size_of_varint(value) <= 10
    assert decode_varlong(bytes(out) + b"\xff", 0) == (value, len(out)) == kp_util.decode_varint(bytearray(out), 0)


def test_varint_length_limits_and_errors() -> None:
    longest = _kp_varint(-(2**31))
    assert len(longest) == 5 and decode_varint(longest, 0) == (-(2**31), 5)
    six = _kp_varint(2**34)
    assert len(six) == 6
    with pytest.raises(InvalidRecordError, match=r"^varint at position 2 is longer than 5 bytes$") as info:
        decode_varint(b"\x00\x00" + six, 2)
    assert info.value.context == {"position": 2}
    assert decode_varlong(b"\x00\x00" + six, 2) == (2**34, 8)
    longest64 = _kp_varint(-(2**63))
    assert len(longest64) == 10 and decode_varlong(longest64, 0) == (-(2**63), 10)
    with pytest.raises(InvalidRecordError, match=r"^varlong at position 1 is longer than 10 bytes$") as info:
        decode_varlong(b"\x00" + b"\xff" * 11, 1)
    assert info.value.context == {"position": 1}
    with pytest.raises(InvalidRecordError, match=r"^truncated varint at position 3$") as info:
        decode_varint(b"\x00\x00\x00\x80\x80", 3)
    assert info.value.context == {"position": 3}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2**40), st.integers(1, 5)), max_size=6),
    st.integers(0, 70),
)
def test_next_offset_walks_lengths_like_a_full_parse(layout: list[tuple[int, int]], cut: int) -> None:
    """MemoryRecords.next_offset agrees with parsing every batch, also on a buffer cut inside its last batch."""
    parts = []
    for base, count in layout:
        batch = bytearray(bytes(MemoryRecords.build([SimpleRecord(i, None, b"v" * i) for i in range(count)])))
        set_base_offset(batch, 0, base)
        parts.append(bytes(batch))
    data = b"".join(parts)
    data = data[: max(0, len(data) - cut)]
    batches = list(MemoryRecords(data).batches())
    expected = batches[-1].next_offset if batches else None
    assert MemoryRecords(data).next_offset() == expected
