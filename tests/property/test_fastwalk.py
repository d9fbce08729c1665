"""The append fast path in C (``local/records/_fastwalk.c``) answers exactly as its Python definition.

Two functions: the record walk, and the whole fast-path question about one batch (``plain_client_batch``).

The Python walk (``local.validation._walk_simple_records``) is the definition; the C build is the same walk at
native speed, used where it was built. Both are run on valid batches (ours and kafka-python's), damaged ones and
records assembled field by field with odd varints (long, non-canonical, negative, truncated), and must return the
same (next record index, position) for every input, every start and every bound.
"""

from __future__ import annotations

import shutil
import sysconfig

import pytest
from hypothesis import given
from hypothesis import strategies as st

from local import validation
from local.records.varint import encode_varint
from tests.property.test_fuzz_parsers import FUZZ, damaged, restamp, valid_batches

try:
    from local.records import _fastwalk
except ImportError:  # no C compiler where this was installed: the validator runs the Python walk alone
    _fastwalk = None  # type: ignore[assignment]

python_walk = validation._walk_simple_records
WALKS = [python_walk] + ([_fastwalk.walk_simple_records] if _fastwalk is not None else [])
python_question = validation._plain_client_batch
QUESTIONS = [python_question] + ([_fastwalk.plain_client_batch] if _fastwalk is not None else [])


def test_the_c_walk_is_built_and_used_where_a_compiler_exists() -> None:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        assert validation.walk_simple_records is python_walk
        return
    assert _fastwalk is not None, f"{compiler} exists but local.records._fastwalk was not built (pip install -e .)"
    assert validation.walk_simple_records is _fastwalk.walk_simple_records
    assert validation.plain_client_batch is _fastwalk.plain_client_batch


def _varint(value: int, pad: int = 0) -> bytes:
    """The zigzag varint of ``value``, made ``pad`` bytes longer with non-canonical continuation groups."""
    out = bytearray()
    encode_varint(value, out)
    if pad:
        out[-1] |= 0x80
        out += b"\x80" * (pad - 1) + b"\x00"
    return bytes(out)


@st.composite
def field_records(draw: st.DrawFn) -> bytes:
    """Records built field by field: mostly well formed, with each field sometimes odd."""
    out = bytearray()
    for i in range(draw(st.integers(0, 5))):
        body = bytearray([draw(st.sampled_from([0, 0, 1]))])
        body += _varint(draw(st.integers(-(1 << 40), 1 << 40)), draw(st.sampled_from([0, 0, 0, 0, *range(1, 11)])))
        body += _varint(draw(st.sampled_from([i, i, i, i + 1, -1, 1 << 20])), draw(st.sampled_from([0, 0, 0, 1, 4])))
        key_len = draw(st.sampled_from([-1, -1, 0, 3, -2, 70]))
        body += _varint(key_len, draw(st.sampled_from([0, 0, 0, 1])))
        body += bytes(max(key_len, 0))
        value = draw(st.binary(max_size=150))
        value_len = draw(st.sampled_from([len(value)] * 6 + [-1, len(value) + 1]))
        body += _varint(value_len, draw(st.sampled_from([0, 0, 0, 1, 3])))
        body += value if value_len >= 0 else b""
        body += _varint(draw(st.sampled_from([0, 0, 0, 0, 1, -1])))
        length = draw(st.sampled_from([len(body)] * 8 + [len(body) - 1, len(body) + 1, 0, -3]))
        out += _varint(length, draw(st.sampled_from([0, 0, 0, 0, 1, 4]))) + body
    return bytes(out)


def _agree(data: bytes, pos: int, end: int, index: int, count: int, require_key: bool) -> None:
    answers = {walk.__name__: walk(data, pos, end, index, count, require_key) for walk in WALKS}
    assert len(set(answers.values())) == 1, answers
    for view in (bytearray(data), memoryview(data)):
        assert WALKS[-1](view, pos, end, index, count, require_key) == answers["_walk_simple_records"]


