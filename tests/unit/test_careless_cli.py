"""Careless input to the CLI (issue 28): each gets one line on stderr and the right exit code (0 ok, 1 failure, 2
usage), and what was confusing says what it is. The HTTP ones are in test_run_server.py, the S3 endpoint that is not
S3 in test_cli_remote_errors.py."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from local import LogConfig, LogManager
from local.errors import ConfigError
from local.properties import format_properties, parse_properties, read_properties
from local.records import MemoryRecords, SimpleRecord
from tiered.cli import main


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


def _log_with_records(data: Path, topic: str = "t", count: int = 3) -> None:
    with LogManager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False) as manager:
        manager.get_or_create_log(topic, 0).append(
            MemoryRecords.build([SimpleRecord(1000 + i, None, f"v{i}".encode()) for i in range(count)]))


def test_a_timestamp_below_kafkas_special_values_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _log_with_records(tmp_path / "data")
    with pytest.raises(SystemExit) as exit_info:
        main(["consume", "-t", "t", "--log-dirs", str(tmp_path / "data"), "--timestamp=-6"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert err.splitlines()[-1] == (
        "tiered consume: error: argument --timestamp: invalid timestamp -6: expected milliseconds since the epoch (>= "
        "0) or one of Kafka's special values (-1 latest, -2 earliest, -3 max timestamp, -4 earliest local, -5 latest "
        "tiered)")


def test_the_timestamp_help_names_kafkas_special_values_and_each_works(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["consume", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for special in ("-1 latest (the log end offset)", "-2 earliest (the log start offset)",
                    "-3 the record with the largest timestamp", "-4 earliest local (the local log start offset)",
                    "-5 latest tiered (the last offset in the remote tier)"):
        assert special in help_text
    data = str(tmp_path / "data")
    _log_with_records(tmp_path / "data")
    assert cli(capsys, "consume", "-t", "t", "--log-dirs", data, "--timestamp", "-2")[1].split() == ["v0", "v1", "v2"]
    assert cli(capsys, "consume", "-t", "t", "--log-dirs", data, "--timestamp", "-3")[1].split() == ["v2"]
    rc, out, err = cli(capsys, "consume", "-t", "t", "--log-dirs", data, "--timestamp", "-1")
    assert (rc, out) == (0, "") and "it is the log end offset" in err
    rc, out, err = cli(capsys, "consume", "-t", "t", "--log-dirs", data, "--timestamp", "-5")
    assert (rc, out) == (0, "") and err == "tiered consume: no offset of t-0 is in the remote tier (--timestamp -5 is the last offset there)\n"


def test_a_properties_file_is_read_as_iso_8859_1_like_java(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "broker.properties"
    (tmp_path / "data").mkdir()
    config.write_bytes(b"# caf\xe9 \xff\nlog.dirs=" + str(tmp_path / "data").encode() + b"\nx.note=\xff\\u20ac\n")
    assert read_properties(config)["x.note"] == "\u00ff\u20ac"  # 0xff is U+00FF; \u escapes for the rest
    rc, _, err = cli(capsys, "--config", str(config), "topics", "list")
    assert rc == 0 and "UnicodeDecodeError" not in err
    # only \n, \r and \r\n end a line, as in Java (0x85 read as ISO-8859-1 is U+0085, which str.splitlines splits at)
    assert parse_properties("a=x\x85y\nb=2") == {"a": "x\x85y", "b": "2"}


@given(st.dictionaries(st.text(min_size=1), st.text()))
def test_properties_written_are_read_back_the_same(props: dict[str, str]) -> None:
    text = format_properties(props)
    assert text.isascii() and parse_properties(text.encode("ascii").decode("iso-8859-1")) == props


def test_topic_configs_are_stored_as_java_writes_properties(tmp_path: Path) -> None:
    with LogManager(LogConfig.from_properties({"log.dirs": str(tmp_path)}), start_scheduler=False) as manager:
        manager.get_or_create_log("t", 0, {"retention.ms": "1000", "cleanup.policy": "delete"})
    stored = tmp_path / "t-0" / "tiered-topic.properties"
    assert stored.read_bytes().isascii() and read_properties(stored)["retention.ms"] == "1000"


def test_files_waiting_out_the_delete_delay_are_not_called_leftovers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    _log_with_records(data)
    (data / "t-0" / "00000000000000000007.log.deleted").write_bytes(b"")  # Kafka's asynchronous delete, waiting
    rc, out, _ = cli(capsys, "status", "--log-dirs", str(data))
    assert rc == 0 and "1 deleted segment file(s) awaiting removal (file.delete.delay.ms)" in out and "leftover" not in out
    rc, out, _ = cli(capsys, "verify", "--log-dirs", str(data))
    assert rc == 0 and "00000000000000000007.log.deleted awaits removal" in out and "leftover" not in out
    (data / "t-0" / "00000000000000000009.log.swap").write_bytes(b"")  # an interrupted swap: a leftover
    rc, out, _ = cli(capsys, "status", "--log-dirs", str(data))
    assert "1 leftover .swap/.cleaned file(s)" in out


@pytest.mark.parametrize(("option", "value"), [("--duration", "-1"), ("--duration", "nan"), ("--stop-timeout", "-3")])
def test_run_refuses_a_negative_duration(tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--log-dirs", str(tmp_path / "data"), option, value])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.splitlines()[-1] == f"tiered run: error: argument {option}: invalid value {value}: expected a number of seconds >= 0"
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_dump_of_random_bytes_named_as_an_index_reports_it_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str,
) -> None:
    rng = random.Random(28)
    for n in range(20):  # several random files: each is refused, none prints an offset below its base offset
        path = tmp_path / f"{n * 100:020d}{suffix}"
        path.write_bytes(rng.randbytes(4096))
        rc, out, _ = cli(capsys, "dump", str(path))
        assert rc == 1, out
        assert f"ERROR: {path.name} is not {'an offset' if suffix == '.index' else 'a time'} index or is corrupt" in out
        for line in out.splitlines()[1:-1]:
            if line.startswith(("entry_size", "ERROR: ")):  # (a torn last entry is one more error)
                continue
            fields = dict(zip(line.split()[::2], line.split()[1::2], strict=True))
            assert int(fields["offset:"]) >= n * 100 and min(map(int, fields.values())) >= 0


def test_dump_of_an_index_with_a_zero_filled_tail_stops_at_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / f"{50:020d}.index"
    path.write_bytes((1).to_bytes(4, "big") + (0).to_bytes(4, "big") + (3).to_bytes(4, "big") + (70).to_bytes(4, "big")
                     + bytes(80))  # two entries, then preallocated space
    rc, out, _ = cli(capsys, "dump", str(path))
    assert rc == 0 and out.splitlines()[1:] == ["entry_size: 8", "offset: 51 position: 0", "offset: 53 position: 70"]


def test_a_broker_local_retention_above_the_total_is_refused_at_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    remote = ["-o", "remote.log.storage.system.enable=true", "-o", "remote.log.storage.manager.class.name=local",
              "-o", f"rsm.config.dir={tmp_path / 'remote'}"]
    rc, _, err = cli(capsys, "status", "--log-dirs", str(tmp_path / "data"), *remote,
                     "-o", "log.retention.ms=60000", "-o", "log.local.retention.ms=3600000")
    assert rc == 2 and err == ("tiered status: Invalid value 3600000 for configuration log.local.retention.ms: must not "
                               "exceed log.retention.ms (60000)\n")
    with pytest.raises(ConfigError, match=r"log\.local\.retention\.bytes: must not exceed log\.retention\.bytes"):
        LogConfig.from_properties({"log.dirs": str(tmp_path), "remote.log.storage.system.enable": "true",
                                   "log.retention.bytes": "10", "log.local.retention.bytes": "11"})
    # without the remote tier the local keys do nothing, as in Kafka: not refused
    LogConfig.from_properties({"log.dirs": str(tmp_path), "log.retention.ms": "1", "log.local.retention.ms": "2"})


def test_a_missing_config_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = cli(capsys, "--config", str(tmp_path / "nope.properties"), "status")
    assert rc == 2 and err.startswith(f"tiered status: cannot read configuration file {tmp_path / 'nope.properties'}")
    assert err.count("\n") == 1 and os.listdir(tmp_path) == []


@pytest.mark.parametrize("command", [["status"], ["consume", "-t", "t"], ["verify"], ["compact"], ["topics", "list"],
                                     ["features", "describe"], ["export", "-t", "t", "OUT"]])
def test_a_mistyped_data_dir_gets_one_answer_from_every_command_that_never_makes_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    typo = tmp_path / "dtaa"
    args = [str(tmp_path / "out") if a == "OUT" else a for a in command]
    rc, _out, err = cli(capsys, *args, "--log-dirs", str(typo))
    assert rc == 2
    assert err.count("\n") == 1 and f"no such data dir: {typo}" in err
    assert not typo.exists()


@pytest.mark.parametrize("policy", ["compact,,delete", "compact,", ",delete", "compact, ,delete"])
def test_a_cleanup_policy_with_an_empty_element_is_refused_as_kafka_does(policy: str) -> None:
    with pytest.raises(ConfigError, match=rf"Invalid value {policy} for configuration cleanup.policy"):
        LogConfig.from_properties({"log.dirs": "/tmp/unused"}).topic_config({"cleanup.policy": policy})


@pytest.mark.parametrize(("policy", "stored"), [("compact", "compact"), (" compact , delete ", "compact,delete"),
                                                ("delete,compact", "delete,compact")])
def test_a_cleanup_policy_list_is_taken_trimmed(policy: str, stored: str) -> None:
    config = LogConfig.from_properties({"log.dirs": "/tmp/unused"}).topic_config({"cleanup.policy": policy})
    assert config.cleanup_policy == stored


@pytest.mark.parametrize("where", ["data_dir", "parent_of_everything", "remote_dir", "inside_data_dir", "columnar_dir",
                                   "config_file"])
def test_export_never_writes_over_or_into_what_it_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        where: str) -> None:
    """`tiered export -t ev --overwrite OUT` replaced OUT whatever it was: the data dir, its parent (the data dir,
    the remote tier and the config file with it), or the local remote tier whose segments were the only copy of
    their records (a helper's pass: exit 0, data gone). OUT that is, holds or lies inside one of the config's own
    places is a usage error, before Spark starts and before anything is touched."""
    from tests.logutil import local_tier_props

    props = local_tier_props(tmp_path)
    config = tmp_path / "broker.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    _log_with_records(tmp_path / "data", "ev")
    (tmp_path / "remote").mkdir()
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    out = {"data_dir": tmp_path / "data", "parent_of_everything": tmp_path, "remote_dir": tmp_path / "remote",
           "inside_data_dir": tmp_path / "data" / "exported", "columnar_dir": tmp_path / "remote-columnar",
           "config_file": config}[where]
    rc, _, err = cli(capsys, "--config", str(config), "export", "-t", "ev", "--overwrite", str(out))
    assert rc == 2 and err.count("\n") == 1, err
    assert f"OUT {out} " in err and ("data dir" in err or "remote" in err or "columnar" in err or "config file" in err)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before


def test_a_huge_partition_count_is_refused_before_anything_is_allocated(tmp_path: Path) -> None:
    """`topics create --partitions 99999999999` grew to 23 GB before the kernel killed it (a helper's pass): the list
    of new partitions was built before the open-files check. Beyond an int32 it is a usage error; below, the check
    runs on the count. Run under a 2 GiB address-space limit, so a regression fails here instead of taking the
    machine's memory."""
    import resource
    import subprocess
    import sys

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tiered.cli", "--log-dirs", str(tmp_path), *args],
                              capture_output=True, text=True, timeout=120, preexec_fn=limit)

    for count, code, says in (("99999999999", 2, "at most 2147483647 partitions"),
                              ("2147483647", 1, "cannot create 2147483647 partition(s) of zz")):
        proc = run("topics", "create", "-t", "zz", "--partitions", count)
        assert proc.returncode == code and says in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr
    assert not list(tmp_path.glob("zz-*"))
    assert run("topics", "create", "-t", "zz").returncode == 0
    proc = run("topics", "alter", "-t", "zz", "--partitions", "2147483647")
    assert proc.returncode == 1 and "cannot add 2147483646 partition(s) to zz" in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.glob("zz-*")) == ["zz-0"]


