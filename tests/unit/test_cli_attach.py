"""``tiered attach`` (a fresh data dir adopts a topic from the bucket alone), ``tiered status`` showing both tiers,
and ``tiered offload`` naming the topics it leaves alone. Local-directory remote tier; the S3 version is in
tests/integration/test_cli_remote_s3.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from local import LogConfig, LogManager
from local.checkpoint import LeaderEpochCheckpointFile
from local.records import MemoryRecords, SimpleRecord
from local.remote_state import RemoteLogStateFile
from tests.logutil import local_tier_props
from tiered.cli import main

RECORDS = 10000


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def write_config(path: Path, props: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def produce(config: Path, topic: str, partitions: int, epochs: tuple[int, ...] = (0, 3)) -> None:
    """RECORDS records per partition, the second half in a later leader epoch, 1 MiB segments."""
    now = int(time.time() * 1000)  # within retention.ms: nothing expires
    with LogManager(LogConfig.from_properties(str(config)), start_scheduler=False) as manager:
        for p in range(partitions):
            log = manager.get_or_create_log(topic, p)
            for i in range(RECORDS // 100):
                if i * 100 in (0, RECORDS // 2):
                    log.assign_epoch_start_offset(epochs[0] if i == 0 else epochs[1])
                batch = [SimpleRecord(now + i, f"k{i}".encode(), f"{p}-{i}-{j}".encode() + b"x" * 300)
                         for j in range(100)]
                log.append(MemoryRecords.build(batch), leader_epoch=log.latest_epoch or 0)


def consume_all(capsys: pytest.CaptureFixture[str], config: Path, topic: str, partition: int) -> list[dict[str, object]]:
    rc, out, err = cli(capsys, "--config", str(config), "consume", "-t", topic, "-p", str(partition), "--json")
    assert rc == 0, err
    assert out, err
    return [json.loads(line) for line in out.splitlines()]


@pytest.fixture
def tiered_topic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    """A first data dir whose topic 'ev' (2 partitions) was offloaded, and the broker config of a second, empty one
    sharing its bucket."""
    first = write_config(tmp_path / "a.properties", local_tier_props(tmp_path / "a", **{"rsm.config.dir": str(tmp_path / "bucket")}))
    rc, _, err = cli(capsys, "--config", str(first), "topics", "create", "-t", "ev", "--partitions", "2",
                     "--topic-config", "remote.storage.enable=true", "--topic-config", "local.retention.bytes=1")
    assert rc == 0, err
    produce(first, "ev", 2)
    rc, _, err = cli(capsys, "--config", str(first), "offload")
    assert rc == 0, err
    second = write_config(tmp_path / "b.properties", local_tier_props(tmp_path / "b", **{"rsm.config.dir": str(tmp_path / "bucket")}))
    return first, second


def test_attach_reads_every_remote_offset_of_the_first_from_the_bucket_alone(
    tiered_topic: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tiered_topic
    rc, out, err = cli(capsys, "--config", str(second), "attach", "-t", "ev")
    assert rc == 0, err
    assert out.count("attached ev-") == 2
    for p in range(2):
        original = consume_all(capsys, first, "ev", p)
        highest = RemoteLogStateFile(tmp_path / "a" / "data" / f"ev-{p}").read().highest_remote_offset
        assert highest > RECORDS // 2  # most of the log is remote (the rest is the first's active segment)
        adopted = consume_all(capsys, second, "ev", p)
        assert [r["offset"] for r in adopted] == list(range(highest + 1))
        assert adopted == original[: highest + 1]  # keys, values, timestamps, headers and leader epochs alike
        pdir = tmp_path / "b" / "data" / f"ev-{p}"
        assert (pdir / "partition.metadata").read_bytes() == (tmp_path / "a" / "data" / f"ev-{p}" / "partition.metadata").read_bytes()
        # The second took ownership at a new owner epoch (one above the first's 3), from the remote log end on: its
        # first append writes the epoch's entry (as a Kafka leader's does; a load drops one at the log end).
        assert [(e.epoch, e.start_offset) for e in LeaderEpochCheckpointFile(pdir / "leader-epoch-checkpoint").read()][:2] == [
            (0, 0), (3, RECORDS // 2)]
        state = RemoteLogStateFile(pdir).read()
        assert (state.remote_storage_enabled, state.highest_remote_offset, state.owner_epoch) == (True, highest, 4)
    # A process without the remote tier's config knows the partitions hold remote data (from remote-log-state): the
    # log starts at the remote log start, and reading there asks for the remote tier instead of printing nothing.
    rc, out, err = cli(capsys, "status", "--json", "--log-dirs", str(tmp_path / "b" / "data"))
    assert [p["log_start_offset"] for p in json.loads(out)["data_dirs"][0]["partitions"]] == [0, 0]
    rc, out, err = cli(capsys, "consume", "-t", "ev", "--log-dirs", str(tmp_path / "b" / "data"))
    assert rc == 1 and out == "" and "is in remote storage" in err
    # New records append after the remote log end, in the adopted topic id.
    with LogManager(LogConfig.from_properties(str(second)), start_scheduler=False) as manager:
        log = manager.get_log("ev", 0)
        assert log is not None
        end = log.log_end_offset
        assert log.log_start_offset == 0 and log.local_log_start_offset == end
        assert log.append(MemoryRecords.build([SimpleRecord(0, None, b"new")])).first_offset == end
        assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()][-1] == (4, end)
        assert next(log.read(end, 1 << 20).records.batches()).partition_leader_epoch == 4
    # Attaching again changes nothing.
    rc, out, err = cli(capsys, "--config", str(second), "attach", "-t", "ev")
    assert rc == 0, err
    assert out.count("already attached ev-") == 2


def test_status_shows_both_tiers(tiered_topic: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, _ = tiered_topic
    rc, out, err = cli(capsys, "--config", str(first), "status", "--json")
    assert rc == 0, err
    [d] = json.loads(out)["data_dirs"]
    p = {part["partition"]: part for part in d["partitions"]}["ev-0"]
    highest = RemoteLogStateFile(tmp_path / "a" / "data" / "ev-0").read().highest_remote_offset
    assert p["log_start_offset"] == 0  # the remote log start, not the local one
    assert p["local_log_start_offset"] == highest + 1  # local retention deleted everything copied
    assert p["remote"]["log_start_offset"] == 0 and p["remote"]["highest_offset"] == highest
    bucket_logs = sorted((tmp_path / "bucket").rglob("*.log"))
    ev0_logs = [f for f in bucket_logs if f.parent.name == "0"]
    assert p["remote"]["segments"] == len(ev0_logs) > 1
    assert p["remote"]["size_bytes"] == sum(f.stat().st_size for f in ev0_logs)
    assert (p["remote"]["copy_lag_segments"], p["remote"]["copy_lag_bytes"]) == (0, 0)
    assert d["last_remote_pass"]["segments_copied"] == len(bucket_logs)
    assert d["last_remote_pass"]["errors"] == []
    rc, text, _ = cli(capsys, "--config", str(first), "status")
    header = next(line for line in text.splitlines() if "PARTITION" in line)
    assert "LOCAL LOG START" in header and "REMOTE SEGMENTS" in header and "COPY LAG" in header
    assert "last remote pass:" in text


def test_status_copy_lag_counts_closed_segments_not_yet_copied(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path / "a.properties", local_tier_props(tmp_path))
    assert cli(capsys, "--config", str(config), "topics", "create", "-t", "ev", "--topic-config", "remote.storage.enable=true")[0] == 0
    produce(config, "ev", 1)
    _, out, _ = cli(capsys, "--config", str(config), "status", "--json")
    [p] = json.loads(out)["data_dirs"][0]["partitions"]
    closed = sorted((tmp_path / "data" / "ev-0").glob("*.log"))[:-1]
    assert p["remote"]["segments"] == 0 and len(closed) > 1
    assert p["remote"]["copy_lag_segments"] == len(closed)
    assert p["remote"]["copy_lag_bytes"] == sum(f.stat().st_size for f in closed)


def test_attach_over_another_topic_id_is_refused(tiered_topic: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, second = tiered_topic
    assert cli(capsys, "--config", str(second), "topics", "create", "-t", "ev", "--topic-config", "remote.storage.enable=true")[0] == 0
    before = sorted(p.name for p in (tmp_path / "b" / "data").iterdir())
    rc, out, err = cli(capsys, "--config", str(second), "attach", "-t", "ev")
    assert rc == 1 and out == ""
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "already holds ev-0 with topic id" in err and "refusing to attach over another topic" in err
    assert sorted(p.name for p in (tmp_path / "b" / "data").iterdir()) == before  # ev-1 was not written either
    rc, _, err = cli(capsys, "--config", str(second), "attach", "-t", "nothere")
    assert rc == 1 and "no remote metadata of topic 'nothere'" in err


def test_attach_after_retention_deleted_every_remote_segment_goes_on_at_the_old_log_end(
    tiered_topic: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Remote retention deleted every segment of a partition (the old owner's log start and end then equal); a new
    machine's attach adopted it at offset 0, and its next records took offsets 0.. again, which consumers' committed
    offsets and the old records had used (a helper's pass). The adopted log starts where the history ended."""
    first, second = tiered_topic
    with LogManager(LogConfig.from_properties(str(first)), start_scheduler=False) as manager:
        log = manager.get_log("ev", 0)
        assert log is not None
        log.roll()  # the active segment too: everything can be copied and then expire
    assert cli(capsys, "--config", str(first), "offload")[0] == 0
    rc, _, err = cli(capsys, "--config", str(first), "topics", "alter", "-t", "ev", "--add-config",
                     "retention.bytes=0,local.retention.bytes=0")
    assert rc == 0, err
    assert cli(capsys, "--config", str(first), "offload")[0] == 0
    with LogManager(LogConfig.from_properties(str(first)), start_scheduler=False) as manager:
        log = manager.get_log("ev", 0)
        assert log is not None and log.log_start_offset == log.log_end_offset == RECORDS  # all of it expired
    rc, out, err = cli(capsys, "--config", str(second), "attach", "-t", "ev")
    assert rc == 0, err
    assert f"attached ev-0: 0 remote segment(s), 0 bytes, log start offset {RECORDS}, log end offset {RECORDS}" in out
    with LogManager(LogConfig.from_properties(str(second)), start_scheduler=False) as manager:
        log = manager.get_log("ev", 0)
        assert log is not None
        assert log.append(MemoryRecords.build([SimpleRecord(b"next")]), leader_epoch=log.latest_epoch or 0) \
            .first_offset == RECORDS  # not 0


