"""``tiered run``: a LogManager with its background work running, until interrupted or ``--duration`` ends.

Retention, flushing and checkpoints run on the log manager's scheduler; with the remote tier enabled, the
manager also starts the remote tier's own copy and expiration tasks (per partition, every
``remote.log.manager.task.interval.ms``: the same tasks a library user's LogManager runs, and the ones
``tiered offload`` runs once). This command only watches them: on a terminal a progress bar shows the copy
backlog (Kafka's RemoteCopyLagSegments), and each change in what the tasks copied or deleted is printed.
"""

from __future__ import annotations

import argparse
import signal
import threading
import time

from tiered.commands._common import load_config

_REPORT_INTERVAL_S = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, help="stop after this many seconds (default: until interrupted)")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from tiered.composition import open_log_manager, remote_log_manager_of

    config = load_config(args)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    console = Console(stderr=True)
    deadline = None if args.duration is None else time.monotonic() + args.duration
    from local.metrics import RichLoadProgress

    with RichLoadProgress(console=console):  # startup of a large dir draws a progress bar on a terminal
        manager = open_log_manager(config)  # starts the scheduler, and the remote tier's tasks with it
    with manager:
        rlm = remote_log_manager_of(manager)
        with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
            task = progress.add_task("copying to the remote tier", total=None)
            reported = (0, 0)
            try:
                while not stop.is_set():
                    if rlm is not None:
                        totals = rlm.task_totals
                        backlog = sum(rlm.copy_lag(log)[0] for log in manager.all_logs()
                                      if getattr(log.config, "remote_storage_enable", False))
                        copied, deleted = totals.segments_copied, totals.segments_deleted
                        progress.update(task, total=copied + backlog, completed=copied)
                        if (copied, deleted) != reported:
                            console.print(f"copied {copied}, deleted {deleted} remote segment(s) so far")
                            reported = (copied, deleted)
                    wait = _REPORT_INTERVAL_S if deadline is None else max(0.0, min(_REPORT_INTERVAL_S, deadline - time.monotonic()))
                    if stop.wait(wait) or (deadline is not None and time.monotonic() >= deadline):
                        break
            except KeyboardInterrupt:
                pass
    return 0
