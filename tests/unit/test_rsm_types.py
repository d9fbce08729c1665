"""The value types and plugin rules of ``tiered.rsm``: RemoteLogSegmentMetadata's validation and int32 clamp,
state updates, the transition errors, which subclasses must implement a fetch, and what the default fetch
methods pass on and warn about. Plugin classes are defined inside the tests: a class statement runs
``__init_subclass__``, which is what these tests check."""

from __future__ import annotations

import io
import logging
import os
import re
import uuid
import warnings
from typing import IO

import pytest

from tiered import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteStorageManager, TopicIdPartition, rsm
from tiered.errors import InvalidStateTransitionError, RemoteStorageError
from tiered.rsm import INT32_MAX, RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState

S = RemoteLogSegmentState
SID = RemoteLogSegmentId(TopicIdPartition(uuid.UUID(int=7), "t", 3), uuid.UUID(int=9))


def _md(start: int = 0, end: int = 9, size: int = 100, epochs: dict[int, int] | None = None) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(SID, start, end, 1_000, 1, 2_000, size, {0: start} if epochs is None else epochs)


def test_metadata_offsets_sizes_and_epochs_are_validated() -> None:
    assert (_md(5, 5).start_offset, _md(5, 5).end_offset) == (5, 5)  # a one-offset segment
    with pytest.raises(ValueError, match=re.escape(f"invalid offsets for {SID}: start -1, end 9")):
        _md(-1, 9)
    with pytest.raises(ValueError, match=re.escape(f"invalid offsets for {SID}: start 5, end 4")):
        _md(5, 4)
    with pytest.raises(ValueError, match=re.escape(f"segment_leader_epochs of {SID} must not be empty")):
        _md(epochs={})
    assert _md(size=0).segment_size_in_bytes == 0
    with pytest.raises(ValueError, match=r"^negative segment size -1$"):
        _md(size=-1)
    md = _md(0, 99, epochs={7: 50, 2: 0, 5: 20})
    assert list(md.segment_leader_epochs.items()) == [(2, 0), (5, 20), (7, 50)]  # sorted by epoch


