"""One writer per partition across data dirs sharing a bucket (tiered.ownership), through the CLI and the engine:
a data dir that lost the partition to ``tiered attach`` copies and deletes nothing more there, readers follow the
owner's lineage only, a wrong prefix is refused, segments whose deletion started are never read, counted or
adopted. Local-directory bucket; the S3 servers are in tests/integration/test_ownership_s3.py."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from local.remote_state import RemoteLogState, RemoteLogStateFile
from tests.logutil import local_tier_props
from tiered.backends.local_dir import LocalDirRemoteStorageManager, LocalDirStore
from tiered.cli import main
from tiered.composition import open_log_manager, remote_log_manager_of
from tiered.errors import ObjectExistsError
from tiered.metadata import RemoteLogMetadataStore
from tiered.ownership import OwnerRecord, claim_lineage, within_lineage
from tiered.rsm import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

TOPIC = "ev"
BATCH = 100
TIMEOUT_S = 60.0  # a failure bound only: what the tests wait for is an event


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def write_config(path: Path, props: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def produce(config: Path, label: str, batches: int) -> tuple[int, int]:
    """``batches`` batches of 100 records valued ``<label>-<offset>`` (~30 KiB each: a 1 MiB segment rolls every ~34
    batches), then a roll, so everything written can be copied. Returns the offsets written [first, end)."""
    now = int(time.time() * 1000)
    with LogManager(LogConfig.from_properties(str(config)), start_scheduler=False) as manager:
        log = manager.get_log(TOPIC, 0)
        assert log is not None
        first = log.log_end_offset
        for _ in range(batches):
            at = log.log_end_offset
            log.append(MemoryRecords.build([SimpleRecord(now, None, f"{label}-{at + j}".encode() + b"x" * 300)
                                            for j in range(BATCH)]))
        log.roll()
        return first, log.log_end_offset


def consume(capsys: pytest.CaptureFixture[str], config: Path, *extra: str) -> tuple[int, list[dict[str, object]], str]:
    rc, out, err = cli(capsys, "--config", str(config), "consume", "-t", TOPIC, "--json", *extra)
    return rc, [json.loads(line) for line in out.splitlines()], err


def attach(capsys: pytest.CaptureFixture[str], config: Path) -> str:
    """``tiered attach`` of the topic, then its local retention as the first data dir's (topic configs are not in
    the bucket)."""
    rc, out, err = cli(capsys, "--config", str(config), "attach", "-t", TOPIC)
    assert rc == 0, err
    rc, _, err = cli(capsys, "--config", str(config), "topics", "alter", "-t", TOPIC, "--add-config",
                     "local.retention.bytes=1")
    assert rc == 0, err
    return out


def remote_logs(bucket: Path) -> list[Path]:
    return sorted(bucket.rglob("*.log"))


@pytest.fixture
def two_dirs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path, Path]:
    """A (which created and offloaded topic ev) and B (an empty data dir) sharing one bucket; returns their configs
    and the bucket."""
    bucket = tmp_path / "bucket"
    a = write_config(tmp_path / "a.properties", local_tier_props(tmp_path / "a", **{"rsm.config.dir": str(bucket)}))
    b = write_config(tmp_path / "b.properties", local_tier_props(tmp_path / "b", **{"rsm.config.dir": str(bucket)}))
    rc, _, err = cli(capsys, "--config", str(a), "topics", "create", "-t", TOPIC, "--topic-config",
                     "remote.storage.enable=true", "--topic-config", "local.retention.bytes=1")
    assert rc == 0, err
    produce(a, "A", 100)
    rc, _, err = cli(capsys, "--config", str(a), "offload")
    assert rc == 0, err
    return a, b, bucket


def test_remote_storage_turned_off_on_a_deposed_data_dir_leaves_the_owners_remote_data(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """KIP-950 disablement on a data dir that lost the partition moved its log start up and then never finished:
    every offload exited 1, and DeleteTopics was refused for good (a review). It is not its data to delete: the
    owner's stays, and this data dir forgets it and is local only."""
    a, b, bucket = two_dirs
    attach(capsys, b)
    before = remote_logs(bucket)
    assert before
    rc, _, err = cli(capsys, "--config", str(a), "topics", "alter", "-t", TOPIC, "--add-config",
                     "remote.storage.enable=false,remote.log.delete.on.disable=true")
    assert rc == 0, err
    rc, out, err = cli(capsys, "--config", str(a), "offload")
    assert rc == 0, out + err
    assert remote_logs(bucket) == before  # the owner's remote data, untouched
    state = RemoteLogStateFile(tmp_path / "a" / "data" / f"{TOPIC}-0").read()
    assert not state.has_remote_data
    rc, out, err = cli(capsys, "--config", str(a), "offload")
    assert rc == 0 and "remote storage" not in err, out + err  # done: nothing more to say
    rc, out, err = cli(capsys, "--config", str(b), "offload")
    assert rc == 0, out + err  # the owner is as it was


def test_a_data_dir_that_lost_the_partition_copies_nothing_and_b_reads_only_its_own_records(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a, b, bucket = two_dirs
    highest = RemoteLogStateFile(tmp_path / "a" / "data" / f"{TOPIC}-0").read().highest_remote_offset
    assert "owner epoch 1" in attach(capsys, b)
    # Both keep producing: B after the remote log end, A after its own log end (offsets B writes too).
    b_first, b_end = produce(b, "B", 80)
    assert b_first == highest + 1
    produce(a, "A", 80)
    before = remote_logs(bucket)
    rc, out, err = cli(capsys, "--config", str(a), "offload")
    assert rc == 1
    lost = [line for line in err.splitlines() if "lost ownership" in line]
    assert len(lost) == 1 and "owner epoch 1" in lost[0] and str(tmp_path / "a" / "data" / f"{TOPIC}-0") in lost[0]
    assert remote_logs(bucket) == before  # A copied (and deleted) nothing
    assert "copied 0 segment(s)" in out
    # B tiers its own records; once its local retention deleted them, every offset reads back as B wrote it.
    rc, _, err = cli(capsys, "--config", str(b), "offload")
    assert rc == 0, err
    with LogManager(LogConfig.from_properties(str(b)), start_scheduler=False, read_only=True) as manager:
        log = manager.get_log(TOPIC, 0)
        assert log is not None and log.local_log_start_offset > b_first + 1000
    rc, records, err = consume(capsys, b, "--offset", str(highest - 5))
    assert rc == 0, err
    assert [r["offset"] for r in records] == list(range(highest - 5, b_end))
    assert all(str(r["value"]).startswith(f"A-{r['offset']}x") for r in records[:6])
    assert all(str(r["value"]).startswith(f"B-{r['offset']}x") for r in records[6:])
    # consume on A reads its own records, saying they are not the partition's past the handover (a helper's read
    # of them said nothing).
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "tiered.cli", "--config", str(a), "consume", "-t", TOPIC, "--json",
                           "--offset", str(b_first), "--max-messages", "1"], capture_output=True, text=True, timeout=120)
    err = done.stderr
    assert done.returncode == 0 and json.loads(done.stdout)["value"].startswith("A-"), err
    assert "warning:" in err and "lost ownership" in err and "not the partition's" in err, err
    assert err.count("lost ownership") == 1, err  # (said once: the guard's ERROR is a pass's, not a reader's)
    rc, _, err = consume(capsys, b, "--offset", str(b_first), "--max-messages", "1")
    assert rc == 0 and "warning" not in err, err
    # verify: B's view is clean; A is told it is not the owner (exit 1).
    rc, out, err = cli(capsys, "--config", str(b), "verify", "--remote")
    assert rc == 0, out + err
    rc, out, err = cli(capsys, "--config", str(a), "verify", "--remote", "--json")
    assert rc == 1
    kinds = {p["kind"] for part in json.loads(out)["partitions"] for p in part["problems"]}
    assert kinds == {"not_owner"}
    # status: A's partition is lost (a problem, exit 1), B's is owned.
    rc, out, err = cli(capsys, "--config", str(a), "status", "--json")
    assert rc == 1 and "lost ownership" in err
    [part] = json.loads(out)["data_dirs"][0]["partitions"]
    assert part["remote"]["ownership"]["state"] == "lost" and part["remote"]["ownership"]["owner_epoch"] == 1
    assert part["remote"]["copy_lag_segments"] is None  # (never copied from here: no lag that never shrinks)
    rc, out, err = cli(capsys, "--config", str(b), "status", "--json")
    assert rc == 0, err
    [part] = json.loads(out)["data_dirs"][0]["partitions"]
    assert part["remote"]["ownership"]["state"] == "owner"


