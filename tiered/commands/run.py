"""``tiered run``: a LogManager with its background work running and an HTTP endpoint, until stopped.

Retention, flushing and checkpoints run on the log manager's scheduler; with the remote tier enabled, the
manager also starts the remote tier's own copy and expiration tasks (per partition, every
``remote.log.manager.task.interval.ms``: the same tasks a library user's LogManager runs, and the ones
``tiered offload`` runs once). On a terminal a progress bar shows the copy backlog (Kafka's
RemoteCopyLagSegments), and each change in what the tasks copied or deleted is printed on stderr. What the tasks did
is recorded for ``tiered status`` every task interval and at the stop, as ``tiered offload`` records its pass
(:mod:`tiered.pass_report`).

The endpoint (:mod:`tiered.http_server`: ``/metrics``, produce and consume on
``/topics/<t>/partitions/<p>/records``, ``/health``) listens on ``--listen HOST:PORT`` or the broker key
``tiered.http.listen`` (default ``127.0.0.1:8080``; port 0 picks a free one). Once it listens, the first line on
stdout is ``listening on http://HOST:PORT`` (the port actually bound), so a script can wait for it. Before that, and
before any data dir is opened, the remote store is asked once (:func:`tiered.commands._remote.check_remote_access`):
an unreachable endpoint, a missing bucket or rejected credentials end the command in one line (exit 1).

With ``--kafka-listen HOST:PORT`` it also serves Kafka's wire protocol (:mod:`tiered.kafka`); that listener binds
before the HTTP one prints, and its line ``kafka listening on HOST:PORT`` comes first on stdout.

Stopping: SIGINT (Ctrl-C) or SIGTERM, or the end of ``--duration``. The endpoint stops taking requests, each copy
task finishes the segment it is copying and copies no more (a copy the remote store fails is rolled back as
always), the logs are closed cleanly (checkpoints, clean-shutdown marker), and the command exits 0. If that takes
longer than ``--stop-timeout`` seconds (default 30) it exits 1 without the clean-shutdown marker: the next start
recovers the logs, and its first remote pass deletes the copy that was cut short. A second signal does the same
at once.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiered.commands._common import UsageError, load_config, non_negative_seconds

if TYPE_CHECKING:
    from local.manager import LogManager
    from tiered.remote_log_manager import RemoteLogManager

logger = logging.getLogger(__name__)
_REPORT_INTERVAL_S = 1.0
DEFAULT_STOP_TIMEOUT_S = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=non_negative_seconds, metavar="SECONDS",
                        help="stop after this many seconds, >= 0 (default: until signalled)")
    parser.add_argument(
        "--listen", metavar="HOST:PORT",
        help="where the HTTP endpoint listens (default: tiered.http.listen, 127.0.0.1:8080; port 0 picks a free one)",
    )
    parser.add_argument(
        "--kafka-listen", metavar="HOST:PORT",
        help="also serve Kafka clients here (the Kafka protocol: docs/kafka-protocol.md; off by default; port 0 "
             "picks a free one; e.g. 127.0.0.1:9092)",
    )
    parser.add_argument(
        "--stop-timeout", type=non_negative_seconds, default=DEFAULT_STOP_TIMEOUT_S, metavar="SECONDS",
        help=f"how long a stop may wait for the copies in progress (default: {DEFAULT_STOP_TIMEOUT_S:g})",
    )


MMAP_THRESHOLD_BYTES = 256 * 1024
"""Buffers of at least this size get a mapping of their own from glibc, unmapped when they are freed."""


def give_back_large_buffers(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` (``mallopt(M_MMAP_THRESHOLD)``), so that the large buffers a
    long-running server frees go back to the system: True when set.

    glibc maps an allocation of 128 KiB or more on its own and unmaps it when it is freed, but raises that threshold
    (up to 32 MiB) every time such a buffer is freed; from then on buffers of that size come from its arenas, one per
    thread of the I/O pool, which it gives back only from their top. After a burst of fetch answers (40 consumers
    that never read, of a 20 MB partition) ``tiered run`` kept 650 MB of a 1.1 GB peak resident once every client
    had gone; with the threshold fixed, 62 MB. The cost is a mapping and its page faults per large buffer. Nothing
    is done off glibc, or where the operator set ``MALLOC_MMAP_THRESHOLD_`` (glibc's own tunable) themselves."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or sys.platform != "linux":
        return False
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError, ValueError):  # not glibc (musl has no CS_GNU_LIBC_VERSION)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold) == 1)


_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from local.config import parse_host_port
    from local.errors import KafkaStorageError
    from local.metrics import RichLoadProgress
    from tiered.commands._remote import check_remote_access
    from tiered.composition import open_log_manager, remote_log_manager_of
    from tiered.http_server import Endpoint, Server
    from tiered.pass_report import collecting_remote_errors

    if args.stop_timeout is not None and args.stop_timeout <= 0:
        raise UsageError("--stop-timeout must be > 0")
    config = load_config(args)
    give_back_large_buffers()
    listen = args.listen if args.listen is not None else config.tiered_http_listen  # (an empty --listen is an error)
    try:
        host, port = parse_host_port(listen)
    except ValueError as exc:
        raise UsageError(f"invalid --listen {listen!r}: {exc}") from None
    kafka_address = None
    if args.kafka_listen is not None:
        try:
            kafka_address = parse_host_port(args.kafka_listen)
        except ValueError as exc:
            raise UsageError(f"invalid --kafka-listen {args.kafka_listen!r}: {exc}") from None
    # As offload and consume do, before any data dir is created or locked: a store that cannot be reached fails here
    # in one line, not later in every scheduled pass of a process that looks healthy.
    check_remote_access(config)
    stop = threading.Event()
    signals = _install_signal_handlers(stop)
    console = Console(stderr=True)
    with collecting_remote_errors() as errors:  # from the tasks' first run on
        with RichLoadProgress(console=console):  # startup of a large dir draws a progress bar on a terminal
            manager = open_log_manager(config, start_scheduler=False)  # started below, after the claims are set up
        if not manager.live_dirs:
            # Kafka halts a broker whose every log dir failed: serving nothing, with a process that looks healthy, is
            # worse than an exit a service manager sees.
            why = "; ".join(f"{d}: {reason}" for d, reason in manager.offline_dirs.items())
            manager.close()
            raise KafkaStorageError(f"every data dir is offline, nothing to serve ({why})")
        rlm = remote_log_manager_of(manager)
        if rlm is not None:  # a new owner epoch for each partition it owns, before its reads and writes (tiered.ownership)
            _renew_ownership(rlm, manager.all_logs())
        # The scheduler, and the remote tier's copy and expiration tasks with it: each partition's wait for its claim
        # (above), as its reads and writes do; started before the claims were set up, a first copy ran under the old
        # claim and was refused at its end.
        manager.startup()
        try:
            endpoint = Endpoint(manager, claim_waiters=max(1, config.tiered_http_max_connections // 2))
            server = Server(endpoint, host, port, max_connections=config.tiered_http_max_connections,
                            idle_timeout_s=config.tiered_http_idle_timeout_ms / 1000)
        except OSError as exc:
            manager.close()
            raise UsageError(f"cannot listen on {listen}: {exc.strerror or exc}; pass --listen HOST:PORT "
                             "(port 0 picks a free one)") from None
        kafka = None
        if kafka_address is not None:
            from tiered.kafka import start_listener

            try:
                kafka = start_listener(manager, config, *kafka_address)
            except OSError as exc:
                server.server_close()
                manager.close()
                raise UsageError(f"cannot listen on {args.kafka_listen}: {exc.strerror or exc}; pass --kafka-listen "
                                 "HOST:PORT (port 0 picks a free one)") from None
        passes = _PassRecorder.of(manager, errors)
        server.start()
        if kafka is not None:
            print(f"kafka listening on {kafka.address}", flush=True)
        print(f"listening on {server.url}", flush=True)
        deadline = None if args.duration is None else time.monotonic() + args.duration
        try:
            _watch(manager, console, stop, deadline, passes)
        except KeyboardInterrupt:
            pass
        return _stop(manager, server, console, signals, args.stop_timeout, passes, kafka)


RENEW_WAIT_S = 15.0  # how long the start holds a partition's reads and writes for its claim at a new owner epoch


def _renew_ownership(rlm: Any, logs: list[Any]) -> None:
    """The start's claims at new owner epochs (:meth:`RemoteLogManager.renew_ownership_behind`), made behind the
    endpoints: each partition is served once its claim is settled, or after RENEW_WAIT_S (a store that hangs after
    the start probe delays a partition that long, not by its timeouts; its claim goes on behind)."""
    renewing = rlm.renew_ownership_behind(logs, RENEW_WAIT_S)

    def warn_when_late() -> None:
        renewing.join(RENEW_WAIT_S)
        if renewing.is_alive():
            logger.warning("the claims at new owner epochs still wait for the remote store after %.0f s: serving "
                           "their partitions meanwhile", RENEW_WAIT_S)

    threading.Thread(target=warn_when_late, name="remote-log-claims-watch", daemon=True).start()


class _PassRecorder:
    """Records the scheduled tasks' remote passes for ``tiered status``, as ``tiered offload`` records its one
    (:func:`tiered.pass_report.record_pass`): every ``remote.log.manager.task.interval.ms``, what the tasks did and
    what the remote tier logged since the previous record."""

    def __init__(self, rlm: RemoteLogManager, data_dirs: list[Path], errors: list[str]) -> None:
        self._rlm = rlm
        self._data_dirs = data_dirs
        self._errors = errors
        self._interval_s = rlm.task_interval_ms / 1000
        self._recorded = rlm.task_totals_now()
        self._due = time.monotonic() + self._interval_s

    @classmethod
    def of(cls, manager: LogManager, errors: list[str]) -> _PassRecorder | None:
        """The recorder of ``manager``'s remote tier; None without one (no pass to record)."""
        from tiered.composition import remote_log_manager_of

        rlm = remote_log_manager_of(manager)
        return None if rlm is None else cls(rlm, manager.live_dirs, errors)

    def record_when_due(self) -> None:
        if time.monotonic() >= self._due:
            self.record()

    def record(self) -> None:
        from tiered.pass_report import record_pass, take_errors

        totals = self._rlm.task_totals_now()
        record_pass(self._data_dirs, totals.since(self._recorded), take_errors(self._errors))
        self._recorded = totals
        self._due = time.monotonic() + self._interval_s

    def record_last(self) -> None:
        """Stop the tasks, which waits for the copies in flight (the manager's close would too, once the data dirs
        are about to be unlocked: too late to record them), and record what they did since the previous record."""
        self._rlm.stop_tasks()
        self.record()


