"""Scratch directories a SIGKILLed process leaves under the temp dir are removed by the next process that makes one
of the same kind (local.scratch); a live process's are never touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from local.scratch import LOCK_NAME, ScratchDir, sweep

_HOLDER = """
import sys
from local.scratch import ScratchDir
scratch = ScratchDir(sys.argv[1], root=sys.argv[2])
print(scratch.path, flush=True)
sys.stdin.read()  # until the test closes our stdin or kills us
"""


def _holder(prefix: str, root: Path) -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, prefix, str(root)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


def test_a_killed_processs_scratch_dir_is_swept_and_a_live_ones_is_kept(tmp_path: Path) -> None:
    killed, killed_dir = _holder("tiered-copy-", tmp_path)
    live, live_dir = _holder("tiered-copy-", tmp_path)
    try:
        assert (killed_dir / LOCK_NAME).exists() and (live_dir / LOCK_NAME).exists()
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()
        (killed_dir / "000.snapshot").write_bytes(b"left behind")
        unlocked = tmp_path / "tiered-copy-being-made"  # between mkdtemp and its lock: someone's, not swept
        unlocked.mkdir()
        other = tmp_path / "tiered-read-only-x"  # another prefix: not this sweep's
        other.mkdir()
        assert sweep("tiered-copy-", tmp_path, force=True) == [killed_dir]
        assert not killed_dir.exists()
        assert live_dir.exists() and unlocked.exists() and other.exists()
        # a directory without a lock file for more than a day is a leftover too
        old = time.time() - 2 * 24 * 3600
        os.utime(unlocked, (old, old))
        assert sweep("tiered-copy-", tmp_path, force=True) == [unlocked]
    finally:
        live.kill()
        live.wait()
    assert sweep("tiered-copy-", tmp_path, force=True) == [live_dir]  # dead now
    with ScratchDir("tiered-copy-", root=tmp_path) as mine:
        assert sweep("tiered-copy-", tmp_path, force=True) == []  # ours is locked
    assert not mine.path.exists() and list(tmp_path.iterdir()) == [other]


@pytest.mark.parametrize("where", ["tmp", "shm"])
def test_a_killed_readers_copy_of_a_data_dir_is_removed_by_the_next_reader(tmp_path: Path, where: str) -> None:
    """`tiered consume` killed while its read-only manager is open leaves its scratch copy (in the temp dir, or on
    the memory file system: here a directory named by TIERED_MEMORY_TEMPDIR); the next read-only command removes
    it."""
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "TIERED_MEMORY_TEMPDIR": str(tmp_path / "shm")
           if where == "shm" else ""}
    (tmp_path / "tmp").mkdir()
    (tmp_path / "shm").mkdir()
    data = tmp_path / "data"
    subprocess.run([sys.executable, "-m", "tiered.cli", "produce", "-t", "t", "--log-dirs", str(data)],
                   input=b"a\nb\n", env=env, check=True, capture_output=True)
    reader = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom local import LogConfig, LogManager\n"
         f"m = LogManager(LogConfig.from_properties({{'log.dirs': {str(data)!r}}}), read_only=True)\n"
         "m.get_log('t', 0)\nprint('open', flush=True)\nsys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    assert reader.stdout is not None and reader.stdout.readline().strip() == "open"
    [left] = list((tmp_path / where).glob("tiered-read-only-*"))
    assert any(left.rglob("*.log"))
    reader.send_signal(signal.SIGKILL)
    reader.wait()
    done = subprocess.run([sys.executable, "-m", "tiered.cli", "consume", "-t", "t", "--log-dirs", str(data)],
                          env=env, check=True, capture_output=True, text=True)
    assert done.stdout.split() == ["a", "b"]
    assert list((tmp_path / "tmp").iterdir()) == []  # the killed reader's copy swept, the consumer's own removed
    assert list((tmp_path / "shm").iterdir()) == []


_INDEX_HOLDER = """
import sys
from tiered.spark.planning import process_index_dir
own = process_index_dir(sys.argv[1], sys.argv[2])
(own.path / "remote-log-index-cache").mkdir()
(own.path / "remote-log-index-cache" / "00000000000000000000_x.index").write_bytes(bytes(8))
print(own.path, flush=True)
sys.stdin.read()  # until the test closes our stdin or kills us
"""


def _index_holder(cache: Path, role: str) -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen([sys.executable, "-c", _INDEX_HOLDER, str(cache), role], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


def test_a_killed_spark_workers_index_dir_under_cache_dir_is_swept_by_the_next_worker(tmp_path: Path) -> None:
    """Spark kills its Python workers and planners at a session's end: the index dirs they kept under
    ``cacheDir/index`` are removed by the next process of the same role (tiered.spark.planning.process_index_dir),
    never those of live processes nor another role's."""
    from tiered.spark.planning import process_index_dir

    cache = tmp_path / "cache"
    killed, killed_dir = _index_holder(cache, "worker")
    live, live_dir = _index_holder(cache, "worker")
    planner, planner_dir = _index_holder(cache, "planner")
    try:
        assert killed_dir.parent == live_dir.parent == planner_dir.parent == cache / "index"
        for proc in (killed, planner):
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        own = process_index_dir(str(cache), "worker")
        try:
            assert not killed_dir.exists()
            assert any(live_dir.rglob("*.index")) and planner_dir.exists()  # alive; not this role's
            assert sorted((cache / "index").iterdir()) == sorted([live_dir, planner_dir, own.path])
        finally:
            own.cleanup()
        assert not own.path.exists()
    finally:
        live.kill()
        live.wait()
