"""The remote segment chunk cache, tested with a fetcher and no store (a cache takes a fetcher for that).

Background work is waited for by events and conditions, never by sleeping: a fetcher that says when it has
been called (and can hold its callers at a gate), the futures of the fetches in flight, and the streams'
own completion futures. Time bounds appear only as generous failure limits (a wait that should end at once).
"""

from __future__ import annotations

import io
import logging
import multiprocessing
import os
import subprocess
import sys
import threading
from concurrent.futures import Future, wait
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered.cache import chunk_cache, chunk_stream, locks
from tiered.cache.chunk_cache import ChunkCache
from tiered.cache.disk_store import DiskChunkStore
from tiered.cache.locks import RankedLock
from tiered.cache.single_flight import SingleFlight

OBJ = os.urandom(10_000)
LIMIT = 30.0  # seconds: a failure bound for waits that end at once when the code is right


class CountingFetcher:
    """Records its calls and notifies waiters; with a ``gate``, each call waits for it to open first."""

    def __init__(self, data: bytes = OBJ, fail: bool = False, gate: threading.Event | None = None) -> None:
        self.data, self.fail, self.gate = data, fail, gate
        self.calls: list[tuple[int, int]] = []
        self._called = threading.Condition()

    def __call__(self, start: int, end: int) -> bytes:
        with self._called:
            self.calls.append((start, end))
            self._called.notify_all()
        if self.gate is not None:
            assert self.gate.wait(LIMIT), "the test never opened the gate"
        if self.fail:
            raise OSError("store down")
        return self.data[start : end + 1]

    def wait_for_calls(self, n: int) -> None:
        with self._called:
            assert self._called.wait_for(lambda: len(self.calls) >= n, LIMIT), f"{len(self.calls)} calls, not {n}"


def settle(cache: ChunkCache) -> None:
    """Wait for every chunk load in flight (read-ahead included): once it is done, its chunk is held."""
    _, not_done = wait(cache.loads_in_flight(), LIMIT)
    assert not not_done, "chunk loads still running"


def join_streams(cache: ChunkCache) -> None:
    """Wait for every stream of the cache to end (each ends at its object's end, when stopped, or idle)."""
    _, not_done = wait([s.done for s in cache.streams() if s.done is not None], LIMIT)
    assert not not_done, "a stream did not end"


def test_hits_misses_and_ranges(tmp_path: Path) -> None:
    f = CountingFetcher()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as cache:
        assert cache.read("o", len(OBJ), 10, 2500, f) == OBJ[10:2501]
        assert sorted(f.calls) == [(0, 999), (1000, 1999), (2000, 2999)]  # aligned whole chunks
        assert cache.misses == 3
        assert cache.read("o", len(OBJ), 1500, 1600, f) == OBJ[1500:1601]
        assert cache.hits == 1 and len(f.calls) == 3
        assert cache.read("o", len(OBJ), 9990, 20_000, f) == OBJ[9990:]  # past the end: short
        assert cache.read("o", None, 9_500, 12_000, f) == OBJ[9500:]  # size unknown: a short chunk ends it
        assert cache.read("o", len(OBJ), 0, len(OBJ) - 1, f) == OBJ


def test_read_ahead_fetches_next_chunks(tmp_path: Path) -> None:
    f = CountingFetcher()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=2) as cache:
        cache.read("o", len(OBJ), 0, 10, f)
        cache.prefetch("o", 11, f, len(OBJ))  # the reader goes on (its caller knows, the cache does not guess)
        f.wait_for_calls(3)
        settle(cache)
        assert sorted(f.calls) == [(0, 999), (1000, 1999), (2000, 2999)]
        assert cache.prefetches == 2
        cache.read("o", len(OBJ), 1000, 1010, f)
        assert cache.hits == 1 and (1000, 1999) not in f.calls[3:]


def test_single_flight_joins_a_load_in_flight_and_forgets_a_landed_one() -> None:
    flights: SingleFlight[bytes] = SingleFlight()
    started = []

    def start() -> Future[bytes]:
        fut: Future[bytes] = Future()
        started.append(fut)
        return fut

    first = flights.join_or_start("c#0", start)
    assert flights.join_or_start("c#0", start) is first and len(started) == 1  # joined, not started again
    assert flights.claim("c#0") is None  # a stream cannot claim a chunk being loaded
    flights.land("c#0", Future())  # another load's landing leaves this one in flight
    assert "c#0" in flights
    flights.land("c#0", first)
    assert "c#0" not in flights and flights.join_or_start("c#0", start) is not first


def test_single_flight_under_concurrency(tmp_path: Path) -> None:
    gate = threading.Event()
    f = CountingFetcher(gate=gate)
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as cache:
        # Eight readers of one missing chunk, the fetch held until all have started: those that find it in flight
        # wait on it, none starts a second fetch.
        started = threading.Barrier(9)
        results: list[bytes] = []

        def reader() -> None:
            started.wait(LIMIT)
            results.append(bytes(cache.read("o", len(OBJ), 0, 999, f)))

        threads = [threading.Thread(target=reader) for _ in range(8)]
        for t in threads:
            t.start()
        started.wait(LIMIT)
        f.wait_for_calls(1)
        assert len(cache.loads_in_flight()) == 1
        gate.set()
        for t in threads:
            t.join(LIMIT)
        assert results == [OBJ[:1000]] * 8
        assert f.calls == [(0, 999)]


def test_fetch_error_propagates_and_is_not_cached(tmp_path: Path) -> None:
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as cache:
        with pytest.raises(OSError, match="store down"):
            cache.read("o", len(OBJ), 0, 10, CountingFetcher(fail=True))
        good = CountingFetcher()
        assert cache.read("o", len(OBJ), 0, 10, good) == OBJ[:11]
        assert good.calls == [(0, 999)]


def test_bounded_and_survives_restart(tmp_path: Path) -> None:
    big = os.urandom(400_000)
    f = CountingFetcher(big)
    with ChunkCache(tmp_path, chunk_size=10_000, size_limit=150_000, prefetch_chunks=0) as cache:
        for i in range(40):
            cache.read("big", len(big), i * 10_000, i * 10_000 + 9_999, f)
            cache.flush()
            assert cache.size_bytes <= 150_000, f"over the disk bound after chunk {i}"
        assert len(cache) < 15  # 40 chunks read, the oldest evicted as the store filled
    f2 = CountingFetcher(big)
    with ChunkCache(tmp_path, chunk_size=10_000, size_limit=150_000, prefetch_chunks=0) as cache:
        assert cache.read("big", len(big), 390_000, 399_999, f2) == big[390_000:]
        assert f2.calls == []  # the most recent chunk survived the restart
        assert cache.invalidate("big") > 0
        cache.read("big", len(big), 390_000, 390_001, f2)
        assert f2.calls == [(390_000, 399_999)]


