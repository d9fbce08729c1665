"""Every byte survives ``consume --json | produce --json`` and an HTTP GET whose records are POSTed back: binary keys,
values and header values, text that looks like base64, empty values, tombstones, duplicate headers. The stored
records are compared, not the printed text (docs/record-json.md is the format; tests/property/test_record_json.py
its codec)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from tiered.http_server import Endpoint, Server

RECORDS = [
    SimpleRecord(1000, None, b"\xff\xfe"),
    SimpleRecord(1001, None, b"base64://4="),  # text that looks like the old "base64:" form of the bytes above
    SimpleRecord(1002, b"k\x00\xff", None),  # a tombstone with a binary key
    SimpleRecord(1003, b"", b"", [("h", b"1"), ("h", b"\x80"), ("n", None), ("", b"")]),
    SimpleRecord(1004, "clé".encode(), "€ 😀 \u2028 \x00".encode(), [("trace", b"\xc3\x28")]),
]


def _stored(data: Path, topic: str) -> list[tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]]:
    with LogManager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False) as manager:
        log = manager.get_log(topic, 0)
        assert log is not None
        return [(r.timestamp, r.key, r.value, r.headers) for b in log.read(0, 1 << 20).records.batches() for r in b.records()]


def _write(data: Path, topic: str) -> None:
    with LogManager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False) as manager:
        manager.get_or_create_log(topic, 0).append(MemoryRecords.build(RECORDS))


def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "tiered.cli", *args], input=stdin, capture_output=True, timeout=300)


def test_consume_json_piped_to_produce_json_stores_every_byte_again(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _write(data, "src")
    consumed = _cli("consume", "--log-dirs", str(data), "-t", "src", "--json")
    assert consumed.returncode == 0, consumed.stderr
    produced = _cli("produce", "--log-dirs", str(data), "-t", "dst", "--json", stdin=consumed.stdout)
    assert produced.returncode == 0, produced.stderr
    expected = [(r.timestamp, r.key, r.value, r.headers) for r in RECORDS]
    assert _stored(data, "src") == expected
    assert _stored(data, "dst") == expected
    rows = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert rows[0]["valueBase64"] == "//4=" and rows[1]["value"] == "base64://4=" and rows[2]["value"] is None


def test_plain_consume_prints_a_values_bytes_and_null_as_kafkas_console_consumer_does(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert _cli("produce", "--log-dirs", str(data), "-t", "p", stdin=b"\xff\xfe\nbase64://4=\n").returncode == 0
    assert _cli("produce", "--log-dirs", str(data), "-t", "p", "--json", stdin=b'{"key": "k", "value": null}\n').returncode == 0
    assert _cli("consume", "--log-dirs", str(data), "-t", "p").stdout == b"\xff\xfe\nbase64://4=\nnull\n"
    assert _cli("consume", "--log-dirs", str(data), "-t", "p", "--print-key").stdout == (
        b"null\t\xff\xfe\nnull\tbase64://4=\nk\tnull\n")


def test_an_http_get_whose_records_are_posted_back_stores_every_byte_again(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _write(data, "src")
    manager = LogManager(LogConfig.from_properties({"log.dirs": str(data)}))
    server = Server(Endpoint(manager), "127.0.0.1", 0)
    server.start()
    try:
        with urllib.request.urlopen(f"{server.url}/topics/src/partitions/0/records", timeout=60) as response:
            got = json.loads(response.read())["records"]
        body = json.dumps(got).encode()
        request = urllib.request.Request(f"{server.url}/topics/dst/partitions/0/records", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            assert json.loads(response.read())["count"] == len(RECORDS)
    finally:
        server.stop()
        manager.close()
    assert _stored(data, "dst") == _stored(data, "src") == [(r.timestamp, r.key, r.value, r.headers) for r in RECORDS]
