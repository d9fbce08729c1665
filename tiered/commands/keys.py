"""``tiered keys rotate --new-key-pair-id ID``: re-wrap every encrypted remote segment's data key under key pair ID.

Only the segment manifests (``*.rsm-manifest``, see ``docs/remote-format.md``) are rewritten: each one's data key
is unwrapped with the key pair it names and wrapped again under ``ID``; the chunks themselves are never read or
written. ``ID`` and every key pair the segments are wrapped under must be in ``rsm.config.encryption.key.pairs``
(``--config``). Segments already under ``ID`` and segments not encrypted are left alone, so a rerun after an
interruption finishes the job. Afterwards the old key pairs can leave the ring. Exit 0 when every manifest is
done, 1 when some could not be rewritten (each named on stderr), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tiered.commands._common import UsageError, load_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["rotate"], help="rotate: re-wrap data keys under --new-key-pair-id")
    parser.add_argument("--new-key-pair-id", required=True, metavar="ID",
                        help="the key pair (one of rsm.config.encryption.key.pairs) to wrap every data key under")
    parser.add_argument("--dry-run", action="store_true", help="list what would be rewritten, change nothing")


def run(args: argparse.Namespace) -> int:
    from tiered.backends import load_rsm
    from tiered.backends.composed import ObjectStoreRemoteStorageManager
    from tiered.errors import TieredStorageError
    from tiered.format import SegmentManifest
    from tiered.format.manifest import MANIFEST_SUFFIX

    config = load_config(args)
    if not config.remote_log_storage_system_enable:
        raise UsageError("keys rotate needs the remote tier's configuration: remote.log.storage.system.enable=true, "
                         "remote.log.storage.manager.class.name and rsm.config.* (pass --config FILE)")
    rsm = load_rsm(config.remote_log_storage_manager_class_name, dict(config.rsm_config))
    try:
        if not isinstance(rsm, ObjectStoreRemoteStorageManager):  # the format's settings and key ring are its own
            raise UsageError(f"{type(rsm).__qualname__} does not store segments in the segment format (it is not an "
                             "object store's RemoteStorageManager): its segments' keys cannot be rotated")
        store = rsm.store
        store.check_access()
        provider = rsm.key_provider
        new_id = args.new_key_pair_id
        if provider is None:
            raise UsageError("no key ring configured: set rsm.config.encryption.key.pairs (with the new key pair and "
                             "the ones the segments are wrapped under)")
        _check_new_key(provider, new_id)
        counts = {"rewrapped": 0, "already": 0, "plain": 0, "failed": 0}
        keys = sorted(k for k in store.list(f"{rsm.prefix}/" if rsm.prefix else "") if k.endswith(MANIFEST_SUFFIX))
        for key in keys:
            try:
                manifest = SegmentManifest.decode(store.get(key))
                env = manifest.envelope
                if env is None:
                    counts["plain"] += 1
                    continue
                if env.key_id == new_id:
                    counts["already"] += 1
                    continue
                if not args.dry_run:
                    _rewrap(store, provider, key, manifest, new_id)
                counts["rewrapped"] += 1
            except (TieredStorageError, ValueError, OSError) as exc:
                counts["failed"] += 1
                print(f"tiered keys: {key}: {exc}", file=sys.stderr)
        verb = "would re-wrap" if args.dry_run else "re-wrapped"
        print(f"{verb} {counts['rewrapped']} segment data key(s) under key pair {new_id}; {counts['already']} already "
              f"under it, {counts['plain']} segment(s) not encrypted, {counts['failed']} failed "
              f"({len(keys)} manifest(s))")
        if rsm.format.key_pair_id != new_id:
            print(f"note: new segments are still wrapped under rsm.config.encryption.key.pair.id="
                  f"{rsm.format.key_pair_id}: set it to {new_id}", file=sys.stderr)
        return 1 if counts["failed"] else 0
    finally:
        rsm.close()


def _check_new_key(provider: Any, new_id: str) -> None:
    from tiered.errors import EncryptionKeyNotFoundError

    try:
        provider.wrap(bytes(32), new_id)
    except EncryptionKeyNotFoundError as exc:
        raise UsageError(f"--new-key-pair-id {new_id}: {exc}") from None


def _rewrap(store: Any, provider: Any, key: str, manifest: Any, new_id: str) -> None:
    """Rewrite one manifest with its data key wrapped under ``new_id``; checked to unwrap back before it is written."""
    from tiered.errors import RemoteStorageError
    from tiered.format import Envelope

    env = manifest.envelope
    data_key = provider.unwrap(env.key_id, env.key_wrap, env.wrapped_key)
    kid, algorithm, wrapped = provider.wrap(data_key, new_id)
    if provider.unwrap(kid, algorithm, wrapped) != data_key:
        raise RemoteStorageError(f"the data key wrapped under {kid} does not unwrap to itself: {key} left unchanged")
    store.put(key, manifest.with_envelope(Envelope(kid, algorithm, wrapped)).encode())
    # A segment deleted (all its objects in one request) between the read of its manifest and this write: the
    # manifest is back alone, and nothing would ever delete it again. Its .log tells.
    from tiered.format.manifest import MANIFEST_SUFFIX

    if not store.exists(key.removesuffix(MANIFEST_SUFFIX) + ".log"):
        store.delete_many([key])
