"""Nothing a user does loses offloaded data, and read-only commands write nothing (issue 12).

The CLI tests run the real ``tiered`` command line in a subprocess, as a user would; the file hashes cover the
data dir and the remote directory, byte for byte, before and after.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from local import LogConfig, LogManager
from local.errors import ConfigError, ReadOnlyLogError, RemoteStorageNotConfiguredError
from local.records import MemoryRecords, SimpleRecord
from local.remote_state import REMOTE_LOG_STATE_FILENAME, RemoteLogState, RemoteLogStateFile
from tiered.remote_log_manager import RemoteLogManager

MIB = 1024 * 1024
TOPIC = "e"
TOPIC_CONFIG = ["remote.storage.enable=true", "segment.bytes=1048576", "local.retention.bytes=2000000"]


def cli(*args: str, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tiered.cli", *args], input=stdin, capture_output=True, text=True, timeout=300,
        cwd=cwd,
    )


def tree_hashes(*roots: Path) -> dict[str, str]:
    """Every file (and directory) under ``roots``: content hash, size and mtime; links by target."""
    out: dict[str, str] = {}
    for root in roots:
        if not root.exists():
            out[str(root)] = "absent"
            continue
        for dirpath, dirnames, files in os.walk(root):
            out[dirpath] = "dir:" + ",".join(sorted(dirnames + files))
            for name in files:
                path = Path(dirpath) / name
                st = path.lstat()
                out[str(path)] = f"{hashlib.sha256(path.read_bytes()).hexdigest()}:{st.st_size}:{st.st_mtime_ns}"
    return out


@pytest.fixture
def broker(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A broker.properties with the embedded local-directory remote tier: (properties, data dir, remote dir)."""
    data, remote = tmp_path / "data", tmp_path / "remote"
    props = tmp_path / "broker.properties"
    props.write_text(
        f"log.dirs={data}\n"
        "remote.log.storage.system.enable=true\n"
        "remote.log.storage.manager.class.name=local\n"
        f"rsm.config.dir={remote}\n"
    )
    return props, data, remote


