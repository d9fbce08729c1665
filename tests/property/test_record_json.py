"""The JSON record format (tiered.record_json, docs/record-json.md) round-trips every record: any key, value and
header value bytes (null included), any header names, duplicates and order, through the JSON text a pipe or an HTTP
body carries; and bytes are never confused with text that looks like base64."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from local.records import MemoryRecords
from tiered.record_json import record_from_json, record_to_json

payloads = st.none() | st.binary(max_size=64) | st.text(max_size=32).map(lambda t: t.encode("utf-8", "surrogatepass"))
header_names = st.text(st.characters(codec="utf-8"), max_size=16)  # Kafka header keys are strings
headers = st.lists(st.tuples(header_names, payloads), max_size=6)


@given(st.integers(0, 2**62), st.integers(-1, 2**62), payloads, payloads, headers)
def test_every_record_round_trips_through_its_json_text(offset: int, timestamp: int, key: bytes | None,
                                                         value: bytes | None, hdrs: list[tuple[str, bytes | None]]) -> None:
    obj = record_to_json(offset, timestamp, key, value, hdrs, 3)
    text = json.dumps(obj)
    assert text.isascii() and "\n" not in text  # one line that any pipe or terminal carries unchanged
    back = record_from_json(json.loads(text), now_ms=0)
    assert (back.timestamp, back.key, back.value, list(back.headers)) == (timestamp, key, value, hdrs)
    # and the record a batch carries reads back as the same JSON
    (read,) = next(MemoryRecords.build([back]).batches()).records()
    assert record_to_json(offset, read.timestamp, read.key, read.value, read.headers, 3) == obj


@given(payloads)
def test_each_byte_string_is_exactly_one_of_text_base64_or_null(data: bytes | None) -> None:
    obj = record_to_json(0, 0, None, data, [("h", data)])
    for fields in (obj, obj["headers"][0]):
        given_as = {name for name in ("value", "valueBase64") if name in fields}
        assert len(given_as) == 1
        if data is None:
            assert fields["value"] is None  # a tombstone (or a null header value) is null, never a string
        elif "value" in fields:
            assert fields["value"].encode("utf-8") == data


def test_bytes_that_are_not_utf8_and_text_that_looks_like_base64_stay_apart() -> None:
    binary = record_to_json(0, 0, None, b"\xff\xfe", [])
    text = record_to_json(0, 0, None, b"base64://4=", [])
    assert binary["valueBase64"] == "//4=" and "value" not in binary
    assert text["value"] == "base64://4=" and "valueBase64" not in text
    assert record_from_json(binary, 0).value == b"\xff\xfe" and record_from_json(text, 0).value == b"base64://4="


def test_what_a_writer_may_give_besides_the_printed_form() -> None:
    rec = record_from_json({"key": 7, "value": {"a": [1, 2]}, "headers": {"h": "x", "n": None}}, now_ms=42)
    assert (rec.timestamp, rec.key, rec.value, rec.headers) == (42, b"7", b'{"a":[1,2]}', (("h", b"x"), ("n", None)))
    assert record_from_json({"value": None}, now_ms=1).value is None  # a tombstone is said so
    assert record_from_json({"offset": 3, "partition_leader_epoch": 0, "value": "v"}, now_ms=1).value == b"v"


@pytest.mark.parametrize(("obj", "says"), [
    ({"value": "a", "valueBase64": "YQ=="}, "give value or valueBase64, not both"),
    ({"valueBase64": "not base64!"}, "invalid valueBase64"),
    ({"value": "v", "keyBase64": 5}, "invalid keyBase64: expected a base64 string, got a number"),
    ({"value": "\ud800"}, "lone surrogate"),
    ({"value": "v", "headers": [{"value": "x"}]}, 'header 0 must be an object with a string "key"'),
    ({"value": "v", "headers": [{"key": "h", "valueBase64": "@"}]}, "header 0: invalid valueBase64"),
    ({"value": "v", "headers": "h=x"}, "headers must be a JSON array"),
    ({"value": "v", "timestamp": "yesterday"}, "invalid timestamp 'yesterday'"),
    ([1], "a record must be a JSON object, got an array"),
    ({}, 'a record needs "value" (text, or null for a tombstone) or "valueBase64"'),
    ({"key": "k"}, 'a record needs "value"'),
    ({"records": [{"value": "v"}]}, "unknown field(s) 'records' in a record: its fields are key, keyBase64, value"),
    ({"vaule": "v", "value": "w"}, "unknown field(s) 'vaule'"),
])
def test_a_record_that_cannot_be_stored_is_refused_naming_the_field(obj: object, says: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        record_from_json(obj, now_ms=0)
    assert says in str(info.value)
