"""Test-only RSMs that stop at a point and wait for the test.

:class:`GatedDir`, for ``tiered run`` subprocess tests: the local-directory backend whose copy of the segment at
offset 0 stops, once in a process, after uploading its ``.log``, says ``GATE <key>`` on stderr, and waits until the test opens the FIFO
named by ``rsm.config.gate`` for writing and closes it. Loaded by dotted path
(``remote.log.storage.manager.class.name=tests.gated_rsm.GatedDir``), in the copier process as well.

:class:`GatedDeletes`, for races inside one process: deletes of chosen segments stop at a :class:`Gate` (events,
never sleeps) until the test releases them."""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tiered.backends.local_dir import LocalDirRemoteStorageManager
from tiered.rsm import RemoteLogSegmentMetadata

_GATE_LOCK = threading.Lock()


class GatedDir(LocalDirRemoteStorageManager):
    CONFIG_KEYS = (*LocalDirRemoteStorageManager.CONFIG_KEYS, "gate")

    def configure(self, props: Mapping[str, str]) -> None:
        super().configure(props)
        self.gate = self.options.string("gate", required="the FIFO the test opens to let the first copy go on")
        self.gated = False

    def put_file(self, key: str, path: Path) -> None:
        super().put_file(key, path)
        # The copier process uploads several segments at once: the one that stops is the segment at offset 0.
        at_zero = key.endswith(".log") and key.rsplit("/", 1)[-1].startswith("0" * 20 + "-")
        with _GATE_LOCK:
            first, self.gated = at_zero and not self.gated, self.gated or at_zero
        if first:
            print(f"GATE {key}", file=sys.stderr, flush=True)
            with open(str(self.gate), "rb") as fifo:  # blocks until the test opens it for writing
                fifo.read()


LIMIT = 60.0  # a failure bound only: every wait below ends at once when the code is right


class Gate:
    """A pause point in this process: the first thread to reach it says so (:attr:`arrived`) and waits there until
    the test calls :meth:`release`; threads that reach it later pass."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self._go = threading.Event()
        self._taken = False
        self._lock = threading.Lock()

    def reach(self) -> None:
        with self._lock:
            first, self._taken = not self._taken, True
        if first:
            self.arrived.set()
            if not self._go.wait(LIMIT):
                raise AssertionError("the test never released the gate")

    def wait_arrived(self) -> None:
        assert self.arrived.wait(LIMIT), "nothing reached the gate"

    def release(self) -> None:
        self._go.set()


class GatedDeletes(LocalDirRemoteStorageManager):
    """The local-directory backend whose ``delete_log_segment_data`` of a segment with a gate (by start offset, in
    :attr:`gates`) stops there first; :attr:`deleted` lists the ``(start offset, segment id)`` of every delete that
    went through, :attr:`fail_delete` makes deletes fail (an outage)."""

    def __init__(self) -> None:
        super().__init__()
        self.gates: dict[int, Gate] = {}
        self.deleted: list[tuple[int, Any]] = []
        self.fail_delete = False

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        gate = self.gates.get(metadata.start_offset)
        if gate is not None:
            gate.reach()
        if self.fail_delete:
            raise OSError("injected: delete during an outage")
        super().delete_log_segment_data(metadata)
        self.deleted.append((metadata.start_offset, metadata.remote_log_segment_id.id))


class FlakyDir(LocalDirRemoteStorageManager):
    """The local-directory backend failing once, in the process that loads it (the copier process too), at the
    step ``rsm.config.fail`` names for the segment starting at ``rsm.config.fail.start``: ``started`` (the put of
    its COPY_SEGMENT_STARTED event), ``copy`` (its upload: the objects land, then it fails), ``custom`` (its upload returns
    ``rsm.config.fail.custom.bytes`` bytes of custom metadata). Loaded by dotted path
    (``remote.log.storage.manager.class.name=tests.gated_rsm.FlakyDir``)."""

    CONFIG_KEYS = (*LocalDirRemoteStorageManager.CONFIG_KEYS, "fail", "fail.start", "fail.custom.bytes")

    def configure(self, props: Mapping[str, str]) -> None:
        super().configure(props)
        self.fail = str(props.get("fail", ""))
        self.fail_start = int(props.get("fail.start", "-1"))
        self.custom_bytes = int(props.get("fail.custom.bytes", "0"))
        self.failed = False

    def _once(self, step: str, start: int) -> bool:
        if self.failed or self.fail != step or start != self.fail_start:
            return False
        self.failed = True
        return True

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        if key.endswith(".0.json") and self._once("started", int(key.rsplit("/", 1)[1].split("-", 1)[0])):
            raise OSError(f"injected: the put of {key} failed")
        super().put_bytes(key, data, if_absent=if_absent)

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: Any) -> bytes | None:
        if self._once("copy", metadata.start_offset):
            super().copy_log_segment_data(metadata, segment_data)  # its objects land; the reply is lost
            raise OSError(f"injected: the upload of segment {metadata.start_offset} failed")
        custom = super().copy_log_segment_data(metadata, segment_data)
        if self._once("custom", metadata.start_offset):
            return b"c" * self.custom_bytes
        return custom


class OrderedDeletes(LocalDirRemoteStorageManager):
    """The local-directory backend refusing to delete a segment whose DELETE_SEGMENT_STARTED event is not in the
    store yet (Kafka's order: the event, then the objects), wherever the delete runs (the copier process too)."""

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        from tiered import layout
        from tiered.rsm import RemoteLogSegmentState

        key = layout.metadata_event_key(self.prefix, metadata.remote_log_segment_id, metadata.start_offset,
                                        int(RemoteLogSegmentState.DELETE_SEGMENT_STARTED))
        if not self.exists(key):
            raise OSError(f"segment {metadata.remote_log_segment_id} deleted before its DELETE_SEGMENT_STARTED event")
        super().delete_log_segment_data(metadata)