def _install_signal_handlers(stop: threading.Event) -> dict[int, Any]:
    """SIGINT and SIGTERM set ``stop``; a second one while stopping ends the process at once (exit 1). The handlers
    they had, put back by :func:`_stop` (``main(["run", ...])`` called in a process that goes on)."""

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            print(f"tiered run: {signal.Signals(signum).name} again: exiting without waiting", file=sys.stderr, flush=True)
            os._exit(1)
        stop.set()

    return {signum: signal.signal(signum, handler) for signum in (signal.SIGTERM, signal.SIGINT)}


def _watch(
    manager: Any, console: Any, stop: threading.Event, deadline: float | None, passes: _PassRecorder | None
) -> None:
    """Report the remote tier's progress, and record its passes, until ``stop`` is set or ``deadline`` passes."""
    from rich.progress import Progress

    from tiered.composition import remote_log_manager_of
    from tiered.rlm_tasks import local_copy_lag

    rlm = remote_log_manager_of(manager)
    with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("copying to the remote tier", total=None)
        reported = (0, 0)
        while not stop.is_set():
            totals = getattr(rlm, "task_totals", None)
            if rlm is not None and totals is not None:
                # The backlog (the bar's, drawn on a terminal only) as this data dir knows it, asking the store
                # nothing: read from the store, a partition's metadata not loaded yet was loaded here too, beside the
                # start's claim loading it, and each event object was read twice at every start (a helper's trace).
                backlog = sum(local_copy_lag(log, rlm.known_copied_to(log))[0] for log in manager.all_logs()
                              if log.config.remote_storage_enable) if console.is_terminal else 0
                copied, deleted = totals.segments_copied, totals.segments_deleted
                progress.update(task, total=copied + backlog, completed=copied)
                if (copied, deleted) != reported:
                    console.print(f"copied {copied}, deleted {deleted} remote segment(s) so far")
                    reported = (copied, deleted)
            if passes is not None:
                passes.record_when_due()
            wait = _REPORT_INTERVAL_S if deadline is None else min(_REPORT_INTERVAL_S, deadline - time.monotonic())
            if wait <= 0 or stop.wait(wait):
                return


