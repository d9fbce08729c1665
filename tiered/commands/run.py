"""``tiered run``: keep the log manager's background work and the remote tasks going until interrupted.

Retention, flushing and checkpoints run on the log manager's scheduler; a copy + expiration pass runs every
``remote.log.manager.task.interval.ms``. On a terminal a progress bar shows the copy backlog.
"""

from __future__ import annotations

import argparse
import signal
import threading
import time

from tiered.commands._common import add_config_arguments, load_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--duration", type=float, help="stop after this many seconds (default: until interrupted)")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from local import LogManager

    config = load_config(args)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    console = Console(stderr=True)
    deadline = None if args.duration is None else time.monotonic() + args.duration
    from local.metrics import RichLoadProgress

    with RichLoadProgress(console=console):  # startup of a large dir draws a progress bar on a terminal
        manager = LogManager(config)
    with manager:
        rlm = manager.remote_tier
        interval = config.remote_log_manager_task_interval_ms / 1000
        with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
            task = progress.add_task("copying to the remote tier", total=None)
            try:
                while not stop.is_set():
                    if rlm is not None:
                        backlog = sum(len(rlm.candidate_segments(log)) for log in manager.all_logs()
                                      if getattr(log.config, "remote_storage_enable", False))
                        progress.update(task, total=backlog, completed=0)
                        result = rlm.run_once(manager.all_logs())
                        progress.update(task, completed=result.segments_copied)
                        if result.segments_copied or result.segments_deleted:
                            console.print(f"copied {result.segments_copied}, deleted {result.segments_deleted} remote segment(s)")
                    wait = interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic()))
                    if stop.wait(wait) or (deadline is not None and time.monotonic() >= deadline):
                        break
            except KeyboardInterrupt:
                pass
    return 0
