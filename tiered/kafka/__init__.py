"""The Kafka protocol in front of the engine: ``tiered run --kafka-listen HOST:PORT`` serves real Kafka clients.

One node, the controller and the leader of every partition: producers append through :mod:`~tiered.kafka.produce`
(the engine's leader-append rules), consumers fetch the stored bytes from either tier through
:mod:`~tiered.kafka.fetch`, consumer groups (the classic protocol) keep their committed offsets in the compacted
internal topic ``__consumer_offsets`` and transactions their state in ``__transaction_state``, in Kafka's own record
formats.

Modules, one concept each: :mod:`~tiered.kafka.protocol` (frames and headers; the messages are ``kio``'s, generated
from Kafka's JSON schemas), :mod:`~tiered.kafka.server` (connections, bounds, the thread pool),
:mod:`~tiered.kafka.dispatcher` (API keys, versions, ApiVersions), :mod:`~tiered.kafka.broker` (the node and its
topics), and one module per API family. docs/kafka-protocol.md lists what is served and what is not.

:func:`start_listener` is the composition root: ``tiered run`` calls it with its running LogManager.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from local.config import LogConfig
    from local.manager import LogManager
    from tiered.kafka.broker import KafkaBroker
    from tiered.kafka.server import KafkaServer


class KafkaListener:
    """A started listener: its server and the node behind it; :meth:`stop` ends both."""

    def __init__(self, broker: KafkaBroker, server: KafkaServer) -> None:
        self.broker = broker
        self.server = server

    @property
    def address(self) -> str:
        return self.server.address

    def stop(self) -> None:
        self.broker.manager.remove_append_listener(self.broker.appends.notify)
        self.server.stop()
        if self.broker.txn_coordinator is not None:
            self.broker.txn_coordinator.close()
        if self.broker.coordinator is not None:
            self.broker.coordinator.close()


def start_listener(manager: LogManager, config: LogConfig, host: str, port: int) -> KafkaListener:
    """Listen on ``host:port`` (0: a free port) for Kafka clients of ``manager``; raises OSError when the address
    cannot be bound. The node advertises the address it bound."""
    from tiered.kafka.broker import KafkaBroker
    from tiered.kafka.dispatcher import SUPPORTED, Dispatcher
    from tiered.kafka.group_coordinator import GroupCoordinator
    from tiered.kafka.producer_ids import ProducerIdManager
    from tiered.kafka.server import KafkaServer
    from tiered.kafka.txn_coordinator import TxnCoordinator

    broker = KafkaBroker(manager, config, host, port)
    broker.producer_ids = ProducerIdManager(broker)
    dispatcher = Dispatcher(broker)
    server = KafkaServer(broker, dispatcher.handle, SUPPORTED, host, port)
    broker.host, broker.port = _advertised(server.host), server.port
    broker.coordinator = GroupCoordinator(broker)
    broker.txn_coordinator = TxnCoordinator(broker)
    try:
        broker.coordinator.load()
        broker.txn_coordinator.load()
        server.start()
        manager.add_append_listener(broker.appends.notify)  # every append wakes the fetches waiting for data
    except BaseException:
        broker.txn_coordinator.close()
        broker.coordinator.close()
        server.stop()
        raise
    return KafkaListener(broker, server)


def _advertised(host: str) -> str:
    """The host clients are told to connect to: the bound one, or this machine's name for a wildcard address."""
    import socket

    return socket.getfqdn() if host in ("0.0.0.0", "::", "") else host
