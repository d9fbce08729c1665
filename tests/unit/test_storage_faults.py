"""Storage faults as Kafka handles them (issue 13, item 6).

* A real full file system: a 4 MiB tmpfs mounted by the test (CI runs the tests as root; a failed mount fails
  the test, it is never skipped) is filled with appends in a child process until the disk is full. The append
  raises ``KafkaStorageIOError`` (ENOSPC), the child is not killed by a signal (index files used to be sparse
  mmaps: a full disk was a SIGBUS), the log refuses appends and reads with ``LogDirOfflineError`` afterwards, and
  everything flushed before is read back, unchanged, from a copy of the files on a bigger disk.
* Two data dirs, one partition with a corrupt ``partition.metadata`` / ``leader-epoch-checkpoint``: the manager
  starts, the healthy partitions (of both dirs) serve, the bad one is offline, named with its file, in the
  manager and in ``tiered status``.
* An I/O error injected in an append, a roll or a flush raises ``KafkaStorageIOError`` naming the file and the
  errno; the next append raises ``LogDirOfflineError``; every log of that dir refuses, the other dir serves.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local import filenames
from local.config import LogConfig
from local.dir_failure import LogDirFailureChannel
from local.errors import KafkaStorageIOError, LogDirOfflineError, PartitionOfflineError
from local.file_records import FileRecords
from local.index import OffsetIndex
from local.index.base import ALLOCATION_STEP, allocate
from local.log import Log
from local.manager import LogManager
from local.remote_state import REMOTE_LOG_STATE_FILENAME
from local.scheduler import MockTime
from local.segment import LogSegment
from tests.logutil import read_all_values, records, topic_config

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------------------------
# A real full file system


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted at ``tmp_path/mnt``, unmounted afterwards. Not permitted => the test FAILS."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(
            f"cannot mount a 4 MiB tmpfs at {mnt} (the full-disk test needs root, as CI runs it): "
            f"{done.stderr.strip() or done.returncode}"
        )
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


# The child: appends 1 KiB batches (values derived from the offset) to one log of a data dir on the small
# tmpfs, flushing every 64 batches, until an append fails. Every batch gets index entries (index.interval.bytes
# 0) and segments roll every 256 KiB, so the disk fills in the middle of index writes and rolls as well as log
# writes. It reports what it saw as JSON on stdout.
_FILL = textwrap.dedent(
    """
    import dataclasses, json, sys
    from pathlib import Path
    from local.config import LogConfig
    from local.manager import LogManager
    from tests.logutil import read_all_values, records

    data_dir, healthy_dir = Path(sys.argv[1]), Path(sys.argv[3])
    manager = LogManager(LogConfig.from_properties({"log.dirs": f"{data_dir},{healthy_dir}"}), start_scheduler=False)
    log = manager.get_or_create_log("fill", 0)  # the first dir: the small tmpfs
    other = manager.get_or_create_log("other", 0)  # the second: a healthy disk
    assert manager.data_dir_of("fill", 0) == data_dir and manager.data_dir_of("other", 0) == healthy_dir
    other.append(records(b"o0"))
    # Small segments and an index entry per batch (below the configs' minimums, as Kafka's internal test keys do).
    log.config = dataclasses.replace(log.config, segment_bytes=256 * 1024, segment_index_bytes=64 * 1024,
                                     index_interval_bytes=0)
    out = {"flushed": 0, "appended": 0}
    if sys.argv[2] == "one-page-left":
        # Some flushed data, a new active segment with one batch, then the rest of the disk taken by a ballast
        # file but one page: the next appends fill the .log's page and take the free one, and their index
        # entries go to index pages that a sparse file would still have to find on the full disk.
        for _ in range(8):
            log.append(records(b"%08d" % log.log_end_offset * 128))
        log.flush()
        out["flushed"] = log.recovery_point
        log.roll()
        log.append(records(b"%08d" % log.log_end_offset * 128))  # the new segment's indexes are opened lazily
        with open(data_dir.parent / "ballast", "wb", buffering=0) as ballast:
            for chunk in (65536, 4096):
                try:
                    while True:
                        ballast.write(bytes(chunk))
                except OSError:
                    pass
            ballast.truncate(ballast.tell() - 4096)
    error = None
    for n in range(100_000):
        value = (b"%08d" % log.log_end_offset) * 128
        try:
            log.append(records(value))
        except Exception as exc:
            error = exc
            break
        out["appended"] = log.log_end_offset
        if n % 64 == 63:
            log.flush()
            out["flushed"] = log.recovery_point
    out["error"] = type(error).__name__
    out["message"] = str(error)
    for key in ("errno", "path", "log_dir"):
        out[key] = getattr(error, key, None)
    out["segments"] = log.number_of_segments()
    after = {}
    for name, call in (("append", lambda: log.append(records(b"more"))), ("read", lambda: log.read(0)),
                       ("roll", lambda: log.roll()), ("flush", lambda: log.flush())):
        try:
            call()
            after[name] = "ok"
        except Exception as exc:
            after[name] = [type(exc).__name__, str(exc)]
    out["after"] = after
    out["offline"] = log.is_offline
    out["offline_dirs"] = [str(d) for d in manager.offline_dirs]
    other.append(records(b"o1"))  # the other dir serves on
    out["other"] = [v.decode() for _, v in read_all_values(other)]
    manager.close()
    print(json.dumps(out))
    """
)


@pytest.mark.parametrize("how", ["appends-only", "one-page-left"])
def test_a_full_disk_raises_enospc_takes_the_dir_offline_and_loses_nothing_flushed(
    small_tmpfs: Path, tmp_path: Path, how: str
) -> None:
    """``appends-only``: the disk fills with the log alone, wherever that happens (a log write, an index,
    a roll). ``one-page-left``: one free page when the active segment is fresh, the case where a sparse index
    got a SIGBUS (the log write takes the page, then an index store through the mapping finds none)."""
    data_dir = small_tmpfs / "data"
    data_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.run(
        [sys.executable, "-c", _FILL, str(data_dir), how, str(tmp_path / "healthy")], capture_output=True, text=True,
        cwd=REPO, env=env, timeout=300,
    )
    if child.returncode < 0:
        pytest.fail(f"the filling process was killed by {signal.Signals(-child.returncode).name}: {child.stderr[-2000:]}")
    assert child.returncode == 0, child.stderr[-4000:]
    out = json.loads(child.stdout.strip().splitlines()[-1])

    # The append that met the full disk: KafkaStorageIOError, ENOSPC, naming a file of the log and its data dir.
    assert out["error"] == "KafkaStorageIOError", out
    assert out["errno"] == errno.ENOSPC, out
    assert out["log_dir"] == str(data_dir)
    assert out["path"].startswith(str(data_dir / "fill-0"))
    assert str(data_dir) in out["message"]
    if how == "appends-only":
        assert out["segments"] > 3, "the disk filled before the log rolled a few times: the test proves little"
    else:
        assert out["appended"] > 8, "the last free page took no append: the test proves little"
    assert out["flushed"] > 0
    # From then on the log refuses everything, naming the dir; the dir is offline, the other one serves on.
    assert out["offline"] is True
    for action in ("append", "read", "roll", "flush"):
        kind, message = out["after"][action]
        assert kind == "LogDirOfflineError", (action, out["after"])
        assert str(data_dir) in message
    assert out["offline_dirs"] == [str(data_dir)]
    assert out["other"] == ["o0", "o1"]
    code, doc, text = _status(data_dir)  # tiered status says why the next appends there will fail
    assert code == 1 and doc["data_dirs"][0]["free_bytes"] < 1 << 20
    assert any(problem.startswith("file system full") for problem in doc["data_dirs"][0]["problems"]), doc
    assert "PROBLEM: file system full" in text

    # Everything flushed is still there, unchanged, on a bigger disk: a manager opens the copy (no clean
    # shutdown, no checkpoint: every segment is recovered) and serves every offset up to where the disk filled.
    copy = tmp_path / "big"
    shutil.copytree(data_dir, copy)
    with LogManager(_config(copy), start_scheduler=False) as manager:
        log = manager.get_log("fill", 0)
        assert log is not None
        values = read_all_values(log)
        assert out["flushed"] <= log.log_end_offset <= out["appended"] + 1
        assert [offset for offset, _ in values] == list(range(log.log_end_offset))
        for offset, value in values:
            assert value == (b"%08d" % offset) * 128, f"offset {offset} came back wrong"
        log.append(records(b"after"))  # and the recovered copy takes appends again
        assert read_all_values(log, log.log_end_offset - 1) == [(log.log_end_offset - 1, b"after")]


# The child: on a full tmpfs (a ballast file takes every free page), index appends reach the end of the
# allocated step: ENOSPC, not a SIGBUS; and an index cannot even be created.
_INDEX_ON_FULL_DISK = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    from local.index import OffsetIndex
    from local.index.base import ALLOCATION_STEP

    root = Path(sys.argv[1])
    index = OffsetIndex(root / "00000000000000000000.index", 0, 1024 * 1024)
    out = {"allocated_at_start": os.stat(index.path).st_blocks * 512}
    with open(root / "ballast", "wb", buffering=0) as ballast:
        for chunk in (65536, 4096):
            try:
                while True:
                    ballast.write(bytes(chunk))
            except OSError:
                pass
    error = None
    for n in range(1, 1024 * 1024 // 8):
        try:
            index.append(n, n * 100)
        except OSError as exc:
            error = exc
            break
    out["entries"] = index.entries
    out["errno"] = getattr(error, "errno", None)
    out["filename"] = getattr(error, "filename", None)
    last = index.lookup(index.entries)
    out["last"] = [last.offset, last.position]
    try:
        OffsetIndex(root / "00000000000000000099.index", 99, 1024 * 1024)
        out["created"] = "yes"
    except OSError as exc:
        out["created"] = [exc.errno, (root / "00000000000000000099.index").exists()]
    out["step"] = ALLOCATION_STEP
    print(json.dumps(out))
    """
)


