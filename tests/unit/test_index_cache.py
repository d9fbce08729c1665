"""RemoteIndexCache eviction: the least RECENTLY USED entry goes (not the oldest loaded), its files go with it
(renamed ``*.deleted`` at once, removed by the cleaner, which ``close()`` drains), and the entries kept are
served without a fetch."""

from __future__ import annotations

import io
import logging
import uuid
from pathlib import Path
from typing import IO

import pytest

from local.index import OffsetIndex
from tiered import IndexType, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tiered.cache.index_cache import DIR_NAME, RemoteIndexCache
from tiered.errors import RemoteResourceNotFoundError
from tiered.layout import kafka_uuid

T0 = 1_700_000_000_000
ENTRY_BYTES = 48 * 8  # 48 legacy entries


def _md(start: int) -> RemoteLogSegmentMetadata:
    tip = TopicIdPartition(uuid.uuid4(), "t", 0)
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), start, start + 999, T0, 0, T0, 10, {0: start})


def _index_bytes(tmp: Path, base: int) -> bytes:
    path = tmp / f"{base}.index"
    idx = OffsetIndex(path, base, 4096)
    for i in range(1, 49):
        idx.append(base + i * 10, i * 4096)
    idx.close()
    return path.read_bytes()


class Store:
    def __init__(self, tmp: Path, mds: list[RemoteLogSegmentMetadata]) -> None:
        self.blobs = {md.remote_log_segment_id.id: _index_bytes(tmp, md.start_offset) for md in mds}
        self.fetched: list[int] = []  # start offsets of the segments whose offset index was fetched

    def fetch(self, md: RemoteLogSegmentMetadata, kind: IndexType) -> IO[bytes]:
        if kind is IndexType.TIMESTAMP:
            return io.BytesIO(b"")  # an empty time index
        if kind is not IndexType.OFFSET:
            raise RemoteResourceNotFoundError("only offset indexes here")
        self.fetched.append(md.start_offset)
        return io.BytesIO(self.blobs[md.remote_log_segment_id.id])


def _files_of(cache_dir: Path, md: RemoteLogSegmentMetadata) -> list[str]:
    sid = kafka_uuid(md.remote_log_segment_id.id)
    return sorted(p.name for p in cache_dir.iterdir() if sid in p.name)


def test_eviction_takes_the_least_recently_used_entry_and_its_files(tmp_path: Path) -> None:
    a, b, c, d = (_md(i * 1000) for i in range(4))
    store = Store(tmp_path, [a, b, c, d])
    cache_dir = tmp_path / "log" / DIR_NAME
    cache = RemoteIndexCache(tmp_path / "log", store.fetch, max_size_bytes=2 * ENTRY_BYTES)
    try:
        assert cache.lookup_offset(a, 105) == 10 * 4096
        assert cache.lookup_offset(b, 1105) == 10 * 4096
        entry_b = cache.get_index_entry(b)
        assert cache.lookup_offset(a, 205) == 20 * 4096  # a is now the most recently used, b the least
        assert store.fetched == [0, 1000]
        assert cache.hits == 2
        with entry_b.lock:  # holds off the cleaner: what eviction itself did to b's files is visible
            assert cache.lookup_offset(c, 2105) == 10 * 4096  # over the bound: b goes, not a (loaded first)
            assert entry_b.marked_for_cleanup
            # renamed at once, so that a restart could never reload it
            assert _files_of(cache_dir, b) == [f"1000_{kafka_uuid(b.remote_log_segment_id.id)}.index.deleted"]
        key = {md.start_offset: kafka_uuid(md.remote_log_segment_id.id) for md in (a, b, c, d)}
        assert key[0] in cache and key[2000] in cache and key[1000] not in cache
        assert len(cache) == 2 and cache.evictions == 1 and cache.size_bytes == 2 * ENTRY_BYTES
        assert cache.lookup_offset(a, 305) == 30 * 4096 and cache.lookup_offset(c, 2305) == 30 * 4096
        assert store.fetched == [0, 1000, 2000]  # both kept entries served without a fetch
        # now c is the least recently used after a read of a: d evicts c
        cache.lookup_offset(a, 105)
        cache.lookup_offset(d, 3105)
        assert key[2000] not in cache and key[0] in cache and key[3000] in cache
        # b comes back with a fetch, and evicts a (d was used after it)
        assert cache.lookup_offset(b, 1105) == 10 * 4096
        assert store.fetched == [0, 1000, 2000, 3000, 1000]
        assert key[0] not in cache and key[1000] in cache and key[3000] in cache
    finally:
        cache.close()  # drains the cleaner: every evicted entry's files are gone now
    assert _files_of(cache_dir, a) == [] and _files_of(cache_dir, c) == []
    assert _files_of(cache_dir, b) == [f"1000_{kafka_uuid(b.remote_log_segment_id.id)}.index"]
    assert _files_of(cache_dir, d) == [f"3000_{kafka_uuid(d.remote_log_segment_id.id)}.index"]
    assert not list(cache_dir.glob("*.deleted")) and not list(cache_dir.glob("*.tmp"))
    # a restart finds exactly the two entries kept, and serves them without fetching
    store.fetched.clear()
    with RemoteIndexCache(tmp_path / "log", store.fetch, max_size_bytes=2 * ENTRY_BYTES) as again:
        assert len(again) == 2
        assert again.lookup_offset(b, 1205) == 20 * 4096 and again.lookup_offset(d, 3205) == 20 * 4096
        assert store.fetched == []