def test_memory_holds_at_most_its_bounds_of_the_most_recently_used_chunks(tmp_path: Path) -> None:
    """What memory holds is seen from outside: once the disk store is emptied (by another cache on the same
    directory, as another process would), a chunk still in memory is served without a fetch and any other
    chunk is fetched again."""
    data = os.urandom(10_000)
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0, memory_bytes=2000, mapped_bytes=2000) as cache:
        first = CountingFetcher(data)
        for i in range(10):
            assert bytes(cache.read("o", len(data), i * 1000, i * 1000 + 999, first)) == data[i * 1000 : (i + 1) * 1000]
        cache.flush()
        assert len(first.calls) == 10 and len(cache) == 10
        with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as other:
            other.clear()
        assert len(cache) == 0
        again = CountingFetcher(data)
        for i in reversed(range(10)):  # the two most recent first: both in memory (2000 bytes), the rest not
            assert bytes(cache.read("o", len(data), i * 1000, i * 1000 + 999, again)) == data[i * 1000 : (i + 1) * 1000]
        assert again.calls == [(i * 1000, i * 1000 + 999) for i in reversed(range(8))]
        # a chunk larger than the whole memory bound is never held in memory
    with ChunkCache(tmp_path / "tiny", chunk_size=1000, prefetch_chunks=0, memory_bytes=999, mapped_bytes=999) as cache:
        f = CountingFetcher(data)
        cache.read("o", len(data), 0, 999, f)
        cache.flush()
        with ChunkCache(tmp_path / "tiny", chunk_size=1000, prefetch_chunks=0) as other:
            other.clear()
        cache.read("o", len(data), 0, 999, f)
        assert f.calls == [(0, 999), (0, 999)]


