"""The two fetch variants of RemoteStorageManager and their 32-bit bounds.

- A plugin implementing only the deprecated ``fetch_log_segment_int32`` is read through the default 64-bit
  ``fetch_log_segment``, which passes positions up to 2^31-1 through unchanged (start and end) and refuses
  anything past it, start or end, without calling the plugin.
- A plugin implementing only the 64-bit method still answers the deprecated ``fetch_log_segment_int32``
  (the default one), with a DeprecationWarning, delegating the same positions; past 2^31-1 it raises.
"""

from __future__ import annotations

import io
import uuid
import warnings
from typing import IO

import pytest

from tiered import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageManager,
    TopicIdPartition,
)
from tiered.errors import RemoteStorageError
from tiered.rsm import INT32_MAX

MD = RemoteLogSegmentMetadata(
    RemoteLogSegmentId.generate_new(TopicIdPartition(uuid.uuid4(), "t", 0)), 0, 9, 0, 0, 0, 100, {0: 0}
)


class Only32(RemoteStorageManager):
    """Implements only the 32-bit fetch; records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int | None]] = []

    def fetch_log_segment_int32(self, metadata, start_position, end_position=None) -> IO[bytes]:  # type: ignore[no-untyped-def]
        self.calls.append((start_position, end_position))
        return io.BytesIO(b"32:%d-%s" % (start_position, str(end_position).encode()))

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> bytes | None:
        return None

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> IO[bytes]:
        return io.BytesIO(b"")

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        return None


class Only64(Only32):
    """Implements only the 64-bit fetch (the 32-bit one is the deprecated default)."""

    fetch_log_segment_int32 = RemoteStorageManager.fetch_log_segment_int32

    def fetch_log_segment(self, metadata, start_position, end_position=None) -> IO[bytes]:  # type: ignore[no-untyped-def]
        self.calls.append((start_position, end_position))
        return io.BytesIO(b"64:%d-%s" % (start_position, str(end_position).encode()))


def test_a_32_bit_only_plugin_is_read_through_the_default_64_bit_fetch_up_to_int32_max() -> None:
    rsm = Only32()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default 64-bit path must not warn about the plugin's choice
        assert rsm.fetch_log_segment(MD, 0).read() == b"32:0-None"
        assert rsm.fetch_log_segment(MD, 10, 19).read() == b"32:10-19"
        assert rsm.fetch_log_segment(MD, 0, INT32_MAX).read() == b"32:0-%d" % INT32_MAX
        assert rsm.fetch_log_segment(MD, INT32_MAX, INT32_MAX).read() == b"32:%d-%d" % (INT32_MAX, INT32_MAX)
        assert rsm.fetch_log_segment(MD, INT32_MAX).read() == b"32:%d-None" % INT32_MAX
    assert rsm.calls == [(0, None), (10, 19), (0, INT32_MAX), (INT32_MAX, INT32_MAX), (INT32_MAX, None)]


@pytest.mark.parametrize(
    ("start", "end"),
    [(0, INT32_MAX + 1), (INT32_MAX, INT32_MAX + 1), (100, 2**40), (INT32_MAX + 1, None), (INT32_MAX + 1, INT32_MAX + 5)],
)
def test_a_32_bit_only_plugin_refuses_positions_past_int32_max(start: int, end: int | None) -> None:
    rsm = Only32()
    with pytest.raises(RemoteStorageError, match="32-bit") as info:
        rsm.fetch_log_segment(MD, start, end)
    assert str(MD.remote_log_segment_id) in str(info.value) and str(start) in str(info.value)
    assert rsm.calls == []  # refused before the plugin was asked


def test_the_deprecated_32_bit_default_delegates_to_the_64_bit_fetch_with_a_warning() -> None:
    rsm = Only64()
    with pytest.warns(DeprecationWarning, match="fetch_log_segment_int32 is deprecated"):
        assert rsm.fetch_log_segment_int32(MD, 5, 9).read() == b"64:5-9"
    with pytest.warns(DeprecationWarning):
        assert rsm.fetch_log_segment_int32(MD, 0, INT32_MAX).read() == b"64:0-%d" % INT32_MAX
    with pytest.warns(DeprecationWarning):
        assert rsm.fetch_log_segment_int32(MD, INT32_MAX).read() == b"64:%d-None" % INT32_MAX
    assert rsm.calls == [(5, 9), (0, INT32_MAX), (INT32_MAX, None)]
    # the 64-bit method itself is the plugin's own: no warning, any position
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rsm.fetch_log_segment(MD, 2**33, 2**33 + 9).read() == b"64:%d-%d" % (2**33, 2**33 + 9)


@pytest.mark.parametrize(("start", "end"), [(0, INT32_MAX + 1), (INT32_MAX + 1, None), (INT32_MAX + 1, INT32_MAX + 2)])
def test_the_deprecated_32_bit_default_refuses_positions_past_int32_max(start: int, end: int | None) -> None:
    rsm = Only64()
    with pytest.warns(DeprecationWarning), pytest.raises(RemoteStorageError, match="32-bit"):
        rsm.fetch_log_segment_int32(MD, start, end)
    assert rsm.calls == []


def test_a_plugin_with_both_variants_is_called_directly() -> None:
    class Both(Only64):
        def fetch_log_segment_int32(self, metadata, start_position, end_position=None) -> IO[bytes]:  # type: ignore[no-untyped-def]
            return io.BytesIO(b"own32")

    rsm = Both()
    assert rsm.fetch_log_segment(MD, 2**32).read() == b"64:%d-None" % 2**32
    assert rsm.fetch_log_segment_int32(MD, 0).read() == b"own32"