def _produce_and_offload(props: Path, lines: int) -> None:
    topic_config = [a for item in TOPIC_CONFIG for a in ("--topic-config", item)]
    stdin = "".join(f"line-{i:06d}-{'x' * 150}\n" for i in range(lines))
    proc = cli("--config", str(props), "produce", "-t", TOPIC, *topic_config, stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    proc = cli("--config", str(props), "offload")
    assert proc.returncode == 0, proc.stderr


def _consume_all(props: Path) -> list[str]:
    proc = cli("--config", str(props), "consume", "-t", TOPIC, "--offset", "0")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def _remote_logs(remote: Path) -> set[Path]:
    return set(remote.rglob("*.log"))


def test_the_issue_repro_keeps_every_offset_and_every_remote_object(broker: tuple[Path, Path, Path]) -> None:
    props, data, remote = broker
    lines = 40_000
    _produce_and_offload(props, lines)
    objects = _remote_logs(remote)
    assert len(objects) >= 4
    state = RemoteLogStateFile(data / f"{TOPIC}-0").read()
    assert state.remote_storage_enabled and state.highest_remote_offset > 0

    # consume without the remote config: a clear refusal naming the setting, and nothing written
    before = tree_hashes(data, remote)
    proc = cli("consume", "-t", TOPIC, "--log-dirs", str(data), "--offset", "0")
    assert proc.returncode == 1
    assert "remote.log.storage.system.enable" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert tree_hashes(data, remote) == before

    # offload with a config that lacks the remote tier: refused before anything is opened
    bare = props.with_name("bare.properties")
    bare.write_text(f"log.dirs={data}\n")
    proc = cli("--config", str(bare), "offload")
    assert proc.returncode == 2 and "remote.log.storage.system.enable" in proc.stderr
    assert tree_hashes(data, remote) == before

    # run without --config: retention of the remote-backed partition is refused, the log start stays
    proc = cli("run", "--log-dirs", str(data), "-o", "log.retention.check.interval.ms=100", "--listen", "127.0.0.1:0",
               "--duration", "1.5")
    assert proc.returncode == 0, proc.stderr
    assert "retention refused" in proc.stderr
    assert _remote_logs(remote) == objects

    # with the config everything is still there, from offset 0, and a further pass deletes nothing remote
    values = _consume_all(props)
    assert values == [f"line-{i:06d}-{'x' * 150}" for i in range(lines)]
    proc = cli("--config", str(props), "offload")
    assert proc.returncode == 0, proc.stderr
    assert "deleted 0 remote segment(s)" in proc.stdout
    assert _remote_logs(remote) >= objects
    assert _consume_all(props) == values


def test_read_only_commands_write_nothing(broker: tuple[Path, Path, Path]) -> None:
    props, data, remote = broker
    _produce_and_offload(props, 30_000)
    pdir = data / f"{TOPIC}-0"
    before = tree_hashes(data, remote)
    commands = [
        ("--config", str(props), "consume", "-t", TOPIC, "--offset", "0", "--max-messages", "5"),
        ("--config", str(props), "consume", "-t", TOPIC, "--timestamp", "0", "--max-messages", "5"),
        ("consume", "-t", TOPIC, "--log-dirs", str(data), "--max-messages", "5"),
        ("status", "--log-dirs", str(data)),
        ("--config", str(props), "status"),
        ("features", "describe", "--log-dirs", str(data)),
        *[("dump", str(p)) for p in sorted(pdir.iterdir()) if p.is_file()],
    ]
    for args in commands:
        proc = cli(*args)
        assert "Traceback" not in proc.stderr, (args, proc.stderr)
        assert tree_hashes(data, remote) == before, args


def test_read_only_consume_of_a_relative_data_dir_reads_everything(broker: tuple[Path, Path, Path]) -> None:
    """The scratch view links the segment files by absolute path: a relative --log-dirs once gave dangling links,
    an empty log and no output with exit 0."""
    props, data, _remote = broker
    _produce_and_offload(props, 20_000)
    rel = props.with_name("relative.properties")
    rel.write_text(props.read_text().replace(f"log.dirs={data}", f"log.dirs={data.name}"))
    proc = cli("--config", rel.name, "consume", "-t", TOPIC, "--offset", "0", cwd=data.parent)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 20_000 and "orphaned" not in proc.stderr
    proc = cli("consume", "-t", TOPIC, "--log-dirs", data.name, "--offset", "19999", cwd=data.parent)
    assert proc.returncode == 0 and proc.stdout.split() == [f"line-019999-{'x' * 150}"], proc.stderr


def test_read_only_commands_on_a_mistyped_dir_create_nothing(tmp_path: Path) -> None:
    typo = tmp_path / "no-such-dir"
    for args in (
        ("consume", "-t", TOPIC, "--log-dirs", str(typo)),
        ("status", "--log-dirs", str(typo)),
        ("features", "describe", "--log-dirs", str(typo)),
    ):
        proc = cli(*args)
        assert proc.returncode in (1, 2), (args, proc.stdout)
        assert str(typo) in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)
        assert not typo.exists(), args


