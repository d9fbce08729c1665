"""The session check of tests/conftest.py: a run that leaves a new entry in its temp dir fails naming it; one that
cleans up passes; what other work writes to the system temp dir meanwhile does not count; the session's private
temp dir is gone afterwards. Run on a small test file in a child pytest whose system temp dir is this test's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _session(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    temp = tmp_path / "temp"
    temp.mkdir(exist_ok=True)
    (tmp_path / "test_child.py").write_text(f"import tempfile\n\n\ndef test_child():\n{body}\n")
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(REPO), "TIERED_TEMP_CHECK": "1"}
    env.pop("TIERED_MEMORY_TEMPDIR", None)  # the child makes its own memory dir, as a session does
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_child.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_session_that_leaves_a_temp_entry_fails_naming_it(tmp_path: Path) -> None:
    proc = _session(tmp_path, '    tempfile.mkdtemp(prefix="tiered-copy-")')
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout and "FAILED (temp dir check): the test session left 1 new entry in" in proc.stdout
    assert "tiered-copy-" in proc.stdout
    assert os.listdir(tmp_path / "temp") == [next(p for p in os.listdir(tmp_path / "temp") if p.startswith("pytest-of-"))]


def test_what_other_work_writes_to_the_system_temp_dir_meanwhile_does_not_count(tmp_path: Path) -> None:
    outside = tmp_path / "temp" / "someone-elses-file"
    proc = _session(tmp_path, f"    assert tempfile.gettempdir() != {str(tmp_path / 'temp')!r}\n"
                              f"    open({str(outside)!r}, 'w').close()")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "temp dir check" not in proc.stdout and outside.exists()


def test_a_session_that_cleans_up_passes(tmp_path: Path) -> None:
    proc = _session(tmp_path, "    with tempfile.TemporaryDirectory():\n        pass")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "temp dir check" not in proc.stdout


def test_a_session_that_leaves_an_entry_in_its_memory_dir_fails_naming_it(tmp_path: Path) -> None:
    """Read-only opens put their scratch copies on /dev/shm: the session names a memory dir of its own there, in
    TIERED_MEMORY_TEMPDIR, and checks it as it checks its temp dir (where there is no /dev/shm, it names none)."""
    body = ('    import os\n    where = os.environ.get("TIERED_MEMORY_TEMPDIR")\n'
            '    if where:\n        open(os.path.join(where, "left-behind"), "w").close()')
    proc = _session(tmp_path, body)
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK | os.X_OK)):
        assert proc.returncode == 0 and "temp dir check" not in proc.stdout, proc.stdout + proc.stderr
        return
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAILED (temp dir check): the test session left 1 new entry in" in proc.stdout
    [left] = [w.rstrip(",") for w in proc.stdout.split() if w.endswith("left-behind")]
    memory = Path(left).parent
    assert memory.parent == shm and memory.name.startswith("tiered-tests-")
    assert not memory.exists()  # removed at the session's end either way