@FUZZ
@given(st.one_of(field_records(), damaged(field_records())), st.integers(0, 8), st.booleans(), st.data())
def test_the_walks_agree_on_records_built_field_by_field(data: bytes, count: int, require_key: bool,
                                                         more: st.DataObject) -> None:
    end = more.draw(st.sampled_from([len(data), max(len(data) - 1, 0), len(data) + 5]))
    _agree(data, 0, end, 0, count, require_key)


@FUZZ
@given(st.one_of(valid_batches(), damaged(valid_batches())), st.booleans())
def test_the_walks_agree_on_whole_batches(data: bytes, require_key: bool) -> None:
    for count in (0, 1, 3, 6, 1 << 20):
        _agree(data, 61, len(data), 0, count, require_key)


@pytest.mark.parametrize("walk", WALKS, ids=lambda w: w.__module__)
def test_a_walk_resumes_from_a_record_index(walk) -> None:  # type: ignore[no-untyped-def]
    records = b"".join(
        _varint(len(body)) + body
        for body in (b"\x00\x00" + _varint(i) + _varint(-1) + _varint(1) + b"v" + b"\x00" for i in range(4)))
    first, mid = walk(records, 0, len(records), 0, 2, False)
    assert first == 2
    assert walk(records, mid, len(records), 2, 4, False) == (4, len(records))
    assert walk(records, mid, len(records), 1, 4, False) == (1, mid)  # record 2 does not have offset delta 1
    assert walk(records, 0, len(records), 0, 4, True) == (0, 0)  # a compacted topic needs keys


def _record(ts_pad: int = 0, delta_pad: int = 0, key_pad: int = 0, value_pad: int = 0, length_pad: int = 0) -> bytes:
    """One record (offset delta 0, null key, value b"v", no headers) with its varints made longer."""
    body = (b"\x00" + _varint(5, ts_pad) + _varint(0, delta_pad) + _varint(-1, key_pad) + _varint(1, value_pad)
            + b"v" + b"\x00")
    return _varint(len(body), length_pad) + body


@pytest.mark.parametrize("walk", WALKS, ids=lambda w: w.__module__)
@pytest.mark.parametrize(("field", "longest"), [("ts_pad", 10), ("delta_pad", 5), ("key_pad", 5), ("value_pad", 5),
                                                ("length_pad", 5)])
def test_varints_of_the_longest_allowed_size_pass_and_one_byte_more_stops(walk, field: str, longest: int) -> None:  # type: ignore[no-untyped-def]
    ok = _record(**{field: longest - 1})  # a one-byte varint made `longest` bytes long
    assert walk(ok, 0, len(ok), 0, 1, False) == (1, len(ok))
    too_long = _record(**{field: longest})
    assert walk(too_long, 0, len(too_long), 0, 1, False) == (0, 0)


# Every field length across its varint's size boundaries, walked by each walk: canonical records must pass whole
# (and stop at a bound that cuts the last one), and the walks must agree on the odd encodings (padded, negative).

_KEY_FIELDS = {
    "null": _varint(-1), "empty": _varint(0), "1 byte": _varint(1) + b"k", "63 bytes": _varint(63) + b"k" * 63,
    "64 bytes": _varint(64) + b"k" * 64, "empty, padded": _varint(0, 1), "1 byte, padded": _varint(1, 1) + b"k",
    "null, padded": _varint(-1, 2),
}
_CANONICAL_KEYS = {"null", "empty", "1 byte", "63 bytes", "64 bytes"}
_VALUE_SIZES = [*range(0, 140), *range(8180, 8200), *range(16375, 16390)]  # 1-, 2- and 3-byte lengths
_NULL_VALUES = [_varint(-1), _varint(-64), _varint(-65), _varint(-8193)]  # any negative length is a null value


def _two_records(key: bytes, value: bytes) -> bytes:
    out = b""
    for delta in (0, 1):
        body = b"\x00" + _varint(0) + _varint(delta) + key + value + b"\x00"
        out += _varint(len(body)) + body
    return out