def test_a_late_copy_of_the_former_owner_is_never_read_verify_reports_it_and_the_owner_deletes_it(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The window fencing leaves: A checked its ownership just before B's claim and copies one more segment. That
    segment holds offsets B writes too, in A's epoch: outside B's lineage. (A copies in this process: the copier
    process checks the owner records again before each FINISHED event, test_copy_batches.)"""
    from local.config import read_properties

    a, b, bucket = two_dirs
    highest = RemoteLogStateFile(tmp_path / "a" / "data" / f"{TOPIC}-0").read().highest_remote_offset
    produce(a, "A", 40)
    config_a = LogConfig.from_properties({**read_properties(a), "remote.log.manager.copier.process.enable": "false"})
    with open_log_manager(config_a, start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        assert rlm is not None
        attach(capsys, b)
        rlm.ownership.ensure_owner = lambda log, tip: None  # type: ignore[method-assign]  # checked before the claim
        log = manager.get_log(TOPIC, 0)
        assert log is not None
        assert rlm.copy_log_segments(log).segments_copied >= 1  # the copy task only: its run in the window
    b_first, b_end = produce(b, "B", 40)
    rc, out, err = cli(capsys, "--config", str(b), "verify", "--remote", "--json")
    assert rc == 1
    problems = [p for part in json.loads(out)["partitions"] for p in part["problems"]]
    assert problems and {p["kind"] for p in problems} == {"outside_lineage"}
    assert all(p["offset"] > highest for p in problems)
    # B reads its own records at those offsets, from the local log and, after its offload, from the remote tier.
    late = {p["object"] for p in problems}
    for i in range(2):
        rc, records, err = consume(capsys, b, "--offset", str(b_first))
        assert rc == 0, err
        assert [r["offset"] for r in records] == list(range(b_first, b_end))
        assert all(str(r["value"]).startswith("B-") for r in records)
        if i == 0:
            with caplog.at_level(logging.WARNING, logger="tiered"):
                rc, out, err = cli(capsys, "--config", str(b), "offload")  # deletes A's late copies, copies B's
            assert rc == 0, err
            assert f"deleted {len(late)} remote segment(s)" in out
            assert f"deleting {len(late)} remote segment(s) outside its lineage" in caplog.text  # (not as retention's)
            assert not any((bucket / key).exists() for key in late)
    rc, out, err = cli(capsys, "--config", str(b), "verify", "--remote")
    assert rc == 0, out + err


def test_a_wrong_prefix_is_refused_naming_the_state_file_and_the_store(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a, _, bucket = two_dirs
    produce(a, "A", 40)
    state_file = str(tmp_path / "a" / "data" / f"{TOPIC}-0" / "remote-log-state")
    wrong = ("-o", "rsm.config.prefix=other")
    rc, out, err = cli(capsys, "--config", str(a), *wrong, "offload")
    assert rc == 1
    [line] = [x for x in err.splitlines() if "rsm.config.prefix" in x]
    assert state_file in line and "prefix='other'" in line
    assert not list((bucket / "other").rglob("*.log")) and not list((bucket / "other").rglob("owner-*"))
    rc, out, err = cli(capsys, "--config", str(a), *wrong, "status")
    assert rc == 1 and "WRONG STORE" in out and "rsm.config.prefix" in err
    rc, out, err = cli(capsys, "--config", str(a), *wrong, "consume", "-t", TOPIC, "--offset", "0")
    assert rc == 1 and out == "" and "rsm.config.prefix" in err and len(err.strip().splitlines()) == 1
    assert state_file in err and "tiered-read-only-" not in err  # the operator's file, not the read-only copy
    # The right prefix still works.
    rc, _, err = cli(capsys, "--config", str(a), "offload")
    assert rc == 0, err


def test_a_legacy_data_dir_with_remote_data_and_a_store_without_it_is_refused(tmp_path: Path) -> None:
    """Remote data written before ownership existed (no claim in remote-log-state) and a store that holds none of
    the partition: a wrong bucket, refused (the log start is below the local log start)."""
    props = local_tier_props(tmp_path)
    config = LogConfig.from_properties(props)
    with open_log_manager(config, start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
        for _ in range(80):
            log.append(MemoryRecords.build([SimpleRecord(None, b"x" * 30_000)]))
        log.roll()
        rlm = remote_log_manager_of(manager)
        assert rlm is not None and rlm.run_once(manager.all_logs()).segments_copied > 0
        manager.cleanup_logs()
        assert log.log_start_offset < log.local_log_start_offset
    pdir = tmp_path / "data" / f"{TOPIC}-0"
    state = RemoteLogStateFile(pdir).read()
    RemoteLogStateFile(pdir).write(RemoteLogState(True, state.highest_remote_offset))  # as written before ownership
    other = LogConfig.from_properties({**props, "rsm.config.dir": str(tmp_path / "empty-bucket")})
    with open_log_manager(other, start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        assert rlm is not None
        result = rlm.run_once(manager.all_logs())
        assert (result.segments_copied, result.not_owned) == (0, 1)
        [found] = rlm.ownership.states().values()
        assert found.state == "wrong_store" and str(pdir / "remote-log-state") in found.detail
    assert not list((tmp_path / "empty-bucket").rglob("*.json"))


def test_an_in_process_copy_whose_partition_is_claimed_during_its_upload_does_not_finish(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The copy in this process (S3: no copier process) checked ownership before the segment, not after its upload,
    which can take minutes: a helper's deposed tiered run wrote COPY_SEGMENT_FINISHED after it had logged that it
    lost the partition. It checks again before the FINISHED event: the copy does not count, its objects go."""
    a, b, bucket = two_dirs
    produce(a, "A", 40)
    in_process = write_config(tmp_path / "a-here.properties", local_tier_props(
        tmp_path / "a", **{"rsm.config.dir": str(bucket), "remote.log.manager.copier.process.enable": "false"}))
    with open_log_manager(LogConfig.from_properties(str(in_process)), start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        log = manager.get_log(TOPIC, 0)
        assert rlm is not None and log is not None
        task = rlm.copy_task(log)
        upload = task._copy_data
        tip = rlm.topic_id_partition(log)

        def finished() -> int:  # (every FINISHED copy in the bucket, of any lineage)
            fresh = RemoteLogMetadataStore.in_bucket(_rsm_of(bucket))
            return sum(m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in fresh.list_remote_log_segments(tip))

        finished_before = finished()

        def upload_then_b_attaches(md: RemoteLogSegmentMetadata, data: Any, chunk: int) -> Any:
            done = upload(md, data, chunk)
            attach(capsys, b)  # (B's claim lands while this copy's objects are up)
            return done

        monkeypatch.setattr(task, "_copy_data", upload_then_b_attaches)
        result = rlm.run_once(manager.all_logs())
        assert (result.segments_copied, result.copy_errors, result.not_owned) == (0, 0, 1), result
    assert finished() == finished_before  # A's late copy did not finish
    fresh = RemoteLogMetadataStore.in_bucket(_rsm_of(bucket))
    assert fresh.find_stale_copies(tip) == []  # and what it uploaded was deleted


def test_produce_refuses_a_partition_another_data_dir_owns_and_writes_nothing(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """tiered produce on a data dir that lost the partition acknowledged the records ("produced 1 records", exit 0)
    while tiered run answered 409 (NOT_LEADER_OR_FOLLOWER): records that would never be tiered. So did a data dir
    that never claimed it, given the owner's topic id, and the line said it had "lost" what it never had."""
    import shutil
    import subprocess
    import sys

    a, b, _ = two_dirs
    attach(capsys, b)
    end = produce(a, "A", 1)[1]  # (the engine's own writes: what a pass finds is the guard's)

    def produce_cli(config: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tiered.cli", "--config", str(config), "produce", "-t", TOPIC],
                              input="late\n", capture_output=True, text=True, timeout=120)

    done = produce_cli(a)
    assert done.returncode == 1 and "nothing written" in done.stderr and "lost ownership" in done.stderr, done.stderr
    with LogManager(LogConfig.from_properties(str(a)), start_scheduler=False, read_only=True) as manager:
        log = manager.get_log(TOPIC, 0)
        assert log is not None and log.log_end_offset == end
    # C: a data dir given the topic's partition dir (its topic id) by hand, never attached.
    c = write_config(tmp_path / "c.properties", local_tier_props(tmp_path / "c", **{"rsm.config.dir": str(bucket_of(a))}))
    (tmp_path / "c" / "data").mkdir(parents=True)
    source = tmp_path / "c-src"
    shutil.copytree(tmp_path / "a" / "data" / f"{TOPIC}-0", source)
    (tmp_path / "c" / "data" / f"{TOPIC}-0").mkdir()
    for name in ("partition.metadata", "tiered-topic.properties"):
        shutil.copy(source / name, tmp_path / "c" / "data" / f"{TOPIC}-0" / name)
    done = produce_cli(c)
    assert done.returncode == 1 and "never claimed it" in done.stderr and "tiered attach" in done.stderr, done.stderr
    assert "lost ownership" not in done.stderr
    rc, out, _ = cli(capsys, "--config", str(c), "status")
    assert rc == 1 and "OWNED BY ANOTHER DATA DIR" in out and "OWNERSHIP LOST" not in out, out
    # The owner writes.
    done = produce_cli(b)
    assert done.returncode == 0 and "produced 1 records" in done.stderr, done.stderr


def bucket_of(config: Path) -> str:
    from local.config import read_properties

    return str(read_properties(config)["rsm.config.dir"])


def test_a_data_dir_tiering_its_own_topic_of_a_name_the_bucket_holds_is_warned(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """B produced to ev (A's topic in the bucket) without attaching it: B made a topic of its own, whose copies went
    beside A's under a second topic id, and nothing said so (a helper found out only at a later attach)."""
    import io

    a, b, bucket = two_dirs
    with caplog.at_level(logging.WARNING, logger="tiered"):  # (said by produce, before its records are written)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"first\n")))
            rc, _, err = cli(capsys, "--config", str(b), "produce", "-t", TOPIC, "--topic-config",
                             "remote.storage.enable=true")
        assert rc == 0, err
        warned = [r.getMessage() for r in caplog.records if "another topic named ev" in r.getMessage()]
        assert len(warned) == 1 and "tiered attach -t ev" in warned[0], caplog.text
    produce(b, "B", 40)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tiered"):
        rc, out, err = cli(capsys, "--config", str(b), "offload")
    assert rc == 0, out + err
    warned = [r.getMessage() for r in caplog.records if "another topic named ev" in r.getMessage()]
    assert len(warned) == 1 and "tiered attach -t ev" in warned[0], caplog.text  # (and at the first claim)
    from local.checkpoint import PartitionMetadataFile

    a_id = PartitionMetadataFile(bucket.parent / "a" / "data" / f"{TOPIC}-0" / "partition.metadata").read()
    assert _kafka_uuid(a_id) in warned[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tiered"):  # (said at the first claim only)
        assert cli(capsys, "--config", str(a), "offload")[0] == 0
    assert "another topic named" not in caplog.text


def _kafka_uuid(topic_id: uuid.UUID) -> str:
    from tiered.layout import kafka_uuid

    return kafka_uuid(topic_id)


def test_a_deposed_data_dir_is_told_where_its_history_left_the_partitions_not_the_newest_claims_start(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The lost-ownership line and status named the newest claim's start offset as where the deposed data dir's
    records stop counting; the new owner claims again at every start, so after one restart of it the line said
    9000 where A's history had left the partition at 3000, and the documented recovery (export what the local data
    holds past that, move the partition dir aside) dropped 6000 acknowledged records (a helper's finding)."""
    a, b, _ = two_dirs
    highest = RemoteLogStateFile(tmp_path / "a" / "data" / f"{TOPIC}-0").read().highest_remote_offset
    attach(capsys, b)
    _, b_end = produce(b, "B", 20)
    with open_log_manager(LogConfig.from_properties(str(b)), start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        assert rlm is not None and rlm.renew_ownership(manager.all_logs()) == 1  # (as tiered run's start does)
    produce(a, "A", 20)
    rc, out, err = cli(capsys, "--config", str(a), "offload")
    assert rc == 1 and f"from offset {b_end})" in err, err  # the newest claim: B's restart
    assert f"its records from offset {highest + 1} on are not the partition's" in err, err
    rc, out, err = cli(capsys, "--config", str(a), "status", "--json")
    [part] = json.loads(out)["data_dirs"][0]["partitions"]
    assert rc == 1 and part["remote"]["ownership"]["diverged_at"] == highest + 1
    rc, out, err = cli(capsys, "--config", str(a), "status")
    assert f"records from offset {highest + 1} on are only this data dir's" in out, out


def test_the_former_owner_says_it_lost_the_partition_once_and_metrics_show_it(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    a, b, _ = two_dirs
    attach(capsys, b)
    produce(a, "A", 40)
    with open_log_manager(LogConfig.from_properties(str(a)), start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        assert rlm is not None
        caplog.set_level(logging.ERROR, logger="tiered")
        for _ in range(3):
            result = rlm.run_once(manager.all_logs())
            assert (result.segments_copied, result.segments_deleted, result.not_owned) == (0, 0, 1)
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and "lost ownership" in errors[0]
        value = rlm.metrics.registry.get_sample_value(
            "RemoteLogOwnership", {"topic": TOPIC, "partition": "0", "RemoteLogOwnership": "lost"})
        assert value == 1.0


# ------------------------------------------------------------------------------------------------------------
# Segments whose deletion started


def _store_and_log(tmp_path: Path) -> tuple[Path, Path]:
    config = write_config(tmp_path / "a.properties", local_tier_props(tmp_path / "a", **{
        "rsm.config.dir": str(tmp_path / "bucket")}))
    with open_log_manager(LogConfig.from_properties(str(config)), start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
        for i in range(90):
            log.append(MemoryRecords.build([SimpleRecord(None, f"v{i}".encode() + b"x" * 30_000)]))
        log.roll()
        rlm = remote_log_manager_of(manager)
        assert rlm is not None and rlm.run_once(manager.all_logs()).segments_copied >= 3
        manager.cleanup_logs()
    return config, tmp_path / "bucket"


def _mark_first_delete_started(bucket: Path) -> RemoteLogSegmentMetadata:
    rsm = LocalDirRemoteStorageManager()
    rsm.configure({"dir": str(bucket)})
    store = RemoteLogMetadataStore.in_bucket(rsm)
    [tip] = {md.topic_id_partition for md in _all_segments(store, bucket)}
    first = store.readable_segments(tip)[0]
    store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
        first.remote_log_segment_id, 0, None, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, 0))
    return first


def _all_segments(store: RemoteLogMetadataStore, bucket: Path) -> list[RemoteLogSegmentMetadata]:
    from tiered.metadata import decode_metadata

    return [decode_metadata(p.read_bytes()) for p in bucket.rglob("*.json") if not p.name.startswith("owner-")]


def test_a_segment_whose_deletion_started_is_never_read_counted_or_adopted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, bucket = _store_and_log(tmp_path)
    rc, out, _ = cli(capsys, "--config", str(config), "status", "--json")
    [before] = json.loads(out)["data_dirs"][0]["partitions"]
    first = _mark_first_delete_started(bucket)
    assert first.start_offset == 0
    # Read: its offsets are not served from its objects (still in the bucket).
    assert list(bucket.rglob(f"*{first.start_offset:020d}-*.log"))
    rc, records, err = consume(capsys, config, "--offset", "0")
    assert not any(r["offset"] <= first.end_offset for r in records)
    # Counted: status leaves it out of the remote segments, bytes and log start.
    rc, out, _ = cli(capsys, "--config", str(config), "status", "--json")
    [after] = json.loads(out)["data_dirs"][0]["partitions"]
    assert after["remote"]["segments"] == before["remote"]["segments"] - 1
    assert after["remote"]["size_bytes"] == before["remote"]["size_bytes"] - first.segment_size_in_bytes
    assert after["remote"]["log_start_offset"] == first.end_offset + 1
    # Adopted: a new data dir attaching the topic starts after it.
    other = write_config(tmp_path / "b.properties", local_tier_props(tmp_path / "b", **{"rsm.config.dir": str(bucket)}))
    rc, out, err = cli(capsys, "--config", str(other), "attach", "-t", TOPIC)
    assert rc == 0, err
    assert f"log start offset {first.end_offset + 1}," in out
    assert f"{after['remote']['segments']} remote segment(s)" in out


def test_a_failed_copy_left_delete_started_is_never_read(tmp_path: Path) -> None:
    """A copy that failed after uploading, whose cleanup failed too, sits in DELETE_SEGMENT_STARTED with whole
    objects: no read may use it (and the next pass deletes it)."""
    rsm = LocalDirRemoteStorageManager()
    rsm.configure({"dir": str(tmp_path / "bucket")})
    store = RemoteLogMetadataStore.in_bucket(rsm)
    tip = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    good = _md(tip, 0, 99)
    bad = _md(tip, 100, 199)
    for md in (good, bad):
        store.add_remote_log_segment_metadata(md)
    store.update_remote_log_segment_metadata(_update(good, RemoteLogSegmentState.COPY_SEGMENT_FINISHED))
    store.update_remote_log_segment_metadata(_update(bad, RemoteLogSegmentState.DELETE_SEGMENT_STARTED))
    for reader in (store, RemoteLogMetadataStore.in_bucket(rsm)):  # this process's view, and a new reader's
        assert [m.start_offset for m in reader.readable_segments(tip)] == [0]
        assert reader.remote_log_segment_metadata(tip, 150) is None
        assert [m.start_offset for m in reader.find_stale_copies(tip)] == [100]


def _md(tip: TopicIdPartition, start: int, end: int, epochs: dict[int, int] | None = None) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), start, end, 0, 0, 0, 10,
                                    epochs if epochs is not None else {0: start})


def _update(md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 0, None, state, 0)


# ------------------------------------------------------------------------------------------------------------
# Claims and the lineage rule


def test_two_claimants_of_one_epoch_cannot_both_win(tmp_path: Path) -> None:
    rsm = LocalDirRemoteStorageManager()
    rsm.configure({"dir": str(tmp_path / "bucket")})
    tip = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def claim(i: int) -> None:
        store = RemoteLogMetadataStore.in_bucket(rsm)
        record = OwnerRecord(3, f"{i:032x}", ((0, 0), (3, 100)), 0)
        barrier.wait()
        try:
            store.claim_ownership(tip, record)
            outcomes.append(record.owner_id)
        except ObjectExistsError:
            outcomes.append("lost")

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if o != "lost"]
    assert len(winners) == 1 and len(outcomes) == 8
    [record] = RemoteLogMetadataStore.in_bucket(rsm).owner_records(tip)
    assert record.owner_id == winners[0]


def test_readers_follow_the_newest_owner_records_lineage(tmp_path: Path) -> None:
    rsm = LocalDirRemoteStorageManager()
    rsm.configure({"dir": str(tmp_path / "bucket")})
    store = RemoteLogMetadataStore.in_bucket(rsm)
    tip = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    a1, a2 = _md(tip, 0, 99), _md(tip, 100, 199)  # A, epoch 0
    for md in (a1, a2):
        store.add_remote_log_segment_metadata(md)
        store.update_remote_log_segment_metadata(_update(md, RemoteLogSegmentState.COPY_SEGMENT_FINISHED))
    assert [m.start_offset for m in store.readable_segments(tip)] == [0, 100]  # no owner records: everything
    store.claim_ownership(tip, OwnerRecord(0, "a" * 32, ((0, 0),), 0))
    store.claim_ownership(tip, OwnerRecord(1, "b" * 32, ((0, 0), (1, 100)), 0))  # B adopted up to 99
    reader = RemoteLogMetadataStore.in_bucket(rsm)
    assert [m.start_offset for m in reader.readable_segments(tip)] == [0]
    assert reader.remote_log_segment_metadata(tip, 150) is None
    assert [m.remote_log_segment_id for m in reader.foreign_segments(tip)] == [a2.remote_log_segment_id]
    b1 = _md(tip, 100, 149, {1: 100})
    reader.add_remote_log_segment_metadata(b1)
    reader.update_remote_log_segment_metadata(_update(b1, RemoteLogSegmentState.COPY_SEGMENT_FINISHED))
    found = reader.remote_log_segment_metadata(tip, 120)
    assert found is not None and found.remote_log_segment_id == b1.remote_log_segment_id
    # The view of the first store learns the claim at its next listing of the owner records.
    store.owner_records(tip)
    assert store.remote_log_segment_metadata(tip, 150) is None


def test_claim_lineage_keeps_the_epochs_before_the_log_end_then_the_owner_epoch() -> None:
    assert claim_lineage([(0, 0), (3, 500)], 900, 4) == ((0, 0), (3, 500), (4, 900))
    assert claim_lineage([(0, 0), (3, 500)], 900, 3) == ((0, 0), (3, 500))
    assert claim_lineage([], 0, 0) == ((0, 0),)
    assert claim_lineage([(0, 0), (2, 950)], 900, 5) == ((0, 0), (5, 900))  # an epoch past the end is not adopted


def _model_within(md: RemoteLogSegmentMetadata, lineage: tuple[tuple[int, int], ...]) -> bool:
    """Offset by offset: each offset's epoch in the segment must be the lineage's epoch there (the first entry
    reaching down to 0), or an epoch from the owner's on, from the owner's start."""
    owner, owner_start = lineage[-1]
    seg = sorted(md.segment_leader_epochs.items(), key=lambda kv: kv[1])
    for offset in range(md.start_offset, md.end_offset + 1):
        epoch = [e for e, s in seg if s <= offset][-1]
        if epoch >= owner:
            if len(lineage) > 1 and offset < owner_start:
                return False
            continue
        expected = [e for e, s in lineage if s <= offset] or [lineage[0][0]]
        if expected[-1] != epoch:
            return False
    return True


@st.composite
def _lineage_and_segment(draw: st.DrawFn) -> tuple[tuple[tuple[int, int], ...], RemoteLogSegmentMetadata]:
    epochs = sorted(draw(st.sets(st.integers(0, 8), min_size=1, max_size=4)))
    starts = sorted(draw(st.lists(st.integers(0, 60), min_size=len(epochs), max_size=len(epochs), unique=True)))
    lineage = tuple(zip(epochs, starts))
    start = draw(st.integers(0, 70))
    end = draw(st.integers(start, start + 30))
    n_cuts = draw(st.integers(0, min(2, end - start)))
    cuts = sorted(draw(st.lists(st.integers(start + 1, end), min_size=n_cuts, max_size=n_cuts, unique=True))) if n_cuts else []
    seg_epochs = sorted(draw(st.sets(st.integers(0, 9), min_size=n_cuts + 1, max_size=n_cuts + 1)))
    tip = TopicIdPartition(uuid.UUID(int=1), TOPIC, 0)
    return lineage, _md(tip, start, end, dict(zip(seg_epochs, [start, *cuts])))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # a busy machine
@given(_lineage_and_segment())
def test_within_lineage_agrees_with_an_offset_by_offset_model(
    case: tuple[tuple[tuple[int, int], ...], RemoteLogSegmentMetadata]
) -> None:
    lineage, md = case
    assert within_lineage(md, lineage) == _model_within(md, lineage)


def test_an_owner_record_round_trips_and_refuses_what_is_not_one() -> None:
    record = OwnerRecord(2, "c" * 32, ((0, 0), (2, 10)), 5, "host", ("/d1", "/d2"))
    assert OwnerRecord.decode(record.encode()) == record
    for bad in (b"{}", b"[]", b"\xff", b'{"version":9}', record.encode().replace(b'"lineage":[[0,0],[2,10]]',
                                                                                 b'"lineage":[[0,0]]')):
        with pytest.raises(ValueError, match="owner record"):
            OwnerRecord.decode(bad)


def _config_and_bucket(tmp_path: Path) -> tuple[Path, LocalDirRemoteStorageManager]:
    """A data dir's broker config over a local-directory bucket, and that bucket's plugin."""
    config = write_config(tmp_path / "a.properties", local_tier_props(tmp_path / "a", **{
        "rsm.config.dir": str(tmp_path / "bucket")}))
    rsm = LocalDirRemoteStorageManager()
    rsm.configure({"dir": str(tmp_path / "bucket")})
    return config, rsm


def test_the_copy_and_expiration_tasks_claiming_at_once_both_find_this_data_dir_the_owner(tmp_path: Path) -> None:
    """The first claim of a partition, by its copy and expiration tasks at the same moment: the task whose conditional
    put loses to the other's must see the winner's claim as this data dir's, not report the partition lost (the soak
    once logged "lost ownership ... (this data dir never claimed it)" for its own claim)."""
    from tiered.ownership import OWNER, OwnershipGuard
    from tiered.remote_tier_parts import topic_id_partition

    config, rsm = _config_and_bucket(tmp_path)
    claimed, other_looked = threading.Event(), threading.Event()

    class SlowFirstClaim(RemoteLogMetadataStore):
        """The first claim, once written, waits until the other task has looked at the owner records (it never
        does while the first task holds the partition's claim: then the wait ends at its bound)."""

        def claim_ownership(self, tip: TopicIdPartition, record: OwnerRecord) -> None:
            super().claim_ownership(tip, record)
            if not claimed.is_set():
                claimed.set()
                other_looked.wait(2)

        def owner_records(self, tip: TopicIdPartition) -> list[OwnerRecord]:
            if claimed.is_set():
                other_looked.set()
            return super().owner_records(tip)

    with open_log_manager(LogConfig.from_properties(str(config)), start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "true"})
        tip = topic_id_partition(log)
        guard = OwnershipGuard(SlowFirstClaim(rsm.store, rsm.prefix), clock=lambda: 0, store_name="bucket")
        outcomes: list[object] = []

        def ensure() -> None:
            try:
                outcomes.append(guard.ensure_owner(log, tip).state)
            except Exception as e:  # the outcome under test
                outcomes.append(e)

        first = threading.Thread(target=ensure)
        first.start()
        assert claimed.wait(30)
        second = threading.Thread(target=ensure)
        second.start()
        first.join()
        second.join()
        assert outcomes == [OWNER, OWNER]
        assert guard.states()[tip].state == OWNER
        assert len(RemoteLogMetadataStore.in_bucket(rsm).owner_records(tip)) == 1


def test_only_the_owner_keeps_the_columnar_copy(two_dirs: tuple[Path, Path, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Both data dirs ask for the topic's columnar copy (in the directory beside their shared bucket): the one that
    lost the partition writes nothing there, the owner writes it."""
    a, b, bucket = two_dirs
    attach(capsys, b)
    columnar = bucket.with_name(bucket.name + "-columnar") / f"{TOPIC}-0"
    for config in (a, b):
        rc, _, err = cli(capsys, "--config", str(config), "topics", "alter", "-t", TOPIC, "--add-config",
                         "remote.log.columnar.enable=true")
        assert rc == 0, err
    produce(a, "A", 40)
    with open_log_manager(LogConfig.from_properties(str(a)), start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        assert rlm is not None and rlm.run_once(manager.all_logs()).not_owned == 1
    assert not columnar.exists()
    produce(b, "B", 40)
    with open_log_manager(LogConfig.from_properties(str(b)), start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        assert rlm is not None and rlm.run_once(manager.all_logs()).not_owned == 0
        log = manager.get_log(TOPIC, 0)
        assert log is not None
        finished = rlm.finished_segments(rlm.topic_id_partition(log))
    from tiered.columnar.manifest import read_manifest

    manifest = read_manifest(columnar)
    assert manifest is not None and manifest.files
    assert manifest.files[-1].end_offset == finished[-1].end_offset


def test_events_deleted_between_the_listing_and_their_read_are_skipped_not_a_failed_load(tmp_path: Path) -> None:
    """A partition's view is loaded by listing its events, then reading each: the expiration task deleting a segment
    meanwhile removes some (the soak's copy cleanup failed on it, a task failure every few seconds)."""
    tip = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    store = LocalDirStore()
    store.configure({"dir": str(tmp_path / "bucket")})
    writer = RemoteLogMetadataStore(store)
    kept, gone = _md(tip, 0, 9), _md(tip, 10, 19)
    for md in (kept, gone):
        writer.add_remote_log_segment_metadata(md)
        writer.update_remote_log_segment_metadata(_update(md, RemoteLogSegmentState.COPY_SEGMENT_FINISHED))

    class DeletedMeanwhile(LocalDirStore):
        def list(self, prefix: str) -> list[str]:
            keys = super().list(prefix)
            self.delete_many([k for k in keys if "/00000000000000000010-" in k])  # after the listing
            return keys

    racing = DeletedMeanwhile()
    racing.configure({"dir": str(tmp_path / "bucket")})
    view = RemoteLogMetadataStore(racing).load(tip)
    assert list(view) == [kept.remote_log_segment_id.id]


def test_a_former_owner_reading_what_the_owners_retention_removed_gets_out_of_range(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A keeps serving (its remote tier open, its view of the metadata loaded) while B, the new owner, deletes the
    first remote segments by retention. A's reads of those offsets raised the store's raw "no object" (HTTP 500 on
    run's endpoint), and a read loading the view afresh called it a gap in the remote tier: they are out of range
    now, naming the owner and where the remote log starts."""
    from local.errors import OffsetOutOfRangeError
    from local.fetch import FetchIsolation
    a, b, _ = two_dirs
    with open_log_manager(LogConfig.from_properties(str(a)), start_scheduler=False, read_only=True) as manager:
        log = manager.get_log(TOPIC, 0)
        assert log is not None
        assert log.read(0, 1000, FetchIsolation.HIGH_WATERMARK, True).records.size_in_bytes > 0  # the view is loaded
        attach(capsys, b)
        rc, _, err = cli(capsys, "--config", str(b), "topics", "alter", "-t", TOPIC, "--add-config", "retention.bytes=1")
        assert rc == 0, err
        produce(b, "B", 40)
        rc, out, err = cli(capsys, "--config", str(b), "offload")
        assert rc == 0, err
        assert "deleted 0 remote segment(s)" not in out
        with pytest.raises(OffsetOutOfRangeError, match=r"the partition's owner \(owner epoch 1.*removed it by "
                                                         r"retention; the remote log starts at") as caught:
            log.read(40, 1000, FetchIsolation.HIGH_WATERMARK, True)
        assert caught.value.context["log_start_offset"] > 40
    rc, _, err = consume(capsys, a, "--offset", "0")  # a fresh view: the same answer, not "a gap"
    assert rc == 1 and "removed it by retention" in err and "gap" not in err


def test_a_damaged_owner_record_is_named_as_such_not_as_a_wrong_bucket(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """One flipped byte in the owner record sent the operator looking for a configuration error ("a wrong bucket or
    rsm.config.prefix?") that did not exist; the record is named as damaged now, and nothing is deleted."""
    a, _, bucket = two_dirs
    [record] = sorted(bucket.rglob("__remote_log_metadata/owner-*.json"))
    raw = bytearray(record.read_bytes())
    at = raw.index(b'"owner_epoch"') + len(b'"owner_epoch"')
    raw[at] ^= 1  # ':' -> ';'
    record.write_bytes(bytes(raw))
    before = remote_logs(bucket)
    rc, _, err = consume(capsys, a, "--offset", "0")
    assert rc == 1
    assert record.name in err and "cannot be read (damaged)" in err and "wrong bucket" not in err
    rc, _, err = cli(capsys, "--config", str(a), "offload")
    assert rc == 1 and "cannot be read (damaged)" in err
    assert remote_logs(bucket) == before


def test_a_copy_of_a_data_dir_writing_to_the_same_bucket_is_fenced_and_loses_nothing(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A data dir copied to a second machine (a cloned VM, a restored backup) claims the partition with the same
    owner epoch and id. Both wrote other records at the same offsets; the copy took the other's remote segments
    for copies of its own, its local retention deleted its only copy of its records, and reads returned the
    other machine's records, silently. Now the copy finds the remote segments at its offsets hold other bytes
    than its segments: it is fenced (copies and deletes nothing, keeps every local segment, exit 1 naming why)."""
    import shutil

    a, _, bucket = two_dirs
    clone_dir = tmp_path / "clone"
    shutil.copytree(tmp_path / "a", clone_dir)
    clone = write_config(tmp_path / "clone.properties",
                         local_tier_props(clone_dir, **{"rsm.config.dir": str(bucket)}))
    first, _ = produce(a, "A", 40)
    produce(clone, "C", 60)
    rc, _, err = cli(capsys, "--config", str(a), "offload")
    assert rc == 0, err
    objects = sorted(p.relative_to(bucket) for p in bucket.rglob("*") if p.is_file())
    rc, out, err = cli(capsys, "--config", str(clone), "offload")
    assert rc == 1
    assert "holds other records than this data dir's at those offsets" in err and "a copy of this data dir" in err
    assert "copied 0 segment(s)" in out and "local retention deleted 0 segment(s)" in out
    assert sorted(p.relative_to(bucket) for p in bucket.rglob("*") if p.is_file()) == objects
    rc, records, err = consume(capsys, clone, "--offset", str(first + 5), "--max-messages", "1")
    assert rc == 0, err
    assert str(records[0]["value"]).startswith(f"C-{first + 5}x")  # its own record, from its kept local segment
    rc, records, err = consume(capsys, a, "--offset", str(first + 5), "--max-messages", "1")
    assert rc == 0 and str(records[0]["value"]).startswith(f"A-{first + 5}x"), err
    rc, out, err = cli(capsys, "--config", str(clone), "verify", "--remote", "--json")
    assert rc == 1
    kinds = {p["kind"] for part in json.loads(out)["partitions"] for p in part["problems"]}
    assert kinds == {"diverged"}
    rc, out, err = cli(capsys, "--config", str(a), "verify", "--remote")
    assert rc == 0, out + err


def test_the_content_check_reads_a_segment_of_2_gib_or_more_by_its_checksums_size() -> None:
    """The metadata's segment size is an int32, clamped for a segment of 2 GiB or more (KIP-1333's large index):
    the content check compares the size the checksums recorded, and never calls such a segment foreign for it."""
    from local.crc import crc32c
    from tiered.checksums import ObjectChecksums, SegmentChecksums
    from tiered.ownership import segment_differs

    size, chunk = 3 * 2**30 + 5, 2**20
    chunks = -(-size // chunk)

    class Big:
        def __init__(self, total: int) -> None:
            self.size, self.log = total, self

        def read(self, position: int, n: int) -> bytes:
            return bytes([position // chunk % 251]) * n

    def crc(n: int) -> int:
        return crc32c(bytes([n % 251]) * min(chunk, size - n * chunk))

    crcs = tuple(crc(n) if n in (0, chunks - 1) else 0 for n in range(chunks))
    sums = SegmentChecksums(chunk, {".log": ObjectChecksums(size, crcs)})
    tip = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), 0, 99, 0, 0, 0, 2**31 - 1, {0: 0})
    assert segment_differs(Big(size), md, sums) is None
    assert segment_differs(Big(size - 1), md, sums) == f"{size - 1} bytes here, {size} there"
    assert segment_differs(Big(size), md, None) is None  # no checksums: a clamped size tells nothing
    assert "differ" in str(segment_differs(Big(size), md, SegmentChecksums(chunk, {".log": ObjectChecksums(
        size, tuple(c ^ 1 for c in crcs))})))


def test_a_listener_whose_data_dir_lost_the_partition_refuses_writes_as_a_deposed_leader(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """After another data dir attached the partition, `tiered run` on the former owner kept acknowledging writes:
    records that would never be tiered, at offsets where the owner has others. Once its remote pass finds the
    partition lost, a produce is answered NOT_LEADER_OR_FOLLOWER (Kafka's answer of a deposed leader)."""
    from kio.schema.errors import ErrorCode

    from tests.kafkautil import RawClient, produce_request
    from tiered.kafka import start_listener

    a, b, _ = two_dirs
    config = LogConfig.from_properties(str(a))
    records = bytes(MemoryRecords.build([SimpleRecord(b"late")]))
    with open_log_manager(config, start_scheduler=False) as manager:
        kafka = start_listener(manager, config, "127.0.0.1", 0)
        try:
            rlm = remote_log_manager_of(manager)
            assert rlm is not None
            with RawClient(kafka.address) as client:
                (p,) = client.call(0, 9, produce_request(9, TOPIC, 0, records)).responses[0].partition_responses
                assert p.error_code == ErrorCode.none
            attach(capsys, b)
            rlm.run_once(manager.all_logs())  # the pass that finds it lost
            with RawClient(kafka.address) as client:
                (p,) = client.call(0, 9, produce_request(9, TOPIC, 0, records)).responses[0].partition_responses
                assert p.error_code == ErrorCode.not_leader_or_follower
                assert "lost ownership of its remote data" in p.error_message
            from tiered.http_server import Endpoint, HttpError

            with pytest.raises(HttpError, match="lost ownership of its remote data") as refused:
                Endpoint(manager).produce(TOPIC, 0, b'{"value": "late"}', "none")  # run's HTTP endpoint alike
            assert refused.value.status == 409
        finally:
            kafka.stop()


@pytest.mark.parametrize("answer", ["500", "timeout"])
def test_a_claim_stored_whose_answer_was_lost_is_this_data_dirs(tmp_path: Path, answer: str) -> None:
    """The store wrote the first claim, but its answer was lost (a 500 after the write, a read timeout): the data
    dir took its own claim, read back at the next pass, for another owner's and fenced the partition for good
    (offload exit 1, HTTP 409 to produces: a helper's S3 fault pass). The records are read back at once."""
    from tiered.errors import RemoteStorageError
    from tiered.ownership import OWNER, OwnershipGuard
    from tiered.remote_tier_parts import topic_id_partition

    config, rsm = _config_and_bucket(tmp_path)

    class LostAnswer(RemoteLogMetadataStore):
        def claim_ownership(self, tip: TopicIdPartition, record: OwnerRecord) -> None:
            super().claim_ownership(tip, record)  # written...
            if answer == "500":
                raise RemoteStorageError("PutObject failed: 500 InternalError (after 3 attempts)")
            raise TimeoutError("Read timeout on endpoint URL")  # ...and the answer never came

    with open_log_manager(LogConfig.from_properties(str(config)), start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "true"})
        tip = topic_id_partition(log)
        guard = OwnershipGuard(LostAnswer(rsm.store, rsm.prefix), clock=lambda: 0, store_name="bucket")
        assert guard.ensure_owner(log, tip).state == OWNER
        owner = guard.states()[tip].owner
        assert owner is not None and log.remote_log_state.owner_id == owner.owner_id  # remembered as its own
        again = OwnershipGuard(RemoteLogMetadataStore(rsm.store, rsm.prefix), clock=lambda: 0, store_name="bucket")
        assert again.ensure_owner(log, tip).state == OWNER  # and so at the next pass


class _HeldClaims(RemoteLogMetadataStore):
    """A store whose claim writes reach it only when :meth:`land` says so (a PUT held past the client's read
    timeout, delivered later): the claimant gets a timeout and, reading back, finds nothing of its claim yet."""

    held: list[tuple[TopicIdPartition, OwnerRecord]]

    def claim_ownership(self, tip: TopicIdPartition, record: OwnerRecord) -> None:
        self.held.append((tip, record))
        raise TimeoutError("Read timeout on endpoint URL")

    def land(self) -> None:
        for tip, record in self.held:
            try:
                super().claim_ownership(tip, record)
            except ObjectExistsError:
                pass  # (a conditional create: the epoch was claimed meanwhile)
        self.held.clear()


@pytest.mark.parametrize("order", ["lands_before_next_pass", "lands_after_a_retry"])
def test_a_claim_that_lands_after_the_read_back_is_this_data_dirs(tmp_path: Path, order: str) -> None:
    """A claim PUT held past the read timeout reached the store after the claimant had read the owner records back
    (a helper's fault proxy): the next pass found an owner record it did not know and fenced the partition for good
    ("this data dir never claimed it"). The claim is remembered as pending before it is written: found later, it is
    this data dir's; made again meanwhile, it is the same epoch and id."""
    from tiered.ownership import OWNER, OwnershipGuard
    from tiered.remote_tier_parts import topic_id_partition

    config, rsm = _config_and_bucket(tmp_path)
    held = _HeldClaims(rsm.store, rsm.prefix)
    held.held = []
    plain = RemoteLogMetadataStore(rsm.store, rsm.prefix)
    with open_log_manager(LogConfig.from_properties(str(config)), start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "true"})
        tip = topic_id_partition(log)
        with pytest.raises(TimeoutError):
            OwnershipGuard(held, clock=lambda: 0, store_name="bucket").ensure_owner(log, tip)
        (_, first), = held.held
        state = RemoteLogStateFile(log.dir).read()  # durable before the write
        assert (state.pending_owner_epoch, state.pending_owner_id) == (first.owner_epoch, first.owner_id)
        assert not state.claimed and plain.owner_records(tip) == []
        if order == "lands_before_next_pass":
            held.land()
            guard = OwnershipGuard(plain, clock=lambda: 0, store_name="bucket")
            assert guard.ensure_owner(log, tip).state == OWNER
        else:
            guard = OwnershipGuard(plain, clock=lambda: 0, store_name="bucket")
            assert guard.ensure_owner(log, tip).state == OWNER  # claimed again: the same epoch and id
            held.land()  # the late PUT finds its epoch taken
            assert guard.ensure_owner(log, tip).state == OWNER
        (record,) = plain.owner_records(tip)
        assert (record.owner_epoch, record.owner_id) == (first.owner_epoch, first.owner_id)
        state = RemoteLogStateFile(log.dir).read()
        assert (state.owner_epoch, state.owner_id) == (first.owner_epoch, first.owner_id) and not state.claim_pending
        assert log.remote_log_state == state


def test_a_pending_claim_that_lands_is_shown_as_this_data_dirs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """status and verify, before the next pass remembers the landed claim: the owner, not "never claimed it"."""
    from tiered.ownership import OwnershipGuard
    from tiered.remote_tier_parts import topic_id_partition

    config, rsm = _config_and_bucket(tmp_path)
    held = _HeldClaims(rsm.store, rsm.prefix)
    held.held = []
    with open_log_manager(LogConfig.from_properties(str(config)), start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "true"})
        log.append(MemoryRecords.build([SimpleRecord(b"x")]))
        with pytest.raises(TimeoutError):
            OwnershipGuard(held, clock=lambda: 0, store_name="bucket").ensure_owner(log, topic_id_partition(log))
        state_file = RemoteLogStateFile(log.dir)
    held.land()
    assert state_file.read().claim_pending
    rc, out, err = cli(capsys, "--config", str(config), "status", "--json")
    [part] = json.loads(out)["data_dirs"][0]["partitions"]
    assert rc == 0 and part["remote"]["ownership"]["state"] == "owner", (out, err)
    rc, out, err = cli(capsys, "--config", str(config), "verify", "--remote")
    assert rc == 0 and "not_owner" not in out + err, out + err
    assert state_file.read().claim_pending  # (remembered as made at the next pass)


def test_a_pending_claim_round_trips_and_is_checked() -> None:
    from local.errors import KafkaStorageError

    for state in (RemoteLogState(True, -1, pending_owner_epoch=0, pending_owner_id="a" * 32),
                  RemoteLogState(True, 41, 2, "b" * 32, 3, "c" * 32)):
        text = state.encode()
        assert text.startswith(b"version: 2\n") and RemoteLogState.decode(text) == state
    assert RemoteLogState(True, 41, 2, "b" * 32).encode().startswith(b"version: 1\n")  # as before, with no pending
    for bad in (b"version: 2\nremote_storage_enabled: true\nhighest_remote_offset: -1\n",
                b"version: 2\nremote_storage_enabled: true\nhighest_remote_offset: -1\npending_owner_epoch: -1\n"
                b"pending_owner_id: x\n",
                b"version: 1\nremote_storage_enabled: true\nhighest_remote_offset: -1\nowner_epoch: 1\nowner_id: x\n"
                b"pending_owner_epoch: 2\npending_owner_id: y\n"):
        with pytest.raises(KafkaStorageError, match="malformed"):
            RemoteLogState.decode(bad)


def test_a_claim_whose_write_failed_is_still_an_error(tmp_path: Path) -> None:
    from tiered.errors import RemoteStorageError
    from tiered.ownership import OwnershipGuard
    from tiered.remote_tier_parts import topic_id_partition

    config, rsm = _config_and_bucket(tmp_path)

    class Down(RemoteLogMetadataStore):
        def claim_ownership(self, tip: TopicIdPartition, record: OwnerRecord) -> None:
            raise RemoteStorageError("PutObject failed: 503 SlowDown")  # nothing written

    with open_log_manager(LogConfig.from_properties(str(config)), start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "true"})
        guard = OwnershipGuard(Down(rsm.store, rsm.prefix), clock=lambda: 0, store_name="bucket")
        with pytest.raises(RemoteStorageError, match="503"):
            guard.ensure_owner(log, topic_id_partition(log))


def test_an_attach_whose_claim_was_not_answered_says_it_may_land(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store took no answer to attach's claim (a timeout): exit 1 with one line that says the claim may still land
    and depose the owner, and what to do (a helper's fault pass found the owner deposed by a failed attach)."""
    _, b, _ = two_dirs

    def timeout(self: RemoteLogMetadataStore, tip: TopicIdPartition, record: OwnerRecord) -> None:
        raise TimeoutError("Read timeout on endpoint URL")

    monkeypatch.setattr(RemoteLogMetadataStore, "claim_ownership", timeout)
    rc, _, err = cli(capsys, "--config", str(b), "attach", "-t", TOPIC)
    assert rc == 1 and "Traceback" not in err
    assert "did not answer the ownership claim of owner epoch 1" in err and "run attach again" in err, err
    assert not (tmp_path / "b" / "data" / f"{TOPIC}-0").exists()


def test_a_pass_that_cannot_check_ownership_says_why(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """'cannot check the ownership of ev-0's remote data; retried at the next pass' said nothing of the cause (a 503,
    a timeout) without -v (a helper's S3 fault pass): the line itself names it now, for the copy and the expiration."""
    from tiered.errors import RemoteStorageError

    config, _ = _config_and_bucket(tmp_path)

    def slow_down(self: RemoteLogMetadataStore, tip: TopicIdPartition) -> list[OwnerRecord]:
        raise RemoteStorageError("S3 list failed: SlowDown (503)")

    with open_log_manager(LogConfig.from_properties(str(config)), start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, {"remote.storage.enable": "true"})
        log.append(MemoryRecords.build([SimpleRecord(b"v")]))
        log.roll()  # a closed segment to copy
        rlm = remote_log_manager_of(manager)
        assert rlm is not None
        monkeypatch.setattr(RemoteLogMetadataStore, "owner_records", slow_down)
        with caplog.at_level(logging.WARNING, logger="tiered"):
            result = rlm.run_once([log])
    lines = [r.getMessage() for r in caplog.records if "cannot check the ownership" in r.getMessage()]
    assert result.copy_errors == 1 and len(lines) == 2, lines
    assert all("RemoteStorageError: S3 list failed: SlowDown (503)" in line for line in lines), lines


def test_a_damaged_newest_owner_record_is_said_so_and_attach_claims_above_it(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
) -> None:
    """One flipped bit in the newest owner record: status said the partition was lost to an older owner, attach
    elsewhere claimed the damaged record's epoch, lost to it, and said "another data dir took ownership at the same
    time" at every try, and verify warned once per listing (a helper's pass). Status says the record is damaged,
    attach claims above it, and the warning comes once."""
    a, b, bucket = two_dirs
    (record,) = bucket.rglob("owner-0000000000.json")
    raw = bytearray(record.read_bytes())
    raw[raw.index(b'"claimed_at_ms":') + len(b'"claimed_at_ms":')] ^= 1
    record.write_bytes(bytes(raw))
    rc, out, err = cli(capsys, "--config", str(a), "status", "--json")
    [part] = json.loads(out)["data_dirs"][0]["partitions"]
    assert rc == 1 and part["remote"]["ownership"]["state"] == "damaged_owner_record", out
    assert "owner-0000000000.json" in err and "tiered attach" in err and "lost ownership" not in err
    rc, out, err = cli(capsys, "--config", str(a), "status")
    assert "OWNER RECORD DAMAGED" in out
    with caplog.at_level(logging.WARNING, logger="tiered"):
        rc, out, err = cli(capsys, "--config", str(a), "verify", "--remote")
    assert rc == 1 and "owner-0000000000.json" in out
    assert sum("ignoring unreadable owner record" in r.getMessage() for r in caplog.records) <= 1
    assert "owner epoch 1" in attach(capsys, b)  # above the damaged epoch 0
    rc, out, err = cli(capsys, "--config", str(a), "status", "--json")
    [part] = json.loads(out)["data_dirs"][0]["partitions"]
    assert part["remote"]["ownership"]["state"] == "lost" and part["remote"]["ownership"]["owner_epoch"] == 1


@pytest.mark.parametrize("by", ["pass", "start"])
def test_a_data_dir_whose_own_newest_owner_record_was_deleted_claims_again_above_it(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], by: str,
) -> None:
    """The object of this data dir's claim (the newest owner record) was deleted from the bucket: the data dir took
    its own older claim for a newer one, called itself deposed, refused every write for good, and a restart did not
    help (a helper's pass). No claim above its own stands, so it claims again above it, saying why."""
    from tiered.composition import lost_ownership
    from tiered.remote_tier_parts import topic_id_partition

    a, _, bucket = two_dirs
    with open_log_manager(LogConfig.from_properties(str(a)), start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        assert rlm is not None and rlm.renew_ownership(manager.all_logs()) == 1  # owner epoch 1, as a start makes
    (newest,) = bucket.rglob("owner-0000000001.json")
    newest.unlink()
    rc, out, _ = cli(capsys, "--config", str(a), "status", "--json")
    [part] = json.loads(out)["data_dirs"][0]["partitions"]
    assert rc == 1 and part["remote"]["ownership"]["state"] == "missing_owner_record", out
    rc, out, _ = cli(capsys, "--config", str(a), "status")
    assert "OWNER RECORD MISSING" in out
    if by == "pass":
        rc, _, err = cli(capsys, "--config", str(a), "offload")
        assert rc == 0, err
    else:
        with open_log_manager(LogConfig.from_properties(str(a)), start_scheduler=False) as manager:
            rlm = remote_log_manager_of(manager)
            assert rlm is not None and rlm.renew_ownership(manager.all_logs()) == 1
    rsm = _rsm_of(bucket)
    with open_log_manager(LogConfig.from_properties(str(a)), start_scheduler=False) as manager:
        log = manager.get_log(TOPIC, 0)
        assert log is not None
        assert lost_ownership(manager, log, ask=True) is None  # (what tiered produce asks before it writes)
        records = RemoteLogMetadataStore.in_bucket(rsm).owner_records(topic_id_partition(log))
        assert [r.owner_epoch for r in records] == [0, 2] and log.remote_log_state.owner_epoch == 2
    rc, out, _ = cli(capsys, "--config", str(a), "status", "--json")
    [part] = json.loads(out)["data_dirs"][0]["partitions"]
    assert rc == 0 and part["remote"]["ownership"]["state"] == "owner", out


def test_an_owner_record_deleted_and_claimed_again_by_another_data_dir_is_read_anew(
    two_dirs: tuple[Path, Path, Path],
) -> None:
    """Each owner record's object is read once and kept by its key; a record deleted, then created again at its
    epoch by another data dir's claim, was still read as the old one, and both data dirs took themselves for the
    owner (a review). A key the listing no longer holds is forgotten."""
    from dataclasses import replace

    from tiered.ownership import put_claim
    from tiered.remote_tier_parts import topic_id_partition

    a, _, bucket = two_dirs
    rsm = _rsm_of(bucket)
    with open_log_manager(LogConfig.from_properties(str(a)), start_scheduler=False) as manager:
        log = manager.get_log(TOPIC, 0)
        assert log is not None
        tip = topic_id_partition(log)
    store = RemoteLogMetadataStore.in_bucket(rsm)
    (mine,) = store.owner_records(tip)
    (record,) = bucket.rglob("owner-0000000000.json")
    record.unlink()
    assert store.owner_records(tip) == []
    put_claim(RemoteLogMetadataStore.in_bucket(rsm), tip, replace(mine, owner_id="b" * 32))
    assert [r.owner_id for r in store.owner_records(tip)] == ["b" * 32]


def test_status_says_a_remote_metadata_event_cannot_be_read(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str],
) -> None:
    """A damaged COPY_SEGMENT_FINISHED event made status show one remote segment fewer, exit 0, no note (a helper's
    pass); consume, verify and offload named it. Status names it too, and exits 1."""
    a, _, bucket = two_dirs
    events = sorted(bucket.rglob("__remote_log_metadata/*.1.json"))
    rc, out, _ = cli(capsys, "--config", str(a), "status", "--json")
    [part] = json.loads(out)["data_dirs"][0]["partitions"]
    assert rc == 0 and part["remote"]["segments"] == len(events) and part["remote"]["unreadable_metadata"] == []
    raw = bytearray(events[0].read_bytes())
    raw[raw.index(b'"end_offset":') + len(b'"end_offset":')] ^= 1
    events[0].write_bytes(bytes(raw))
    rc, out, err = cli(capsys, "--config", str(a), "status", "--json")
    [part] = json.loads(out)["data_dirs"][0]["partitions"]
    assert rc == 1 and part["remote"]["segments"] == len(events) - 1
    assert [k.rsplit("/", 1)[-1] for k in part["remote"]["unreadable_metadata"]] == [events[0].name]
    assert events[0].name in err
    rc, out, _ = cli(capsys, "--config", str(a), "status")
    assert "1 remote metadata object(s) cannot be read" in out
    # an object of JSON that is not an event: said so, not as a KeyError of a field (a helper's pass)
    events[0].write_text('{"topic": "ev"}')
    rc, out, _ = cli(capsys, "--config", str(a), "status")
    assert rc == 1 and "not a remote segment metadata event: no field 'topic_id'" in out and "KeyError" not in out


def test_a_run_starting_beside_a_store_that_does_not_answer_tries_one_claim_not_each(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """tiered run claims its partitions at new owner epochs before it takes writes: with the store down after its
    start probe, a claim per partition would each wait for the store's timeouts before the endpoint listened. After
    the first store error no more are tried; the partitions stay at their claims."""
    from tiered.errors import RemoteStorageError
    from tiered.ownership import OwnershipGuard

    config = write_config(tmp_path / "a.properties", local_tier_props(tmp_path / "a", **{
        "rsm.config.dir": str(tmp_path / "bucket"), "remote.log.manager.copier.thread.pool.size": "1"}))
    with open_log_manager(LogConfig.from_properties(str(config)), start_scheduler=False) as manager:
        logs = [manager.get_or_create_log(TOPIC, p, {"remote.storage.enable": "true"}) for p in range(4)]
        rlm = remote_log_manager_of(manager)
        assert rlm is not None
        for log in logs:
            log.note_remote_owner(0, "a" * 32)  # claimed before this start
        calls = []

        def down(self: OwnershipGuard, log: Any, tip: TopicIdPartition) -> None:
            calls.append(log.name)
            raise RemoteStorageError("S3 list failed: read timeout (after 3 attempts)")

        monkeypatch.setattr(OwnershipGuard, "renew", down)
        with caplog.at_level(logging.WARNING, logger="tiered"):
            assert rlm.renew_ownership(logs) == 0
    assert len(calls) == 1
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "read timeout" in text and "3 more partition(s) were not claimed at a new owner epoch" in text


def _held_claims(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """The start's claims at new owner epochs held until the second event is set; the first is set once one is."""
    from tiered.ownership import OwnershipGuard

    entered, release = threading.Event(), threading.Event()
    renew = OwnershipGuard.renew

    def held(self: OwnershipGuard, log: Any, tip: TopicIdPartition) -> Any:
        entered.set()
        release.wait(TIMEOUT_S)
        return renew(self, log, tip)

    monkeypatch.setattr(OwnershipGuard, "renew", held)
    return entered, release


def _waiting_in_the_gate(monkeypatch: pytest.MonkeyPatch, rlm: Any) -> threading.Event:
    """Set once a request waits for a partition's claim (asks the gate with a wait)."""
    waiting = threading.Event()
    awaiting = type(rlm).awaiting_claim

    def seen_waiting(self: Any, waited: Any, wait_s: float = 0.0) -> bool:
        if wait_s > 0:
            waiting.set()
        return awaiting(self, waited, wait_s)

    monkeypatch.setattr(type(rlm), "awaiting_claim", seen_waiting)
    return waiting


def test_a_start_serves_each_partition_once_its_claim_is_made_and_holds_the_others(
        two_dirs: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """tiered run's start claims every partition it owns at a new owner epoch, and a start with 2,000 partitions on
    S3 waited 15 s for all of them before its port opened. The claims are made behind the endpoints now: a
    partition whose claim is under way is answered NOT_LEADER_OR_FOLLOWER over the Kafka protocol (a partition
    whose leader is being elected; clients retry), an HTTP request waits for it, and once it is made both serve."""
    from kio.schema.errors import ErrorCode

    from tests.kafkautil import RawClient, produce_request
    from tiered.http_server import Endpoint
    from tiered.kafka import start_listener

    a, _, _ = two_dirs
    config = LogConfig.from_properties(str(a))
    records = bytes(MemoryRecords.build([SimpleRecord(b"after the start")]))
    entered, release = _held_claims(monkeypatch)
    with open_log_manager(config, start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        log = manager.get_log(TOPIC, 0)
        assert rlm is not None and log is not None
        kafka = start_listener(manager, config, "127.0.0.1", 0)
        try:
            renewing = rlm.renew_ownership_behind(manager.all_logs(), hold_s=TIMEOUT_S)
            assert entered.wait(TIMEOUT_S)
            with RawClient(kafka.address) as client:
                (p,) = client.call(0, 9, produce_request(9, TOPIC, 0, records)).responses[0].partition_responses
            assert p.error_code == ErrorCode.not_leader_or_follower and "still being made" in p.error_message
            end = log.log_end_offset
            answered: list[Any] = []
            waiting = _waiting_in_the_gate(monkeypatch, rlm)  # (the POST asks the gate, and waits in it)
            posting = threading.Thread(target=lambda: answered.append(
                Endpoint(manager).produce(TOPIC, 0, b'{"value": "over http"}', "none")))
            posting.start()
            assert waiting.wait(TIMEOUT_S)
            assert rlm.awaiting_claim(log) and log.log_end_offset == end  # (the POST waits)
            release.set()
            renewing.join(TIMEOUT_S)
            posting.join(TIMEOUT_S)
            assert answered and answered[0]["first_offset"] == end
            assert not rlm.awaiting_claim(log)
            (batch,) = log.read(end, 1 << 20).records.batches()
            assert batch.partition_leader_epoch == 1  # written once the claim (its new epoch) stood, not before it
            read = Endpoint(manager).consume(TOPIC, 0, {"offset": [str(end)]})
            assert [r["value"] for r in read["records"]] == ["over http"]
            with RawClient(kafka.address) as client:
                (p,) = client.call(0, 9, produce_request(9, TOPIC, 0, records)).responses[0].partition_responses
            assert p.error_code == ErrorCode.none and p.base_offset == end + 1
            state = rlm.ownership.state_of(rlm.topic_id_partition(log))
            assert state is not None and state.owner is not None and state.owner.owner_epoch == 1
        finally:
            release.set()
            kafka.stop()


def test_requests_waiting_for_a_claim_are_bounded_and_one_more_is_answered_503_at_once(
        two_dirs: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """An HTTP request to a partition whose claim the start is making waits for it, holding a connection and a thread:
    a burst of them took every connection, and /health answered 503 "too many connections" (a review's L7). At most
    ``claim_waiters`` wait (``tiered run``: half the connections); one more is answered 503 with Retry-After at
    once, and the waiting one is served once the claim stands."""
    from tiered.http_server import Endpoint, HttpError

    a, _, _ = two_dirs
    entered, release = _held_claims(monkeypatch)
    with open_log_manager(LogConfig.from_properties(str(a)), start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        log = manager.get_log(TOPIC, 0)
        assert rlm is not None and log is not None
        endpoint = Endpoint(manager, claim_waiters=1)
        try:
            renewing = rlm.renew_ownership_behind(manager.all_logs(), hold_s=TIMEOUT_S)
            assert entered.wait(TIMEOUT_S)
            waiting = _waiting_in_the_gate(monkeypatch, rlm)
            answered: list[Any] = []
            posting = threading.Thread(target=lambda: answered.append(
                endpoint.produce(TOPIC, 0, b'{"value": "waited"}', "none")))
            posting.start()
            assert waiting.wait(TIMEOUT_S)
            with pytest.raises(HttpError) as refused:
                endpoint.consume(TOPIC, 0, {"offset": ["0"]})
            assert refused.value.status == 503 and {k.lower(): v for k, v in refused.value.headers.items()} == {"retry-after": "1"}
            assert "still being made" in str(refused.value) and "1 requests wait for claims already" in str(refused.value)
            assert posting.is_alive() and not answered  # (the first still waits)
            release.set()
            renewing.join(TIMEOUT_S)
            posting.join(TIMEOUT_S)
            assert answered and answered[0]["count"] == 1
            read = endpoint.consume(TOPIC, 0, {"offset": [str(answered[0]["first_offset"])]})
            assert [r["value"] for r in read["records"]] == ["waited"]
        finally:
            release.set()


def test_a_start_whose_claims_hang_serves_their_partitions_after_its_hold(
        two_dirs: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that hangs after the start probe would hold a partition back by its timeouts: the start holds it at
    most its hold, then serves it while the claim goes on behind (as before the claims were made behind)."""
    from tiered.ownership import OwnershipGuard

    a, _, _ = two_dirs
    release = threading.Event()

    def hangs(self: OwnershipGuard, log: Any, tip: TopicIdPartition) -> None:
        release.wait(TIMEOUT_S)

    monkeypatch.setattr(OwnershipGuard, "renew", hangs)
    with open_log_manager(LogConfig.from_properties(str(a)), start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        log = manager.get_log(TOPIC, 0)
        assert rlm is not None and log is not None
        try:
            renewing = rlm.renew_ownership_behind(manager.all_logs(), hold_s=0.2)
            assert not rlm.awaiting_claim(log, wait_s=TIMEOUT_S)  # the hold passed, the claim still hangs
            assert renewing.is_alive()
        finally:
            release.set()


def _append(log: Any, label: str, batches: int) -> None:
    """``produce``'s records, appended to an open log (a running data dir), then a roll."""
    now = int(time.time() * 1000)
    for _ in range(batches):
        at = log.log_end_offset
        log.append(MemoryRecords.build([SimpleRecord(now, None, f"{label}-{at + j}".encode() + b"x" * 300)
                                        for j in range(BATCH)]))
    log.roll()
    log.flush()


def _rsm_of(bucket: Path) -> LocalDirRemoteStorageManager:
    rsm = LocalDirRemoteStorageManager()
    rsm.configure({"dir": str(bucket)})
    return rsm


def _finished_starts(rsm: LocalDirRemoteStorageManager, tip: TopicIdPartition) -> list[int]:
    return [m.start_offset for m in RemoteLogMetadataStore.in_bucket(rsm).list_remote_log_segments(tip)
            if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]


@pytest.mark.parametrize("clone_writes", [False, True])
def test_a_running_data_dir_sees_what_a_copy_of_it_copied_under_its_claim(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path, clone_writes: bool
) -> None:
    """A copy of a data dir (cp -a to another machine) offloading beside the original, which runs on (`tiered run`,
    or a program with its own LogManager): both hold one claim. The original's view of the bucket was loaded at its
    start and never again, so it never saw the copy's segments: it copied the same offsets a second time, and where
    the copy had written other records there, the bucket held both machines' records at one offset. Before copying it
    now lists the partition's metadata again: segments of its own records count as copied, segments of other records
    fence it (it copies nothing more, and keeps its local segments)."""
    import shutil

    from tiered.ownership import LOST, OWNER
    from tiered.remote_tier_parts import topic_id_partition

    a, _, bucket = two_dirs
    rsm = LocalDirRemoteStorageManager()
    rsm.configure({"dir": str(bucket)})
    clone_dir = tmp_path / "clone"
    clone = write_config(tmp_path / "clone.properties", local_tier_props(clone_dir, **{"rsm.config.dir": str(bucket)}))
    with open_log_manager(LogConfig.from_properties(str(a)), start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        log = manager.get_log(TOPIC, 0)
        assert rlm is not None and log is not None
        tip = topic_id_partition(log)
        assert rlm.run_once(manager.all_logs()).segments_copied == 0  # the running data dir's view is loaded
        if clone_writes:
            shutil.copytree(tmp_path / "a", clone_dir, ignore=shutil.ignore_patterns(".lock"))
            first, _ = produce(clone, "C", 60)
            _append(log, "A", 40)  # other records at the same offsets
        else:
            _append(log, "A", 40)
            shutil.copytree(tmp_path / "a", clone_dir, ignore=shutil.ignore_patterns(".lock"))
        rc, out, err = cli(capsys, "--config", str(clone), "offload")
        assert rc == 0 and "copied 0 segment(s)" not in out, out + err
        copied_by_clone = _finished_starts(rsm, tip)
        # nothing was left COPY_SEGMENT_STARTED: the offload made no new claim (it fences only to delete such copies)
        assert [r.owner_epoch for r in RemoteLogMetadataStore.in_bucket(rsm).owner_records(tip)] == [0]
        objects = sorted(p.relative_to(bucket) for p in bucket.rglob("*") if p.is_file())
        result = rlm.run_once(manager.all_logs())
        assert result.segments_copied == 0
        assert _finished_starts(rsm, tip) == copied_by_clone  # no offset copied twice
        state = rlm.ownership.states()[tip]
        if not clone_writes:
            assert state.state == OWNER, state.detail
            assert sorted(set(copied_by_clone)) == copied_by_clone
        else:
            assert state.state == LOST and "holds other records than this data dir's" in state.detail, state.detail
            assert sorted(p.relative_to(bucket) for p in bucket.rglob("*") if p.is_file()) == objects
            manager.cleanup_logs()
            assert log.local_log_start_offset <= first  # its own records stay, in its local segments
    if clone_writes:
        rc, records, err = consume(capsys, a, "--offset", str(first + 5), "--max-messages", "1")
        assert rc == 0 and str(records[0]["value"]).startswith(f"A-{first + 5}x"), err


def test_a_process_claims_a_new_owner_epoch_once(two_dirs: tuple[Path, Path, Path]) -> None:
    """tiered run's start claims each partition anew, and so does a copy task's first pass that must delete copies
    left COPY_SEGMENT_STARTED; the two may run at once (the start does not wait for slow claims): the second finds
    the claim this process made and makes none."""
    from tiered.remote_tier_parts import topic_id_partition

    a, _, bucket = two_dirs
    rsm = LocalDirRemoteStorageManager()
    rsm.configure({"dir": str(bucket)})
    store = RemoteLogMetadataStore.in_bucket(rsm)
    with open_log_manager(LogConfig.from_properties(str(a)), start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        log = manager.get_log(TOPIC, 0)
        assert rlm is not None and log is not None
        tip = topic_id_partition(log)
        assert [r.owner_epoch for r in store.owner_records(tip)] == [0]
        assert rlm.renew_ownership(manager.all_logs()) == 1
        assert rlm.renew_ownership(manager.all_logs()) == 1  # (its state: the claim made here)
        renewed = rlm.ownership.renew(log, tip)
        assert renewed is not None and renewed.owner is not None and renewed.owner.owner_epoch == 1
        assert [r.owner_epoch for r in store.owner_records(tip)] == [0, 1]


def test_a_claim_at_a_new_owner_epoch_lists_the_partitions_metadata_twice(
    two_dirs: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """tiered run's start claims every partition it owns anew, and on S3 each request of it counts (2,000 partitions
    took 15 s at four LISTs each): one listing of the partition's metadata before the claim (its owner records and
    its events together), its PUT, one listing after it, and no read of the record it just wrote."""
    from tiered.remote_tier_parts import topic_id_partition

    a, _, _ = two_dirs
    with open_log_manager(LogConfig.from_properties(str(a)), start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        log = manager.get_log(TOPIC, 0)
        assert rlm is not None and log is not None
        tip = topic_id_partition(log)
        objects = rlm.metadata.store
        calls: list[tuple[str, str]] = []

        def counting(name: str) -> Any:
            call = getattr(objects, name)

            def counted(key: str, *args: Any, **kwargs: Any) -> Any:
                calls.append((name, key))
                return call(key, *args, **kwargs)

            return counted

        for name in ("list_keys", "get", "put"):
            monkeypatch.setattr(objects, name, counting(name))
        assert rlm.renew_ownership(manager.all_logs()) == 1
        new_record = rlm.ownership.state_of(tip)
        assert new_record is not None and new_record.owner is not None and new_record.owner.owner_epoch == 1
        lists = [key for op, key in calls if op == "list_keys"]
        puts = [key for op, key in calls if op == "put"]
        assert len(lists) == 2 and all(key.endswith("__remote_log_metadata/") for key in lists), calls
        assert len(puts) == 1 and puts[0].endswith("owner-0000000001.json"), calls
        assert ("get", puts[0]) not in calls, calls
        gets = [key for op, key in calls if op == "get"]
        assert len(gets) == len(set(gets)), calls  # each event and former record read once


def test_a_copy_run_lists_the_owner_records_once_before_its_first_segment(
    two_dirs: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy run lists the owner records before it starts and before each segment it copies: for its first
    segment the run's own listing, milliseconds before, stands (a third of a short run's requests, a helper's
    profile of 500 partitions). Before each later one, and before COPY_SEGMENT_FINISHED, it still lists."""
    a, _, _ = two_dirs
    with open_log_manager(LogConfig.from_properties(str(a)), start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        log = manager.get_log(TOPIC, 0)
        assert rlm is not None and log is not None
        rlm.run_once(manager.all_logs())  # (the first run of a process lists and cleans up more)
        _append(log, "again", 1)
        objects = rlm.metadata.store
        listed: list[str] = []
        list_keys = objects.list_keys

        def counted(prefix: str) -> Any:
            listed.append(prefix)
            return list_keys(prefix)

        monkeypatch.setattr(objects, "list_keys", counted)
        result = rlm.copy_task(log).copy_log_segments(log)
        assert result.segments_copied == 1
        owner_lists = [p for p in listed if p.endswith("owner-")]
        assert len(owner_lists) == 2, listed  # the run's, and the one before COPY_SEGMENT_FINISHED


class _Original:
    """Data dir ``a`` of :func:`two_dirs` open in this process (its copies here, not in a copier process, so one can
    stop midway), with ``first`` (its log end) and 40 batches appended from there, and its copy pass in a thread that
    stops where :meth:`stop_here` is called, until :meth:`finish`."""

    def __init__(self, manager: Any, first: int) -> None:
        self.manager = manager
        self.rlm = remote_log_manager_of(manager)
        self.log = manager.get_log(TOPIC, 0)
        assert self.rlm is not None and self.log is not None
        from tiered.remote_tier_parts import topic_id_partition

        self.tip = topic_id_partition(self.log)
        self.first = first
        self.arrived, self.go = threading.Event(), threading.Event()
        self.results: list[Any] = []
        self._pass = threading.Thread(target=lambda: self.results.append(self.rlm.run_once(manager.all_logs())))

    def stop_here(self) -> None:
        """Called in the copy pass's thread: say so, and wait for :meth:`finish` (once)."""
        from tests.gated_rsm import LIMIT

        if not self.arrived.is_set():
            self.arrived.set()
            assert self.go.wait(LIMIT)

    def stop_after_the_upload(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The pass stops once the objects of the segment at ``first`` are uploaded, before its FINISHED event."""
        task = self.rlm.copy_task(self.log)
        upload = task._copy_data

        def uploads_then_stops(md: RemoteLogSegmentMetadata, data: Any, chunk: int) -> Any:
            done = upload(md, data, chunk)
            if md.start_offset == self.first:
                self.stop_here()
            return done

        monkeypatch.setattr(task, "_copy_data", uploads_then_stops)

    def start(self) -> None:
        from tests.gated_rsm import LIMIT

        self._pass.start()
        assert self.arrived.wait(LIMIT)

    def is_read_whole_from(self, capsys: pytest.CaptureFixture[str], config: Path) -> None:
        """The record at ``first`` reads back through ``config``'s data dir (after the test)."""
        rc, records, err = consume(capsys, config, "--offset", str(self.first), "--max-messages", "1")
        assert rc == 0 and str(records[0]["value"]).startswith(f"A-{self.first}x"), err

    def finish(self) -> Any:
        """Let the pass go on; its result."""
        from tests.gated_rsm import LIMIT

        self.go.set()
        if self._pass.is_alive() and self._pass is not threading.current_thread():
            self._pass.join(LIMIT)
        return self.results[0] if self.results else None


@contextlib.contextmanager
def _original(tmp_path: Path, bucket: Path, before: int = 0) -> Iterator[_Original]:
    """:class:`_Original`; ``before``: batches appended and copied first (records past a backup taken earlier)."""
    in_process = write_config(tmp_path / "a-here.properties", local_tier_props(
        tmp_path / "a", **{"rsm.config.dir": str(bucket), "remote.log.manager.copier.process.enable": "false"}))
    with open_log_manager(LogConfig.from_properties(str(in_process)), start_scheduler=False) as manager:
        log = manager.get_log(TOPIC, 0)
        rlm = remote_log_manager_of(manager)
        assert log is not None and rlm is not None
        if before:
            _append(log, "A", before)
            assert rlm.run_once(manager.all_logs()).segments_copied >= 1
        first = log.log_end_offset
        _append(log, "A", 40)
        original = _Original(manager, first)
        try:
            yield original
        finally:
            original.finish()


def _copy_of(tmp_path: Path, bucket: Path) -> Path:
    """A copy of data dir ``a`` (cp -a, without its lock) and its config, on the same bucket."""
    import shutil

    shutil.copytree(tmp_path / "a", tmp_path / "clone", ignore=shutil.ignore_patterns(".lock"))
    return _clone_config(tmp_path, bucket)


def _clone_config(tmp_path: Path, bucket: Path) -> Path:
    return write_config(tmp_path / "clone.properties", local_tier_props(tmp_path / "clone",
                                                                        **{"rsm.config.dir": str(bucket)}))


@pytest.mark.parametrize("kind", ["clone", "backup", "older backup"])
def test_a_copy_of_a_data_dir_never_turns_the_originals_copy_under_way_into_lost_records(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, kind: str,
) -> None:
    """A copy of a data dir (a cloned machine, or a backup from before the original's last records) runs `tiered
    offload` while the original has a copy under way. Its first pass took that copy, left COPY_SEGMENT_STARTED, for
    one a crash left and deleted it; the original then wrote COPY_SEGMENT_FINISHED for objects that were gone, and
    its local retention deleted the local segment for them (records the backup never had were lost). Now the copy of
    the data dir claims the partition at a new owner epoch before it deletes (the original is fenced), and the
    original finds the deletion in the store: its copy does not count, and its local segment stays. A backup older
    than copies the original made since, finished or under way, cannot claim (its claim would drop them; a review
    found it deleting without one, a helper found it claiming while the copy under way finished): it deletes
    nothing, and the original's copy finishes."""
    from tiered.ownership import LOST, OWNER

    a, _, bucket = two_dirs
    store = RemoteLogMetadataStore.in_bucket(_rsm_of(bucket))
    clone = _copy_of(tmp_path, bucket) if kind != "clone" else _clone_config(tmp_path, bucket)
    with _original(tmp_path, bucket, before=20 if kind == "older backup" else 0) as original:
        epochs = [r.owner_epoch for r in store.owner_records(original.tip)]
        original.stop_after_the_upload(monkeypatch)
        original.start()  # the original's copy of offset `first` on is under way
        if kind == "clone":
            _copy_of(tmp_path, bucket)
        with caplog.at_level(logging.WARNING, logger="tiered"):
            rc, out, err = cli(capsys, "--config", str(clone), "offload")
        # (a backup: it cannot claim, and exits 1 naming the copies past its log end)
        assert rc == (0 if kind == "clone" else 1) and (kind == "clone") != ("past its log end" in err), out + err
        # (the clone's deletion of the original's copy under way is said, not 'deleted 0')
        assert (kind == "clone") == ("removed 1 unfinished copy(ies)" in out), out
        result = original.finish()
        owners = [r.owner_epoch for r in store.owner_records(original.tip)]
        if kind != "clone":  # the original's copy under way, or copies it finished, reach past the backup's log end
            assert "left COPY_SEGMENT_STARTED (e.g." in caplog.text and "are not deleted" in caplog.text, caplog.text
            assert owners == epochs
            assert result.copy_errors == 0 and result.segments_copied >= 1
            assert original.rlm.ownership.states()[original.tip].state == OWNER
        else:
            assert owners == [*epochs, epochs[-1] + 1]  # claimed, then deleted
            # (the original finds the newer claim before its FINISHED event: not owned, no copy error)
            assert (result.copy_errors, result.not_owned, result.stale_copies_cleaned) == (0, 1, 0), result
            original.manager.cleanup_logs()
            assert original.log.local_log_start_offset <= original.first  # the void copy let nothing local go
            assert original.rlm.run_once(original.manager.all_logs()).not_owned == 1
            assert original.rlm.ownership.states()[original.tip].state == LOST
    original.is_read_whole_from(capsys, a)


def test_a_backup_behind_the_copies_made_under_its_claim_says_so_in_offload_status_and_verify(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    """A backup of a data dir, restored beside its original after the original copied more, holds the original's
    claim: its log ends before the copies made under it, so it cannot claim the partition anew (its claim would
    drop them). It said so only in a WARNING when a first pass tried; offload exited 0 and status and verify called
    it the owner, OK. Each names it now (exit 1), and the original stays clean."""
    a, _, bucket = two_dirs
    backup = _copy_of(tmp_path, bucket)
    _, end = produce(a, "A", 40)
    rc, _, err = cli(capsys, "--config", str(a), "offload")
    assert rc == 0, err
    with LogManager(LogConfig.from_properties(str(backup)), start_scheduler=False, read_only=True) as manager:
        log = manager.get_log(TOPIC, 0)
        assert log is not None
        behind_at = log.log_end_offset
    # (the original copied all it wrote, up to end - 1: produce rolled the last segment)
    said = f"holds copies made under this data dir's claim up to offset {end - 1}, past its log end {behind_at}"
    rc, out, err = cli(capsys, "--config", str(backup), "offload")
    assert rc == 1 and said in err and "tiered attach" in err, out + err
    rc, out, err = cli(capsys, "--config", str(backup), "status", "--json")
    assert rc == 1 and said in err, out + err
    [part] = json.loads(out)["data_dirs"][0]["partitions"]
    assert part["remote"]["ownership"]["state"] == "behind"
    rc, out, err = cli(capsys, "--config", str(backup), "status")
    assert rc == 1 and "BEHIND ITS REMOTE DATA" in out, out + err
    rc, out, err = cli(capsys, "--config", str(backup), "verify", "--remote", "--json")
    assert rc == 1, out + err
    problems = [p for part in json.loads(out)["partitions"] for p in part["problems"]]
    assert [p["kind"] for p in problems] == ["behind_remote"] and problems[0]["offset"] == behind_at, problems
    for args in (("offload",), ("status",), ("verify", "--remote")):  # the original: the owner, nothing wrong
        rc, out, err = cli(capsys, "--config", str(a), *args)
        assert rc == 0 and "past its log end" not in out + err, out + err


def test_status_beside_a_writer_reads_the_log_end_again_before_calling_the_data_dir_behind(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """status reads a partition's log end, then lists its remote tier: beside a running tiered run, a segment
    rolled and copied between the two passed the log end it had read, and status said BEHIND ITS REMOTE DATA, exit
    1, on a healthy data dir (a helper's pass). Here the first read of the log end is one from before the copies."""
    import tiered.commands.status as status

    a, _, _ = two_dirs
    produce(a, "A", 40)
    rc, _, err = cli(capsys, "--config", str(a), "offload")
    assert rc == 0, err
    real, reads = status.log_end_from_files, []

    def stale_first(partition_dir: Path, base_offset: int) -> int:
        reads.append(base_offset)
        return 1 if len(reads) == 1 else real(partition_dir, base_offset)  # (as read before the copies)

    monkeypatch.setattr(status, "log_end_from_files", stale_first)
    rc, out, err = cli(capsys, "--config", str(a), "status")
    assert rc == 0 and "BEHIND" not in out, out + err
    assert len(reads) == 2  # read again once the remote tier was listed


def test_a_copy_finished_between_the_clones_listing_and_its_claim_is_kept(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A clone's first pass listed the original's copy as COPY_SEGMENT_STARTED, claimed the partition, and deleted
    it as left by a crash; the original had finished and counted it between the listing and the claim, and its local
    retention let the records go (a helper lost 5500 acknowledged records so, with slow puts). The clone lists the
    copies again after its claim, and local retention asks the store who owns the partition before it trusts the
    remote copies."""
    from tiered.ownership import LOST
    from tiered.rlm_copy import RLMCopyTask

    _, _, bucket = two_dirs
    with _original(tmp_path, bucket) as original:
        original.stop_after_the_upload(monkeypatch)
        fence = RLMCopyTask._fenced_others

        def original_finishes_first(self: RLMCopyTask, clone_log: Any) -> bool:
            original.finish()  # the clone listed the copy as STARTED; the original finishes and counts it now
            return fence(self, clone_log)

        original.start()
        clone = _copy_of(tmp_path, bucket)
        monkeypatch.setattr(RLMCopyTask, "_fenced_others", original_finishes_first)
        rc, out, err = cli(capsys, "--config", str(clone), "offload")
        assert rc == 0, out + err
        assert original.finish().copy_errors == 0
        tip = original.tip
        [mine] = [m.remote_log_segment_id.id for m in original.rlm.finished_segments(tip)
                  if m.start_offset == original.first]
        finished = {m.remote_log_segment_id.id for m in RemoteLogMetadataStore.in_bucket(_rsm_of(bucket))
                    .list_remote_log_segments(tip) if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED}
        assert mine in finished  # the original's copy, counted, and kept by the clone
        original.manager.cleanup_logs()
        assert original.rlm.ownership.states()[tip].state == LOST  # asked by local retention
        assert original.log.local_log_start_offset <= original.first
    original.is_read_whole_from(capsys, clone)


def test_a_deletion_between_the_check_and_the_finished_event_is_found_after_it(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The original listed its segment's events before writing COPY_SEGMENT_FINISHED and found no deletion; a clone's
    first pass deleted the copy just then, and the original counted it: its local retention let the records go (a
    review forced that interleaving). The events are listed again after the write."""
    from tiered import metadata as metadata_module

    a, _, bucket = two_dirs
    with _original(tmp_path, bucket) as original:
        check = metadata_module.check_copy_not_deleted

        def checks_then_stops(store: Any, prefix: str, md: RemoteLogSegmentMetadata) -> None:
            check(store, prefix, md)
            if md.start_offset == original.first:
                original.stop_here()  # no deletion found; the clone's first pass runs now

        monkeypatch.setattr(metadata_module, "check_copy_not_deleted", checks_then_stops)
        original.start()
        rc, out, err = cli(capsys, "--config", str(_copy_of(tmp_path, bucket)), "offload")
        assert rc == 0, out + err
        assert original.finish().copy_errors == 1
        original.manager.cleanup_logs()
        assert original.log.local_log_start_offset <= original.first
    original.is_read_whole_from(capsys, a)


def test_a_refresh_never_makes_another_writers_copy_under_way_a_failed_copy_of_this_process(tmp_path: Path) -> None:
    """unfinished_segments names the copies this process left STARTED, which its copy task deletes as failed ones:
    after a refresh brought in another data dir's copy under way (STARTED in the store), that one must not be among
    them, or the task would delete a copy in flight."""
    rsm = LocalDirRemoteStorageManager()
    rsm.configure({"dir": str(tmp_path / "bucket")})
    tip = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    here, there = RemoteLogMetadataStore.in_bucket(rsm), RemoteLogMetadataStore.in_bucket(rsm)
    mine, theirs = _md(tip, 0, 99), _md(tip, 100, 199)
    here.add_remote_log_segment_metadata(mine)
    there.add_remote_log_segment_metadata(theirs)
    here.refresh(tip)
    assert {m.start_offset for m in here.list_remote_log_segments(tip)} == {0, 100}  # the refresh sees it
    assert [m.start_offset for m in here.unfinished_segments(tip)] == [0]
    assert [m.start_offset for m in there.unfinished_segments(tip)] == [100]


def test_a_damaged_local_segment_is_named_not_taken_for_another_data_dirs_records(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """One flipped byte in a local closed segment already copied made offload exit 1 blaming a cloned machine
    writing under this data dir's claim, and fenced the partition for good (a helper's pass). A local segment whose
    own batches fail their CRC is named as damaged; the partition is not fenced."""
    a, _, _ = two_dirs
    rc, out, err = cli(capsys, "--config", str(a), "topics", "alter", "-t", TOPIC, "--add-config",
                       "local.retention.bytes=-1")  # (copied segments stay local)
    assert rc == 0, err
    produce(a, "B", 40)
    rc, out, err = cli(capsys, "--config", str(a), "offload")
    assert rc == 0, out + err
    with LogManager(LogConfig.from_properties(str(a)), start_scheduler=False) as manager:
        log = manager.get_log(TOPIC, 0)
        assert log is not None
        closed = list(log.segments.values())[:-1]
        target = closed[0].log.path
    data = bytearray(target.read_bytes())
    data[len(data) - 200] ^= 0x01  # inside the last batch's records: its CRC fails
    target.write_bytes(bytes(data))
    with caplog.at_level(logging.ERROR, logger="tiered"):
        rc, out, err = cli(capsys, "--config", str(a), "offload")
    assert rc == 0, out + err
    assert f"local segment {target} is damaged" in caplog.text and "another data dir" not in caplog.text, caplog.text


def test_a_claim_made_while_the_former_holder_finished_copies_past_its_log_end_says_so(
    two_dirs: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A backup checked that no copy reached past its log end, then claimed the partition; the original made copies
    past it meanwhile (a helper's pass with slow claims): they lie outside the backup's lineage, and its retention
    deletes them, with nothing said. The store is listed again once the claim stands, and an ERROR names them."""
    import shutil

    from tiered.ownership import OWNER, OwnershipGuard

    _, _, bucket = two_dirs
    shutil.copytree(tmp_path / "a", tmp_path / "clone", ignore=shutil.ignore_patterns(".lock"))  # the backup
    with _original(tmp_path, bucket) as original:
        claim = OwnershipGuard._claim

        def original_copies_first(self: OwnershipGuard, log: Any, tip: Any, above: int = -1, **kwargs: Any) -> Any:
            # The backup listed the store (no copy past its log end) and is about to claim: only now does the
            # original's pass run, whole. (Started any earlier, its copy under way could be in that listing, and the
            # backup would rightly not claim at all: the flake of session 24, on a busy two-core machine.)
            if self is not original.rlm.ownership and not original.results:
                original.results.append(original.rlm.run_once(original.manager.all_logs()))
            return claim(self, log, tip, above, **kwargs)

        with open_log_manager(LogConfig.from_properties(str(_clone_config(tmp_path, bucket))),
                              start_scheduler=False) as backup:
            rlm = remote_log_manager_of(backup)
            log = backup.get_log(TOPIC, 0)
            assert rlm is not None and log is not None
            monkeypatch.setattr(OwnershipGuard, "_claim", original_copies_first)
            with caplog.at_level(logging.WARNING, logger="tiered"):
                found = rlm.ownership.renew(log, original.tip)
            assert original.results, f"the backup's renew made no claim: {caplog.text}"
            assert original.results[0].segments_copied >= 1
            assert found is not None and found.state == OWNER
            assert (f"copied offsets {original.first}.." in caplog.text
                    and "lie outside its lineage and its remote retention deletes them" in caplog.text), caplog.text


def test_a_former_owners_late_copy_past_the_log_end_does_not_stop_a_new_epoch_at_start(
    two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The start's claim at a new owner epoch is refused where the partition's copies reach past the log end (a data
    dir older than its copies); a former owner's late copy, outside the owner's lineage (garbage its retention
    deletes), is not such a copy."""
    from tiered.remote_tier_parts import topic_id_partition

    _, b, bucket = two_dirs
    attach(capsys, b)
    store = RemoteLogMetadataStore.in_bucket(_rsm_of(bucket))
    with open_log_manager(LogConfig.from_properties(str(b)), start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        log = manager.get_log(TOPIC, 0)
        assert rlm is not None and log is not None
        tip = topic_id_partition(log)
        late = _md(tip, log.log_end_offset, log.log_end_offset + 99, {0: log.log_end_offset})  # the former epoch
        store.add_remote_log_segment_metadata(late)
        store.update_remote_log_segment_metadata(_update(late, RemoteLogSegmentState.COPY_SEGMENT_FINISHED))
        epochs = [r.owner_epoch for r in store.owner_records(tip)]
        renewed = rlm.ownership.renew(log, tip)
        assert renewed is not None and renewed.owner is not None and renewed.owner.owner_epoch == epochs[-1] + 1


def test_a_copy_finished_after_another_data_dirs_claim_stays_out_of_the_columnar_copy(
        two_dirs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented race: a copy whose last ownership check came just before another data dir's claim still
    writes its COPY_SEGMENT_FINISHED. Its columnar keeper then took the segment in under this data dir's (older)
    epoch: the new owner reads the whole copy, A's rows past the handover among them, and its own keeper never
    replaces offsets the manifest holds (a helper's reading of the code). The keeper checks ownership before the
    copy grows."""
    from tiered.columnar.manifest import read_manifest
    from tiered.rsm import RemoteLogSegmentState

    a, b, bucket = two_dirs
    a.write_text(a.read_text() + "remote.log.manager.copier.process.enable=false\n")  # (FINISHED written here)
    rc, _, err = cli(capsys, "--config", str(a), "topics", "alter", "-t", TOPIC, "--add-config",
                     "remote.log.columnar.enable=true")
    assert rc == 0, err
    with open_log_manager(LogConfig.from_properties(str(a)), start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        assert rlm is not None and rlm.run_once(manager.all_logs()).not_owned == 0
    columnar = bucket.with_name(bucket.name + "-columnar") / f"{TOPIC}-0"
    before = read_manifest(columnar)
    assert before is not None and before.next_offset
    produce(a, "A", 30)  # one more closed segment of A's
    update = RemoteLogMetadataStore.update_remote_log_segment_metadata
    claimed: list[str] = []

    def claimed_before_finished(self: Any, change: Any, checksums: Any = None) -> Any:
        if change.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED and not claimed:
            claimed.append(attach(capsys, b))  # B's claim lands after A's check, before A's FINISHED event
        return update(self, change, checksums)

    monkeypatch.setattr(RemoteLogMetadataStore, "update_remote_log_segment_metadata", claimed_before_finished)
    with open_log_manager(LogConfig.from_properties(str(a)), start_scheduler=False) as manager:
        rlm = remote_log_manager_of(manager)
        assert rlm is not None
        assert rlm.run_once(manager.all_logs()).segments_copied == 1  # (the copy finished: the race's other half)
    assert claimed
    after = read_manifest(columnar)
    assert after is not None and after.next_offset == before.next_offset  # A's late copy is not in it
    assert after.owner_epoch == before.owner_epoch
