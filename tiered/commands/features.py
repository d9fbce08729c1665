"""``tiered features describe|upgrade``: the finalized feature levels of the data dirs (KIP-1333 gate)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

from tiered.commands._common import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["describe", "upgrade"])
    parser.add_argument("--release-version", metavar="VERSION",
                        help="upgrade: the release to finalize, e.g. 4.4 (required: finalizing cannot be undone)")
    parser.add_argument("--json", action="store_true")


def _dirs(args: argparse.Namespace) -> list[Path]:
    if args.log_dirs:
        return [Path(p.strip()) for p in args.log_dirs.split(",") if p.strip()]
    if args.config:
        from local.config import read_properties

        props = read_properties(args.config)
        dirs = props.get("log.dirs", props.get("log.dir", ""))
        return [Path(p.strip()) for p in dirs.split(",") if p.strip()]
    raise UsageError("pass --log-dirs DIR[,DIR...] or --config FILE")


def _lock(data_dir: Path) -> int | None:
    """The data dir's lock (``.lock``, as :class:`local.manager.LogManager` takes it): its descriptor, None when
    another process holds it."""
    import fcntl

    from local.manager import LOCK_FILENAME

    fd = os.open(data_dir / LOCK_FILENAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def run(args: argparse.Namespace) -> int:
    from local.errors import ConfigError, FeatureDowngradeError
    from local.features import finalize, read_features

    if args.action == "upgrade" and args.release_version is None:
        # as Kafka's kafka-features: a default would finalize a level the operator never named, irreversibly
        raise UsageError("'features upgrade' needs --release-version VERSION (e.g. 4.4); finalizing cannot be undone")
    dirs = _dirs(args)
    if not dirs:
        raise UsageError("the data dir list names no data dir")
    missing = [str(d) for d in dirs if not d.is_dir()]
    if missing:  # (an upgrade must not make a data dir out of a typo, and finalize it)
        raise UsageError(f"no such data dir: {', '.join(missing)}")
    if args.action == "upgrade":
        with contextlib.ExitStack() as locks:
            for d in dirs:  # as every writer: not while tiered run (or another command) has the data dir open
                held = _lock(d)
                if held is None:
                    print(f"tiered features: data dir {d} is locked by another process (its .lock is held): stop it "
                          "first (a running broker would keep its old feature levels)", file=sys.stderr)
                    return 1
                locks.callback(os.close, held)
            try:
                levels = finalize(dirs, args.release_version)
            except FeatureDowngradeError as exc:
                print(f"tiered features: {exc}", file=sys.stderr)
                return 1
            except ConfigError as exc:
                raise UsageError(str(exc)) from exc
    else:
        levels = [read_features(d) for d in dirs]
    if args.json:
        print(json.dumps([{"data_dir": str(f.data_dir), "release_version": f.release_version,
                           "large_index_level": f.large_index_level} for f in levels]))
    else:
        for f in levels:
            state = "finalized" if f.large_index_finalized else "not finalized"
            print(f"{f.data_dir}: release {f.release_version}, large index (KIP-1333) {state} (level {f.large_index_level})")
    return 0
