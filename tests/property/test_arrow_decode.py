"""The Spark source's record decoder in C (``tiered/spark/_arrowdecode.c``) gives exactly the Arrow data of its numpy
definition (``ArrowBatchBuilder._decode``), and refuses the same records.

Both paths decode the same inputs through :class:`~tiered.spark.arrow_records.ArrowBatchBuilder` (``native=True``
and ``native=False``): valid batches of every codec with keys, values and headers null or not, control batches,
log-append-time batches, leader epochs absent or not, offset windows cutting batches, every subset of columns; and
records built field by field (odd varints, lengths that do not add up, headers that overrun) inside batches whose CRC
is right, so that the damage reaches the record walks. Either both raise the same error type, or both return equal
tables (values, validity, types and column names).
"""

from __future__ import annotations

import shutil
import sysconfig
from typing import Any

import crc32c
import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from local.records import CompressionType, MemoryRecords, SimpleRecord
from local.records.batch import ATTRIBUTES_OFFSET, BATCH_HEADER, CRC_OFFSET
from tests.property.test_fastwalk import _varint, field_records
from tests.property.test_fuzz_parsers import FUZZ, damaged, restamp, valid_batches
from tiered.spark import arrow_records
from tiered.spark.arrow_records import ARROW_SCHEMA, ArrowBatchBuilder

T0 = 1_700_000_000_000
COLUMNS = ARROW_SCHEMA.names
native_built = arrow_records.NATIVE_DECODE


def test_the_c_decoder_is_built_and_used_where_a_compiler_exists() -> None:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        assert not native_built
        return
    assert native_built, f"{compiler} exists but tiered.spark._arrowdecode was not built (pip install -e .)"
    assert ArrowBatchBuilder("t", 0).native


def _decode(bufs: list[bytes], native: bool, lo: int, hi: int, columns: set[str] | None) -> Any:
    """The table both paths make of ``bufs``, or the type of the error they raise."""
    builder = ArrowBatchBuilder("t", 3, lo, hi, columns, native=native)
    try:
        out = [rb for b in bufs for rb in builder.add(b)] + builder.flush()
    except Exception as exc:
        return type(exc)
    return pa.Table.from_batches(out, schema=builder.schema)


def _agree(bufs: list[bytes], lo: int = 0, hi: int = 2**63 - 1, columns: set[str] | None = None) -> Any:
    if not native_built:
        pytest.fail("tiered.spark._arrowdecode is not built: nothing to compare")
    python, native = _decode(bufs, False, lo, hi, columns), _decode(bufs, True, lo, hi, columns)
    if isinstance(python, type) or isinstance(native, type):
        assert python == native, (python, native)
        return python
    assert native.schema == python.schema
    assert native.equals(python), (native.to_pylist()[:3], python.to_pylist()[:3])
    for name in native.schema.names:  # validity too: equals() compares values and nulls of each column
        assert native.column(name).null_count == python.column(name).null_count
    return python


records = st.lists(
    st.builds(
        lambda ts, key, value, headers: SimpleRecord(T0 + ts, key, value, headers=headers),
        st.one_of(st.integers(-10**6, 10**9), st.sampled_from([-T0, 2**40, -(2**40)])),
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=300),
        st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=3),
    ),
    min_size=1, max_size=40,
)


@st.composite
def batch_lists(draw: st.DrawFn) -> list[bytes]:
    out, offset = [], draw(st.integers(0, 2**40))
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["records", "records", "records", "control", "log-append"]))
        epoch = draw(st.sampled_from([-1, 0, 7]))
        if kind == "control":
            out.append(bytes(MemoryRecords.end_transaction_marker(9, 0, commit=True, base_offset=offset)))
            offset += 1
            continue
        recs = draw(records)
        codec = draw(st.sampled_from(list(CompressionType)))
        stamp = {"log_append_time": T0 + 5} if kind == "log-append" else {}
        out.append(bytes(MemoryRecords.build(recs, codec, base_offset=offset, partition_leader_epoch=epoch, **stamp)))
        offset += len(recs) + draw(st.sampled_from([0, 0, 3]))  # gaps, as compaction leaves
    return out


@FUZZ
@given(batch_lists(), st.tuples(st.integers(0, 60), st.integers(0, 120)),
       st.none() | st.sets(st.sampled_from(COLUMNS), min_size=1))
def test_valid_batches_decode_to_the_same_arrow_data(bufs: list[bytes], window: tuple[int, int],
                                                     columns: set[str] | None) -> None:
    whole = _agree(bufs, columns=columns)
    assert not isinstance(whole, type)  # valid batches decode
    first = int.from_bytes(bufs[0][:8], "big")
    _agree(bufs, first + window[0], first + window[1], columns)


