"""The cleaner's loops in C (local/cleaner/_cleancore.c) give the answers of their Python definitions
(local.cleaner.records, local.cleaner.offset_map) on every input: the record scan and its key digests (SipHash-2-4's
128-bit output, held to the reference vectors of its authors), the re-encoding (kafka-python decodes the result), the
offset map's table byte for byte, and malformed records refused by both."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from local.cleaner import filter as cleaner_filter
from local.cleaner import offset_map as offset_map_module
from local.cleaner import records as py_records
from local.cleaner.offset_map import SkimpyOffsetMap
from local.errors import InvalidRecordError
from local.records import MemoryRecords, SimpleRecord
from local.records.batch import RECORD_BATCH_OVERHEAD

# The C core is optional (no compiler, no extension): without it there is no native loop to compare; the Python
# filter it must agree with is tested on its own everywhere, and a build with the extension (CI's) runs this module.
pytestmark = pytest.mark.skipif(  # allowed-skip: the C core is optional (above)
    cleaner_filter._cleancore is None, reason="no C compiler built local.cleaner._cleancore")

T0 = 1_700_000_000_000
keys = st.one_of(st.none(), st.binary(max_size=80))
values = st.one_of(st.none(), st.binary(max_size=200))
headers = st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=10))), max_size=2)
records = st.lists(st.tuples(keys, values, headers, st.integers(-(2**40), 2**40)), min_size=1, max_size=30)


def _body(recs: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]) -> bytes:
    batch = MemoryRecords.build([SimpleRecord(T0 + ts, k, v, headers=h) for k, v, h, ts in recs], base_offset=100)
    return bytes(batch)


@settings(max_examples=200, deadline=None)
@given(records)
def test_the_scan_agrees_and_its_digests_are_the_keyed_hash(recs: list) -> None:  # type: ignore[type-arg]
    data = _body(recs)
    body = data[RECORD_BATCH_OVERHEAD:]
    hash_key = os.urandom(16)
    fields_py, hashes_py = py_records.scan_records(body, len(recs), hash_key)
    fields_c, hashes_c = cleaner_filter.c_scan_records(body, len(recs), hash_key)
    assert np.array_equal(fields_py, fields_c) and hashes_py == hashes_c
    for i, (key, value, _, _) in enumerate(recs):
        expected = bytes(16) if key is None else py_records.key_digest(hash_key, key)
        assert hashes_c[i * 16 : (i + 1) * 16] == expected
        assert fields_c[i][py_records.F_KEY_LEN] == (-1 if key is None else len(key))
        assert fields_c[i][py_records.F_VALUE_LEN] == (-1 if value is None else len(value))


@settings(max_examples=200, deadline=None)
@given(records, st.data())
def test_the_rebuild_agrees_and_kafka_python_decodes_it(recs: list, data: st.DataObject) -> None:  # type: ignore[type-arg]
    raw = _body(recs)
    body = raw[RECORD_BATCH_OVERHEAD:]
    n = len(recs)
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    fields, _ = py_records.scan_records(body, n, bytes(16))
    timestamps = np.array([T0 + ts for _, _, _, ts in recs], dtype=np.int64)
    base = data.draw(st.sampled_from([int(timestamps[np.argmax(keep)]) if keep.any() else T0, T0 + 2**41]))
    py_out = py_records.rebuild_records(body, fields, keep, timestamps, base)
    c_out = cleaner_filter.c_rebuild_records(body, fields, keep, timestamps, base)
    assert py_out == c_out
    # the kept records, decoded by kafka-python from a batch holding them (base timestamp = base, base offset 100)
    import struct

    from crc32c import crc32c

    kept = int(keep.sum())
    if kept == 0:
        assert c_out == (b"", -1)
        return
    header = bytearray(raw[:RECORD_BATCH_OVERHEAD])
    struct.pack_into(">i", header, 8, RECORD_BATCH_OVERHEAD - 12 + len(c_out[0]))
    struct.pack_into(">q", header, 27, base)
    struct.pack_into(">i", header, 57, kept)
    batch = bytearray(header) + c_out[0]
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    decoded = list(DefaultRecordBatch(bytes(batch)))
    want = [(100 + i, T0 + recs[i][3], recs[i][0], recs[i][1]) for i in np.flatnonzero(keep)]
    assert [(r.offset, r.timestamp, None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value))
            for r in decoded] == want
    assert c_out[1] == max(T0 + recs[i][3] for i in np.flatnonzero(keep))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=6), st.integers(0, 2**62)), max_size=60), st.integers(2, 40),
       st.integers(1, 60))
def test_the_offset_map_agrees_table_for_table(puts: list[tuple[bytes, int]], slots: int, max_entries: int) -> None:
    c_map = SkimpyOffsetMap(slots * 24, native=True)
    py_map = SkimpyOffsetMap(slots * 24, native=False)
    assert c_map._put_many is not offset_map_module.py_put_many
    assert c_map.hash_key != py_map.hash_key  # each map draws its own
    py_map.hash_key = c_map.hash_key
    hashes = b"".join(py_records.key_digest(c_map.hash_key, k) for k, _ in puts)
    offsets = np.array([o for _, o in puts], dtype=np.int64)
    assert c_map.put_many(hashes, offsets, max_entries) == py_map.put_many(hashes, offsets, max_entries)
    assert c_map.entries == py_map.entries <= min(slots, max_entries)
    assert bytes(c_map._view) == bytes(py_map._view)
    probe = hashes + py_records.key_digest(c_map.hash_key, b"never put")
    assert np.array_equal(c_map.get_many(probe, len(puts) + 1), py_map.get_many(probe, len(puts) + 1))
    latest: dict[bytes, int] = {}
    done = c_map.put_many(b"", np.array([], dtype=np.int64))
    assert done == 0
    for (key, offset), _ in zip(puts, range(py_map.put_many(hashes, offsets, max_entries)), strict=False):
        latest[key] = offset
    for key, offset in latest.items():
        assert c_map.get(key) == offset and py_map.get(key) == offset  # (distinct short keys never share a digest)


@given(st.binary(min_size=1, max_size=40), st.integers(1, 4))
def test_malformed_records_are_refused_by_both(junk: bytes, count: int) -> None:
    outcomes = []
    for scan in (py_records.scan_records, cleaner_filter.c_scan_records):
        try:
            fields, hashes = scan(junk, count, bytes(range(16)))
            outcomes.append(("ok", fields.tolist(), hashes))
        except InvalidRecordError:
            outcomes.append(("refused",))
    assert outcomes[0] == outcomes[1]


plain_batches = st.lists(
    st.tuples(
        st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", None]), st.one_of(st.none(), st.binary(max_size=8)),
                           st.integers(0, 50)), min_size=1, max_size=6),
        st.sampled_from(["plain", "producer", "log-append-time", "horizon-past", "horizon-future"]),
        st.integers(0, 3),  # offsets skipped before the batch (a gap, as compaction leaves)
    ), min_size=1, max_size=12)


def _record_offsets(batches: list) -> list[tuple[int, int, bytes | None]]:  # type: ignore[type-arg]
    """(batch number, offset, key) of every record, as _segment_bytes lays them out."""
    out, offset = [], 0
    for n, (recs, _, gap) in enumerate(batches):
        offset += gap
        for key, _, _ in recs:
            out.append((n, offset, key))
            offset += 1
    return out


def _batch_starts(seg: bytes) -> list[list[int]]:
    starts, pos = [], 0
    while pos < len(seg):
        starts.append([int.from_bytes(seg[pos : pos + 8], "big"), pos])
        pos += int.from_bytes(seg[pos + 8 : pos + 12], "big") + 12
    return starts


def _segment_bytes(batches: list) -> tuple[bytes, list[int]]:  # type: ignore[type-arg]
    """Batches at consecutive offsets (with gaps), as a segment holds them; and each batch's last offset."""
    import struct

    from crc32c import crc32c

    from local.records.batch import TimestampType

    out, lasts, offset = bytearray(), [], 0
    for recs, kind, gap in batches:
        offset += gap
        simple = [SimpleRecord(T0 + ts, k, v) for k, v, ts in recs]
        kwargs: dict = {}  # type: ignore[type-arg]
        if kind == "producer":
            kwargs = {"producer_id": 5, "producer_epoch": 0, "base_sequence": offset}
        if kind == "log-append-time":
            kwargs = {"timestamp_type": TimestampType.LOG_APPEND_TIME, "log_append_time": T0 + 99}
        if kind.startswith("horizon"):
            kwargs = {"delete_horizon_ms": T0 + (10 if kind == "horizon-past" else 10**9)}
        raw = bytearray(bytes(MemoryRecords.build(simple, base_offset=offset, **kwargs)))
        struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
        out += raw
        offset += len(recs)
        lasts.append(offset - 1)
    return bytes(out), lasts


