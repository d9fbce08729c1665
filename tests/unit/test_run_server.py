"""``tiered run``'s HTTP endpoint in-process (tiered.http_server on port 0): each careless request gets its status
and a one-line JSON error naming what was wrong; health reports offline dirs; metrics are Prometheus text.
The subprocess tests (signals, copies, metrics moving) are in tests/integration/test_run_server.py."""

from __future__ import annotations

import json
import os
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


def test_json_lines_are_split_at_newlines_only(served: tuple[LogManager, str]) -> None:
    _, url = served
    body = '{"value": "a\u2028b\u0085c"}\r\n{"value": "d"}\n'.encode()  # raw U+2028 and U+0085 inside a string
    assert json.loads(_call("POST", url + RECORDS, body)[1])["count"] == 2
    got = json.loads(_call("GET", url + RECORDS)[1])["records"]
    assert [r["value"] for r in got] == ["a\u2028b\u0085c", "d"]


def test_consume_answers_at_least_one_record_and_stops_at_max_bytes(served: tuple[LogManager, str]) -> None:
    _, url = served
    _call("POST", url + RECORDS, json.dumps([{"value": "x" * 100} for _ in range(10)]).encode())
    one = json.loads(_call("GET", url + RECORDS + "?offset=0&max_bytes=1")[1])
    assert [r["offset"] for r in one["records"]] == [0] and one["next_offset"] == 1
    three = json.loads(_call("GET", url + RECORDS + "?offset=2&max_bytes=500")[1])  # 3 x (100 + 64 bytes)
    assert [r["offset"] for r in three["records"]] == [2, 3, 4]
    at_end = json.loads(_call("GET", url + RECORDS + "?offset=10")[1])
    assert at_end["records"] == [] and at_end["next_offset"] == 10


def test_records_of_empty_values_count_against_max_bytes(served: tuple[LogManager, str]) -> None:
    """A record counted only its key, value and headers: one GET of max_bytes=1 over 300,000 records of empty
    values answered all of them (35 MB; at a larger scale 16 GB of memory, a helper's pass). Each counts 64 bytes
    of its other fields too."""
    from tiered.http_server import RECORD_FIELDS_BYTES

    _, url = served
    _call("POST", url + RECORDS, b"\n".join([b'{"value": ""}'] * 5000 + [b'{"value": null}'] * 5000))
    one = json.loads(_call("GET", url + RECORDS + "?offset=0&max_bytes=1")[1])
    assert [r["offset"] for r in one["records"]] == [0]
    page = json.loads(_call("GET", url + RECORDS + f"?offset=4990&max_bytes={20 * RECORD_FIELDS_BYTES}")[1])
    assert [r["offset"] for r in page["records"]] == list(range(4990, 5010)) and page["next_offset"] == 5010


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
    # int() takes "1_0" as 10 and " +0" as 0; a repeated parameter took its last value; NaN was stored as "NaN"
    ("GET", "/topics/t/partitions/1_0/records", None, 400, "invalid partition '1_0'"),
    ("GET", "/topics/t/partitions/%20%2B0/records", None, 400, "invalid partition ' +0'"),
    ("GET", RECORDS + "?offset=1_0", None, 400, "invalid offset '1_0'"),
    ("GET", RECORDS + "?offset=0&offset=1", None, 400, "offset is given 2 times: give it once"),
    ("POST", RECORDS, b'{"value": NaN}', 400, "NaN is not JSON"),
    ("GET", "/records", None, 404, "no endpoint GET /records"),
    ("DELETE", "/metrics", None, 405, "DELETE /metrics is not served: use GET"),
    ("POST", "/health", b"{}", 405, "POST /health is not served: use GET"),
    ("PUT", RECORDS, b'{"value": "a"}', 405, f"PUT {RECORDS} is not served: use GET or POST"),
    ("PATCH", "/nope", None, 404, "no endpoint PATCH /nope"),
    ("POST", RECORDS, b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),  # it was a 500 RecursionError
    ("POST", RECORDS, b'{"valueBase64": "@@"}', 400, "invalid valueBase64"),
    # A wrapper object or a typo stored a tombstone (a null value): refused, naming the field.
    ("POST", RECORDS, b'{"records": [{"value": "a"}]}', 400, "unknown field(s) 'records' in a record"),
    ("POST", RECORDS, b'[{"key": "k", "vaule": "a"}]', 400, "unknown field(s) 'vaule' in a record"),
    ("POST", RECORDS, b'[{"key": "k"}]', 400, 'a record needs "value"'),
    ("POST", "/topics/fresh/partitions/5/records", b'{"value": "a"}', 404,
     "topic fresh does not exist and a write creates a topic only at partition 0 (one partition); for a topic of 6 "
     "partitions: tiered topics create --topic fresh --partitions 6"),
])
def test_a_careless_request_gets_its_status_and_a_one_line_reason(
    served: tuple[LogManager, str], method: str, path: str, body: bytes | None, status: int, says: str,
) -> None:
    _, url = served
    assert _call("POST", url + RECORDS, b'{"value": "first"}')[0] == 200
    got, message = _error(method, url + path, body)
    assert got == status and says in message and "\n" not in message, message


