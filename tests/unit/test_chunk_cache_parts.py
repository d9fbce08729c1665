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
from tiered.cache.chunk_memory import MemoryChunks, is_map
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


def test_memory_holds_at_most_max_chunks_whatever_their_bytes() -> None:
    mem = MemoryChunks(1000, max_chunks=3)
    for name in "abcd":
        mem.put(name, name.encode())  # 4 bytes in all, far below the byte bound
    assert [n in mem for n in "abcd"] == [False, True, True, True] and len(mem) == 3 and mem.size_bytes == 3
    assert MemoryChunks(1000, max_chunks=0).max_chunks == 1 and MemoryChunks(1000).max_chunks is None


def test_memory_chunks_bound_bytes_and_maps_apart(tmp_path: Path) -> None:
    """MemoryChunks itself: fetched bytes and maps are evicted least recently used first, each form within its own
    bounds (a map never evicts bytes, nor bytes a map); swap() moves a chunk from bytes to its map."""
    path = tmp_path / "file"
    path.write_bytes(b"m" * 400)
    with open(path, "rb") as fh:
        whole = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    maps = [memoryview(whole)[i * 100:(i + 1) * 100].toreadonly() for i in range(4)]
    assert all(is_map(m) for m in maps) and not is_map(b"x") and not is_map(memoryview(b"x"))
    memory = MemoryChunks(250, map_limit=200, max_maps=5)
    memory.put("b0", b"0" * 100)
    memory.put("b1", b"1" * 100)
    for i in range(3):
        memory.put(f"m{i}", maps[i])
    assert "m0" not in memory and "m1" in memory and "m2" in memory  # 200 bytes of maps
    assert memory.get("b0") == b"0" * 100 and memory.get("b1") == b"1" * 100
    memory.put("b2", b"2" * 100)  # past 250 bytes: the least recently used bytes go (b0), no map
    assert "b0" not in memory and all(n in memory for n in ("b1", "b2", "m1", "m2"))
    memory.swap("b1", bytearray(b"1" * 100), maps[3])  # an equal copy is not what is held: nothing moves
    assert memory.get("b1") == b"1" * 100
    held = memory.get("b2")
    assert held is not None
    memory.swap("b2", held, maps[3])
    assert is_map(memory.get("b2")) and "m1" not in memory and memory.size_bytes == 100 + 200
    assert MemoryChunks(1000, map_limit=1000, max_maps=1).max_maps == 1


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


def test_a_maps_file_is_compared_with_what_was_mapped_at_most_once_a_recheck_interval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """changed_on_disk: no until RECHECK_SECONDS after the mapping (without a stat), then the file compared with
    what was mapped (its inode, size and times); again no (without a stat) for the next interval. Bytes and a map
    whose file was evicted have not changed."""
    import os

    clock = [1000.0]
    monkeypatch.setattr(disk_store._time, "monotonic", lambda: clock[0])
    stats: list[str] = []
    real_stat = os.stat
    monkeypatch.setattr(disk_store.os, "stat", lambda path, *a, **k: (stats.append(str(path)), real_stat(path, *a, **k))[1])
    store = DiskChunkStore(tmp_path, 10**6)
    try:
        store.store("o#0", DATA[:1000], "o")
        mapped = store.mapped("o#0", verify=True)
        assert mapped is not None
        path = _value_file(tmp_path, DATA[:1000])
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))  # the file changed
        stats.clear()
        clock[0] += disk_store.RECHECK_SECONDS / 2
        assert not store.changed_on_disk(mapped) and stats == []  # within the interval: not looked at
        clock[0] += disk_store.RECHECK_SECONDS
        assert store.changed_on_disk(mapped) and stats == [str(path)]
        clock[0] += disk_store.RECHECK_SECONDS / 2
        assert not store.changed_on_disk(mapped) and stats == [str(path)]
        clock[0] += disk_store.RECHECK_SECONDS
        assert store.changed_on_disk(mapped)
        assert not store.changed_on_disk(DATA[:1000]) and not store.changed_on_disk(memoryview(DATA[:1000]))
        store.evict("o")  # the file is gone: nothing can change it through its path
        clock[0] += 2 * disk_store.RECHECK_SECONDS
        assert not store.changed_on_disk(mapped)
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


# ChunkStream against a port of its own -------------------------------------------------------------------------------
# The cache's tests drive streams through reads, where a stream that fetched one chunk too many or answered one
# reader late still gives the right bytes; a port that records what the stream asked pins the stream's own rules.

