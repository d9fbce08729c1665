"""tests/conftest.py: a test session stopped by SIGTERM (a CI job's timeout) tears its session fixtures down, as
one stopped by Ctrl-C does, so the servers they started (in sessions of their own) are stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 60.0  # seconds: a failure bound for waits that end at once when the code is right

INNER = '''
import os, subprocess, sys, time
from pathlib import Path

import pytest

OUT = Path(os.environ["INNER_OUT"])


@pytest.fixture(scope="session")
def server():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    (OUT / "server.pid").write_text(str(proc.pid))
    yield proc
    proc.kill()
    proc.wait()
    (OUT / "torn-down").write_text("yes")


def test_runs_until_stopped(server):
    (OUT / "running").write_text("yes")
    time.sleep(600)
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_session_stopped_by_sigterm_tears_its_session_fixtures_down(tmp_path: Path) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "test_inner.py").write_text(INNER)
    env = dict(os.environ, INNER_OUT=str(tmp_path), PYTHONPATH=str(ROOT), TIERED_TEMP_CHECK="0")
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                             "test_inner.py"], cwd=inner, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    server_pid = None
    try:
        deadline = time.monotonic() + LIMIT
        while not (tmp_path / "running").exists():  # the test is running, its session fixture set up
            assert proc.poll() is None, proc.communicate()[0].decode()
            assert time.monotonic() < deadline, "the inner session never started its test"
            time.sleep(0.05)
        server_pid = int((tmp_path / "server.pid").read_text())
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=LIMIT)[0].decode()
        assert (tmp_path / "torn-down").exists(), out
        assert not _alive(server_pid), out
        assert proc.returncode == 2 and "KeyboardInterrupt" in out, out  # pytest's "interrupted"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if server_pid is not None and _alive(server_pid):
            os.kill(server_pid, signal.SIGKILL)