@settings(max_examples=150, deadline=None)
@given(plain_batches, st.integers(0, 60), st.data())
def test_the_chunk_passes_in_c_decide_as_the_python_batch_filter(batches: list, latest_cut: int,  # type: ignore[type-arg]
                                                                 data: st.DataObject) -> None:
    from local.cleaner.cleaner import Cleaner, CleanerStats, Throttler
    from local.cleaner.filter import BatchFilter, FilterStats, LastRecord
    from local.cleaner.transactions import CleanedTransactionMetadata

    seg, lasts = _segment_bytes(batches)
    start = data.draw(st.integers(0, lasts[-1]))
    # the map pass: C over the chunk vs the Python batch path, table for table
    c_map, py_map = SkimpyOffsetMap(64 * 24, native=True), SkimpyOffsetMap(64 * 24, native=False)
    py_map.hash_key = c_map.hash_key
    marks = bytearray()
    at, entries, latest, stop, records, nbytes, keyless, _ = cleaner_filter._cleancore.map_plain_batches(
        seg, 0, len(seg), start, c_map.table_view, c_map.slots, 0, 40, -1, c_map.hash_key, 0, marks, 1, 0)
    assert (at, stop, nbytes) == (len(seg), 0, len(seg))
    assert records == sum(len(recs) for recs, _, _ in batches)
    assert keyless == sum(k is None for _, o, k in _record_offsets(batches) if o >= start)
    # a mark for every batch (one every byte asked): each batch's base offset and position, as the walk found them
    assert np.frombuffer(bytes(marks), dtype=np.int64).reshape(-1, 2).tolist() == _batch_starts(seg)
    c_map.entries, c_map.latest_offset = entries, latest
    cleaner = Cleaner(0, py_map, 4096, 1 << 20, 0.9, Throttler(float("inf")))
    view, pos = memoryview(seg), 0
    while pos < len(seg):
        size = int.from_bytes(seg[pos + 8 : pos + 12], "big") + 12
        assert not cleaner._map_batch(view, pos, size, start, CleanedTransactionMetadata(), 40, CleanerStats())
        pos += size
    assert bytes(c_map._view) == bytes(py_map._view) and (c_map.entries, c_map.latest_offset) == (
        py_map.entries, py_map.latest_offset)
    # the cleaning pass: C over the chunk vs BatchFilter batch by batch, byte for byte
    py_map.latest_offset = c_map.latest_offset = min(py_map.latest_offset, latest_cut)
    retain = np.array(sorted(data.draw(st.sets(st.sampled_from(lasts)))), dtype=np.int64)
    upper = data.draw(st.sampled_from([lasts[-1] + 1, 10**6]))
    now = T0 + data.draw(st.sampled_from([0, 10**6]))
    out, meta = bytearray(), bytearray()
    at, stop, m_read, b_read, m_kept, b_kept, invalid, last_seen = cleaner_filter._cleancore.filter_plain_batches(
        seg, 0, len(seg), c_map.table_view, c_map.slots, c_map.latest_offset, upper, now, 500, retain, out, meta,
        c_map.hash_key)
    assert (at, stop, last_seen) == (len(seg), 0, lasts[-1])
    stats = FilterStats()
    last_records = {5: LastRecord(int(retain[-1]), 0)} if len(retain) else {}
    f = BatchFilter(py_map, CleanedTransactionMetadata(), last_records, upper, now, 500, stats, "seg")
    expected, rows, pos = bytearray(), [], 0
    while pos < len(seg):
        size = int.from_bytes(seg[pos + 8 : pos + 12], "big") + 12
        last = int.from_bytes(seg[pos : pos + 8], "big") + int.from_bytes(seg[pos + 23 : pos + 27], "big")
        producer = int.from_bytes(seg[pos + 43 : pos + 51], "big", signed=True)
        if producer >= 0:  # the C pass keeps any listed last offset; give Python the same producers
            f.last_records = {5: LastRecord(last, 0)} if last in set(retain.tolist()) else {}
        kept = f.filter(view, pos, size, pos)
        if kept is not None:
            expected += kept[0]
            rows.append((kept[1], kept[2], len(kept[0])))
        pos += size
    assert bytes(out) == bytes(expected)
    assert np.frombuffer(bytes(meta), dtype=np.int64).reshape(-1, 3).tolist() == [list(r) for r in rows]
    assert (m_read, b_read, m_kept, b_kept, invalid) == (stats.messages_read, stats.bytes_read, stats.messages_retained,
                                                         stats.bytes_retained, stats.invalid_messages)


