"""A remote segment cache dir on a full file system: the cache is disposable, so it runs in memory only (an ERROR
naming the dir) instead of failing the LogManager's start (`tiered run` exited 1 with "OperationalError: database or
disk is full" when the first data dir, the cache's default home, was full)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.unit.test_storage_faults import small_tmpfs  # noqa: F401  (the 4 MiB tmpfs fixture, root as CI)
from tiered.cache.chunk_cache import ChunkCache
from tiered.cache.disk_store import NoDiskStore


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