def _exchange(url: str, data: bytes, answers: int = 1) -> tuple[list[tuple[int, dict[str, str], Any]], bool]:
    """Send ``data`` raw on one connection; the ``answers`` responses read (status, headers, JSON body) and whether
    the server closed the connection after them."""
    import socket

    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT) as sock:
        sock.sendall(data)
        reader = sock.makefile("rb")
        out = []
        for _ in range(answers):
            status = int(reader.readline().split()[1])
            headers = {}
            while (line := reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            out.append((status, headers, json.loads(reader.read(int(headers["content-length"])))))
        closed = reader.read(1) == b""
    return out, closed


def test_a_chunked_post_is_read_whole_and_the_connection_goes_on(served: tuple[LogManager, str]) -> None:
    _, url = served
    body = b'[{"value": "a"}, {"value": "b"}]'
    chunked = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(part), part) for part in (body[:5], body[5:20], body[20:]))
    request = (f"POST {RECORDS} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode() + chunked
               + b"0\r\nX-Trailer: t\r\n\r\n" + f"GET {RECORDS}?offset=0 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    (posted, got), _ = _exchange(url, request, answers=2)
    assert posted[0] == 200 and posted[2]["count"] == 2
    assert got[0] == 200 and [r["value"] for r in got[2]["records"]] == ["a", "b"]  # the body was not a request


def test_a_post_with_both_a_length_and_chunked_framing_is_read_chunked_and_the_connection_closes(
    served: tuple[LogManager, str],
) -> None:
    """RFC 9112 6.1: the chunked framing wins and the connection ends after the answer (a proxy in front may have
    framed the body by its Content-Length: what follows must never be taken for a request). The answer says so."""
    manager, url = served
    body = b'{"value": "a"}'
    smuggled = f"POST {RECORDS} HTTP/1.1\r\nContent-Length: 14\r\n\r\n{{\"value\": \"x\"}}".encode()
    request = (f"POST {RECORDS} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body) + 10}\r\n"
               "Transfer-Encoding: chunked\r\n\r\n").encode() + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    (answer,), closed = _exchange(url, request + smuggled)
    assert answer[0] == 200 and answer[2]["count"] == 1
    assert answer[1]["connection"] == "close" and closed
    log = manager.get_log("t", 0)
    assert log is not None and log.log_end_offset == 1  # the smuggled request was not served


@pytest.mark.parametrize(("head", "body", "status", "says"), [
    ("Content-Length: -5", b"", 400, "invalid Content-Length '-5'"),
    ("Content-Length: 5\r\nContent-Length: 6", b"", 400, "invalid Content-Length '5, 6'"),
    ("", b'{"value": "a"}', 411, "a POST needs a Content-Length (or Transfer-Encoding: chunked)"),
    ("Transfer-Encoding: chunked", b"zz\r\n{}\r\n0\r\n\r\n", 400, "invalid chunk size line"),
    ("Transfer-Encoding: chunked", b"10\r\n{}\r\n0\r\n\r\n", 400, "cut short or not followed by CRLF"),
    ("Transfer-Encoding: gzip", b"", 501, "Transfer-Encoding 'gzip' is not supported"),
    (f"Content-Length: {64 * 1024 * 1024 + 1}", b"", 413, "more than 67108864"),
])
def test_a_body_that_cannot_be_read_whole_is_refused_in_json_and_never_parsed_as_a_request(
    served: tuple[LogManager, str], head: str, body: bytes, status: int, says: str,
) -> None:
    manager, url = served
    # the body is an HTTP request: were it taken for the next one, it would append to t-0
    smuggled = f"POST {RECORDS} HTTP/1.1\r\nContent-Length: 14\r\n\r\n{{\"value\": \"x\"}}".encode()
    request = f"POST {RECORDS} HTTP/1.1\r\nHost: x\r\n{head}\r\n\r\n".replace("\r\n\r\n\r\n", "\r\n\r\n").encode()
    (answer,), closed = _exchange(url, request + body + smuggled)
    assert answer[0] == status and says in answer[2]["error"] and answer[1]["content-type"] == "application/json"
    assert closed and manager.get_log("t", 0) is None


@pytest.mark.parametrize(("line", "status", "says"), [
    (b"GARBAGE", 400, "Bad request syntax"),
    (b"GET /metrics HTTP/9.1", 505, "Invalid HTTP version"),
    (b"GET /metrics FTP/1.1", 400, "Bad request version"),
    (b"FOO /metrics HTTP/1.1", 405, "FOO /metrics is not served: use GET"),
    (b"GET /" + b"a" * 70_000 + b" HTTP/1.1", 414, "Request-URI Too Long"),
])
def test_a_malformed_request_line_gets_a_json_error_with_a_status_line(
    served: tuple[LogManager, str], line: bytes, status: int, says: str,
) -> None:
    _, url = served
    (answer,), _ = _exchange(url, line + b"\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answer[0] == status and says in answer[2]["error"] and answer[1]["content-type"] == "application/json"


def test_a_post_larger_than_max_message_bytes_is_cut_into_batches_under_it(served: tuple[LogManager, str]) -> None:
    manager, url = served
    log = manager.get_or_create_log("t", 0, {"max.message.bytes": "20000", "segment.bytes": str(1 << 20)})
    records = [{"key": f"k{i}", "value": "v" * 1000 + str(i)} for i in range(1500)]  # 1.5 MB: also past a segment
    status, payload, _ = _call("POST", url + RECORDS, json.dumps(records).encode())
    reply = json.loads(payload)
    assert status == 200 and (reply["count"], reply["first_offset"], reply["last_offset"]) == (1500, 0, 1499)
    batches = [b for segment in log.segments.values() for b in segment.log.batches()]
    assert reply["batches"] == len(batches) > 75 and max(b.size_in_bytes for b in batches) <= 20000
    got = [r.value for b in batches for r in b.records()]
    assert got == [f"{'v' * 1000}{i}".encode() for i in range(1500)]
    status, payload, _ = _call("POST", url + RECORDS, json.dumps([{"value": "a"}, {"value": "v" * 30000}]).encode())
    message = json.loads(payload)["error"]
    assert status == 400 and message.startswith("record 1 of the request takes a batch of ")
    assert message.endswith(" bytes, above the topic's max.message.bytes 20000")
    assert log.log_end_offset == 1500  # nothing of a refused request is appended
    # where segment.bytes is the smaller limit, the error names it (it named max.message.bytes: a helper's pass)
    manager.get_or_create_log("s", 0, {"max.message.bytes": str(4 << 20), "segment.bytes": str(1 << 20)})
    status, payload, _ = _call("POST", url + "/topics/s/partitions/0/records",
                               json.dumps([{"value": "v" * (1100 << 10)}]).encode())
    message = json.loads(payload)["error"]
    assert status == 400 and message.endswith(f" bytes, above the topic's segment.bytes {1 << 20}"), message


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


def test_reads_of_offsets_a_recovery_recorded_as_lost_answer_410_and_the_records_before_them(tmp_path: Path) -> None:
    # a middle segment cut by hand; the manager's load records the hole (local.lost_offsets)
    from tests.unit.test_lost_offsets import PER_SEGMENT, _segment, _write

    pdir = _write(tmp_path / "data")
    os.truncate(_segment(pdir, PER_SEGMENT), 1000)
    manager = LogManager(LogConfig.from_properties({"log.dirs": str(tmp_path / "data")}))
    server = Server(Endpoint(manager), "127.0.0.1", 0)
    server.start()
    try:
        log = manager.get_log("t", 0)
        assert log is not None
        first_lost = log.lost_offsets.entries[0].first_offset
        status, payload, _ = _call("GET", server.url + RECORDS + "?offset=999")
        reply = json.loads(payload)
        assert status == 200 and [r["offset"] for r in reply["records"]] == list(range(999, first_lost))
        assert reply["next_offset"] == first_lost
        for offset in (first_lost, 1999):
            status, payload, content_type = _call("GET", server.url + RECORDS + f"?offset={offset}")
            body = json.loads(payload)
            assert (status, content_type) == (410, "application/json")
            assert (body["first_lost_offset"], body["last_lost_offset"], body["next_offset"]) == (first_lost, 1999, 2000)
            assert str(_segment(pdir, PER_SEGMENT)) in body["error"] and "\n" not in body["error"]
        status, payload, _ = _call("GET", server.url + RECORDS + "?offset=2000&max_bytes=1")
        assert status == 200 and [r["value"] for r in json.loads(payload)["records"]] == ["v2000"]
    finally:
        server.stop()
        manager.close()


def test_a_client_that_goes_away_is_one_log_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A client that closed mid-body or mid-answer printed socketserver's 'Exception occurred during processing of
    request' and a traceback on run's stderr (two helpers' passes): one INFO line now; another failure one WARNING."""
    import logging

    with LogManager(LogConfig.from_properties({"log.dirs": str(tmp_path)})) as manager:
        server = Server(Endpoint(manager), "127.0.0.1", 0)
        try:
            with caplog.at_level(logging.INFO, logger="tiered.http_server"):
                for exc in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "Connection reset by peer"),
                            RuntimeError("something else")):
                    try:
                        raise exc
                    except Exception:
                        server.handle_error(None, ("127.0.0.1", 50000))
        finally:
            server.server_close()
    assert "Traceback" not in capsys.readouterr().err
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [("INFO", "client 127.0.0.1 went away: [Errno 32] Broken pipe"),
                     ("INFO", "client 127.0.0.1 went away: [Errno 104] Connection reset by peer"),
                     ("WARNING", "a request from 127.0.0.1 failed: RuntimeError: something else")]


def test_an_unknown_query_parameter_is_a_bad_request(served: tuple[LogManager, str]) -> None:
    """`GET ...?ofset=5` answered 200 from offset 0: the typo was ignored (a helper's pass)."""
    _, url = served
    assert _call("POST", url + RECORDS, b'{"value": "a"}')[0] == 200
    status, message = _error("GET", url + RECORDS + "?ofset=5")
    assert status == 400 and "unknown query parameter(s) ofset" in message and "offset" in message
    status, message = _error("POST", url + RECORDS + "?compresion=gzip", b'{"value": "b"}')
    assert status == 400 and "compresion" in message
    assert _call("GET", url + RECORDS + "?offset=0&max_bytes=100&isolation=log_end")[0] == 200


def test_the_endpoints_listen_on_an_ipv6_address(tmp_path: Path) -> None:
    """`tiered run --listen '[::1]:0'` (and --kafka-listen) failed with "Address family for hostname not supported"
    though ::1 was bindable (a helper's pass); an empty --listen silently took the default address."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "tiered.cli", "--log-dirs", str(tmp_path / "data"), "run", "--listen",
                           "[::1]:0", "--kafka-listen", "[::1]:0", "--duration", "0.5"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "listening on http://[::1]:" in proc.stdout and "kafka listening on [::1]:" in proc.stdout, proc.stdout
    proc = subprocess.run([sys.executable, "-m", "tiered.cli", "--log-dirs", str(tmp_path / "data"), "run", "--listen",
                           "", "--duration", "0.5"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "invalid --listen ''" in proc.stderr, proc.stderr


def test_a_start_whose_claims_hang_serves_anyway(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The start's claims at new owner epochs, against a store that hangs after the start probe, would hold the
    endpoints back by the store's timeouts: the start goes on at once (the claims are made behind, each partition
    held at most RENEW_WAIT_S), and says so when they still wait after that."""
    import logging
    import threading

    from tiered.commands import run

    release = threading.Event()

    class Hanging:
        def renew_ownership_behind(self, logs: list[Any], hold_s: float) -> threading.Thread:
            assert hold_s == run.RENEW_WAIT_S
            claims = threading.Thread(target=release.wait, args=(TIMEOUT,), daemon=True)
            claims.start()
            return claims

    monkeypatch.setattr(run, "RENEW_WAIT_S", 0.01)
    try:
        with caplog.at_level(logging.WARNING, logger="tiered"):
            run._renew_ownership(Hanging(), [])  # returns while the claims still wait
            _wait_for(lambda: any("still wait for the remote store" in r.getMessage() for r in caplog.records))
    finally:
        release.set()


def _wait_for(predicate: Any) -> None:
    """Until ``predicate()`` holds (a failure bound only: it holds as soon as the server got there)."""
    import time

    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        assert time.monotonic() < deadline, "the server never got there"
        time.sleep(0.01)


def test_connections_past_the_limit_are_answered_503_and_the_others_go_on(tmp_path: Path) -> None:
    """Idle connections were held without limit, a thread and a descriptor each: a few thousand took every
    descriptor of the process, and the log manager, failing to write a checkpoint, took the data dir offline until a
    restart (a helper's pass). Past tiered.http.max.connections a connection is answered 503 and closed at once."""
    import socket

    manager = LogManager(LogConfig.from_properties({"log.dirs": str(tmp_path / "a")}))
    server = Server(Endpoint(manager), "127.0.0.1", 0, max_connections=2)
    server.start()
    try:
        idle = [socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) for _ in range(2)]
        _wait_for(lambda: server.open_connections == 2)
        with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) as third:
            answer = third.makefile("rb").read()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 ") and b"Connection: close" in head
        assert "tiered.http.max.connections" in json.loads(body)["error"]
        assert server.connections_refused == 1
        idle[0].close()
        _wait_for(lambda: server.open_connections == 1)
        status, payload, _ = _call("GET", f"{server.url}/health")
        assert status == 200 and json.loads(payload)["status"] == "serving"
        assert manager.offline_dirs == {}
        idle[1].close()
    finally:
        server.stop()
        manager.close()