def _open_chunk_files(directory: Path) -> int:
    """Files of the cache's chunks this process holds open (the SQLite database's own are not counted)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(str(directory)) and ".db" not in target
    return count


def test_the_memory_tier_keeps_at_most_its_full_chunks_worth_of_files_open(tmp_path: Path) -> None:
    """Objects smaller than a chunk (remote segments smaller than the chunk size): each chunk held as a map of its
    cache file keeps a file open. The memory tier holds at most mapped_bytes // chunk_size of them, whatever their
    bytes (the byte bound alone let 25 of these stay open, not 4), and close() lets them go."""
    cache_dir = tmp_path / "cache"
    size = 40 * 1024  # above diskcache's inline size (32 KiB): each chunk is a file of its own
    with ChunkCache(cache_dir, chunk_size=256 * 1024, prefetch_chunks=0, mapped_bytes=1024 * 1024) as cache:
        assert cache.max_open_chunk_files == 4
        for i in range(40):
            data = os.urandom(size)
            assert bytes(cache.read(f"o{i}", size, 0, size - 1, CountingFetcher(data))) == data
        cache.flush()  # every chunk on disk: those the memory tier still holds are maps of their files now
        assert 0 < _open_chunk_files(cache_dir) <= cache.max_open_chunk_files
    assert _open_chunk_files(cache_dir) == 0


def test_forget_drops_a_deleted_objects_chunks_without_waiting_for_the_disk_writer(tmp_path: Path) -> None:
    """A remote segment's deletion forgets its chunks: memory at once, the disk store's after the writes queued
    before (none lands after the evict), and the caller never waits for the writer (busy writing other chunks)."""
    data = os.urandom(40 * 1024)
    with ChunkCache(tmp_path, chunk_size=16 * 1024, prefetch_chunks=0) as cache:
        writing, go = threading.Event(), threading.Event()
        store = cache._disk.store

        def slow_store(name: str, chunk: Any, obj: str) -> None:
            writing.set()
            assert go.wait(LIMIT)
            store(name, chunk, obj)

        cache._disk.store = slow_store  # type: ignore[method-assign]
        f = CountingFetcher(data)
        assert bytes(cache.read("gone", len(data), 0, len(data) - 1, f)) == data  # 3 chunks, their writes queued
        assert writing.wait(LIMIT)  # the writer is stuck in the first one
        cache.forget("gone")  # returns although the writer is held
        assert bytes(cache.read("gone", len(data), 0, 99, f)) == data[:100]
        assert len(f.calls) == 4  # memory no longer held it: fetched again
        go.set()
        cache.flush()
        assert len(cache) == 1  # the chunk just read again, written after the evict; none of the three before
        cache.forget("gone")
        cache.flush()
        assert len(cache) == 0


def test_maps_of_chunk_files_have_their_own_bound_and_a_working_set_under_it_stays_in_memory(tmp_path: Path) -> None:
    """Chunks read back from disk are held as maps of their files, bounded by mapped_bytes, not by memory_bytes (the
    heap's): a reader going round eight chunks on disk with room for two fetched ones finds all eight in memory the
    next time round (under one bound it found none: each was evicted just before it was read again)."""
    chunk = 64 * 1024  # above diskcache's inline size: each chunk is a file of its own, held as a map once stored
    data = os.urandom(8 * chunk)
    with ChunkCache(tmp_path, chunk_size=chunk, prefetch_chunks=0) as writer:
        for i in range(8):
            writer.read("o", len(data), i * chunk, (i + 1) * chunk - 1, CountingFetcher(data))
    with ChunkCache(tmp_path, chunk_size=chunk, prefetch_chunks=0, memory_bytes=2 * chunk,
                    mapped_bytes=8 * chunk) as cache:
        f = CountingFetcher(data)
        for i in range(8):  # from disk (as another process, or this one before a restart, stored them)
            cache.read("o", len(data), i * chunk, (i + 1) * chunk - 1, f)
        assert f.calls == []
        with ChunkCache(tmp_path, chunk_size=chunk, prefetch_chunks=0) as other:
            other.clear()  # only what memory holds is served without a fetch from now on
        f.calls.clear()
        for i in range(8):
            assert bytes(cache.read("o", len(data), i * chunk, (i + 1) * chunk - 1, f)) == data[i * chunk:(i + 1) * chunk]
        assert f.calls == []
    with ChunkCache(tmp_path / "small", chunk_size=chunk, prefetch_chunks=0) as writer:
        for i in range(8):
            writer.read("o", len(data), i * chunk, (i + 1) * chunk - 1, CountingFetcher(data))
    with ChunkCache(tmp_path / "small", chunk_size=chunk, prefetch_chunks=0, mapped_bytes=2 * chunk) as cache:
        f = CountingFetcher(data)
        for i in range(8):
            cache.read("o", len(data), i * chunk, (i + 1) * chunk - 1, f)
        with ChunkCache(tmp_path / "small", chunk_size=chunk, prefetch_chunks=0) as other:
            other.clear()
        f.calls.clear()
        for i in reversed(range(8)):  # the two most recent are held, the others fetched again
            cache.read("o", len(data), i * chunk, (i + 1) * chunk - 1, f)
        assert f.calls == [(i * chunk, (i + 1) * chunk - 1) for i in reversed(range(6))]


def test_memory_evicts_the_least_recently_used_chunk(tmp_path: Path) -> None:
    data = os.urandom(10_000)
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0, memory_bytes=2000, mapped_bytes=2000) as cache:
        f = CountingFetcher(data)
        for i in (0, 1, 0, 5):  # chunk 0 used again after chunk 1: reading chunk 5 evicts 1, not 0
            cache.read("o", len(data), i * 1000 + 10, i * 1000 + 20, f)
            # Each fetched chunk stored (and held as a map of its file) before the next read: a store that landed
            # after chunk 0's second read (a busy machine) held chunk 1 as the newer map, and 0 went.
            cache.flush()
        with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as other:
            other.clear()
        f.calls.clear()
        for i in (0, 5, 1):
            assert bytes(cache.read("o", len(data), i * 1000, i * 1000 + 99, f)) == data[i * 1000 : i * 1000 + 100]
        assert f.calls == [(1000, 1999)]


def _child(path: str, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    import traceback

    data = bytes(range(256)) * 40
    try:
        with ChunkCache(path, chunk_size=1000, prefetch_chunks=0) as cache:
            got = cache.read("one-key", len(data), 0, len(data) - 1, lambda a, b: data[a : b + 1])
        queue.put(True if got == data else f"read {len(got)} bytes, not the object's")  # once closed: all stored
    except BaseException:
        queue.put(traceback.format_exc())  # the parent shows it, rather than waiting out its timeout


def test_two_processes_share_the_cache(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(str(tmp_path), queue)) for _ in range(2)]
    for p in procs:
        p.start()
    assert [queue.get(timeout=60) for _ in procs] == [True, True]
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0]
    data = bytes(range(256)) * 40
    f = CountingFetcher(data)
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as cache:
        assert cache.read("one-key", len(data), 0, len(data) - 1, f) == data
        assert f.calls == []


@settings(max_examples=60, deadline=None)
@given(st.integers(0, len(OBJ) - 1), st.integers(0, 4000), st.sampled_from([333, 1000, 4096]))
def test_random_ranges_match_the_object(start: int, length: int, chunk: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d, ChunkCache(d, chunk_size=chunk, prefetch_chunks=1) as cache:
        end = start + length
        assert cache.read("o", len(OBJ), start, end, CountingFetcher()) == OBJ[start : end + 1]


def test_a_range_within_one_chunk_is_a_view_and_one_across_chunks_is_bytes(tmp_path: Path) -> None:
    f = CountingFetcher()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as cache:
        inside = cache.read("o", len(OBJ), 1100, 1899, f)
        assert isinstance(inside, memoryview) and inside.readonly and inside == OBJ[1100:1900]
        across = cache.read("o", len(OBJ), 1900, 2100, f)
        assert isinstance(across, bytes) and across == OBJ[1900:2101]
        cache.clear()
        assert len(cache) == 0 and cache.read("o", len(OBJ), 1100, 1200, f) == OBJ[1100:1201]
        assert f.calls.count((1000, 1999)) == 2  # fetched again: clear() dropped memory and disk


def test_a_chunk_on_disk_is_read_from_disk_not_fetched(tmp_path: Path) -> None:
    first = CountingFetcher()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as cache:
        cache.read("o", len(OBJ), 0, 2999, first)
        cache.flush()
    second = CountingFetcher()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as cache:
        assert cache.read("o", len(OBJ), 500, 2500, second) == OBJ[500:2501]
        assert second.calls == [] and cache.hits == 3
        # A miss marks the object cold for a while: its next chunks are fetched without asking the disk.
        assert cache.read("o", len(OBJ), 5000, 5100, second) == OBJ[5000:5101]
        assert second.calls == [(5000, 5999)]


def test_prefetch_of_another_object_and_cancelled_read_ahead_on_close(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    gate = threading.Event()
    slow = CountingFetcher(gate=gate)
    cache = ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=2, max_workers=1)
    cache.prefetch("next", 0, slow, len(OBJ))  # chunk 0 and the two after it
    slow.wait_for_calls(1)  # the one worker holds chunk 0's fetch; chunks 1 and 2 wait in the queue
    queued = [fut for fut in cache.loads_in_flight() if not fut.running()]
    [running] = [fut for fut in cache.loads_in_flight() if fut.running()]
    assert len(queued) == 2
    cancelled = threading.Semaphore(0)
    for fut in queued:
        fut.add_done_callback(lambda _: cancelled.release())
    closing = threading.Thread(target=cache.close)
    closing.start()
    for _ in queued:  # close() cancels the queued read-ahead before it waits for the running fetch
        assert cancelled.acquire(timeout=LIMIT)
    gate.set()
    closing.join(LIMIT)
    assert not closing.is_alive()
    assert all(fut.cancelled() for fut in queued) and slow.calls == [(0, 999)]
    # close() waited for the running fetch to end, and for its chunk to be written, before closing the disk
    assert running.done() and running.exception() is None and bytes(running.result()) == OBJ[:1000]
    assert "exception calling callback" not in caplog.text
    f = CountingFetcher()
    with ChunkCache(tmp_path / "fresh", chunk_size=1000, prefetch_chunks=1) as cache:
        cache.prefetch("next", 0, f, len(OBJ))
        f.wait_for_calls(2)
        settle(cache)
        assert sorted(f.calls) == [(0, 999), (1000, 1999)]
        assert cache.read("next", len(OBJ), 0, 1999, f) == OBJ[:2000]
        assert len(f.calls) == 2


# Streaming read-ahead: a sequential reader's chunks come off one open fetch ---------------------------------


class CountingOpener:
    """Opens a stream of the object from a position; can break after ``fail_after`` bytes."""

    def __init__(self, data: bytes = OBJ, fail_after: int | None = None) -> None:
        self.data, self.fail_after = data, fail_after
        self.opens: list[tuple[int, int | None]] = []
        self.streams: list[_TrackedStream] = []

    def __call__(self, start: int, end: int | None) -> io.BufferedIOBase:
        self.opens.append((start, end))
        stream = _TrackedStream(self.data[start : None if end is None else end + 1], self.fail_after)
        self.streams.append(stream)
        return stream


class _TrackedStream(io.BufferedIOBase):
    def __init__(self, data: bytes, fail_after: int | None) -> None:
        self._data, self._fail_after, self.served = data, fail_after, 0

    def read(self, size: int | None = -1) -> bytes:
        if self._fail_after is not None and self.served >= self._fail_after:
            raise OSError("connection reset by peer")
        end = len(self._data) if size is None or size < 0 else self.served + size
        if self._fail_after is not None:
            end = min(end, self._fail_after)  # the connection breaks inside a chunk
        piece = self._data[self.served : end]
        self.served += len(piece)
        return piece


def _read_sequentially(cache: ChunkCache, key: str, data: bytes, fetcher: CountingFetcher, opener: CountingOpener,
                       step: int = 300) -> list[memoryview | bytes]:
    """Reads as a sequential reader's caller does: each read announced first (``prefetch``), then made."""
    views = []
    for pos in range(0, len(data), step):
        cache.prefetch(key, pos, fetcher, len(data), opener)
        got = cache.read(key, len(data), pos, pos + step - 1, fetcher)
        assert bytes(got) == data[pos : pos + step]
        views.append(got)
    return views


@pytest.mark.parametrize("size", [10_000, 9_500])  # the last chunk full, or short
def test_a_sequential_reader_is_fed_from_one_stream(tmp_path: Path, size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunk_stream, "STREAM_IDLE_SECONDS", 600)
    data = OBJ[:size]
    f, o = CountingFetcher(data), CountingOpener(data)
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=2) as cache:
        _read_sequentially(cache, "o", data, f, o)
        assert o.opens == [(0, None)] and f.calls == []  # one fetch to the end, no ranged fetches
        assert cache.streams_opened == 1 and cache.fetches == 10
        # The stream ended at the object's end, and the reads of its last chunks, held already, start none that
        # would idle on a stream thread (idling is 600 s here: a stream still waiting fails the join).
        join_streams(cache)
        assert not cache.streams()
        cache.flush()
        assert len(cache) == 10  # every chunk stored on disk too
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=2) as cache:  # a new process: from disk
        f2, o2 = CountingFetcher(data), CountingOpener(data)
        _read_sequentially(cache, "o", data, f2, o2)
        assert f2.calls == [] and o2.opens == []


