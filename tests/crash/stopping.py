"""Run a crash test's child script to the step where it stops, then SIGKILL it (the children print ``STOPPED
<step>`` there and wait: nothing of theirs runs after)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIMIT = 120.0  # seconds: a failure bound for a child that gets to its step in a second or two


def kill_at(child: Path, args: list[str], step: str) -> None:
    """``python child *args``, SIGKILLed once it says ``STOPPED <step>`` (a failure if it never does)."""
    proc = subprocess.Popen([sys.executable, str(child), *args], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines: list[str] = []
    stopped = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.append(raw.decode().strip())
            if lines[-1].startswith("STOPPED"):
                stopped.set()
        stopped.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert stopped.wait(LIMIT), f"the child never reached {step}"
        assert lines and lines[-1] == f"STOPPED {step}", (lines, proc.stderr.read() if proc.poll() is not None else "")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=LIMIT)
