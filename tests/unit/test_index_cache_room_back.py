"""A bound lowered because the file system was full is lifted once space may have come back (found by helper hZi,
F2): it stayed for the life of the process, down to 0 bytes (one entry: nearly every read downloaded an index again)."""

from __future__ import annotations

import errno
from pathlib import Path

from tests.unit.test_index_cache_full_disk import Store, _md
from tiered.cache import index_cache
from tiered.cache.index_cache import RemoteIndexCache


def test_a_bound_lowered_on_a_full_file_system_is_lifted_after_a_while(tmp_path: Path, monkeypatch) -> None:
    store = Store(tmp_path)
    mds = [store.add(_md(i * 1_000_000)) for i in range(6)]
    now = [1000.0]
    monkeypatch.setattr(index_cache.time, "monotonic", lambda: now[0])
    with RemoteIndexCache(tmp_path / "cache", store.fetch, max_size_bytes=1 << 30) as cache:
        real = cache._download
        failed: list[int] = []

        def full_once(tmp, metadata, index_type):  # the file system full at the first download
            if not failed:
                failed.append(1)
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(tmp, metadata, index_type)

        monkeypatch.setattr(cache, "_download", full_once)
        for md in mds[:3]:
            assert cache.lookup_offset(md, md.start_offset + 100) == 10 * 64
        assert len(cache) == 1  # bound lowered to 0: one entry kept
        now[0] += 3600.0  # an hour later, space back
        for md in mds[3:]:
            assert cache.lookup_offset(md, md.start_offset + 100) == 10 * 64
        assert len(cache) == 4