@settings(max_examples=60, deadline=None)
@given(plain_batches, st.data())
def test_the_chunk_passes_stop_at_a_batch_whose_crc_does_not_match(batches: list,  # type: ignore[type-arg]
                                                                   data: st.DataObject) -> None:
    """A byte flipped in one batch (past its CRC field): both passes in C take the batches before it and stop there
    with STOP_CORRUPT (3), the CRC the crc32c package's."""
    seg, _lasts = _segment_bytes(batches)
    starts = [pos for _base, pos in _batch_starts(seg)]
    bad = data.draw(st.sampled_from(starts))
    end = next((p for p in starts if p > bad), len(seg))
    damaged = bytearray(seg)
    damaged[data.draw(st.integers(bad + 23, end - 1))] ^= 0x01  # past the attributes (a flip there reads as slow)
    table = SkimpyOffsetMap(64 * 24, native=True)
    at, _entries, _latest, stop, _records, nbytes, _keyless, _ = cleaner_filter._cleancore.map_plain_batches(
        bytes(damaged), 0, len(seg), 0, table.table_view, table.slots, 0, 10**6, -1, table.hash_key)
    assert (at, stop, nbytes) == (bad, 3, bad)
    outs = []
    for chunk, expected in ((bytes(damaged), (bad, 3, bad)), (seg[:bad], (bad, 0, bad))):
        out, meta = bytearray(), bytearray()
        at, stop, _m_read, b_read, *_rest = cleaner_filter._cleancore.filter_plain_batches(
            chunk, 0, len(chunk), table.table_view, table.slots, -1, 10**6, T0, 500, np.array([], np.int64), out,
            meta, table.hash_key)
        assert (at, stop, b_read) == expected
        outs.append(bytes(out))
    assert outs[0] == outs[1]  # what it wrote of the batches before the damaged one: as of those batches alone
