"""The chunk cache's parts on their own: the memory tier, single flight, the disk store, a stream's helpers.

``test_chunk_cache.py`` tests the cache through its public reads; these pin each part's own contract (a bound, an
order, a check) where a read through the whole cache could not tell two behaviours apart. Written against the
surviving mutants of ``python -m bench mutation tiered/cache/...`` (see TESTING.md). No sleeps: background work is
waited for by events, conditions and futures.
"""

from __future__ import annotations

import io
import logging
import mmap
import os
import re
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from tiered.cache import chunk_stream, disk_store
from tiered.cache.chunk_memory import MemoryChunks
from tiered.cache.chunk_stream import DaemonThreads, read_into
from tiered.cache.disk_store import TRAILER, TRAILER_MAGIC, DiskChunkStore, NoDiskStore, _TrailedReader
from tiered.cache.single_flight import SingleFlight

LIMIT = 30.0  # seconds: a failure bound for waits that end at once when the code is right
DATA = os.urandom(5000)


# MemoryChunks: the memory tier ---------------------------------------------------------------------------------


def test_memory_holds_a_chunk_of_exactly_the_limit_and_refuses_a_larger_one() -> None:
    mem = MemoryChunks(1000)
    mem.put("big", b"x" * 1001)
    assert "big" not in mem and mem.size_bytes == 0
    mem.put("full", b"y" * 1000)
    assert "full" in mem and mem.size_bytes == 1000
    mem.put("next", b"z")  # one byte over: the least recently used goes
    assert "full" not in mem and "next" in mem and mem.size_bytes == 1


def test_a_negative_memory_limit_holds_nothing() -> None:
    mem = MemoryChunks(-5)
    mem.put("empty", b"")  # a zero-byte chunk fits a zero limit
    mem.put("a", b"a")
    assert "a" not in mem and mem.size_bytes == 0


def test_memory_evicts_least_recently_used_first_and_counts_bytes_exactly() -> None:
    mem = MemoryChunks(300)
    for name in ("a", "b", "c"):
        mem.put(name, name.encode() * 100)
    assert mem.size_bytes == 300
    assert mem.get("a") == b"a" * 100  # a is now the most recently used
    mem.put("d", b"d" * 100)
    assert "b" not in mem and all(n in mem for n in "acd") and mem.size_bytes == 300
    mem.put("e", b"e" * 200)  # two go: c, then a (d was put after a's use)
    assert [n for n in "abcde" if n in mem] == ["d", "e"] and mem.size_bytes == 300


def test_membership_does_not_make_a_chunk_recently_used() -> None:
    mem = MemoryChunks(200)
    mem.put("a", b"a" * 100)
    mem.put("b", b"b" * 100)
    assert "a" in mem and mem.get("b") == b"b" * 100
    mem.put("c", b"c" * 100)  # b was used (get), a only looked at: a goes
    assert "a" not in mem and "b" in mem and "c" in mem


def test_putting_a_chunk_again_replaces_its_bytes_and_makes_it_most_recent() -> None:
    mem = MemoryChunks(300)
    mem.put("a", b"a" * 100)
    mem.put("b", b"b" * 50)
    mem.put("a", b"A" * 150)  # replaced, not added: 200 bytes held
    assert mem.size_bytes == 200 and mem.get("a") == b"A" * 150
    mem.put("c", b"c" * 100)
    assert mem.size_bytes == 300 and all(n in mem for n in "abc")
    mem.put("d", b"d" * 10)  # b is the least recently used now
    assert "b" not in mem and mem.size_bytes == 260


def test_get_of_a_missing_chunk_is_none_and_holds_tells_the_object_from_an_equal_copy() -> None:
    mem = MemoryChunks(100)
    assert mem.get("nothing") is None
    data = bytearray(b"q" * 10)
    mem.put("a", data)
    assert mem.holds("a", data) and not mem.holds("a", bytearray(data)) and not mem.holds("b", data)


