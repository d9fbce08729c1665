"""The JSON form of a record, one codec for every reader and writer (the format is in docs/record-json.md).

``tiered consume --json`` prints it, ``tiered produce --json`` reads it, and ``tiered run``'s HTTP endpoint answers
a GET with it and takes it in a POST, so ``consume --json | produce --json`` (and a GET's records POSTed back)
store the same bytes::

    {"offset": 7, "timestamp": 1700000000000, "key": "user-1", "value": "hello",
     "headers": [{"key": "trace", "value": "abc"}, {"key": "raw", "valueBase64": "//4="}],
     "partition_leader_epoch": 0}

A byte string (a record's key and value, a header's value) is exactly one of:

- ``"value": "text"``: bytes that are UTF-8, as that text;
- ``"valueBase64": "..."``: bytes that are not UTF-8, in standard base64 (with padding);
- ``"value": null``: null. A record whose value is null is a tombstone, Kafka's delete marker for compacted topics.

The key is ``key``/``keyBase64`` alike. Header keys are text (Kafka's are strings). Headers are a list, in the
record's order, duplicates kept. What a writer may also give (read, never written): a key left out is null (a value
must be given: a tombstone says ``"value": null``); a ``value`` or ``key`` that is another JSON value (number,
object...) is stored as its compact JSON text; ``headers`` as an object ``{"name": "text" | null}``; a ``timestamp``
left out is the time of the append; the fields ``consume --json`` prints besides (``offset``,
``partition_leader_epoch``) are ignored; any other field is refused. Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any

from local.records import SimpleRecord

BASE64_SUFFIX = "Base64"
MAX_TIMESTAMP = 2**63 - 1

Header = tuple[str, bytes | None]


# writing ------------------------------------------------------------------------------------------------------

def put_bytes(out: dict[str, Any], name: str, data: bytes | None) -> None:
    """Set ``name`` (text or null) or ``name + "Base64"`` in ``out``: the one rule for every byte string."""
    if data is None:
        out[name] = None
        return
    try:
        out[name] = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        out[name + BASE64_SUFFIX] = base64.b64encode(data).decode("ascii")


def record_to_json(offset: int, timestamp: int, key: bytes | None, value: bytes | None,
                   headers: Sequence[Header], partition_leader_epoch: int | None = None) -> dict[str, Any]:
    """A record as ``consume --json`` prints it and the HTTP endpoint answers it."""
    out: dict[str, Any] = {"offset": offset, "timestamp": timestamp}
    put_bytes(out, "key", key)
    put_bytes(out, "value", value)
    out["headers"] = [_header_json(k, v) for k, v in headers]
    if partition_leader_epoch is not None:
        out["partition_leader_epoch"] = partition_leader_epoch
    return out


def _header_json(key: str, value: bytes | None) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key}
    put_bytes(out, "value", value)
    return out


# reading ------------------------------------------------------------------------------------------------------

class NestedTooDeeply(ValueError):
    """JSON whose arrays and objects nest deeper than the parser recurses."""


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # (Python's json takes NaN and Infinity; they were stored as text)


def loads(text: str) -> Any:
    """``json.loads`` for untrusted input: ValueError (json.JSONDecodeError, or NestedTooDeeply rather than a
    RecursionError) when ``text`` is not JSON it can parse."""
    try:
        return json.loads(text, parse_constant=_not_json)
    except RecursionError:
        raise NestedTooDeeply("JSON nested too deeply (arrays or objects hundreds of levels deep)") from None


def get_bytes(obj: dict[str, Any], name: str) -> bytes | None:
    """The byte string ``obj`` gives as ``name`` or ``name + "Base64"``; absent is null. ValueError naming the field
    when it is given twice, is not base64, or is text that cannot be UTF-8 (a lone surrogate escape)."""
    b64_name = name + BASE64_SUFFIX
    if b64_name in obj:
        if name in obj:
            raise ValueError(f"give {name} or {b64_name}, not both")
        text = obj[b64_name]
        if not isinstance(text, str):
            raise ValueError(f"invalid {b64_name}: expected a base64 string, got {_kind(text)}")
        try:
            return base64.b64decode(text.encode("ascii"), validate=True)
        except (UnicodeEncodeError, binascii.Error) as exc:
            raise ValueError(f"invalid {b64_name} {_short(text)}: not standard base64 ({exc})") from None
    value = obj.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        value = json.dumps(value, separators=(",", ":"))
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"invalid {name}: the text holds a lone surrogate, which is no UTF-8; send the bytes as "
                         f"{b64_name}") from None


#: The fields a record object may have: what it stores, and what ``record_to_json`` prints besides (ignored).
RECORD_FIELDS = ("key", "keyBase64", "value", "valueBase64", "headers", "timestamp")
PRINTED_ONLY_FIELDS = ("offset", "partition_leader_epoch")


def record_from_json(obj: object, now_ms: int, extra_headers: Sequence[Header] = ()) -> SimpleRecord:
    """A record object (see the module docstring) as a record to append, stamped ``now_ms`` unless it has a
    ``timestamp``; ``extra_headers`` go before its own. ValueError naming what is wrong: a field no record has (a
    typo, or a wrapper such as ``{"records": [...]}``, would otherwise store a tombstone) and a record without a
    value (a tombstone says ``"value": null``)."""
    if not isinstance(obj, dict):
        raise ValueError(f"a record must be a JSON object, got {_kind(obj)}")
    unknown = sorted(set(obj) - set(RECORD_FIELDS) - set(PRINTED_ONLY_FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(map(repr, unknown))} in a record: its fields are "
                         f"{', '.join(RECORD_FIELDS)} (and {', '.join(PRINTED_ONLY_FIELDS)}, ignored)")
    if "value" not in obj and "value" + BASE64_SUFFIX not in obj:
        raise ValueError('a record needs "value" (text, or null for a tombstone) or "valueBase64"')
    timestamp = obj.get("timestamp", now_ms)
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or not -1 <= timestamp <= MAX_TIMESTAMP:
        raise ValueError(f"invalid timestamp {timestamp!r}: expected milliseconds since the epoch (a whole number)")
    headers = [*extra_headers, *_headers(obj.get("headers"))]
    return SimpleRecord(timestamp, get_bytes(obj, "key"), get_bytes(obj, "value"), headers)


def _headers(given: object) -> list[Header]:
    if given is None:
        return []
    if isinstance(given, dict):  # the shorthand {"name": "text"}
        return [(_header_key(k), get_bytes({"value": v}, "value")) for k, v in given.items()]
    if not isinstance(given, list):
        raise ValueError(f"headers must be a JSON array of {{\"key\": ..., \"value\": ...}}, got {_kind(given)}")
    out = []
    for i, entry in enumerate(given):
        if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
            raise ValueError(f"header {i} must be an object with a string \"key\" and a \"value\" or "
                             f"\"valueBase64\", got {_short(entry)}")
        try:
            out.append((_header_key(entry["key"]), get_bytes(entry, "value")))
        except ValueError as exc:
            raise ValueError(f"header {i}: {exc}") from None
    return out


def _header_key(key: str) -> str:
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"header key {key!r} holds a lone surrogate, which is no UTF-8") from None
    return key


def _kind(value: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def _short(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
