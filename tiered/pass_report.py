"""The last remote pass of a data dir, kept in ``<data_dir>/tiered-remote-pass.json`` for ``tiered status``.

Whoever runs a pass of the remote copy and expiration tasks records what it did with :func:`record_pass`: ``tiered
offload`` after its one pass, ``tiered run`` every ``remote.log.manager.task.interval.ms`` (what its scheduled tasks
did since the previous record) and once more when it stops. A report holds when the pass finished (ms since the
epoch), segments and bytes copied, remote segments deleted, copy errors, and the first lines of the warnings and
errors the remote tier logged during it. The file is replaced whole (temp file and rename); a missing or unreadable
one reads as None.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PASS_REPORT_FILENAME = "tiered-remote-pass.json"
MAX_ERRORS = 20  # messages kept per pass
_NOT_THE_PASS = ("tiered.http_server",)  # `tiered run`'s endpoint logs its clients' failed requests, not the pass's

logger = logging.getLogger(__name__)


def write_pass_report(data_dir: str | os.PathLike[str], result: Any, errors: list[str],
                      finished_ms: int | None = None) -> Path:
    """Record ``result`` (a :class:`tiered.remote_log_manager.PassResult`) and ``errors`` as the dir's last pass."""
    report = {
        "version": 0,
        "finished_ms": int(time.time() * 1000) if finished_ms is None else finished_ms,
        "segments_copied": result.segments_copied,
        "bytes_copied": result.bytes_copied,
        "segments_deleted": result.segments_deleted,
        "copy_errors": result.copy_errors,
        "errors": errors[:MAX_ERRORS],
    }
    target = Path(data_dir) / PASS_REPORT_FILENAME
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, target)
    return target


def record_pass(data_dirs: Iterable[str | os.PathLike[str]], result: Any, errors: list[str]) -> None:
    """Record one pass in every data dir of the process that made it. A dir that cannot be written is logged, not
    raised: the pass itself is done."""
    for data_dir in data_dirs:
        try:
            write_pass_report(data_dir, result, errors)
        except OSError as exc:
            logger.warning("cannot record the remote pass in %s: %s", data_dir, exc)


def take_errors(errors: list[str]) -> list[str]:
    """The messages :func:`collecting_remote_errors` gathered so far, removed from ``errors`` so that the next pass
    of a long-running process starts empty (one appended meanwhile stays for that pass)."""
    taken = errors[:]
    del errors[:len(taken)]
    return taken


def read_pass_report(data_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    path = Path(data_dir) / PASS_REPORT_FILENAME
    try:
        report = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        logger.warning("ignoring unreadable remote pass report %s: %s", path, exc)
        return None
    return report if isinstance(report, dict) else None


class _Collector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(_NOT_THE_PASS):
            return
        if len(self.messages) < MAX_ERRORS:
            text = " ".join(record.getMessage().split())
            self.messages.append(f"{record.levelname} {text}")


@contextmanager
def collecting_remote_errors() -> Iterator[list[str]]:
    """The warnings and errors the remote tier (logger ``tiered``) logs inside the block, one line each."""
    collector = _Collector()
    root = logging.getLogger("tiered")
    root.addHandler(collector)
    try:
        yield collector.messages
    finally:
        root.removeHandler(collector)