def test_produce_topic_config_never_rewrites_an_existing_topics_partition(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`produce -t ev -p 1 --topic-config remote.storage.enable=false` replaced partition 1's overrides alone (its
    other override dropped, the topic's partitions now configured apart, the remote-storage guard passed by), exit 0
    (a helper's pass). For an existing topic it is a usage error unless it says what the topic has already."""
    import io

    data = tmp_path / "data"
    rc, _, err = cli(capsys, "--log-dirs", str(data), "topics", "create", "-t", "ev", "--partitions", "2",
                     "--topic-config", "retention.ms=86400000", "--topic-config", "segment.ms=3600000")
    assert rc == 0, err
    files = {p: (data / f"ev-{p}" / "tiered-topic.properties").read_bytes() for p in (0, 1)}

    def produce(*extra: str) -> tuple[int, str]:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"hi\n")))
        rc, _, err = cli(capsys, "--log-dirs", str(data), "produce", "-t", "ev", "-p", "1", *extra)
        return rc, err

    rc, err = produce("--topic-config", "retention.ms=1000")
    assert rc == 2 and "topic ev exists" in err and "retention.ms=1000" in err and "topics alter" in err, err
    assert {p: (data / f"ev-{p}" / "tiered-topic.properties").read_bytes() for p in (0, 1)} == files
    rc, err = produce("--topic-config", "retention.ms=86400000")  # what the topic has: nothing to change
    assert rc == 0 and "produced 1 records to ev-1" in err, err
    assert {p: (data / f"ev-{p}" / "tiered-topic.properties").read_bytes() for p in (0, 1)} == files