def test_swap_replaces_only_the_same_object_with_a_chunk_of_the_same_length() -> None:
    mem = MemoryChunks(100)
    fetched = bytearray(b"f" * 10)
    mem.put("a", fetched)
    mem.swap("a", bytearray(fetched), b"m" * 10)  # an equal copy is not what is held: no swap
    assert mem.get("a") is fetched
    mem.swap("a", fetched, b"m" * 9)  # a different length: not the same bytes
    assert mem.get("a") is fetched
    mapped = b"m" * 10
    mem.swap("a", fetched, mapped)
    assert mem.get("a") is mapped and mem.size_bytes == 10
    mem.swap("gone", fetched, mapped)
    assert "gone" not in mem


def test_drop_prefix_and_clear_keep_the_byte_count_right() -> None:
    mem = MemoryChunks(1000)
    mem.put("o#0", b"0" * 100)
    mem.put("o#1", b"1" * 200)
    mem.put("p#0", b"p" * 300)
    mem.drop_prefix("o#")
    assert [n for n in ("o#0", "o#1", "p#0") if n in mem] == ["p#0"] and mem.size_bytes == 300
    for i in range(7):  # the freed bytes are usable again: 300 + 700 fits
        mem.put(f"q#{i}", b"q" * 100)
    assert "p#0" in mem and mem.size_bytes == 1000
    mem.clear()
    assert mem.size_bytes == 0 and "p#0" not in mem
    mem.put("r", b"r" * 1000)
    assert "r" in mem


# SingleFlight ---------------------------------------------------------------------------------------------------


def test_single_flight_claim_and_land_without_a_future() -> None:
    flights: SingleFlight[bytes] = SingleFlight()
    claimed = flights.claim("c#1")
    assert isinstance(claimed, Future) and not claimed.done() and "c#1" in flights
    assert flights.pending() == [claimed]
    assert flights.join_or_start("c#1", lambda: pytest.fail("a claimed load is joined, not started")) is claimed
    flights.land("c#1")  # without a future: whatever is in flight
    assert "c#1" not in flights and flights.pending() == []
    flights.land("c#1")  # landing twice is harmless
    assert flights.claim("c#1") is not None


# DiskChunkStore ---------------------------------------------------------------------------------------------------


def _value_file(directory: Path, chunk: bytes) -> Path:
    [found] = [p for p in directory.rglob("*.val") if p.read_bytes()[: len(chunk)] == chunk]
    return found


def test_a_stored_chunk_is_followed_by_its_crc32c_trailer_and_read_back_as_a_read_only_map(tmp_path: Path) -> None:
    from crc32c import crc32c

    store = DiskChunkStore(tmp_path, 10**6)
    try:
        store.store("o#0", DATA[:1000], "o")
        raw = _value_file(tmp_path, DATA[:1000]).read_bytes()
        assert raw == DATA[:1000] + TRAILER.pack(TRAILER_MAGIC, crc32c(DATA[:1000]))
        assert raw[-8:-4] == b"tcrc"
        got = store.lookup("o#0", "o")
        assert isinstance(got, memoryview) and got.readonly and bytes(got) == DATA[:1000]
        assert isinstance(got.obj, mmap.mmap)
        mapped = store.mapped("o#0")
        assert mapped is not None and bytes(mapped) == DATA[:1000] and store.mismatches == 0
    finally:
        store.close()


