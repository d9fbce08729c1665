"""Real S3 servers on 127.0.0.1 for integration tests, started from the scripts in ``localstack/``.

Each context manager yields an :class:`S3Endpoint` once the server answers, and stops the server's whole process
group on exit. A server that does not come up raises ``ServerStartError`` with the tail of its log: the tests
fail, they never skip.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "localstack"


class ServerStartError(RuntimeError):
    pass


@dataclass(frozen=True)
class S3Endpoint:
    name: str
    url: str
    access_key: str = "tiered"
    secret_key: str = "tiered-secret"
    region: str = "us-east-1"
    # Whether two conditional creates of one key (If-None-Match: *) racing each other have one winner: SeaweedFS and
    # LocalStack serialize them, as AWS does; moto checks, then writes, without a lock.
    serializes_conditional_writes: bool = True

    def client(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client("s3", endpoint_url=self.url, aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key, region_name=self.region)

    def rsm_config(self, bucket: str, prefix: str = "") -> dict[str, str]:
        return {"bucket": bucket, "prefix": prefix, "endpoint_url": self.url, "region": self.region,
                "aws_access_key_id": self.access_key, "aws_secret_access_key": self.secret_key, "path_style": "true",
                "connect_timeout_ms": "5000", "read_timeout_ms": "20000"}


def free_port(span: int = 1) -> int:
    """A port p with p..p+span free-looking on 127.0.0.1 (SeaweedFS derives its other ports from it)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10003 < 65535 and all(_free(port + i) for i in range(span)):
            return port
    raise ServerStartError("no free port range on 127.0.0.1")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes] | None, log: Path | None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            break
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return  # it answers (403/404 are answers)
        except OSError:
            time.sleep(0.3)
    tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
    raise ServerStartError(f"server at {url} did not start within {timeout:.0f}s\n{tail}")


@contextlib.contextmanager
def seaweedfs(workdir: Path, timeout: float = 90) -> Iterator[S3Endpoint]:
    log = workdir / "seaweedfs.log"
    proc, port = _start_script("seaweedfs.sh", workdir / "seaweedfs", log, timeout, "/")
    try:
        endpoint = S3Endpoint("seaweedfs", f"http://127.0.0.1:{port}")
        _wait_bucket_ready(endpoint, timeout, log)
        yield endpoint
    finally:
        _stop(proc)


def _start_script(
    script: str, home: Path, log: Path, timeout: float, health_path: str
) -> tuple[subprocess.Popen[bytes], int]:
    """``script HOME PORT`` started on a free port and answering ``health_path``. A port found free can be taken
    before the server binds it (a busy machine runs other servers): a server that exits while starting is started
    again on another port, twice at most."""
    for attempt in range(3):
        port = free_port()
        with open(log, "ab") as out:
            proc = subprocess.Popen(["bash", str(SCRIPTS / script), str(home), str(port)],
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_http(f"http://127.0.0.1:{port}{health_path}", timeout, proc, log)
            return proc, port
        except ServerStartError:
            exited = proc.poll() is not None
            _stop(proc)
            if not exited or attempt == 2:
                raise
    raise AssertionError("unreachable")


def _wait_bucket_ready(endpoint: S3Endpoint, timeout: float, log: Path) -> None:
    """SeaweedFS answers HTTP before its filer is ready: wait until a bucket can be created."""
    client = endpoint.client()
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            client.create_bucket(Bucket="readiness-probe")
            client.delete_bucket(Bucket="readiness-probe")
            return
        except Exception as exc:
            last = exc
            time.sleep(0.5)
    raise ServerStartError(f"{endpoint.url} never accepted a bucket: {last}\n{log.read_text(errors='replace')[-3000:]}")


@contextlib.contextmanager
def localstack_s3(workdir: Path, timeout: float = 600) -> Iterator[S3Endpoint]:
    """LocalStack in host mode; the first start installs its venv (minutes), later ones reuse it."""
    proc, port = _start_script("localstack.sh", workdir / "localstack", workdir / "localstack.log", timeout,
                               "/_localstack/health")
    try:
        yield S3Endpoint("localstack", f"http://127.0.0.1:{port}", access_key="test", secret_key="test")
    finally:
        _stop(proc)


@contextlib.contextmanager
def moto_server(timeout: float = 30) -> Iterator[S3Endpoint]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        _wait_http(f"http://127.0.0.1:{port}/moto-api/", timeout, None, None)
        yield S3Endpoint("moto-server", f"http://127.0.0.1:{port}", serializes_conditional_writes=False)
    finally:
        server.stop()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
