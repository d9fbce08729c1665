"""Fuzzing of every decoder and file parser: whatever the bytes, only the project's errors come out.

Never ``struct.error``, ``IndexError``, ``RecursionError``, ``StopIteration``, ``UnicodeDecodeError``,
``MemoryError`` or a library's ``ValueError``: each target is called on random bytes and on valid inputs with bytes
flipped, cut or inserted (for batches, with the CRC recomputed too, so the damage reaches the rules behind it). A
file parser's error names the file. And the append validator's two paths agree: what the fast walk accepts, the
general path accepts and the decoder reads back with offsets 0..n-1.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import crc32c
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from local.checkpoint import (
    CleanShutdownFile,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    decode_leader_epoch_checkpoint,
)
from local.errors import KafkaStorageError
from local.index import OffsetIndex, TimeIndex, TransactionIndex
from local.producer_state import decode_snapshot, encode_snapshot
from local.records import LegacyRecordBatch, MemoryRecords, RecordBatch, SimpleRecord
from local.records.batch import ATTRIBUTES_OFFSET, BATCH_HEADER, CRC_OFFSET
from local.records.compression import CompressionType
from local.records.legacy import build_legacy_message
from local.records.memory_records import batch_from_buffer
from local.records.record import decode_records
from local.records.varint import decode_varint, decode_varlong
from local.segment import LogSegment
from local.validation import check_records, plain_batch_ok, validate_batch, validate_legacy_batch

T0 = 1_700_000_000_000
FUZZ = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "150")), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CODECS = list(CompressionType)


def only_our_errors(fn: Callable[[], Any]) -> KafkaStorageError | None:
    """Run ``fn``: it may return or raise a KafkaStorageError, nothing else (the test fails on anything else)."""
    try:
        fn()
    except KafkaStorageError as exc:
        return exc
    return None


# Inputs ---------------------------------------------------------------------------------------------------------

@st.composite
def valid_batches(draw: st.DrawFn) -> bytes:
    codec = draw(st.sampled_from(CODECS))
    n = draw(st.integers(1, 6))
    values = draw(st.lists(st.binary(max_size=40), min_size=n, max_size=n))
    if draw(st.booleans()):  # kafka-python's encoder
        b = DefaultRecordBatchBuilder(magic=2, compression_type=int(codec), is_transactional=False, producer_id=-1,
                                      producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
        for i, v in enumerate(values):
            b.append(i, timestamp=T0 + i, key=None if i % 2 else b"k", value=v,
                     headers=[("h", v[:3])] if draw(st.booleans()) else [])
        return bytes(b.build())
    return bytes(MemoryRecords.build([SimpleRecord(T0 + i, b"k%d" % i, v) for i, v in enumerate(values)], codec))


@st.composite
def legacy_entries(draw: st.DrawFn) -> bytes:
    magic = draw(st.sampled_from([0, 1]))
    inner = b"".join(build_legacy_message(i, b"k", v, magic=magic, timestamp=T0)
                     for i, v in enumerate(draw(st.lists(st.binary(max_size=20), max_size=4))))
    codec = draw(st.sampled_from(CODECS))
    if codec is CompressionType.NONE or draw(st.booleans()):
        return build_legacy_message(3, b"key", draw(st.binary(max_size=30)), magic=magic, timestamp=T0)
    return build_legacy_message(len(inner), None, codec.compress(inner), magic=magic, timestamp=T0,
                                attributes=int(codec))


@st.composite
def damaged(draw: st.DrawFn, base: st.SearchStrategy[bytes]) -> bytes:
    data = bytearray(draw(base))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "cut", "insert"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            data[at] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        elif kind == "cut":
            del data[at:]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


def restamp(data: bytes) -> bytes:
    """A v2 batch's CRC recomputed (so that the damage reaches the checks behind it)."""
    if len(data) < 61 or data[16] != 2:
        return data
    buf = bytearray(data)
    buf[CRC_OFFSET:ATTRIBUTES_OFFSET] = crc32c.crc32c(bytes(buf[ATTRIBUTES_OFFSET:])).to_bytes(4, "big")
    return bytes(buf)


any_batch_bytes = st.one_of(
    st.binary(max_size=300),
    damaged(valid_batches()),
    damaged(valid_batches()).map(restamp),
    damaged(legacy_entries()),
)


# Record batches, records, legacy, compression, varints -----------------------------------------------------------

def decode_everything(data: bytes) -> None:
    batch = batch_from_buffer(data)
    batch.is_valid()
    for record in batch.records():
        assert record.offset >= -(2**63)
    _ = batch.base_offset, batch.last_offset, batch.next_offset, batch.compression_type, batch.records_count
    if isinstance(batch, RecordBatch) and batch.is_control_batch:
        batch.control_record()