def test_read_only_consume_after_a_crash_recovers_in_memory_only(tmp_path: Path) -> None:
    """An unclean shutdown and a torn last batch: the reader sees the valid prefix, the files stay as they are."""
    data = tmp_path / "data"
    config = LogConfig.from_properties({"log.dirs": str(data), "log.segment.bytes": str(MIB)})
    manager = LogManager(config, start_scheduler=False)
    log = manager.get_or_create_log(TOPIC, 0)
    for i in range(0, 3000, 50):
        log.append(MemoryRecords.build([SimpleRecord(value=b"v%05d" % j) for j in range(i, i + 50)]))
    log.flush()
    for lock in list(manager._dir_locks.values()):  # a crash: no close, no clean-shutdown marker
        os.close(lock)
    manager._dir_locks.clear()
    active = log.active_segment.log.path
    with open(active, "ab") as f:  # a torn batch: a header promising more bytes than follow
        f.write(b"\x00" * 8 + (5000).to_bytes(4, "big") + b"\x00" * 20)
    before = tree_hashes(data)
    with LogManager(config, read_only=True) as ro:
        scratch = ro._scratch_root
        assert scratch is not None and scratch.is_dir()
        rlog = ro.get_log(TOPIC, 0)
        assert rlog is not None
        assert rlog.log_end_offset == 3000
        values = [r.value for b in rlog.read(0, 64 * MIB).records.batches() for r in b.records()]
        assert values[0] == b"v00000" and len(values) >= 1
        with pytest.raises(ReadOnlyLogError):
            rlog.append(MemoryRecords.build([SimpleRecord(value=b"x")]))
        with pytest.raises(ReadOnlyLogError):
            ro.cleanup_logs()
    assert tree_hashes(data) == before
    assert not scratch.exists()


def _props(tmp: Path, remote: bool = True) -> dict[str, str]:
    props = {"log.dirs": str(tmp / "data"), "log.segment.bytes": str(MIB)}
    if remote:
        props.update({
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "local",
            "rsm.config.dir": str(tmp / "remote"),
        })
    return props


def _fill(log: object, n: int, timestamp: int) -> None:
    for first in range(0, n, 100):
        batch = [SimpleRecord(timestamp, None, b"%08d" % i * 25) for i in range(first, min(first + 100, n))]
        log.append(MemoryRecords.build(batch))  # type: ignore[attr-defined]


def _copied(manager: LogManager, overrides: dict[str, str]) -> tuple[Any, RemoteLogManager]:
    """Partition 0 of TOPIC with ``overrides``, 20,000 records (4 MiB), and a remote pass over it: (log, its tier)."""
    log = manager.get_or_create_log(TOPIC, 0, overrides)
    _fill(log, 20_000, int(time.time() * 1000))
    rlm = manager.remote_tier
    assert isinstance(rlm, RemoteLogManager)
    rlm.run_once(manager.all_logs())
    return log, rlm


def test_a_manager_without_the_remote_tier_never_moves_the_log_start_past_remote_data(tmp_path: Path) -> None:
    overrides = {"remote.storage.enable": "true", "local.retention.bytes": str(MIB)}
    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as manager:
        log, rlm = _copied(manager, overrides)
        assert manager.cleanup_logs() > 0
        local_start = log.local_log_start_offset
        assert local_start > 0 and log.log_start_offset == 0
        highest = rlm.highest_offset_in_remote_storage(log)
    state = RemoteLogStateFile(tmp_path / "data" / f"{TOPIC}-0").read()
    assert (state.remote_storage_enabled, state.highest_remote_offset, state.owner_epoch) == (True, highest, 0)

    with LogManager(LogConfig.from_properties(_props(tmp_path, remote=False)), start_scheduler=False) as bare:
        log = bare.get_log(TOPIC, 0)
        assert log is not None
        assert log.log_start_offset == 0 and log.local_log_start_offset == local_start
        with pytest.raises(RemoteStorageNotConfiguredError, match=r"remote.log.storage.system.enable"):
            log.read(0)
        with pytest.raises(RemoteStorageNotConfiguredError, match="retention refused"):
            log.delete_old_segments()
        assert bare.cleanup_logs() == 0  # refused for that partition, logged, no exception out of the pass
    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as manager:
        log = manager.get_log(TOPIC, 0)
        assert log is not None and log.log_start_offset == 0
        assert manager.remote_tier.cleanup_remote_segments(log) == 0  # type: ignore[union-attr]
        assert log.read(0).records.batches().__next__().base_offset == 0


