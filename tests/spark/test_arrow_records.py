"""The Arrow decoder of the Spark source against the record codec's own ``batch.records()`` (no Spark needed)."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from local.errors import CorruptRecordError
from local.records import CompressionType, MemoryRecords, SimpleRecord
from local.records.legacy import build_legacy_message
from tiered.spark.arrow_records import ARROW_SCHEMA, ArrowBatchBuilder, batches_to_table

T0 = 1_700_000_000_000

records = st.lists(
    st.builds(
        lambda ts, key, value, headers: SimpleRecord(T0 + ts, key, value, headers=headers),
        st.integers(-10**6, 10**9),
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=300),
        st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2),
    ),
    min_size=1, max_size=40,
)


def _expected(bufs: list[bytes], lo: int = 0, hi: int = 2**63 - 1) -> list[tuple[object, ...]]:
    out = []
    for buf in bufs:
        for batch in MemoryRecords(buf).batches():
            if batch.is_control_batch:
                continue
            epoch = batch.partition_leader_epoch
            for r in batch.records():
                if lo <= r.offset < hi:
                    out.append((r.offset, r.timestamp, r.key, r.value, list(r.headers), epoch if epoch >= 0 else None))
    return out


def _got(bufs: list[bytes], lo: int = 0, hi: int = 2**63 - 1) -> list[tuple[object, ...]]:
    builder = ArrowBatchBuilder("t", 3, lo, hi)
    batches = [rb for b in bufs for rb in builder.add(b)] + builder.flush()
    out = []
    for rb in batches:
        for row in rb.to_pylist():
            ts = row["timestamp"]
            ms = None if ts is None else round(ts.timestamp() * 1000)
            out.append((row["offset"], ms, row["key"], row["value"], [(h["key"], h["value"]) for h in row["headers"]],
                        row["leaderEpoch"]))
            assert row["topic"] == "t" and row["partition"] == 3
    return out


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.tuples(records, st.sampled_from(list(CompressionType))), min_size=1, max_size=5),
       window=st.tuples(st.integers(0, 100), st.integers(0, 200)))
def test_arrow_decoding_matches_the_record_codec(batches: list[tuple[list[SimpleRecord], CompressionType]],
                                                 window: tuple[int, int]) -> None:
    bufs, offset = [], 0
    for recs, codec in batches:
        bufs.append(bytes(MemoryRecords.build(recs, codec, base_offset=offset, partition_leader_epoch=offset % 3 - 1)))
        offset += len(recs)
    assert _got(bufs) == _expected(bufs)
    lo, hi = window
    assert _got(bufs, lo, hi) == _expected(bufs, lo, hi)


def test_uniform_records_and_log_append_time() -> None:
    recs = [SimpleRecord(T0 + i, None, b"%05d" % i) for i in range(1000)]
    bufs = [bytes(MemoryRecords.build(recs, base_offset=0)),
            bytes(MemoryRecords.build(recs[:10], base_offset=1000, log_append_time=T0 + 99))]
    table = batches_to_table("t", 0, bufs)
    assert table.column("offset").to_pylist() == list(range(1010))
    assert table.column("timestampType").to_pylist() == [0] * 1000 + [1] * 10
    assert _got(bufs) == _expected(bufs)


def test_control_batches_are_dropped_and_legacy_messages_read() -> None:
    bufs = [build_legacy_message(0, b"k", b"v", magic=0), build_legacy_message(1, None, None, magic=1, timestamp=T0),
            bytes(MemoryRecords.build([SimpleRecord(T0, b"a", b"b")], base_offset=2, producer_id=7, producer_epoch=0,
                                      base_sequence=0, is_transactional=True)),
            bytes(MemoryRecords.end_transaction_marker(7, 0, commit=True, base_offset=3))]
    table = batches_to_table("t", 0, bufs)
    assert table.column("offset").to_pylist() == [0, 1, 2]
    assert table.column("key").to_pylist() == [b"k", None, b"a"]
    assert table.column("value").to_pylist() == [b"v", None, b"b"]
    assert table.column("timestampType").to_pylist() == [-1, 0, 0]


@pytest.mark.parametrize("where", [30, 61, -3])
def test_a_damaged_batch_raises_with_its_offset(where: int) -> None:
    buf = bytearray(bytes(MemoryRecords.build([SimpleRecord(T0, b"k%d" % i, b"v" * 50) for i in range(20)], base_offset=40)))
    buf[where] ^= 0x01
    with pytest.raises(CorruptRecordError, match="offset 40"):
        batches_to_table("t", 0, [bytes(buf)])


@settings(max_examples=30, deadline=None)
@given(batches=st.lists(st.tuples(records, st.sampled_from(list(CompressionType))), min_size=1, max_size=4),
       columns=st.sets(st.sampled_from(ARROW_SCHEMA.names), min_size=1))
def test_a_subset_of_columns_is_the_same_columns_of_the_whole(batches: list[tuple[list[SimpleRecord], CompressionType]],
                                                               columns: set[str]) -> None:
    bufs, offset = [], 0
    for recs, codec in batches:
        bufs.append(bytes(MemoryRecords.build(recs, codec, base_offset=offset)))
        offset += len(recs)
    bufs.insert(0, build_legacy_message(0, b"k", b"v", magic=1, timestamp=T0))  # the legacy path too
    whole = batches_to_table("t", 0, bufs)
    builder = ArrowBatchBuilder("t", 0, columns=columns)
    part = pa.Table.from_batches([rb for b in bufs for rb in builder.add(b)] + builder.flush())
    assert part.schema.names == [c for c in ARROW_SCHEMA.names if c in columns]
    assert part == whole.select(part.schema.names)


def test_only_the_columns_asked_for_are_cut_out_of_the_records(monkeypatch: pytest.MonkeyPatch) -> None:
    from tiered.spark import arrow_records

    cut: list[str] = []
    real_slices = arrow_records._slices

    def counting(*args: object) -> object:
        cut.append("numpy")
        return real_slices(*args)  # type: ignore[arg-type]

    class Native:
        def decode(self, *args: object) -> object:
            out = args[-1]
            assert isinstance(out, list)
            cut.extend(["native key"] * (out[5] is not None) + ["native value"] * (out[8] is not None))
            written.extend(name for name, i in (("timestamp", 1), ("timestampType", 2), ("leaderEpoch", 3))
                           if out[i] is not None)
            return real_native.decode(*args)

    real_native = arrow_records._arrowdecode
    monkeypatch.setattr(arrow_records, "_slices", counting)
    monkeypatch.setattr(arrow_records, "_arrowdecode", Native())
    buf = bytes(MemoryRecords.build([SimpleRecord(T0, b"k", b"v" * 10, headers=[("h", b"1")]) for _ in range(50)]))
    written: list[str] = []  # the fixed-size columns the C walk was given memory to write
    for native, expected in ((False, ["numpy"]), (True, ["native value"])):  # the values; not the keys
        cut.clear()
        builder = ArrowBatchBuilder("t", 0, columns={"offset", "value"}, native=native)
        (rb,) = builder.add(buf) + builder.flush()
        assert rb.schema.names == ["value", "offset"] and cut == expected
        assert rb.column("value").to_pylist() == [b"v" * 10] * 50
    assert written == []  # nor the timestamps, their types or the epochs
    for asked in ("timestamp", "timestampType", "leaderEpoch"):
        written.clear()
        builder = ArrowBatchBuilder("t", 0, columns={"offset", asked}, native=True)
        (rb,) = builder.add(buf) + builder.flush()
        assert written == [asked]
        assert rb.column(asked).to_pylist() == batches_to_table("t", 0, [buf]).column(asked).to_pylist()
    with pytest.raises(ValueError, match="not columns of the source: nosuch"):
        ArrowBatchBuilder("t", 0, columns={"offset", "nosuch"})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 30), min_size=1, max_size=8), reads=st.lists(st.integers(1, 900), min_size=1),
       until=st.integers(0, 300), cut=st.integers(0, 3), read_bytes=st.sampled_from([64, 1000, 8 * 1024 * 1024]))
def test_raw_batches_are_cut_alike_whatever_lengths_the_reads_return(
        monkeypatch: pytest.MonkeyPatch, sizes: list[int], reads: list[int], until: int, cut: int,
        read_bytes: int) -> None:
    """``RawBatches.next_batch`` gives each whole batch, the same bytes at the same position, whether reads return all
    that was asked or less (a remote read stops at its cache chunk's end), and refuses a batch the data cuts."""
    from local.errors import CorruptRecordError
    from tiered.spark import raw_batches as reader

    monkeypatch.setattr(reader, "READ_BYTES", read_bytes)
    batches, offset = [], 0
    for n in sizes:
        batches.append(bytes(MemoryRecords.build([SimpleRecord(T0, None, b"x" * (offset % 50))] * n,
                                                 base_offset=offset)))
        offset += n
    data = b"".join(batches)[: -cut or None]
    lengths = itertools.cycle(reads)

    def read(position: int, n: int) -> memoryview:
        return memoryview(data)[position:position + min(n, next(lengths))]

    expected, pos, offset = [], 0, 0
    for b, n in zip(batches, sizes, strict=True):
        if offset >= until:
            break
        expected.append((pos, b))
        pos, offset = pos + len(b), offset + n
    got: list[tuple[int, bytes]] = []
    try:
        raw = reader.RawBatches(read, 0, None, until, "here")
        while (view := raw.next_batch()) is not None:
            got.append((raw.position - len(view), bytes(view)))
    except CorruptRecordError as exc:
        assert cut and "here: " in str(exc)
        assert got == expected[: len(got)] and len(got) == len(expected) - 1  # the last batch, cut
        return
    assert got == expected


def test_output_memory_is_handed_out_again_only_once_nothing_refers_to_it() -> None:
    from tiered.spark.arrow_records import OutputMemory

    memory = OutputMemory(max_bytes=1 << 20)
    first = memory.take(1000)
    wrapped = pa.Array.from_buffers(pa.uint8(), 1000, [None, pa.py_buffer(first[:1000])])
    del first
    second = memory.take(1000)
    assert memory.tracked_bytes == 2000  # the first is still wrapped by an Arrow array: a new one
    del wrapped, second
    again = memory.take(900)
    assert memory.tracked_bytes == 2000 and again.nbytes == 1000  # nothing refers to either: one of them again
    del again
    large = memory.take(20_000)
    del large
    assert memory.take(5_000).nbytes == 5_000  # never one of more than twice the size asked (and 4 KiB)
    assert memory.take(10_000).nbytes == 20_000
    held = [memory.take(300_000) for _ in range(4)]
    assert memory.tracked_bytes <= 1 << 20  # beyond the bound, the free ones are dropped and new ones not tracked
    assert all(a.nbytes == 300_000 for a in held) and len({id(a) for a in held}) == 4


def test_tables_decoded_earlier_are_intact_while_later_chunks_reuse_memory() -> None:
    """A reader that keeps every record batch (a list of them) while more chunks are decoded: no memory still
    referred to is written again."""
    from tiered.spark import arrow_records

    recs = [SimpleRecord(T0 + i, f"k{i}".encode(), bytes([i % 251]) * (100 + i % 7)) for i in range(300)]
    bufs = [bytes(MemoryRecords.build(recs[i:i + 30], base_offset=i)) for i in range(0, 300, 30)]
    expected = batches_to_table("t", 0, bufs).to_pylist()
    kept = []
    for _ in range(3):
        builder = ArrowBatchBuilder("t", 0, native=arrow_records.NATIVE_DECODE)
        for buf in bufs:
            kept.extend(builder.add(buf))
            kept.extend(builder.flush())  # one chunk a batch: many takes
        assert pa.Table.from_batches(kept[-len(bufs):]).to_pylist() == expected
    assert pa.Table.from_batches(kept).to_pylist() == expected * 3


def test_the_c_walk_refuses_epochs_without_their_bitmap() -> None:
    import numpy as np

    from tiered.spark import arrow_records

    if arrow_records._arrowdecode is None:
        pytest.fail("tiered.spark._arrowdecode is not built: nothing to check")
    buf = bytes(MemoryRecords.build([SimpleRecord(T0, None, b"v")]))
    body = buf[61:]
    meta = np.array([0, T0, T0, 0, 0, 1, 0, 0, len(body)], np.int64)
    out = [np.zeros(64, np.uint8) for _ in range(5)] + [None] * 6
    out[4] = None
    with pytest.raises(ValueError, match=r"out\[3\] and out\[4\] \(the epochs and their bitmap\) go together"):
        arrow_records._arrowdecode.decode([body], meta, 0, 0, 2**63 - 1, False, out)
    out[4] = np.zeros(64, np.uint8)
    assert arrow_records._arrowdecode.decode([body], meta, 0, 0, 2**63 - 1, False, out)[0] == 1


# Runs of plain batches taken at once (ArrowBatchBuilder.add_run, _arrowdecode.scan) -------------------------------

def _plain(base: int, n: int = 3, ts: int = T0, **kw: object) -> bytes:
    return bytes(MemoryRecords.build([SimpleRecord(ts + i, b"k", b"v%d" % i) for i in range(n)], base_offset=base,
                                     **kw))  # type: ignore[arg-type]


def _native() -> None:
    from tiered.spark import arrow_records

    if not arrow_records.NATIVE_DECODE:
        pytest.fail("tiered.spark._arrowdecode is not built: nothing to check")


def _flipped(buf: bytes, at: int) -> bytes:
    out = bytearray(buf)
    out[at] ^= 0x01
    return bytes(out)


_LEFT_TO_PYTHON = {  # the batch that a run stops before, and the builder's window and scan arguments
    "compressed": (lambda: bytes(MemoryRecords.build([SimpleRecord(T0, b"k", b"v")], "gzip", base_offset=3)), {}),
    "control": (lambda: bytes(MemoryRecords.end_transaction_marker(9, 0, commit=False, base_offset=3)), {}),
    "transactional, with aborted ones to drop": (
        lambda: _plain(3, producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True),
        {"transactional": False}),
    "legacy": (lambda: build_legacy_message(3, b"k", b"v", magic=1, timestamp=T0), {}),
    "its CRC wrong": (lambda: _flipped(_plain(3), 70), {}),
    "below from_offset": (lambda: _plain(3), {"from_offset": 4}),
    "at until_offset": (lambda: _plain(3), {"until_offset": 5}),
    "max timestamp below the floor": (lambda: _plain(3, ts=T0 - 10_000), {"ts_floor": T0 - 5}),
    "cut short": (lambda: _plain(3)[:-1], {}),
}


@pytest.mark.parametrize("case", list(_LEFT_TO_PYTHON))
def test_a_run_stops_before_a_batch_that_needs_the_one_at_a_time_path(case: str) -> None:
    """Everything the one-at-a-time path treats apart (decompression, dropping, refusing with a named error,
    cutting records out of a batch) stops a run: the batches before it are taken, it and after it are not."""
    _native()
    make, args = _LEFT_TO_PYTHON[case]
    first, odd, last = _plain(0), make(), _plain(6) if case != "cut short" else b""  # cut by the end of the data
    data = first + odd + last
    builder = ArrowBatchBuilder("t", 0, args.get("from_offset", 0), args.get("until_offset", 2**63 - 1))
    if "from_offset" in args:  # the first batch would itself straddle the window: start at the odd one
        taken, out = builder.add_run(data, len(first), args.get("ts_floor"), args.get("transactional", True))
        assert taken == 0 and out == []
        return
    taken, out = builder.add_run(data, 0, args.get("ts_floor"), args.get("transactional", True))
    assert taken == len(first) and out == []
    assert builder.add_run(data, taken, args.get("ts_floor"), args.get("transactional", True)) == (0, [])
    (rb,) = builder.flush()
    assert rb.column("offset").to_pylist() == [0, 1, 2]


def test_a_run_takes_transactional_batches_when_nothing_is_aborted_and_stops_at_a_full_chunk(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tiered.spark import arrow_records

    _native()
    txn = _plain(3, producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True)
    data = _plain(0) + txn + _plain(6) + _plain(9)
    builder = ArrowBatchBuilder("t", 0)
    assert builder.add_run(data, 0)[0] == len(data)
    assert builder.flush()[0].column("offset").to_pylist() == list(range(12))
    monkeypatch.setattr(arrow_records, "CHUNK_RECORDS", 5)  # a chunk ends with the batch that reaches 5 records
    builder = ArrowBatchBuilder("t", 0)
    taken, out = builder.add_run(data, 0)
    assert taken == 2 * len(txn) and [rb.num_rows for rb in out] == [6]
    taken, out = builder.add_run(data, taken)
    assert taken == 2 * len(txn) and [rb.num_rows for rb in out] == [6]


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[bytes], list[tuple[int, int, int]]]:
    """Batches as a log holds them, of every kind a run must stop at, and the aborted transactions among them."""
    out: list[bytes] = []
    aborted: list[tuple[int, int, int]] = []
    offset = draw(st.integers(0, 50))
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["plain"] * 6 + ["compressed", "control", "txn", "legacy", "log-append"]))
        n = draw(st.integers(1, 6))
        ts = T0 + draw(st.integers(0, 5)) * 1000
        recs = [SimpleRecord(ts + i, None if i % 3 else b"k", bytes([offset % 251]) * draw(st.integers(0, 60)))
                for i in range(n)]
        if kind == "control":
            out.append(bytes(MemoryRecords.end_transaction_marker(7, 0, commit=False, base_offset=offset)))
            n = 1
        elif kind == "legacy":
            out.append(build_legacy_message(offset, b"k", b"legacy", magic=1, timestamp=ts))
            n = 1
        elif kind == "txn":
            pid = draw(st.sampled_from([7, 8]))
            out.append(bytes(MemoryRecords.build(recs, base_offset=offset, producer_id=pid, producer_epoch=0,
                                                 base_sequence=0, is_transactional=True)))
            if pid == 7:
                aborted.append((7, offset, offset + n - 1))
        else:
            out.append(bytes(MemoryRecords.build(
                recs, "lz4" if kind == "compressed" else None, base_offset=offset,
                **({"log_append_time": ts + 7} if kind == "log-append" else {}))))  # type: ignore[arg-type]
        offset += n + draw(st.sampled_from([0, 0, 2]))
    return out, aborted


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream=streams(), reads=st.lists(st.integers(1, 700), min_size=1), window=st.tuples(st.integers(0, 40),
       st.integers(0, 120)), floor=st.none() | st.integers(0, 5), committed=st.booleans(),
       damage=st.none() | st.tuples(st.integers(0, 11), st.integers(21, 200)), chunk=st.sampled_from([4, 64 * 1024]))
