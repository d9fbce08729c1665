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
from typing import Any, BinaryIO

from tiered.backends.local_dir import LocalDirRemoteStorageManager, LocalDirStore
from tiered.rsm import RemoteLogSegmentMetadata

_GATE_LOCK = threading.Lock()


class GatedStore(LocalDirStore):
    CONFIG_KEYS = (*LocalDirStore.CONFIG_KEYS, "gate")

    def configure(self, props: Mapping[str, str]) -> None:
        super().configure(props)
        self.gate = self.options.string("gate", required="the FIFO the test opens to let the first copy go on")
        self.gated = False

    def put(self, key: str, data: bytes | BinaryIO, *, if_absent: bool = False) -> None:
        super().put(key, data, if_absent=if_absent)
        # The copier process uploads several segments at once: the one that stops is the segment at offset 0.
        at_zero = key.endswith(".log") and key.rsplit("/", 1)[-1].startswith("0" * 20 + "-")
        with _GATE_LOCK:
            first, self.gated = at_zero and not self.gated, self.gated or at_zero
        if first:
            print(f"GATE {key}", file=sys.stderr, flush=True)
            with open(str(self.gate), "rb") as fifo:  # blocks until the test opens it for writing
                fifo.read()


class GatedDir(LocalDirRemoteStorageManager):
    store_class = GatedStore


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


class FlakyStore(LocalDirStore):
    """:class:`FlakyDir`'s store: the failure of the ``started`` step, and the state of the one failure."""

    CONFIG_KEYS = (*LocalDirStore.CONFIG_KEYS, "fail", "fail.start", "fail.custom.bytes")

    def configure(self, props: Mapping[str, str]) -> None:
        super().configure(props)
        self.fail = str(props.get("fail", ""))
        self.fail_start = int(props.get("fail.start", "-1"))
        self.custom_bytes = int(props.get("fail.custom.bytes", "0"))
        self.failed = False

    def once(self, step: str, start: int) -> bool:
        if self.failed or self.fail != step or start != self.fail_start:
            return False
        self.failed = True
        return True

    def put(self, key: str, data: bytes | BinaryIO, *, if_absent: bool = False) -> None:
        if key.endswith(".0.json") and self.once("started", int(key.rsplit("/", 1)[1].split("-", 1)[0])):
            raise OSError(f"injected: the put of {key} failed")
        super().put(key, data, if_absent=if_absent)


class FlakyDir(LocalDirRemoteStorageManager):
    """The local-directory backend failing once, in the process that loads it (the copier process too), at the
    step ``rsm.config.fail`` names for the segment starting at ``rsm.config.fail.start``: ``started`` (the put of
    its COPY_SEGMENT_STARTED event), ``copy`` (its upload: the objects land, then it fails), ``custom`` (its upload returns
    ``rsm.config.fail.custom.bytes`` bytes of custom metadata), ``claim`` (another data dir's claim of the partition
    at the next owner epoch lands as its upload begins). Loaded by dotted path
    (``remote.log.storage.manager.class.name=tests.gated_rsm.FlakyDir``)."""

    store_class = FlakyStore
    store: FlakyStore

    def _once(self, step: str, start: int) -> bool:
        return self.store.once(step, start)

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: Any) -> bytes | None:
        if self._once("claim", metadata.start_offset):  # another data dir's claim lands while this one uploads
            import uuid

            from tiered import layout
            from tiered.ownership import OwnerRecord

            tip = metadata.topic_id_partition
            epochs = [layout.owner_epoch_of_key(k) or 0 for k in self.store.list_keys(
                layout.owner_records_prefix(self.prefix, tip))]
            held = max(epochs, default=0)  # (the new owner adopts the held claim's epochs below its start)
            epoch = held + 1
            record = OwnerRecord(epoch, uuid.uuid4().hex, ((held, 0), (epoch, metadata.start_offset)), 0, "elsewhere",
                                 ("/b",))
            self.store.put(layout.owner_record_key(self.prefix, tip, epoch), record.encode(), if_absent=True)
        if self._once("copy", metadata.start_offset):
            super().copy_log_segment_data(metadata, segment_data)  # its objects land; the reply is lost
            raise OSError(f"injected: the upload of segment {metadata.start_offset} failed")
        custom = super().copy_log_segment_data(metadata, segment_data)
        if self._once("custom", metadata.start_offset):
            return b"c" * self.store.custom_bytes
        return custom


class OrderedDeletes(LocalDirRemoteStorageManager):
    """The local-directory backend refusing to delete a segment whose DELETE_SEGMENT_STARTED event is not in the
    store yet (Kafka's order: the event, then the objects), wherever the delete runs (the copier process too)."""

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        from tiered import layout
        from tiered.rsm import RemoteLogSegmentState

        key = layout.metadata_event_key(self.prefix, metadata.remote_log_segment_id, metadata.start_offset,
                                        int(RemoteLogSegmentState.DELETE_SEGMENT_STARTED))
        if not self.store.exists(key):
            raise OSError(f"segment {metadata.remote_log_segment_id} deleted before its DELETE_SEGMENT_STARTED event")
        super().delete_log_segment_data(metadata)
