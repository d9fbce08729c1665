"""``tiered offload``: one run of each partition's remote copy and expiration tasks (the tasks a LogManager with the
remote tier enabled schedules every ``remote.log.manager.task.interval.ms``), then one local retention pass."""

from __future__ import annotations

import argparse
import sys

from tiered.commands._common import UsageError, load_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options of its own: ``--config``, ``--log-dirs`` and ``-o`` are the global ones."""


def offload_once(manager: object) -> tuple[object, int]:
    rlm = getattr(manager, "remote_tier", None)
    if rlm is None:
        raise UsageError("the remote tier is not enabled: set remote.log.storage.system.enable=true")
    result = rlm.run_once(manager.all_logs())  # type: ignore[attr-defined]
    deleted = manager.cleanup_logs()  # type: ignore[attr-defined]
    return result, deleted


def run(args: argparse.Namespace) -> int:
    from local import LogManager

    config = load_config(args)
    # Validate before opening anything: a command that cannot run writes nothing.
    if not config.remote_log_storage_system_enable:
        raise UsageError(
            "the remote tier is not enabled: set remote.log.storage.system.enable=true and "
            "remote.log.storage.manager.class.name in the broker config (--config FILE)"
        )
    with LogManager(config, start_scheduler=False) as manager:
        result, deleted = offload_once(manager)
    print(
        f"copied {result.segments_copied} segment(s) ({result.bytes_copied:,} bytes), deleted "  # type: ignore[attr-defined]
        f"{result.segments_deleted} remote segment(s), local retention deleted {deleted} segment(s)"  # type: ignore[attr-defined]
    )
    if result.copy_errors:  # type: ignore[attr-defined]
        print(f"tiered offload: {result.copy_errors} copy error(s); see the log (-v)", file=sys.stderr)  # type: ignore[attr-defined]
        return 1
    return 0
