"""Small JSON objects of the remote tier that carry a CRC-32C of their own text (metadata events, owner records, the
columnar copy's manifests).

A bucket's transport checksums (S3's ``x-amz-checksum-*``, which botocore checks) cover an object on the wire, not
at rest, and not on a store that sends none; a digit changed in a metadata event (a leader epoch, an index's size)
still parses and would be served as it is. So each such object ends with one more field, written last::

    {"version":0, ... ,"json_crc32c":1234567890}

``json_crc32c`` is the CRC-32C (Castagnoli) of the object's text as it would read without that field: everything
before ``,"json_crc32c":`` followed by ``}`` (whitespace after the closing brace is not covered). :func:`unseal`
checks it and raises ``ValueError`` naming both values on a mismatch, so the callers' handling of an unreadable
object applies (a metadata event is then neither read nor deleted, an owner record is "damaged", a manifest is not
one). An object without the field (written before it existed) is read as before.
"""

from __future__ import annotations

import json
import re
from typing import Any

from local.crc import crc32c

SEAL_FIELD = "json_crc32c"
# the field as written (no comma in an object of no other field); whitespace a re-serialisation adds is tolerated
_SEAL = re.compile(rb',?\s*"json_crc32c"\s*:\s*(\d{1,10})\s*\}\s*\Z')

__all__ = ["SEAL_FIELD", "seal", "unseal"]


def seal(text: str) -> bytes:
    """``text`` (one JSON object, as ``json.dumps`` wrote it, maybe with trailing whitespace) with its seal field."""
    body = text.rstrip()
    if not body.endswith("}"):
        raise ValueError("only a JSON object can be sealed")
    data = body.encode()
    comma = b"" if data[:-1].strip() == b"{" else b","
    return (data[:-1] + comma + b'"' + SEAL_FIELD.encode() + b'":' + str(crc32c(data)).encode() + b"}"
            + text[len(body):].encode())


def unseal(data: bytes) -> Any:
    """The JSON document in ``data``, its seal checked (when it has one) and removed. ``ValueError`` (or
    ``json.JSONDecodeError``, one) for text that is not JSON or whose seal does not match."""
    doc = json.loads(data)
    if not isinstance(doc, dict) or SEAL_FIELD not in doc:
        return doc
    found = _SEAL.search(data)
    if found is None:
        raise ValueError(f'its "{SEAL_FIELD}" field is not the last one, as written')
    expected = int(found.group(1))
    actual = crc32c(data[: found.start()] + b"}")
    if actual != expected or doc.pop(SEAL_FIELD) != expected:
        raise ValueError(f"damaged: the CRC-32C of its text is {actual}, its {SEAL_FIELD} field says {expected}")
    return doc
