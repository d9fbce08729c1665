"""``tiered features describe|upgrade``: the finalized feature levels of the data dirs (KIP-1333 gate)."""

from __future__ import annotations

import argparse
import json
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


def run(args: argparse.Namespace) -> int:
    from local.errors import ConfigError, FeatureDowngradeError
    from local.features import finalize, read_features

    if args.action == "upgrade" and args.release_version is None:
        # as Kafka's kafka-features: a default would finalize a level the operator never named, irreversibly
        raise UsageError("'features upgrade' needs --release-version VERSION (e.g. 4.4); finalizing cannot be undone")
    dirs = _dirs(args)
    if args.action == "upgrade":
        try:
            levels = finalize(dirs, args.release_version)
        except FeatureDowngradeError as exc:
            print(f"tiered features: {exc}", file=sys.stderr)
            return 1
        except ConfigError as exc:
            raise UsageError(str(exc)) from exc
    else:
        missing = [str(d) for d in dirs if not d.is_dir()]
        if missing:
            raise UsageError(f"no such data dir: {', '.join(missing)}")
        levels = [read_features(d) for d in dirs]
    if args.json:
        print(json.dumps([{"data_dir": str(f.data_dir), "release_version": f.release_version,
                           "large_index_level": f.large_index_level} for f in levels]))
    else:
        for f in levels:
            state = "finalized" if f.large_index_finalized else "not finalized"
            print(f"{f.data_dir}: release {f.release_version}, large index (KIP-1333) {state} (level {f.large_index_level})")
    return 0