@pytest.mark.parametrize("damage", ["flip", "magic", "short", "empty"])
def test_a_damaged_chunk_is_dropped_counted_and_logged_not_served(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = DiskChunkStore(tmp_path, 10**6)
    try:
        store.store("o#0", DATA[:1000], "o")
        path = _value_file(tmp_path, DATA[:1000])
        raw = bytearray(path.read_bytes())
        if damage == "flip":
            raw[-1] ^= 0x01  # the crc's last byte
        elif damage == "magic":
            raw[-8:-4] = b"xcrc"
        elif damage == "short":
            raw = raw[:7]  # shorter than the trailer
        else:
            raw = bytearray()
        path.write_bytes(bytes(raw))
        with caplog.at_level(logging.INFO, logger=disk_store.__name__):
            assert store.lookup("o#0", "o") is None
        assert store.mismatches == 1
        record = next(r for r in caplog.records if "o#0" in r.getMessage())
        expected = {"flip": "crc32c 0x[0-9a-f]{8} does not match the 0x[0-9a-f]{8} stored with it",
                    "magic": r"no crc32c trailer \(an older cache format, or damaged\)",
                    "short": "shorter than its trailer", "empty": "shorter than its trailer"}[damage]
        assert re.fullmatch(rf"chunk o#0 of the segment cache is damaged on disk \({expected}\): fetching it again",
                            record.getMessage()), record.getMessage()
        assert record.levelno == (logging.INFO if damage == "magic" else logging.WARNING)
        assert len(store) == 0  # dropped from the store: the next lookup does not see it again
        assert store.lookup("o#0", "o") is None and store.mismatches == 1
    finally:
        store.close()


def test_a_trailer_of_exactly_its_own_size_is_damage_but_one_more_byte_is_a_chunk(tmp_path: Path) -> None:
    from crc32c import crc32c

    store = DiskChunkStore(tmp_path, 10**6)
    try:
        store.store("o#0", b"", "o")  # an empty chunk: only its trailer on disk
        assert store.lookup("o#0", "o") is None and store.mismatches == 1
        store.store("o#1", b"\x07", "o")
        got = store.lookup("o#1", "o")
        assert got is not None and bytes(got) == b"\x07" and store.mismatches == 1
        assert TRAILER.size == 8 and crc32c(b"\x07") != 0
    finally:
        store.close()


def test_mapped_checks_the_crc_only_when_asked(tmp_path: Path) -> None:
    store = DiskChunkStore(tmp_path, 10**6)
    try:
        store.store("o#0", DATA[:1000], "o")
        path = _value_file(tmp_path, DATA[:1000])
        raw = bytearray(path.read_bytes())
        raw[3] ^= 0xFF
        path.write_bytes(bytes(raw))
        unchecked = store.mapped("o#0")  # the cache maps a chunk it has just written: no second pass over it
        assert unchecked is not None and bytes(unchecked) == bytes(raw[:1000]) and store.mismatches == 0
        del unchecked
        assert store.mapped("o#0", verify=True) is None and store.mismatches == 1
        assert store.mapped("o#0") is None  # dropped
    finally:
        store.close()


def test_a_chunk_stored_inline_by_another_writer_is_checked_too(tmp_path: Path) -> None:
    from crc32c import crc32c

    store = DiskChunkStore(tmp_path, 10**6)
    try:
        chunk = DATA[:100]
        store._cache.set("o#0", chunk + TRAILER.pack(TRAILER_MAGIC, crc32c(chunk)), tag="o")
        got = store.lookup("o#0", "o")
        assert got is not None and bytes(got) == chunk and got.readonly
        store._cache.set("o#1", chunk + TRAILER.pack(TRAILER_MAGIC, crc32c(chunk) ^ 1), tag="o")
        assert store.lookup("o#1", "o") is None and store.mismatches == 1
    finally:
        store.close()


def test_a_missing_chunk_marks_its_object_cold_for_cold_seconds_and_only_that_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(disk_store._time, "monotonic", lambda: now[0])
    store = DiskChunkStore(tmp_path, 10**6)
    try:
        assert store.lookup("o#0", "o") is None  # a miss: o is cold until 1010
        store.store("o#1", DATA[:10], "o")
        store.store("p#0", DATA[:10], "p")
        assert store.lookup("o#1", "o") is None  # cold: not looked up
        got = store.lookup("p#0", "p")
        assert got is not None and bytes(got) == DATA[:10]  # another object is not cold
        now[0] = 1000.0 + disk_store.COLD_SECONDS  # still cold at exactly the end of the window
        assert store.lookup("o#1", "o") is None
        now[0] = 1000.0 + disk_store.COLD_SECONDS + 0.001
        got = store.lookup("o#1", "o")
        assert got is not None and bytes(got) == DATA[:10]
    finally:
        store.close()


def test_a_later_miss_extends_the_cold_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(disk_store._time, "monotonic", lambda: now[0])
    store = DiskChunkStore(tmp_path, 10**6)
    try:
        store.lookup("o#0", "o")  # cold until 1010
        now[0] = 1010.5
        store.lookup("o#5", "o")  # missing again: cold until 1020.5
        store.store("o#1", DATA[:10], "o")
        now[0] = 1015.0
        assert store.lookup("o#1", "o") is None
        now[0] = 1020.6
        assert store.lookup("o#1", "o") is not None
    finally:
        store.close()


def test_the_cold_list_forgets_the_least_recently_missed_object_past_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(disk_store, "COLD_OBJECTS", 3)
    now = [1000.0]
    monkeypatch.setattr(disk_store._time, "monotonic", lambda: now[0])
    store = DiskChunkStore(tmp_path, 10**6)
    try:
        for t, obj in ((1000.0, "a"), (1005.0, "b"), (1006.0, "c")):  # cold until t + 10
            now[0] = t
            assert store.lookup(f"{obj}#0", obj) is None
            store.store(f"{obj}#1", DATA[:10], obj)
        now[0] = 1011.0
        assert store.lookup("a#9", "a") is None  # a's window is over; missed again: cold until 1021, most recent
        now[0] = 1012.0
        assert store.lookup("d#0", "d") is None  # a fourth cold object: b, the least recently missed, goes
        got = store.lookup("b#1", "b")
        assert got is not None and bytes(got) == DATA[:10]
        assert store.lookup("a#1", "a") is None and store.lookup("c#1", "c") is None  # still cold
    finally:
        store.close()


def test_evict_and_clear_forget_the_cold_objects_too(tmp_path: Path) -> None:
    store = DiskChunkStore(tmp_path, 10**6)
    try:
        store.store("o#0", DATA[:10], "o")
        store.store("o#1", DATA[10:20], "o")
        store.store("p#0", DATA[:10], "p")
        assert store.lookup("q#0", "q") is None  # q cold
        store.store("q#0", DATA[:10], "q")
        assert store.evict("o") == 2 and len(store) == 2
        assert store.lookup("o#0", "o") is None  # o now cold (a miss)...
        store.store("o#0", DATA[:10], "o")
        assert store.evict("nothing") == 0
        assert store.evict("o") == 1  # ...and evicting it forgets that:
        store.store("o#0", DATA[:10], "o")
        assert store.lookup("o#0", "o") is not None
        store.clear()  # q was cold; clear forgets it
        store.store("q#0", DATA[:10], "q")
        assert store.lookup("q#0", "q") is not None and len(store) == 1
        assert store.volume() >= 10 + TRAILER.size
    finally:
        store.close()


def test_a_chunk_that_cannot_be_read_is_missing_not_an_error(tmp_path: Path) -> None:
    store = DiskChunkStore(tmp_path, 10**6)
    try:
        store.store("o#0", DATA[:1000], "o")
        _value_file(tmp_path, DATA[:1000]).unlink()  # evicted by another process between query and read
        assert store.lookup("o#0", "o") is None and store.mismatches == 0
        store.store("o#1", DATA[:10], "o")
        assert store.lookup("o#1", "o") is None  # a miss, not damage: the object is cold
    finally:
        store.close()


def test_the_trailed_reader_yields_the_chunk_then_its_trailer_in_any_piece_size() -> None:
    from crc32c import crc32c

    chunk = DATA[:100]
    whole = chunk + TRAILER.pack(TRAILER_MAGIC, crc32c(chunk))
    for size in (-1, 1, 3, 7, 8, 50, 99, 100, 101, 107, 108, 500):
        reader = _TrailedReader(chunk)
        pieces = []
        while piece := reader.read(size):
            assert size < 0 or len(piece) <= size
            pieces.append(bytes(piece))
        assert b"".join(pieces) == whole, size
        assert reader.read(size) == b"" and reader.read() == b""
    reader = _TrailedReader(chunk)
    assert bytes(reader.read()) == chunk and bytes(reader.read()) == whole[100:]  # no size: the rest of each part
    reader = _TrailedReader(chunk)
    assert bytes(reader.read(0)) == b"" and bytes(reader.read(100)) == chunk
    assert bytes(reader.read(0)) == b"" and bytes(reader.read(3)) == whole[100:103]  # read(0) reads nothing
    assert bytes(reader.read(0)) == b"" and bytes(reader.read()) == whole[103:]


def test_no_disk_store_holds_nothing() -> None:
    store = NoDiskStore()
    store.store("o#0", DATA[:10], "o")
    assert store.lookup("o#0", "o") is None and store.mapped("o#0") is None
    assert (store.evict("o"), store.volume(), len(store), store.mismatches) == (0, 0, 0, 0)
    store.clear()
    store.close()


# A stream's helpers -------------------------------------------------------------------------------------------------


class _Trickle(io.RawIOBase):
    """Hands out at most ``step`` bytes a read, and records the sizes asked for."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data, self.step, self.pos, self.asked = data, step, 0, []  # type: ignore[var-annotated]

    def read(self, size: int = -1) -> bytes:
        self.asked.append(size)
        piece = self.data[self.pos : self.pos + min(size, self.step)]
        self.pos += len(piece)
        return piece


def test_read_into_fills_the_buffer_from_short_reads_in_pieces_of_at_most_read_piece(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(chunk_stream, "READ_PIECE", 64)
    body = _Trickle(DATA, 50)
    buf = bytearray(300)
    assert read_into(body, buf) == 300 and bytes(buf) == DATA[:300]  # type: ignore[arg-type]
    assert max(body.asked) == 64 and body.asked[-1] == 300 - 250  # never more than is left
    short = _Trickle(DATA[:120], 1000)
    buf = bytearray(300)
    assert read_into(short, buf) == 120 and bytes(buf[:120]) == DATA[:120]  # type: ignore[arg-type]
    assert read_into(_Trickle(b"", 10), bytearray(10)) == 0  # type: ignore[arg-type]


def test_daemon_threads_run_calls_in_turn_report_errors_and_shut_down() -> None:
    threads = DaemonThreads(2, "test-threads")
    gate = threading.Event()
    names: list[str] = []

    def held() -> None:
        assert gate.wait(LIMIT)
        names.append(threading.current_thread().name)

    first, second = threads.submit(held), threads.submit(held)
    failed = threads.submit(lambda: (_ for _ in ()).throw(ValueError("boom")))
    gate.set()
    first.result(LIMIT)
    second.result(LIMIT)
    with pytest.raises(ValueError, match="boom"):
        failed.result(LIMIT)
    assert set(names) <= {"test-threads_0", "test-threads_1"} and len(names) == 2
    running = [t for t in threading.enumerate() if t.name.startswith("test-threads_")]
    assert len(running) == 2 and all(t.daemon for t in running)
    assert threads.submit(lambda: None).result(LIMIT) is None  # a thread survives a call that raised
    threads.shutdown()
    assert not any(t.is_alive() for t in running)
    again = threads.submit(lambda: None)  # started again on the next use
    assert again.result(LIMIT) is None
    threads.shutdown()


def test_the_disk_store_evicts_the_least_recently_used_chunks_first(tmp_path: Path) -> None:
    """Over its bound, the store drops the chunks read longest ago (diskcache culls ten at a time): a chunk stored
    first but read since stays, the ones stored after it and never read go."""
    chunk = os.urandom(100_000)
    store = DiskChunkStore(tmp_path, 2_500_000)
    try:
        for i in range(20):
            store.store(f"o#{i}", chunk, "o")
        assert len(store) == 20  # 2 MB and the database: under the bound
        assert store.lookup("o#0", "o") is not None  # read: now the most recently used of the twenty
        for i in range(20, 30):
            store.store(f"o#{i}", chunk, "o")
        assert len(store) < 30 and store.volume() <= 2_500_000
        assert store.lookup("o#0", "o") is not None
        assert store.lookup("o#1", "o") is None
    finally:
        store.close()


def test_every_damaged_chunk_read_back_is_counted(tmp_path: Path) -> None:
    store = DiskChunkStore(tmp_path, 10**6)
    try:
        for i in range(3):
            store.store(f"o#{i}", DATA[i * 1000 : (i + 1) * 1000], "o")
        for i in range(3):
            path = _value_file(tmp_path, DATA[i * 1000 : (i + 1) * 1000])
            raw = bytearray(path.read_bytes())
            raw[0] ^= 0xFF
            path.write_bytes(bytes(raw))
        assert [store.lookup(f"o#{i}", "o") for i in range(3)] == [None] * 3
        assert store.mismatches == 3 and len(store) == 0
    finally:
        store.close()
