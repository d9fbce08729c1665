"""The tiered command line: exit codes, the main job, dump on real Kafka files, produce/consume round trip."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tiered.cli import main


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tiered.cli", *args], input=stdin, capture_output=True, text=True, timeout=300)


def test_usage_and_help_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    with pytest.raises(SystemExit) as info:
        main(["dump", "--help"])
    assert info.value.code == 0
    with pytest.raises(SystemExit) as info:
        main(["nonsense"])
    assert info.value.code == 2


def test_help_does_not_load_the_engine() -> None:
    code = "import sys; from tiered.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit: pass\nprint('numpy' in sys.modules, 'local.log' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.strip().endswith("False False")


def test_quickstart_runs_the_whole_product(tmp_path: Path) -> None:
    proc = run_cli("quickstart", "--dir", str(tmp_path / "qs"), "--records", "12000")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all match" in proc.stdout
    assert "fetches from the remote tier" in proc.stdout
    assert any((tmp_path / "qs" / "remote").rglob("*.log"))
    # piped: every line whole, as a script or a log file reads it (no wrapping at 80 columns)
    assert any(line.startswith("read back 12000/12000 records") and line.endswith(": ok") for line in proc.stdout.splitlines())


def test_quickstart_of_a_few_records_still_tiers_them_and_reads_them_back_from_the_remote_tier(tmp_path: Path) -> None:
    proc = run_cli("quickstart", "--dir", str(tmp_path / "qs"), "--records", "50")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "offloaded 1 segments" in proc.stdout and "read back 50/50 records (1 fetches from the remote tier)" in proc.stdout
    assert ("restarted: quickstart-0 reopened with log start offset 0, local log start offset 50, log end offset 50, "
            "1 local segment(s)") in proc.stdout.splitlines()  # a sentence, not a Python repr


def test_dump_golden_files_json(golden_dir: Path) -> None:
    log = golden_dir / "foo-0" / "00000000000000000000.log"
    proc = run_cli("dump", "--deep", "--json", str(log))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["type"] == "log"
    assert [b["baseOffset"] for b in doc["items"]] == [0, 2]
    assert [r["payload"] for b in doc["items"] for r in b["records"]] == ["m1", "m2", "m3"]
    index = golden_dir / "__cluster_metadata-0" / "00000000000000000000.index"
    proc = run_cli("dump", "--verify", "--json", str(index))
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["items"][1:] == [{"offset": 56, "position": 4123}]


def test_dump_reports_corruption_with_position_and_exit_1(golden_dir: Path) -> None:
    log = golden_dir / "foo-0" / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    data[-1] ^= 0xFF
    log.write_bytes(bytes(data))
    proc = run_cli("dump", str(log))
    assert proc.returncode == 1
    assert "baseOffset: 0" in proc.stdout  # what came before is still printed
    assert "corrupt batch at position 80" in proc.stdout
    index = golden_dir / "__cluster_metadata-0" / "00000000000000000000.index"
    clean = run_cli("dump", "--verify", str(index))
    assert clean.returncode == 0 and clean.stdout.splitlines()[-1] == f"Verified {index}: no problems"
    index.write_bytes((56).to_bytes(4, "big") + (4000).to_bytes(4, "big"))
    damaged = run_cli("dump", "--verify", str(index))
    assert damaged.returncode == 1 and damaged.stdout.splitlines()[-1] == f"Verified {index}: 1 problem(s)"


def test_dump_verify_judges_an_index_as_verify_does(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert run_cli("produce", "-t", "ev", "--log-dirs", str(data), "--batch-size", "10",
                   stdin="".join(f"{i}\n" for i in range(100))).returncode == 0
    index = data / "ev-0" / "00000000000000000000.index"
    with open(index, "r+b") as f:
        f.truncate(5)  # a torn index: not a whole 8-byte entry
    scrub = run_cli("verify", "--log-dirs", str(data))
    assert scrub.returncode == 1 and "length 5 is not a multiple of the 8-byte entry size" in scrub.stdout
    dumped = run_cli("dump", "--verify", str(index))
    assert dumped.returncode == 1, dumped.stdout
    assert "ERROR: length 5 is not a multiple of the 8-byte entry size" in dumped.stdout
    assert dumped.stdout.splitlines()[-1] == f"Verified {index}: 1 problem(s)"


def test_produce_then_consume(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    proc = run_cli("produce", "--log-dirs", data, "-t", "events", "--key-separator", ":", stdin="a:1\nb:2\nplain\n")
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("consume", "--log-dirs", data, "-t", "events", "--json")
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [(0, "a", "1"), (1, "b", "2"), (2, None, "plain")]
    proc = run_cli("consume", "--log-dirs", data, "-t", "events", "--offset", "1", "--max-messages", "1")
    assert proc.stdout.splitlines() == ["2"]
    assert run_cli("consume", "--log-dirs", data, "-t", "missing").returncode == 1
    assert run_cli("produce", "-t", "x", stdin="").returncode == 2  # no data dir: usage


@pytest.mark.parametrize(("argv", "stdin", "rc", "message"), [
    (["-p", "-1"], "a\n", 2, "tiered produce: error: argument --partition/-p: invalid partition -1: must be in 0..2147483647"),
    (["--compression", "foo"], "a\n", 2, "tiered produce: error: argument --compression: invalid choice: 'foo' "
                                         "(choose from 'none', 'gzip', 'snappy', 'lz4', 'zstd')"),
    (["--header", "nokey"], "a\n", 2, "tiered produce: --header expects KEY=VALUE, got 'nokey'"),
    (["--json"], '{"value": "v", "timestamp": "yesterday"}\n', 1,
     "tiered produce: line 1: invalid timestamp 'yesterday': expected milliseconds since the epoch (a whole number)"),
    (["--json"], "{bad\n", 1, "tiered produce: line 1 is not JSON: Expecting property name enclosed in double quotes: "
                              "line 1 column 2 (char 1)"),
    # a bad line after good ones of the same (first) batch: nothing at all is appended
    (["--json"], '{"value": "ok"}\n{"value": "x", "headers": [1]}\n', 1,
     'tiered produce: line 2: header 0 must be an object with a string "key" and a "value" or "valueBase64", got 1'),
], ids=["partition-minus-1", "compression-foo", "header-not-key-value", "timestamp-yesterday", "not-json",
        "bad-line-in-the-first-batch"])
def test_produce_refuses_bad_input_before_creating_the_topic(
    tmp_path: Path, argv: list[str], stdin: str, rc: int, message: str
) -> None:
    data = tmp_path / "data"
    proc = run_cli("produce", "-t", "t", "--log-dirs", str(data), *argv, stdin=stdin)
    assert proc.returncode == rc, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1] == message
    if rc == 1:
        assert proc.stderr == message + "\n"  # one line, no usage
    assert not data.exists()  # no topic, no partition dir, no data dir


def test_produce_streams_batch_by_batch_and_a_bad_line_keeps_the_batches_before_it(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    lines = "".join(f'{{"value": "v{i}"}}\n' for i in range(5)) + '{"value": 1, "headers": [1]}\n{"value": "never"}\n'
    proc = run_cli("produce", "-t", "t", "--log-dirs", data, "--json", "--batch-size", "2", stdin=lines)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr == ('tiered produce: line 6: header 0 must be an object with a string "key" and a "value" or '
                           '"valueBase64", got 1; produced 4 records to t-0 (offsets 0..3) before it\n')  # the batch holding lines 5 and 6 is not appended
    consumed = run_cli("consume", "--log-dirs", data, "-t", "t")
    assert consumed.stdout.splitlines() == ["v0", "v1", "v2", "v3"]


def test_produce_appends_a_batch_before_the_rest_of_the_input_arrives(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc = subprocess.Popen([sys.executable, "-m", "tiered.cli", "produce", "-t", "s", "--log-dirs", str(data),
                             "--batch-size", "2"],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdin is not None
        proc.stdin.write("a\nb\n")  # one whole batch, and the pipe stays open
        proc.stdin.flush()
        segment = data / "s-0" / "00000000000000000000.log"
        deadline = time.monotonic() + 60
        while not (segment.exists() and segment.stat().st_size > 0):
            assert proc.poll() is None and time.monotonic() < deadline, "the first batch was not appended"
            time.sleep(0.05)
        proc.stdin.write("c\n")
        proc.stdin.close()
        assert proc.wait(60) == 0
    finally:
        proc.kill()
    assert proc.stderr is not None and proc.stderr.read() == "produced 3 records to s-0 (offsets 0..2)\n"


def test_produce_stores_plain_lines_as_their_bytes_and_refuses_an_empty_separator(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    proc = subprocess.run([sys.executable, "-m", "tiered.cli", "produce", "-t", "b", "--log-dirs", data,
                           "--key-separator", ":"], input=b"caf\xe9\nk\xff:v\n", capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in run_cli("consume", "--log-dirs", data, "-t", "b", "--json").stdout.splitlines()]
    assert rows[0]["key"] is None and rows[0]["valueBase64"] == "Y2Fm6Q==" and "value" not in rows[0]
    assert rows[1]["keyBase64"] == "a/8=" and rows[1]["value"] == "v" and "key" not in rows[1]
    proc = subprocess.run([sys.executable, "-m", "tiered.cli", "produce", "-t", "j", "--log-dirs", data, "--json"],
                          input=b'{"value": "\xe9"}\n', capture_output=True, timeout=300)
    assert proc.returncode == 1 and proc.stderr == b"tiered produce: line 1 is not UTF-8: invalid continuation byte at byte 11\n"
    refused = run_cli("produce", "-t", "e", "--log-dirs", data, "--key-separator", "", stdin="a\n")
    assert refused.returncode == 2 and refused.stderr.splitlines()[-1] == "tiered produce: --key-separator must not be empty"


def test_a_library_error_logged_with_its_traceback_is_one_line_unless_verbose(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert run_cli("produce", "-t", "t", "--log-dirs", str(data), stdin="a\n").returncode == 0
    index = data / "t-0" / "00000000000000000000.index"
    index.unlink(missing_ok=True)
    index.mkdir()  # the data dir goes offline at load: the engine logs it with the OSError's traceback
    proc = run_cli("produce", "-t", "t", "--log-dirs", str(data), stdin="b\n")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("tiered produce: t-0 is offline")
    assert all(line.startswith(("ERROR ", "WARNING ", "tiered produce: ")) for line in proc.stderr.splitlines())
    verbose = run_cli("produce", "-t", "t", "--log-dirs", str(data), "-v", stdin="b\n")
    assert verbose.returncode == 1 and "Traceback" in verbose.stderr


def test_consume_refuses_a_to_offset_not_above_the_offset(tmp_path: Path) -> None:
    for to in ("3", "10"):
        proc = run_cli("consume", "-t", "x", "--log-dirs", str(tmp_path), "--offset", "10", "--to-offset", to)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert proc.stderr.splitlines()[-1] == f"tiered consume: --to-offset {to} must be above --offset 10 (it is exclusive)"


def test_produce_of_no_input_names_no_offsets(tmp_path: Path) -> None:
    proc = run_cli("produce", "-t", "e", "--log-dirs", str(tmp_path / "data"), stdin="")
    assert (proc.returncode, proc.stderr) == (0, "produced 0 records: stdin was empty (nothing written)\n")
    assert not (tmp_path / "data").exists()


def test_features_upgrade_and_refused_downgrade(tmp_path: Path) -> None:
    assert run_cli("features", "upgrade", "--release-version", "4.4", "--log-dirs", str(tmp_path)).returncode == 0
    proc = run_cli("features", "upgrade", "--release-version", "4.0", "--log-dirs", str(tmp_path))
    assert proc.returncode == 1 and "never go down" in proc.stderr
    assert "finalized" in run_cli("features", "describe", "--log-dirs", str(tmp_path)).stdout


def test_features_refusals_are_one_line_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for argv, message in [
        # as Kafka's kafka-features: finalizing is irreversible, so the release is never a default
        (["upgrade", "--log-dirs", str(data)],
         "tiered features: 'features upgrade' needs --release-version VERSION (e.g. 4.4); finalizing cannot be undone"),
        (["describe", "--log-dirs", "/nonexistent"], "tiered features: no such data dir: /nonexistent"),
    ]:
        assert main(["features", *argv]) == 2
        out, err = capsys.readouterr()
        assert (out, err) == ("", message + "\n"), argv
    assert list(data.iterdir()) == []  # nothing finalized


def test_offload_and_run_with_a_config_file(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text(
        f"log.dirs={tmp_path / 'data'}\nlog.segment.bytes=1048576\nremote.log.storage.system.enable=true\n"
        f"remote.log.storage.manager.class.name=local\nrsm.config.dir={tmp_path / 'remote'}\n"
        "remote.log.manager.task.interval.ms=100\n"
    )
    lines = "".join(f"value-{i:06d}-{'x' * 150}\n" for i in range(15_000))
    produce = run_cli("--config", str(props), "produce", "-t", "t", "--topic-config", "remote.storage.enable=true",
                      "--topic-config", "local.retention.bytes=1048576", stdin=lines)
    assert produce.returncode == 0, produce.stderr
    proc = run_cli("--config", str(props), "offload")
    assert proc.returncode == 0, proc.stderr
    assert "copied 2 segment(s)" in proc.stdout and "local retention deleted 1 segment(s)" in proc.stdout
    assert run_cli("--config", str(props), "run", "--listen", "127.0.0.1:0", "--duration", "0.5").returncode == 0
    consumed = run_cli("--config", str(props), "consume", "-t", "t")
    assert consumed.stdout.splitlines() == [line for line in lines.splitlines()]
    no_remote = run_cli("offload", "--log-dirs", str(tmp_path / "other"))
    assert no_remote.returncode == 2 and "not enabled" in no_remote.stderr


def test_dump_auto_detects_a_12_byte_index(tmp_path: Path) -> None:
    from local.index import OffsetIndex

    path = tmp_path / "00000000000000000100.index"
    index = OffsetIndex(path, 100, 4096, use_large_format=True)
    index.append(105, 5 * 2**32)
    index.append(110, 6 * 2**32)
    index.close()
    proc = run_cli("dump", "--json", str(path))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["items"] == [{"entry_size": 12}, {"offset": 105, "position": 5 * 2**32}, {"offset": 110, "position": 6 * 2**32}]
    assert run_cli("dump", str(tmp_path / "x.unknown")).returncode == 1  # no such file
    (tmp_path / "x.unknown").write_text("?")
    assert run_cli("dump", str(tmp_path / "x.unknown")).returncode == 2  # not a kind it knows: usage


def test_global_options_work_before_and_after_the_command(tmp_path: Path) -> None:
    from tiered.cli import parse_args

    props = tmp_path / "broker.properties"
    for argv in (["--config", str(props), "offload"], ["offload", "--config", str(props)]):
        _, args = parse_args(argv)
        assert args.config == str(props) and args.command == "offload"
    _, args = parse_args(["-o", "a=1", "-v", "consume", "-t", "x", "--log-dirs", "D", "-o", "b=2", "-v"])
    assert (args.log_dirs, args.override, args.verbose) == ("D", ["a=1", "b=2"], 2)
    _, args = parse_args(["--log-dirs", "A", "status", "--log-dirs", "B"])
    assert args.log_dirs == "B"  # given after the command: the later one wins
    data = tmp_path / "data"
    assert run_cli("produce", "-t", "g", "--log-dirs", str(data), stdin="one\ntwo\n").returncode == 0
    for argv in (("--log-dirs", str(data), "consume", "-t", "g"), ("consume", "-t", "g", "--log-dirs", str(data))):
        proc = run_cli(*argv)
        assert proc.returncode == 0 and proc.stdout.split() == ["one", "two"], proc.stderr


@pytest.mark.parametrize(("argv", "prog", "unknown"), [
    (["status", "--bogus"], "tiered status", "--bogus"),
    (["dump", "--frob", "F"], "tiered dump", "--frob"),
    (["consume", "-t", "t", "--max-mess", "1"], "tiered consume", "--max-mess 1"),  # no abbreviations
    (["--bogus", "status"], "tiered", "--bogus"),  # before the command: the top parser's
])
def test_an_unknown_option_is_refused_with_the_usage_of_whoever_it_was_given_to(
    capsys: pytest.CaptureFixture[str], argv: list[str], prog: str, unknown: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: {prog} [-h]")
    assert err.splitlines()[-1] == f"{prog}: error: unrecognized arguments: {unknown}"


def test_dump_takes_the_option_names_the_readme_uses() -> None:
    from tiered.cli import parse_args

    _, args = parse_args(["dump", "--deep", "--verify", "F.log"])
    assert (args.deep, args.verify) == (True, True)


def test_consume_says_so_on_stderr_when_there_is_nothing_to_print(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    assert run_cli("produce", "-t", "h", "--log-dirs", data, stdin="a\nb\nc\n").returncode == 0
    past = run_cli("consume", "-t", "h", "--log-dirs", data, "--offset", "99")
    assert past.returncode == 1 and past.stdout == ""
    assert "offset 99 is out of range for h-0" in past.stderr and "log end offset 3" in past.stderr
    at_end = run_cli("consume", "-t", "h", "--log-dirs", data, "--offset", "3")
    assert at_end.returncode == 0 and at_end.stdout == "" and "it is the log end offset" in at_end.stderr
    future = run_cli("consume", "-t", "h", "--log-dirs", data, "--timestamp", str(2**62))
    assert future.returncode == 0 and future.stdout == "" and "no record of h-0 has a timestamp" in future.stderr
    assert run_cli("consume", "-t", "h", "--log-dirs", data, "--offset", "2").stdout.split() == ["c"]


@pytest.mark.parametrize(("argv", "option"), [
    (["quickstart", "--records", "-5"], "--records"),
    (["quickstart", "--batch-size", "0"], "--batch-size"),
    (["quickstart", "--record-size", "-1"], "--record-size"),
    (["produce", "-t", "t", "--batch-size", "0"], "--batch-size"),
    (["consume", "-t", "t", "--offset", "-3"], "--offset"),
    (["consume", "-t", "t", "--max-messages", "x"], "--max-messages"),
    (["dump", "--max-batches", "-1", "f.log"], "--max-batches"),
    (["topics", "create", "-t", "t", "--partitions", "0"], "--partitions"),
])
def test_counts_and_offsets_out_of_range_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], option: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--log-dirs", str(tmp_path / "data")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: invalid value" in err
    assert "Traceback" not in err
    assert not (tmp_path / "data").exists()  # refused before anything was opened


def test_a_reader_that_goes_away_ends_the_command_quietly_as_sigpipe_does(tmp_path: Path) -> None:
    data = tmp_path / "data"
    produced = run_cli("produce", "--log-dirs", str(data), "-t", "t", stdin="".join(f"{i}\n" for i in range(100_000)))
    assert produced.returncode == 0, produced.stderr
    for argv in (["consume", "--log-dirs", str(data), "-t", "t"],
                 ["dump", "--deep", str(data / "t-0" / "00000000000000000000.log")]):
        proc = subprocess.Popen([sys.executable, "-m", "tiered.cli", *argv], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline()  # `| head -1`
        proc.stdout.close()
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 141, (argv, err)
        assert err == "", (argv, err)


def test_features_upgrade_refuses_a_locked_missing_or_empty_data_dir_list(tmp_path: Path) -> None:
    """`features upgrade` cannot be undone: it wrote while `tiered run` held the data dir (which kept its old levels),
    made a data dir out of a typo and finalized it, and did nothing for an empty list, exit 0 each time."""
    from local import LogConfig, LogManager

    data = tmp_path / "data"
    manager = LogManager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False)
    try:
        held = run_cli("features", "upgrade", "--release-version", "4.4", "--log-dirs", str(data))
        assert held.returncode == 1 and "is locked by another process" in held.stderr
        assert not (data / "tiered-features.properties").exists()
    finally:
        manager.close()
    typo = run_cli("features", "upgrade", "--release-version", "4.4", "--log-dirs", str(tmp_path / "dta"))
    assert typo.returncode == 2 and "no such data dir" in typo.stderr and not (tmp_path / "dta").exists()
    empty = run_cli("features", "upgrade", "--release-version", "4.4", "--log-dirs", ",,")
    assert empty.returncode == 2 and "names no data dir" in empty.stderr
    done = run_cli("features", "upgrade", "--release-version", "4.4", "--log-dirs", str(data))
    assert done.returncode == 0 and "finalized" in done.stdout


def test_one_data_dir_listed_twice_is_named_as_such(tmp_path: Path) -> None:
    data = tmp_path / "dup"
    proc = run_cli("produce", "-t", "a", "--log-dirs", f"{data},{data}/", stdin="x\n")
    assert proc.returncode == 2 and "log.dirs names one data dir twice" in proc.stderr
    assert "another process" not in proc.stderr


def test_quickstart_refuses_careless_arguments_up_front(tmp_path: Path) -> None:
    """A huge --record-size was 'unexpected error: MemoryError', an unknown --compression failed after making a
    temp dir, and a --dir holding an earlier run got 30,000 records appended and a false MISMATCH verdict."""
    huge = run_cli("quickstart", "--record-size", "99999999999")
    assert huge.returncode == 2 and "at most 1000000" in huge.stderr and "MemoryError" not in huge.stderr
    codec = run_cli("quickstart", "--compression", "foo")
    assert codec.returncode == 2 and "invalid choice: 'foo'" in codec.stderr
    wide = run_cli("quickstart", "--record-size", "500000")
    assert wide.returncode == 2 and "--batch-size 100 of 500000-byte records does not fit" in wide.stderr
    used = tmp_path / "used"
    used.mkdir()
    (used / "data").mkdir()
    again = run_cli("quickstart", "--dir", str(used))
    assert again.returncode == 2 and "is not an empty directory" in again.stderr
    assert [p.name for p in used.iterdir()] == ["data"]


def test_dump_names_a_torn_index_entry(tmp_path: Path) -> None:
    data = tmp_path / "data"
    run_cli("produce", "-t", "t", "--log-dirs", str(data), stdin="".join(f"{i}\n" for i in range(5000)))
    index = sorted((data / "t-0").glob("*.index"))[0]
    entries = index.stat().st_size // 8
    with open(index, "r+b") as f:
        f.truncate(8 * max(entries, 1) + 5 if entries else 13)
    proc = run_cli("dump", str(index))
    assert proc.returncode == 1 and "5 trailing bytes at position" in proc.stdout + proc.stderr


def test_produce_interrupted_says_what_it_wrote(tmp_path: Path) -> None:
    """Ctrl-C of `produce` exited 130 with nothing said: how many records were written (all intact) was unknown."""
    import signal

    def interruptible() -> None:
        # A suite started in the background (`pytest &` from a script, a CI step) ignores SIGINT, as the shell sets
        # it, and a child inherits that: produce waited for stdin for ever (a run of this machine's suite). Ctrl-C
        # reaches a command in a terminal's foreground: as there, it is not ignored.
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    data = tmp_path / "data"
    proc = subprocess.Popen([sys.executable, "-m", "tiered.cli", "produce", "-t", "t", "--log-dirs", str(data),
                             "--batch-size", "10"], stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)
    assert proc.stdin is not None
    log = data / "t-0" / "00000000000000000000.log"
    size = 0
    for first in (0, 10):  # a batch, then another: once the second's bytes are there, the first append has ended
        proc.stdin.write("".join(f"{i}\n" for i in range(first, first + 10)))
        proc.stdin.flush()
        deadline = time.monotonic() + 120
        while not (log.exists() and log.stat().st_size > size) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert log.exists() and log.stat().st_size > size
        size = log.stat().st_size
    proc.send_signal(signal.SIGINT)  # (stdin stays open: the interrupt finds produce waiting for more lines)
    assert proc.wait(timeout=120) == 130
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.stdin.close()
    assert "tiered produce: interrupted; produced" in err and "records to t-0 (offsets 0.." in err


def test_an_override_without_a_key_is_a_usage_error() -> None:
    proc = run_cli("status", "--log-dirs", "/nonexistent-dir", "-o", "=1")
    assert proc.returncode == 2 and "--override expects KEY=VALUE with a key, got '=1'" in proc.stderr
