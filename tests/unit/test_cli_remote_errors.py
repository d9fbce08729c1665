"""Honest answers from the remote tier: a missing bucket, missing or rejected credentials, an unreachable endpoint, an
unknown backend and the local backend without its directory are each one line on stderr naming what is wrong, with
the right exit code and no traceback. The S3 answers come from a stub HTTP server speaking S3's error format (a real
server's missing bucket is in tests/integration/test_cli_remote_s3.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tiered.cli import main


class StubS3:
    """Answers every request with ``status`` and an S3 error document of ``code``; counts the requests."""

    def __init__(self) -> None:
        self.status, self.code, self.requests = 404, "NoSuchBucket", 0
        self.html = False  # answer as a web server that is not S3 does, with an HTML page
        self.location: str | None = None  # a Location header (a redirect), as a web server's for a directory
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                stub.requests += 1
                body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{stub.code}</Code>'
                        f"<Message>stub</Message><RequestId>1</RequestId></Error>").encode()
                if stub.html:
                    body = b"<html><body><h1>Not here</h1></body></html>"
                self.send_response(stub.status)
                self.send_header("Content-Type", "text/html" if stub.html else "application/xml")
                self.send_header("Content-Length", str(len(body)))
                if stub.location is not None:
                    self.send_header("Location", stub.location)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub() -> Iterator[StubS3]:
    server = StubS3()
    yield server
    server.close()


def s3_options(endpoint: str, *, credentials: bool = True) -> list[str]:
    opts = {"remote.log.storage.system.enable": "true", "remote.log.storage.manager.class.name": "s3",
            "rsm.config.bucket": "bkt", "rsm.config.region": "us-east-1", "rsm.config.endpoint_url": endpoint,
            "rsm.config.path_style": "true", "rsm.config.max_attempts": "5"}
    if credentials:
        opts |= {"rsm.config.aws_access_key_id": "AKIDEXAMPLE", "rsm.config.aws_secret_access_key": "s3cr3t-value"}
    return [arg for k, v in opts.items() for arg in ("-o", f"{k}={v}")]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    rc = main(list(args))
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("WARNING ")]
    assert len(lines) == 1, err
    assert "s3cr3t-value" not in err
    return rc, lines[0]


RUN = ["run", "--duration", "0", "--listen", "127.0.0.1:0"]


@pytest.mark.parametrize("command", [["offload"], ["consume", "-t", "ev"], ["attach", "-t", "ev"], RUN])
def test_missing_bucket_is_named(stub: StubS3, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    rc, line = run(capsys, *command, "--log-dirs", str(tmp_path / "data"), *s3_options(stub.url))
    assert rc == 1
    assert f"the bucket 'bkt' does not exist at {stub.url}" in line
    assert "no object" not in line


def test_a_404_listing_the_bucket_is_a_missing_bucket_too(stub: StubS3, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stub.code = "404"  # a server that answers without an S3 error code
    rc, line = run(capsys, "offload", "--log-dirs", str(tmp_path / "data"), *s3_options(stub.url))
    assert rc == 1 and "the bucket 'bkt' does not exist" in line


@pytest.mark.parametrize("status", [404, 200, 403])
def test_an_endpoint_that_is_not_s3_is_named_so_not_as_a_missing_bucket(
    stub: StubS3, tmp_path: Path, capsys: pytest.CaptureFixture[str], status: int,
) -> None:
    stub.status, stub.html = status, True  # e.g. endpoint_url pointing at a web server or the wrong port
    rc, line = run(capsys, "offload", "--log-dirs", str(tmp_path / "data"), *s3_options(stub.url))
    assert rc == 1 and f"the endpoint {stub.url} does not answer as S3 does (HTTP {status} without" in line
    assert "rsm.config.endpoint_url" in line and "does not exist" not in line and "access denied" not in line


def test_an_endpoint_that_redirects_without_end_is_named_as_not_s3(
    stub: StubS3, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """A web server's 301 for a directory (no S3 region header) made botocore follow it until Python's recursion
    limit: "maximum recursion depth exceeded" (a helper's pass, python -m http.server as the endpoint)."""
    stub.status, stub.html, stub.location = 301, True, "/bkt/"
    (tmp_path / "data").mkdir()
    for command in (["offload"], ["status"]):
        rc, line = run(capsys, *command, "--log-dirs", str(tmp_path / "data"), *s3_options(stub.url))
        assert rc == 1 and f"the endpoint {stub.url} does not answer as S3 does" in line, line
        assert "rsm.config.endpoint_url" in line and "recursion" not in line


@pytest.mark.parametrize("code", ["InvalidAccessKeyId", "SignatureDoesNotMatch"])
def test_rejected_credentials_are_named(stub: StubS3, tmp_path: Path, capsys: pytest.CaptureFixture[str], code: str) -> None:
    stub.status, stub.code = 403, code
    rc, line = run(capsys, "offload", "--log-dirs", str(tmp_path / "data"), *s3_options(stub.url))
    assert rc == 1
    assert f"the S3 credentials were rejected by {stub.url} ({code})" in line
    assert "rsm.config.aws_access_key_id" in line


def test_access_denied_is_named(stub: StubS3, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stub.status, stub.code = 403, "AccessDenied"
    rc, line = run(capsys, "offload", "--log-dirs", str(tmp_path / "data"), *s3_options(stub.url))
    assert rc == 1 and "access denied to s3://bkt/" in line


def test_missing_credentials_are_a_config_error(stub: StubS3, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    rc, line = run(capsys, "offload", "--log-dirs", str(tmp_path / "data"), *s3_options(stub.url, credentials=False))
    assert rc == 2
    assert "no S3 credentials found for bucket 'bkt'" in line
    assert stub.requests == 0  # said before anything is sent


def test_the_first_contact_is_not_retried(stub: StubS3, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """rsm.config.max_attempts=5 holds for the work; the check before it asks once, so a wrong endpoint fails fast."""
    stub.status, stub.code = 503, "ServiceUnavailable"
    rc, line = run(capsys, "offload", "--log-dirs", str(tmp_path / "data"), *s3_options(stub.url))
    assert rc == 1 and "ServiceUnavailable" in line
    assert stub.requests == 1


def test_unreachable_endpoint_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    for command in (["offload"], ["consume", "-t", "ev"]):
        rc, line = run(capsys, *command, "--log-dirs", str(tmp_path / "data"), *s3_options(url))
        assert rc == 1
        assert f"cannot reach the S3 endpoint {url}: connection failed" in line
    # status still shows the local tier and names the problem
    (tmp_path / "data").mkdir(exist_ok=True)
    rc = main(["status", "--log-dirs", str(tmp_path / "data"), *s3_options(url)])
    out, err = capsys.readouterr()
    assert rc == 1 and f"remote tier: cannot reach the S3 endpoint {url}" in err and "Traceback" not in err
    assert f"data dir {tmp_path / 'data'}" in out


def test_run_asks_the_store_before_it_opens_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Not a process that serves and exits 0 while every remote pass fails: the first contact fails it at once."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    rc, line = run(capsys, *RUN, "--log-dirs", str(tmp_path / "data"), *s3_options(url))
    assert rc == 1 and f"tiered run: cannot reach the S3 endpoint {url}: connection failed" in line
    assert not (tmp_path / "data").exists()


def test_unknown_backend_lists_the_known_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    opts = ["-o", "remote.log.storage.system.enable=true", "-o", "remote.log.storage.manager.class.name=s4"]
    for command in (["offload"], ["consume", "-t", "ev"], ["attach", "-t", "ev"], ["status"]):
        (tmp_path / "data").mkdir(exist_ok=True)
        rc, line = run(capsys, *command, "--log-dirs", str(tmp_path / "data"), *opts)
        assert rc == 2, command
        assert "Invalid value s4 for configuration remote.log.storage.manager.class.name" in line
        assert "local, s3, fsspec, store" in line


def test_local_backend_without_its_dir_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    opts = ["-o", "remote.log.storage.system.enable=true", "-o", "remote.log.storage.manager.class.name=local"]
    for command in (["offload"], ["consume", "-t", "ev"], ["attach", "-t", "ev"]):
        rc, line = run(capsys, *command, "--log-dirs", str(tmp_path / "data"), *opts)
        assert rc == 2, command
        assert "Missing required configuration rsm.config.dir" in line


def test_attach_and_offload_without_the_remote_tier_say_how_to_enable_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["offload"], ["attach", "-t", "ev"]):
        rc, line = run(capsys, *command, "--log-dirs", str(tmp_path / "data"))
        assert rc == 2, command
        assert "remote.log.storage.system.enable=true" in line


def test_the_backend_names_a_missing_bucket_beyond_the_first_contact(stub: StubS3) -> None:
    """A reader that never ran the check (a Spark executor) hears of the bucket, not of a missing object."""
    from tiered.backends.s3 import S3RemoteStorageManager
    from tiered.errors import RemoteResourceNotFoundError, RemoteStorageError

    rsm = S3RemoteStorageManager()
    rsm.configure({"bucket": "bkt", "region": "us-east-1", "endpoint_url": stub.url, "path_style": "true",
                   "aws_access_key_id": "AKIDEXAMPLE", "aws_secret_access_key": "s3cr3t-value", "max_attempts": "1"})
    try:
        with pytest.raises(RemoteStorageError, match=f"the bucket 'bkt' does not exist at {stub.url}") as info:
            rsm.store.list_keys("topic-x/0/")
        assert not isinstance(info.value, RemoteResourceNotFoundError)
        stub.status, stub.code = 403, "InvalidAccessKeyId"
        with pytest.raises(RemoteStorageError, match="the S3 credentials were rejected"):
            rsm.store.get("topic-x/0/00000000000000000000-x.log")
    finally:
        rsm.close()


def test_readers_do_not_create_a_missing_local_tier_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    opts = ["-o", "remote.log.storage.system.enable=true", "-o", "remote.log.storage.manager.class.name=local",
            "-o", f"rsm.config.dir={tmp_path / 'no-bucket'}"]
    (tmp_path / "data").mkdir()
    rc, line = run(capsys, "attach", "-t", "ev", "--log-dirs", str(tmp_path / "data"), *opts)
    assert rc == 1 and f"the remote tier's directory {tmp_path / 'no-bucket'} (rsm.config.dir) does not exist" in line
    rc = main(["status", "--log-dirs", str(tmp_path / "data"), *opts])
    assert rc == 1 and "(rsm.config.dir) does not exist" in capsys.readouterr().err
    assert not (tmp_path / "no-bucket").exists()


def test_verbose_adds_the_traceback(stub: StubS3, tmp_path: Path) -> None:
    """In a process of its own: -v sets up logging to that process's stderr."""
    proc = subprocess.run([sys.executable, "-m", "tiered.cli", "offload", "-v", "--log-dirs", str(tmp_path / "data"),
                           *s3_options(stub.url)], capture_output=True, text=True, timeout=120)
    err = proc.stderr
    assert proc.returncode == 1, err
    assert "tiered offload: the bucket 'bkt' does not exist" in err and "Traceback" in err
    assert "s3cr3t-value" not in err


@pytest.mark.parametrize("attempts", [1, 3])
def test_max_attempts_counts_every_request_of_a_call(stub: StubS3, attempts: int) -> None:
    """rsm.config.max_attempts=1 sent two requests (botocore's max_attempts counts the retries only)."""
    from tiered.backends.s3 import S3RemoteStorageManager
    from tiered.errors import RemoteStorageError

    stub.status, stub.code = 503, "SlowDown"
    rsm = S3RemoteStorageManager()
    rsm.configure({"bucket": "bkt", "region": "us-east-1", "endpoint_url": stub.url, "path_style": "true",
                   "aws_access_key_id": "AKIDEXAMPLE", "aws_secret_access_key": "s3cr3t-value",
                   "max_attempts": str(attempts), "retry_mode": "standard"})
    try:
        with pytest.raises(RemoteStorageError):
            rsm.store.size("topic-x/0/00000000000000000000-x.log")
    finally:
        rsm.close()
    assert stub.requests == attempts


def test_tiered_run_rides_out_a_store_that_stops_answering_after_its_first_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The store answered the start's check, then throttled every listing (a brownout): tiered run said it was
    listening and exited 1 three seconds later, its local partitions gone with it (its progress line listed the
    remote metadata in the main thread; a helper's S3 fault pass). It serves on; the tasks retry at each pass."""
    from local import LogConfig, LogManager
    from tests.logutil import local_tier_props
    from tiered.backends.local_dir import LocalDirStore
    from tiered.cli import main
    from tiered.errors import RemoteStorageError

    props = local_tier_props(tmp_path)
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        m.get_or_create_log("t", 0, {"remote.storage.enable": "true"})
    config = tmp_path / "broker.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def throttled(self: LocalDirStore, prefix: str = "") -> list[str]:
        raise RemoteStorageError(f"S3 list of s3://b/{prefix} failed: SlowDown (after 5 attempts)")

    monkeypatch.setattr(LocalDirStore, "list_keys", throttled)
    rc = main(["run", "--config", str(config), "--duration", "2", "--listen", "127.0.0.1:0"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "listening on" in out and "SlowDown" not in out
