"""LogSegment.recover against a plain per-batch model: on any mix of v2 batches, legacy entries, junk and a torn
tail, recovery keeps exactly the longest prefix of whole valid batches, and rebuilds indexes that find them."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from local.errors import CorruptRecordError, InvalidRecordError
from local.records import MemoryRecords, SimpleRecord
from local.records.legacy import build_legacy_message
from local.records.memory_records import batch_from_buffer
from local.segment import LogSegment

T0 = 1_700_000_000_000
BASE = 100


class EpochCache:
    def __init__(self) -> None:
        self.assigned: list[tuple[int, int]] = []

    def latest_epoch(self) -> int | None:
        return self.assigned[-1][0] if self.assigned else None

    def assign(self, epoch: int, start_offset: int) -> None:
        self.assigned.append((epoch, start_offset))


piece = st.one_of(
    st.tuples(st.just("v2"), st.integers(1, 5), st.integers(0, 3), st.integers(0, 300)),
    st.tuples(st.just("legacy"), st.integers(0, 1), st.integers(0, 0), st.integers(0, 40)),
)


def model_prefix(data: bytes) -> tuple[int, list[int], list[tuple[int, int]]]:
    """Walk ``data`` batch by batch with the full validation: (valid bytes, last offsets, epoch changes)."""
    position, last_offsets, epochs = 0, [], []
    while len(data) - position >= 12:
        size = int.from_bytes(data[position + 8 : position + 12], "big", signed=True) + 12
        if size < 12 or position + size > len(data):
            break
        try:
            batch = batch_from_buffer(memoryview(data)[position : position + size])
            batch.ensure_valid()
        except (CorruptRecordError, InvalidRecordError, ValueError, IndexError):
            break
        if not 0 <= batch.last_offset - BASE <= 2**31 - 1:  # Kafka's ensureOffsetInRange
            break
        if batch.base_offset <= (last_offsets[-1] if last_offsets else -1) or batch.last_offset < batch.base_offset:
            break  # offsets going backwards: a damaged offset field
        last_offsets.append(batch.last_offset)
        epoch = batch.partition_leader_epoch if batch.magic >= 2 else -1
        if epoch >= 0 and (not epochs or epoch > epochs[-1][0]):
            epochs.append((epoch, batch.base_offset))
        position += size
    return position, last_offsets, epochs


@settings(max_examples=150, deadline=None)
@given(pieces=st.lists(piece, min_size=1, max_size=12), tail=st.binary(max_size=80), cut=st.integers(0, 64),
       flip=st.one_of(st.none(), st.integers(0, 10_000)))
def test_recover_keeps_the_longest_valid_prefix(
    pieces: list[tuple[str, int, int, int]], tail: bytes, cut: int, flip: int | None
) -> None:
    data = bytearray()
    offset = BASE
    for kind, count, epoch, value_size in pieces:
        if kind == "v2":
            records = [SimpleRecord(T0 + offset + i, None, b"v" * value_size) for i in range(count)]
            data += bytes(MemoryRecords.build(records, base_offset=offset, partition_leader_epoch=epoch))
            offset += count
        else:
            data += build_legacy_message(offset, None, b"x" * value_size, magic=count, timestamp=T0 + offset)
            offset += 1
    if flip is not None:
        data[flip % len(data)] ^= 0x41
    data = data[: max(0, len(data) - cut)] + tail if cut else data + tail
    expected_bytes, last_offsets, epochs = model_prefix(bytes(data))

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / f"{BASE:020d}.log").write_bytes(bytes(data))
        segment = LogSegment.open(tmp, BASE, index_interval_bytes=1, max_index_size=4096, file_already_exists=True)
        try:
            cache = EpochCache()
            truncated = segment.recover(leader_epoch_cache=cache)
            assert truncated == len(data) - expected_bytes
            assert segment.size == expected_bytes
            assert cache.assigned == epochs
            for last in last_offsets:
                found = segment.translate_offset(last)
                assert found is not None and found.offset == last
            assert segment.offset_index.entries == max(0, len(last_offsets) - 1)  # every batch after the first
        finally:
            segment.close()