def test_a_stream_keeps_only_its_window_ahead_of_the_reader_and_closes_when_it_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chunk_stream, "STREAM_IDLE_SECONDS", 0.2)
    f, o = CountingFetcher(), CountingOpener()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=2) as cache:
        cache.prefetch("o", 0, f, len(OBJ), o)
        assert bytes(cache.read("o", len(OBJ), 0, 99, f)) == OBJ[:100]
        join_streams(cache)  # it idles out (0.2 s): the reader never came back
        assert not cache.streams(), "the stream outlived its idle timeout"
        assert o.streams[0].served == 3000  # chunk 0 and the two read ahead, not the whole object
        assert o.streams[0].closed
        # The reader comes back later: a new stream picks up after what is held.
        _read_sequentially(cache, "o", OBJ, f, o)
        assert [start for start, _ in o.opens] == [0, 3000] and f.calls == []


def test_a_broken_stream_falls_back_to_ranged_fetches(tmp_path: Path) -> None:
    f, o = CountingFetcher(), CountingOpener(fail_after=2500)
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=2) as cache:
        _read_sequentially(cache, "o", OBJ, f, o)  # every byte right despite the reset
        assert f.calls[0] == (2000, 2999)  # the chunk being read when it broke came by range
        assert o.opens[0] == (0, None) and len(o.opens) >= 2  # and a later chunk opened a new stream


def test_a_failing_store_fails_the_readers_waiting_on_it_and_is_not_cached(tmp_path: Path) -> None:
    f, o = CountingFetcher(fail=True), CountingOpener(fail_after=0)
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=2) as cache:
        cache.prefetch("o", 0, f, len(OBJ), o)
        with pytest.raises(OSError, match="store down"):
            cache.read("o", len(OBJ), 0, 99, f)
        ok = CountingFetcher()
        assert bytes(cache.read("o", len(OBJ), 0, 99, ok)) == OBJ[:100]


def test_recycled_stream_buffers_never_change_what_a_reader_holds(tmp_path: Path) -> None:
    # A memory tier of two chunks (of each form): chunks are evicted and their buffers reused while views of them are
    # held.
    objects = {f"o{i}": os.urandom(8_000) for i in range(6)}
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=1, memory_bytes=2000, mapped_bytes=2000) as cache:
        held = []
        for key, data in objects.items():
            views = _read_sequentially(cache, key, data, CountingFetcher(data), CountingOpener(data), step=250)
            held.append((data, views))
        cache.flush()
        for data, views in held:
            assert b"".join(bytes(v) for v in views) == data
        assert all(isinstance(v, memoryview) and v.readonly for _, views in held for v in views)


def test_concurrent_sequential_readers_of_one_object_get_the_same_bytes(tmp_path: Path) -> None:
    data = os.urandom(50_000)
    o = CountingOpener(data)
    errors: list[BaseException] = []
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=3) as cache:
        def reader(step: int) -> None:
            try:
                _read_sequentially(cache, "o", data, CountingFetcher(data), o, step=step)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=reader, args=(s,)) for s in (333, 1000, 4096)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert not errors


def test_close_stops_a_stream_that_waits_for_its_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunk_stream, "STREAM_IDLE_SECONDS", 600)  # only close() can end it within the test
    o = CountingOpener()
    cache = ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=1)
    cache.prefetch("o", 0, CountingFetcher(), len(OBJ), o)
    cache.read("o", len(OBJ), 0, 10, CountingFetcher())
    assert cache.streams()  # waiting for its reader
    closing = threading.Thread(target=cache.close)
    closing.start()
    closing.join(LIMIT)
    assert not closing.is_alive() and o.streams[0].closed


_EXIT_WITHOUT_CLOSE = """
import io, os, sys, tempfile
from tiered.cache import chunk_cache, chunk_stream
chunk_stream.STREAM_IDLE_SECONDS = 600
data = os.urandom(100_000)
cache = chunk_cache.ChunkCache(sys.argv[1], chunk_size=1000, prefetch_chunks=2)
fetch = lambda a, b: data[a:b + 1]
cache.prefetch("o", 0, fetch, len(data), lambda a, b: io.BytesIO(data[a:]))
assert bytes(cache.read("o", len(data), 0, 10, fetch)) == data[:11]
assert cache.streams()  # a stream waits for its reader to come back
"""


