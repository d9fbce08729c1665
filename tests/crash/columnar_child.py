"""The process the columnar-copy crash test kills: ``python columnar_child.py ROOT STEP [LOG_START]``.

It opens the broker of ``ROOT`` (``tests.logutil.local_tier_props``: data dir, local-directory tier, and the columnar
copies beside it), moves the log start offset of ``c-0`` to ``LOG_START`` when given (so retention has files to
retire), and runs one pass of the copy tasks, whose columnar keeper SIGKILLs this process (a real SIGKILL: no
``finally`` of ours runs) right after the step ``STEP`` (tiered.columnar.keeper: written, renamed, published,
retired, deleted; ``STEP#N``: the N-th time it is done). Reaching the end without it prints ``DONE`` (a failure for the test).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from local import LogConfig, LogManager
from local.log import LogStartOffsetIncrementReason
from tests.logutil import local_tier_props
from tiered.remote_log_manager import RemoteLogManager


def main() -> None:
    root, step = Path(sys.argv[1]), sys.argv[2]
    with LogManager(LogConfig.from_properties(local_tier_props(root)), start_scheduler=False) as m:
        rlm = m.remote_tier
        assert isinstance(rlm, RemoteLogManager) and rlm.columnar is not None

        wanted, _, nth = step.partition("#")  # "published#2": the second time the step is done
        seen = {"n": 0}

        def on_step(name: str) -> None:
            if name == wanted:
                seen["n"] += 1
                if seen["n"] == int(nth or 1):
                    print(f"KILLED {step}", flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)

        rlm.columnar.on_step = on_step
        if len(sys.argv) > 3:
            log = m.get_log("c", 0)
            assert log is not None
            log.maybe_increment_log_start_offset(int(sys.argv[3]), LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION)
        rlm.run_once(m.all_logs())
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
