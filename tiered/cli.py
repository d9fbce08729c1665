"""The ``tiered`` command line.

Each command lives in ``tiered/commands/<name>.py`` with ``add_arguments(parser)`` and ``run(args) -> int`` and is
imported only when it runs, so ``tiered dump`` starts without loading the log engine or the remote tier.
Exit codes: 0 ok, 1 a failure was found, 2 usage.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Any

COMMANDS: dict[str, str] = {
    "quickstart": "produce, offload, read back and dump on an embedded local-directory remote tier",
    "produce": "append records read from stdin to a topic-partition",
    "consume": "print a topic-partition's records, local and remote",
    "dump": "print any .log/.index/.timeindex/.txnindex/.snapshot/checkpoint file (DumpLogSegments)",
    "status": "show data dirs, partitions, offsets and load metrics",
    "offload": "run one pass of the remote copy and expiration tasks",
    "run": "run the log manager and remote tasks until interrupted",
    "verify": "scrub data dirs (and the remote tier with --remote) for damage, changing nothing",
    "features": "describe or finalize feature levels (KIP-1333 large indexes)",
    "export": "export a topic's whole history with Spark",
}


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
    )
    parser.add_argument("--version", action="version", version=f"tiered {_version()}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log to stderr (-vv for debug)")
    parser.add_argument("--config", metavar="FILE", help="broker .properties file (log.dirs, remote.log.*, rsm.config.*)")
    return parser


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``command``'s module is imported to add its arguments."""
    parser = _base_parser()
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            module = _load(name)
            if module is not None:
                module.add_arguments(p)
    return parser


def _load(name: str) -> Any:
    try:
        return importlib.import_module(f"tiered.commands.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"tiered.commands.{name}":
            return None
        raise


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in args_list if a in COMMANDS), None)
    parser = build_parser(command)
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    module = _load(args.command)
    if module is None:
        print(f"tiered {args.command}: not available in this build", file=sys.stderr)
        return 1
    from tiered.commands._common import UsageError

    try:
        return int(module.run(args))
    except UsageError as exc:
        print(f"tiered {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from local.errors import ConfigError, KafkaStorageError

        if isinstance(exc, ConfigError):
            print(f"tiered {args.command}: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, (KafkaStorageError, OSError)):
            print(f"tiered {args.command}: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
