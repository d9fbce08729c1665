"""Startup through LogManager: the clean-shutdown marker, corrupt checkpoints, and data dirs that cannot be
written (one goes offline, the others keep serving), plus ``tiered status`` reading what startup left."""

from __future__ import annotations

import errno
import json
import logging
import os
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from local import filenames
from local.config import LogConfig
from local.manager import LogManager
from tests.logutil import read_all_values, records

T0 = 1_700_000_000_000


def manager_config(*dirs: Path, **props: str) -> LogConfig:
    return LogConfig.from_properties({"log.dirs": ",".join(str(d) for d in dirs), **props})


def fill(manager: LogManager, topic: str, partition: int, n: int, *, roll_every: int = 4) -> list[tuple[int, bytes | None]]:
    log = manager.get_or_create_log(topic, partition)
    for i in range(n):
        if i and i % roll_every == 0:
            log.roll()
        log.append(records(b"%s-%d" % (topic.encode(), i)))
    return read_all_values(log)


def segment_files(partition_dir: Path, suffix: str) -> list[Path]:
    return sorted(partition_dir.glob(f"*{suffix}"))


# ------------------------------------------------------------------------------------------------------------
# Clean-shutdown marker and checkpoints


def test_clean_shutdown_file_skips_recovery_even_with_recovery_point_zero(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager(manager_config(data), start_scheduler=False) as manager:
        expected = fill(manager, "t", 0, 12)
    assert (data / filenames.CLEAN_SHUTDOWN_FILENAME).exists()
    (data / filenames.RECOVERY_POINT_CHECKPOINT_FILENAME).write_text("0\n1\nt 0 0\n")
    with LogManager(manager_config(data), start_scheduler=False) as manager:
        assert not (data / filenames.CLEAN_SHUTDOWN_FILENAME).exists()  # consumed at startup
        stats = manager.load_stats[str(data)]
        assert stats["clean_shutdown"] is True and stats["segments_recovered"] == 0
        log = manager.get_log("t", 0)
        assert log is not None and read_all_values(log) == expected


def test_missing_marker_means_recovery_from_the_checkpointed_recovery_point(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager(manager_config(data), start_scheduler=False) as manager:
        expected = fill(manager, "t", 0, 12)
    (data / filenames.CLEAN_SHUTDOWN_FILENAME).unlink()
    (data / filenames.RECOVERY_POINT_CHECKPOINT_FILENAME).write_text("0\n1\nt 0 5\n")
    with LogManager(manager_config(data), start_scheduler=False) as manager:
        stats = manager.load_stats[str(data)]
        assert stats["clean_shutdown"] is False
        assert stats["segments_recovered"] == 2  # segments 4 (holding offset 5) and 8
        log = manager.get_log("t", 0)
        assert log is not None and read_all_values(log) == expected


@pytest.mark.parametrize(
    "content", [b"garbage\x00\xff", b"0\n3\nt 0 5\n", b"7\n1\nt 0 5\n", b"0\n1\nt 0 five\n"],
    ids=["binary", "wrong-count", "wrong-version", "bad-line"],
)
def test_corrupt_recovery_checkpoint_is_treated_as_absent(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    with LogManager(manager_config(data), start_scheduler=False) as manager:
        expected = fill(manager, "t", 0, 12)
    (data / filenames.CLEAN_SHUTDOWN_FILENAME).unlink()
    (data / filenames.RECOVERY_POINT_CHECKPOINT_FILENAME).write_bytes(content)
    partition_dir = data / "t-0"
    active = segment_files(partition_dir, ".log")[-1]
    with active.open("ab") as f:
        f.write(b"\x00torn")
    with caplog.at_level(logging.WARNING), LogManager(manager_config(data), start_scheduler=False) as manager:
        stats = manager.load_stats[str(data)]
        # absent checkpoint = recovery point 0: every segment is recovered, the torn tail cut
        assert stats["segments_recovered"] == 3
        assert stats["bytes_truncated"] == 5
        log = manager.get_log("t", 0)
        assert log is not None and read_all_values(log) == expected
    assert "corrupt checkpoint" in caplog.text and filenames.RECOVERY_POINT_CHECKPOINT_FILENAME in caplog.text


def test_corrupt_log_start_checkpoint_falls_back_to_the_first_segment(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager(manager_config(data), start_scheduler=False) as manager:
        expected = fill(manager, "t", 0, 12)
    (data / filenames.LOG_START_OFFSET_CHECKPOINT_FILENAME).write_bytes(b"\xff\xfe")
    with LogManager(manager_config(data), start_scheduler=False) as manager:
        log = manager.get_log("t", 0)
        assert log is not None and log.log_start_offset == 0 and read_all_values(log) == expected


# ------------------------------------------------------------------------------------------------------------
# Data dirs that cannot be written


def test_data_dir_that_is_a_file_goes_offline_and_the_other_dir_serves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    bad.write_bytes(b"not a directory")
    with caplog.at_level(logging.ERROR), LogManager(manager_config(good, bad), start_scheduler=False) as manager:
        assert list(manager.offline_dirs) == [bad]
        assert manager.live_dirs == [good]
        assert "taking data dir" in caplog.text and str(bad) in caplog.text
        expected = fill(manager, "t", 0, 6)
        assert manager.data_dir_of("t", 0) == good
        log = manager.get_log("t", 0)
        assert log is not None and read_all_values(log) == expected


def _fail_writes_under(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[str]:
    """Simulate a full disk under ``root``: creating, writing, growing or renaming files there fails ENOSPC."""
    prefix = str(root.resolve()) + os.sep
    hits: list[str] = []

    def under(path: object) -> bool:
        try:
            return os.path.abspath(os.fsdecode(path)).startswith(prefix)  # type: ignore[arg-type]
        except TypeError:
            return False

    def fd_under(fd: int) -> bool:
        try:
            return os.readlink(f"/proc/self/fd/{fd}").startswith(prefix)
        except OSError:
            return False

    def enospc(what: object) -> OSError:
        hits.append(str(what))
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(what))

    real_open, real_write, real_pwrite, real_pwritev = os.open, os.write, os.pwrite, os.pwritev
    real_ftruncate, real_replace, real_rename = os.ftruncate, os.replace, os.rename
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def fake_open(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if flags & write_flags and under(path):
            raise enospc(path)
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    def fake_write(fd: int, data: bytes) -> int:
        if fd_under(fd):
            raise enospc(fd)
        return real_write(fd, data)

    def fake_pwrite(fd: int, data: bytes, offset: int) -> int:
        if fd_under(fd):
            raise enospc(fd)
        return real_pwrite(fd, data, offset)

    def fake_pwritev(fd: int, buffers: Sequence[bytes], offset: int) -> int:
        if fd_under(fd):
            raise enospc(fd)
        return real_pwritev(fd, buffers, offset)

    def fake_ftruncate(fd: int, length: int) -> None:
        if fd_under(fd):
            raise enospc(fd)
        real_ftruncate(fd, length)

    def fake_replace(src: object, dst: object, **kwargs: object) -> None:
        if under(dst):
            raise enospc(dst)
        real_replace(src, dst, **kwargs)  # type: ignore[arg-type]

    def fake_rename(src: object, dst: object, **kwargs: object) -> None:
        if under(dst):
            raise enospc(dst)
        real_rename(src, dst, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(os, "write", fake_write)
    monkeypatch.setattr(os, "pwrite", fake_pwrite)
    monkeypatch.setattr(os, "pwritev", fake_pwritev)
    monkeypatch.setattr(os, "ftruncate", fake_ftruncate)
    monkeypatch.setattr(os, "replace", fake_replace)
    monkeypatch.setattr(os, "rename", fake_rename)
    import builtins
    import io

    real_builtin_open = builtins.open

    def fake_builtin_open(file: object, mode: str = "r", *args: object, **kwargs: object) -> object:
        if any(c in mode for c in "wax+") and not isinstance(file, int) and under(file):
            raise enospc(file)
        return real_builtin_open(file, mode, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(builtins, "open", fake_builtin_open)
    monkeypatch.setattr(io, "open", fake_builtin_open)
    return hits


def test_disk_full_while_loading_takes_only_that_dir_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = tmp_path / "d1", tmp_path / "d2"
    with LogManager(manager_config(first), start_scheduler=False) as manager:
        expected = fill(manager, "a", 0, 8)
    with LogManager(manager_config(second), start_scheduler=False) as manager:
        fill(manager, "b", 0, 8)
    hits = _fail_writes_under(monkeypatch, second)
    with caplog.at_level(logging.ERROR), LogManager(manager_config(first, second), start_scheduler=False) as manager:
        assert hits, "the simulated full disk was never hit"
        assert list(manager.offline_dirs) == [second]
        assert "No space left on device" in manager.offline_dirs[second]
        assert manager.get_log("b", 0) is None
        log = manager.get_log("a", 0)
        assert log is not None and read_all_values(log) == expected
        log.append(records(b"more"))
        assert read_all_values(log)[-1] == (8, b"more")
    assert "taking data dir" in caplog.text and str(second) in caplog.text


def test_disk_full_at_runtime_takes_only_that_dir_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from local.errors import LogDirOfflineError

    first, second = tmp_path / "d1", tmp_path / "d2"
    manager = LogManager(manager_config(first, second), start_scheduler=False)
    try:
        fill(manager, "a", 0, 4)
        fill(manager, "b", 0, 4)
        dir_of_b = manager.data_dir_of("b", 0)
        dir_of_a = manager.data_dir_of("a", 0)
        assert {dir_of_a, dir_of_b} == {first, second}
        assert dir_of_b is not None
        _fail_writes_under(monkeypatch, dir_of_b)
        manager.checkpoint_recovery_offsets()
        assert list(manager.offline_dirs) == [dir_of_b]
        with pytest.raises(LogDirOfflineError):
            manager.check_dir_online("b", 0)
        manager.check_dir_online("a", 0)
        log = manager.get_log("a", 0)
        assert log is not None
        log.append(records(b"still-served"))
        assert read_all_values(log)[-1] == (4, b"still-served")
    finally:
        monkeypatch.undo()
        manager.close()


# ------------------------------------------------------------------------------------------------------------
# tiered status


def status(*dirs: Path, as_json: bool = True) -> tuple[int, dict[str, Any]]:
    from tiered.cli import parse_args
    from tiered.commands import status as command

    argv = ["status", "--log-dirs", ",".join(map(str, dirs))] + (["--json"] if as_json else [])
    _, args = parse_args(argv)
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = command.run(args)
    return code, json.loads(out.getvalue()) if as_json else {"text": out.getvalue()}


def test_status_reads_files_without_changing_recovery(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager(manager_config(data), start_scheduler=False) as manager:
        fill(manager, "t", 0, 10)
    before = {p: p.read_bytes() for p in data.rglob("*") if p.is_file()}
    code, doc = status(data)
    assert code == 0
    (d,) = doc["data_dirs"]
    assert d["clean_shutdown"] is True and d["problems"] == []
    (p,) = d["partitions"]
    assert p["partition"] == "t-0" and p["segments"] == 3
    assert (p["log_start_offset"], p["log_end_offset"], p["recovery_point"]) == (0, 10, 10)
    assert p["size_bytes"] == sum(f.stat().st_size for f in (data / "t-0").glob("*.log"))
    assert {p: p.read_bytes() for p in data.rglob("*") if p.is_file()} == before  # nothing written
    code, text = status(data, as_json=False)
    assert code == 0 and "t-0" in str(text["text"]) and "last shutdown: clean" in str(text["text"])


def test_status_reports_unclean_shutdown_torn_tail_and_corrupt_checkpoint(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager(manager_config(data), start_scheduler=False) as manager:
        fill(manager, "t", 0, 10)
    (data / filenames.CLEAN_SHUTDOWN_FILENAME).unlink()
    (data / filenames.RECOVERY_POINT_CHECKPOINT_FILENAME).write_bytes(b"junk")
    active = segment_files(data / "t-0", ".log")[-1]
    with active.open("ab") as f:
        f.write(b"\x00" * 30)
    (data / "t-0" / "00000000000000000004.log.swap").write_bytes(b"")
    code, doc = status(data)
    assert code == 1
    (d,) = doc["data_dirs"]
    assert d["clean_shutdown"] is False
    assert any("corrupt recovery-point-offset-checkpoint" in problem for problem in d["problems"])
    (p,) = d["partitions"]
    assert p["log_end_offset"] == 10 and p["recovery_point"] is None
    assert p["transient_files"] == ["00000000000000000004.log.swap"]
    assert "last shutdown: unclean (segments after the recovery point" in str(status(data, as_json=False)[1]["text"])


def _index_model(raw: bytes, entry_size: int, log_size: int) -> int:
    """The position of the last entry of the leading run of sane entries, reading the whole file at once."""
    fmt = ">ii" if entry_size == 8 else ">iq"
    position, previous = 0, None
    for at in range(0, len(raw) - len(raw) % entry_size, entry_size):
        rel, pos = struct.unpack_from(fmt, raw, at)
        if rel < 0 or pos < 0 or pos >= log_size or (previous is not None and (rel <= previous[0] or pos <= previous[1])):
            break
        position, previous = pos, (rel, pos)
    return position


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(entries=9000, entry_size=12, zeros=3, damage=(0.8, "backwards"), torn=0)  # in the third piece
@example(entries=4096, entry_size=8, zeros=0, damage=None, torn=0)  # exactly one piece, then the end of the file
@given(entries=st.integers(0, 9000), entry_size=st.sampled_from([8, 12]), zeros=st.integers(0, 20000),
       damage=st.one_of(st.none(), st.tuples(st.floats(0, 1), st.sampled_from(["zero", "backwards", "past_log"]))),
       torn=st.integers(0, 7))
def test_status_reads_an_index_piece_by_piece_to_its_first_bad_entry(tmp_path: Path, entries: int, entry_size: int,
                                                                      zeros: int, damage: Any, torn: int) -> None:
    """A preallocated index (zeros past its entries, as an unclean stop leaves it) spanning several of the pieces
    status reads, damaged anywhere or not: the same position as reading it whole."""
    from local.errors import CorruptIndexError
    from local.index import detect_entry_size
    from tiered.commands.status import _last_index_position

    fmt = ">ii" if entry_size == 8 else ">iq"
    rows = [(7 + 3 * i, 100 + 41 * i) for i in range(entries)]
    if damage is not None and rows:
        at, kind = int(damage[0] * (len(rows) - 1)), damage[1]
        rel = rows[at][0]
        rows[at] = {"zero": (0, 0), "backwards": (rel, rows[at - 1][1] if at else -1), "past_log": (rel, 1 << 30)}[kind]
    raw = b"".join(struct.pack(fmt, *row) for row in rows) + bytes(zeros * entry_size) + bytes(torn % entry_size)
    path = tmp_path / f"{entries}-{entry_size}-{zeros}.index"
    path.write_bytes(raw)
    log_size = 100 + 41 * entries + 1
    try:  # a torn tail can make a 12-byte index's length read as 8-byte entries; a damaged one, read as neither
        expected = _index_model(raw, detect_entry_size(path, 8), log_size)
    except CorruptIndexError:
        expected = 0
    assert _last_index_position(path, log_size) == expected


def _bytes_read() -> int:
    """The bytes this process has read through read(2) and its kin (``rchar``), any way the code reads."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_status_reads_a_preallocated_index_only_up_to_its_entries(tmp_path: Path) -> None:
    from tiered.commands.status import _last_index_position

    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(b"".join(struct.pack(">ii", 5 * i + 1, 4096 * (i + 1)) for i in range(30)))
    _last_index_position(path, 10**9)  # its imports, before counting
    os.truncate(path, 10 * 1024 * 1024)  # preallocated, as the active segment's is until a clean close
    before = _bytes_read()
    assert _last_index_position(path, 10**9) == 4096 * 30
    assert _bytes_read() - before < 256 * 1024  # a piece or two, not the 10 MiB


def test_status_finds_the_log_end_after_an_unclean_stop(tmp_path: Path) -> None:
    """The active segment's index keeps its preallocated size when the process dies: status still finds the end."""
    data = tmp_path / "data"
    script = f"""
import os
from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
m = LogManager(LogConfig.from_properties({{"log.dirs": {str(data)!r}, "log.index.interval.bytes": "64"}}),
               start_scheduler=False)
log = m.get_or_create_log("t", 0)
for first in range(0, 3000, 100):
    log.append(MemoryRecords.build([SimpleRecord(1_700_000_000_000 + i, None, b"v%d" % i)
                                    for i in range(first, first + 100)]))
os._exit(0)
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    (index,) = (data / "t-0").glob("*.index")
    assert index.stat().st_size == 10 * 1024 * 1024  # preallocated: no clean close trimmed it
    code, doc = status(data)
    assert code == 0  # an unclean stop is no problem: the next start recovers
    (p,) = doc["data_dirs"][0]["partitions"]
    assert doc["data_dirs"][0]["clean_shutdown"] is False
    assert p["log_end_offset"] == 3000


@pytest.mark.parametrize("threads", [1, 2])
def test_a_start_after_an_unclean_stop_rebuilds_unflushed_indexes_without_reading_them(
    tmp_path: Path, threads: int
) -> None:
    """Each active segment keeps its preallocated 10 MiB offset and time indexes until a clean close; a start after
    kill -9 read both whole for every partition before recovery rebuilt them anyway (28 s before the Kafka port
    opened with 800 partitions). Indexes past the recovery point, even a damaged one, are now deleted unread."""
    data = tmp_path / "data"
    script = f"""
import os
from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
m = LogManager(LogConfig.from_properties({{"log.dirs": {str(data)!r}, "log.index.interval.bytes": "64"}}),
               start_scheduler=False)
for p in range(3):
    log = m.get_or_create_log("t", p)
    for first in range(0, 3000, 100):
        if first % 1000 == 0 and first:
            log.roll()
        log.append(MemoryRecords.build([SimpleRecord(1_700_000_000_000 + i, None, b"v%d" % i)
                                        for i in range(first, first + 100)]))
os._exit(0)
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    indexes = sorted((data / "t-1").glob("*.index"))
    assert len(indexes) > 1 and indexes[-1].stat().st_size == 10 * 1024 * 1024  # preallocated: no clean close
    with open(indexes[0], "ab") as torn:
        torn.write(b"\x01\x02\x03")  # fits neither entry size
    config = LogConfig.from_properties({"log.dirs": str(data), "num.recovery.threads.per.data.dir": str(threads)})
    before = _bytes_read()
    with LogManager(config, start_scheduler=False) as manager:
        read = _bytes_read() - before
        for p in range(3):
            log = manager.get_log("t", p)
            assert log is not None and log.log_end_offset == 3000
            for offset in (0, 1234, 2999):  # through the rebuilt offset indexes
                (batch,) = list(log.read(offset, 1, min_one_message=True).records.batches())
                record = next(r for r in batch.records() if r.offset == offset)
                assert record.value == b"v%d" % offset
            assert log.segments.active_segment is not None
            assert log.segments.active_segment.offset_index.entries > 0
    assert read < 2 * 1024 * 1024, read  # the logs' bytes (~0.2 MiB), not 60 MiB of index files


def test_a_dir_without_partitions_has_nothing_to_recover(tmp_path: Path) -> None:
    from tiered.scrub.data_dir import scrub_data_dir_files

    data = tmp_path / "empty"
    data.mkdir()  # never started: no clean-shutdown marker, and nothing a start would recover
    code, text = status(data, as_json=False)
    assert code == 0 and "last shutdown: none recorded (no partitions: nothing to recover)" in str(text["text"])
    assert scrub_data_dir_files(data).notes == []
    (data / "t-0").mkdir()  # a partition: now a missing marker means a recovery
    assert "last shutdown: unclean" in str(status(data, as_json=False)[1]["text"])
    assert any("no clean-shutdown marker" in note for note in scrub_data_dir_files(data).notes)


def test_status_of_a_missing_dir_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tiered.cli import main

    # typed with --log-dirs: a usage error, as every command that never makes a data dir answers it
    assert main(["status", "--log-dirs", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.strip() == f"tiered status: no such data dir: {tmp_path / 'nope'}"
    # named by the config file (a disk that did not mount): a problem status reports, beside the dirs it can read
    data = tmp_path / "data"
    with LogManager(manager_config(data), start_scheduler=False) as manager:
        fill(manager, "t", 0, 3)
    config = tmp_path / "broker.properties"
    config.write_text(f"log.dirs={data},{tmp_path / 'nope'}\n")
    assert main(["status", "--config", str(config), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert [d["problems"] for d in doc["data_dirs"]] == [[], ["no such data dir"]]
    assert doc["data_dirs"][0]["partitions"][0]["log_end_offset"] == 3


def test_status_of_the_golden_kafka_dir(golden_dir: Path) -> None:
    code, doc = status(golden_dir)
    assert code == 0
    (d,) = doc["data_dirs"]
    assert d["clean_shutdown"] is True and d["broker_epoch"] == 83
    parts = {p["partition"]: p for p in d["partitions"]}
    assert parts["foo-0"]["log_end_offset"] == 3 and parts["foo-0"]["recovery_point"] == 3
    assert parts["__cluster_metadata-0"]["log_end_offset"] > 100


def test_a_start_whose_partitions_would_not_fit_under_the_open_files_limit_is_refused_before_loading(
    tmp_path: Path,
) -> None:
    """Under `ulimit -n 1024`, tiered run loaded 2,050 partitions until "Too many open files", took the only data dir
    offline and went on serving nothing, healthy to a service manager; the next start found 338 indexes left
    preallocated and rebuilt them as damaged (a helper's pass). The start is refused before any partition is
    loaded, saying how many open files it needs, and exits 1; nothing in the data dir changes."""
    data = tmp_path / "data"
    with LogManager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False) as manager:
        manager.create_partitions("t", range(120))
    before = sorted((p.relative_to(data), p.stat().st_size) for p in data.rglob("*") if p.is_file())
    script = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
from tiered.cli import main
sys.exit(main(["run", "--log-dirs", {str(data)!r}, "--listen", "127.0.0.1:0", "--duration", "5"]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot load the 120 partition(s)" in done.stderr and "ulimit -n" in done.stderr, done.stderr
    assert "listening" not in done.stdout
    after = sorted((p.relative_to(data), p.stat().st_size) for p in data.rglob("*") if p.is_file())
    assert after == before  # the clean-shutdown marker included: the next start is a clean one


def test_run_exits_when_every_data_dir_is_offline_and_a_failed_load_leaves_no_clean_marker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka halts a broker whose every log dir failed; tiered run served an empty broker with /health "serving".
    The clean-shutdown marker goes before the load: the files a failed load touched are treated as a crash's at the
    next start, not as damage."""
    from local.log import Log
    from tiered.cli import main

    data = tmp_path / "data"
    with LogManager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False) as manager:
        manager.create_partitions("t", range(2))
    marker = data / filenames.CLEAN_SHUTDOWN_FILENAME
    assert marker.exists()

    def fails(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(Log, "open", fails)
    rc = main(["run", "--log-dirs", str(data), "--listen", "127.0.0.1:0", "--duration", "5"])  # (bounds a regression)
    out, err = capsys.readouterr()
    assert rc == 1 and "every data dir is offline" in err and "Input/output error" in err, out + err
    assert "listening" not in out
    assert not marker.exists()
