"""The remote tier's small JSON objects carry a CRC-32C of their own text (tiered.sealed_json): a byte changed at rest
is refused, never served as a different value."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered.columnar import manifest
from tiered.metadata import decode_record, encode_metadata
from tiered.ownership import OwnerRecord
from tiered.rsm import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from tiered.sealed_json import SEAL_FIELD, seal, unseal

_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.text(max_size=20)
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                          max_size=4), max_leaves=12)
_docs = st.dictionaries(st.text(max_size=8).filter(lambda k: k != SEAL_FIELD), _json, max_size=6)


@settings(max_examples=200, deadline=None)
@given(doc=_docs, compact=st.booleans())
def test_a_sealed_document_reads_back_as_it_was(doc: dict[str, Any], compact: bool) -> None:
    text = json.dumps(doc, separators=(",", ":")) if compact else json.dumps(doc, indent=1) + "\n"
    assert unseal(seal(text)) == doc
    assert unseal(text.encode()) == doc  # written before the field existed: read as before


@settings(max_examples=60, deadline=None)
@given(doc=_docs.filter(bool), data=st.data())
def test_no_changed_byte_is_read_as_another_value(doc: dict[str, Any], data: st.DataObject) -> None:
    """Every single-byte change either makes the text unreadable or, when it only renames the seal's own key (the
    values untouched), reads the same values: never a different value, silently."""
    sealed = seal(json.dumps(doc, separators=(",", ":")))
    at = data.draw(st.integers(0, len(sealed) - 1))
    bit = data.draw(st.integers(0, 7))
    damaged = bytearray(sealed)
    damaged[at] ^= 1 << bit
    try:
        got = unseal(bytes(damaged))
    except (ValueError, UnicodeDecodeError):
        return
    assert isinstance(got, dict) and {k: v for k, v in got.items() if k in doc} == doc
    assert sealed.rfind(SEAL_FIELD.encode()) <= at < sealed.rfind(SEAL_FIELD.encode()) + len(SEAL_FIELD)


def test_a_damaged_seal_names_both_values() -> None:
    sealed = seal('{"a":1}')
    assert sealed.startswith(b'{"a":1,"json_crc32c":') and sealed.endswith(b"}")
    with pytest.raises(ValueError, match=r"damaged: the CRC-32C of its text is \d+, its json_crc32c field says \d+"):
        unseal(sealed.replace(b'"a":1', b'"a":3'))
    with pytest.raises(ValueError, match="not the last one"):
        unseal(b'{"json_crc32c":1,"a":1}')
    with pytest.raises(ValueError, match="only a JSON object"):
        seal("[1]")


def _event() -> RemoteLogSegmentMetadata:
    tip = TopicIdPartition(uuid.uuid4(), "events", 3)
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), 1000, 1999, 1_764_000_000_000, 0,
                                    1_764_000_000_001, 123_456, {4: 1000, 5: 1500},
                                    state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)


def test_metadata_events_owner_records_and_manifests_are_sealed() -> None:
    md = _event()
    data = encode_metadata(md)
    assert json.loads(data)[SEAL_FIELD] and decode_record(data)[0] == md
    with pytest.raises(ValueError, match="damaged"):
        decode_record(data.replace(b'"5":1500', b'"5":1501'))  # valid JSON, another epoch start

    record = OwnerRecord(2, "a" * 32, ((0, 0), (2, 500)), 1_764_000_000_000, "host", ("/data",))
    raw = record.encode()
    assert OwnerRecord.decode(raw) == record
    with pytest.raises(ValueError, match=r"malformed owner record: .*damaged"):
        OwnerRecord.decode(raw.replace(b"[2,500]", b"[2,600]"))

    m = manifest.Manifest("events", 3, "id", (), ())
    text = manifest.encode(m)
    assert text.endswith(b"}\n") and manifest.decode(text) == m
    with pytest.raises(manifest.ColumnarManifestError, match=r"_manifest\.json: damaged"):
        manifest.decode(text.replace(b'"partition": 3', b'"partition": 2'), "_manifest.json")
