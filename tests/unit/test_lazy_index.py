"""LazyIndex: Kafka's LazyIndexTest cases (nothing is opened, or created, before get())."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from local.errors import KafkaStorageIOError
from local.index import LazyIndex, OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "00000000000000000000.index"


def test_for_offset_returns_offset_index_on_get(path: Path) -> None:
    with LazyIndex.for_offset(path, 0, 1000) as lazy:
        assert lazy.path == path
        loaded = lazy.get()
        assert isinstance(loaded, OffsetIndex) and loaded.base_offset == 0
        assert loaded.max_entries == 1000 // 8


def test_for_offset_passes_the_large_format(path: Path) -> None:
    with LazyIndex.for_offset(path, 7, 1200, use_large_format=True) as lazy:
        assert lazy.get().is_large_format and lazy.get().max_entries == 100


def test_for_time_returns_time_index_on_get(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.timeindex"
    with LazyIndex.for_time(path, 0, 1500) as lazy:
        assert lazy.path == path
        loaded = lazy.get()
        assert isinstance(loaded, TimeIndex) and loaded.base_offset == 0


def test_get_returns_same_instance_on_subsequent_calls(path: Path) -> None:
    with LazyIndex.for_offset(path, 0, 1000) as lazy:
        assert lazy.get() is lazy.get()


def test_get_from_many_threads_opens_once(path: Path) -> None:
    opened: list[OffsetIndex] = []

    def counting_open(file: Path) -> OffsetIndex:
        opened.append(OffsetIndex(file, 0, 1000))
        return opened[-1]

    lazy = LazyIndex(path, counting_open)
    results: list[OffsetIndex] = []
    threads = [threading.Thread(target=lambda: results.append(lazy.get())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(opened) == 1 and all(result is opened[0] for result in results)
    lazy.close()


def test_get_does_not_load_until_called(path: Path) -> None:
    with LazyIndex.for_offset(path, 0, 1000) as lazy:
        assert lazy.path == path and not lazy.is_loaded
        assert not path.exists(), "no file before get()"
        lazy.get()
        assert path.exists() and lazy.is_loaded


def test_get_wraps_os_error_when_parent_dir_missing(tmp_path: Path) -> None:
    lazy = LazyIndex.for_offset(tmp_path / "missing-dir" / "0.index", 0, 1000)
    with pytest.raises(KafkaStorageIOError, match="error loading index file") as info:
        lazy.get()
    assert isinstance(info.value.__cause__, OSError)
    assert not lazy.is_loaded


def test_rename_after_load_moves_file_and_updates_path(tmp_path: Path, path: Path) -> None:
    renamed = tmp_path / "renamed.index"
    with LazyIndex.for_offset(path, 0, 1000) as lazy:
        lazy.get().append(3, 30)
        lazy.rename_to(renamed)
        assert lazy.path == renamed and renamed.exists() and not path.exists()
        assert lazy.get().lookup(3) == OffsetPosition(3, 30)


def test_rename_before_load_moves_an_existing_file(tmp_path: Path, path: Path) -> None:
    with OffsetIndex(path, 0, 1000) as index:
        index.append(2, 20)
    renamed = tmp_path / "00000000000000000000.index.deleted"
    lazy = LazyIndex.for_offset(path, 0, 1000)
    lazy.rename_to(renamed)
    assert not lazy.is_loaded and lazy.path == renamed and renamed.exists()
    assert lazy.get().lookup(2) == OffsetPosition(2, 20)
    lazy.close()


def test_rename_tolerates_missing_source_before_load(tmp_path: Path, path: Path) -> None:
    lazy = LazyIndex.for_offset(path, 0, 1000)
    renamed = tmp_path / "renamed.index"
    lazy.rename_to(renamed)
    assert lazy.path == renamed


def test_delete_if_exists_returns_false_when_file_absent(path: Path) -> None:
    with LazyIndex.for_offset(path, 0, 1000) as lazy:
        assert lazy.delete_if_exists() is False


def test_delete_if_exists_before_load_removes_the_file(path: Path) -> None:
    path.write_bytes(bytes(8))
    lazy = LazyIndex.for_offset(path, 0, 1000)
    assert lazy.delete_if_exists() is True
    assert not path.exists() and not lazy.is_loaded


def test_delete_if_exists_removes_file_after_load(path: Path) -> None:
    lazy = LazyIndex.for_offset(path, 0, 1000)
    lazy.get()
    assert path.exists()
    assert lazy.delete_if_exists() is True
    assert not path.exists()


def test_close_is_idempotent_before_and_after_load(tmp_path: Path) -> None:
    unloaded = LazyIndex.for_offset(tmp_path / "a.index", 0, 1000)
    unloaded.close()
    unloaded.close_handler()
    assert not (tmp_path / "a.index").exists()
    loaded = LazyIndex.for_offset(tmp_path / "b.index", 0, 1000)
    loaded.get().append(1, 1)
    loaded.close()
    loaded.close()
    assert (tmp_path / "b.index").stat().st_size == 8, "close trims"


def test_close_handler_after_load_does_not_trim(tmp_path: Path) -> None:
    path = tmp_path / "0.timeindex"
    lazy = LazyIndex.for_time(path, 0, 120)
    lazy.get().maybe_append(5, 1)
    lazy.close_handler()
    assert path.stat().st_size == 120
    reopened = TimeIndex(path, 0, writable=False)
    assert reopened.entry(0) == TimestampOffset(5, 1)
    reopened.close()