def test_index_appends_on_a_full_disk_are_enospc_not_sigbus(small_tmpfs: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.run(
        [sys.executable, "-c", _INDEX_ON_FULL_DISK, str(small_tmpfs)], capture_output=True, text=True, cwd=REPO,
        env=env, timeout=120,
    )
    if child.returncode < 0:
        pytest.fail(f"the index process was killed by {signal.Signals(-child.returncode).name}: {child.stderr[-2000:]}")
    assert child.returncode == 0, child.stderr[-4000:]
    out = json.loads(child.stdout.strip().splitlines()[-1])
    step = out["step"]
    assert out["allocated_at_start"] >= step  # the first step, allocated on creation
    assert out["errno"] == errno.ENOSPC and out["filename"] == str(small_tmpfs / "00000000000000000000.index")
    assert out["entries"] == step // 8  # every entry of the allocated step, none after
    assert out["last"] == [out["entries"], out["entries"] * 100]  # the index still answers
    assert out["created"] == [errno.ENOSPC, False]  # creation on a full disk: ENOSPC, no file left behind


# ------------------------------------------------------------------------------------------------------------
# Index allocation


def test_index_blocks_are_allocated_ahead_of_the_entries(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 1024 * 1024)
    try:
        st = os.stat(path)
        assert st.st_size == 1024 * 1024
        assert ALLOCATION_STEP <= st.st_blocks * 512 < st.st_size  # the first step, not the whole maximum
        entries = (3 * ALLOCATION_STEP) // 8 + 1  # one entry into the fourth step
        for n in range(1, entries + 1):
            index.append(n, n)
        assert entries * 8 <= os.stat(path).st_blocks * 512 <= entries * 8 + ALLOCATION_STEP  # a step ahead at most
        index.resize(index.size_in_bytes)
        index.resize(1024 * 1024)  # grown back: a hole again, allocated by the next appends
        index.append(entries + 1, entries + 1)
        assert index.lookup(entries + 1).position == entries + 1
        assert os.stat(path).st_blocks * 512 >= (entries + 1) * 8
    finally:
        index.close()


def test_a_sparse_index_left_by_kafka_is_allocated_before_appends_reach_its_holes(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    with open(path, "wb") as f:
        f.truncate(256 * 1024)  # what Kafka's RandomAccessFile.setLength leaves: a hole
    assert os.stat(path).st_blocks * 512 < 256 * 1024
    index = OffsetIndex(path, 0, 256 * 1024)
    try:
        index.truncate()  # what the loader's sanity check and recovery do with zero entries
        index.append(1, 10)
        assert os.stat(path).st_blocks * 512 >= ALLOCATION_STEP
        assert index.lookup(1).position == 10
    finally:
        index.close_handler()


def test_allocation_writes_zeros_and_a_full_disk_is_enospc_at_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Zeros written, never fallocated: an unwritten extent's first store through the mapping waits on the journal
    behind a running fsync (see allocate). The bytes before are kept, the range reads as zeros and is backed."""
    fallocated: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "posix_fallocate", lambda fd, offset, length: fallocated.append((offset, length)))
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"keep")
        allocate(fd, 4, 200_000)
    finally:
        os.close(fd)
    assert fallocated == []
    data = path.read_bytes()
    assert len(data) == 200_004 and data[:4] == b"keep" and data[4:] == bytes(200_000)
    assert os.stat(path).st_blocks * 512 >= 200_004

    def full(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(OSError) as info:
        OffsetIndex(tmp_path / "00000000000000000000.index", 0, 4096)
    assert info.value.errno == errno.ENOSPC and not (tmp_path / "00000000000000000000.index").exists()


# ------------------------------------------------------------------------------------------------------------
# The failure channel


def test_the_channel_reports_a_dir_once_in_order_and_to_every_listener(tmp_path: Path) -> None:
    channel = LogDirFailureChannel()
    heard: list[tuple[Path, str]] = []

    def broken(d: Path, why: str) -> None:
        raise RuntimeError("a listener that fails")

    channel.add_listener(broken)
    channel.add_listener(lambda d, why: heard.append((d, why)))
    assert channel.maybe_add_offline_log_dir(tmp_path / "a", "first", OSError(errno.EIO, "eio")) is True
    assert channel.maybe_add_offline_log_dir(str(tmp_path / "a"), "second") is False
    assert channel.maybe_add_offline_log_dir(tmp_path / "b", "other") is True
    assert heard == [(tmp_path / "a", "first"), (tmp_path / "b", "other")]
    assert channel.has_offline_log_dir(tmp_path / "a") and not channel.has_offline_log_dir(tmp_path / "c")
    assert channel.offline_reason(tmp_path / "a") == "first"
    assert channel.offline_log_dirs == {tmp_path / "a": "first", tmp_path / "b": "other"}
    assert channel.take_next_offline_log_dir(0) == tmp_path / "a"
    assert channel.take_next_offline_log_dir(0) == tmp_path / "b"
    assert channel.take_next_offline_log_dir(0) is None


# ------------------------------------------------------------------------------------------------------------
# Injected I/O errors in append, roll and flush


def _config(*dirs: Path) -> LogConfig:
    return LogConfig.from_properties({"log.dirs": ",".join(map(str, dirs))})


def _fail_next_write(monkeypatch: pytest.MonkeyPatch, log: Log, code: int = errno.EIO) -> None:
    """The next write to the active segment's log file fails with ``code`` (as a full or dying disk does)."""
    def failing(self: FileRecords, data: Any, header: bytes = b"") -> int:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(log.active_segment.log, "append", failing.__get__(log.active_segment.log))


def _placed(manager: LogManager, first: Path, second: Path) -> tuple[Log, Log, Log]:
    """Logs a-0 (dir ``first``), b-0 and c-0 (dir ``second``), with a few batches each."""
    logs = []
    for topic in ("a", "b", "c"):
        log = manager.get_or_create_log(topic, 0)
        for i in range(3):
            log.append(records(b"%s%d" % (topic.encode(), i)))
        logs.append(log)
    a, b, c = logs
    assert manager.data_dir_of("a", 0) == first and manager.data_dir_of("b", 0) == second
    assert manager.data_dir_of("c", 0) == first  # placement: fewest partitions, first dir on a tie
    return a, b, c


@pytest.mark.parametrize("path", ["plain", "general"])
def test_a_failed_append_takes_the_dir_offline_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    first, second = tmp_path / "d1", tmp_path / "d2"
    manager = LogManager(_config(first, second), start_scheduler=False)
    try:
        a, b, _ = _placed(manager, first, second)
        d = manager.get_or_create_log("d", 0)  # a second log in b's dir
        assert manager.data_dir_of("d", 0) == second
        d.append(records(b"d0"))
        segment_file = b.active_segment.log.path
        _fail_next_write(monkeypatch, b)
        # "plain": one client batch (the fast path); "general": a producer-id batch (the general path).
        batch = records(b"lost") if path == "plain" else records(b"lost", producer_id=7, producer_epoch=0, base_sequence=0)
        with pytest.raises(KafkaStorageIOError) as info:
            b.append(batch)
        error = info.value
        assert not isinstance(error, LogDirOfflineError)
        assert error.errno == errno.EIO
        assert error.path == str(segment_file) and error.log_dir == str(second)  # type: ignore[attr-defined]
        assert str(segment_file) in str(error) and str(second) in str(error)
        assert isinstance(error.__cause__, OSError)

        # The dir is offline at once: no flush, no cleanup pass needed.
        assert list(manager.offline_dirs) == [second] and manager.live_dirs == [first]
        for log, topic in ((b, "b"), (d, "d")):
            assert log.is_offline
            with pytest.raises(LogDirOfflineError, match=str(second)):
                log.append(records(b"refused"))
            with pytest.raises(LogDirOfflineError, match=str(second)):
                log.read(0)
            with pytest.raises(LogDirOfflineError, match=str(second)):
                log.roll()
            with pytest.raises(LogDirOfflineError, match=str(second)):
                log.flush()
            assert manager.get_log(topic, 0) is None
            with pytest.raises(LogDirOfflineError, match=str(second)):
                manager.get_or_create_log(topic, 0)  # never a fresh empty log in the other dir
            with pytest.raises(LogDirOfflineError):
                manager.check_dir_online(topic, 0)
            assert manager.offline_partitions[(topic, 0)].dir_offline
        # The other dir serves, reads and writes, and takes new partitions.
        a.append(records(b"a3"))
        assert [v for _, v in read_all_values(a)] == [b"a0", b"a1", b"a2", b"a3"]
        manager.check_dir_online("a", 0)
        assert manager.data_dir_of("e", 0) is None
        manager.get_or_create_log("e", 0).append(records(b"e0"))
        assert manager.data_dir_of("e", 0) == first
    finally:
        monkeypatch.undo()
        manager.close()
    # The failed dir was not marked clean, the good one was; a restart serves both, the failed batch absent.
    assert not (second / filenames.CLEAN_SHUTDOWN_FILENAME).exists()
    assert (first / filenames.CLEAN_SHUTDOWN_FILENAME).exists()
    with LogManager(_config(first, second), start_scheduler=False) as again:
        b = again.get_log("b", 0)
        assert b is not None and [v for _, v in read_all_values(b)] == [b"b0", b"b1", b"b2"]


def test_a_failed_roll_raises_storage_io_error_and_the_log_refuses_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    time = MockTime()
    log = Log.open(tmp_path / "t-0", topic_config(tmp_path), time=time, scheduler=time.scheduler)
    log.append(records(b"v0"))

    def no_space(*args: Any, **kwargs: Any) -> LogSegment:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "t-0" / "00000000000000000001.index"))

    monkeypatch.setattr(LogSegment, "open", no_space)
    with pytest.raises(KafkaStorageIOError) as info:
        log.roll()
    assert info.value.errno == errno.ENOSPC and info.value.log_dir == str(tmp_path)  # type: ignore[attr-defined]
    assert "00000000000000000001.index" in str(info.value)
    monkeypatch.undo()
    with pytest.raises(LogDirOfflineError, match=str(tmp_path)):
        log.append(records(b"v1"))
    assert log.log_end_offset == 1