def test_an_idle_connection_is_closed_and_a_stalled_body_answered_408(tmp_path: Path) -> None:
    """A connection that sent nothing, or a POST whose body stopped short of its Content-Length, held its thread
    for ever. Both are closed after tiered.http.idle.timeout.ms, the stalled body with a 408 naming the setting."""
    import socket

    manager = LogManager(LogConfig.from_properties({"log.dirs": str(tmp_path / "a")}))
    server = Server(Endpoint(manager), "127.0.0.1", 0, idle_timeout_s=0.2)
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) as quiet:
            assert quiet.recv(1) == b""  # closed by the server
        answers, closed = _exchange(server.url, b"POST " + RECORDS.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                                    b"Content-Length: 100\r\n\r\n[{\"value\"")
        [(status, _headers, body)] = answers
        assert status == 408 and closed and "tiered.http.idle.timeout.ms" in body["error"]
        _wait_for(lambda: server.open_connections == 0)
        assert _call("GET", f"{server.url}/health")[0] == 200
    finally:
        server.stop()
        manager.close()


def test_a_stalled_body_ended_by_the_reaper_is_answered_408_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stalled body meets two bounds at about the same moment: its read's socket timeout (answered 408) and the
    reaper's deadline for the whole request, which shut the connection without an answer, so a busy machine turned
    the 408 into a dropped connection. Here the read's timeout is made long, so that only the reaper can end it."""
    from tiered import http_server

    setup = http_server._Handler.setup

    def long_reads(self: Any) -> None:
        setup(self)
        self.connection.settimeout(TIMEOUT)

    monkeypatch.setattr(http_server._Handler, "setup", long_reads)
    manager = LogManager(LogConfig.from_properties({"log.dirs": str(tmp_path / "a")}))
    server = Server(Endpoint(manager), "127.0.0.1", 0, idle_timeout_s=0.2)
    server.start()
    try:
        answers, closed = _exchange(server.url, b"POST " + RECORDS.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                                    b"Content-Length: 100\r\n\r\n[{\"value\"")
        [(status, _headers, body)] = answers
        assert status == 408 and closed and "tiered.http.idle.timeout.ms" in body["error"]
    finally:
        server.stop()
        manager.close()