def test_turning_remote_storage_off_needs_delete_on_disable(tmp_path: Path) -> None:
    overrides = {"remote.storage.enable": "true", "local.retention.bytes": str(MIB)}
    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, overrides)
        _fill(log, 20_000, int(time.time() * 1000))
        manager.remote_tier.run_once(manager.all_logs())  # type: ignore[union-attr]
        with pytest.raises(ConfigError, match=r"remote.log.delete.on.disable=true"):
            manager.get_or_create_log(TOPIC, 0, {"retention.ms": "-1"})  # remote.storage.enable dropped
        assert log.config.remote_storage_enable  # the refused change left the config as it was
        props_file = log.dir / "tiered-topic.properties"
        assert "remote.storage.enable=true" in props_file.read_text()
        # read-only remote data is how Kafka keeps it: copying stops, nothing is deleted
        log = manager.get_or_create_log(TOPIC, 0, {**overrides, "remote.log.copy.disable": "true"})
        assert manager.remote_tier.copy_log_segments(log).segments_copied == 0  # type: ignore[union-attr]
    # a topic config changed behind our back: retention refuses rather than trimming past remote data
    props_file.write_text("retention.ms=-1\n")
    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as manager:
        log = manager.get_log(TOPIC, 0)
        assert log is not None
        with pytest.raises(RemoteStorageNotConfiguredError, match=r"remote.log.delete.on.disable"):
            log.delete_old_segments()
        log = manager.get_or_create_log(TOPIC, 0, {"remote.log.delete.on.disable": "true"})
        log.delete_old_segments()  # allowed: the operator gave up the remote data


def test_remote_storage_turned_off_with_delete_on_disable_deletes_the_remote_data(tmp_path: Path) -> None:
    """KIP-950: remote.storage.enable=false with remote.log.delete.on.disable=true gives the remote data up. It was
    accepted and nothing happened: the remote segments stayed, still served below the local log start, so a topic
    made compacted in the same request replayed every old version of its keys, and the topic could never be deleted
    (a helper's pass). Readers lose those offsets at once; the next remote pass deletes every remote segment."""
    from local.errors import OffsetOutOfRangeError

    overrides = {"remote.storage.enable": "true", "local.retention.bytes": str(MIB)}
    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as manager:
        log, rlm = _copied(manager, overrides)
        manager.cleanup_logs()
        tip = rlm.topic_id_partition(log)
        local_start = log.local_log_start_offset
        assert local_start > 0 and rlm.finished_segments(tip) and log.has_remote_data
        log = manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "false",
                                                   "remote.log.delete.on.disable": "true",
                                                   "cleanup.policy": "compact"})
        assert log.log_start_offset == local_start  # gone to readers with the config change
        with pytest.raises(OffsetOutOfRangeError):
            log.read(0)
        objects = [f for f in (tmp_path / "remote").rglob("*") if f.is_file() and ".log" in f.name]
        assert objects  # not deleted yet: the remote tier's pass does it
        result = rlm.run_once(manager.all_logs())
        assert result.segments_copied == 0 and result.segments_deleted == len(objects)
        assert rlm.finished_segments(tip) == [] and not log.has_remote_data
        assert [f for f in (tmp_path / "remote").rglob("*") if f.is_file() and ".log" in f.name] == []
        assert log.log_start_offset == local_start and log.read(local_start).records.batches().__next__()
        assert rlm.run_once(manager.all_logs()).segments_deleted == 0  # nothing left to do
    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as manager:
        log = manager.get_log(TOPIC, 0)
        assert log is not None and not log.has_remote_data and log.log_start_offset == local_start
        manager.delete_partitions(TOPIC, [0])  # a topic that held remote data: nothing is left to strand


