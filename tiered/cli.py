"""The ``tiered`` command line.

Each command lives in ``tiered/commands/<name>.py`` with ``add_arguments(parser)`` and ``run(args) -> int`` and is
imported only when it runs, so ``tiered dump`` starts without loading the log engine or the remote tier.
The global options (``--config``, ``--log-dirs``, ``-o KEY=VALUE``, ``-v``) are accepted before or after the
command. Exit codes: 0 ok, 1 a failure was found, 2 usage, 130 Ctrl-C, 143 SIGTERM (handled as Ctrl-C). Errors are one
line on stderr; ``-v`` adds the traceback of an unexpected one.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from typing import Any

COMMANDS: dict[str, str] = {
    "quickstart": "produce, offload, read back and dump on an embedded local-directory remote tier",
    "produce": "append records read from stdin to a topic-partition",
    "consume": "print a topic-partition's records, local and remote",
    "dump": "print any .log/.index/.timeindex/.txnindex/.snapshot/checkpoint file (DumpLogSegments)",
    "status": "show both tiers per partition (offsets, local and remote segments, copy lag), the last load and remote pass",
    "offload": "run one pass of the remote copy and expiration tasks",
    "run": "run the log manager and remote tasks until interrupted, serving /metrics and HTTP produce/consume",
    "verify": "scrub data dirs (and the remote tier with --remote) for damage, changing nothing",
    "compact": "run one pass of the log cleaner over the compacted topics (cleanup.policy=compact)",
    "features": "describe or finalize feature levels (KIP-1333 large indexes)",
    "topics": "create, describe, alter or list topics and their configs (kafka-topics / kafka-configs)",
    "attach": "adopt a topic's partitions from the remote store alone (a new machine with only the bucket)",
    "export": "export a topic's whole history with Spark",
    "import": "append Parquet or JSON lines written by 'tiered export' to a topic, with Spark",
    "keys": "rotate: re-wrap encrypted remote segments' data keys under another key pair (manifests only)",
}
_MODULES = {"import": "import_"}  # a command whose name is a Python keyword


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("tiered")
    except Exception:
        return "unknown"


def _base_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tiered",
        description="Kafka-compatible log storage with tiered offload.",
        epilog="Run 'tiered COMMAND --help' for a command's options.",
        allow_abbrev=False,  # only the names shown work: a prefix could silently pick another, later option
    )
    parser.add_argument("--version", action="version", version=f"tiered {_version()}")
    _add_global_options(parser, after_command=False)
    return parser


def _add_global_options(parser: argparse.ArgumentParser, *, after_command: bool) -> None:
    """The options every command takes, before or after its name. After it they land in ``*_after`` dests (no
    defaults), merged by :func:`_merge_global_options`, so one given before the command is not reset."""
    suffix, default = ("_after", argparse.SUPPRESS) if after_command else ("", None)
    group = parser.add_argument_group("global options (before or after the command)")
    group.add_argument(
        "--config", metavar="FILE", dest="config" + suffix, default=default,
        help="broker .properties file (log.dirs, remote.log.*, rsm.config.*)",
    )
    group.add_argument(
        "--log-dirs", metavar="DIR[,DIR...]", dest="log_dirs" + suffix, default=default,
        help="comma-separated data dirs (overrides log.dirs from --config)",
    )
    group.add_argument(
        "--override", "-o", action="append", metavar="KEY=VALUE", dest="override" + suffix,
        default=argparse.SUPPRESS if after_command else [],
        help="a broker config override, e.g. -o log.segment.bytes=1048576 (repeatable)",
    )
    group.add_argument(
        "-v", "--verbose", action="count", dest="verbose" + suffix, default=argparse.SUPPRESS if after_command else 0,
        help="log to stderr (-vv for debug); show the traceback of an unexpected error",
    )


def _merge_global_options(args: argparse.Namespace) -> None:
    for name in ("config", "log_dirs"):
        value = getattr(args, name + "_after", None)
        if value is not None:
            setattr(args, name, value)
    args.override = list(args.override or []) + list(getattr(args, "override_after", []) or [])
    args.verbose = int(args.verbose or 0) + int(getattr(args, "verbose_after", 0) or 0)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``command``'s module is imported to add its arguments."""
    parser = _base_parser()
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, allow_abbrev=False)
        _add_global_options(p, after_command=True)
        if name == command:
            module = _load(name)
            if module is not None:
                module.add_arguments(p)
    return parser


def _load(name: str) -> Any:
    try:
        return importlib.import_module(f"tiered.commands.{_MODULES.get(name, name)}")
    except ModuleNotFoundError as exc:
        if exc.name == f"tiered.commands.{_MODULES.get(name, name)}":
            return None
        raise


def subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """The (name, parser) of each subcommand of ``parser``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def parse_args(argv: Sequence[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The parser and the parsed arguments, global options merged from before and after the command."""
    args_list = list(argv)
    command = next((a for a in args_list if a in COMMANDS), None)
    parser = build_parser(command)
    args, unknown = parser.parse_known_args(args_list)
    if unknown:
        # argparse leaves a subcommand's unknown options to the top parser, whose error shows `tiered`'s usage:
        # one given after the command is the command's, so its usage is the one that helps.
        after = args_list[args_list.index(command) + 1:] if command is not None else []
        owner = dict(subparsers(parser))[command] if command is not None and all(a in after for a in unknown) else parser
        owner.error(f"unrecognized arguments: {' '.join(unknown)}")
    _merge_global_options(args)
    return parser, args


class _OneLineFormatter(logging.Formatter):
    """A log record as one line: the library's warnings and errors keep their message, and a traceback attached to
    one (``logger.exception``) is left to ``-v``, as the command's own errors are."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(self.formatMessage(_without_traceback(record)).split())


def _without_traceback(record: logging.LogRecord) -> logging.LogRecord:
    record = logging.makeLogRecord(record.__dict__)
    record.message = record.getMessage()
    record.exc_info = record.exc_text = record.stack_info = None
    return record


OPEN_FILES_CEILING = 1 << 20  # the soft limit is raised at most to this (a hard limit of "unlimited" is not asked for)


def raise_open_files_limit() -> None:
    """Raise this process's soft limit of open files to its hard limit, as the JVM does for Kafka at start
    (``-XX:+MaxFDLimit``, on by default): a log holds a descriptor per segment file and per mapped index, and a
    common soft limit of 1024 runs out at a few hundred partitions, where the hard limit is usually far higher.
    Nothing is raised past the hard limit, and a platform without the call is left as it is."""
    try:
        import resource
    except ImportError:  # (not POSIX)
        return
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = OPEN_FILES_CEILING if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_CEILING)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError):
        pass  # (a sandbox that refuses it: the limit stays; the errors name it where it is reached)


def _terminated(signum: int, frame: object) -> None:
    from tiered.commands._common import Terminated

    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    parser, args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if not args.verbose:
        for handler in logging.getLogger().handlers:
            handler.setFormatter(_OneLineFormatter("%(levelname)s %(name)s: %(message)s"))
    raise_open_files_limit()
    module = _load(args.command)
    if module is None:
        print(f"tiered {args.command}: not available in this build", file=sys.stderr)
        return 1
    # SIGTERM (kill, systemd, `timeout`) as Ctrl-C: the command's cleanups run and it says what it did, where the
    # default action ended it on the spot (a produce said nothing of what it wrote, a quickstart left its temp dir).
    # `tiered run` and `offload` install their own handlers over this one. (Only in the main thread, and put back
    # after: main() also runs inside other programs, the tests among them.)
    import threading

    previous = signal.signal(signal.SIGTERM, _terminated) if threading.current_thread() is threading.main_thread() else None
    try:
        return _run(module, args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run(module: Any, args: argparse.Namespace) -> int:
    """``module.run(args)``, its errors as one line and an exit code."""
    from tiered.commands._common import Terminated, UsageError

    try:
        return int(module.run(args))
    except UsageError as exc:
        print(f"tiered {args.command}: {exc}", file=sys.stderr)
        return 2
    except Terminated:
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`tiered consume ... | head`): stop quietly, as a tool killed by SIGPIPE does.
        # stdout now points at /dev/null so the interpreter's last flush does not complain either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except Exception as exc:
        from local.errors import ConfigError, KafkaStorageError
        from tiered.errors import TieredStorageError

        if isinstance(exc, ConfigError):
            print(f"tiered {args.command}: {_one_line(exc)}", file=sys.stderr)
            if args.verbose:
                logging.getLogger("tiered.cli").exception("traceback")
            return 2
        if isinstance(exc, (KafkaStorageError, TieredStorageError, OSError)):
            print(f"tiered {args.command}: {_one_line(exc)}", file=sys.stderr)
            if args.verbose:
                logging.getLogger("tiered.cli").exception("traceback")
            return 1
        if args.verbose:
            raise
        print(
            f"tiered {args.command}: unexpected error: {type(exc).__name__}: {_one_line(exc)} "
            "(run with -v for the traceback)",
            file=sys.stderr,
        )
        return 1


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