def test_offload_names_topics_without_remote_storage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path / "a.properties", local_tier_props(tmp_path))
    produce(config, "plain", 1)
    rc, out, err = cli(capsys, "--config", str(config), "offload")
    assert rc == 0
    assert "copied 0 segment(s)" in out
    assert ("topic plain (1 partition(s)) is not tiered: it lacks remote.storage.enable=true; enable it with: "
            "tiered topics alter --topic plain --add-config remote.storage.enable=true") in err
    assert cli(capsys, "--config", str(config), "topics", "alter", "-t", "plain", "--add-config", "remote.storage.enable=true")[0] == 0
    rc, out, err = cli(capsys, "--config", str(config), "offload")
    assert rc == 0 and "copied 0 segment(s)" not in out and "not tiered" not in err


def test_offload_never_advises_tiering_a_compacted_or_internal_topic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """offload told the user to set remote.storage.enable=true on every compacted topic, __consumer_offsets
    included, advice the config refuses (a helper's pass)."""
    config = write_config(tmp_path / "a.properties", local_tier_props(tmp_path))
    for topic, policy in (("table", "compact"), ("__consumer_offsets", "compact")):
        rc, _, err = cli(capsys, "--config", str(config), "topics", "create", "-t", topic, "--topic-config",
                         f"cleanup.policy={policy}")
        assert rc == 0, err
    rc, out, err = cli(capsys, "--config", str(config), "offload")
    assert rc == 0, out + err
    assert "remote.storage.enable=true" not in err and "__consumer_offsets" not in err, err
    assert "topic table (1 partition(s)) is not tiered: it is compacted" in err, err


