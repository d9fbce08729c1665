"""``tiered offload``: one run of each partition's remote copy and expiration tasks (the tasks a LogManager with the
remote tier enabled schedules every ``remote.log.manager.task.interval.ms``), then one local retention pass.

Only partitions whose topic has ``remote.storage.enable=true`` are copied: the others are named on stderr with how
to enable it (``tiered topics alter --topic T --add-config remote.storage.enable=true``). The store is asked once
before anything opens (an unreachable endpoint, a missing bucket or rejected credentials fail in seconds). What the
pass did, with the warnings and errors the remote tier logged, is recorded in each data dir for ``tiered status``
(:mod:`tiered.pass_report`). A partition whose remote data this data dir does not own (another took it with ``tiered
attach``), or that the configured store lacks (a wrong bucket or prefix), is named in one line and makes the exit
code 1 (:mod:`tiered.ownership`)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tiered.commands._common import UsageError, load_config

if TYPE_CHECKING:
    from local.log import Log
    from local.manager import LogManager
    from tiered.remote_log_manager import PassResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--roll", action="store_true",
        help="first roll the active segment of each tiered partition that has records in it, so that this pass "
             "copies every record up to the log end (before handing the partitions to another machine: a segment "
             "rolls by itself only at an append, and the active segment is never copied)")


def roll_active_segments(logs: Iterable[Log]) -> int:
    """Roll the active segment of each tiered partition of ``logs`` that holds records (``--roll``): the number
    rolled."""
    from tiered.rlm_tasks import tiering_enabled

    rolled = 0
    for log in logs:
        if tiering_enabled(log) and log.active_segment.size > 0:
            log.roll()
            rolled += 1
    return rolled


def offload_once(manager: LogManager, interruptible: bool = False) -> tuple[PassResult, int]:
    """One remote pass, then local retention. ``interruptible``: the first SIGINT (Ctrl-C) lets each copy task
    finish the segment it is copying and start no other (nothing half-copied is left), and local retention is
    skipped; a second one interrupts at once (the next pass deletes an unfinished copy)."""
    from tiered.composition import remote_log_manager_of

    rlm = remote_log_manager_of(manager)
    if rlm is None:
        raise UsageError("the remote tier is not enabled: set remote.log.storage.system.enable=true")
    if not interruptible:
        return rlm.run_once(manager.all_logs()), manager.cleanup_logs()
    stopping = threading.Event()

    def on_sigint(signum: int, frame: Any) -> None:
        if stopping.is_set():
            raise KeyboardInterrupt
        stopping.set()
        rlm.request_stop()
        print("tiered offload: stopping after the segment copies in progress (Ctrl-C again to stop at once)",
              file=sys.stderr, flush=True)

    previous = {sig: signal.signal(sig, on_sigint) for sig in (signal.SIGINT, signal.SIGTERM)}  # SIGTERM as Ctrl-C
    try:
        result = rlm.run_once(manager.all_logs())
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopping.is_set():
        raise OffloadInterrupted(result)
    return result, manager.cleanup_logs()


class OffloadInterrupted(Exception):
    """The pass was stopped by SIGINT after the copies in flight finished: ``result`` says what it did."""

    def __init__(self, result: PassResult) -> None:
        super().__init__("interrupted")
        self.result = result


def _say_untiered(logs: Iterable[Log]) -> int:
    """Name, on stderr, the topics whose partitions this pass leaves alone for lack of remote.storage.enable=true;
    the number of those that hold remote data all the same (their retention is refused: the exit code says so)."""
    from tiered.internal_topics import HIDDEN_TOPICS, INTERNAL_TOPICS
    from tiered.rlm_tasks import remote_data_to_delete, tiering_enabled

    untiered: dict[str, int] = {}
    compacted: dict[str, int] = {}
    stranded = 0
    for log in logs:
        if not tiering_enabled(log):
            if remote_data_to_delete(log):
                print(f"tiered offload: {log.name}: remote storage was turned off with remote.log.delete.on.disable="
                      "true: this pass gives up its remote data (deleted where this data dir owns it)", file=sys.stderr)
                continue
            stranded += bool(log.has_remote_data)
            if log.topic in INTERNAL_TOPICS | HIDDEN_TOPICS or log.config.remote_log_delete_on_disable:
                continue  # never tiered, as in Kafka, or turned off on purpose: nothing to say
            named = compacted if log.config.compact else untiered
            named[log.topic] = named.get(log.topic, 0) + 1
    for topic, count in sorted(untiered.items()):
        print(f"tiered offload: topic {topic} ({count} partition(s)) is not tiered: it lacks remote.storage.enable=true"
              f"; enable it with: tiered topics alter --topic {topic} --add-config remote.storage.enable=true",
              file=sys.stderr)
    for topic, count in sorted(compacted.items()):
        print(f"tiered offload: topic {topic} ({count} partition(s)) is not tiered: it is compacted (cleanup.policy="
              "compact), and compacted topics are never tiered, as in Kafka", file=sys.stderr)
    return stranded


def run(args: argparse.Namespace) -> int:
    from tiered.composition import open_log_manager

    config = load_config(args)
    # Validate before opening anything: a command that cannot run writes nothing.
    if not config.remote_log_storage_system_enable:
        raise UsageError(
            "the remote tier is not enabled: set remote.log.storage.system.enable=true and "
            "remote.log.storage.manager.class.name in the broker config (--config FILE)"
        )
    from tiered.commands._remote import check_remote_access
    from tiered.pass_report import collecting_remote_errors, record_pass

    check_remote_access(config)
    with open_log_manager(config, start_scheduler=False) as manager:
        stranded = _say_untiered(manager.all_logs())
        if getattr(args, "roll", False):
            rolled = roll_active_segments(manager.all_logs())
            print(f"tiered offload: rolled the active segment of {rolled} partition(s)", file=sys.stderr)
        with collecting_remote_errors() as errors:
            try:
                result, deleted = offload_once(manager, interruptible=True)
            except OffloadInterrupted as stopped:
                result = stopped.result
                print(f"tiered offload: interrupted: copied {result.segments_copied} segment(s) "
                      f"({result.bytes_copied:,} bytes); local retention not run", file=sys.stderr)
                return 130
        record_pass(manager.live_dirs, result, errors)
        not_owned = _ownership_problems(manager)
        offline = dict(manager.offline_dirs)  # (a data dir that failed during the pass: its partitions were not done)
    print(
        f"copied {result.segments_copied} segment(s) ({result.bytes_copied:,} bytes), deleted "
        f"{result.segments_deleted} remote segment(s), local retention deleted {deleted} segment(s)"
        + (f", removed {result.stale_copies_cleaned} unfinished copy(ies) (left by a crash, or by a former owner)"
           if result.stale_copies_cleaned else "")
    )
    for line in not_owned:
        print(f"tiered offload: {line}", file=sys.stderr)
    if result.copy_errors:
        print(f"tiered offload: {result.copy_errors} copy error(s); see the log (-v)", file=sys.stderr)
    if stranded:
        print(f"tiered offload: {stranded} partition(s) hold data in remote storage but are not tiered: their "
              "retention is refused (above)", file=sys.stderr)
    for data_dir, why in offline.items():
        print(f"tiered offload: data dir {data_dir} is offline ({why}): its partitions were not offloaded",
              file=sys.stderr)
    return 1 if result.copy_errors or not_owned or stranded or offline else 0


def _ownership_problems(manager: LogManager) -> list[str]:
    """One line per partition this data dir may not copy to or delete from (:mod:`tiered.ownership`): its remote
    data is owned by another data dir, or the store holds none of it, or the copies made under its claim pass its
    log end (an older copy of the data dir that made them: it cannot claim the partition anew)."""
    from tiered.composition import remote_log_manager_of
    from tiered.ownership import OWNER, behind
    from tiered.remote_tier_parts import topic_id_partition

    rlm = remote_log_manager_of(manager)
    if rlm is None:
        return []
    from tiered.rlm_tasks import remote_tasks_run

    states = rlm.ownership.states()
    logs = {topic_id_partition(log): log for log in manager.all_logs()}
    listing = getattr(rlm.metadata, "list_remote_log_segments", None)
    lines = []
    for tip in sorted(states, key=lambda t: (t.topic, t.partition)):
        found, log = states[tip], logs.get(tip)
        if log is not None and not remote_tasks_run(log):
            continue  # (remote storage turned off and its remote data given up: who owns it is not its concern)
        if found.state != OWNER:
            lines.append(found.detail)
        elif found.owner is not None and log is not None and listing is not None:
            why = behind(log.name, listing(tip), found.owner.lineage, log.log_end_offset)  # (the pass's view)
            if why is not None:
                lines.append(why)
    return lines
