"""Requests to handlers by API key, and the versions this node serves (what ApiVersions advertises).

Each entry names the handler and the inclusive version range it implements: the lowest version ``kio`` ships (Kafka
4's baseline, KIP-896) up to the highest one the handler answers completely. ApiVersions advertises exactly this
table, so a client never picks a version whose fields a handler ignores.

A handler takes the broker and the request and returns a ``kio`` response entity, :data:`NO_RESPONSE`, a
:class:`~tiered.kafka.server.WaitForAppend` whose retry answers the same way, or a ``concurrent.futures.Future`` of
any of these; the response is encoded here, on the pool thread that made it.
"""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from tiered.kafka.admin import (
    handle_create_partitions,
    handle_create_topics,
    handle_delete_records,
    handle_delete_topics,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from tiered.kafka.broker import KafkaBroker
from tiered.kafka.fetch import handle_fetch
from tiered.kafka.groups import (
    handle_describe_groups,
    handle_find_coordinator,
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_list_groups,
    handle_offset_commit,
    handle_offset_fetch,
    handle_sync_group,
)
from tiered.kafka.leader_epochs import handle_offset_for_leader_epoch
from tiered.kafka.list_offsets import handle_list_offsets
from tiered.kafka.metadata import handle_metadata
from tiered.kafka.produce import handle_produce
from tiered.kafka.producer_ids import handle_init_producer_id
from tiered.kafka.protocol import (
    API_VERSIONS_KEY,
    NO_THROTTLE,
    Request,
    encode_response,
    make,
    response_module,
)
from tiered.kafka.server import NO_RESPONSE, WaitForAppend
from tiered.kafka.transactions import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_end_txn,
    handle_txn_offset_commit,
)

Handler = Callable[[KafkaBroker, Request], Any]


def _api_versions(broker: KafkaBroker, request: Request) -> Any:
    """ApiVersions: the table below. A version above ours is answered in v0 with UNSUPPORTED_VERSION and ApiVersions'
    own range only (Kafka's rule, KIP-511: the client retries with a version both sides know); from v3 a client
    software name or version that is not Kafka's pattern is INVALID_REQUEST, as Kafka's ``isValid``."""
    version = 0 if request.unsupported_version else request.api_version
    module = response_module(18, version)
    body = request.body
    if request.unsupported_version:
        low, high, _ = APIS[API_VERSIONS_KEY]
        only = (make(module, "ApiVersion", api_key=API_VERSIONS_KEY, min_version=low, max_version=high),)
        return make(module, "ApiVersionsResponse", error_code=ErrorCode.unsupported_version, api_keys=only,
                    throttle_time=NO_THROTTLE)
    if version >= 3 and not (_SOFTWARE.fullmatch(body.client_software_name)
                             and _SOFTWARE.fullmatch(body.client_software_version)):
        return make(module, "ApiVersionsResponse", error_code=ErrorCode.invalid_request, api_keys=(),
                    throttle_time=NO_THROTTLE)
    keys = tuple(make(module, "ApiVersion", api_key=key, min_version=low, max_version=high)
                 for key, (low, high, _) in sorted(APIS.items()))
    return make(module, "ApiVersionsResponse", error_code=ErrorCode.none, api_keys=keys, throttle_time=NO_THROTTLE)


_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")  # Kafka's client software name and version


APIS: dict[int, tuple[int, int, Handler]] = {
    0: (3, 9, handle_produce),
    1: (4, 12, handle_fetch),
    2: (1, 9, handle_list_offsets),
    3: (0, 12, handle_metadata),
    8: (2, 8, handle_offset_commit),
    9: (1, 7, handle_offset_fetch),
    10: (0, 4, handle_find_coordinator),
    11: (0, 9, handle_join_group),
    12: (0, 4, handle_heartbeat),
    13: (0, 5, handle_leave_group),
    14: (0, 5, handle_sync_group),
    15: (0, 5, handle_describe_groups),
    16: (0, 4, handle_list_groups),
    18: (0, 4, _api_versions),
    19: (2, 7, handle_create_topics),
    20: (1, 5, handle_delete_topics),
    21: (0, 2, handle_delete_records),
    22: (0, 4, handle_init_producer_id),
    23: (2, 4, handle_offset_for_leader_epoch),
    24: (0, 3, handle_add_partitions_to_txn),
    25: (0, 3, handle_add_offsets_to_txn),
    26: (0, 3, handle_end_txn),
    28: (0, 3, handle_txn_offset_commit),
    32: (1, 4, handle_describe_configs),
    37: (0, 3, handle_create_partitions),
    44: (0, 1, handle_incremental_alter_configs),
}

SUPPORTED: dict[int, tuple[int, int]] = {key: (low, high) for key, (low, high, _) in APIS.items()}


class Dispatcher:
    """``handle(request)`` for :class:`~tiered.kafka.server.KafkaServer`: runs the handler and encodes."""

    def __init__(self, broker: KafkaBroker) -> None:
        self.broker = broker

    def handle(self, request: Request) -> Any:
        handler = APIS[request.api_key][2]
        return self._finish(request, handler(self.broker, request))

    def _finish(self, request: Request, result: Any) -> Any:
        if result is NO_RESPONSE:
            return NO_RESPONSE
        if isinstance(result, WaitForAppend):
            retry = result.retry
            return WaitForAppend(result.version, result.deadline, lambda: self._finish(request, retry()))
        if isinstance(result, concurrent.futures.Future):
            encoded: concurrent.futures.Future[Any] = concurrent.futures.Future()

            def done(future: concurrent.futures.Future[Any]) -> None:
                if encoded.done():  # cancelled: the connection is gone (a stop while a JoinGroup waited)
                    return
                try:
                    encoded.set_result(self._finish(request, future.result()))
                except BaseException as exc:  # the server logs it and closes the connection
                    encoded.set_exception(exc)

            result.add_done_callback(done)
            return encoded
        return encode_response(request, result)