def test_status_shows_the_last_pass_of_run_too(tiered_topic: tuple[Path, Path], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A pass of `tiered run`'s scheduled tasks replaces offload's as the last one (here the pass cut short by a
    SIGTERM once the first copies landed, before its first task interval: events, not a --duration that a busy
    machine can outlast before anything is copied). The first copies are made under the claim the start makes at a
    new owner epoch: made beside it, under the old one, they were refused at their end and deleted, and the copies
    came one task interval (a minute here) later."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tiered.pass_report import read_pass_report

    first, _ = tiered_topic
    data = tmp_path / "a" / "data"
    offloaded = read_pass_report(data)
    assert offloaded is not None
    produce(first, "ev", 2, epochs=(3, 4))
    before = len(list((tmp_path / "bucket").rglob("*.log")))

    def finished() -> int:  # (COPY_SEGMENT_FINISHED events: a copy whose objects are all in place)
        return len(list((tmp_path / "bucket").rglob("*.1.json")))

    finished_before = finished()
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "tiered.cli", "run", "--config", str(first), "--listen",
                             "127.0.0.1:0", "-o", "remote.log.manager.task.interval.ms=60000"],
                            cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120  # (a failure bound: the first copy lands as soon as run starts)
        while finished() == finished_before and proc.poll() is None:
            assert time.monotonic() < deadline, "tiered run copied nothing"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    assert not list((tmp_path / "bucket").rglob("*.3.json")), "copies of the run were deleted (DELETE_SEGMENT_FINISHED)"
    copied = len(list((tmp_path / "bucket").rglob("*.log"))) - before
    assert copied > 0
    report = read_pass_report(data)
    assert report is not None and report["finished_ms"] > offloaded["finished_ms"]
    assert (report["segments_copied"], report["copy_errors"], report["errors"]) == (copied, 0, [])
    rc, text, err = cli(capsys, "--config", str(first), "status")
    assert rc == 0, err
    assert f"copied {copied} segment(s)" in text


