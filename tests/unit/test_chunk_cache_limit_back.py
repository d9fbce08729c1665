"""A segment cache limit lowered on a full file system is set back once space may have come back (found by helper
hZi, F2): lowered to 0 bytes when the file system filled while the cache was empty, it stayed so for the life of the
process, every chunk written then evicted at once."""

from __future__ import annotations

import errno
from pathlib import Path

from tiered.cache import disk_store
from tiered.cache.disk_store import DiskChunkStore


def test_a_limit_lowered_on_a_full_file_system_is_set_back_after_a_while(tmp_path: Path, monkeypatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(disk_store._time, "monotonic", lambda: now[0])
    store = DiskChunkStore(tmp_path / "c", 1 << 30)
    try:
        real = store._set
        fails = [2]

        def full(name, data, obj):  # the first store and its retry find the file system full
            if fails[0]:
                fails[0] -= 1
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(name, data, obj)

        monkeypatch.setattr(store, "_set", full)
        assert not store.store("o-0", b"x" * 65536, "o")
        assert store._cache.size_limit < 65536  # lowered: the file system holds no more
        now[0] += 3600.0  # an hour later, room again
        for i in range(1, 5):
            assert store.store(f"o-{i}", b"x" * 65536, "o")
        assert len(store) == 4 and store._cache.size_limit == 1 << 30
    finally:
        store.close()