def test_a_kip_950_deletion_cut_short_leaves_the_lowest_copies_and_tiering_stays_off_until_it_ends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Remote storage turned off (delete.on.disable) and on again before the deletion ended lost 3,400 acknowledged
    records (a helper's pass): the deletion had left a hole below the highest copy left, local retention trusted
    "the copies reach offset N" and deleted the only local copies. The deletion goes from the highest copy down,
    tiering cannot be turned on again until it ended, and verify takes the state for what it is."""
    from tiered import remote_tier_parts
    from tiered.cli import main

    overrides = {"remote.storage.enable": "true", "local.retention.bytes": "-1"}  # (everything stays local too)
    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as manager:
        log, rlm = _copied(manager, overrides)
        tip = rlm.topic_id_partition(log)
        copies = [(m.start_offset, m.end_offset) for m in rlm.finished_segments(tip)]
        assert len(copies) >= 3
        manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
        delete = remote_tier_parts.delete_remote_segment
        calls: list[int] = []

        def store_down_after_one(parts: object, md: object, reason: str) -> bool:
            if calls:
                raise OSError("the store went away")
            calls.append(1)
            return delete(parts, md, reason)  # type: ignore[arg-type]

        monkeypatch.setattr(remote_tier_parts, "delete_remote_segment", store_down_after_one)
        with pytest.raises(OSError, match="went away"):
            rlm.run_once(manager.all_logs())
        left = [(m.start_offset, m.end_offset) for m in rlm.finished_segments(tip)]
        assert left == copies[:-1]  # the highest went first: no hole below what is left
        assert log.has_remote_data
        with pytest.raises(ConfigError, match="still being deleted"):
            manager.get_or_create_log(TOPIC, 0, overrides)
        monkeypatch.setattr(remote_tier_parts, "delete_remote_segment", delete)
    config = tmp_path / "broker.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in _props(tmp_path).items()))
    assert main(["--config", str(config), "verify"]) == 0, capsys.readouterr()  # being given up: no problem
    assert main(["--config", str(config), "offload"]) == 0, capsys.readouterr()
    assert main(["--config", str(config), "verify"]) == 0, capsys.readouterr()  # given up: a local partition
    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, overrides)  # on again, now that the deletion ended
        assert log.config.remote_storage_enable and not log.has_remote_data


def test_the_scheduled_remote_tasks_delete_the_data_of_a_topic_that_turned_remote_storage_off(tmp_path: Path) -> None:
    """tiered run's scheduler kept tasks only for tiered partitions: one whose topic turned remote storage off (with
    remote.log.delete.on.disable=true) needs its expiration task until its remote data is gone."""
    from tests.gated_rsm import LIMIT

    overrides = {"remote.storage.enable": "true", "local.retention.bytes": str(MIB)}
    props = {**_props(tmp_path), "remote.log.manager.task.interval.ms": "100"}
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, overrides)
        _fill(log, 20_000, int(time.time() * 1000))
        assert manager.remote_tier.run_once(manager.all_logs()).segments_copied > 0  # type: ignore[union-attr]
        manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
        assert log.has_remote_data
        manager.startup()
        deadline = time.monotonic() + LIMIT
        while log.has_remote_data and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not log.has_remote_data
        assert not [f for f in (tmp_path / "remote").rglob("*") if f.is_file() and ".log" in f.name]


def test_turning_off_remote_storage_of_a_tiered_topic_needs_delete_on_disable_before_any_copy(tmp_path: Path) -> None:
    """Kafka's rule asks whether the topic was tiered, not whether it holds remote data yet: turned off while its
    first copy was under way, the copy landed after the change (a review's pass)."""
    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "true"})
        assert not log.has_remote_data
        with pytest.raises(ConfigError, match=r"remote.log.delete.on.disable=true"):
            manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "false"})
        manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
        manager.get_or_create_log(TOPIC, 0, {"retention.ms": "1000"})  # not tiered now: nothing to refuse