def test_a_request_sent_a_byte_at_a_time_is_closed_after_the_timeout_in_all(tmp_path: Path) -> None:
    """The timeout bounded each read only: a client sending one byte of its request every few seconds (under the
    timeout) held its connection and a slot for ever; 64 of them made /health answer 503 (a review's probe). The
    request must be read whole within tiered.http.idle.timeout.ms."""
    import socket
    import threading

    manager = LogManager(LogConfig.from_properties({"log.dirs": str(tmp_path / "a")}))
    server = Server(Endpoint(manager), "127.0.0.1", 0, idle_timeout_s=0.5)
    server.start()
    closed = threading.Event()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) as trickle:
            def send_slowly() -> None:
                try:
                    for byte in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * 10_000:
                        trickle.sendall(bytes([byte]))
                        if closed.wait(0.1):  # (a byte every 0.1 s: each read well within the 0.5 s timeout)
                            return
                except OSError:
                    return

            sender = threading.Thread(target=send_slowly)
            sender.start()
            try:
                assert trickle.recv(1024) == b""  # the server shut the connection (the request never ended)
            finally:
                closed.set()
                sender.join(TIMEOUT)
        _wait_for(lambda: server.open_connections == 0)
        assert _call("GET", f"{server.url}/health")[0] == 200
    finally:
        server.stop()
        manager.close()