def test_a_waiting_stream_does_not_hold_up_the_exit_of_a_program_that_never_closed_the_cache(tmp_path: Path) -> None:
    # A program held up by the stream would take its 600 s idle timeout to exit: far past the bound here.
    done = subprocess.run([sys.executable, "-c", _EXIT_WITHOUT_CLOSE, str(tmp_path)], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()


def test_the_lock_order_is_checked_not_only_documented() -> None:
    stream = RankedLock("stream", locks.STREAM)
    state = RankedLock("state", locks.CACHE_STATE)
    with stream, state:  # the documented order
        pass
    with state, pytest.raises(RuntimeError, match=r"stream \(rank 1\) taken while holding state \(rank 2\)"):
        stream.acquire()
    assert stream.acquire(blocking=False)  # the refused attempt left nothing behind
    stream.release()
    cond = threading.Condition(state)  # type: ignore[arg-type]
    with cond:
        assert not cond.wait(0)  # gives the lock back and takes it again in order


def test_a_chunk_damaged_on_disk_does_not_make_its_objects_other_chunks_skip_the_disk(tmp_path: Path) -> None:
    # A damaged chunk once marked its object cold, so the object's sound chunks looked up after it (on other
    # workers, in any order) were fetched again: a race between the parallel lookups of one read.
    store = DiskChunkStore(tmp_path, 10**6)
    try:
        store.store("o#0", OBJ[:1000], "o")
        store.store("o#1", OBJ[1000:2000], "o")
        [first] = [p for p in tmp_path.rglob("*.val") if p.read_bytes()[:1000] == OBJ[:1000]]
        raw = bytearray(first.read_bytes())
        raw[10] ^= 0x01
        first.write_bytes(bytes(raw))
        assert store.lookup("o#0", "o") is None and store.mismatches == 1
        got = store.lookup("o#1", "o")
        assert got is not None and bytes(got) == OBJ[1000:2000]
        assert store.lookup("o#2", "o") is None  # absent: now the object is cold...
        store.store("o#3", OBJ[3000:4000], "o")
        assert store.lookup("o#3", "o") is None  # ...and its next chunks are not looked up for a while
    finally:
        store.close()


# What the mutation run of chunk_cache.py found unchecked (TESTING.md) ---------------------------------------------


def test_end_of_chunk_moves_a_range_within_one_chunk_to_its_end_and_leaves_one_across_chunks() -> None:
    cache = ChunkCache.__new__(ChunkCache)  # end_of_chunk and read_ahead_reaches need only the chunk size
    cache.chunk_size, cache.prefetch_chunks = 1000, 2
    assert cache.end_of_chunk(0, 1) == 1000
    assert cache.end_of_chunk(0, 1000) == 1000  # [0, 1000) is exactly chunk 0
    assert cache.end_of_chunk(1500, 1999) == 2000
    assert cache.end_of_chunk(999, 1001) == 1001  # across chunks 0 and 1: unchanged
    assert cache.end_of_chunk(0, 1001) == 1001
    assert cache.end_of_chunk(3000, 3001) == 4000


def test_read_ahead_reaches_the_end_within_prefetch_chunks_and_at_least_one_chunk() -> None:
    cache = ChunkCache.__new__(ChunkCache)
    cache.chunk_size, cache.prefetch_chunks = 1000, 2
    assert cache.read_ahead_reaches(8000, 10_000)  # exactly two chunks from the end
    assert not cache.read_ahead_reaches(7999, 10_000)
    cache.prefetch_chunks = 0  # no read-ahead: one chunk still counts
    assert cache.read_ahead_reaches(9000, 10_000) and not cache.read_ahead_reaches(8999, 10_000)
    cache.prefetch_chunks = 3
    assert cache.read_ahead_reaches(7000, 10_000) and not cache.read_ahead_reaches(6999, 10_000)


def test_a_size_learnt_from_a_short_chunk_answers_later_reads_and_is_forgotten_on_invalidate(tmp_path: Path) -> None:
    data = OBJ[:9_500]
    f = CountingFetcher(data)
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as cache:
        assert cache.known_size("o") is None
        assert cache.read("o", None, 9_000, 9_999, f) == data[9_000:]
        assert cache.known_size("o") == 9_500
        assert cache.read("o", None, 9_500, 12_000, f) == b""  # past the learnt end: nothing fetched
        assert cache.read("o", None, 9_400, 12_000, f) == data[9_400:]
        assert f.calls == [(9_000, 9_999)]
        cache.invalidate("o")  # the object was replaced: its size may have changed too
        assert cache.known_size("o") is None


def test_a_size_is_learnt_per_object(tmp_path: Path) -> None:
    f = CountingFetcher(OBJ[:1_500])
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as cache:
        cache.read("short", None, 1000, 1999, f)
        assert cache.known_size("short") == 1_500 and cache.known_size("other") is None
        cache.invalidate("other")
        assert cache.known_size("short") == 1_500


def test_stream_counters_and_invalidate_of_streamed_chunks(tmp_path: Path) -> None:
    """Chunks a stream brought are prefetches (not misses), and are tagged with their object on disk."""
    f, o = CountingFetcher(), CountingOpener()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=2) as cache:
        _read_sequentially(cache, "o", OBJ, f, o)
        _read_sequentially(cache, "p", OBJ, f, CountingOpener())
        assert f.calls == [] and cache.streams_opened == 2
        assert (cache.prefetches, cache.misses, cache.fetches) == (20, 0, 20)
        join_streams(cache)
        cache.flush()
        assert len(cache) == 20
        assert cache.invalidate("o") == 10 and len(cache) == 10


def _stream_waiting(cache: ChunkCache, obj: str, opener: CountingOpener, fetcher: CountingFetcher) -> None:
    """Starts a stream of ``obj`` at chunk 0 and waits until it has filled its window (chunks 0..prefetch)."""
    cache.prefetch(obj, 0, fetcher, len(OBJ), opener)
    settle(cache)
    assert [s.obj for s in cache.streams()] == [obj]


def test_invalidate_stops_only_the_stream_of_its_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunk_stream, "STREAM_IDLE_SECONDS", 600)  # only stop() ends them within the test
    f = CountingFetcher()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=1) as cache:
        _stream_waiting(cache, "o", CountingOpener(), f)
        cache.prefetch("p", 0, f, len(OBJ), CountingOpener())
        settle(cache)
        assert sorted(s.obj for s in cache.streams()) == ["o", "p"]
        cache.invalidate("o")
        assert [s.obj for s in cache.streams()] == ["p"]


def test_a_held_window_starts_no_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunk_stream, "STREAM_IDLE_SECONDS", 600)  # a stream started here would stay
    f, o = CountingFetcher(), CountingOpener()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=2) as cache:
        cache.read("o", len(OBJ), 3000, 5999, f)  # chunks 3..5 held; 0..2 and 6 on are not
        cache.prefetch("o", 3000, f, len(OBJ), o)  # the window 3..5 is held: nothing to stream
        assert cache.streams() == [] and o.opens == [] and cache.streams_opened == 0
        assert len(f.calls) == 3 and cache.loads_in_flight() == []


def test_a_window_being_loaded_starts_no_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunk_stream, "STREAM_IDLE_SECONDS", 600)
    gate = threading.Event()
    f, o = CountingFetcher(gate=gate), CountingOpener()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=1) as cache:
        cache.prefetch("o", 0, f, len(OBJ))  # ranged read-ahead of chunks 0 and 1, held at the gate
        f.wait_for_calls(2)
        cache.prefetch("o", 0, f, len(OBJ), o)  # the same window, in flight: no stream
        assert cache.streams() == [] and o.opens == []
        gate.set()
        settle(cache)
        assert sorted(f.calls) == [(0, 999), (1000, 1999)]


def test_a_reader_behind_a_live_stream_gets_ranged_read_ahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunk_stream, "STREAM_IDLE_SECONDS", 600)
    f, o = CountingFetcher(), CountingOpener()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=2, disk=False) as cache:
        cache.prefetch("o", 5000, f, len(OBJ), o)  # a reader at chunk 5: a stream feeds 5..7
        settle(cache)
        assert o.opens == [(5000, None)]
        cache.prefetch("o", 0, f, len(OBJ), o)  # a second reader at chunk 0, behind the stream
        settle(cache)
        assert sorted(f.calls) == [(0, 999), (1000, 1999), (2000, 2999)] and len(o.opens) == 1


def test_a_stream_moved_on_leaves_the_chunks_it_passed_to_the_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A live stream serving its reader is only moved on: chunks before it (evicted from a one-chunk memory here)
    are not fetched again by range as read-ahead; the reader's own read loads what it needs."""
    monkeypatch.setattr(chunk_stream, "STREAM_IDLE_SECONDS", 600)
    f, o = CountingFetcher(), CountingOpener()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=2, memory_bytes=1000, disk=False) as cache:
        cache.prefetch("o", 0, f, len(OBJ), o)  # chunks 0..2 streamed; memory keeps chunk 2 only
        settle(cache)
        cache.prefetch("o", 1000, f, len(OBJ), o)  # the reader moved to chunk 1: the stream goes on to 3
        settle(cache)
        assert f.calls == [] and len(o.opens) == 1 and cache.streams_opened == 1


def test_streams_are_limited_and_a_reader_past_the_limit_gets_ranged_read_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chunk_stream, "STREAM_IDLE_SECONDS", 600)
    f = CountingFetcher()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=1, max_workers=1) as cache:  # one stream at most
        _stream_waiting(cache, "o", CountingOpener(), f)
        second = CountingOpener()
        cache.prefetch("p", 0, f, len(OBJ), second)
        assert [s.obj for s in cache.streams()] == ["o"] and second.opens == []
        settle(cache)
        assert sorted(f.calls) == [(0, 999), (1000, 1999)]