def test_verify_of_a_topic_that_is_not_there_is_not_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`verify -t <typo>` said "verify OK: ... 0 partition(s)", exit 0, where status and compact refuse the typo (a
    helper's pass): a script checking one topic passed on a misspelt name."""
    _log_with_records(tmp_path / "data", "ev")
    rc, out, err = cli(capsys, "--log-dirs", str(tmp_path / "data"), "verify", "-t", "evv")
    assert rc == 1 and f"no topic 'evv' in {tmp_path / 'data'}" in err and "OK" not in out, (out, err)
    rc, _, err = cli(capsys, "--log-dirs", str(tmp_path / "data"), "verify", "-t", "a/b")
    assert rc == 2 and "a/b" in err
    rc, out, _ = cli(capsys, "--log-dirs", str(tmp_path / "data"), "verify", "-t", "ev")
    assert rc == 0 and "verify OK" in out


def test_an_unreadable_local_remote_tier_is_named_not_taken_for_missing_data(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """With rsm.config.dir unreadable, the listing was empty: verify --remote reported an offset gap "(which ends at
    None)" and never the EACCES (a helper's pass). A directory that cannot be listed is a store error naming it."""
    from tests.logutil import local_tier_props

    props = local_tier_props(tmp_path)
    config = tmp_path / "broker.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "t-x").mkdir()
    real = os.scandir

    def denied(path: Any) -> Any:
        if str(path).startswith(str(remote)):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", denied)
    rc, out, err = cli(capsys, "--config", str(config), "verify", "--remote-only")
    assert rc == 1 and "Permission denied" in out + err and "None" not in out + err, (out, err)


def test_offload_whose_data_dir_went_offline_exits_1_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A data dir taken offline during the pass (an unreadable partition dir, an I/O error) was logged, and offload
    exited 0 with 'copied 0 segment(s)' (a helper's pass)."""
    from tests.logutil import local_tier_props
    from tiered.commands import offload

    props = local_tier_props(tmp_path)
    config = tmp_path / "broker.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    _log_with_records(tmp_path / "data", "ev")
    real = offload.offload_once

    def failing(manager: Any, **kwargs: Any) -> Any:
        manager._mark_offline(tmp_path / "data", "[Errno 13] Permission denied: 'ev-0'")
        return real(manager, **kwargs)

    monkeypatch.setattr(offload, "offload_once", failing)
    rc, _, err = cli(capsys, "--config", str(config), "offload")
    assert rc == 1 and f"data dir {tmp_path / 'data'} is offline" in err and "Permission denied" in err, err


def test_produce_stops_reading_a_line_no_record_can_hold_and_names_closed_stdin(tmp_path: Path) -> None:
    """One 1.5 GB line was read whole (5.8 GB resident) before its size was checked, and a topic was made; produce
    with stdin closed said "unexpected error: AttributeError" (a helper's pass)."""
    import subprocess
    import sys

    data = tmp_path / "data"

    def produce(text: bytes | None, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "tiered.cli", "--log-dirs", str(data), "produce", "-t", "big"],
                              input=text, capture_output=True, timeout=120, **kwargs)

    proc = produce(b"x" * (3 << 20) + b"\n")  # 3 MiB: more than max.message.bytes allows a record
    assert proc.returncode == 1, proc.stderr
    assert b"line 1 is longer than 1114124 bytes" in proc.stderr and b"max.message.bytes 1048588" in proc.stderr
    assert not list(data.glob("big-*"))
    proc = produce(None, stdin=subprocess.DEVNULL, preexec_fn=lambda: os.close(0))
    assert proc.returncode == 2 and b"stdin is closed" in proc.stderr and b"Traceback" not in proc.stderr, proc.stderr


def test_consume_never_creates_a_mistyped_remote_tier_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A read-only consume with a mistyped rsm.config.dir made that directory (a helper's pass); status and verify
    did not. It says the directory does not exist, and makes nothing."""
    from tests.logutil import local_tier_props

    _log_with_records(tmp_path / "data", "ev")
    props = local_tier_props(tmp_path, **{"rsm.config.dir": str(tmp_path / "remote-typo")})
    config = tmp_path / "broker.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    rc, _, err = cli(capsys, "--config", str(config), "consume", "-t", "ev")
    assert rc == 1 and f"{tmp_path / 'remote-typo'} (rsm.config.dir) does not exist" in err, err
    assert not (tmp_path / "remote-typo").exists()


def test_sigterm_is_handled_as_ctrl_c_saying_what_was_written(tmp_path: Path) -> None:
    """SIGTERM (kill, systemd, `timeout`) ended produce on the spot with no word of what it wrote, where Ctrl-C says it
    (a helper's pass). It is handled as Ctrl-C: the cleanups run, the line says what was written, exit 143."""
    import signal
    import subprocess
    import sys
    import time

    data = tmp_path / "data"
    proc = subprocess.Popen([sys.executable, "-m", "tiered.cli", "--log-dirs", str(data), "produce", "-t", "ev",
                             "--batch-size", "10"], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(b"".join(b"line-%d\n" % i for i in range(100)))
    proc.stdin.flush()  # (stdin stays open: produce waits for more)
    segment = data / "ev-0" / "00000000000000000000.log"
    deadline = time.monotonic() + 120  # a failure bound only: the loop ends once the records are appended
    while not (segment.exists() and segment.stat().st_size > 0) and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM, err
    assert "tiered produce: interrupted; produced " in err and "Traceback" not in err, err


def test_clients_cannot_write_to_an_internal_topic_from_produce_or_http(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`produce -t __consumer_offsets` made the group coordinator's topic with 1 partition (Kafka's has
    offsets.topic.num.partitions, 50), where the Kafka listener refuses such writes (a helper's pass)."""
    import io

    from local import LogConfig
    from local.errors import InvalidTopicError
    from tiered.http_server import Endpoint, _error_status

    data = tmp_path / "data"
    for topic in ("__consumer_offsets", "__transaction_state"):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"hi\n")))
        rc, _, err = cli(capsys, "--log-dirs", str(data), "produce", "-t", topic)
        assert rc == 1 and f"{topic} is an internal topic" in err, err
    assert not list(data.glob("__*"))
    with LogManager(LogConfig.from_properties({"log.dirs": str(data)})) as manager:
        with pytest.raises(InvalidTopicError, match="is an internal topic") as refused:
            Endpoint(manager).produce("__consumer_offsets", 0, b'{"value": "x"}', "none")
        assert _error_status(refused.value)[0] == 400  # (what the handler answers)
    assert not list(data.glob("__*"))


@pytest.mark.parametrize("given", [["-o", "log.segment.bytes=abc"], ["--log-dirs", "."], ["--config", "b.properties"]])
def test_quickstart_refuses_the_global_options_it_would_ignore(capsys: pytest.CaptureFixture[str],
                                                               given: list[str]) -> None:
    """quickstart took --config, --log-dirs and -o (an invalid value too) and ignored them, running in its own temp
    dir (a helper's pass)."""
    rc, _, err = cli(capsys, *given, "quickstart", "--records", "10")
    assert rc == 2 and f"it takes no {given[0]}" in err and "--dir DIR" in err, err


def test_spark_commands_check_master_and_codec_before_spark_starts(capsys: pytest.CaptureFixture[str]) -> None:
    """`export --master banana` printed a Java stack trace and "Java gateway process exited", and `import
    --compression brotli` was refused only once Spark had started (a helper's pass): both are usage errors now."""
    for args, says in ((["export", "-t", "ev", "--master", "banana", "out"], "invalid Spark master 'banana'"),
                       (["import", "-t", "ev", "--compression", "brotli", "in"], "'brotli'")):
        with pytest.raises(SystemExit) as usage:  # (argparse's own usage error)
            main(args)
        err = capsys.readouterr().err
        assert usage.value.code == 2 and says in err and "Java" not in err, err


@pytest.mark.parametrize("command", [["compact"], ["produce", "-t", "p"], ["status"], ["verify"], ["consume", "-t", "p"]])
def test_a_directory_of_other_files_is_not_taken_for_a_data_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """--log-dirs /etc was taken for a data dir: checkpoints and a lock were written into it, dbus-1 and polkit-1
    became partitions with segments, and a user's file named like a segment, in a folder named like a partition,
    was truncated by recovery as invalid bytes (a helper's pass). A non-empty directory holding no file a Kafka or
    tiered data dir has, and no partition directory with segments, is refused naming it; nothing is written."""
    import io

    folder = tmp_path / "mine"
    (folder / "photos-2024").mkdir(parents=True)
    (folder / "photos-2024" / "readme.txt").write_text("mine")
    (folder / "notes-1").mkdir()
    (folder / "notes-1" / "todo.md").write_text("x")  # (an empty dir named like a partition would be one just made)
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"x\n")))
    rc, _out, err = cli(capsys, *command, "--log-dirs", str(folder))
    assert rc == 2 and f"{folder} does not look like a Kafka data dir" in err, err
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before  # nothing written
    assert sorted(p.name for p in folder.iterdir()) == ["notes-1", "photos-2024"]
    with pytest.raises(ConfigError, match="does not look like a Kafka data dir"):  # (a config file's dir too)
        LogManager(LogConfig.from_properties({"log.dirs": str(folder)}), start_scheduler=False)


