"""``remote-log-state``: what a partition dir remembers of its remote tier, so no process can destroy it.

Kafka keeps a partition's remote state in the ``__remote_log_metadata`` topic, which every broker reads at
start. A data dir of ours may be opened by a process that was not given the remote tier's configuration (a
``tiered consume`` without ``--config``, a ``tiered run --log-dirs``); such a process must neither move the log
start offset up to the local log start (that makes the next remote pass delete every remote segment below it)
nor run retention as if the partition were local-only. So the partition dir carries this small text file,
written by the remote tier whenever it learns something new::

    version: 0
    remote_storage_enabled: true
    highest_remote_offset: 1234

``highest_remote_offset`` is the last offset of a finished remote copy (-1: none yet). Once the remote tier has
claimed ownership of the partition's remote data (``tiered.ownership``: one writer per partition across machines
sharing a store), the file is version 1 and also holds the owner epoch and the claim's id::

    version: 1
    remote_storage_enabled: true
    highest_remote_offset: 1234
    owner_epoch: 3
    owner_id: 9f0c2d4e8a1b4c6d8e0f1a2b3c4d5e6f

The remote tier compares them with the owner records in the store: a data dir whose claim is not the newest one
has lost the partition and copies and deletes nothing more there. Before the remote tier writes a claim it writes
the claim here as pending (version 2)::

    version: 2
    remote_storage_enabled: true
    highest_remote_offset: -1
    pending_owner_epoch: 0
    pending_owner_id: 5e1f...

A claim whose write was not answered (a timeout, a PUT that reaches the store later) may land at any time after: the
owner record it finds then is known as this data dir's own, not another's, and the claim is made again with the same
epoch and id until the store answers. Once the claim stands the pending lines go and the owner lines come. The file is written
through a temp file, fsync and rename (a crash leaves the old or the new one); a missing file means "never
tiered"; a malformed one is an error naming the file (a partition whose remote state is unknown must not be
trimmed). This module is the codec and the file; what the log does with it lives in :mod:`local.log`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from local.errors import KafkaStorageError

REMOTE_LOG_STATE_FILENAME = "remote-log-state"
_VERSION = 0
_OWNED_VERSION = 1  # with owner_epoch and owner_id
_PENDING_VERSION = 2  # with pending_owner_epoch and pending_owner_id (and the owner lines only when claimed)


@dataclass(frozen=True, slots=True)
class RemoteLogState:
    """A partition's remembered remote state (see the module docstring)."""

    remote_storage_enabled: bool = False
    highest_remote_offset: int = -1
    owner_epoch: int = -1  # the owner epoch this data dir claimed (-1: never claimed)
    owner_id: str = ""  # the claim's id, as its owner record in the store holds it
    pending_owner_epoch: int = -1  # a claim written (or being written) whose answer did not come (-1: none)
    pending_owner_id: str = ""

    @property
    def has_remote_data(self) -> bool:
        return self.highest_remote_offset >= 0

    @property
    def claimed(self) -> bool:
        return self.owner_epoch >= 0

    @property
    def claim_pending(self) -> bool:
        return self.pending_owner_epoch >= 0

    def encode(self) -> bytes:
        version = _PENDING_VERSION if self.claim_pending else _OWNED_VERSION if self.claimed else _VERSION
        text = (
            f"version: {version}\n"
            f"remote_storage_enabled: {'true' if self.remote_storage_enabled else 'false'}\n"
            f"highest_remote_offset: {self.highest_remote_offset}\n"
        )
        if self.claimed:
            text += f"owner_epoch: {self.owner_epoch}\nowner_id: {self.owner_id}\n"
        if self.claim_pending:
            text += f"pending_owner_epoch: {self.pending_owner_epoch}\npending_owner_id: {self.pending_owner_id}\n"
        return text.encode()

    @classmethod
    def decode(cls, data: bytes, source: str = REMOTE_LOG_STATE_FILENAME) -> RemoteLogState:
        try:
            fields = dict(_parse_line(line) for line in data.decode("utf-8").splitlines() if line.strip())
            version = int(fields.pop("version"))
            if version not in (_VERSION, _OWNED_VERSION, _PENDING_VERSION):
                raise ValueError(f"unsupported version {version}")
            enabled = fields.pop("remote_storage_enabled")
            if enabled not in ("true", "false"):
                raise ValueError(f"remote_storage_enabled must be true or false, got {enabled!r}")
            highest = int(fields.pop("highest_remote_offset"))
            if highest < -1:
                raise ValueError(f"highest_remote_offset must be >= -1, got {highest}")
            owner_epoch, owner_id = -1, ""
            if version == _OWNED_VERSION or (version == _PENDING_VERSION and "owner_epoch" in fields):
                owner_epoch, owner_id = _claim_fields(fields, "owner_epoch", "owner_id")
            pending_epoch, pending_id = -1, ""
            if version == _PENDING_VERSION:
                pending_epoch, pending_id = _claim_fields(fields, "pending_owner_epoch", "pending_owner_id")
            if fields:
                raise ValueError(f"unknown field(s) {sorted(fields)}")
        except (KeyError, ValueError, UnicodeDecodeError) as exc:
            raise KafkaStorageError(f"malformed {source}: {exc}", path=source) from None
        return cls(enabled == "true", highest, owner_epoch, owner_id, pending_epoch, pending_id)


def _claim_fields(fields: dict[str, str], epoch_name: str, id_name: str) -> tuple[int, str]:
    epoch, claim_id = int(fields.pop(epoch_name)), fields.pop(id_name)
    if epoch < 0 or not claim_id:
        raise ValueError(f"{epoch_name} must be >= 0 and {id_name} set, got {epoch} and {claim_id!r}")
    return epoch, claim_id


def _parse_line(line: str) -> tuple[str, str]:
    key, sep, value = line.partition(":")
    if not sep:
        raise ValueError(f"expected 'key: value', got {line!r}")
    return key.strip(), value.strip()


class RemoteLogStateFile:
    """The ``remote-log-state`` file of one partition dir."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory) / REMOTE_LOG_STATE_FILENAME

    def read(self) -> RemoteLogState:
        """The stored state; the default (never tiered) when there is no file."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return RemoteLogState()
        return RemoteLogState.decode(data, str(self.path))

    def write(self, state: RemoteLogState) -> None:
        from local.checkpoint import atomic_write

        atomic_write(self.path, state.encode())
