"""The transaction coordinator (Kafka's ``TransactionCoordinator`` and ``TransactionStateManager``), for every
transactional id, on this node.

A transactional id owns one producer id and an epoch. InitProducerId gives the id a producer id (new) or bumps its
epoch, which fences the previous producer of that id: a transaction it left open is aborted first (its ABORT markers
carry the new epoch, so its late writes are refused with INVALID_PRODUCER_EPOCH by the engine's producer state).
Then: AddPartitionsToTxn and AddOffsetsToTxn (the group's ``__consumer_offsets`` partition) add partitions to the
transaction, which becomes Ongoing; the producer writes transactional batches (the produce handler asks
:meth:`check_produce` that the partition is in the producer's ongoing transaction, so no batch can open a
transaction this coordinator does not know, the "hanging transaction" of KAFKA-14402); EndTxn writes the COMMIT or
ABORT marker to every partition of the transaction (through ``Log.append`` with the coordinator origin: the engine
completes the transaction in its producer state, its transaction index and the last stable offset), applies or
drops the offsets TxnOffsetCommit stored for the groups, and the transaction is complete.

A producer whose epoch is not the id's current one is PRODUCER_FENCED, as Kafka's coordinator answers (the
handlers answer INVALID_PRODUCER_EPOCH to the request versions older than that code, as KafkaApis does).

States as Kafka's (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort). Each change is
appended to ``__transaction_state`` (compacted, ``transaction.state.log.num.partitions`` partitions, Kafka's
``TransactionLogKey``/``TransactionLogValue`` v0 in :mod:`tiered.kafka.txn_schema`) before it is applied: the
Prepare state before any marker, the Complete state after all of them. At start the topic is replayed; a
transaction found in PrepareCommit or PrepareAbort has its markers written (again: a marker for a transaction
already completed changes nothing that matters) and is completed, so a crash between markers never leaves a
partition with an open transaction. A transaction Ongoing for longer than its timeout is aborted with a fenced epoch,
checked every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``.

EndTxn and a fencing InitProducerId write their markers synchronously: the request is answered once every
partition has its marker (Kafka answers after the Prepare record and writes markers asynchronously; answering later
only makes the client wait, and no other request of that transactional id can run meanwhile).
"""

from __future__ import annotations

import dataclasses
import enum
import io
import logging
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i64

from local.producer_state import AppendOrigin
from local.records import MemoryRecords
from tiered.internal_topics import TRANSACTION_STATE_TOPIC
from tiered.kafka.errors import error_code
from tiered.kafka.internal_topic import InternalTopicLog
from tiered.kafka.timers import Timers
from tiered.kafka.txn_schema import PartitionsSchema, TransactionLogKey, TransactionLogValueV0

if TYPE_CHECKING:
    from tiered.kafka.broker import KafkaBroker

logger = logging.getLogger(__name__)

_VERSION = struct.Struct(">h")
_MAX_EPOCH = 32767


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


@dataclass(frozen=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]] = frozenset()
    start_ms: int = -1
    update_ms: int = field(default_factory=lambda: int(time.time() * 1000))


# Records --------------------------------------------------------------------------------------------------------


def encode_key(transactional_id: str) -> bytes:
    buffer = io.BytesIO()
    buffer.write(_VERSION.pack(0))
    entity_writer(TransactionLogKey)(buffer, TransactionLogKey(transactional_id=transactional_id))
    return buffer.getvalue()


def encode_value(meta: TxnMetadata) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(partition)
    value = TransactionLogValueV0(
        producer_id=i64(meta.producer_id), producer_epoch=i16(meta.producer_epoch),
        transaction_timeout_ms=i32(meta.timeout_ms), transaction_status=i8(int(meta.state)),
        transaction_partitions=tuple(PartitionsSchema(topic=t, partition_ids=tuple(i32(p) for p in ps))
                                     for t, ps in by_topic.items()),
        transaction_last_update_timestamp_ms=i64(meta.update_ms), transaction_start_timestamp_ms=i64(meta.start_ms))
    buffer = io.BytesIO()
    buffer.write(_VERSION.pack(0))
    entity_writer(TransactionLogValueV0)(buffer, value)
    return buffer.getvalue()