def test_a_client_that_stops_reading_its_answer_gets_no_error_answer_written_into_it(
    served: tuple[LogManager, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A client that stopped reading a large answer was logged as a failed request, and a 500 was written after
    the 200's bytes (a review's probe). The connection is closed, one INFO line."""
    import logging
    import socket

    _, url = served
    _call("POST", url + RECORDS, json.dumps([{"value": "x" * 1000} for _ in range(2000)]).encode())
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with caplog.at_level(logging.INFO, logger="tiered.http_server"):
        with socket.create_connection((host, int(port)), timeout=TIMEOUT) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(f"GET {RECORDS}?offset=0&max_bytes=2000000 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            head = sock.recv(64)
            assert head.startswith(b"HTTP/1.1 200")
            sock.shutdown(socket.SHUT_RD)  # reads no more
        _wait_for(lambda: "stopped reading its answer" in caplog.text or "went away" in caplog.text)
    assert "request failed" not in caplog.text and "Traceback" not in caplog.text


def test_a_post_never_creates_a_topic_whose_name_collides_with_an_existing_one(served: tuple[LogManager, str]) -> None:
    """'my_topic' beside 'my.topic' (one name once '.' is read as '_', Kafka's Topic.hasCollision): CreateTopics
    and the Kafka listener's auto-create refuse it; a POST made it, and both survived a restart."""
    manager, url = served
    manager.get_or_create_log("my.topic", 0)
    status, message = _error("POST", url + "/topics/my_topic/partitions/0/records", b'{"value": "a"}')
    assert status == 400 and message == ("Topic 'my_topic' collides with existing topic: my.topic (their names are "
                                         "one once '.' is read as '_')")
    assert sorted(t for t, _ in manager.partitions()) == ["my.topic"]
    status, _, _ = _call("POST", url + "/topics/my.topic/partitions/0/records", b'{"value": "a"}')
    assert status == 200  # the topic itself is written to as before
