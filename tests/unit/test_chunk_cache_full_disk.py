"""A remote segment cache dir on a full file system: the cache is disposable, so it runs in memory only (an ERROR
naming the dir) instead of failing the LogManager's start (`tiered run` exited 1 with "OperationalError: database or
disk is full" when the first data dir, the cache's default home, was full)."""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path

import pytest

from tests.unit.test_storage_faults import small_tmpfs  # noqa: F401  (the 4 MiB tmpfs fixture, root as CI)
from tiered.cache import disk_store
from tiered.cache.chunk_cache import ChunkCache
from tiered.cache.disk_store import DiskChunkStore, NoDiskStore


def _fill(mnt: Path) -> None:
    with open(mnt / "ballast", "wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
        except OSError:
            pass


def test_a_segment_cache_dir_on_a_full_disk_opens_memory_only(
    small_tmpfs: Path, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    _fill(small_tmpfs)
    cache_dir = small_tmpfs / "remote-log-segment-cache"
    with caplog.at_level(logging.ERROR, logger="tiered.cache.chunk_cache"):
        cache = ChunkCache(cache_dir, chunk_size=4096, size_limit=1 << 20)
    try:
        assert isinstance(cache._disk, NoDiskStore)
        assert any(str(cache_dir) in r.getMessage() and "memory only" in r.getMessage() for r in caplog.records)
    finally:
        cache.close()


# A full file system while the cache runs (found by helper hZb, F3): every chunk store failed, nothing was evicted
# (the cache was far under its size limit), each failure left a partial diskcache value file no entry references
# (so the dir stayed full for good) and logged a traceback.

CHUNK = 256 * 1024


def _unreferenced(cache_dir: Path) -> list[str]:
    """The diskcache value files under ``cache_dir`` that no entry references."""
    conn = sqlite3.connect(f"{(cache_dir / 'cache.db').as_uri()}?mode=ro", uri=True)
    try:
        known = {os.path.normpath(r[0]) for r in conn.execute("SELECT filename FROM Cache WHERE filename IS NOT NULL")}
    finally:
        conn.close()
    return [str(p) for p in cache_dir.rglob("*.val") if os.path.normpath(str(p.relative_to(cache_dir))) not in known]


def _object(n_chunks: int) -> bytes:
    return b"".join(bytes([i % 251]) * CHUNK for i in range(n_chunks))


def test_a_full_file_system_evicts_the_least_recently_used_chunks_and_leaves_no_partial_file(
    small_tmpfs: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    # The store lowers its limit at most once a minute, and writes nothing for 5 s after a store failed even then
    # (SQLite's write-ahead log grows past the room made on so small a file system): not within a test.
    monkeypatch.setattr(disk_store, "SHRINK_SECONDS", 0.0, raising=False)
    monkeypatch.setattr(disk_store, "FULL_BACKOFF_SECONDS", 0.0, raising=False)
    cache_dir = small_tmpfs / "remote-log-segment-cache"
    data = _object(40)  # 10 MiB through a 4 MiB file system, the cache's limit far above
    fetcher = lambda s, e: data[s : e + 1]  # noqa: E731
    with (
        caplog.at_level(logging.INFO, logger="tiered.cache"),
        ChunkCache(cache_dir, chunk_size=CHUNK, size_limit=1 << 30, memory_bytes=CHUNK, mapped_bytes=CHUNK) as cache,
    ):
        assert isinstance(cache._disk, DiskChunkStore)
        for i in range(40):
            got = cache.read("obj", len(data), i * CHUNK, (i + 1) * CHUNK - 1, fetcher)
            assert bytes(got) == data[i * CHUNK : (i + 1) * CHUNK]
            cache.flush()
        stored = [i for i in range(40) if cache._disk.mapped(f"obj#{i}") is not None]
        assert 39 in stored and 0 not in stored, stored  # the most recent kept, the oldest evicted
        assert _unreferenced(cache_dir) == []
    assert not [r for r in caplog.records if r.exc_info], "a full file system is no traceback"
    full = [r for r in caplog.records if "is full" in r.getMessage()]
    assert len(full) == 1 and str(cache_dir) in full[0].getMessage()  # once per interval


def test_a_full_file_system_with_nothing_to_evict_serves_reads_from_memory(
    small_tmpfs: Path, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    cache_dir = small_tmpfs / "remote-log-segment-cache"
    data = _object(8)
    fetcher = lambda s, e: data[s : e + 1]  # noqa: E731
    with (
        caplog.at_level(logging.INFO, logger="tiered.cache"),
        ChunkCache(cache_dir, chunk_size=CHUNK, size_limit=1 << 30, memory_bytes=CHUNK) as cache,
    ):
        _fill(small_tmpfs)  # someone else fills the file system
        for i in range(8):
            assert bytes(cache.read("obj", len(data), i * CHUNK, (i + 1) * CHUNK - 1, fetcher)) == data[
                i * CHUNK : (i + 1) * CHUNK
            ]
            cache.flush()
        assert _unreferenced(cache_dir) == []
    assert not [r for r in caplog.records if r.exc_info]
    full = [r for r in caplog.records if "is full" in r.getMessage()]
    assert len(full) == 1 and str(cache_dir) in full[0].getMessage() and "served from memory" in full[0].getMessage()


def _orphan(cache_dir: Path, name: str, age_s: float, size: int = 1000) -> Path:
    path = cache_dir / name[:2] / name[2:4] / (name[4:] + ".val")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.write_bytes(b"x" * size)
    except OSError:
        path.unlink()
        raise
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_chunk_files_no_entry_references_are_swept_when_the_cache_opens(tmp_path: Path) -> None:
    cache_dir = tmp_path / "c"
    data = _object(2)
    with ChunkCache(cache_dir, chunk_size=CHUNK, size_limit=1 << 30) as cache:
        cache.read("obj", len(data), 0, CHUNK - 1, lambda s, e: data[s : e + 1])
        cache.flush()
    old = _orphan(cache_dir, "ab" * 16, age_s=3600)  # left by a process killed while writing it
    young = _orphan(cache_dir, "cd" * 16, age_s=0)  # maybe another process's write under way
    assert len(_unreferenced(cache_dir)) == 2
    with ChunkCache(cache_dir, chunk_size=CHUNK, size_limit=1 << 30) as cache:
        cache.flush()  # (the sweep runs on the writer)
        assert not old.exists() and young.exists()
        assert cache._disk.mapped("obj#0") is not None  # what entries reference stays


def test_a_dir_full_of_unreferenced_chunk_files_is_swept_and_opened_at_start(
    small_tmpfs: Path, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    cache_dir = small_tmpfs / "remote-log-segment-cache"
    ChunkCache(cache_dir, chunk_size=CHUNK, size_limit=1 << 30).close()
    try:
        for i in range(64):
            _orphan(cache_dir, f"{i:032x}", age_s=3600, size=CHUNK)
    except OSError:
        pass  # full
    with ChunkCache(cache_dir, chunk_size=CHUNK, size_limit=1 << 30) as cache:
        assert isinstance(cache._disk, DiskChunkStore)
        cache.flush()
        assert _unreferenced(cache_dir) == []