def test_offload_of_a_topic_that_turned_remote_storage_off_says_so_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pass that deleted the remote data (KIP-950) exited 1, saying the partition held remote data it would not
    tier and advising remote.storage.enable=true again, at every later run too (a review's pass)."""
    from tiered.cli import main

    config = tmp_path / "broker.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in _props(tmp_path).items()))
    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "true", "local.retention.bytes": str(MIB)})
        _fill(log, 20_000, int(time.time() * 1000))
    assert main(["--config", str(config), "offload"]) == 0
    capsys.readouterr()
    assert main(["--config", str(config), "topics", "alter", "-t", TOPIC, "--add-config",
                 "remote.storage.enable=false,remote.log.delete.on.disable=true"]) == 0
    for run in range(2):
        rc = main(["--config", str(config), "offload"])
        out, err = capsys.readouterr()
        assert rc == 0, out + err
        assert "remote.storage.enable=true" not in err and "retention is refused" not in err, err
        assert ("gives up its remote data" in err) == (run == 0), err
    assert not [f for f in (tmp_path / "remote").rglob("*.log")]


def test_remote_retention_of_segments_without_timestamps_uses_their_file_time(tmp_path: Path) -> None:
    """Kafka's largestTimestamp: a segment whose records carry no timestamp ages by its file's mtime."""
    overrides = {"remote.storage.enable": "true", "local.retention.bytes": str(MIB), "retention.ms": "3600000"}
    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, overrides)
        _fill(log, 20_000, -1)
        segments = list(log.segments.values())[:-1]
        assert len(segments) >= 3 and all(s.max_timestamp_so_far < 0 for s in segments)
        two_hours_ago = time.time() - 7200
        os.utime(segments[0].log.path, (two_hours_ago, two_hours_ago))
        rlm = manager.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        rlm.copy_log_segments(log)
        finished = rlm.finished_segments(rlm.topic_id_partition(log))
        assert len(finished) == len(segments)
        assert finished[0].max_timestamp_ms == pytest.approx(two_hours_ago * 1000, abs=1000)
        assert all(md.max_timestamp_ms > (time.time() - 60) * 1000 for md in finished[1:])
        deleted = rlm.cleanup_remote_segments(log)
        assert deleted == 1  # only the segment whose file time is past retention.ms
        assert log.log_start_offset == segments[1].base_offset
        assert len(rlm.finished_segments(rlm.topic_id_partition(log))) == len(segments) - 1


def test_remote_state_file_is_strict(tmp_path: Path) -> None:
    state = RemoteLogState(True, 41)
    assert RemoteLogState.decode(state.encode()) == state
    f = RemoteLogStateFile(tmp_path)
    assert f.read() == RemoteLogState()
    f.write(state)
    assert (tmp_path / REMOTE_LOG_STATE_FILENAME).read_bytes() == b"version: 0\nremote_storage_enabled: true\nhighest_remote_offset: 41\n"
    assert f.read() == state
    from local.errors import KafkaStorageError

    for bad in (b"", b"version: 1\n", b"\xff\xfe", b"version: 0\nremote_storage_enabled: yes\nhighest_remote_offset: 1\n",
                b"version: 0\nremote_storage_enabled: true\nhighest_remote_offset: -5\n"):
        (tmp_path / REMOTE_LOG_STATE_FILENAME).write_bytes(bad)
        with pytest.raises(KafkaStorageError, match=REMOTE_LOG_STATE_FILENAME):
            f.read()


def test_a_produce_that_fails_validation_writes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for args in (
        ("--topic-config", "segment.bytes=abc"),
        ("--topic-config", "no.such.key=1"),
        ("-p", "-1"),
    ):
        proc = cli("produce", "-t", TOPIC, "--log-dirs", str(data), *args, stdin="a\n")
        assert proc.returncode == 2, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert not data.exists(), args
    proc = cli("produce", "-t", "bad/topic", "--log-dirs", str(data), stdin="a\n")
    assert proc.returncode == 2 and "bad/topic" in proc.stderr and not data.exists()