def test_a_topic_of_249_characters_is_tiered_read_back_and_attached_on_the_local_directory_tier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kafka's longest topic name: its remote directory ``<topic>-<topicId>`` (272 characters) is longer than a file
    name may be. It went OFFLINE with "File name too long"; now it is stored shortened (tiered.backends.long_names)."""
    topic = ("long.topic_name-" * 16)[:249]
    bucket = tmp_path / "bucket"
    first = write_config(tmp_path / "a.properties", local_tier_props(tmp_path / "a", **{"rsm.config.dir": str(bucket)}))
    rc, _, err = cli(capsys, "--config", str(first), "topics", "create", "-t", topic,
                     "--topic-config", "remote.storage.enable=true", "--topic-config", "local.retention.bytes=1")
    assert rc == 0, err
    produce(first, topic, 1)
    rc, out, err = cli(capsys, "--config", str(first), "offload")
    assert rc == 0 and out.startswith("copied 3 segment(s)"), out + err
    rc, out, _ = cli(capsys, "--config", str(first), "status", "--json")
    [partition] = json.loads(out)["data_dirs"][0]["partitions"]
    assert "offline" not in partition and partition["local_log_start_offset"] > 0  # copied, then deleted locally
    original = consume_all(capsys, first, topic, 0)  # the old offsets from the remote tier
    assert [r["offset"] for r in original] == list(range(RECORDS))
    [stored] = [p.name for p in bucket.iterdir() if p.is_dir()]  # the topic's directory, shortened
    assert stored.startswith(topic[:200] + "~") and (bucket / f"{stored}.tiered-name").read_text().startswith(f"{topic}-")
    second = write_config(tmp_path / "b.properties", local_tier_props(tmp_path / "b", **{"rsm.config.dir": str(bucket)}))
    rc, out, err = cli(capsys, "--config", str(second), "attach", "-t", topic)
    assert rc == 0 and f"attached {topic}-0" in out, err
    adopted = consume_all(capsys, second, topic, 0)
    assert adopted and adopted == original[: len(adopted)]
    rc, out, err = cli(capsys, "--config", str(second), "verify", "--remote")  # the owner now (tiered.ownership)
    assert rc == 0, out + err


def test_status_takes_the_checkpoints_log_start_over_remote_segments_awaiting_deletion(
        tiered_topic: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Retention moved the log start into the remote range; the remote segments below it are deleted by the next
    remote pass. Until then status showed the first remote segment's start, where consume (the loader) takes the
    checkpoint's."""
    from local.log import LogStartOffsetIncrementReason

    first, _ = tiered_topic
    props = local_tier_props(tmp_path / "a", **{"rsm.config.dir": str(tmp_path / "bucket")})
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        log = m.get_log("ev", 0)
        assert log is not None and log.log_start_offset == 0
        moved = log.local_log_start_offset // 2
        assert log.maybe_increment_log_start_offset(moved, LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION)
    rc, out, err = cli(capsys, "--config", str(first), "status", "--json")
    assert rc == 0, err
    [d] = json.loads(out)["data_dirs"]
    p = {part["partition"]: part for part in d["partitions"]}["ev-0"]
    assert p["remote"]["log_start_offset"] == 0  # not deleted yet
    assert p["log_start_offset"] == moved
    rc, _, err = cli(capsys, "--config", str(first), "consume", "-t", "ev", "-p", "0", "--offset", "0")
    assert rc == 1 and f"log start offset {moved}" in err  # the same log start


