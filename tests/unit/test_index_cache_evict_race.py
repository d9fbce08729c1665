"""Evicting to make room (a full file system) racing a load of the same segment (found by helper hZi, F1): the
evicted entry's files were renamed ``*.deleted`` after the cache's lock was let go, so a reader missing the entry in
that window opened the old file as the new entry's index; once it was renamed and removed under it, evicting the new
entry failed its reader with ``FileNotFoundError`` (``<key>.index -> <key>.index.deleted``)."""

from __future__ import annotations

import threading
from pathlib import Path

from tests.unit.test_index_cache_full_disk import Store, _md
from tiered.cache import index_cache
from tiered.cache.index_cache import DIR_NAME, RemoteIndexCache


def test_an_entry_evicted_to_make_room_is_never_opened_again_by_a_concurrent_load(
    tmp_path: Path, monkeypatch
) -> None:
    store = Store(tmp_path)
    old, new = store.add(_md(0)), store.add(_md(1_000_000))
    root = tmp_path / "cache"
    with RemoteIndexCache(root, store.fetch, max_size_bytes=1 << 30) as cache:
        assert cache.lookup_offset(old, 100) == 10 * 64
        assert cache.lookup_offset(new, 1_000_100) == 10 * 64  # most recent: `old` goes first
        real = index_cache.Entry.mark_for_cleanup
        raced: list[threading.Thread] = []
        errors: list[BaseException] = []

        def reader() -> None:
            try:
                assert cache.lookup_offset(old, 100) == 10 * 64
            except BaseException as exc:
                errors.append(exc)

        def marking(entry: index_cache.Entry) -> None:
            if not raced:  # another reader asks for the segment being evicted, now
                t = threading.Thread(target=reader)
                raced.append(t)
                t.start()
                t.join(1.0)
            real(entry)

        monkeypatch.setattr(index_cache.Entry, "mark_for_cleanup", marking)
        cache._make_room(keep=cache._entries[next(reversed(cache._entries))].key)
        raced[0].join(10)
        assert not errors
        monkeypatch.setattr(index_cache.Entry, "mark_for_cleanup", real)
        cache.remove(old.remote_log_segment_id.id)  # raised FileNotFoundError
        assert cache.lookup_offset(old, 100) == 10 * 64
    assert not [p for p in (root / DIR_NAME).iterdir() if p.name.endswith(".deleted")]
