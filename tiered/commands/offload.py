"""``tiered offload``: one run of each partition's remote copy and expiration tasks (the tasks a LogManager with the
remote tier enabled schedules every ``remote.log.manager.task.interval.ms``), then one local retention pass."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from tiered.commands._common import UsageError, load_config

if TYPE_CHECKING:
    from local.manager import LogManager
    from tiered.remote_log_manager import PassResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options of its own: ``--config``, ``--log-dirs`` and ``-o`` are the global ones."""


def offload_once(manager: LogManager) -> tuple[PassResult, int]:
    from tiered.composition import remote_log_manager_of

    rlm = remote_log_manager_of(manager)
    if rlm is None:
        raise UsageError("the remote tier is not enabled: set remote.log.storage.system.enable=true")
    result = rlm.run_once(manager.all_logs())
    deleted = manager.cleanup_logs()
    return result, deleted


def run(args: argparse.Namespace) -> int:
    from tiered.composition import open_log_manager

    config = load_config(args)
    # Validate before opening anything: a command that cannot run writes nothing.
    if not config.remote_log_storage_system_enable:
        raise UsageError(
            "the remote tier is not enabled: set remote.log.storage.system.enable=true and "
            "remote.log.storage.manager.class.name in the broker config (--config FILE)"
        )
    with open_log_manager(config, start_scheduler=False) as manager:
        result, deleted = offload_once(manager)
    print(
        f"copied {result.segments_copied} segment(s) ({result.bytes_copied:,} bytes), deleted "
        f"{result.segments_deleted} remote segment(s), local retention deleted {deleted} segment(s)"
    )
    if result.copy_errors:
        print(f"tiered offload: {result.copy_errors} copy error(s); see the log (-v)", file=sys.stderr)
        return 1
    return 0