def _batch(body: bytes, count: int, base_offset: int = 0, attributes: int = 0, epoch: int = -1) -> bytes:
    """A v2 batch around ``body`` (its records as given, right or not), with a right CRC."""
    header = BATCH_HEADER.pack(base_offset, 49 + len(body), epoch, 2, 0, attributes, max(count - 1, 0), T0, T0 + 9,
                               -1, -1, -1, count)
    buf = bytearray(header + body)
    buf[CRC_OFFSET:ATTRIBUTES_OFFSET] = crc32c.crc32c(bytes(buf[ATTRIBUTES_OFFSET:])).to_bytes(4, "big")
    return bytes(buf)


@st.composite
def header_records(draw: st.DrawFn) -> tuple[bytes, int]:
    """Records with headers (or none), sometimes wrong: counts, key and value lengths that do not fit, keys not
    UTF-8, bytes after the last field."""
    out = bytearray()
    n = draw(st.integers(1, 4))
    for i in range(n):
        body = bytearray(b"\x00") + _varint(draw(st.integers(-5, 5))) + _varint(i) + _varint(-1) + _varint(1) + b"v"
        headers = draw(st.lists(st.tuples(st.binary(max_size=4) | st.sampled_from([b"\xff", "ü".encode()]),
                                          st.none() | st.binary(max_size=4)), max_size=3))
        body += _varint(draw(st.sampled_from([len(headers)] * 5 + [len(headers) + 1, -1, 0])))
        for key, value in headers:
            body += _varint(draw(st.sampled_from([len(key)] * 5 + [len(key) + 2, -1]))) + key
            if value is None:
                body += _varint(-1)
            else:
                body += _varint(draw(st.sampled_from([len(value)] * 5 + [len(value) + 1]))) + value
        body += draw(st.sampled_from([b""] * 3 + [b"\x00", b"zz"]))  # bytes the fields do not account for
        out += _varint(draw(st.sampled_from([len(body)] * 6 + [len(body) - 1, len(body) + 1]))) + body
    return bytes(out), n


@FUZZ
@given(st.one_of(field_records(), damaged(field_records()), damaged(header_records().map(lambda r: r[0]))),
       st.integers(0, 8), st.sampled_from([0, 0x08]), st.none() | st.sets(st.sampled_from(COLUMNS), min_size=1))
@example(b"", 1, 0, None)  # no record where one is counted
@example(_varint(3) + b"\x00\x00\x00", 1, 0, None)  # a record cut after its offset delta
def test_records_built_field_by_field_are_refused_or_decoded_alike(body: bytes, count: int, attributes: int,
                                                                   columns: set[str] | None) -> None:
    _agree([_batch(body, count, base_offset=100, attributes=attributes)], columns=columns)
    _agree([_batch(body, count, base_offset=100, attributes=attributes)], 101, 103, columns)


_TRAILING = b"\x00\x00\x00" + _varint(-1) + _varint(1) + b"v" + _varint(1) + _varint(1) + b"a" + _varint(1) + b"x" + b"zz"


@FUZZ
@given(header_records(), st.none() | st.sets(st.sampled_from(COLUMNS), min_size=1))
@example((_varint(len(_TRAILING)) + _TRAILING, 1), None)  # two bytes after the last header
def test_records_with_headers_are_refused_or_decoded_alike(records: tuple[bytes, int], columns: set[str] | None) -> None:
    body, count = records  # the count right: the damage is in the records, not in how many there are
    _agree([_batch(body, count, base_offset=7)], columns=columns)


@FUZZ
@given(st.one_of(damaged(valid_batches()).map(restamp), valid_batches()))
def test_damaged_batches_with_a_right_crc_are_refused_or_decoded_alike(data: bytes) -> None:
    _agree([data])


def test_a_header_key_that_is_not_utf8_is_replaced_as_bytes_decode_does() -> None:
    rec = (b"\x00\x00\x00" + _varint(-1) + _varint(1) + b"v" + _varint(1) + _varint(2) + b"\xffa" + _varint(1) + b"x")
    table = _agree([_batch(_varint(len(rec)) + rec, 1)])
    assert table.column("headers").to_pylist() == [[{"key": "\ufffda", "value": b"x"}]]


def test_a_corrupt_record_is_named_by_its_batch() -> None:
    from local.errors import CorruptRecordError

    bad = _batch(_varint(7) + b"\x00\x00\x00" + _varint(-1) + _varint(9) + b"v", 1, base_offset=4242)
    for native in (True, False):
        builder = ArrowBatchBuilder("t", 0, native=native)
        builder.add(bad)
        with pytest.raises(CorruptRecordError, match="batch at offset 4242") as info:
            builder.flush()
        assert info.value.offset == 4242