def _stop(
    manager: Any, server: Any, console: Any, signals: dict[int, Any], timeout: float, passes: _PassRecorder | None,
    kafka: Any = None,
) -> int:
    """Stop taking requests, let each copy task end after its segment, close the manager within ``timeout``. The
    last pass (up to the copies that were in flight) is recorded before the data dirs are unlocked."""
    server.stop()
    if kafka is not None:
        kafka.stop()
    rlm = manager.remote_tier
    if rlm is not None and hasattr(rlm, "request_stop"):
        rlm.request_stop()
    console.print(f"stopping: finishing the segment copies in progress (at most {timeout:g} s)")
    failure: list[BaseException] = []

    def close() -> None:
        try:
            try:
                if passes is not None:
                    passes.record_last()
            finally:
                manager.close()
        except BaseException as exc:
            failure.append(exc)

    closer = threading.Thread(target=close, name="tiered-run-close", daemon=True)
    closer.start()
    closer.join(timeout)
    if closer.is_alive():
        print(f"tiered run: the copies in progress did not finish within {timeout:g} s (--stop-timeout): exiting "
              "without a clean shutdown; the next start recovers the logs and deletes the unfinished copy",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)
    for signum, previous in signals.items():
        signal.signal(signum, signal.SIG_DFL if previous is None else previous)  # (None: set outside Python)
    if failure:
        raise failure[0]
    console.print("stopped")
    return 0
