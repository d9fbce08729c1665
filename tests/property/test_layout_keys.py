"""The remote layout's event keys read back (tiered.layout): what the writer names, and nothing it never would."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from tiered import layout
from tiered.rsm import RemoteLogSegmentId, TopicIdPartition

_uuids = st.builds(uuid.UUID, bytes=st.binary(min_size=16, max_size=16))
_tips = st.builds(TopicIdPartition, _uuids, st.from_regex(r"[a-z][a-z0-9._-]{0,20}", fullmatch=True),
                  st.integers(0, 10_000))


@given(tip=_tips, sid=_uuids, start=st.integers(0, 2**63 - 1), state=st.integers(0, 4),
       prefix=st.sampled_from(["", "tiered", "a/b"]))
def test_an_event_key_names_its_event(tip: TopicIdPartition, sid: uuid.UUID, start: int, state: int,
                                      prefix: str) -> None:
    key = layout.metadata_event_key(prefix, RemoteLogSegmentId(tip, sid), start, state)
    assert layout.metadata_event_of_key(key) == (start, sid, state)
    assert layout.owner_epoch_of_key(key) is None


@given(sid=_uuids, at=st.integers(0, 21), char=st.sampled_from("+/=!.~ "))
def test_a_segment_id_the_writer_would_not_write_is_no_event(sid: uuid.UUID, at: int, char: str) -> None:
    text = layout.kafka_uuid(sid)
    for changed in (text[:at] + char + text[at + 1:], text[:at] + text[at + 1:], text + "A"):
        assert layout.metadata_event_of_key(f"p/t-x/0/{'0' * 20}-{changed}.1.json") is None


def test_keys_of_other_forms_are_no_events() -> None:
    sid = layout.kafka_uuid(uuid.UUID(int=7))
    for name in (f"{'0' * 19}-{sid}.1.json", f"{'0' * 20}-{sid}.x.json", f"{'0' * 20}-{sid}.1.log",
                 f"{'0' * 20}{sid}.1.json", "0000000001.json", f"{'0' * 20}-{sid}.1"):
        assert layout.metadata_event_of_key(f"p/{name}") is None, name
    # the 22nd character carries 4 bits of padding: only one of its spellings is the writer's
    stray_bits = sid[:21] + chr(ord(sid[21]) + 1)
    assert layout.metadata_event_of_key(f"p/{'0' * 20}-{stray_bits}.1.json") is None