def test_a_failed_flush_raises_storage_io_error_and_the_log_refuses_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    time = MockTime()
    log = Log.open(tmp_path / "t-0", topic_config(tmp_path), time=time, scheduler=time.scheduler)
    log.append(records(b"v0"))
    segment_file = log.active_segment.log.path

    def fsync_fails(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", fsync_fails)
    with pytest.raises(KafkaStorageIOError) as info:
        log.flush()
    monkeypatch.undo()
    assert info.value.errno == errno.EIO and info.value.path == str(segment_file)  # type: ignore[attr-defined]
    assert log.recovery_point == 0  # nothing was made durable
    with pytest.raises(LogDirOfflineError, match=str(tmp_path)):
        log.append(records(b"v1"))


def test_a_failure_in_one_log_does_not_wait_for_a_busy_log_of_the_same_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failing thread holds its log's lock; another log of the dir is busy in another thread: no deadlock,
    the busy log goes offline, and its handles are released by the next call once its lock is free."""
    data = tmp_path / "data"
    manager = LogManager(_config(data), start_scheduler=False)
    try:
        failing = manager.get_or_create_log("f", 0)
        busy = manager.get_or_create_log("g", 0)
        busy.append(records(b"g0"))
        holding, release = threading.Event(), threading.Event()

        def hold() -> None:
            with busy._lock:
                holding.set()
                release.wait(30)

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert holding.wait(30)
            _fail_next_write(monkeypatch, failing)
            with pytest.raises(KafkaStorageIOError):
                failing.append(records(b"x"))  # returns although busy's lock is held
            assert busy.is_offline
            assert not busy.active_segment.log._closed  # its handles wait for its lock
        finally:
            release.set()
            holder.join(30)
        with pytest.raises(LogDirOfflineError, match=str(data)):
            busy.append(records(b"g1"))
        assert busy.active_segment.log._closed  # released by that call
        with pytest.raises(LogDirOfflineError):
            manager.get_or_create_log("h", 0)  # no data dir is left
    finally:
        monkeypatch.undo()
        manager.close()


def test_a_log_created_while_its_dir_fails_is_offline_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    manager = LogManager(_config(data), start_scheduler=False)
    real_open = Log.open
    created: list[Log] = []

    def open_while_the_dir_fails(*args: Any, **kwargs: Any) -> Log:
        log = real_open(*args, **kwargs)
        created.append(log)
        manager.log_dir_failure_channel.maybe_add_offline_log_dir(data, "another log failed meanwhile")
        return log

    try:
        monkeypatch.setattr(Log, "open", open_while_the_dir_fails)
        with pytest.raises(LogDirOfflineError, match="another log failed meanwhile"):
            manager.get_or_create_log("n", 0)
        assert manager.get_log("n", 0) is None and manager.offline_partitions[("n", 0)].dir_offline
        (log,) = created
        with pytest.raises(LogDirOfflineError):
            log.append(records(b"x"))
    finally:
        monkeypatch.undo()
        manager.close()


def test_the_partitions_of_a_dir_offline_at_startup_are_not_recreated_elsewhere(tmp_path: Path) -> None:
    first, second = tmp_path / "d1", tmp_path / "d2"
    time = MockTime()
    log = Log.open(second / "b-0", topic_config(tmp_path), time=time, scheduler=time.scheduler)
    log.append(records(b"b0"))
    log.close()
    (second / ".lock").mkdir()  # the dir cannot be locked: an I/O error (EISDIR) when the manager opens it
    with LogManager(_config(first, second), start_scheduler=False) as manager:
        assert list(manager.offline_dirs) == [second]
        with pytest.raises(LogDirOfflineError, match=str(second)):
            manager.get_or_create_log("b", 0)  # its data is in the offline dir: not an empty b-0 in d1
        assert not (first / "b-0").exists()
        manager.get_or_create_log("c", 0).append(records(b"c0"))
        assert manager.data_dir_of("c", 0) == first
    code, doc, _ = _status(first, second)
    assert code == 1
    assert doc["data_dirs"][0]["problems"] == []
    assert any(".lock is not a file" in problem for problem in doc["data_dirs"][1]["problems"])


def test_a_read_only_first_data_dir_at_a_start_leaves_the_remote_tiers_caches_in_the_next_one(
    small_tmpfs: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The first data dir's file system remounted read-only (ext4's errors=remount-ro after an I/O error): the manager
    takes it offline and serves the others, but the remote tier put its caches there and the start failed (EROFS on
    remote-log-segment-cache, then remote-log-index-cache). They go to the first writable data dir now, said once."""
    first, second = small_tmpfs / "d1", tmp_path / "d2"
    props = {"log.dirs": f"{first},{second}", "remote.log.storage.system.enable": "true",
             "remote.log.storage.manager.class.name": "local", "rsm.config.dir": str(tmp_path / "remote")}
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
        manager.get_or_create_log("a", 0).append(records(b"a0"))
        manager.get_or_create_log("b", 0).append(records(b"b0"))  # (the dir with the fewest partitions: d2)
        assert {manager.data_dir_of("a", 0), manager.data_dir_of("b", 0)} == {first, second}
        in_second = "a" if manager.data_dir_of("a", 0) == second else "b"
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    with caplog.at_level("ERROR"), LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
        assert list(manager.offline_dirs) == [first]
        log = manager.get_log(in_second, 0)
        assert log is not None and [v for _, v in read_all_values(log)] == [f"{in_second}0".encode()]
        assert (second / "remote-log-index-cache").is_dir() and (second / "remote-log-segment-cache").is_dir()
    assert f"the first data dir {first} cannot be written" in caplog.text


# ------------------------------------------------------------------------------------------------------------
# A corrupt per-partition file takes only that partition offline


def _status(*dirs: Path) -> tuple[int, dict[str, Any], str]:
    from tiered.cli import parse_args
    from tiered.commands import status as command

    texts = []
    code = 0
    for as_json in (True, False):
        _, args = parse_args(["status", "--log-dirs", ",".join(map(str, dirs))] + (["--json"] if as_json else []))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = command.run(args)
        texts.append(out.getvalue())
    return code, json.loads(texts[0]), texts[1]


@pytest.mark.parametrize(
    ("bad_file", "content"),
    [
        (filenames.PARTITION_METADATA_FILENAME, b"\xff\xfe\x00not utf-8"),
        (filenames.PARTITION_METADATA_FILENAME, b"version: 7\ntopic_id: nonsense"),
        (filenames.LEADER_EPOCH_CHECKPOINT_FILENAME, b"0\n2\n0 0\n"),
        (filenames.LEADER_EPOCH_CHECKPOINT_FILENAME, b"\x80\x81\x82"),
        (REMOTE_LOG_STATE_FILENAME, b"version: 9\n"),
    ],
    ids=["metadata-not-utf8", "metadata-malformed", "epochs-short", "epochs-not-utf8", "remote-state-malformed"],
)
def test_a_corrupt_partition_file_takes_only_that_partition_offline(
    tmp_path: Path, bad_file: str, content: bytes
) -> None:
    first, second = tmp_path / "d1", tmp_path / "d2"
    time = MockTime()
    for directory, name in ((first, "good-0"), (second, "bad-0"), (second, "fine-0")):
        log = Log.open(directory / name, topic_config(tmp_path), time=time, scheduler=time.scheduler)
        log.append(records(name.encode()))
        log.close()
    with LogManager(_config(first, second), start_scheduler=False) as manager:  # checkpoints for all three
        bad = manager.get_log("bad", 0)
        assert bad is not None
        bad.append(records(b"kept"))
        bad.delete_records(1)  # a log start offset that only the checkpoint remembers
    bad_dir = second / "bad-0"
    bad_path = bad_dir / bad_file
    sound = bad_path.read_bytes() if bad_path.exists() else None
    bad_path.write_bytes(content)

    manager = LogManager(_config(first, second), start_scheduler=False)  # starts: one bad file stops nothing
    try:
        assert manager.offline_dirs == {} and manager.live_dirs == [first, second]
        for topic in ("good", "fine"):  # both dirs serve, reads and writes
            log = manager.get_log(topic, 0)
            assert log is not None
            log.append(records(b"more"))
            assert [v for _, v in read_all_values(log)] == [f"{topic}-0".encode(), b"more"]
        assert manager.get_log("bad", 0) is None
        failed = manager.offline_partitions[("bad", 0)]
        assert not failed.dir_offline and failed.data_dir == second
        # Named with its file, also when the parser's error names none (a bare UnicodeDecodeError).
        assert failed.path == str(bad_path)
        assert str(bad_path) in failed.reason
        with pytest.raises(PartitionOfflineError, match=str(bad_path)) as info:
            manager.get_or_create_log("bad", 0)  # not recreated empty
        assert info.value.path == failed.path  # type: ignore[attr-defined]
        with pytest.raises(PartitionOfflineError):
            manager.check_dir_online("bad", 0)
        assert bad_path.read_bytes() == content  # left as found, for an operator to look at
    finally:
        manager.close()

    code, doc, text = _status(first, second)
    assert code == 1
    d1, d2 = doc["data_dirs"]
    assert d1["problems"] == []
    parts = {p["partition"]: p for p in d2["partitions"]}
    assert "offline" not in parts["fine-0"]
    assert str(bad_dir) in parts["bad-0"]["offline"] and bad_file in parts["bad-0"]["offline"]
    assert any("bad-0" in problem and "offline" in problem for problem in d2["problems"])
    assert d2["last_load"]["offline_partitions"]["bad-0"]["path"] == failed.path
    assert "OFFLINE" in text and bad_file in text

    # The read-only manager (consume, dump...) names the bad file for that partition and serves the others.
    with LogManager(_config(first, second), read_only=True) as reader:
        with pytest.raises(PartitionOfflineError, match=str(bad_path)):
            reader.get_log("bad", 0)
        assert sorted(log.name for log in reader.all_logs()) == ["fine-0", "good-0"]
        with pytest.raises(PartitionOfflineError, match=str(bad_path)):
            reader.get_log("bad", 0)  # still, once the others are open

    # Its checkpointed offsets were written back while it was offline: repaired, it comes back as it was.
    if sound is None:
        bad_path.unlink()
    else:
        bad_path.write_bytes(sound)
    with LogManager(_config(first, second), start_scheduler=False) as manager:
        assert manager.offline_partitions == {}
        bad = manager.get_log("bad", 0)
        assert bad is not None and bad.log_start_offset == 1
        assert read_all_values(bad) == [(1, b"kept")]


def test_status_notes_a_corrupt_producer_snapshot_without_failing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager(_config(data), start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0)
        log.append(records(b"v"))
    snapshots = sorted((data / "t-0").glob("*.snapshot"))
    assert snapshots
    snapshots[-1].write_bytes(b"\x00\x01garbage")
    code, doc, text = _status(data)
    assert code == 0
    (p,) = doc["data_dirs"][0]["partitions"]
    assert "offline" not in p and any(snapshots[-1].name in note for note in p["notes"])
    assert "corrupt producer snapshot" in text
    with LogManager(_config(data), start_scheduler=False) as manager:  # the loader rebuilds it from the log
        log = manager.get_log("t", 0)
        assert log is not None and read_all_values(log) == [(0, b"v")]