def decode(key: bytes, value: bytes) -> TxnMetadata:
    """A record of ``__transaction_state``; ValueError for a version other than 0 or bytes that do not decode."""
    if len(key) < 2 or len(value) < 2 or _VERSION.unpack_from(key)[0] != 0 or _VERSION.unpack_from(value)[0] != 0:
        raise ValueError("not a version 0 transaction log record")
    try:
        k: Any = entity_reader(TransactionLogKey)(key, 2)[0]
        v: Any = entity_reader(TransactionLogValueV0)(value, 2)[0]
    except Exception as exc:
        raise ValueError(f"a transaction log record cannot be decoded: {exc}") from None
    partitions = frozenset((p.topic, int(i)) for p in (v.transaction_partitions or ()) for i in p.partition_ids)
    return TxnMetadata(k.transactional_id, int(v.producer_id), int(v.producer_epoch), int(v.transaction_timeout_ms),
                       TxnState(int(v.transaction_status)), partitions, int(v.transaction_start_timestamp_ms),
                       int(v.transaction_last_update_timestamp_ms))


# The coordinator ------------------------------------------------------------------------------------------------


class TxnCoordinator:
    """See the module docstring."""

    def __init__(self, broker: KafkaBroker) -> None:
        self._broker = broker
        self._lock = threading.RLock()
        self._txns: dict[str, TxnMetadata] = {}
        self._by_producer: dict[int, str] = {}
        self._log: InternalTopicLog | None = None
        self._timers = Timers("kafka-txn-timers")
        self.max_timeout_ms = broker.config.transaction_max_timeout_ms
        self._check_ms = broker.config.transaction_abort_timed_out_transaction_cleanup_interval_ms

    # Life cycle ---------------------------------------------------------------------------------------------------

    def load(self) -> None:
        self._log = InternalTopicLog.existing(self._broker, TRANSACTION_STATE_TOPIC)
        if self._log is not None:
            latest: dict[str, TxnMetadata] = {}
            for stored in self._log.records():
                if stored.key is None:
                    continue
                if stored.value is None:  # a tombstone (an expired transactional id, written by Kafka)
                    try:
                        latest.pop(entity_reader(TransactionLogKey)(stored.key, 2)[0].transactional_id, None)
                    except Exception:
                        pass
                    continue
                try:
                    meta = decode(stored.key, stored.value)
                except ValueError as exc:
                    logger.warning("skipping a record of %s: %s", TRANSACTION_STATE_TOPIC, exc)
                    continue
                latest[meta.transactional_id] = meta
            with self._lock:
                for meta in latest.values():
                    self._set(meta)
                for meta in list(self._txns.values()):
                    if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                        logger.info("transactional id %s: completing the %s left by the last run",
                                    meta.transactional_id, meta.state.name)
                        self._complete(meta, meta.state is TxnState.PREPARE_COMMIT)
            logger.info("loaded %d transactional id(s) from %s", len(latest), TRANSACTION_STATE_TOPIC)
        self._timers.schedule(self._check_ms / 1000, self._abort_timed_out_task)

    def close(self) -> None:
        self._timers.close()

    def _state_log(self) -> InternalTopicLog:
        if self._log is None:
            config = self._broker.config
            self._log = InternalTopicLog.open(self._broker, TRANSACTION_STATE_TOPIC,
                                              config.transaction_state_log_num_partitions,
                                              config.transaction_state_log_segment_bytes)
        return self._log

    def _set(self, meta: TxnMetadata) -> None:
        old = self._txns.get(meta.transactional_id)
        if old is not None and self._by_producer.get(old.producer_id) == meta.transactional_id:
            del self._by_producer[old.producer_id]
        self._txns[meta.transactional_id] = meta
        self._by_producer[meta.producer_id] = meta.transactional_id

    def _persist(self, meta: TxnMetadata) -> TxnMetadata:
        """Append ``meta`` to ``__transaction_state``, then make it the current state (raises: nothing changed)."""
        meta = dataclasses.replace(meta, update_ms=int(time.time() * 1000))
        self._state_log().append(meta.transactional_id, [(encode_key(meta.transactional_id), encode_value(meta))])
        self._set(meta)
        return meta

    # InitProducerId -----------------------------------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int = -1,
                         producer_epoch: int = -1) -> tuple[ErrorCode, int, int]:
        if not transactional_id:
            return ErrorCode.invalid_request, -1, -1
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return ErrorCode.invalid_transaction_timeout, -1, -1
        with self._lock:
            meta = self._txns.get(transactional_id)
            try:
                if meta is None:
                    assert self._broker.producer_ids is not None
                    new = TxnMetadata(transactional_id, self._broker.producer_ids.next_id(), 0, timeout_ms,
                                      TxnState.EMPTY)
                    meta = self._persist(new)
                    return ErrorCode.none, meta.producer_id, meta.producer_epoch
                if producer_id >= 0 and (producer_id, producer_epoch) != (meta.producer_id, meta.producer_epoch):
                    return ErrorCode.producer_fenced, -1, -1  # KIP-360: only the current producer may bump
                if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                    meta = self._complete(meta, meta.state is TxnState.PREPARE_COMMIT)
                if meta.state is TxnState.ONGOING:
                    meta = self._fence_and_abort(meta)
                    meta = self._persist(dataclasses.replace(meta, timeout_ms=timeout_ms, state=TxnState.EMPTY))
                else:
                    meta = self._persist(self._bumped(meta, timeout_ms))
            except Exception as exc:
                logger.error("transactional id %s: InitProducerId failed: %s", transactional_id, exc)
                return _coordinator_error(exc), -1, -1
            return ErrorCode.none, meta.producer_id, meta.producer_epoch

    def _bumped(self, meta: TxnMetadata, timeout_ms: int) -> TxnMetadata:
        if meta.producer_epoch >= _MAX_EPOCH - 1:  # a new producer id once the epoch runs out (Kafka's rule)
            assert self._broker.producer_ids is not None
            return dataclasses.replace(meta, producer_id=self._broker.producer_ids.next_id(), producer_epoch=0,
                                       timeout_ms=timeout_ms, state=TxnState.EMPTY, partitions=frozenset())
        return dataclasses.replace(meta, producer_epoch=meta.producer_epoch + 1, timeout_ms=timeout_ms,
                                   state=TxnState.EMPTY, partitions=frozenset())

    def _fence_and_abort(self, meta: TxnMetadata) -> TxnMetadata:
        """Abort ``meta``'s ongoing transaction with a bumped epoch: its producer is fenced."""
        fenced = self._persist(dataclasses.replace(meta, producer_epoch=meta.producer_epoch + 1,
                                                   state=TxnState.PREPARE_ABORT))
        return self._complete(fenced, commit=False)

    # AddPartitionsToTxn, AddOffsetsToTxn --------------------------------------------------------------------------

    def _check(self, transactional_id: str, producer_id: int, producer_epoch: int) -> tuple[ErrorCode, TxnMetadata | None]:
        meta = self._txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping, None
        if producer_epoch != meta.producer_epoch:
            return ErrorCode.producer_fenced, None
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ErrorCode.concurrent_transactions, None
        return ErrorCode.none, meta

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        with self._lock:
            error, meta = self._check(transactional_id, producer_id, producer_epoch)
            if meta is None:
                return dict.fromkeys(partitions, error)
            unknown = [tp for tp in partitions if self._broker.log(*tp) is None]
            if unknown:
                return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                        for tp in partitions}
            new = meta.partitions | frozenset(partitions)
            if meta.state is TxnState.ONGOING and new == meta.partitions:
                return dict.fromkeys(partitions, ErrorCode.none)
            start = meta.start_ms if meta.state is TxnState.ONGOING else int(time.time() * 1000)
            try:
                self._persist(dataclasses.replace(meta, state=TxnState.ONGOING, partitions=new, start_ms=start))
            except Exception as exc:
                logger.error("transactional id %s: AddPartitionsToTxn failed: %s", transactional_id, exc)
                return dict.fromkeys(partitions, _coordinator_error(exc))
            return dict.fromkeys(partitions, ErrorCode.none)

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> ErrorCode:
        coordinator = self._broker.coordinator
        assert coordinator is not None
        tp = (coordinator.offsets_log.topic, coordinator.offsets_log.partition_of(group_id))
        return self.add_partitions(transactional_id, producer_id, producer_epoch, [tp])[tp]

    def check_txn_offset_commit(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                group_id: str) -> ErrorCode:
        """TxnOffsetCommit is allowed once AddOffsetsToTxn added the group's partition to the ongoing transaction."""
        with self._lock:
            error, meta = self._check(transactional_id, producer_id, producer_epoch)
            if meta is None:
                return error
            coordinator = self._broker.coordinator
            assert coordinator is not None
            tp = (coordinator.offsets_log.topic, coordinator.offsets_log.partition_of(group_id))
            if meta.state is not TxnState.ONGOING or tp not in meta.partitions:
                return ErrorCode.invalid_txn_state
            return ErrorCode.none

    def check_produce(self, producer_id: int, producer_epoch: int, topic: str, partition: int) -> ErrorCode:
        """May a transactional batch of this producer go to this partition? Only inside its ongoing transaction."""
        with self._lock:
            transactional_id = self._by_producer.get(producer_id)
            meta = self._txns.get(transactional_id) if transactional_id is not None else None
            if meta is None:
                return ErrorCode.invalid_producer_id_mapping
            if producer_epoch != meta.producer_epoch:  # a later epoch too: it would fence the producer's markers
                return ErrorCode.invalid_producer_epoch
            if meta.state is not TxnState.ONGOING or (topic, partition) not in meta.partitions:
                return ErrorCode.invalid_txn_state
            return ErrorCode.none

    # EndTxn ------------------------------------------------------------------------------------------------------

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        with self._lock:
            meta = self._txns.get(transactional_id)
            if meta is None or meta.producer_id != producer_id:
                return ErrorCode.invalid_producer_id_mapping
            if producer_epoch != meta.producer_epoch:
                return ErrorCode.producer_fenced
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            if meta.state is done:
                return ErrorCode.none  # a retry of the EndTxn that completed it
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                return ErrorCode.concurrent_transactions
            if meta.state is not TxnState.ONGOING:
                return ErrorCode.invalid_txn_state
            try:
                prepared = self._persist(dataclasses.replace(
                    meta, state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT))
                self._complete(prepared, commit)
            except Exception as exc:
                logger.error("transactional id %s: EndTxn failed: %s", transactional_id, exc)
                return _coordinator_error(exc)
            return ErrorCode.none

    def _complete(self, meta: TxnMetadata, commit: bool) -> TxnMetadata:
        """Write the markers of a prepared transaction, apply its offsets, record it complete."""
        marker = MemoryRecords.end_transaction_marker(meta.producer_id, meta.producer_epoch, commit=commit)
        offsets_partitions: set[int] = set()
        coordinator = self._broker.coordinator
        offsets_topic = coordinator.offsets_log.topic if coordinator is not None else None
        for topic, partition in sorted(meta.partitions):
            log = self._broker.log(topic, partition)
            if log is None:
                logger.warning("transactional id %s: partition %s-%d is gone: no marker written",
                               meta.transactional_id, topic, partition)
                continue
            log.append(bytes(marker), origin=AppendOrigin.COORDINATOR)
            if topic == offsets_topic:
                offsets_partitions.add(partition)
        if coordinator is not None and offsets_partitions:
            coordinator.complete_txn(meta.producer_id, offsets_partitions, commit)
        logger.info("transactional id %s: %s (producer %d epoch %d, %d partition(s))", meta.transactional_id,
                    "committed" if commit else "aborted", meta.producer_id, meta.producer_epoch, len(meta.partitions))
        return self._persist(dataclasses.replace(
            meta, state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT, partitions=frozenset()))

    # Timeouts -----------------------------------------------------------------------------------------------------

    def _abort_timed_out_task(self) -> None:
        try:
            self.abort_timed_out(int(time.time() * 1000))
        finally:
            self._timers.schedule(self._check_ms / 1000, self._abort_timed_out_task)

    def abort_timed_out(self, now_ms: int) -> int:
        """Abort, with a fenced epoch, every transaction Ongoing for longer than its timeout; how many."""
        aborted = 0
        with self._lock:
            for meta in list(self._txns.values()):
                if meta.state is TxnState.ONGOING and meta.start_ms + meta.timeout_ms <= now_ms:
                    logger.info("transactional id %s: open for more than %d ms: aborting", meta.transactional_id,
                                meta.timeout_ms)
                    try:
                        self._fence_and_abort(meta)
                        aborted += 1
                    except Exception as exc:
                        logger.error("transactional id %s: abort failed: %s", meta.transactional_id, exc)
        return aborted

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        with self._lock:
            return self._txns.get(transactional_id)


def _coordinator_error(exc: BaseException) -> ErrorCode:
    code = error_code(exc)
    return ErrorCode.coordinator_not_available if code in (ErrorCode.unknown_server_error,
                                                           ErrorCode.kafka_storage_error) else code