def test_prefetch_on_a_closed_cache_does_nothing(tmp_path: Path) -> None:
    """Read-ahead is advice: once the cache is closed it is not taken (nor does it raise from a pool shut down)."""
    f, o = CountingFetcher(), CountingOpener()
    cache = ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=2)
    cache.close()
    cache.prefetch("o", 0, f, len(OBJ), o)
    cache.prefetch("o", 0, f, len(OBJ))
    assert f.calls == [] and o.opens == [] and cache.streams() == [] and cache.loads_in_flight() == []


def test_a_failed_read_ahead_is_logged_at_debug(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    gate = threading.Event()
    f = CountingFetcher(fail=True, gate=gate)
    with caplog.at_level(logging.DEBUG, logger=chunk_cache.__name__), ChunkCache(
        tmp_path, chunk_size=1000, prefetch_chunks=1
    ) as cache:
        cache.prefetch("o", 0, f, len(OBJ))
        loads = cache.loads_in_flight()
        assert len(loads) == 2
        logged = threading.Semaphore(0)
        for fut in loads:  # after the cache's own callback, which logs
            fut.add_done_callback(lambda _: logged.release())
        gate.set()
        for _ in loads:
            assert logged.acquire(timeout=LIMIT)
    messages = [r.getMessage() for r in caplog.records if r.name == chunk_cache.__name__]
    assert messages == ["read-ahead fetch failed: store down"] * 2
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.name == chunk_cache.__name__)


def test_a_successful_read_ahead_logs_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    f = CountingFetcher()
    with caplog.at_level(logging.DEBUG, logger=chunk_cache.__name__), ChunkCache(
        tmp_path, chunk_size=1000, prefetch_chunks=1
    ) as cache:
        gate = threading.Event()
        f.gate = gate
        cache.prefetch("o", 0, f, len(OBJ))
        loads = cache.loads_in_flight()
        done = threading.Semaphore(0)
        for fut in loads:
            fut.add_done_callback(lambda _: done.release())
        gate.set()
        for _ in loads:
            assert done.acquire(timeout=LIMIT)
    assert not [r for r in caplog.records if r.name == chunk_cache.__name__]


def test_the_process_counters_tell_misses_from_prefetches(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    f = CountingFetcher()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=2, registry=registry) as cache:
        cache.read("o", len(OBJ), 0, 10, f)  # a miss
        cache.prefetch("o", 11, f, len(OBJ))  # chunks 1 and 2 ahead
        settle(cache)
        cache.read("o", len(OBJ), 1000, 1010, f)  # a hit
    samples = {n: registry.get_sample_value(f"RemoteLogSegmentCache_{n}_total") for n in ("hits", "misses", "prefetches")}
    assert samples == {"hits": 1, "misses": 1, "prefetches": 2}


def test_a_chunk_once_on_disk_is_held_as_a_map_of_its_file(tmp_path: Path) -> None:
    """The fetched bytes are let go once the chunk is on disk: memory holds a read-only map of the cache file."""
    import mmap

    f = CountingFetcher()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as cache:
        first = cache.read("o", len(OBJ), 0, 99, f)
        assert isinstance(first, memoryview) and not isinstance(first.obj, mmap.mmap)  # before the write lands
        cache.flush()
        again = cache.read("o", len(OBJ), 0, 99, f)
        assert isinstance(again, memoryview) and isinstance(again.obj, mmap.mmap) and again == OBJ[:100]
        assert first == OBJ[:100] and len(f.calls) == 1
    with ChunkCache(tmp_path / "memory", chunk_size=1000, prefetch_chunks=0, disk=False) as cache:
        cache.read("o", len(OBJ), 0, 99, f)
        cache.flush()
        kept = cache.read("o", len(OBJ), 0, 99, f)  # no disk: the fetched bytes stay
        assert isinstance(kept, memoryview) and not isinstance(kept.obj, mmap.mmap)


