"""The cleaning process the cleaner crash test kills: ``python clean_child.py DATA_DIR STEP``.

It opens the broker's logs (written by the test beforehand: a compacted topic of several segments) and runs one pass
of the log cleaner, stopping at ``STEP`` of the first swap, where it prints ``STOPPED <step>`` and waits for the
test's SIGKILL (no ``finally`` or ``except`` of ours runs after). Steps, in the order of Kafka's protocol:

- ``writing``: the ``.cleaned`` segment is being written (one append done);
- ``cleaned``: the ``.cleaned`` segment is complete and flushed, nothing renamed;
- ``swap``: it is renamed ``.swap`` (the directory synced), the old segments untouched;
- ``deleted``: an old segment is renamed ``.deleted``;
- ``renamed``: the ``.swap`` files have their plain names, the old ones are ``.deleted``.

Reaching the end of the pass without stopping prints ``DONE`` (a failure for the test).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

from local import LogConfig, LogManager
from local.log import Log
from local.segment import LogSegment

STEPS = ("writing", "cleaned", "swap", "deleted", "renamed")


def props(data_dir: Path) -> dict[str, str]:
    return {"log.dirs": str(data_dir), "log.segment.bytes": str(2**20), "log.cleaner.min.cleanable.ratio": "0.01",
            "log.segment.delete.delay.ms": "0"}


def _stop(step: str) -> None:
    print(f"STOPPED {step}", flush=True)
    while True:  # the parent's SIGKILL ends this
        signal.pause()


def main(data_dir: Path, step: str) -> None:
    if step not in STEPS:
        raise SystemExit(f"unknown step {step!r}; one of {STEPS}")
    rename = LogSegment.change_file_suffixes
    append = LogSegment.append
    replace = Log.replace_segments

    def renaming(self: LogSegment, old: str, new: str) -> None:
        rename(self, old, new)
        if (step, new) in (("swap", ".swap"), ("deleted", ".deleted")) or (step == "renamed" and old == ".swap"):
            _stop(step)

    def appending(self: LogSegment, *args: Any, **kwargs: Any) -> None:
        append(self, *args, **kwargs)
        if step == "writing" and self.has_suffix(".cleaned"):
            _stop(step)

    def replacing(self: Log, *args: Any, **kwargs: Any) -> None:
        if step == "cleaned":
            _stop(step)
        replace(self, *args, **kwargs)

    LogSegment.change_file_suffixes = renaming  # type: ignore[method-assign]
    LogSegment.append = appending  # type: ignore[method-assign]
    Log.replace_segments = replacing  # type: ignore[method-assign]
    with LogManager(LogConfig.from_properties(props(data_dir)), start_scheduler=False) as manager:
        assert manager.cleaner is not None
        manager.cleaner.clean_pass()
    print("DONE", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