def test_removing_an_entry_removes_its_files(tmp_path: Path) -> None:
    a, b = _md(0), _md(1000)
    store = Store(tmp_path, [a, b])
    cache_dir = tmp_path / "log" / DIR_NAME
    cache = RemoteIndexCache(tmp_path / "log", store.fetch)
    try:
        cache.lookup_offset(a, 5)
        cache.lookup_offset(b, 1005)
        cache.remove(a.remote_log_segment_id.id)
        assert len(cache) == 1 and cache.size_bytes == ENTRY_BYTES
        assert all(name.endswith(".deleted") for name in _files_of(cache_dir, a))
        assert cache.lookup_offset(a, 5) == 0  # fetched again
        assert store.fetched == [0, 1000, 0]
        cache.clear()
        assert len(cache) == 0 and cache.size_bytes == 0
    finally:
        cache.close()
    assert list(cache_dir.iterdir()) == []


def test_a_bound_of_one_entry_keeps_the_entry_just_loaded(tmp_path: Path) -> None:
    a, b = _md(0), _md(1000)
    store = Store(tmp_path, [a, b])
    with RemoteIndexCache(tmp_path / "log", store.fetch, max_size_bytes=ENTRY_BYTES - 1) as cache:
        assert cache.lookup_offset(a, 105) == 10 * 4096
        assert len(cache) == 1  # over the bound, but the entry just loaded is never evicted by its own load
        assert cache.lookup_offset(b, 1105) == 10 * 4096
        assert len(cache) == 1 and kafka_uuid(b.remote_log_segment_id.id) in cache


def test_an_entry_restored_at_start_loses_the_files_it_never_opened_when_evicted(tmp_path: Path) -> None:
    a = _md(0)
    store = Store(tmp_path, [a])
    cache_dir = tmp_path / "log" / DIR_NAME
    with RemoteIndexCache(tmp_path / "log", store.fetch) as cache:
        assert cache.collect_aborted_txns(a, 0, 100).aborted_txns == []  # no txn index: cached as an empty file
    assert sorted(p.suffix for p in cache_dir.iterdir()) == [".index", ".txnindex"]
    cache = RemoteIndexCache(tmp_path / "log", store.fetch)  # restored: the .txnindex is not opened
    try:
        assert len(cache) == 1
        entry = cache.get_index_entry(a)
        with entry.lock:  # holds off the cleaner
            cache.remove(a.remote_log_segment_id.id)
            prefix = f"0_{kafka_uuid(a.remote_log_segment_id.id)}"
            assert sorted(p.name for p in cache_dir.iterdir()) == [f"{prefix}.index.deleted", f"{prefix}.txnindex.deleted"]
    finally:
        cache.close()
    assert list(cache_dir.iterdir()) == []


def test_evicted_entries_and_the_entries_left_at_close_close_their_indexes(tmp_path: Path) -> None:
    a, b = _md(0), _md(1000)
    store = Store(tmp_path, [a, b])
    cache = RemoteIndexCache(tmp_path / "log", store.fetch)
    try:
        assert cache.lookup_timestamp(a, T0, 0) == 0  # a's offset and time indexes are open
        assert cache.lookup_timestamp(b, T0, 1000) == 0
        entry_a, entry_b = cache.get_index_entry(a), cache.get_index_entry(b)
        cache.remove(a.remote_log_segment_id.id)
    finally:
        cache.close()
    for entry in (entry_a, entry_b):
        assert entry.offset_index.is_closed and entry.time_index.is_closed


def test_a_restart_over_the_bound_keeps_the_most_recent_entries_but_never_the_last_one(tmp_path: Path) -> None:
    a, b = _md(0), _md(1000)
    store = Store(tmp_path, [a, b])
    with RemoteIndexCache(tmp_path / "log", store.fetch) as cache:
        cache.lookup_offset(a, 5)
        cache.lookup_offset(b, 1005)
    with RemoteIndexCache(tmp_path / "log", store.fetch, max_size_bytes=ENTRY_BYTES) as cache:
        assert len(cache) == 1 and cache.evictions == 1 and cache.size_bytes == ENTRY_BYTES
    with RemoteIndexCache(tmp_path / "log", store.fetch, max_size_bytes=1) as cache:
        assert len(cache) == 1 and cache.evictions == 0  # one entry over the bound is still kept