@pytest.mark.parametrize("change", ["flip", "touch"])
def test_a_held_map_whose_file_changed_is_read_back_checked_not_served(tmp_path: Path, change: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk held as a map serves what its file holds now: once the file changed since it was checked and mapped,
    the next read takes the chunk back from disk against its crc32c trailer (a flipped byte: dropped and fetched
    again; a file only touched: the same bytes, mapped anew), never the damaged bytes."""
    import mmap

    from tiered.cache import disk_store

    monkeypatch.setattr(disk_store, "RECHECK_SECONDS", 0.0)  # every read compares (see the store's own test)

    f = CountingFetcher()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as writer:
        writer.read("o", len(OBJ), 0, 99, f)
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as cache:  # another process of the machine
        held = cache.read("o", len(OBJ), 0, 99, f)
        assert isinstance(held, memoryview) and isinstance(held.obj, mmap.mmap) and len(f.calls) == 1
        [path] = [p for p in tmp_path.rglob("*.val") if p.read_bytes()[:1000] == OBJ[:1000]]
        st = path.stat()
        if change == "flip":
            with open(path, "r+b") as file:
                file.seek(10)
                file.write(bytes([OBJ[10] ^ 0xFF]))
            assert held[10] != OBJ[10]  # the map shows the file as it is now
        # a time of its own: the write may fall within the file system's timestamp granularity of the mapping
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))
        again = cache.read("o", len(OBJ), 0, 99, f)
        assert again == OBJ[:100]
        assert again.obj is not held.obj  # type: ignore[union-attr]
        assert len(f.calls) == (2 if change == "flip" else 1) and cache.disk_mismatches == (change == "flip")
        assert cache.read("o", len(OBJ), 0, 999, f) == OBJ[:1000] and len(f.calls) == (2 if change == "flip" else 1)


def test_read_ahead_loads_exactly_its_window_up_to_the_objects_end(tmp_path: Path) -> None:
    data = OBJ[:9_501]  # the last chunk (9) holds 501 bytes
    f = CountingFetcher(data)
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=2) as cache:
        cache.prefetch("o", 5_000, f, len(data))  # chunks 5, 6, 7: not the ones before
        settle(cache)
        assert sorted(f.calls) == [(5000, 5999), (6000, 6999), (7000, 7999)]
        f.calls.clear()
        cache.prefetch("o", 8_500, f, len(data))  # chunks 8 and 9 (to the object's last byte), nothing past it
        settle(cache)
        assert sorted(f.calls) == [(8000, 8999), (9000, 9500)] and cache.prefetches == 5
        f.calls.clear()
        cache.prefetch("o", 9_500, f, len(data))  # the last chunk itself, held: nothing to do
        cache.prefetch("o", 9_501, f, len(data))  # past the end
        cache.prefetch("o", 10_000, f, len(data))
        assert cache.loads_in_flight() == [] and f.calls == [] and cache.prefetches == 5


def test_read_ahead_of_a_chunk_of_one_byte_at_the_end(tmp_path: Path) -> None:
    data = os.urandom(10_001)
    f = CountingFetcher(data)
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=2) as cache:
        cache.prefetch("o", 9_000, f, len(data))
        settle(cache)
        assert sorted(f.calls) == [(9000, 9999), (10_000, 10_000)]
        assert cache.read("o", len(data), 10_000, 10_000, f) == data[10_000:]
        assert len(f.calls) == 2
    with ChunkCache(tmp_path / "again", chunk_size=1000, prefetch_chunks=0) as cache:
        assert cache.read("o", len(data), 10_000, 20_000, f) == data[10_000:]  # the one byte, fetched by range
        assert f.calls[-1] == (10_000, 10_000)


def test_read_ahead_uses_a_learnt_size(tmp_path: Path) -> None:
    data = OBJ[:9_500]
    f = CountingFetcher(data)
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=3) as cache:
        cache.read("o", None, 9_000, 9_999, f)  # size learnt: 9,500
        f.calls.clear()
        cache.prefetch("o", 7_000, f)  # no size given: 7 and 8 (9 is held), nothing past the end
        settle(cache)
        assert sorted(f.calls) == [(7000, 7999), (8000, 8999)] and cache.prefetches == 2


def test_the_last_chunk_is_fetched_only_to_the_objects_end(tmp_path: Path) -> None:
    data = OBJ[:9_500]
    f = CountingFetcher(data)
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=1) as cache:
        assert cache.read("o", len(data), 9_000, 9_999, f) == data[9_000:]
        assert f.calls == [(9000, 9499)]  # a store may refuse a range past the object's end
        cache.prefetch("o", 8_000, f, len(data))
        settle(cache)
        assert f.calls == [(9000, 9499), (8000, 8999)]


def test_a_chunk_a_stream_took_from_disk_is_held_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunk_stream, "STREAM_IDLE_SECONDS", 600)
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as cache:
        cache.read("o", len(OBJ), 0, 2999, CountingFetcher())
    f, o = CountingFetcher(), CountingOpener()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=2) as cache:  # a new process
        cache.prefetch("o", 0, f, len(OBJ), o)  # chunks 0..2 come off the disk, no fetch is opened
        settle(cache)
        assert o.opens == [] and cache.hits == 3
        with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as other:
            other.clear()
        assert bytes(cache.read("o", len(OBJ), 0, 2999, f)) == OBJ[:3000]  # from memory
        assert f.calls == [] and o.opens == []


def test_stream_buffers_are_recycled_up_to_a_bound(tmp_path: Path) -> None:
    """A buffer nothing refers to any more is handed out again (its old bytes still in it); at most
    ``max(4, 2 * max_workers * (prefetch_chunks + 2))`` buffers are kept for that, 4 here."""
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0, max_workers=1) as cache:
        held = [cache.buffer() for _ in range(6)]
        assert len({id(b) for b in held}) == 6  # all in use: six distinct buffers
        for buf in held:
            buf[:] = b"\x01" * 1000
        del held, buf
        again = [cache.buffer() for _ in range(6)]
        assert [bytes(b) == b"\x01" * 1000 for b in again] == [True] * 4 + [False] * 2
        assert all(len(b) == 1000 for b in again)
    with ChunkCache(tmp_path / "more", chunk_size=100, prefetch_chunks=1, max_workers=2) as cache:  # 2 * 2 * 3 = 12
        held = [cache.buffer() for _ in range(14)]
        for buf in held:
            buf[:] = b"\x01" * 100
        del held, buf
        again = [cache.buffer() for _ in range(14)]
        assert [bytes(b) == b"\x01" * 100 for b in again] == [True] * 12 + [False] * 2


def test_a_read_past_the_end_of_an_object_of_unknown_size_learns_no_size(tmp_path: Path) -> None:
    """An empty chunk says only that the object ends before it, not where: no size is learnt from it (a size
    learnt wrong would send read-ahead past the end)."""
    f = CountingFetcher()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as cache:
        assert cache.read("o", None, 20_000, 20_005, f) == b""
        assert cache.known_size("o") is None
        assert cache.read("o", None, 9_990, 30_000, f) == OBJ[9_990:]  # chunk 9 full, chunk 10 empty
        assert cache.known_size("o") is None
        assert cache.read("o", None, 9_500, 9_600, f) == OBJ[9_500:9_601]


def test_arguments_are_checked_and_disk_mismatches_counted(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^chunk size must be > 0, got 0$"):
        ChunkCache(tmp_path, chunk_size=0)
    f = CountingFetcher()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as cache:
        with pytest.raises(ValueError, match=r"^invalid range -1\.\.10$"):
            cache.read("o", len(OBJ), -1, 10, f)
        with pytest.raises(ValueError, match=r"^invalid range 10\.\.9$"):
            cache.read("o", len(OBJ), 10, 9, f)
        assert cache.read("o", len(OBJ), 10, 10, f) == OBJ[10:11]  # one byte is a range
        cache.flush()
        assert cache.disk_mismatches == 0
    [stored] = [p for p in tmp_path.rglob("*.val")]
    raw = bytearray(stored.read_bytes())
    raw[0] ^= 0xFF
    stored.write_bytes(bytes(raw))
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as cache:
        assert cache.read("o", len(OBJ), 0, 99, f) == OBJ[:100]  # damaged on disk: fetched again
        assert cache.disk_mismatches == 1 and f.calls == [(0, 999), (0, 999)]


def test_a_miss_on_disk_makes_the_objects_next_chunks_skip_the_disk_for_a_while(tmp_path: Path) -> None:
    """The cold mark of a miss, seen from outside: a chunk another process stores meanwhile is fetched again, not
    looked up (the documented worst case of skipping the disk), and only for the object that missed."""
    f = CountingFetcher()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as cache, ChunkCache(
        tmp_path, chunk_size=1000, prefetch_chunks=0
    ) as other:
        cache.read("o", len(OBJ), 5000, 5010, f)  # not on disk: fetched, and o is cold in this cache
        other.read("o", len(OBJ), 6000, 6010, CountingFetcher())
        other.read("p", len(OBJ), 6000, 6010, CountingFetcher())
        other.flush()
        cache.read("o", len(OBJ), 6000, 6010, f)  # on disk, but o is cold: fetched
        assert f.calls == [(5000, 5999), (6000, 6999)]
        cache.read("p", len(OBJ), 6000, 6010, f)  # p never missed here: from disk
        assert len(f.calls) == 2 and cache.hits == 1


def test_a_stream_that_finds_no_chunk_on_disk_makes_its_object_skip_the_disk_for_a_while(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chunk_stream, "STREAM_IDLE_SECONDS", 600)
    f, o = CountingFetcher(), CountingOpener()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=1) as cache, ChunkCache(
        tmp_path, chunk_size=1000, prefetch_chunks=0
    ) as other:
        cache.prefetch("o", 0, f, len(OBJ), o)  # chunk 0 not on disk: the stream opens a fetch; o is cold
        settle(cache)
        other.read("o", len(OBJ), 7000, 7010, CountingFetcher())
        other.flush()
        cache.read("o", len(OBJ), 7000, 7010, f)
        assert f.calls == [(7000, 7999)] and o.opens == [(0, None)]


def test_a_chunk_that_cannot_be_written_to_disk_is_logged_and_still_served_from_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def disk_full(self: DiskChunkStore, name: str, data: object, obj: str) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(DiskChunkStore, "store", disk_full)
    f = CountingFetcher()
    with caplog.at_level(logging.WARNING, logger=chunk_cache.__name__), ChunkCache(
        tmp_path, chunk_size=1000, prefetch_chunks=0
    ) as cache:
        assert cache.read("o", len(OBJ), 0, 99, f) == OBJ[:100]
        cache.flush()
        assert cache.read("o", len(OBJ), 0, 99, f) == OBJ[:100] and len(f.calls) == 1 and len(cache) == 0
    [record] = [r for r in caplog.records if r.name == chunk_cache.__name__]
    assert record.levelno == logging.WARNING and record.getMessage() == "could not store chunk o#0 in the segment cache"
    assert record.exc_info is not None and "No space left on device" in str(record.exc_info[1])


def test_read_ahead_of_the_last_chunk_alone_and_of_an_object_of_whole_chunks(tmp_path: Path) -> None:
    data = OBJ[:9_501]
    f = CountingFetcher(data)
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=2) as cache:
        cache.prefetch("o", 9_200, f, len(data))  # in the last chunk: it alone
        settle(cache)
        assert f.calls == [(9000, 9500)] and cache.prefetches == 1
    g = CountingFetcher()
    with ChunkCache(tmp_path / "whole", chunk_size=1000, prefetch_chunks=2) as cache:
        cache.prefetch("o", 8_500, g, len(OBJ))  # 10,000 bytes: chunks 8 and 9, no chunk 10
        settle(cache)
        assert sorted(g.calls) == [(8000, 8999), (9000, 9999)] and cache.prefetches == 2


class _GatedOpener(CountingOpener):
    """A stream whose reads wait for ``gate``: the test acts while the stream is inside its first chunk."""

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate, self.reading = gate, threading.Event()

    def __call__(self, start: int, end: int | None) -> io.BufferedIOBase:
        stream = super().__call__(start, end)
        real_read = stream.read

        def read(size: int | None = -1) -> bytes:
            self.reading.set()
            assert self.gate.wait(LIMIT), "the test never opened the gate"
            return real_read(size)

        stream.read = read  # type: ignore[method-assign]
        return stream


def test_a_reader_behind_never_shrinks_the_window_a_stream_has_claimed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two readers of one object, while the stream is inside chunk 1 of its first window (1..2): the one further on
    asks up to chunk 4, the one behind up to chunk 3. The stream goes on to 4, which it claimed when asked (readers
    wait on it): were its window shrunk to 3, chunk 4 would wait for the stream to idle out."""
    monkeypatch.setattr(chunk_stream, "STREAM_IDLE_SECONDS", 600)
    gate = threading.Event()
    f, o = CountingFetcher(), _GatedOpener(gate)
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=1) as cache:
        cache.prefetch("o", 1000, f, len(OBJ), o)
        assert o.reading.wait(LIMIT)  # the stream is reading chunk 1, its window 1..2
        cache.prefetch("o", 3000, f, len(OBJ), o)  # up to 4
        cache.prefetch("o", 2000, f, len(OBJ), o)  # up to 3
        gate.set()
        settle(cache)  # chunks 1..4 all landed
        assert o.opens == [(1000, None)] and o.streams[0].served == 4000 and f.calls == []
        assert bytes(cache.read("o", len(OBJ), 1000, 4999, f)) == OBJ[1000:5000] and f.calls == []