@example(stream=([_plain(0), _plain(3, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)],
                 [(7, 3, 5)]), reads=[700], window=(0, 100), floor=None, committed=True, damage=None, chunk=65536)
def test_runs_taken_at_once_give_what_one_batch_at_a_time_gives(
        monkeypatch: pytest.MonkeyPatch, stream: tuple[list[bytes], list[tuple[int, int, int]]], reads: list[int],
        window: tuple[int, int], floor: int | None, committed: bool, damage: tuple[int, int] | None,
        chunk: int) -> None:
    """The reader's decode with runs (``add_run``) and without (each batch through ``add``): the same record
    batches, chunk by chunk, or the same error at the same position, whatever the reads return, the offsets, the
    timestamp floor, the aborted transactions, and a byte flipped in some batch."""
    from tiered.spark import arrow_records, reader
    from tiered.spark.raw_batches import RawBatches

    _native()
    monkeypatch.setattr(arrow_records, "CHUNK_RECORDS", chunk)
    bufs, aborted = stream
    if damage is not None and damage[0] < len(bufs) and damage[1] < len(bufs[damage[0]]):
        bufs = [*bufs[:damage[0]], _flipped(bufs[damage[0]], damage[1]), *bufs[damage[0] + 1:]]
    data = b"".join(bufs)
    lo, hi = window[0], window[0] + window[1]
    ts_floor = None if floor is None else T0 + floor * 1000

    def run(runs: bool) -> object:
        lengths = itertools.cycle(reads)
        builder = ArrowBatchBuilder("t", 0, lo, hi)
        if not runs:
            monkeypatch.setattr(builder, "add_run", lambda *args: (0, []))
        raw = RawBatches(lambda p, n: memoryview(data)[p:p + min(n, next(lengths))], 0, len(data), hi, "here")
        try:
            got = list(reader._decode_from(builder, raw, "here", aborted if committed else [], ts_floor))
            got += builder.flush()
        except (reader._DamagedBatch, CorruptRecordError) as exc:
            error = exc.error if isinstance(exc, reader._DamagedBatch) else exc
            return type(exc).__name__, str(error), error.context.get("position")
        return [rb.to_pydict() for rb in got]

    with_runs, one_at_a_time = run(True), run(False)
    assert with_runs == one_at_a_time