@pytest.mark.parametrize("key_name", list(_KEY_FIELDS))
def test_the_walks_pass_every_field_length_across_the_varint_boundaries(key_name: str) -> None:
    key = _KEY_FIELDS[key_name]
    for value in [_varint(n) + bytes(n) for n in _VALUE_SIZES] + _NULL_VALUES:
        data = _two_records(key, value)
        first = len(data) // 2
        for require_key in (False, True):
            answers = {walk(data, 0, len(data), 0, 2, require_key) for walk in WALKS}
            cut = {walk(data, 0, len(data) - 1, 0, 2, require_key) for walk in WALKS}
            assert len(answers) == 1 and len(cut) == 1, (key_name, value[:4], answers, cut)
            if key_name in _CANONICAL_KEYS:
                refused = require_key and key_name == "null"
                assert answers == {(0, 0) if refused else (2, len(data))}, (key_name, value[:4])
                assert cut == {(0, 0) if refused else (1, first)}, (key_name, value[:4])


# The batch question ----------------------------------------------------------------------------------------------

# Header fields the question reads (offset, struct format) and values that make a batch not plain, or odd.
_FIELDS = {
    "base_offset": (0, ">q", [0, 1, -1, 1 << 40]),
    "length": (8, ">i", [-1, 0, 49, 1 << 30]),
    "magic": (16, ">b", [0, 1, 2, 3]),
    "attributes": (21, ">h", [0, 1, 2, 3, 4, 5, 7, 0x08, 0x10, 0x20, 0x30, -1]),
    "last_offset_delta": (23, ">i", [-1, 0, 1, 5, (1 << 31) - 1]),
    "producer_id": (43, ">q", [-1, 0, 7, -2]),
    "records_count": (57, ">i", [-1, 0, 1, 6, 1 << 20]),
}


@st.composite
def header_variants(draw: st.DrawFn) -> bytes:
    """A valid batch with header fields set to telling values, its CRC recomputed so the field is what decides."""
    import struct

    buf = bytearray(draw(valid_batches()))
    for name in draw(st.lists(st.sampled_from(sorted(_FIELDS)), max_size=3)):
        at, fmt, values = _FIELDS[name]
        struct.pack_into(fmt, buf, at, draw(st.sampled_from(values)))
    if draw(st.booleans()):
        struct.pack_into(">i", buf, 8, len(buf) - 12)  # a length made right again after the fields moved
    return restamp(bytes(buf)) if draw(st.integers(0, 4)) else bytes(buf)


def _ask(data: bytes, max_message_bytes: int, segment_bytes: int, compacted: bool) -> None:
    answers = {q.__module__: q(data, max_message_bytes, segment_bytes, compacted) for q in QUESTIONS}
    assert len({repr(a) for a in answers.values()}) == 1, answers
    for view in (bytearray(data), memoryview(data)):
        assert QUESTIONS[-1](view, max_message_bytes, segment_bytes, compacted) == answers["local.validation"]


@FUZZ
@given(st.one_of(valid_batches(), header_variants(), damaged(valid_batches()), damaged(header_variants())),
       st.sampled_from([1 << 20, 62, 100, 300]), st.sampled_from([1 << 30, 61, 200]), st.booleans())
def test_the_batch_questions_agree(data: bytes, max_message_bytes: int, segment_bytes: int, compacted: bool) -> None:
    _ask(data, max_message_bytes, segment_bytes, compacted)


@pytest.mark.parametrize("question", QUESTIONS, ids=lambda q: q.__module__)
def test_the_batch_question_answers_a_plain_client_batch_with_its_header_fields(question) -> None:  # type: ignore[no-untyped-def]
    from local.records import MemoryRecords, SimpleRecord

    data = bytes(MemoryRecords.build([SimpleRecord(1000 + i, None, b"v%d" % i) for i in range(3)]))
    assert question(data, 1 << 20, 1 << 30) == (len(data) - 12, 2, 1000, 1002)
    assert question(data, 1 << 20, 1 << 30, True) is None  # a compacted topic needs keys
    assert question(data, len(data) - 1, 1 << 30) is None  # above max.message.bytes
    assert question(data, 1 << 20, len(data) - 1) is None  # above segment.bytes
    assert question(data, len(data), len(data)) is not None  # the bounds are inclusive
    assert question(data[:-1], 1 << 20, 1 << 30) is None
    flipped = bytearray(data)
    flipped[-2] ^= 1
    assert question(bytes(flipped), 1 << 20, 1 << 30) is None  # the CRC
