"""InitProducerId for idempotent producers, and the producer ids this node hands out.

An idempotent producer (``enable.idempotence``, the default of current clients) asks for a producer id once and
then numbers its batches; the engine's producer state (:mod:`local.producer_state`) checks the sequences on append
and answers a retried batch with its first offsets. An id must never be handed out twice, restarts included: ids
are taken in blocks of :data:`BLOCK_SIZE` (Kafka's ``ProducerIdManager`` does the same through its controller),
and the end of the current block is written to ``kafka-producer-id-block`` in the first data dir (temp file, fsync,
rename) before any id of it is given. A restart starts at the next block; the first block is also placed above
every producer id the loaded logs already hold (a data dir written by Kafka, or one without the file).

A transactional id goes to the transaction coordinator (:mod:`tiered.kafka.transactions`), which takes its
producer ids from the same allocator.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from local.checkpoint import atomic_write
from tiered.kafka.broker import KafkaBroker
from tiered.kafka.protocol import NO_THROTTLE, Request, make

logger = logging.getLogger(__name__)

BLOCK_SIZE = 1000
BLOCK_FILENAME = "kafka-producer-id-block"


class ProducerIdManager:
    """Hands out producer ids, durable across restarts (see the module docstring)."""

    def __init__(self, broker: KafkaBroker) -> None:
        self._broker = broker
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0  # exclusive end of the block in hand

    def _path(self) -> Path:
        return Path(self._broker.manager.live_dirs[0]) / BLOCK_FILENAME

    def _stored_end(self) -> int:
        try:
            return int(self._path().read_text().strip() or 0)
        except FileNotFoundError:
            return 0
        except ValueError as exc:
            raise ValueError(f"{self._path()} does not hold a producer id: {exc}") from None

    def _highest_in_logs(self) -> int:
        highest = -1
        for log in self._broker.manager.all_logs():
            producers = log.producer_state_manager.active_producers
            if producers:
                highest = max(highest, max(producers))
        return highest

    def next_id(self) -> int:
        with self._lock:
            if self._next >= self._end:
                start = max(self._stored_end(), self._highest_in_logs() + 1, self._end)
                end = start + BLOCK_SIZE
                atomic_write(self._path(), f"{end}\n".encode())
                self._next, self._end = start, end
            producer_id = self._next
            self._next += 1
            return producer_id


def handle_init_producer_id(broker: KafkaBroker, request: Request) -> Any:
    module = request.response_module
    if request.body.transactional_id is not None:
        from tiered.kafka.transactions import init_transactional_producer

        return init_transactional_producer(broker, request)
    assert broker.producer_ids is not None
    producer_id = broker.producer_ids.next_id()
    return make(module, "InitProducerIdResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                producer_id=producer_id, producer_epoch=0)