def test_the_defaults_and_the_smallest_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunk_stream, "STREAM_IDLE_SECONDS", 600)
    with ChunkCache(tmp_path) as cache:
        assert (cache.chunk_size, cache.prefetch_chunks) == (4 * 1024 * 1024, 2)
        data = os.urandom(100)
        assert cache.read("o", len(data), 0, 99, CountingFetcher(data)) == data
        cache.flush()
        assert len(cache) == 1  # on disk by default
    with ChunkCache(tmp_path / "streams", chunk_size=1000) as cache:
        f = CountingFetcher()
        for key in "abcde":  # four streams at most by default (max_workers=4): the fifth reader reads by range
            cache.prefetch(key, 0, f, len(OBJ), CountingOpener())
            settle(cache)
        assert sorted(s.obj for s in cache.streams()) == ["a", "b", "c", "d"]
        assert sorted(f.calls) == [(0, 999), (1000, 1999), (2000, 2999)]  # e's chunk 0 and the 2 after it
    with ChunkCache(tmp_path / "one", chunk_size=1, prefetch_chunks=0) as cache:  # the smallest chunk
        f = CountingFetcher()
        assert cache.read("o", len(OBJ), 5, 7, f) == OBJ[5:8] and sorted(f.calls) == [(5, 5), (6, 6), (7, 7)]
    for prefetch_chunks in (0, -3):  # no read-ahead
        with ChunkCache(tmp_path / "none", chunk_size=1000, prefetch_chunks=prefetch_chunks) as cache:
            assert cache.prefetch_chunks == 0
            cache.prefetch("o", 0, f, len(OBJ))
            cache.prefetch("o", 0, f, len(OBJ), CountingOpener())
            assert cache.loads_in_flight() == [] and cache.streams() == []


def test_without_a_registry_the_counters_add_to_the_process_registry(tmp_path: Path) -> None:
    from local.metrics import REGISTRY

    def value(name: str) -> float:
        return REGISTRY.get_sample_value(f"RemoteLogSegmentCache_{name}_total") or 0.0

    before = {n: value(n) for n in ("hits", "misses", "prefetches")}
    f = CountingFetcher()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=1) as cache:
        cache.read("o", len(OBJ), 0, 10, f)
        cache.read("o", len(OBJ), 0, 10, f)
        cache.prefetch("o", 11, f, len(OBJ))
        settle(cache)
    assert {n: value(n) - before[n] for n in before} == {"hits": 1, "misses": 1, "prefetches": 1}


def test_a_short_chunk_read_ahead_of_an_object_of_unknown_size_teaches_its_size_when_read(tmp_path: Path) -> None:
    data = OBJ[:9_500]
    f = CountingFetcher(data)
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=1) as cache:
        cache.prefetch("o", 9_000, f)  # size unknown: chunk 9 (short) and 10 (empty) are loaded, nothing learnt
        settle(cache)
        assert cache.known_size("o") is None
        assert cache.read("o", None, 9_000, 9_099, f) == data[9_000:9_100]
        assert cache.known_size("o") == 9_500 and len(f.calls) == 2


def test_close_waits_for_the_chunks_still_being_written(tmp_path: Path) -> None:
    f = CountingFetcher()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as cache:
        assert cache.read("o", len(OBJ), 0, len(OBJ) - 1, f) == OBJ  # ten chunks handed to the writer; no flush
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=0) as cache:
        assert len(cache) == 10
        assert cache.read("o", len(OBJ), 0, len(OBJ) - 1, f) == OBJ and len(f.calls) == 10


def test_a_read_across_held_chunks_counts_a_hit_for_each(tmp_path: Path) -> None:
    f = CountingFetcher()
    with ChunkCache(tmp_path, chunk_size=1000, prefetch_chunks=1) as cache:
        cache.read("o", len(OBJ), 0, 2999, f)
        assert (cache.misses, cache.hits) == (3, 0)
        assert cache.read("o", len(OBJ), 500, 2500, f) == OBJ[500:2501]
        assert (cache.misses, cache.hits) == (3, 3)
        cache.prefetch("o", 1000, f, len(OBJ))  # chunks 1 and 2, held: read-ahead is not a hit
        assert cache.hits == 3 and len(f.calls) == 3
