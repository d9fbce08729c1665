from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

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


# Nothing left behind in the temp dir ---------------------------------------------------------------------------
# The names in the system temp dir when the session starts; at its end, a name that is new there (other than
# pytest's own tmp_path root, which keeps the last runs on purpose) is something a test, the code under test or a
# server it started left behind: the session fails naming it. On a machine where other work writes to the same temp
# dir meanwhile, TIERED_TEMP_CHECK=0 turns the check off.

_TEMP_NAMES_AT_START: set[str] | None = None


def pytest_sessionstart(session: pytest.Session) -> None:
    global _TEMP_NAMES_AT_START
    if os.environ.get("TIERED_TEMP_CHECK", "1") != "0":
        _TEMP_NAMES_AT_START = set(os.listdir(tempfile.gettempdir()))


def _left_in_temp(session: pytest.Session) -> list[str]:
    if _TEMP_NAMES_AT_START is None:
        return []
    temp = Path(tempfile.gettempdir()).resolve()
    ours = set()
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None:  # pytest's basetemp (pytest-of-<user>/pytest-N) and any --basetemp under the temp dir
        base = Path(factory.getbasetemp()).resolve()
        if temp in base.parents:
            ours.add(base.relative_to(temp).parts[0])
    return sorted(set(os.listdir(temp)) - _TEMP_NAMES_AT_START - ours)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.USAGE_ERROR) or session.config.option.collectonly:
        return
    left = _left_in_temp(session)
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = (f"the test session left {len(left)} new entr{'y' if len(left) == 1 else 'ies'} in "
                   f"{tempfile.gettempdir()}: {', '.join(left[:20])}{', ...' if len(left) > 20 else ''}")
        if reporter is not None:
            reporter.write_line(f"FAILED (temp dir check): {message}", red=True, bold=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