@FUZZ
@given(any_batch_bytes)
def test_batch_decoders_raise_only_our_errors(data: bytes) -> None:
    only_our_errors(lambda: decode_everything(data))
    only_our_errors(lambda: RecordBatch(data).ensure_valid())
    only_our_errors(lambda: list(LegacyRecordBatch(data).records()))
    only_our_errors(lambda: validate_legacy_batch(LegacyRecordBatch(data)))


@FUZZ
@given(st.lists(any_batch_bytes, max_size=3).map(b"".join))
def test_memory_records_raise_only_our_errors(data: bytes) -> None:
    mr = MemoryRecords(data)
    only_our_errors(lambda: list(mr.batches()))
    only_our_errors(lambda: list(mr.batches(strict=True)))
    only_our_errors(mr.validate)
    only_our_errors(lambda: list(mr.records()))
    only_our_errors(mr.next_offset)
    only_our_errors(lambda: mr.valid_bytes)


def test_an_empty_control_batch_is_invalid_not_a_stop_iteration() -> None:
    from local.errors import InvalidRecordError

    data = bytearray(bytes(MemoryRecords.end_transaction_marker(1, 0, commit=True)))
    data[8:12] = (61 - 12).to_bytes(4, "big")
    data[57:61] = (0).to_bytes(4, "big")
    batch = RecordBatch(restamp(bytes(data[:61])))
    with pytest.raises(InvalidRecordError, match="holds no record"):
        batch.control_record()


@FUZZ
@given(st.sampled_from(CODECS[1:]), st.one_of(st.binary(max_size=200), damaged(st.binary(max_size=300).map(
    lambda b: CompressionType.ZSTD.compress(b)))), st.binary(max_size=300))