CS = 1000  # chunk size
OBJECT = os.urandom(2550)  # chunks 0 and 1 whole, chunk 2 short


class _Body(io.BytesIO):
    """The open fetch: the object's bytes from a start, failing after ``fail_after`` bytes when given (and its
    close failing when ``close_fails``)."""

    def __init__(self, data: bytes, fail_after: int | None = None, close_fails: bool = False) -> None:
        super().__init__(data)
        self.fail_after, self.close_fails = fail_after, close_fails

    def close(self) -> None:
        super().close()
        if self.close_fails:
            raise OSError("close failed in the test")

    def read(self, size: int | None = -1) -> bytes:
        if self.fail_after is not None and self.tell() >= self.fail_after:
            raise OSError("connection reset by the test")
        return super().read(size)


class _Port:
    """A :class:`chunk_stream.StreamPort` over plain containers, recording what its stream asks."""

    chunk_size = CS

    def __init__(self, *, data: bytes = OBJECT, held: tuple[int, ...] = (), disk: dict[int, bytes] | None = None,
                 fail_after: int | None = None, fail_ranged: tuple[int, ...] = (), close_fails: bool = False) -> None:
        self.data, self.held, self.disk = data, set(held), dict(disk or {})
        self.fail_after, self.fail_ranged, self.close_fails = fail_after, set(fail_ranged), close_fails
        self.buffers: list[bytearray] = []
        self.sizes: dict[str, int] = {}
        self.flights: dict[int, Future[object]] = {}
        self.claims: list[list[int]] = []
        self.opens: list[tuple[int, int | None]] = []
        self.bodies: list[_Body] = []
        self.ranged: list[tuple[int, int]] = []
        self.stored: dict[int, bytes] = {}
        self.opened = 0
        self.ended_with: object = None
        self.is_closed = False

    # the test's side
    def opener(self, start: int, end: int | None) -> _Body:
        self.opens.append((start, end))
        body = _Body(self.data[start:], self.fail_after, self.close_fails)
        self.bodies.append(body)
        return body

    def fetcher(self, start: int, end: int) -> bytes:
        self.ranged.append((start, end))
        if start // CS in self.fail_ranged:
            raise OSError(f"ranged fetch of {start} failed")
        return self.data[start : end + 1]

    # StreamPort
    @property
    def closed(self) -> bool:
        return self.is_closed

    def known_size(self, obj: str) -> int | None:
        return self.sizes.get(obj)

    def learn_size(self, obj: str, size: int) -> None:
        self.sizes[obj] = size

    def claim(self, obj: str, indexes: object) -> dict[int, Future[object]]:
        assert obj == "obj"
        wanted = [i for i in indexes if i not in self.held and i not in self.flights]  # type: ignore[attr-defined]
        self.claims.append(wanted)
        claimed: dict[int, Future[object]] = {i: Future() for i in wanted}
        self.flights.update(claimed)
        return claimed

    def land(self, obj: str, index: int, fut: Future[object]) -> None:
        assert obj == "obj" and self.flights.pop(index) is fut

    def from_disk(self, obj: str, index: int) -> bytes | None:
        assert obj == "obj"
        return self.disk.get(index)

    def fetched(self, obj: str, index: int, data: object) -> None:
        assert obj == "obj"
        self.stored[index] = bytes(data)  # type: ignore[call-overload]

    def fetch_chunk(self, index: int, size: int | None, fetcher: chunk_stream.Fetcher) -> bytes:
        start = index * CS
        end = start + CS - 1 if size is None else min(start + CS, size) - 1
        return fetcher(start, end) if start <= end else b""

    def buffer(self) -> bytearray:
        self.buffers.append(bytearray(CS))
        return self.buffers[-1]

    def stream_opened(self) -> None:
        self.opened += 1

    def stream_ended(self, stream: object) -> None:
        self.ended_with = stream


@pytest.fixture
def threads() -> object:
    pool = DaemonThreads(2, "test-stream")
    yield pool
    pool.shutdown()


def _stream(port: _Port, threads: DaemonThreads, *, index: int = 0, size: int | None = None) -> chunk_stream.ChunkStream:
    return chunk_stream.ChunkStream(port, "obj", index, size, port.fetcher, port.opener, threads)  # type: ignore[arg-type]


def _chunk(i: int, data: bytes = OBJECT) -> bytes:
    return data[i * CS : (i + 1) * CS]


