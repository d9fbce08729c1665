"""tiered.batching, the one rule for cutting records into batches (HTTP produce, the Spark writer): every batch within
the limit, closed only before a record that would take it above, records kept in order, and the size it counts
is the size the batch has."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from local.errors import RecordTooLargeError
from local.records import MemoryRecords, SimpleRecord
from tiered.batching import PendingBatch, build_batches

_records = st.lists(st.builds(
    SimpleRecord,
    key=st.none() | st.binary(max_size=40),
    value=st.none() | st.binary(max_size=400),
    timestamp=st.integers(1_700_000_000_000, 1_700_000_000_000 + 10**9),
    headers=st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3),
), min_size=1, max_size=60)


def _flat(batches: list[MemoryRecords]) -> list[tuple[bytes | None, bytes | None, int]]:
    return [(r.key, r.value, r.timestamp) for b in batches for batch in b.batches() for r in batch.records()]


@settings(max_examples=150, deadline=None)
@given(records=_records, limit=st.integers(200, 3000), compression=st.sampled_from(["none", "gzip", "zstd"]))
def test_batches_are_within_the_limit_greedy_and_keep_every_record(
    records: list[SimpleRecord], limit: int, compression: str
) -> None:
    pending = PendingBatch()
    for r in records:  # the size counted is the size built
        pending.add(r, pending.size_with(r))
        assert MemoryRecords.build(pending.records).size_in_bytes == pending.size
    try:
        batches = build_batches(records, limit, compression)
    except RecordTooLargeError as exc:  # only when one record alone cannot fit
        index = int(str(exc).split()[1])
        alone = MemoryRecords.build([records[index]], compression=compression).size_in_bytes
        assert alone > limit and f"takes a batch of {alone} bytes" in str(exc)
        return
    assert all(b.size_in_bytes <= limit for b in batches)
    assert _flat(batches) == [(r.key, r.value, r.timestamp) for r in records]
    if compression == "none":  # greedy: a batch closed only before the record that did not fit
        counts = [batch.records_count for b in batches for batch in b.batches()]
        start = 0
        for n in counts[:-1]:
            grown = MemoryRecords.build(records[start:start + n + 1]).size_in_bytes
            assert grown > limit
            start += n


def test_a_record_too_large_alone_is_named_by_its_index() -> None:
    records = [SimpleRecord(b"a"), SimpleRecord(b"x" * 500), SimpleRecord(b"b")]
    with pytest.raises(RecordTooLargeError, match=r"record 1 of the request takes a batch of \d+ bytes, above the "
                                                  r"topic's max.message.bytes 300"):
        build_batches(records, 300)


def test_a_batch_exactly_at_the_limit_is_one_batch() -> None:
    records = [SimpleRecord(b"v%d" % i) for i in range(5)]
    limit = MemoryRecords.build(records).size_in_bytes
    assert [b.size_in_bytes for b in build_batches(records, limit)] == [limit]
    assert len(build_batches(records, limit - 1)) == 2
