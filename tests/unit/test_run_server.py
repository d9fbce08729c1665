"""``tiered run``'s HTTP endpoint in-process (tiered.http_server on port 0): each careless request gets its status
and a one-line JSON error naming what was wrong; health reports offline dirs; metrics are Prometheus text.
The subprocess tests (signals, copies, metrics moving) are in tests/integration/test_run_server.py."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local import LogConfig, LogManager
from local.config import parse_host_port
from tiered.http_server import Endpoint, Server

TIMEOUT = 60.0


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[LogManager, str]]:
    config = LogConfig.from_properties({"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}"})
    manager = LogManager(config)
    server = Server(Endpoint(manager), "127.0.0.1", 0)
    server.start()
    try:
        yield manager, server.url
    finally:
        server.stop()
        manager.close()


def _call(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any, str]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return response.status, response.read(), response.headers["Content-Type"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers["Content-Type"]


def _error(method: str, url: str, body: bytes | None = None) -> tuple[int, str]:
    status, payload, content_type = _call(method, url, body)
    assert content_type == "application/json"
    return status, json.loads(payload)["error"]


RECORDS = "/topics/t/partitions/0/records"


def test_produce_takes_an_array_one_object_or_lines_and_consume_answers_them_in_order(
    served: tuple[LogManager, str],
) -> None:
    manager, url = served
    bodies = [b'[{"value": "a"}, {"key": "k", "value": "b", "headers": {"h": "1"}, "timestamp": 5}]',
              b'{"value": {"n": 1}}', b'{"value": "c"}\n\n{"value": null}\n']
    replies = [json.loads(_call("POST", url + RECORDS, body)[1]) for body in bodies]
    assert [(r["first_offset"], r["last_offset"], r["count"]) for r in replies] == [(0, 1, 2), (2, 2, 1), (3, 4, 2)]
    status, payload, _ = _call("GET", url + RECORDS + "?offset=1")
    reply = json.loads(payload)
    assert status == 200 and reply["next_offset"] == 5 and reply["log_end_offset"] == 5
    assert [(r["offset"], r["key"], r["value"], r["headers"]) for r in reply["records"]] == [
        (1, "k", "b", [{"key": "h", "value": "1"}]), (2, None, '{"n":1}', []), (3, None, "c", []), (4, None, None, [])]
    assert reply["records"][0]["timestamp"] == 5
    log = manager.get_log("t", 0)
    assert log is not None and log.log_end_offset == 5


def test_consume_answers_at_least_one_record_and_stops_at_max_bytes(served: tuple[LogManager, str]) -> None:
    _, url = served
    _call("POST", url + RECORDS, json.dumps([{"value": "x" * 100} for _ in range(10)]).encode())
    one = json.loads(_call("GET", url + RECORDS + "?offset=0&max_bytes=1")[1])
    assert [r["offset"] for r in one["records"]] == [0] and one["next_offset"] == 1
    three = json.loads(_call("GET", url + RECORDS + "?offset=2&max_bytes=300")[1])
    assert [r["offset"] for r in three["records"]] == [2, 3, 4]
    at_end = json.loads(_call("GET", url + RECORDS + "?offset=10")[1])
    assert at_end["records"] == [] and at_end["next_offset"] == 10


@pytest.mark.parametrize(("method", "path", "body", "status", "says"), [
    ("POST", RECORDS, b"{not json", 400, "line 1 of the body is not JSON"),
    ("POST", RECORDS, b'{"value": "a", "timestamp": "yesterday"}', 400, "invalid timestamp 'yesterday'"),
    ("POST", RECORDS, b'[1]', 400, "a record must be a JSON object"),
    ("POST", RECORDS, b'[]', 400, "no records in the request body"),
    ("POST", RECORDS + "?compression=zip", b'{"value": "a"}', 400, "zip"),
    ("POST", "/topics/bad%20topic/partitions/0/records", b'{"value": "a"}', 400, "bad topic"),
    ("POST", "/topics/t/partitions/-1/records", b'{"value": "a"}', 400, "invalid partition '-1'"),
    ("POST", "/topics/t/partitions/7/records", b'{"value": "a"}', 404, "topic t has no partition 7 (it has 1: 0)"),
    ("GET", "/topics/nope/partitions/0/records", None, 404, "no partition nope-0"),
    ("GET", "/topics/..%2F..%2Fetc/partitions/0/records", None, 400, "invalid topic name '../../etc'"),
    ("GET", RECORDS + "?offset=7", None, 416, "offset 7 is out of range for t-0: log start offset 0, log end offset 1"),
    ("GET", RECORDS + "?offset=x", None, 400, "invalid offset 'x'"),
    ("GET", RECORDS + "?isolation=dirty", None, 400, "invalid isolation 'dirty'"),
    ("GET", "/records", None, 404, "no endpoint GET /records"),
    ("DELETE", "/metrics", None, 405, "DELETE /metrics is not served: use GET"),
    ("POST", "/health", b"{}", 405, "POST /health is not served: use GET"),
    ("PUT", RECORDS, b'{"value": "a"}', 405, f"PUT {RECORDS} is not served: use GET or POST"),
    ("PATCH", "/nope", None, 404, "no endpoint PATCH /nope"),
])
def test_a_careless_request_gets_its_status_and_a_one_line_reason(
    served: tuple[LogManager, str], method: str, path: str, body: bytes | None, status: int, says: str,
) -> None:
    _, url = served
    assert _call("POST", url + RECORDS, b'{"value": "first"}')[0] == 200
    got, message = _error(method, url + path, body)
    assert got == status and says in message and "\n" not in message, message


def test_a_method_not_served_is_405_with_allow_and_head_is_get_without_a_body(served: tuple[LogManager, str]) -> None:
    _, url = served
    request = urllib.request.Request(url + "/metrics", method="DELETE")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=TIMEOUT)
    assert refused.value.code == 405 and refused.value.headers["Allow"] == "GET"
    status, payload, content_type = _call("HEAD", url + "/health")
    assert (status, payload, content_type) == (200, b"", "application/json")


def test_health_reports_offline_dirs_and_stopping(served: tuple[LogManager, str], tmp_path: Path) -> None:
    manager, url = served
    status, payload, _ = _call("GET", url + "/health")
    assert status == 200 and json.loads(payload) == {
        "status": "serving", "offline_log_dirs": {}, "offline_partitions": [], "remote_tier": False}
    manager.log_dir_failure_channel.maybe_add_offline_log_dir(tmp_path / "b", "disk gone")
    status, payload, _ = _call("GET", url + "/health")
    health = json.loads(payload)
    assert status == 200 and health["status"] == "serving"
    assert list(health["offline_log_dirs"]) == [str(tmp_path / "b")] and "disk gone" in health["offline_log_dirs"][str(tmp_path / "b")]


def test_metrics_are_prometheus_text_with_the_log_managers_gauges(served: tuple[LogManager, str]) -> None:
    _, url = served
    status, payload, content_type = _call("GET", url + "/metrics")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    text = payload.decode()
    assert "# TYPE offline_log_directory_count gauge" in text and "log_load_seconds{data_dir=" in text
    status, payload, content_type = _call("GET", url + "/metrics", headers={"Accept": "application/openmetrics-text"})
    assert content_type.startswith("application/openmetrics-text") and payload.decode().endswith("# EOF\n")


@pytest.mark.parametrize(("text", "expected"), [("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:8080", ("::1", 8080)),
                                                ("localhost:65535", ("localhost", 65535))])
def test_listen_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(text) == expected


@pytest.mark.parametrize("text", ["8080", ":8080", "host:", "host:65536", "host:-1", "host:http"])
def test_bad_listen_addresses_are_refused_by_the_config(tmp_path: Path, text: str) -> None:
    from local.errors import ConfigError

    with pytest.raises(ConfigError, match=r"Invalid value .* for configuration tiered\.http\.listen"):
        LogConfig.from_properties({"log.dirs": str(tmp_path), "tiered.http.listen": text})


def _run_cli(tmp_path: Path, *args: str) -> Any:
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, "-m", "tiered.cli", "run", "--log-dirs", str(tmp_path / "data"), *args],
                          cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)}, capture_output=True, text=True,
                          timeout=TIMEOUT)


def test_run_on_a_busy_port_says_so_in_one_line_and_exits_2(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _run_cli(tmp_path, "--listen", f"127.0.0.1:{port}", "--duration", "0")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"tiered run: cannot listen on 127.0.0.1:{port}: ") and "port 0" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_run_with_a_malformed_listen_address_exits_2_before_opening_anything(tmp_path: Path) -> None:
    proc = _run_cli(tmp_path, "--listen", "localhost", "--duration", "0")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr == "tiered run: invalid --listen 'localhost': expected HOST:PORT, e.g. 127.0.0.1:8080\n"
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("config", [
    ["remote.log.storage.manager.class.name=local"],  # no rsm.config.dir: refused before anything opens
    ["remote.log.storage.manager.class.name=local", "rsm.config.dir={remote}",
     "remote.log.metadata.manager.class.name=nosuch.Klass"],  # refused once the data dir is locked
])
def test_run_that_fails_on_its_config_leaves_no_data_dir_it_made(tmp_path: Path, config: list[str]) -> None:
    options = [arg for kv in ["remote.log.storage.system.enable=true", *config]
               for arg in ("-o", kv.format(remote=tmp_path / "remote"))]
    proc = _run_cli(tmp_path, "--listen", "127.0.0.1:0", "--duration", "0", *options)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "data").exists()
    (tmp_path / "data").mkdir()  # a dir it did not make stays
    assert _run_cli(tmp_path, "--listen", "127.0.0.1:0", "--duration", "0", *options).returncode == 2
    assert (tmp_path / "data").is_dir()