def _run(stream: chunk_stream.ChunkStream) -> None:
    stream.start()
    assert stream.done is not None
    stream.done.result(LIMIT)


def test_a_stream_reads_its_window_off_one_fetch_and_learns_the_size_from_the_short_chunk(threads: DaemonThreads) -> None:
    port = _Port()
    stream = _stream(port, threads)
    assert stream.done is None
    stream.join()  # before start: nothing to wait for
    stream.advance(4)
    claimed = dict(port.flights)
    assert port.claims == [[0, 1, 2, 3, 4]]  # the size is not known: the whole window asked for
    _run(stream)
    assert port.opens == [(0, None)] and port.opened == 1 and port.bodies[0].closed
    assert [claimed[i].result(0) for i in range(3)] == [_chunk(0), _chunk(1), _chunk(2)]
    assert port.stored == {0: _chunk(0), 1: _chunk(1), 2: _chunk(2), 3: b"", 4: b""}
    assert port.sizes == {"obj": 2550}
    assert claimed[3].result(0) == b"" and claimed[4].result(0) == b""  # past the end, asked with the size learnt
    assert port.ranged == []  # ... which left nothing to fetch
    assert not port.flights and not stream.alive and port.ended_with is stream
    stream.join()


@pytest.mark.parametrize(("size", "last"), [(2550, 2), (2000, 1), (2001, 2), (1, 0)])
def test_a_stream_of_a_known_size_claims_and_reads_nothing_past_the_end(
    threads: DaemonThreads, size: int, last: int
) -> None:
    data = OBJECT[:size]
    port = _Port(data=data)
    stream = _stream(port, threads, size=size)
    stream.advance(10)
    claimed = dict(port.flights)
    assert port.claims == [list(range(last + 1))]
    _run(stream)
    assert port.opens == [(0, None)] and port.ranged == []
    assert [claimed[i].result(0) for i in range(last + 1)] == [_chunk(i, data) for i in range(last + 1)]
    assert b"".join(port.stored[i] for i in range(last + 1)) == data


def test_a_stream_skips_chunks_held_elsewhere_takes_disk_chunks_from_disk_and_opens_at_the_first_to_fetch(
    threads: DaemonThreads,
) -> None:
    port = _Port(held=(0,), disk={1: _chunk(1)})
    stream = _stream(port, threads, size=len(OBJECT))
    stream.advance(2)
    claimed = dict(port.flights)
    assert sorted(claimed) == [1, 2]
    _run(stream)
    assert port.opens == [(2 * CS, None)]
    assert claimed[1].result(0) == _chunk(1) and claimed[2].result(0) == _chunk(2)
    assert port.stored == {2: _chunk(2)}  # a disk chunk is not stored again


def test_an_open_fetch_reads_past_a_chunk_held_elsewhere_without_publishing_it(threads: DaemonThreads) -> None:
    port = _Port(held=(1,))
    stream = _stream(port, threads, size=len(OBJECT))
    stream.advance(2)
    claimed = dict(port.flights)
    _run(stream)
    assert port.opens == [(0, None)]
    assert claimed[0].result(0) == _chunk(0) and claimed[2].result(0) == _chunk(2)  # chunk 2 where it belongs
    assert sorted(port.stored) == [0, 2]


def test_a_stream_starting_past_the_first_chunk_opens_there(threads: DaemonThreads) -> None:
    port = _Port()
    stream = _stream(port, threads, index=1, size=len(OBJECT))
    stream.advance(2)
    assert port.claims == [[1, 2]]
    _run(stream)
    assert port.opens == [(CS, None)] and sorted(port.stored) == [1, 2]


def test_claims_left_by_a_broken_fetch_are_fetched_by_range_and_a_failed_one_fails_its_reader(
    threads: DaemonThreads,
) -> None:
    port = _Port(fail_after=CS, fail_ranged=(2,))
    stream = _stream(port, threads, size=len(OBJECT))
    stream.advance(2)
    claimed = dict(port.flights)
    _run(stream)
    assert claimed[0].result(0) == _chunk(0)
    assert claimed[1].result(0) == _chunk(1)
    with pytest.raises(OSError, match="ranged fetch of 2000 failed"):
        claimed[2].result(0)
    assert port.ranged == [(1000, 1999), (2000, 2549)]  # in order, the last one cut at the object's size
    assert port.stored == {0: _chunk(0), 1: _chunk(1)}
    assert not port.flights and port.bodies[0].closed