def test_attach_refuses_while_a_metadata_event_cannot_be_read(tiered_topic: tuple[Path, Path], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that does not answer for the newest segment's COPY_SEGMENT_FINISHED event: attach adopted the other
    segments, a log ending before the bucket's end, and exited 0; new appends then took offsets the bucket held and
    the next pass deleted that segment as theirs, its records gone (a helper's S3 fault pass). It refuses, naming the
    object, and writes and claims nothing."""
    from tiered.backends.local_dir import LocalDirStore
    from tiered.errors import RemoteStorageError

    _, second = tiered_topic
    newest = max((tmp_path / "bucket").rglob("*.1.json"), key=lambda f: f.name)  # the highest start offset
    real = LocalDirStore.get

    def failing(self: LocalDirStore, key: str) -> bytes:
        if key.endswith(newest.name):
            raise RemoteStorageError(f"GetObject {key} failed: 503 SlowDown (after 3 attempts)")
        return real(self, key)

    monkeypatch.setattr(LocalDirStore, "get", failing)
    owners_before = sorted((tmp_path / "bucket").rglob("owner-*.json"))
    rc, out, err = cli(capsys, "--config", str(second), "attach", "-t", "ev")
    assert rc == 1, out
    assert "remote metadata object(s) cannot be read" in err and newest.name in err and "503 SlowDown" in err
    assert not list((tmp_path / "b" / "data").glob("ev-*"))  # nothing written
    assert sorted((tmp_path / "bucket").rglob("owner-*.json")) == owners_before  # nobody deposed
    monkeypatch.setattr(LocalDirStore, "get", real)
    rc, out, err = cli(capsys, "--config", str(second), "attach", "-t", "ev")  # once the store answers
    assert rc == 0, err


def test_attach_whose_claims_answer_was_lost_attaches(tiered_topic: tuple[Path, Path], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The claim written, its answer a 500: attach exited 1 having deposed the owner all the same, and writing
    nothing; 'attach it again' then found nothing to do. The claim read back is its own: it attaches."""
    from tiered.errors import RemoteStorageError
    from tiered.metadata import RemoteLogMetadataStore

    _, second = tiered_topic
    real = RemoteLogMetadataStore.claim_ownership

    def lost_answer(self: RemoteLogMetadataStore, tip: object, record: object) -> None:
        real(self, tip, record)  # type: ignore[arg-type]
        raise RemoteStorageError("PutObject failed: 500 InternalError (after 3 attempts)")

    monkeypatch.setattr(RemoteLogMetadataStore, "claim_ownership", lost_answer)
    rc, out, err = cli(capsys, "--config", str(second), "attach", "-t", "ev")
    assert rc == 0, err
    assert out.count("attached ev-") == 2 and "owner epoch" in out


def test_a_topic_under_two_ids_asks_for_one_in_a_form_that_takes_any_id(
        tiered_topic: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two data dirs made topic 'ev' on one bucket (two topic ids): attach asked for "--topic-id", which argparse
    refuses for the one id in 64 that starts with '-' ("expected one argument"; a helper's pass). The advice is now
    --topic-id=ID, which takes any id, and attaching with it adopts that id's partitions."""
    other = write_config(tmp_path / "c.properties", local_tier_props(tmp_path / "c", **{
        "rsm.config.dir": str(tmp_path / "bucket")}))
    assert cli(capsys, "--config", str(other), "topics", "create", "-t", "ev", "--topic-config",
               "remote.storage.enable=true")[0] == 0
    produce(other, "ev", 1)
    assert cli(capsys, "--config", str(other), "offload")[0] == 0
    third = write_config(tmp_path / "d.properties", local_tier_props(tmp_path / "d", **{
        "rsm.config.dir": str(tmp_path / "bucket")}))
    rc, _, err = cli(capsys, "--config", str(third), "attach", "-t", "ev")
    assert rc == 2 and "under 2 topic ids" in err and "pick one with --topic-id=ID (e.g. --topic-id=" in err, err
    advised = err.split("e.g. ", 1)[1].split(";", 1)[0]
    partitions = int(err.split(advised.removeprefix("--topic-id=") + " (", 1)[1].split(" ", 1)[0])
    rc, _, err = cli(capsys, "--config", str(third), "attach", "-t", "ev", "--topic-id=-Bu71g8NRYaMLQ1kUwfpLg")
    assert rc == 1 and "no remote metadata of topic 'ev' with id -Bu71g8NRYaMLQ1kUwfpLg" in err, err  # taken as an id
    rc, _, err = cli(capsys, "--config", str(third), "attach", "-t", "ev", advised)
    assert rc == 0, err
    assert sorted(p.name for p in (tmp_path / "d" / "data").iterdir() if p.name.startswith("ev-")) == [
        f"ev-{p}" for p in range(partitions)]


def test_attach_names_the_prefix_it_looked_under(tiered_topic: tuple[Path, Path], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A typo in rsm.config.prefix is the usual reason attach finds nothing: the message names the prefix used."""
    typo = write_config(tmp_path / "c.properties", local_tier_props(
        tmp_path / "c", **{"rsm.config.dir": str(tmp_path / "bucket"), "rsm.config.prefix": "t1x"}))
    rc, out, err = cli(capsys, "--config", str(typo), "attach", "-t", "ev")
    assert rc == 1 and out == ""
    assert "no remote metadata of topic 'ev'" in err and "prefix 't1x'" in err, err
