"""A bit flip anywhere in a closed local segment, read back by a consumer (``tiered consume``'s read loop over
``Log.read``): either an error of the project's own (``KafkaStorageError``), or every record with its right offset
and value. Never a wrong value, never a record missing, never a later offset in place of the one asked."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local.errors import KafkaStorageError
from local.fetch import FetchIsolation
from local.log import Log
from local.records import MemoryRecords, SimpleRecord
from tests.logutil import make_log
from tiered.commands.consume import records_from

T0 = 1_700_000_000_000
RECORDS = 600
PER_BATCH = 12  # small batches: about a tenth of the bytes are headers (base offsets, lengths, epochs, CRCs)


def _value(i: int) -> bytes:
    return b"value-%06d-" % i + bytes([i % 251]) * (i % 17)


@pytest.fixture(scope="module")
def log() -> Iterator[Log]:
    with tempfile.TemporaryDirectory(prefix="bitflip-") as tmp:
        log = make_log(Path(tmp), segment_bytes=1024 * 1024, index_interval_bytes=512)
        for first in range(0, RECORDS, PER_BATCH):
            log.append(MemoryRecords.build(
                [SimpleRecord(T0 + i, b"k%d" % i, _value(i)) for i in range(first, first + PER_BATCH)]))
        log.roll()  # the segment holding the data is closed, as a flipped bit on disk finds it
        yield log
        log.close()


EXPECTED = [(i, _value(i)) for i in range(RECORDS)]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), bit=st.integers(0, 7), start=st.sampled_from([0, 0, 5, 300]))
def test_a_flipped_bit_is_an_error_or_changes_nothing_read(log: Log, data: st.DataObject, bit: int, start: int) -> None:
    segment = log.segments.first_segment
    assert segment is not None
    fd, size = segment.log.fd, segment.log.size_in_bytes
    batches = [b.position for b in segment.log.batches(verify=False)]
    # Half of the flips in a batch header (base offsets, lengths and epochs are outside the CRC), the last
    # batch's as often as any other's; the rest anywhere.
    position = data.draw(st.one_of(
        st.builds(lambda p, rel: p + rel, st.sampled_from(batches + batches[-1:] * 8), st.integers(0, 60)),
        st.integers(0, size - 1),
    ))
    original = os.pread(fd, 1, position)
    os.pwrite(fd, bytes([original[0] ^ (1 << bit)]), position)
    try:
        got = []
        try:
            for _, rec in records_from(log, start, FetchIsolation.LOG_END):
                got.append((rec.offset, rec.value))
        except KafkaStorageError:
            return  # found, and said so
        assert got == EXPECTED[start:], f"bit {bit} of byte {position} changed what was read, with no error"
    finally:
        os.pwrite(fd, original, position)


FULL_SWEEP = os.environ.get("TIERED_FLIP_SWEEP") == "1"  # every header bit of 9 batches from 4 offsets (~30 s)


def test_every_bit_of_a_batch_header_flipped_is_an_error_or_changes_nothing(log: Log) -> None:
    """The header bytes are where a flip can move offsets (base offsets, lengths, epochs are outside the CRC) and
    open what looks like a gap; reads answer a gap's offsets with the next batch, so every such flip must be found
    by the checks around a gap. Exhaustive over the bits of the headers of the first, a middle and the last batch
    (and ``TIERED_FLIP_SWEEP=1``: three of each, from four offsets)."""
    segment = log.segments.first_segment
    assert segment is not None
    fd = segment.log.fd
    batches = [b.position for b in segment.log.batches(verify=False)]
    middle = len(batches) // 2
    picks = batches[:3] + batches[middle : middle + 3] + batches[-3:] if FULL_SWEEP else [batches[0], batches[middle], batches[-1]]
    wrong = []
    for at in picks:
        starts = (0, 5, 300, RECORDS - 5) if FULL_SWEEP else (0, 5) if at == batches[0] else (0,)
        for position in range(at, at + 61):
            original = os.pread(fd, 1, position)
            for bit in range(8):
                os.pwrite(fd, bytes([original[0] ^ (1 << bit)]), position)
                try:
                    for start in starts:
                        got = []
                        try:
                            for _, rec in records_from(log, start, FetchIsolation.LOG_END):
                                got.append((rec.offset, rec.value))
                        except KafkaStorageError:
                            continue
                        if got != EXPECTED[start:]:
                            wrong.append((position, bit, start))
                finally:
                    os.pwrite(fd, original, position)
    assert wrong == [], f"(byte, bit, start) flips read back wrong with no error: {wrong[:10]}"