def test_decompression_raises_only_our_errors(codec: CompressionType, junk: bytes, plain: bytes) -> None:
    only_our_errors(lambda: codec.decompress(junk))
    compressed = codec.compress(plain)
    for cut in (1, len(compressed) // 2, len(compressed) - 1):
        only_our_errors(lambda cut=cut: codec.decompress(compressed[:cut]))  # type: ignore[misc]
    assert codec.decompress(compressed) == plain


@FUZZ
@given(st.binary(max_size=20), st.integers(0, 22))
def test_varints_raise_only_our_errors(data: bytes, pos: int) -> None:
    only_our_errors(lambda: decode_varint(data, pos))
    only_our_errors(lambda: decode_varlong(data, pos))


@FUZZ
@given(st.binary(max_size=200), st.integers(-2, 10))
def test_record_decoder_raises_only_our_errors(data: bytes, count: int) -> None:
    only_our_errors(lambda: decode_records(data, count, 0, T0, None, -1))
    only_our_errors(lambda: check_records([data[:7], data[7:]], count, 1 << 20))


# The validator's two paths agree ----------------------------------------------------------------------------------

@FUZZ
@given(st.one_of(valid_batches(), damaged(valid_batches()).map(restamp)))
def test_the_fast_walk_never_accepts_what_the_general_path_refuses(data: bytes) -> None:
    assume(len(data) >= 61 and data[16] == 2)
    header = BATCH_HEADER.unpack_from(data)
    assume(header[1] + 12 == len(data))
    fast = plain_batch_ok(data, len(data), header[5], header[6], header[12])
    batch = RecordBatch(data)
    error = only_our_errors(lambda: validate_batch(batch, 0, "t-0", from_client=True, max_decompressed=1 << 20))
    if fast:
        assert error is None
    if error is None:
        assert [r.offset - batch.base_offset for r in batch.records()] == list(range(batch.records_count))


# Producer snapshots, checkpoints, partition.metadata, the clean-shutdown file --------------------------------------

snapshot_bytes = st.one_of(
    st.binary(max_size=120),
    damaged(st.just(encode_snapshot([]))),
)


@FUZZ
@given(snapshot_bytes)
def test_snapshot_parser_raises_only_our_errors(data: bytes) -> None:
    error = only_our_errors(lambda: decode_snapshot(data, "/x/00000000000000000042.snapshot"))
    assert error is None or "00000000000000000042.snapshot" in str(error)


text_bytes = st.one_of(
    st.binary(max_size=80),
    st.text(max_size=60).map(str.encode),
    st.sampled_from([b"0\n2\n0 0\n1 5\n", b"0\n1\nt 0 5\n", b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"]).flatmap(
        lambda b: damaged(st.just(b))),
)


@pytest.mark.parametrize("kind", ["leader-epoch", "offsets", "partition.metadata", "clean-shutdown"])
@FUZZ
@given(data=text_bytes)
def test_text_file_parsers_raise_only_our_errors_naming_the_file(tmp_path_factory: pytest.TempPathFactory,
                                                                 kind: str, data: bytes) -> None:
    path = tmp_path_factory.mktemp("files") / {"leader-epoch": "leader-epoch-checkpoint",
                                               "offsets": "recovery-point-offset-checkpoint",
                                               "partition.metadata": "partition.metadata",
                                               "clean-shutdown": ".kafka_cleanshutdown"}[kind]
    path.write_bytes(data)
    reader: Callable[[], object] = {
        "leader-epoch": LeaderEpochCheckpointFile(path).read,
        "offsets": OffsetCheckpointFile(path).read,
        "partition.metadata": PartitionMetadataFile(path).read,
        "clean-shutdown": CleanShutdownFile(path).read,
    }[kind]
    error = only_our_errors(reader)
    assert error is None or str(path) in str(error)
    only_our_errors(lambda: decode_leader_epoch_checkpoint(data))


def test_non_utf8_checkpoints_and_metadata_are_errors_naming_the_file(tmp_path: Path) -> None:
    for name, reader in [("leader-epoch-checkpoint", lambda p: LeaderEpochCheckpointFile(p).read()),
                         ("partition.metadata", lambda p: PartitionMetadataFile(p).read()),
                         ("log-start-offset-checkpoint", lambda p: OffsetCheckpointFile(p).read()),
                         (".kafka_cleanshutdown", lambda p: CleanShutdownFile(p).read())]:
        path = tmp_path / name
        path.write_bytes(b"0\n1\n\xff\xfe 0\n")
        with pytest.raises(KafkaStorageError, match=str(path)):
            reader(path)
    good = tmp_path / "partition.metadata"
    topic_id = uuid.uuid4()
    PartitionMetadataFile(good).write(topic_id)
    assert PartitionMetadataFile(good).read() == topic_id


# Index files and segments -------------------------------------------------------------------------------------------

def use_offset_index(path: Path) -> None:
    index = OffsetIndex(path, 100, writable=False)
    try:
        index.sanity_check()
        for offset in (0, 100, 150, 2**40):
            index.lookup(offset)
        for n in range(min(index.entries, 4)):
            index.entry(n)
    finally:
        index.close()


def use_time_index(path: Path) -> None:
    index = TimeIndex(path, 100, writable=False)
    try:
        index.sanity_check()
        for ts in (-1, 0, T0, 2**62):
            index.lookup(ts)
        _ = index.last_entry
    finally:
        index.close()


def use_txn_index(path: Path) -> None:
    index = TransactionIndex(100, path)
    try:
        index.sanity_check()
        index.all_aborted_txns()
        index.collect_aborted_txns(0, 2**40)
    finally:
        index.close()


@pytest.mark.parametrize(("suffix", "use"), [(".index", use_offset_index), (".timeindex", use_time_index),
                                             (".txnindex", use_txn_index)], ids=["offset", "time", "txn"])
@FUZZ
@given(data=st.binary(max_size=200))
def test_index_parsers_raise_only_our_errors_naming_the_file(tmp_path_factory: pytest.TempPathFactory, suffix: str,
                                                             use: Callable[[Path], None], data: bytes) -> None:
    path = tmp_path_factory.mktemp("idx") / f"00000000000000000100{suffix}"
    path.write_bytes(data)
    error = only_our_errors(lambda: use(path))
    assert error is None or path.name in str(error)


@FUZZ
@given(st.lists(st.one_of(valid_batches(), damaged(valid_batches()), damaged(valid_batches()).map(restamp),
                          damaged(legacy_entries()), st.binary(max_size=80)), min_size=1, max_size=4))
def test_segment_recovery_truncates_at_the_first_bad_batch_and_never_raises(
        tmp_path_factory: pytest.TempPathFactory, parts: list[bytes]) -> None:
    directory = tmp_path_factory.mktemp("seg")
    (directory / "00000000000000000000.log").write_bytes(b"".join(parts))
    segment = LogSegment.open(directory, 0, file_already_exists=True)
    try:
        assert segment.recover() >= 0
        kept = MemoryRecords(segment.log.read(0, segment.size))
        kept.validate()  # what recovery keeps is whole batches with valid CRCs
        for batch in kept.batches():
            if isinstance(batch, LegacyRecordBatch):
                validate_legacy_batch(batch)
    finally:
        segment.close()