def test_metadata_size_is_clamped_to_int32_above_it_only(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tiered.rsm"):
        assert _md(size=INT32_MAX).segment_size_in_bytes == INT32_MAX
        assert caplog.records == []
        assert _md(size=INT32_MAX + 1).segment_size_in_bytes == INT32_MAX
    assert [r.getMessage() for r in caplog.records] == [
        f"segment {SID} is {INT32_MAX + 1} bytes; its metadata records {INT32_MAX} (the serialized size is an int32)"
    ]


def test_updates_carry_their_fields_and_keep_custom_metadata_unless_given() -> None:
    md = RemoteLogSegmentMetadata(SID, 0, 9, 1_000, 1, 2_000, 100, {0: 0}, custom_metadata=b"mine")
    done = md.create_with_updates(RemoteLogSegmentMetadataUpdate(SID, 3_000, None, S.COPY_SEGMENT_FINISHED, 4))
    assert (done.state, done.broker_id, done.event_timestamp_ms, done.custom_metadata) == (S.COPY_SEGMENT_FINISHED, 4, 3_000, b"mine")
    assert (done.start_offset, done.end_offset, done.segment_size_in_bytes) == (0, 9, 100)
    assert md.state is S.COPY_SEGMENT_STARTED  # the original is unchanged
    later = done.create_with_updates(RemoteLogSegmentMetadataUpdate(SID, 4_000, b"new", S.DELETE_SEGMENT_STARTED, 5))
    assert (later.state, later.broker_id, later.event_timestamp_ms, later.custom_metadata) == (S.DELETE_SEGMENT_STARTED, 5, 4_000, b"new")
    other = RemoteLogSegmentId(SID.topic_id_partition, uuid.UUID(int=10))
    with pytest.raises(ValueError, match=re.escape(f"update for {other} applied to {SID}")):
        md.create_with_updates(RemoteLogSegmentMetadataUpdate(other, 0, None, S.COPY_SEGMENT_FINISHED, 0))
    # the transition is checked from the current state: FINISHED cannot go back to STARTED
    with pytest.raises(InvalidStateTransitionError,
                       match=r"^invalid remote segment state transition COPY_SEGMENT_FINISHED -> COPY_SEGMENT_STARTED$"):
        done.create_with_updates(RemoteLogSegmentMetadataUpdate(SID, 0, None, S.COPY_SEGMENT_STARTED, 0))


def test_transition_errors_name_both_states() -> None:
    with pytest.raises(InvalidStateTransitionError, match=r"^invalid remote segment state transition None -> COPY_SEGMENT_FINISHED$"):
        S.check_transition(None, S.COPY_SEGMENT_FINISHED)
    with pytest.raises(InvalidStateTransitionError, match=r"DELETE_SEGMENT_FINISHED -> DELETE_SEGMENT_STARTED$"):
        S.check_transition(S.DELETE_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED)
    S.check_transition(S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED)  # valid: no error
    S.check_transition(None, S.COPY_SEGMENT_STARTED)


def test_a_plugin_must_implement_one_fetch_variant_and_either_one_is_enough() -> None:
    class Only64(RemoteStorageManager):
        def fetch_log_segment(self, metadata, start_position, end_position=None) -> IO[bytes]:  # type: ignore[no-untyped-def]
            return io.BytesIO(b"64")

    class Only32(RemoteStorageManager):
        def fetch_log_segment_int32(self, metadata, start_position, end_position=None) -> IO[bytes]:  # type: ignore[no-untyped-def]
            return io.BytesIO(b"32")

    class Both(Only64, Only32):
        pass

    assert Only64().fetch_log_segment(_md(), 0).read() == b"64"
    assert Only32().fetch_log_segment(_md(), 0).read() == b"32"
    assert Both().fetch_log_segment(_md(), 0).read() == b"64"
    with pytest.raises(TypeError, match=(
        r"\.Neither implements neither fetch_log_segment \(64-bit\) nor the deprecated fetch_log_segment_int32: "
        r"a RemoteStorageManager must implement at least one$"
    )):

        class Neither(RemoteStorageManager):
            pass


def test_an_abstract_helper_may_implement_no_fetch_but_its_subclasses_must() -> None:
    class Helper(RemoteStorageManager):
        _ABSTRACT_HELPER = True

    with pytest.raises(TypeError, match=r"\.Concrete implements neither"):

        class Concrete(Helper):  # _ABSTRACT_HELPER is not inherited: only a class's own counts
            pass

    class Fine(Helper):
        def fetch_log_segment(self, metadata, start_position, end_position=None) -> IO[bytes]:  # type: ignore[no-untyped-def]
            return io.BytesIO(b"")

    assert Fine().fetch_log_segment(_md(), 0).read() == b""


def test_the_default_fetches_pass_the_metadata_on_and_warn_the_callers_of_the_deprecated_one() -> None:
    seen: list[object] = []

    class Legacy(RemoteStorageManager):
        def fetch_log_segment_int32(self, metadata, start_position, end_position=None) -> IO[bytes]:  # type: ignore[no-untyped-def]
            seen.append(metadata)
            warnings.warn("a legacy plugin calling something deprecated", DeprecationWarning, stacklevel=1)
            return io.BytesIO(b"old")

    class Modern(RemoteStorageManager):
        def fetch_log_segment(self, metadata, start_position, end_position=None) -> IO[bytes]:  # type: ignore[no-untyped-def]
            seen.append(metadata)
            return io.BytesIO(b"new")

    md = _md()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default 64-bit path keeps a legacy plugin's deprecation noise in
        assert Legacy().fetch_log_segment(md, 0, 9).read() == b"old"
    with pytest.raises(RemoteStorageError, match=r"\.Legacy implements only the 32-bit fetch_log_segment_int32"):
        Legacy().fetch_log_segment(md, 0, INT32_MAX + 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert Modern().fetch_log_segment_int32(md, 0, 9).read() == b"new"
    assert [str(w.message) for w in caught] == [
        "fetch_log_segment_int32 is deprecated: use fetch_log_segment (64-bit positions)"
    ]
    assert caught[0].category is DeprecationWarning
    # it points at the caller, not at tiered/rsm.py (under mutmut a trampoline frame sits between the two)
    assert caught[0].filename != rsm.__file__
    if "MUTANT_UNDER_TEST" not in os.environ:
        assert caught[0].filename == __file__
    assert seen == [md, md]


def test_the_default_64_bit_fetch_silences_only_deprecation_warnings() -> None:
    class Noisy(RemoteStorageManager):
        def fetch_log_segment_int32(self, metadata, start_position, end_position=None) -> IO[bytes]:  # type: ignore[no-untyped-def]
            warnings.warn("something the operator should see", UserWarning, stacklevel=1)
            return io.BytesIO(b"x")

    with pytest.warns(UserWarning, match="something the operator should see"):
        assert Noisy().fetch_log_segment(_md(), 0).read() == b"x"
