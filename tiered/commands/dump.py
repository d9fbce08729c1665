"""``tiered dump FILE...``: Kafka's DumpLogSegments for .log/.index/.timeindex/.txnindex/.snapshot/checkpoints.

A remote segment's ``.rsm-manifest`` is listed; its stored ``.log``/``.indexes`` (manifest beside it) is decoded and
dumped, decrypted with the key ring of ``--config`` (``rsm.config.encryption.key.pairs...``) when encrypted."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tiered.commands._common import UsageError, non_negative_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE")
    parser.add_argument("--deep-iteration", "--deep", "--print-data-log", dest="deep", action="store_true",
                        help="print every record, not only batches")
    parser.add_argument("--verify-index-only", "--verify", dest="verify", action="store_true",
                        help="check that every offset index entry points at the start of a batch holding it")
    parser.add_argument("--max-batches", type=non_negative_int, help="stop after this many batches of a .log")
    parser.add_argument("--json", action="store_true", help="one JSON document per file")


def _key_provider(args: argparse.Namespace) -> object:
    """The key ring (or key provider class) of ``--config``'s ``rsm.config.encryption.*`` settings, or None."""
    if not getattr(args, "config", None):
        return None
    from local.properties import read_properties
    from tiered.format.keyring import RsaKeyRing, load_key_provider
    from tiered.format.settings import format_settings
    from tiered.options import PREFIX, Options

    props = read_properties(args.config)
    settings = format_settings(Options({k[len(PREFIX):]: v for k, v in props.items() if k.startswith(PREFIX)}))
    return load_key_provider(settings) if settings.key_provider_class else RsaKeyRing.from_settings(settings)


def run(args: argparse.Namespace) -> int:
    from tiered.dump_log_segments import dump

    provider = _key_provider(args)
    failed = False
    for path in args.files:
        if not path.exists() or path.is_dir():
            print(f"tiered dump: {path}: {'a directory, not a file' if path.exists() else 'no such file'}",
                  file=sys.stderr)
            failed = True
            continue
        try:
            result = dump(path, deep=args.deep, verify=args.verify, max_batches=args.max_batches, key_provider=provider)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        if args.json:
            print(json.dumps({"file": result.file, "type": result.kind, "items": result.items, "problems": result.problems}))
        else:
            print(f"Dumping {result.file}")
            for item in result.items:
                records = item.pop("records", None)
                print(" ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in item.items()))
                for r in records or []:
                    print("| " + " ".join(f"{k}: {v}" for k, v in r.items()))
            for problem in result.problems:
                print(f"ERROR: {problem}")
            if args.verify:  # a verdict a reader of the text output need not infer from the absence of ERROR lines
                verdict = f"{len(result.problems)} problem(s)" if result.problems else "no problems"
                print(f"Verified {result.file}: {verdict}")
        failed |= bool(result.problems)
    return 1 if failed else 0