def test_data_dirs_kafka_or_tiered_wrote_and_new_ones_are_taken(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What the check must never refuse: an empty or missing dir, one holding only lost+found (a new file system),
    a data dir tiered wrote, a real Kafka 4.0 log dir (its meta.properties), and partition dirs copied in alone
    (of Kafka's -future kind, symlinked), a broker's properties file alone, Kafka's hidden clean-shutdown marker."""
    import shutil

    from local.manager import foreign_dir_reason

    empty, mount, copied = tmp_path / "empty", tmp_path / "mount", tmp_path / "copied"
    empty.mkdir()
    (mount / "lost+found").mkdir(parents=True)
    _log_with_records(tmp_path / "ours")
    shutil.copytree(tmp_path / "ours" / "t-0", copied / "t-0")
    golden = tmp_path / "golden"
    shutil.copytree(Path(__file__).parents[1] / "fixtures" / "kafka-4.0-kraft-logs", golden)
    configured = tmp_path / "configured"  # the broker's properties put in the data dir before its first start
    configured.mkdir()
    (configured / "server.properties").write_text("log.dirs=x\n")
    restoring = tmp_path / "restoring"  # a copy caught mid-way: a partition dir of Kafka's -future kind, a .swap
    (restoring / "t-0.0123456789abcdef0123456789abcdef-future").mkdir(parents=True)
    (restoring / "t-0.0123456789abcdef0123456789abcdef-future" / "00000000000000000000.log.swap").write_bytes(b"")
    linked = tmp_path / "linked"  # partition dirs symlinked in
    linked.mkdir()
    (linked / "t-0").symlink_to(tmp_path / "ours" / "t-0")
    clean = tmp_path / "clean"  # only Kafka's hidden clean-shutdown marker and someone's notes
    clean.mkdir()
    (clean / ".kafka_cleanshutdown").write_text("")
    (clean / "notes.txt").write_text("x")
    for data in (configured, restoring, linked, clean):
        assert foreign_dir_reason(data) is None, data
    for data in (empty, mount, tmp_path / "new", tmp_path / "ours", copied, golden):
        if data.exists():  # (status never makes one)
            rc, _out, err = cli(capsys, "status", "--log-dirs", str(data))
            assert rc in (0, 1) and "does not look like" not in err, (data, err)
        with LogManager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False):
            pass


def test_produce_cuts_batches_at_max_message_bytes_and_says_what_it_wrote_before_a_record_too_large(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two lines of 800 KB in one --batch-size batch failed the run with "batch of 1601621 bytes at position 0 exceeds
    max.message.bytes" after the batches before them were written, without saying so: a rerun wrote them twice (a
    helper's pass). Batches are cut at the topic's max.message.bytes, as the HTTP endpoint cuts them; a record that
    no batch can hold names its place in the input and what was written before it."""
    import io

    data = str(tmp_path / "data")

    def produce(lines: list[bytes]) -> tuple[int, str]:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"".join(line + b"\n" for line in lines))))
        rc, _out, err = cli(capsys, "produce", "--log-dirs", data, "-t", "p", "--batch-size", "500")
        return rc, err

    small = [b"small%d" % i for i in range(600)]
    rc, err = produce([*small, b"x" * 800_000, b"y" * 800_000])
    assert rc == 0 and "produced 602 records to p-0 (offsets 0..601)" in err, err
    rc, err = produce([b"a", b"b", b"z" * 1_048_560])  # one record whose batch is above 1048588 bytes
    assert rc == 1 and "record 3 of the input takes a batch of" in err and "produced" not in err, err
    rc, err = produce([b"a", b"b", *small[:498], b"z" * 1_048_560])  # the first --batch-size batch is written
    assert rc == 1 and "record 501 of the input" in err, err
    assert err.rstrip().endswith("produced 500 records to p-0 (offsets 602..1101) before it"), err
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"a\nb\n" + b"z" * 1_048_560 + b"\n")))
    rc, _out, err = cli(capsys, "produce", "--log-dirs", data, "-t", "p", "--batch-size", "1")
    assert rc == 1 and err.rstrip().endswith("produced 2 records to p-0 (offsets 1102..1103) before it"), err
    with LogManager(LogConfig.from_properties({"log.dirs": data}), start_scheduler=False) as manager:
        log = manager.get_log("p", 0)
        assert log is not None and log.log_end_offset == 1104


def test_kafka_topics_config_spelling_and_a_directory_to_dump_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`topics create --config k=v` (kafka-topics' spelling) said only "cannot read configuration file k=v", and
    `dump` of a directory named like a segment "[Errno 21] Is a directory" without the path (a helper's pass)."""
    rc, _out, err = cli(capsys, "topics", "create", "-t", "x", "--config", "retention.ms=5", "--log-dirs",
                        str(tmp_path / "data"))
    assert rc == 2 and "a topic's config is --topic-config KEY=VALUE" in err, err
    segment_named = tmp_path / "00000000000000000000.log"
    segment_named.mkdir()
    rc, _out, err = cli(capsys, "dump", str(segment_named))
    assert rc == 1 and err.strip() == f"tiered dump: {segment_named}: a directory, not a file", err


def test_consume_of_a_batch_whose_base_offset_is_damaged_names_the_file_and_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A base offset is outside the batch CRC: a flipped bit there was said as "its base offset is damaged" without
    the file or the place in it (a helper's pass; verify named them)."""
    import struct

    data = tmp_path / "data"
    with LogManager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False) as manager:
        log = manager.get_or_create_log("q", 0)
        for first in range(0, 50, 10):
            log.append(MemoryRecords.build([SimpleRecord(1000 + i, None, b"v%d" % i) for i in range(first, first + 10)]))
    segment = data / "q-0" / "00000000000000000000.log"
    raw = bytearray(segment.read_bytes())
    second = 12 + struct.unpack_from(">i", raw, 8)[0]
    raw[second + 7] ^= 0x40  # the second batch's base offset: 10 -> 74
    segment.write_bytes(bytes(raw))
    rc, out, err = cli(capsys, "consume", "-t", "q", "--log-dirs", str(data))
    assert rc == 1 and out.split() == [f"v{i}" for i in range(10)], out
    assert f"batch holding offsets 74..83 (at byte {second} of {segment})" in err, err
    assert "its base offset is damaged" in err


@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_an_interrupt_during_an_append_acts_once_the_append_is_counted(signum: str) -> None:
    """A produce interrupted between an append's write and its bookkeeping said "nothing written" while the records
    were in the log (a CI run beside other work). The interrupt waits for the block, then acts as it would have."""
    import os
    import signal

    from tiered.cli import _terminated
    from tiered.commands._common import Terminated, interrupts_deferred

    sig = getattr(signal, signum)
    interrupt = signal.signal(signal.SIGINT, signal.default_int_handler)  # (Spark's, if a session set one)
    previous = signal.signal(signal.SIGTERM, _terminated)
    done = []
    try:
        with pytest.raises(Terminated if signum == "SIGTERM" else KeyboardInterrupt), interrupts_deferred():
            os.kill(os.getpid(), sig)
            for _ in range(1000):  # (bytecodes enough for the handler to have run, were it not deferred)
                pass
            done.append("counted")
        assert done == ["counted"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # (put back as it was)
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, interrupt)