def test_claims_left_when_the_cache_closes_are_cancelled(threads: DaemonThreads) -> None:
    port = _Port(fail_after=0)
    port.is_closed = True
    stream = _stream(port, threads, size=len(OBJECT))
    stream.advance(1)
    claimed = dict(port.flights)
    _run(stream)
    assert all(f.cancelled() for f in claimed.values()) and port.ranged == [] and not port.flights


def test_a_stream_nobody_asked_anything_of_ends_after_the_idle_time_without_a_fetch(
    threads: DaemonThreads, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chunk_stream, "STREAM_IDLE_SECONDS", 0.01)
    port = _Port()
    stream = _stream(port, threads, index=3)
    _run(stream)
    assert port.opens == [] and port.claims == [] and not stream.alive and port.ended_with is stream


def test_a_stream_whose_reader_went_away_closes_its_fetch_after_the_idle_time(
    threads: DaemonThreads, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chunk_stream, "STREAM_IDLE_SECONDS", 0.01)
    port = _Port()
    stream = _stream(port, threads, size=len(OBJECT))
    stream.advance(0)
    _run(stream)
    assert port.stored == {0: _chunk(0)} and port.bodies[0].closed and not stream.alive


def test_a_reader_moving_on_extends_the_open_fetch_and_stop_ends_the_stream_at_once(
    threads: DaemonThreads, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chunk_stream, "STREAM_IDLE_SECONDS", 10 * LIMIT)  # only stop() can end it within LIMIT
    port = _Port()
    stream = _stream(port, threads)
    stream.advance(0)
    first = port.flights[0]
    stream.start()
    assert first.result(LIMIT) == _chunk(0)
    stream.advance(1)
    second = port.flights.get(1)
    assert second is not None and second.result(LIMIT) == _chunk(1)
    assert port.opens == [(0, None)]  # one fetch for both
    stream.stop()
    assert stream.done is not None
    stream.done.result(LIMIT)
    assert port.bodies[0].closed and not stream.alive


def test_a_whole_chunk_is_handed_over_in_the_ports_buffer_and_a_short_one_as_its_bytes(threads: DaemonThreads) -> None:
    port = _Port()
    stream = _stream(port, threads)
    stream.advance(2)
    claimed = dict(port.flights)
    _run(stream)
    assert claimed[0].result(0) is port.buffers[0] and claimed[1].result(0) is port.buffers[1]  # no copy
    assert type(claimed[2].result(0)) is bytes and len(claimed[2].result(0)) == 550


def test_a_broken_fetch_and_a_failed_close_are_logged_with_the_object_and_chunk(
    threads: DaemonThreads, caplog: pytest.LogCaptureFixture
) -> None:
    port = _Port(fail_after=CS, close_fails=True)
    stream = _stream(port, threads, size=len(OBJECT))
    stream.advance(1)
    with caplog.at_level(logging.DEBUG, logger="tiered.cache.chunk_stream"):
        _run(stream)
    messages = [(r.getMessage(), bool(r.exc_info) and r.exc_info[0] is OSError) for r in caplog.records]
    assert ("streaming read of obj failed at chunk 1: connection reset by the test", False) in messages
    assert ("closing the fetch of obj failed", True) in messages


def test_a_streams_condition_is_ranked_below_the_caches_state(threads: DaemonThreads) -> None:
    from tiered.cache.locks import CACHE_STATE, RankedLock

    stream = _stream(_Port(), threads)
    with RankedLock("the cache's state", CACHE_STATE), pytest.raises(RuntimeError, match="lock order: chunk stream"):
        stream.advance(0)


def test_an_advance_landing_as_the_idle_wait_times_out_is_not_lost(threads: DaemonThreads) -> None:
    """The reader's advance arrives just as the wait gives up: the stream must see it and go on, not leave."""
    port = _Port()
    stream = _stream(port, threads, size=len(OBJECT))

    class LateAdvance(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            stream._upto = max(stream._upto, stream.next)  # the advance, under this condition as advance() takes it
            stream._claim(stream._limit())
            return False  # ... but the wait reports a timeout

    stream._wake = LateAdvance(stream._wake._lock)  # type: ignore[attr-defined]
    _run(stream)
    assert port.stored == {0: _chunk(0), 1: _chunk(1), 2: _chunk(2)} and port.opens == [(0, None)]
