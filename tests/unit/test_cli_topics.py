"""``tiered topics create|describe|alter|list``: Kafka's kafka-topics/kafka-configs semantics on the data dirs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from local import LogConfig, LogManager
from local.manager import TOPIC_CONFIG_FILENAME
from local.remote_state import RemoteLogState, RemoteLogStateFile
from tests.logutil import local_tier_props
from tiered.cli import main


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("WARNING ")]
    assert len(lines) == 1, err
    return lines[0]


def overrides(pdir: Path) -> str:
    return (pdir / TOPIC_CONFIG_FILENAME).read_text()


def test_create_makes_every_partition_with_one_topic_id_and_the_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    rc, _, err = cli(capsys, "topics", "create", "--topic", "ev", "--partitions", "3",
                     "--topic-config", "retention.ms=1000", "--log-dirs", str(data))
    assert rc == 0, err
    ids = {(data / f"ev-{p}" / "partition.metadata").read_text() for p in range(3)}
    assert len(ids) == 1
    assert all(overrides(data / f"ev-{p}") == "retention.ms=1000\n" for p in range(3))
    rc, out, _ = cli(capsys, "topics", "list", "--log-dirs", str(data))
    assert (rc, out) == (0, "ev\n")


def test_create_refuses_an_existing_topic_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "data")
    assert cli(capsys, "topics", "create", "-t", "ev", "--log-dirs", data)[0] == 0
    rc, _, err = cli(capsys, "topics", "create", "-t", "ev", "--log-dirs", data)
    assert rc == 1 and "already exists" in one_line(err)
    cases = [
        (["-t", "bad name"], "invalid topic name"),
        (["-t", "x", "--topic-config", "segment.bytes=5"], "segment.bytes"),
        (["-t", "x", "--topic-config", "nope=1"], "Unknown topic configuration 'nope'"),
        (["-t", "x", "--topic-config", "retention.ms"], "expects KEY=VALUE"),
        (["-t", "x", "--add-config", "retention.ms=1"], "does not apply to 'topics create'"),
        # Kafka: remote storage needs the broker's remote storage system first.
        (["-t", "x", "--topic-config", "remote.storage.enable=true"], "remote.log.storage.system.enable=true"),
    ]
    for extra, expected in cases:
        rc, _, err = cli(capsys, "topics", "create", *extra, "--log-dirs", data)
        assert rc == 2, (extra, err)
        assert expected in one_line(err), (extra, err)
    with pytest.raises(SystemExit) as usage:  # argparse's own refusal
        cli(capsys, "topics", "create", "-t", "x", "--partitions", "0", "--log-dirs", data)
    assert usage.value.code == 2
    assert "argument --partitions: invalid value 0: must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "data" / "x-0").exists()  # nothing written by a refused create


def test_alter_changes_only_the_keys_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "data")
    assert cli(capsys, "topics", "create", "-t", "ev", "--partitions", "2", "--topic-config", "retention.ms=1000",
               "--topic-config", "segment.bytes=2097152", "--log-dirs", data)[0] == 0
    rc, _, err = cli(capsys, "topics", "alter", "-t", "ev", "--add-config", "max.message.bytes=5000,retention.bytes=77",
                     "--log-dirs", data)
    assert rc == 0, err
    for p in range(2):
        assert overrides(tmp_path / "data" / f"ev-{p}") == (
            "max.message.bytes=5000\nretention.bytes=77\nretention.ms=1000\nsegment.bytes=2097152\n")
    rc, _, err = cli(capsys, "topics", "alter", "-t", "ev", "--delete-config", "retention.ms", "--log-dirs", data)
    assert rc == 0, err
    assert overrides(tmp_path / "data" / "ev-1") == "max.message.bytes=5000\nretention.bytes=77\nsegment.bytes=2097152\n"
    # The engine opens the partitions with the altered config.
    with LogManager(LogConfig.from_properties({"log.dirs": data}), start_scheduler=False) as manager:
        log = manager.get_log("ev", 1)
        assert log is not None
        assert (log.config.max_message_bytes, log.config.retention_bytes, log.config.segment_bytes) == (5000, 77, 2097152)
        assert log.config.retention_ms == 7 * 24 * 3600 * 1000  # back to the default


def test_alter_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "data")
    assert cli(capsys, "topics", "create", "-t", "ev", "--log-dirs", data)[0] == 0
    before = overrides(tmp_path / "data" / "ev-0")
    for extra, rc_wanted, expected in [
        (["-t", "nope", "--add-config", "retention.ms=1"], 1, "no topic 'nope'"),
        (["-t", "ev", "--add-config", "retention.ms=-9"], 2, "retention.ms"),
        (["-t", "ev", "--add-config", "retention.ms=1", "--delete-config", "bogus"], 2, "'bogus'"),
        (["-t", "ev"], 2, "needs --add-config KEY=VALUE, --delete-config KEY or --partitions N"),
        (["-t", "ev", "--add-config", "cleanup.policy=[compact"], 2, "unbalanced"),
        # kafka-configs: deleting a key that is not set is an error, and nothing else changes
        (["-t", "ev", "--add-config", "retention.ms=1", "--delete-config", "segment.ms"], 1,
         "tiered topics: Invalid config(s): segment.ms: not set for topic ev, nothing to delete"),
    ]:
        rc, _, err = cli(capsys, "topics", "alter", *extra, "--log-dirs", data)
        assert rc == rc_wanted, (extra, err)
        assert expected in one_line(err), (extra, err)
    assert overrides(tmp_path / "data" / "ev-0") == before


def test_alter_partitions_grows_the_topic_with_its_id_and_overrides_and_never_shrinks_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    assert cli(capsys, "topics", "create", "-t", "ev", "--partitions", "2", "--topic-config", "retention.ms=1000",
               "--log-dirs", str(data))[0] == 0
    rc, _, err = cli(capsys, "topics", "alter", "-t", "ev", "--partitions", "4", "--log-dirs", str(data))
    assert (rc, one_line(err)) == (0, "Added partition(s) 2, 3 to topic ev: 4 in all")
    assert len({(data / f"ev-{p}" / "partition.metadata").read_text() for p in range(4)}) == 1  # one topic id
    assert all(overrides(data / f"ev-{p}") == "retention.ms=1000\n" for p in range(4))
    for count in ("4", "3"):
        rc, _, err = cli(capsys, "topics", "alter", "-t", "ev", "--partitions", count, "--log-dirs", str(data))
        assert rc == 1 and f"has 4 partition(s): --partitions can only increase it, got {count}" in one_line(err)
    rc, _, err = cli(capsys, "topics", "describe", "-t", "ev", "--partitions", "9", "--log-dirs", str(data))
    assert rc == 2 and "--partitions does not apply to 'topics describe'" in one_line(err)


def test_a_write_to_a_partition_an_existing_topic_lacks_is_refused_and_a_new_topic_is_created_at_partition_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import types

    data = tmp_path / "data"

    def produce(topic: str, partition: int) -> tuple[int, str]:
        monkeypatch.setattr("sys.stdin", types.SimpleNamespace(buffer=io.BytesIO(b"a\n")))
        rc, _, err = cli(capsys, "produce", "-t", topic, "-p", str(partition), "--log-dirs", str(data))
        return rc, err

    rc, err = produce("fresh", 3)  # a new topic made of partition 3 alone: refused, naming how to make 4
    assert rc == 1 and one_line(err) == (
        "tiered produce: topic fresh does not exist and a write creates a topic only at partition 0 (one "
        "partition); for a topic of 4 partitions: tiered topics create --topic fresh --partitions 4")
    assert not data.exists() or not any(data.glob("fresh-*"))
    assert produce("fresh", 0)[0] == 0  # auto-create: a new topic of one partition
    rc, err = produce("fresh", 5)
    assert rc == 1 and one_line(err) == ("tiered produce: topic fresh has no partition 5 (it has 1: 0); to add "
                                         "partitions: tiered topics alter --topic fresh --partitions 6")
    assert produce("fre.sh", 0)[0] == 0  # another new topic
    rc, err = produce("fre_sh", 0)  # fre.sh's name once '.' is read as '_' (Kafka's Topic.hasCollision)
    assert rc == 1 and one_line(err) == ("tiered produce: Topic 'fre_sh' collides with existing topic: fre.sh (their "
                                         "names are one once '.' is read as '_')")
    assert not any(data.glob("fre_sh-*"))
    assert not (data / "fresh-5").exists()
    with LogManager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False) as manager:
        first = manager.get_or_create_log("t", 0)
        assert manager.get_or_create_log("t", 1).topic_id == first.topic_id  # the library: one id per topic


def test_turning_remote_storage_off_with_remote_data_is_refused_as_kafka_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    props = local_tier_props(tmp_path)
    config = tmp_path / "broker.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    assert cli(capsys, "--config", str(config), "topics", "create", "-t", "ev", "--partitions", "2",
               "--topic-config", "remote.storage.enable=true")[0] == 0
    RemoteLogStateFile(tmp_path / "data" / "ev-1").write(RemoteLogState(True, 41))  # ev-1 holds remote data
    rc, _, err = cli(capsys, "--config", str(config), "topics", "alter", "-t", "ev", "--add-config",
                     "remote.storage.enable=false")
    assert rc == 2 and "It is invalid to disable remote storage of ev-0" in one_line(err)  # (tiered: Kafka refuses it)
    assert all("remote.storage.enable=true" in overrides(tmp_path / "data" / f"ev-{p}") for p in range(2))  # neither
    rc, _, err = cli(capsys, "--config", str(config), "topics", "alter", "-t", "ev", "--add-config",
                     "remote.storage.enable=false,remote.log.delete.on.disable=true")
    assert rc == 0, err
    assert "remote.storage.enable=false" in overrides(tmp_path / "data" / "ev-0")


def test_describe_shows_every_config_with_its_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "data")
    assert cli(capsys, "topics", "create", "-t", "ev", "--topic-config", "retention.ms=1000", "--log-dirs", data)[0] == 0
    rc, out, _ = cli(capsys, "topics", "describe", "-t", "ev", "--log-dirs", data, "-o", "log.segment.bytes=2097152")
    assert rc == 0
    assert "Topic: ev\tTopicId: " in out and "PartitionCount: 1\tConfigs: retention.ms=1000" in out
    assert "  retention.ms=1000  (topic)" in out
    assert "  segment.bytes=2097152  (broker log.segment.bytes)" in out
    assert "  remote.storage.enable=false  (default)" in out
    rc, out, _ = cli(capsys, "topics", "describe", "--json", "--log-dirs", data)
    [doc] = json.loads(out)
    from local.config import topic_config_keys

    assert [c["name"] for c in doc["configs"]] == list(topic_config_keys())
    assert doc["topic_id"] == (tmp_path / "data" / "ev-0" / "partition.metadata").read_text().split("topic_id: ")[1]
    rc, _, err = cli(capsys, "topics", "describe", "-t", "nope", "--log-dirs", data)
    assert rc == 1 and "no topic 'nope'" in one_line(err)
    rc, _, err = cli(capsys, "topics", "list", "--log-dirs", str(tmp_path / "missing"))
    assert rc == 2 and "no such data dir" in one_line(err)


@pytest.mark.parametrize("command", ["produce", "consume", "attach"])
@pytest.mark.parametrize("name", ["bad/t", "..", "x" * 300], ids=["slash", "dot-dot", "300-chars"])
def test_every_command_refuses_an_invalid_topic_name_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, name: str
) -> None:
    data = tmp_path / "data"
    rc, out, err = cli(capsys, command, "-t", name, "--log-dirs", str(data))
    assert (rc, out) == (2, "")
    assert one_line(err) == (f"tiered {command}: invalid topic name {name!r}: must match [a-zA-Z0-9._-]{{1,249}} "
                             "and not be '.' or '..'")
    assert not data.exists()


def test_status_of_one_topic_shows_only_it_and_refuses_a_missing_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "data")
    for topic in ("ev", "other"):
        assert cli(capsys, "topics", "create", "-t", topic, "--partitions", "2", "--log-dirs", data)[0] == 0
    assert cli(capsys, "topics", "alter", "-t", "ev", "--add-config", "retention.ms=1000", "--log-dirs", data)[0] == 0
    rc, out, err = cli(capsys, "status", "-t", "ev", "--json", "--log-dirs", data)
    assert rc == 0, err
    [d] = json.loads(out)["data_dirs"]
    assert [p["partition"] for p in d["partitions"]] == ["ev-0", "ev-1"]
    assert sorted(d["last_load"]["partitions"]) == ["ev-0", "ev-1"]  # the last load opened other-* too
    # as 'topics describe' does: a topic that is not there is an error, not an empty table
    for command in ("status", "topics describe"):
        rc, out, err = cli(capsys, *command.split(), "-t", "nosuch", "--log-dirs", data)
        assert (rc, out) == (1, ""), command
        assert one_line(err) == f"tiered {command.split()[0]}: no topic 'nosuch' in {data}"


def test_a_low_soft_limit_of_open_files_is_raised_to_the_hard_one(tmp_path: Path) -> None:
    """Each partition holds a descriptor per segment file and mapped index: under a soft limit of 256 (the hard one
    higher), creating 150 partitions failed part way with "Too many open files" and took the data dir offline.
    The command raises its soft limit to the hard one first, as the JVM does for Kafka."""
    import resource
    import subprocess
    import sys

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.fail(f"this test needs a hard limit of open files of at least 1024, the machine has {hard}")

    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    proc = subprocess.run(
        [sys.executable, "-m", "tiered.cli", "topics", "create", "-t", "wide", "--partitions", "150", "--log-dirs",
         str(tmp_path / "data")], capture_output=True, text=True, timeout=300, preexec_fn=low)
    assert proc.returncode == 0, proc.stderr
    assert len(list((tmp_path / "data").glob("wide-*"))) == 150


def test_partitions_beyond_the_open_files_limit_are_refused_whole(tmp_path: Path) -> None:
    """`topics create --partitions N` past what the open-files limit holds made partitions until "Too many open
    files", took the data dir offline and left the topic half made (then `produce` said the topic did not exist
    while `create` said it did). Now it is refused before any partition is made, naming the limit, and a
    creation that fails part way deletes what it made."""
    import resource
    import subprocess
    import sys

    data = tmp_path / "data"

    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (512, 512))  # soft and hard: nothing to raise

    proc = subprocess.run(
        [sys.executable, "-m", "tiered.cli", "topics", "create", "-t", "wide", "--partitions", "400", "--log-dirs",
         str(data)], capture_output=True, text=True, timeout=300, preexec_fn=low)
    assert proc.returncode == 1
    assert "cannot create 400 partition(s) of wide" in proc.stderr and "ulimit -n" in proc.stderr
    assert not list(data.glob("wide-*"))
    ok = subprocess.run(
        [sys.executable, "-m", "tiered.cli", "topics", "create", "-t", "wide", "--partitions", "40", "--log-dirs",
         str(data)], capture_output=True, text=True, timeout=300, preexec_fn=low)
    assert ok.returncode == 0, ok.stderr
    grow = subprocess.run(
        [sys.executable, "-m", "tiered.cli", "topics", "alter", "-t", "wide", "--partitions", "400", "--log-dirs",
         str(data)], capture_output=True, text=True, timeout=300, preexec_fn=low)
    assert grow.returncode == 1 and "cannot add 360 partition(s) to wide" in grow.stderr
    assert len(list(data.glob("wide-*"))) == 40


def test_a_creation_that_fails_part_way_leaves_no_partition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from local import LogConfig, LogManager

    manager = LogManager(LogConfig.from_properties({"log.dirs": str(tmp_path / "data")}), start_scheduler=False)
    real = manager._create_log
    calls = []
    seen: list[object] = []

    def failing(topic: str, partition: int, *args: object, **kwargs: object) -> object:
        calls.append(partition)
        seen.append(manager.get_log("t", 0))  # (no reader sees the topic with some of its partitions)
        if partition == 3:
            raise OSError(28, "No space left on device")
        return real(topic, partition, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(manager, "_create_log", failing)
    try:
        with pytest.raises(OSError, match="No space left"):
            manager.create_partitions("t", range(6))
        assert calls == [0, 1, 2, 3] and seen == [None] * 4
        assert manager.get_log("t", 0) is None and not list((tmp_path / "data").glob("t-*"))
        assert not list((tmp_path / "data").glob("tiered-topic-intent-*"))
    finally:
        manager.close()


def test_a_dir_failing_after_a_creation_committed_leaves_each_partition_online_or_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A data dir failing between the creation's commit and its registration stopped the registration at the
    first partition of that dir: the partitions after it were on disk but neither online nor offline, and a later
    create opened a second Log on one of them (a review's finding)."""
    import local.manager
    from local import LogConfig, LogManager

    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(LogConfig.from_properties({"log.dirs": ",".join(map(str, dirs))}), start_scheduler=False)
    commit = local.manager.remove_intents

    def commit_then_fail(paths: object) -> None:
        commit(paths)  # type: ignore[arg-type]
        manager._mark_offline(dirs[0], "injected I/O error", OSError(5, "Input/output error"))

    monkeypatch.setattr(local.manager, "remove_intents", commit_then_fail)
    try:
        with pytest.raises(Exception, match="offline"):
            manager.create_partitions("t", range(6))
        online = {p for t, p in manager._logs if t == "t"}
        offline = {p for t, p in manager.offline_partitions if t == "t"}
        assert online | offline == set(range(6)) and not online & offline and online and offline
        assert all(manager.data_dir_of("t", p) == dirs[1] for p in online)
    finally:
        manager.close()


def test_a_creation_with_every_data_dir_offline_says_so(tmp_path: Path) -> None:
    from local import LogConfig, LogManager
    from local.errors import LogDirOfflineError

    data = tmp_path / "data"
    manager = LogManager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False)
    try:
        manager._mark_offline(data, "injected I/O error", OSError(5, "Input/output error"))
        with pytest.raises(LogDirOfflineError, match="every data dir is offline"):
            manager.create_partitions("t", range(3))  # (it was min() of an empty sequence)
    finally:
        manager.close()


def test_create_refuses_a_name_that_collides_with_an_existing_topic(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "data")
    assert cli(capsys, "topics", "create", "-t", "a.b", "--log-dirs", data)[0] == 0
    code, _, err = cli(capsys, "topics", "create", "-t", "a_b", "--log-dirs", data)
    assert code == 1 and "collides with existing topic 'a.b'" in err
    assert sorted(p.name for p in (tmp_path / "data").glob("a*")) == ["a.b-0"]