def test_metrics_count_hits_misses_evictions_and_track_the_size(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    a, b, c = _md(0), _md(1000), _md(2000)
    store = Store(tmp_path, [a, b, c])
    registry = CollectorRegistry()

    def value(name: str) -> float:
        got = registry.get_sample_value(name)
        assert got is not None, name
        return got

    with RemoteIndexCache(tmp_path / "log", store.fetch, max_size_bytes=2 * ENTRY_BYTES, registry=registry) as cache:
        cache.lookup_offset(a, 5)
        cache.lookup_offset(a, 6)
        cache.lookup_offset(b, 1005)
        cache.lookup_offset(c, 2005)
        assert (value("RemoteLogIndexCacheHits_total"), value("RemoteLogIndexCacheMisses_total")) == (1, 3)
        assert value("RemoteLogIndexCacheEvictions_total") == 1
        assert (value("RemoteLogIndexCacheSizeBytes"), value("RemoteLogIndexCacheEntries")) == (2 * ENTRY_BYTES, 2)
    restarted = CollectorRegistry()
    with RemoteIndexCache(tmp_path / "log", store.fetch, registry=restarted) as cache:
        assert restarted.get_sample_value("RemoteLogIndexCacheSizeBytes") == 2 * ENTRY_BYTES
        assert restarted.get_sample_value("RemoteLogIndexCacheEntries") == 2


def test_a_restart_sweeps_crash_leftovers_and_drops_broken_entries_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mds = [_md(0), _md(1000), _md(2000)]
    store = Store(tmp_path, mds)
    cache_dir = tmp_path / "log" / DIR_NAME
    with RemoteIndexCache(tmp_path / "log", store.fetch) as cache:
        for md in mds:
            cache.lookup_offset(md, md.start_offset + 5)
    # What a crash leaves, named to sort before the good entries (a drop must not end the scan):
    (cache_dir / "0000_corrupt.index").write_bytes(b"\x01" * 5)  # not whole entries
    (cache_dir / "00_noindex.timeindex").write_bytes(b"")  # no offset index
    (cache_dir / "abc_notanoffset.index").write_bytes(b"")  # no start offset in the name
    (cache_dir / "0_half.index.tmp").write_bytes(b"\x00" * 8)  # a download cut short
    (cache_dir / "0_gone.index.deleted").write_bytes(b"\x00" * 8)  # evicted, not yet removed
    store.fetched.clear()
    with caplog.at_level(logging.WARNING, logger="tiered.cache.index_cache"), \
            RemoteIndexCache(tmp_path / "log", store.fetch) as cache:
        assert len(cache) == 3 and cache.size_bytes == 3 * ENTRY_BYTES
        for md in mds:
            assert cache.lookup_offset(md, md.start_offset + 105) == 10 * 4096
        assert store.fetched == []
    assert sorted(p.name for p in cache_dir.iterdir()) == sorted(
        f"{md.start_offset}_{kafka_uuid(md.remote_log_segment_id.id)}.index" for md in mds
    )
    why = _why_corrupt_bytes(tmp_path, b"\x01" * 5)
    assert any(r.getMessage() == f"dropping cached remote indexes 0000_corrupt at start: {why}".replace(
        str(tmp_path / "probe" / "0000_corrupt.index"), str(cache_dir / "0000_corrupt.index")) for r in caplog.records)


def _why_corrupt_bytes(tmp: Path, data: bytes) -> str:
    (tmp / "probe").mkdir(exist_ok=True)
    probe = tmp / "probe" / "0000_corrupt.index"
    probe.write_bytes(data)
    return _why_corrupt(probe)


def test_the_size_bound_must_not_be_negative(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^remote\.log\.index\.file\.cache\.total\.size\.bytes must be >= 0, got -1$"):
        RemoteIndexCache(tmp_path, Store(tmp_path, []).fetch, max_size_bytes=-1)
    with RemoteIndexCache(tmp_path, Store(tmp_path, []).fetch, max_size_bytes=0) as cache:
        assert cache.max_size_bytes == 0


def test_only_a_non_empty_transaction_index_is_synced_before_it_takes_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tiered.cache import index_cache

    synced: list[int] = []
    real_fsync = index_cache.os.fsync
    monkeypatch.setattr(index_cache.os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    a = _md(0)
    store = Store(tmp_path, [a])
    with RemoteIndexCache(tmp_path / "log", store.fetch) as cache:
        cache.lookup_offset(a, 5)
        cache.lookup_timestamp(a, T0, 0)
        assert cache.collect_aborted_txns(a, 0, 10).aborted_txns == []  # missing: cached empty, nothing to sync
        assert synced == []
    from local.index import TransactionIndex
    from local.index.entries import AbortedTxn

    txn = TransactionIndex(0, tmp_path / "t.txnindex")
    txn.append(AbortedTxn(producer_id=7, first_offset=20, last_offset=40, last_stable_offset=20))
    txn.close()
    data = (tmp_path / "t.txnindex").read_bytes()
    b = _md(0)
    (tmp_path / "s2").mkdir()
    store2 = Store(tmp_path / "s2", [b])
    store2.fetch = lambda md, kind: io.BytesIO(data) if kind is IndexType.TRANSACTION else Store.fetch(store2, md, kind)  # type: ignore[method-assign]
    with RemoteIndexCache(tmp_path / "log2", store2.fetch) as cache:
        assert [t.producer_id for t in cache.collect_aborted_txns(b, 0, 100).aborted_txns] == [7]
        assert len(synced) == 1


def test_concurrent_readers_of_a_missing_entry_share_one_download(tmp_path: Path) -> None:
    import threading

    a = _md(0)
    store = Store(tmp_path, [a])
    gate, called = threading.Event(), threading.Event()

    def slow_fetch(md: RemoteLogSegmentMetadata, kind: IndexType) -> IO[bytes]:
        called.set()
        assert gate.wait(30)
        return store.fetch(md, kind)

    with RemoteIndexCache(tmp_path / "log", slow_fetch) as cache:
        results: list[int] = []
        threads = [threading.Thread(target=lambda: results.append(cache.lookup_offset(a, 105))) for _ in range(4)]
        threads[0].start()
        assert called.wait(30)  # the first reader owns the download and is inside it
        for t in threads[1:]:
            t.start()
        # the others find the download in flight and wait for it (it cannot finish before the gate opens)
        gate.set()
        for t in threads:
            t.join(30)
        assert results == [10 * 4096] * 4
        assert store.fetched == [0] and cache.loads == 1 and cache.misses == 1 and cache.hits == 3


def test_counters_and_the_size_of_an_entry_whose_other_indexes_were_loaded(tmp_path: Path) -> None:
    a, b = _md(0), _md(1000)
    store = Store(tmp_path, [a, b])
    with RemoteIndexCache(tmp_path / "log", store.fetch) as cache:
        cache.lookup_offset(a, 5)
        cache.lookup_offset(b, 1005)
        cache.lookup_offset(b, 1006)
        assert (cache.loads, cache.misses, cache.hits) == (2, 2, 1)
        cache.collect_aborted_txns(a, 0, 10)  # a's (empty) txn index: no bytes
        cache.lookup_timestamp(a, T0, 0)  # a's (empty) time index: no bytes
        assert cache.size_bytes == 2 * ENTRY_BYTES
    # a time index with entries makes the entry grow, and removing the entry gives all of it back
    c = _md(2000)
    from local.index import TimeIndex

    times = TimeIndex(tmp_path / "c.timeindex", 2000)
    for i in range(1, 6):
        times.maybe_append(T0 + i, 2000 + i * 10)
    times.close()
    blob = (tmp_path / "c.timeindex").read_bytes()
    (tmp_path / "s3").mkdir()
    store3 = Store(tmp_path / "s3", [c])

    def fetch(md: RemoteLogSegmentMetadata, kind: IndexType) -> IO[bytes]:
        return io.BytesIO(blob) if kind is IndexType.TIMESTAMP else store3.fetch(md, kind)

    with RemoteIndexCache(tmp_path / "log3", fetch) as cache:
        cache.lookup_offset(c, 2005)
        assert cache.lookup_timestamp(c, T0 + 3, 2000) == 3 * 4096
        assert cache.size_bytes == ENTRY_BYTES + len(blob)
        cache.remove(c.remote_log_segment_id.id)
        assert cache.size_bytes == 0 and len(cache) == 0


# What the mutation run of index_cache.py left unchecked (TESTING.md) ---------------------------------------------


def test_an_entry_evicted_between_lookup_and_use_is_loaded_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window between ``get_index_entry`` and the lookup on the entry: an eviction there (a concurrent load
    over the bound, a remove) makes the lookup fail, and the read loads the segment's entry again."""
    a = _md(0)
    store = Store(tmp_path, [a])
    with RemoteIndexCache(tmp_path / "log", store.fetch) as cache:
        real_get = cache.get_index_entry
        evictions = [1]  # evict the entry once, right after it is handed out

        def get_then_evict(md: RemoteLogSegmentMetadata) -> object:
            entry = real_get(md)
            if evictions[0] > 0:
                evictions[0] -= 1
                cache.remove(md.remote_log_segment_id.id)
                assert entry.marked_for_cleanup
            return entry

        monkeypatch.setattr(cache, "get_index_entry", get_then_evict)
        assert cache.lookup_offset(a, 105) == 10 * 4096
        assert store.fetched == [0, 0]  # loaded again after the eviction
        evictions[0] = 3  # evicted three times running: still answered, on the fourth load
        assert cache.lookup_timestamp(a, T0, 0) == 0
        assert store.fetched == [0, 0, 0, 0, 0]
        evictions[0] = 100  # evicted every time: a bounded number of attempts, then the eviction is reported
        with pytest.raises(Exception, match=kafka_uuid(a.remote_log_segment_id.id)):
            cache.collect_aborted_txns(a, 0, 10)
        assert len(store.fetched) == 5 + 3  # four attempts: the entry held, then three loads


def test_cleaning_an_entry_twice_leaves_a_later_entrys_files_alone(tmp_path: Path) -> None:
    """An entry's files are removed once: a second cleanup (a later entry of the same segment has the same file
    names, and may itself be evicted, its files renamed ``*.deleted``, a reader still on it) removes nothing."""
    a = _md(0)
    store = Store(tmp_path, [a])
    cache_dir = tmp_path / "log" / DIR_NAME
    with RemoteIndexCache(tmp_path / "log", store.fetch) as cache:
        old = cache.get_index_entry(a)
        with old.lock:  # holds off the cleaner
            cache.remove(a.remote_log_segment_id.id)
        old.cleanup()  # as the cleaner does (it may already have): the files are gone
        assert _files_of(cache_dir, a) == []
        new = cache.get_index_entry(a)
        with new.lock:
            cache.remove(a.remote_log_segment_id.id)
            renamed = _files_of(cache_dir, a)
            assert renamed == [f"0_{kafka_uuid(a.remote_log_segment_id.id)}.index.deleted"]
            old.cleanup()  # the old entry cleaned again
            assert _files_of(cache_dir, a) == renamed and not new.offset_index.is_closed
            assert new.offset_index.lookup(105).position == 10 * 4096  # still usable by its reader


def test_a_corrupt_index_from_the_store_names_the_segment_and_leaves_no_file(tmp_path: Path) -> None:
    from local.errors import CorruptIndexError

    a = _md(0)
    store = Store(tmp_path, [a])
    store.blobs[a.remote_log_segment_id.id] = b"\x01" * 5  # not whole entries
    cache_dir = tmp_path / "log" / DIR_NAME
    with RemoteIndexCache(tmp_path / "log", store.fetch) as cache:
        with pytest.raises(CorruptIndexError) as caught:
            cache.lookup_offset(a, 5)
        err = caught.value
        assert getattr(err, "segment_id", None) == str(a.remote_log_segment_id)
        assert str(err).startswith(f"the OFFSET index of remote segment {a.remote_log_segment_id} fetched from the store is corrupt: ")
        assert isinstance(err.__cause__, CorruptIndexError)
        assert list(cache_dir.iterdir()) == [] and len(cache) == 0
        (tmp_path / "again").mkdir()
        store.blobs[a.remote_log_segment_id.id] = _index_bytes(tmp_path / "again", 0)  # the store repaired: loaded next time
        assert cache.lookup_offset(a, 105) == 10 * 4096


_EXIT_WITHOUT_CLOSE = """
import sys
from tiered.cache.index_cache import RemoteIndexCache
cache = RemoteIndexCache(sys.argv[1], lambda md, kind: None)
with cache._lock:
    cache._ensure_cleaner()  # as the first eviction does
assert cache._cleaner.is_alive()  # waiting for evicted entries, forever
"""


def test_the_cleaner_does_not_hold_up_the_exit_of_a_program_that_never_closed_the_cache(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _EXIT_WITHOUT_CLOSE, str(tmp_path)], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()


def test_a_cache_that_cleans_nothing_up_starts_no_thread_and_close_waits_for_none(tmp_path: Path) -> None:
    import threading

    a = _md(0)
    store = Store(tmp_path, [a])
    before = threading.active_count()
    cache = RemoteIndexCache(tmp_path / "log", store.fetch)
    assert cache.lookup_offset(a, 5) == 0
    assert cache._cleaner is None and threading.active_count() == before
    cache.close()
    assert cache._cleaner is None
    cache.remove(a.remote_log_segment_id.id)  # after close: nothing left to clean, and no thread started for it
    assert cache._cleaner is None


def test_an_entry_removed_after_close_is_cleaned_up_at_once(tmp_path: Path) -> None:
    a = _md(0)
    store = Store(tmp_path, [a])
    cache_dir = tmp_path / "log" / DIR_NAME
    cache = RemoteIndexCache(tmp_path / "log", store.fetch)
    cache.lookup_offset(a, 5)
    with cache._lock:
        cache._closed = True  # closed between a reader's lookup and its remove: the remove cleans up itself
    cache.remove(a.remote_log_segment_id.id)
    assert _files_of(cache_dir, a) == [] and cache._cleaner is None


def test_close_drains_the_cleaner_and_a_second_close_does_nothing(tmp_path: Path) -> None:
    a, b = _md(0), _md(1000)
    store = Store(tmp_path, [a, b])
    cache_dir = tmp_path / "log" / DIR_NAME
    cache = RemoteIndexCache(tmp_path / "log", store.fetch)
    cache.lookup_offset(a, 5)
    cache.lookup_offset(b, 1005)
    cache.remove(a.remote_log_segment_id.id)
    cache.close()  # returns once the cleaner has removed a's files and stopped
    assert _files_of(cache_dir, a) == [] and not cache._cleaner.is_alive()
    assert len(cache) == 0
    cache.close()
    assert _files_of(cache_dir, b) == [f"1000_{kafka_uuid(b.remote_log_segment_id.id)}.index"]  # kept for a restart


# Checksums, sizes, and the rest of the survivors of the third mutation run ---------------------------------------


class Verifier:
    """A :class:`tiered.checksums.ChecksumVerifier` stand-in: a file matches when it holds the store's bytes (the
    store's copy is the checksummed original); it records every check and every mismatch noted."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.checks: list[tuple[int, IndexType, str]] = []
        self.noted: list[tuple[str, int]] = []

    def check_file(self, md: RemoteLogSegmentMetadata, index_type: IndexType, path: Path) -> object:
        from tiered.checksums import ChecksumProblem

        self.checks.append((md.start_offset, index_type, path.name))
        if index_type is not IndexType.OFFSET or path.read_bytes() == self.store.blobs[md.remote_log_segment_id.id]:
            return None
        return ChecksumProblem("mismatch", f"{md.start_offset}.index", 0, 7, "crc32c 1 != 2", str(md.remote_log_segment_id))

    def note_mismatch(self, problem: object, attempt: int) -> None:
        self.noted.append((str(problem), attempt))


class Damaging(Store):
    """A store that hands out a damaged offset index ``times`` times, then the right one."""

    def __init__(self, tmp: Path, mds: list[RemoteLogSegmentMetadata], times: int) -> None:
        super().__init__(tmp, mds)
        self.times = times

    def fetch(self, md: RemoteLogSegmentMetadata, kind: IndexType) -> IO[bytes]:
        stream = super().fetch(md, kind)
        if kind is IndexType.OFFSET and self.times:
            self.times -= 1
            data = bytearray(stream.read())
            data[7] ^= 1  # a position off by one: every sanity check passes
            return io.BytesIO(bytes(data))
        return stream


def test_a_download_that_fails_its_checksums_is_fetched_once_more(tmp_path: Path) -> None:
    a = _md(0)
    store = Damaging(tmp_path, [a], times=1)
    verifier = Verifier(store)
    with RemoteIndexCache(tmp_path / "log", store.fetch, verifier=verifier) as cache:  # type: ignore[arg-type]
        assert cache.lookup_offset(a, 105) == 10 * 4096
        name = f"0_{kafka_uuid(a.remote_log_segment_id.id)}.index"
        assert store.fetched == [0, 0]
        assert verifier.checks == [(0, IndexType.OFFSET, name + ".tmp")] * 2
        assert verifier.noted == [(f"mismatch: object 0.index bytes 0..7 of {a.remote_log_segment_id}: crc32c 1 != 2", 0)]
        assert sorted(p.name for p in (tmp_path / "log" / DIR_NAME).iterdir()) == [name]


def test_a_download_failing_its_checksums_twice_raises_and_leaves_no_file(tmp_path: Path) -> None:
    from tiered.errors import RemoteChecksumError

    a = _md(0)
    store = Damaging(tmp_path, [a], times=2)
    verifier = Verifier(store)
    with RemoteIndexCache(tmp_path / "log", store.fetch, verifier=verifier) as cache:  # type: ignore[arg-type]
        with pytest.raises(RemoteChecksumError, match=r"^remote object 0\.index \(segment .*\) bytes 0\.\.7: crc32c"):
            cache.lookup_offset(a, 105)
        assert [attempt for _, attempt in verifier.noted] == [0, 1]
        assert list((tmp_path / "log" / DIR_NAME).iterdir()) == [] and len(cache) == 0


def test_a_cached_index_is_checked_when_its_segment_is_known_and_fetched_again_when_damaged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = _md(0), _md(1000)
    store = Store(tmp_path, [a, b])
    verifier = Verifier(store)
    with RemoteIndexCache(tmp_path / "log", store.fetch, verifier=verifier) as cache:  # type: ignore[arg-type]
        cache.lookup_offset(a, 5)
        cache.lookup_offset(b, 1005)
    damaged = tmp_path / "log" / DIR_NAME / f"0_{kafka_uuid(a.remote_log_segment_id.id)}.index"
    data = bytearray(damaged.read_bytes())
    data[7] ^= 1
    damaged.write_bytes(bytes(data))
    store.fetched.clear()
    verifier.checks.clear()
    with caplog.at_level(logging.WARNING, logger="tiered.cache.index_cache"), \
            RemoteIndexCache(tmp_path / "log", store.fetch, verifier=verifier) as cache:  # type: ignore[arg-type]
        assert len(cache) == 2  # both restored: they pass the sanity check
        assert cache.lookup_offset(b, 1105) == 10 * 4096 and store.fetched == []  # checked, and it matches
        assert cache.lookup_offset(a, 105) == 10 * 4096 and store.fetched == [0]  # checked, damaged: fetched again
        assert [(start, kind) for start, kind, _ in verifier.checks] == [(1000, IndexType.OFFSET), (0, IndexType.OFFSET),
                                                                        (0, IndexType.OFFSET)]
        assert cache.lookup_timestamp(b, T0, 1000) == 0  # the checked entry knows its segment: its time index loads
        offset_checks = [c for c in verifier.checks if c[1] is IndexType.OFFSET]
        assert cache.lookup_offset(b, 1105) == 10 * 4096 and len(offset_checks) == 3  # checked once
    warning = next(r.getMessage() for r in caplog.records if "does not match" in r.getMessage())
    assert warning == (f"cached remote index {damaged} does not match its checksums (mismatch: object 0.index bytes 0..7 "
                       f"of {a.remote_log_segment_id}: crc32c 1 != 2): fetching it again")


def test_a_file_found_in_the_cache_dir_for_a_new_entry_is_checked_before_it_is_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """(A file the restart did not restore, e.g. written meanwhile by another process sharing the directory.)"""
    a = _md(0)
    store = Store(tmp_path, [a])
    verifier = Verifier(store)
    with RemoteIndexCache(tmp_path / "log", store.fetch, verifier=verifier) as cache:  # type: ignore[arg-type]
        path = tmp_path / "log" / DIR_NAME / f"0_{kafka_uuid(a.remote_log_segment_id.id)}.index"
        data = bytearray(store.blobs[a.remote_log_segment_id.id])
        data[7] ^= 1
        path.write_bytes(bytes(data))
        with caplog.at_level(logging.WARNING, logger="tiered.cache.index_cache"):
            assert cache.lookup_offset(a, 105) == 10 * 4096
        assert store.fetched == [0] and verifier.checks[0] == (0, IndexType.OFFSET, path.name)
        assert any(r.getMessage().startswith(f"cached remote index {path} does not match its checksums (mismatch")
                   for r in caplog.records)


def _why_corrupt(path: Path) -> str:
    """What opening a cached offset index at ``path`` says is wrong with it."""
    from local.errors import CorruptIndexError
    from tiered.cache.index_cache import _open_offset

    with pytest.raises(CorruptIndexError) as caught:
        _open_offset(path, 0)
    return str(caught.value)


def test_a_corrupt_file_found_in_the_cache_dir_is_fetched_again_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a = _md(0)
    store = Store(tmp_path, [a])
    with RemoteIndexCache(tmp_path / "log", store.fetch) as cache:
        path = tmp_path / "log" / DIR_NAME / f"0_{kafka_uuid(a.remote_log_segment_id.id)}.index"
        path.write_bytes(b"\x01" * 5)
        why = _why_corrupt(path)
        with caplog.at_level(logging.WARNING, logger="tiered.cache.index_cache"):
            assert cache.lookup_offset(a, 105) == 10 * 4096
        assert store.fetched == [0]
        message = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("corrupt cached"))
        assert message == f"corrupt cached remote index {path} ({why}): fetching it again"


def _time_index_bytes(tmp: Path, base: int) -> bytes:
    from local.index import TimeIndex

    path = tmp / f"{base}.timeindex"
    index = TimeIndex(path, base, 4096)
    for i in range(1, 20):
        index.maybe_append(T0 + i, base + i * 10)
    index.close()
    return path.read_bytes()


def test_a_restored_entry_counts_the_files_it_found_once(tmp_path: Path) -> None:
    a = _md(0)
    store = Store(tmp_path, [a])
    times = _time_index_bytes(tmp_path, 0)
    fetch = lambda md, kind: io.BytesIO(times) if kind is IndexType.TIMESTAMP else store.fetch(md, kind)  # noqa: E731
    with RemoteIndexCache(tmp_path / "log", fetch) as cache:
        cache.lookup_timestamp(a, T0 + 5, 0)
        assert cache.size_bytes == ENTRY_BYTES + len(times)
    with RemoteIndexCache(tmp_path / "log", fetch) as cache:
        assert cache.size_bytes == ENTRY_BYTES + len(times)
        assert cache.lookup_timestamp(a, T0 + 5, 0) == 5 * 4096  # T0 + 5 -> offset 50 -> its position
        assert cache.size_bytes == ENTRY_BYTES + len(times)  # opened, not counted again


def test_an_entry_whose_time_index_grows_it_past_the_bound_is_not_evicted_by_its_own_load(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    a, b = _md(0), _md(1000)
    store = Store(tmp_path, [a, b])
    times = _time_index_bytes(tmp_path, 0)
    fetch = lambda md, kind: io.BytesIO(times) if kind is IndexType.TIMESTAMP else store.fetch(md, kind)  # noqa: E731
    registry = CollectorRegistry()
    with RemoteIndexCache(tmp_path / "log", fetch, max_size_bytes=2 * ENTRY_BYTES, registry=registry) as cache:
        entry_a = cache.get_index_entry(a)
        cache.get_index_entry(b)  # a is now the least recently used
        entry_a.lookup_timestamp(T0 + 5, 0)  # a grows past the bound while it is the oldest: it is the one in use
        assert a.remote_log_segment_id.id in {md.remote_log_segment_id.id for md in (a,)} and len(cache) == 2
        assert entry_a.lookup_offset(105) == 10 * 4096  # still usable
        assert registry.get_sample_value("RemoteLogIndexCacheSizeBytes") == cache.size_bytes == 2 * ENTRY_BYTES + len(times)


def test_removing_a_segment_the_cache_does_not_hold_does_nothing(tmp_path: Path) -> None:
    a, b = _md(0), _md(1000)
    store = Store(tmp_path, [a, b])
    with RemoteIndexCache(tmp_path / "log", store.fetch) as cache:
        cache.lookup_offset(a, 5)
        cache.remove(b.remote_log_segment_id.id)  # (remote retention removes every deleted segment's entry)
        assert len(cache) == 1 and cache.size_bytes == ENTRY_BYTES


def test_cached_indexes_are_opened_read_only(tmp_path: Path) -> None:
    a = _md(0)
    store = Store(tmp_path, [a])
    times = _time_index_bytes(tmp_path, 0)
    fetch = lambda md, kind: io.BytesIO(times) if kind is IndexType.TIMESTAMP else store.fetch(md, kind)  # noqa: E731
    cache_dir = tmp_path / "log" / DIR_NAME
    expected = {".index": store.blobs[a.remote_log_segment_id.id], ".timeindex": times}
    with RemoteIndexCache(tmp_path / "log", fetch) as cache:
        cache.lookup_timestamp(a, T0 + 5, 0)
        assert {p.suffix: p.read_bytes() for p in cache_dir.iterdir()} == expected  # not grown to a writable size
    with RemoteIndexCache(tmp_path / "log", fetch) as cache:  # restored, then both opened again
        cache.lookup_timestamp(a, T0 + 5, 0)
        entry = cache.get_index_entry(a)
        assert {p.suffix: p.read_bytes() for p in cache_dir.iterdir()} == expected
        entry.offset_index.truncate_to(a.start_offset)  # a read-only index leaves its file alone
        entry.time_index.truncate_to(a.start_offset)
    assert {p.suffix: p.read_bytes() for p in cache_dir.iterdir()} == expected


def test_a_restored_entry_cannot_load_its_other_indexes_before_its_segment_is_known(tmp_path: Path) -> None:
    a = _md(0)
    store = Store(tmp_path, [a])
    with RemoteIndexCache(tmp_path / "log", store.fetch) as cache:
        cache.lookup_offset(a, 5)
    with RemoteIndexCache(tmp_path / "log", store.fetch) as cache:
        key = kafka_uuid(a.remote_log_segment_id.id)
        restored = cache._entries[key]
        with pytest.raises(RuntimeError, match=f"^remote index entry {key} has no segment metadata: get it with "
                                               "get_index_entry$"):
            restored.time_index  # noqa: B018


def test_the_cleaner_is_a_named_daemon_and_a_failed_cleanup_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from tiered.cache import index_cache

    a = _md(0)
    store = Store(tmp_path, [a])
    cache = RemoteIndexCache(tmp_path / "log", store.fetch)
    try:
        cache.lookup_offset(a, 5)

        def broken(self: object) -> None:
            raise OSError("cleanup failed in the test")

        monkeypatch.setattr(index_cache.Entry, "cleanup", broken)
        with caplog.at_level(logging.ERROR, logger="tiered.cache.index_cache"):
            cache.remove(a.remote_log_segment_id.id)  # starts the cleaner
            cleaner = [t for t in threading.enumerate() if t.name == "remote-log-index-cleaner"]
            assert cleaner and all(t.daemon for t in cleaner)
            cache.close()  # drains the cleaner
    finally:
        cache.close()
    record = next(r for r in caplog.records if r.getMessage().startswith("failed to clean up"))
    assert record.getMessage() == f"failed to clean up remote index entry {kafka_uuid(a.remote_log_segment_id.id)}"
    assert record.exc_info is not None and record.exc_info[0] is OSError


def test_an_index_that_fails_to_close_at_cleanup_is_still_removed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = _md(0)
    store = Store(tmp_path, [a])
    with RemoteIndexCache(tmp_path / "log", store.fetch) as cache:
        cache.lookup_offset(a, 5)
        entry = cache.get_index_entry(a)
        real_close = entry.offset_index.close

        def failing_close() -> None:
            real_close()
            raise OSError("close failed in the test")

        monkeypatch.setattr(entry.offset_index, "close", failing_close)
        with caplog.at_level(logging.DEBUG, logger="tiered.cache.index_cache"):
            cache.remove(a.remote_log_segment_id.id)
            cache.close()
    assert list((tmp_path / "log" / DIR_NAME).iterdir()) == []
    record = next(r for r in caplog.records if r.getMessage().startswith("closing "))
    assert record.getMessage() == f"closing {entry.offset_index.path} failed"
    assert record.exc_info is not None and record.exc_info[0] is OSError


def test_the_metrics_say_what_they_count(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    with RemoteIndexCache(tmp_path / "log", Store(tmp_path, []).fetch, registry=registry):
        helps = {m.name: m.documentation for m in registry.collect()}
    assert helps == {
        "RemoteLogIndexCacheHits": "RemoteIndexCache hits",
        "RemoteLogIndexCacheMisses": "RemoteIndexCache misses",
        "RemoteLogIndexCacheEvictions": "RemoteIndexCache evictions",
        "RemoteLogIndexCacheSizeBytes": "Bytes held by the RemoteIndexCache",
        "RemoteLogIndexCacheEntries": "Entries in the RemoteIndexCache",
    }


def test_an_entry_opens_each_of_its_other_indexes_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tiered.cache import index_cache

    opened: list[str] = []
    for name in ("_open_time", "_open_txn"):
        real = getattr(index_cache, name)
        monkeypatch.setattr(index_cache, name, lambda path, base, real=real: (opened.append("".join(path.suffixes)), real(path, base))[1])
    a = _md(0)
    store = Store(tmp_path, [a])
    with RemoteIndexCache(tmp_path / "log", store.fetch) as cache:
        for _ in range(2):
            cache.lookup_timestamp(a, T0, 0)
            cache.collect_aborted_txns(a, 0, 100)
        assert sorted(opened) == [".timeindex.tmp", ".txnindex.tmp"]  # once each: the download checked is the index kept
        entry = cache.get_index_entry(a)
        assert entry.time_index is entry.time_index and entry.txn_index is entry.txn_index


def test_a_restored_entry_renamed_while_it_is_checked_is_loaded_afresh(tmp_path: Path) -> None:
    a = _md(0)
    store = Store(tmp_path, [a])
    with RemoteIndexCache(tmp_path / "log", store.fetch) as cache:
        cache.lookup_offset(a, 5)

    class Evicting(Verifier):
        def check_file(self, md: RemoteLogSegmentMetadata, index_type: IndexType, path: Path) -> object:
            if not self.checks:
                self.checks.append((md.start_offset, index_type, path.name))
                cache.remove(md.remote_log_segment_id.id)  # evicted meanwhile: its files renamed
                raise FileNotFoundError(path)
            return super().check_file(md, index_type, path)

    store.fetched.clear()
    verifier = Evicting(store)
    with RemoteIndexCache(tmp_path / "log", store.fetch, verifier=verifier) as cache:  # type: ignore[arg-type]
        assert cache.lookup_offset(a, 105) == 10 * 4096
        assert store.fetched == [0] and len(cache) == 1  # loaded afresh


def test_two_readers_of_an_index_not_yet_open_share_one_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second reader waits for the first one's load and gets the same index, not a second copy."""
    import threading

    from tiered.cache import index_cache

    a = _md(0)
    store = Store(tmp_path, [a])
    in_fetch, release = threading.Event(), threading.Event()

    def fetch(md: RemoteLogSegmentMetadata, kind: IndexType) -> IO[bytes]:
        if kind is IndexType.TIMESTAMP:
            in_fetch.set()
            assert release.wait(30)
        return store.fetch(md, kind)

    opened: list[str] = []
    real = index_cache._open_time
    monkeypatch.setattr(index_cache, "_open_time", lambda path, base: (opened.append(path.name), real(path, base))[1])

    class SignallingLock:
        """The entry's load lock, telling when the second reader is about to wait for it."""

        def __init__(self) -> None:
            self.lock, self.second_waits = threading.Lock(), threading.Event()

        def __enter__(self) -> None:
            if threading.current_thread().name == "second":
                self.second_waits.set()
            self.lock.acquire()

        def __exit__(self, *exc: object) -> None:
            self.lock.release()

    with RemoteIndexCache(tmp_path / "log", fetch) as cache:
        entry = cache.get_index_entry(a)
        entry.load_lock = SignallingLock()  # type: ignore[assignment]
        got: dict[str, object] = {}
        first = threading.Thread(target=lambda: got.setdefault("first", entry.time_index), name="first")
        first.start()
        assert in_fetch.wait(30)  # the first reader holds the load lock, fetching
        second = threading.Thread(target=lambda: got.setdefault("second", entry.time_index), name="second")
        second.start()
        assert entry.load_lock.second_waits.wait(30)  # type: ignore[attr-defined]
        release.set()
        first.join(30)
        second.join(30)
        assert got["first"] is got["second"] is entry.time_index
        assert len([name for name in opened if ".timeindex" in name]) == 1


def test_cached_indexes_hold_no_file_descriptor(tmp_path: Path) -> None:
    """A mapping would keep a descriptor per cached index (CPython's mmap keeps a duplicate): a cache of hundreds
    of remote segments would reach the process's limit. Read-only indexes are read whole instead."""
    import os

    mds = [_md(i * 1000) for i in range(20)]
    store = Store(tmp_path, mds)
    times = _time_index_bytes(tmp_path, 0)
    fetch = lambda md, kind: io.BytesIO(times) if kind is IndexType.TIMESTAMP else store.fetch(md, kind)  # noqa: E731
    cache_dir = tmp_path / "log" / DIR_NAME

    def open_in_cache() -> list[str]:
        targets = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                targets.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                continue
        return [t for t in targets if t.startswith(str(cache_dir))]

    with RemoteIndexCache(tmp_path / "log", fetch) as cache:
        for md in mds:
            assert cache.lookup_offset(md, md.start_offset + 105) == 10 * 4096
            cache.lookup_timestamp(md, T0 + 5, md.start_offset)
        assert len(cache) == 20 and open_in_cache() == []
