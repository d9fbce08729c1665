"""``tiered run`` gives the large buffers it frees back to the system (tiered.commands.run.give_back_large_buffers).

The allocation check runs in a subprocess of its own: the setting is process-wide, and glibc's threshold, once
raised by a freed buffer, stays raised in the test process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
glibc = sys.platform == "linux" and bool(os.confstr("CS_GNU_LIBC_VERSION"))

BURST = """
    import gc, json, os, sys, threading
    from tiered.commands.run import give_back_large_buffers

    def rss():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) * 1024

    tuned = give_back_large_buffers() if sys.argv[1] == "tuned" else False
    start = rss()
    held, lock = [], threading.Lock()

    def answer():  # as the I/O pool's threads build fetch answers
        big = bytes(8 << 20); del big  # a freed large buffer: glibc raises its threshold past it
        pieces = [os.urandom(1 << 20) for _ in range(16)]
        joined = b"".join(pieces); del pieces
        small = [bytes(100_000) for _ in range(40)]
        keep = [bytes(5000) for _ in range(100)]  # small objects that outlive the answer, between its buffers
        with lock:
            held.append((joined, small, keep))

    threads = [threading.Thread(target=answer) for _ in range(16)]
    for t in threads: t.start()
    for t in threads: t.join()
    peak = rss()
    keep = [k for _, _, k in held]
    del held; gc.collect()
    print(json.dumps({"tuned": tuned, "start": start, "peak": peak, "after": rss()}))
"""


def _burst(mode: str, **env: str) -> dict[str, int]:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    environ.update(env, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(BURST), mode], env=environ, capture_output=True,
                          text=True, timeout=300, check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


# allowed-skip: the tuning is glibc's (mallopt); elsewhere it does nothing, as the tests below check on every platform
@pytest.mark.skipif(not glibc, reason="glibc's allocator only: elsewhere the call does nothing, as tested below")
def test_a_burst_of_answers_built_on_threads_is_given_back() -> None:
    tuned, plain = _burst("tuned"), _burst("plain")
    assert tuned["tuned"] is True and plain["tuned"] is False
    grown = tuned["peak"] - tuned["start"]
    assert grown > 200 << 20  # the burst happened
    assert tuned["after"] - tuned["start"] < grown // 4  # and is gone with its buffers
    # the same burst untuned: what the setting is for (glibc keeps much of it in its threads' arenas)
    assert plain["after"] - plain["start"] > (plain["peak"] - plain["start"]) // 4


def test_the_operators_own_setting_is_left_alone() -> None:
    out = _burst("tuned", MALLOC_MMAP_THRESHOLD_="1048576")
    assert out["tuned"] is False


def test_tiered_run_sets_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tiered.cli import main
    from tiered.commands import run as run_command

    calls: list[int] = []
    monkeypatch.setattr(run_command, "give_back_large_buffers", lambda: calls.append(1) or True)
    assert main(["run", "--duration", "0", "--listen", "127.0.0.1:0", "--log-dirs", str(tmp_path / "data")]) == 0
    assert calls == [1]