@pytest.mark.parametrize("damage", ["invalid_json", "other_state", "epoch_digit", "deleted"])
def test_a_damaged_finished_event_never_gets_its_segment_deleted(broker: tuple[Path, Path, Path], damage: str) -> None:
    """One flipped byte in a segment's COPY_SEGMENT_FINISHED event (JSON broken, or still valid with state 0 where
    1 was), or the event deleted, left the segment looking like a copy a crash abandoned, and the next copy pass
    deleted its objects: the only copy of its records, local retention having removed them. Now the segment is left
    as it is and said in an error, verify names the damaged event, and restoring the event makes it readable. A
    changed digit that leaves the event valid (its leader epoch's start offset) was served as it was: the event's own
    CRC-32C (``json_crc32c``) finds it."""
    props, _, remote = broker
    _produce_and_offload(props, 40_000)
    events = sorted(remote.rglob("__remote_log_metadata/*.1.json"))
    assert len(events) >= 3
    victim = events[1]
    start = int(victim.name.split("-", 1)[0])
    seg_objects = sorted(p.name for p in victim.parent.parent.glob(f"{victim.name.split('.')[0]}.*"))
    assert any(n.endswith(".log") for n in seg_objects)
    raw = bytearray(victim.read_bytes())
    original = bytes(raw)
    if damage == "invalid_json":
        at = raw.index(b'"state"') + len(b'"state"')
        raw[at] ^= 1  # ':' -> ';'
        victim.write_bytes(bytes(raw))
    elif damage == "other_state":
        at = raw.index(b'"state": 1') + len(b'"state": ') if b'"state": 1' in raw else raw.index(b'"state":1') + 8
        raw[at] ^= 1  # '1' -> '0': valid JSON, the event now says COPY_SEGMENT_STARTED
        victim.write_bytes(bytes(raw))
    elif damage == "epoch_digit":
        at = raw.index(b'"segment_leader_epochs":{"0":') + len(b'"segment_leader_epochs":{"0":')
        raw[at] ^= 1  # the epoch's first offset: still valid JSON, still state 1
        victim.write_bytes(bytes(raw))
    else:
        victim.unlink()

    proc = cli("--config", str(props), "offload")
    assert proc.returncode == 0, proc.stderr
    left = sorted(p.name for p in victim.parent.parent.glob(f"{victim.name.split('.')[0]}.*"))
    assert left == seg_objects
    verify = cli("--config", str(props), "verify", "--remote")
    assert verify.returncode == 1
    if damage == "deleted":
        assert "its COPY_SEGMENT_FINISHED event is gone. It is not deleted" in proc.stderr
        assert "is left in COPY_SEGMENT_STARTED" in verify.stdout
    else:
        assert "cannot be read: it is not deleted as a stale copy" in proc.stderr
        assert victim.name in verify.stdout and "no copy pass deletes it" in verify.stdout
    # restoring the event makes the segment readable again
    victim.write_bytes(original)
    assert _consume_all(props)[start] == f"line-{start:06d}-{'x' * 150}"


def test_a_lost_partition_metadata_never_gets_a_new_topic_id_cutting_off_remote_data(
        broker: tuple[Path, Path, Path]) -> None:
    """The topic id in partition.metadata names the partition's data in the remote tier. With the file lost, the
    next write made a new id, silently: every offloaded record was cut off from the log, and verify had said OK.
    Now every command refuses the partition naming the file, verify reports it, and restoring it is enough."""
    props, data, _ = broker
    _produce_and_offload(props, 20_000)
    metadata = data / f"{TOPIC}-0" / "partition.metadata"
    saved = metadata.read_bytes()
    metadata.unlink()
    verify = cli("--config", str(props), "verify")
    assert verify.returncode == 1 and "partition.metadata: [partition_metadata] missing" in verify.stdout
    produced = cli("--config", str(props), "produce", "-t", TOPIC, stdin="more\n")
    assert produced.returncode == 1
    assert "partition.metadata is missing, but" in produced.stderr and "no new one is made" in produced.stderr
    consumed = cli("--config", str(props), "consume", "-t", TOPIC, "--offset", "0")
    assert consumed.returncode == 1 and "partition.metadata is missing" in consumed.stderr
    assert not metadata.exists()
    metadata.write_bytes(saved)
    lines = _consume_all(props)
    assert len(lines) == 20_000 and lines[0] == f"line-{0:06d}-{'x' * 150}"


