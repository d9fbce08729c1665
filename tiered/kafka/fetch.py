"""Fetch: the stored batches, as they are on disk or in the remote tier, never decoded and re-encoded.

Each partition is read with :meth:`local.log.Log.read` from ``fetch_offset``: an offset below the local log start
comes back from the remote tier through the engine (the consumer cannot tell but by latency). The bytes of the
returned ``FetchDataInfo.records`` go into the response as they are.

- Isolation: READ_UNCOMMITTED reads up to the high watermark; READ_COMMITTED up to the last stable offset, with the
  aborted transactions the read overlaps (from the local and remote transaction indexes) so the consumer can drop
  their records.
- Sizes: ``partition_max_bytes`` per partition and ``max_bytes`` (capped by the broker's ``fetch.max.bytes``, as
  Kafka caps it) over the response; the first partition with data
  returns at least one whole batch even past both (Kafka's ``minOneMessage``), so a batch larger than the limits
  never blocks a consumer.
- Errors per partition: OFFSET_OUT_OF_RANGE (below the log start or past the log end: the consumer resets by its
  ``auto.offset.reset``), UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH/UNKNOWN_LEADER_EPOCH for a
  ``current_leader_epoch`` that is not the partition's, KAFKA_STORAGE_ERROR for an offline dir or a storage failure,
  CORRUPT_MESSAGE for a damaged batch.
- Long polling: while the response holds fewer than ``min_bytes`` and no error, and no partition's answer was cut
  short by the size limits, it waits for an append (any partition) or ``max_wait_ms``, then reads again; the
  wait holds no thread (:class:`~tiered.kafka.server.WaitForAppend`).
- Fetch sessions (KIP-227) are not kept: every response carries session id 0, which tells the client that no
  session was created, so it sends full fetch requests; a request naming a session gets FETCH_SESSION_ID_NOT_FOUND.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kio.schema.errors import ErrorCode

from local.fetch import FetchIsolation
from local.records import MemoryRecords
from tiered.kafka.broker import KafkaBroker, current_leader_epoch_error
from tiered.kafka.errors import error_code
from tiered.kafka.protocol import NO_THROTTLE, Request, make
from tiered.kafka.server import WaitForAppend

logger = logging.getLogger(__name__)

# A read that failed other than as clients expect (damage, a storage error, a bug) is logged, as Kafka's fetch logs
# "Error processing fetch"; once per partition, offset and error: a consumer retries the same offset again and again.
_LOGGED_CODES = frozenset({ErrorCode.corrupt_message, ErrorCode.kafka_storage_error, ErrorCode.unknown_server_error})
_logged: set[tuple[str, int, int, str]] = set()
_LOGGED_MAX = 1024

READ_COMMITTED = 1
_NO_REPLICA = -1


def handle_fetch(broker: KafkaBroker, request: Request) -> Any:
    body = request.body
    module = request.response_module
    if getattr(body, "session_id", 0) != 0:
        return make(module, "FetchResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.fetch_session_id_not_found,
                    session_id=0, responses=())
    committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
    max_wait_s = max(0.0, body.max_wait.total_seconds())
    deadline = time.monotonic() + max_wait_s

    def attempt() -> Any:
        version = broker.appends.version  # before reading: an append after this wakes the wait
        response, size, failed = _read_all(broker, request)
        if (failed or size >= min(body.min_bytes, broker.config.fetch_max_bytes) or time.monotonic() >= deadline
                or _held_back_by_size(response, committed)):
            return response
        if request.charge is not None:
            request.charge.release()  # (a waiting fetch holds no answer)
        return WaitForAppend(version, deadline, attempt)

    return attempt()


def _held_back_by_size(response: Any, committed: bool) -> bool:
    """Whether a partition's answer stopped before its readable end because of the size limits: waiting cannot
    make the answer larger then (Kafka counts the bytes available, up to each partition's limit, against
    ``min_bytes``; here whole batches are returned, so an answer just under ``min_bytes`` must not wait)."""
    for topic in response.responses:
        for partition in topic.partitions:
            if partition.error_code != ErrorCode.none or not partition.records:
                continue
            next_offset = max((b.next_offset for b in MemoryRecords(partition.records).batches(verify=False)),
                              default=None)
            bound = partition.last_stable_offset if committed else partition.high_watermark
            if next_offset is not None and next_offset < bound:
                return True
    return False


def _read_all(broker: KafkaBroker, request: Request) -> tuple[Any, int, bool]:
    body = request.body
    module = request.response_module
    isolation = (FetchIsolation.TXN_COMMITTED if getattr(body, "isolation_level", 0) == READ_COMMITTED
                 else FetchIsolation.HIGH_WATERMARK)
    # Kafka caps a consumer's max_bytes by the broker's fetch.max.bytes: what one answer may hold in memory; here
    # also by what is left of the bytes held for clients that have not taken their answers, reserved at once (a
    # first batch is returned whole all the same, as KIP-74 has it: a consumer always makes progress)
    cap = min(body.max_bytes, broker.config.fetch_max_bytes)
    unsent = broker.unsent
    remaining = unsent.reserve(cap)
    granted = remaining
    total = 0
    failed = False
    topics = []
    try:
        for fetch_topic in body.topics:
            partitions = []
            for wanted in fetch_topic.partitions:
                limit = max(0, min(wanted.partition_max_bytes, remaining))
                answer = _read_partition(broker, module, fetch_topic.topic, wanted, limit, isolation, total == 0)
                size = len(answer.records) if answer.records is not None else 0
                total += size
                remaining -= size
                failed |= answer.error_code != ErrorCode.none
                partitions.append(answer)
            topics.append(make(module, "FetchableTopicResponse", topic=fetch_topic.topic, partitions=tuple(partitions)))
    except BaseException:
        unsent.release(granted)
        raise
    if request.charge is not None:  # what the answer holds, until the listener saw it taken
        unsent.settle(granted, total)
        request.charge.set(unsent, total)
    else:
        unsent.release(granted)
    response = make(module, "FetchResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none, session_id=0,
                    responses=tuple(topics))
    return response, total, failed


def _read_partition(broker: KafkaBroker, module: Any, topic: str, wanted: Any, max_bytes: int,
                    isolation: FetchIsolation, first: bool) -> Any:
    partition = wanted.partition
    log = broker.log(topic, partition)
    if log is None:
        return _error(module, partition, broker.absent_log_error(topic, partition))
    if broker.lost_ownership(log) is not None or broker.awaiting_claim(log) is not None:
        # Another data dir owns the partition: this one's records past the handover are not the partition's (a
        # deposed Kafka leader's log diverges the same way, and it answers reads so too). Or the start is still
        # claiming it, which may find that.
        return _error(module, partition, ErrorCode.not_leader_or_follower, log)
    epoch_error = current_leader_epoch_error(getattr(wanted, "current_leader_epoch", -1), log)
    if epoch_error is not ErrorCode.none:
        return _error(module, partition, epoch_error, log)
    try:
        info = log.read(wanted.fetch_offset, max_bytes, isolation, min_one_message=first)
        records = bytes(info.records)
    except Exception as exc:
        code = error_code(exc)
        if code in _LOGGED_CODES:
            _log_failed_read(topic, partition, wanted.fetch_offset, code, exc)
        return _error(module, partition, code, log)
    aborted = None
    if isolation is FetchIsolation.TXN_COMMITTED:
        aborted = tuple(make(module, "AbortedTransaction", producer_id=txn.producer_id, first_offset=txn.first_offset)
                        for txn in info.aborted_transactions or ())
    return make(module, "PartitionData", partition_index=partition, error_code=ErrorCode.none,
                high_watermark=log.high_watermark, last_stable_offset=log.last_stable_offset,
                log_start_offset=log.log_start_offset, aborted_transactions=aborted,
                preferred_read_replica=_NO_REPLICA, records=records)


def _log_failed_read(topic: str, partition: int, offset: int, code: ErrorCode, exc: Exception) -> None:
    key = (topic, partition, offset, f"{type(exc).__name__}: {exc}")
    if key in _logged:
        return
    if len(_logged) >= _LOGGED_MAX:
        _logged.clear()
    _logged.add(key)
    logger.error("a fetch of %s-%d at offset %d is answered %s: %s", topic, partition, offset, code.name.upper(),
                 key[3], exc_info=logger.isEnabledFor(logging.DEBUG))


def _error(module: Any, partition: int, code: ErrorCode, log: Any = None) -> Any:
    return make(module, "PartitionData", partition_index=partition, error_code=code,
                high_watermark=log.high_watermark if log is not None else -1,
                last_stable_offset=log.last_stable_offset if log is not None else -1,
                log_start_offset=log.log_start_offset if log is not None else -1,
                aborted_transactions=None, preferred_read_replica=_NO_REPLICA, records=b"")
