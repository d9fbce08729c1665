from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from types import FrameType

import pytest
from hypothesis import HealthCheck, settings

# No example fails for taking long: a busy two-core machine pauses any of them for hundreds of milliseconds (one
# failed CI at hypothesis' 200 ms deadline), and speed is measured in bench/, never asserted in a test.
settings.register_profile("tiered", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tiered")

# A real Kafka 4.0 KRaft log dir (data written by a broker, kept as a fixture so a plain clone is self-contained).
GOLDEN = Path(__file__).resolve().parent / "fixtures" / "kafka-4.0-kraft-logs"


@pytest.fixture
def golden_dir(tmp_path: Path) -> Path:
    """A writable copy of the real Kafka 4.0 KRaft log dir in tests/fixtures."""
    if not GOLDEN.is_dir():
        raise RuntimeError(f"golden Kafka log dir not found at {GOLDEN}")
    target = tmp_path / "kafka-4.0-kraft-logs"
    shutil.copytree(GOLDEN, target)
    for path in target.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    target.chmod(0o755)
    return target


# A session stopped by SIGTERM ----------------------------------------------------------------------------------
# (a CI job's timeout, `kill`) ends as one stopped by Ctrl-C: pytest then tears the session's fixtures down, which
# stops the S3 servers the integration tests started. They run in sessions of their own (a Ctrl-C in a terminal
# reaches the test process only), so without this a killed suite left them running.


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"stopped by signal {signal.Signals(signum).name}")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupted)


def pytest_unconfigure(config: pytest.Config) -> None:
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is _interrupted:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


# Nothing left behind in the temp dir ---------------------------------------------------------------------------
# The session gets a private temp dir (tiered-tests-*, under the system temp dir): TMPDIR and tempfile point at it
# for this process and everything it starts (writers, servers, Spark's JVMs and workers are given it too), so what
# other work on the machine writes to the system temp dir meanwhile is no concern. At the session's end an entry
# still in it is something a test, the code under test or a server it started left behind: the session fails naming
# it, and the private dir is removed either way. pytest's own tmp_path root (pytest-of-<user>, which keeps the last
# runs on purpose) stays in the system temp dir. TIERED_TEMP_CHECK=0 turns the check off.
# Read-only opens put their scratch copies on a memory file system first (local.read_only), which TMPDIR set turns
# off: the session names one of its own (tiered-tests-* under /dev/shm, where there is one) in
# TIERED_MEMORY_TEMPDIR, so the suite runs the path a user's machine does, and checks it the same way.

_PRIVATE_TEMP: Path | None = None
_PRIVATE_MEMORY: Path | None = None


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    global _PRIVATE_TEMP
    if os.environ.get("TIERED_TEMP_CHECK", "1") == "0" or _PRIVATE_TEMP is not None:
        return
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None:
        factory.getbasetemp()  # made now, in the system temp dir, before TMPDIR moves
    _PRIVATE_TEMP = Path(tempfile.mkdtemp(prefix="tiered-tests-"))
    shm = Path("/dev/shm")
    if "TIERED_MEMORY_TEMPDIR" not in os.environ and shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        global _PRIVATE_MEMORY
        _PRIVATE_MEMORY = Path(tempfile.mkdtemp(prefix="tiered-tests-", dir=shm))
        os.environ["TIERED_MEMORY_TEMPDIR"] = str(_PRIVATE_MEMORY)
    os.environ["TMPDIR"] = str(_PRIVATE_TEMP)
    tempfile.tempdir = str(_PRIVATE_TEMP)


def _left_in_temp() -> list[str]:
    return sorted(str(d / name) for d in (_PRIVATE_TEMP, _PRIVATE_MEMORY) if d is not None and d.is_dir()
                  for name in os.listdir(d))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _PRIVATE_TEMP is None:
        return
    try:
        if exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.USAGE_ERROR) or session.config.option.collectonly:
            return
        left = _left_in_temp()
        if left:
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            message = (f"the test session left {len(left)} new entr{'y' if len(left) == 1 else 'ies'} in its temp "
                       f"dirs: {', '.join(left[:20])}{', ...' if len(left) > 20 else ''}")
            if reporter is not None:
                reporter.write_line(f"FAILED (temp dir check): {message}", red=True, bold=True)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    finally:
        shutil.rmtree(_PRIVATE_TEMP, ignore_errors=True)
        if _PRIVATE_MEMORY is not None:
            shutil.rmtree(_PRIVATE_MEMORY, ignore_errors=True)