def test_offload_roll_copies_every_record_for_a_handover(broker: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """docs/operations.md, "Moving to a new machine": the old machine's last records were in its active segment,
    which no pass copies and which rolls only at an append; the status check the doc asked for (copy lag 0)
    passed all the same, and the new machine appended other records at those offsets. `offload --roll` rolls the
    active segments first: the new machine attaches every record."""
    props, data, _ = broker
    _produce_and_offload(props, 10_000)
    proc = cli("--config", str(props), "offload", "--roll")
    assert proc.returncode == 0, proc.stderr
    assert "rolled the active segment of 1 partition(s)" in proc.stderr
    again = cli("--config", str(props), "offload", "--roll")  # nothing left in an active segment: nothing to roll
    assert again.returncode == 0 and "rolled the active segment of 0 partition(s)" in again.stderr
    new = tmp_path / "new.properties"
    new.write_text(props.read_text().replace(f"log.dirs={data}", f"log.dirs={tmp_path / 'new'}"))
    attached = cli("--config", str(new), "attach", "--topic", TOPIC)
    assert attached.returncode == 0, attached.stderr
    assert "log end offset 10000" in attached.stdout + attached.stderr
    lines = cli("--config", str(new), "consume", "-t", TOPIC, "--offset", "9999")
    assert lines.returncode == 0 and lines.stdout.splitlines() == [f"line-{9999:06d}-{'x' * 150}"]


def test_lost_topic_overrides_of_a_partition_with_remote_data_fail_verify_and_offload(
        broker: tuple[Path, Path, Path]) -> None:
    """With tiered-topic.properties lost, the partition is no longer tiered while it holds remote data: its retention
    is refused. verify said OK and offload, having logged the refusal as an ERROR, exited 0."""
    props, data, _ = broker
    _produce_and_offload(props, 20_000)
    (data / f"{TOPIC}-0" / "tiered-topic.properties").unlink()
    verify = cli("--config", str(props), "verify")
    assert verify.returncode == 1
    assert "[topic_config]" in verify.stdout and "do not set remote.storage.enable=true" in verify.stdout
    offload = cli("--config", str(props), "offload")
    assert offload.returncode == 1
    assert "1 partition(s) hold data in remote storage but are not tiered" in offload.stderr
    altered = cli("--config", str(props), "topics", "alter", "--topic", TOPIC, "--add-config",
                  "remote.storage.enable=true")
    assert altered.returncode == 0, altered.stderr
    assert cli("--config", str(props), "offload").returncode == 0
    assert cli("--config", str(props), "verify").returncode == 0


@pytest.mark.parametrize("command", [["verify"], ["status"], ["topics", "list"], ["produce", "-t", "x"]])
def test_a_list_of_data_dirs_that_names_none_is_a_usage_error(command: list[str]) -> None:
    proc = cli(*command, "--log-dirs", ",,", stdin="a\n")
    assert proc.returncode == 2
    assert "log.dirs=',,' names no data dir" in proc.stderr


def test_a_malformed_unicode_escape_in_the_config_names_the_file(tmp_path: Path) -> None:
    props = tmp_path / "x.properties"
    props.write_text(f"log.dirs={tmp_path / 'data'}\nlog.segment.bytes=\\u00zz\n")
    proc = cli("--config", str(props), "status")
    assert proc.returncode == 2
    assert f"configuration file {props}: malformed \\uxxxx escape" in proc.stderr
    assert "unexpected error" not in proc.stderr
