"""A remote index cache dir on a full file system (found by helper hZb, F6): remote reads failed for good with a
bare ``OSError: [Errno 28] No space left on device`` (no path), the cache far under its bound never evicting to
make room. Now the least recently used entries make room and the download is tried once more; when even that fails,
the error names the cache dir and the segment, and no partial file is left."""

from __future__ import annotations

import errno
import io
import logging
import uuid
from pathlib import Path
from typing import IO

import pytest

from local.index import OffsetIndex
from tests.unit.test_storage_faults import small_tmpfs  # noqa: F401  (the 4 MiB tmpfs fixture, root as CI)
from tiered import IndexType, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tiered.cache.index_cache import DIR_NAME, RemoteIndexCache

T0 = 1_700_000_000_000
ENTRIES = 32 * 1024  # 256 KiB offset indexes: 16 of them fill the 4 MiB file system


def _md(start: int) -> RemoteLogSegmentMetadata:
    tip = TopicIdPartition(uuid.uuid4(), "t", 0)
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), start, start + 10 * ENTRIES + 9, T0, 0, T0,
                                    10, {0: start})


def _index_bytes(tmp: Path, base: int) -> bytes:
    path = tmp / f"{base}.index"
    idx = OffsetIndex(path, base, 8 * ENTRIES + 8)
    for i in range(1, ENTRIES + 1):
        idx.append(base + i * 10, i * 64)
    idx.close()
    data = path.read_bytes()
    path.unlink()
    return data


class Store:
    def __init__(self, tmp: Path) -> None:
        self.blob: dict[uuid.UUID, bytes] = {}
        self.tmp = tmp

    def add(self, md: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
        self.blob[md.remote_log_segment_id.id] = _index_bytes(self.tmp, md.start_offset)
        return md

    def fetch(self, md: RemoteLogSegmentMetadata, kind: IndexType) -> IO[bytes]:
        assert kind is IndexType.OFFSET
        return io.BytesIO(self.blob[md.remote_log_segment_id.id])


def _fill(mnt: Path) -> None:
    with open(mnt / "ballast", "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError:
            pass


def test_a_full_index_cache_dir_evicts_the_least_recently_used_entries_and_reads_go_on(
    small_tmpfs: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    store = Store(tmp_path)
    mds = [store.add(_md(i * 1_000_000)) for i in range(24)]  # 6 MiB of indexes, the bound 1 GiB
    with caplog.at_level(logging.INFO, logger="tiered.cache"):
        with RemoteIndexCache(small_tmpfs, store.fetch, max_size_bytes=1 << 30) as cache:
            for md in mds:
                assert cache.lookup_offset(md, md.start_offset + 100) == 10 * 64
            assert cache.evictions > 0 and mds[-1].remote_log_segment_id.id in {
                e.metadata.remote_log_segment_id.id for e in cache._entries.values() if e.metadata
            }
            assert not [p for p in (small_tmpfs / DIR_NAME).iterdir() if p.name.endswith(".tmp")]
            size = cache.size_bytes
        files = list((small_tmpfs / DIR_NAME).iterdir())  # (the cleaner is done once closed)
        assert not [p for p in files if p.name.endswith(".deleted")]
        assert size == sum(p.stat().st_size for p in files)
    assert not [r for r in caplog.records if r.exc_info]
    full = [r for r in caplog.records if "is full" in r.getMessage()]
    assert len(full) == 1 and str(small_tmpfs / DIR_NAME) in full[0].getMessage()  # once per interval


def test_a_full_index_cache_dir_with_nothing_to_evict_fails_naming_the_dir_and_the_segment(
    small_tmpfs: Path, tmp_path: Path  # noqa: F811
) -> None:
    store = Store(tmp_path)
    md = store.add(_md(0))
    with RemoteIndexCache(small_tmpfs, store.fetch, max_size_bytes=1 << 30) as cache:
        _fill(small_tmpfs)
        with pytest.raises(OSError) as raised:
            cache.lookup_offset(md, 100)
        assert raised.value.errno == errno.ENOSPC
        assert str(small_tmpfs / DIR_NAME) in str(raised.value) and str(md.remote_log_segment_id) in str(raised.value)
        assert list((small_tmpfs / DIR_NAME).iterdir()) == []  # no partial file left
        (small_tmpfs / "ballast").unlink()  # room again: the read goes on
        assert cache.lookup_offset(md, 100) == 10 * 64
