"""Where a read-only open puts its scratch copies (local.read_only): a memory file system first, up to a bound per
manager, the rest and the remote tier's caches under the system temp dir; index files copied sparse."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import pytest

from local import LogConfig, LogManager, read_only
from local.records import MemoryRecords, SimpleRecord
from tests.logutil import local_tier_props, read_all_values


def _write(config: LogConfig, partitions: int) -> dict[int, list[tuple[int, bytes | None]]]:
    values: dict[int, list[tuple[int, bytes | None]]] = {}
    with LogManager(config, start_scheduler=False) as m:
        for p in range(partitions):
            log = m.get_or_create_log("t", p)
            for first in range(0, 12_000, 500):
                log.append(MemoryRecords.build([SimpleRecord(i, None, b"p%d-%06d" % (p, i) + b"." * 200)
                                                for i in range(first, first + 500)]))
            assert len(log.segments) >= 2
            values[p] = read_all_values(log)
    return values


def test_an_index_file_is_copied_sparse_with_its_bytes_length_and_times(tmp_path: Path) -> None:
    source = tmp_path / "00000000000000000000.index"
    with open(source, "wb") as f:
        f.write(os.urandom(8192))
        f.truncate(10 * 1024 * 1024)  # preallocated as Kafka does: holes after the entries
    os.utime(source, ns=(1_000_000_000, 2_000_000_000))
    target = tmp_path / "copy.index"
    read_only._copy(str(source), str(target))
    assert target.read_bytes() == source.read_bytes()
    st = target.stat()
    assert st.st_size == 10 * 1024 * 1024 and st.st_mtime_ns == 2_000_000_000
    assert st.st_blocks * 512 <= source.stat().st_blocks * 512 + 64 * 1024  # holes stay holes (not 10 MiB of zeros)


def test_a_file_system_without_seek_data_gets_a_whole_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "a.timeindex"
    data = os.urandom(5000)
    source.write_bytes(data)
    real_lseek = os.lseek

    def lseek(fd: int, pos: int, how: int) -> int:
        if how in (os.SEEK_DATA, os.SEEK_HOLE):
            raise OSError(errno.EINVAL, "not supported")
        return real_lseek(fd, pos, how)

    monkeypatch.setattr(read_only.os, "lseek", lseek)
    assert read_only._data_extents(os.open(source, os.O_RDONLY), len(data)) == [(0, len(data))]
    read_only._copy(str(source), str(tmp_path / "b.timeindex"))
    assert (tmp_path / "b.timeindex").read_bytes() == data


def test_the_memory_temp_dir_is_named_by_its_variable_or_dev_shm_unless_tmpdir_is_set(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(read_only.MEMORY_TEMPDIR_ENV, str(tmp_path))
    assert read_only.memory_temp_dir() == tmp_path
    monkeypatch.setenv(read_only.MEMORY_TEMPDIR_ENV, str(tmp_path / "missing"))
    assert read_only.memory_temp_dir() is None
    monkeypatch.setenv(read_only.MEMORY_TEMPDIR_ENV, "")  # none
    assert read_only.memory_temp_dir() is None
    monkeypatch.delenv(read_only.MEMORY_TEMPDIR_ENV, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the user's choice of temp dir: kept to
    assert read_only.memory_temp_dir() is None
    monkeypatch.delenv("TMPDIR")
    shm = Path("/dev/shm")
    expected = shm if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None
    assert read_only.memory_temp_dir() == expected


def test_copies_go_to_the_memory_dir_up_to_its_bound_then_to_the_temp_dir_and_are_all_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    memory = tmp_path / "shm"
    memory.mkdir()
    config = LogConfig.from_properties({"log.dirs": str(tmp_path / "data"), "log.segment.bytes": str(1024 * 1024)})
    values = _write(config, 3)
    one = sum(e.stat().st_blocks * 512 for e in os.scandir(tmp_path / "data" / "t-0")
              if not e.name.endswith(".log"))
    monkeypatch.setenv(read_only.MEMORY_TEMPDIR_ENV, str(memory))
    monkeypatch.setattr(read_only, "MEMORY_SCRATCH_BYTES", one + one // 2)  # room for one partition's copy
    temp = Path(tempfile.gettempdir())
    before = set(temp.iterdir())
    with LogManager(config, start_scheduler=False, read_only=True) as m:
        for p in range(3):
            log = m.get_log("t", p)
            assert log is not None and read_all_values(log) == values[p]
        [root] = list(memory.glob("tiered-read-only-*"))
        in_memory = {d.name for d in root.rglob("t-*")}
        on_disk = {d.name for new in set(temp.iterdir()) - before for d in new.rglob("t-*")}
        assert in_memory == {"t-0"} and on_disk == {"t-1", "t-2"}
        logs = list(root.rglob("*.log"))
        assert logs and all(p.is_symlink() for p in logs) and any(root.rglob("*.index"))  # log links, index copies
    assert list(memory.iterdir()) == [] and set(temp.iterdir()) == before  # both removed at close


def test_a_read_only_managers_remote_tier_keeps_its_caches_under_the_temp_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    memory = tmp_path / "shm"
    memory.mkdir()
    config = LogConfig.from_properties(local_tier_props(tmp_path))
    with LogManager(config, start_scheduler=False) as m:
        m.get_or_create_log("t", 0, {"remote.storage.enable": "true"}).append(
            MemoryRecords.build([SimpleRecord(0, None, b"v")]))
    monkeypatch.setenv(read_only.MEMORY_TEMPDIR_ENV, str(memory))
    temp = Path(tempfile.gettempdir())
    before = set(temp.iterdir())
    with LogManager(config, start_scheduler=False, read_only=True) as m:
        assert m.remote_tier is not None and m.get_log("t", 0) is not None
        assert not any(memory.rglob("remote-log-index-cache"))
        assert any(new.rglob("remote-log-index-cache") for new in set(temp.iterdir()) - before)
    assert list(memory.iterdir()) == [] and set(temp.iterdir()) == before


@pytest.mark.parametrize("short", ["free", "copy", "load"])
def test_a_memory_dir_without_room_sends_the_copy_to_the_temp_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, short: str) -> None:
    """A memory file system may be small and shared (a container's /dev/shm: 64 MiB by default): a partition whose
    copy does not fit in what it has free, or that runs out of space while it is copied or loaded (the loader's own
    writes, as a rebuilt index), is loaded from a copy in the temp dir instead; the reader sees the same records."""
    from local.log import Log

    memory = tmp_path / "shm"
    memory.mkdir()
    config = LogConfig.from_properties({"log.dirs": str(tmp_path / "data"), "log.segment.bytes": str(1024 * 1024)})
    values = _write(config, 1)
    monkeypatch.setenv(read_only.MEMORY_TEMPDIR_ENV, str(memory))
    full = OSError(errno.ENOSPC, "No space left on device")
    if short == "free":
        monkeypatch.setattr(read_only, "_free_bytes", lambda path: 0)
    elif short == "copy":
        real_copy = read_only._copy

        def copy(source: str, target: str) -> None:
            if target.startswith(str(memory)):
                raise full
            real_copy(source, target)

        monkeypatch.setattr(read_only, "_copy", copy)
    else:
        real_open = Log.open.__func__  # type: ignore[attr-defined]

        def open_(cls: type, directory: Path, *args: object, **kwargs: object) -> object:
            if str(directory).startswith(str(memory)):
                raise full
            return real_open(cls, directory, *args, **kwargs)

        monkeypatch.setattr(Log, "open", classmethod(open_))
    temp = Path(tempfile.gettempdir())
    before = set(temp.iterdir())
    with LogManager(config, start_scheduler=False, read_only=True) as m:
        log = m.get_log("t", 0)
        assert log is not None and read_all_values(log) == values[0]
        assert not any(memory.rglob("t-0"))  # nothing left of the try in memory
        assert any(new.rglob("t-0") for new in set(temp.iterdir()) - before)
    assert list(memory.iterdir()) == [] and set(temp.iterdir()) == before
