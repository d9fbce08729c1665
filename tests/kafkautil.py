"""Helpers of the Kafka listener tests: a listener in this process over a fresh data dir, and a raw client that
speaks the protocol with ``kio``'s message classes (so a test can send exactly the request it means, bad ones too).
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import socket
import struct
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from local import LogConfig, LogManager

LIMIT = 60.0  # seconds: a failure bound on socket reads that answer at once when the code is right


@contextmanager
def listener(root: Path, **props: str) -> Iterator[Any]:
    """A LogManager over ``root/data`` and a Kafka listener on a free port of 127.0.0.1 (``props`` are broker keys)."""
    from tiered.kafka import start_listener

    config = LogConfig.from_properties({"log.dirs": str(root / "data"), "group.initial.rebalance.delay.ms": "0",
                                        "offsets.topic.num.partitions": "3",
                                        **props})
    manager = LogManager(config)
    kafka = start_listener(manager, config, "127.0.0.1", 0)
    try:
        yield kafka
    finally:
        kafka.stop()
        manager.close()


def request_module(api_key: int, version: int) -> Any:
    return load_payload_module(api_key, version, EntityType.request)


def build(api_key: int, version: int, class_name: str | None = None, /, **values: Any) -> Any:
    """A request entity (or a nested struct ``class_name``) of that version, from the fields it has."""
    module = request_module(api_key, version)
    cls = getattr(module, class_name) if class_name else load_request_schema(api_key, version)
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def encode_request(api_key: int, version: int, body: Any, correlation_id: int = 1, client_id: str | None = "test") -> bytes:
    cls = load_request_schema(api_key, version)
    header_class = cls.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_class)(buffer, header_class(request_api_key=api_key, request_api_version=version,
                                                     correlation_id=correlation_id, client_id=client_id))
    entity_writer(cls)(buffer, body)
    payload = buffer.getvalue()
    return struct.pack(">i", len(payload)) + payload


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    cls = load_response_schema(api_key, version)
    header, size = entity_reader(cls.__header_schema__)(frame, 0)
    body, _ = entity_reader(cls)(frame, size)
    return int(header.correlation_id), body


class RawClient:
    """One connection; :meth:`call` sends a request and reads its response."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=LIMIT)
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes | None:
        """The next response frame, or None when the server closed the connection."""
        prefix = self._read_exactly(4)
        if prefix is None:
            return None
        (size,) = struct.unpack(">i", prefix)
        return self._read_exactly(size)

    def _read_exactly(self, n: int) -> bytes | None:
        chunks = []
        while n:
            try:
                chunk = self.sock.recv(n)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def call(self, api_key: int, version: int, body: Any) -> Any:
        self._correlation += 1
        self.send(encode_request(api_key, version, body, self._correlation))
        frame = self.read_frame()
        assert frame is not None, f"the server closed the connection instead of answering API {api_key} v{version}"
        correlation, response = decode_response(api_key, version, frame)
        assert correlation == self._correlation
        return response

    def closed_by_server(self) -> bool:
        """Whether the server closed this connection (reads until EOF, bounded by LIMIT)."""
        return self.read_frame() is None


def ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def produce_request(version: int, topic: str, partition: int, records: bytes, acks: int = -1,
                    transactional_id: str | None = None) -> Any:
    data = build(0, version, "PartitionProduceData", index=partition, records=records)
    topic_data = build(0, version, "TopicProduceData", name=topic, partition_data=(data,))
    return build(0, version, acks=acks, timeout=ms(30_000), topic_data=(topic_data,), transactional_id=transactional_id)


def fetch_request(version: int, topics: Mapping[str, Mapping[int, int]], *, max_wait_ms: int = 0, min_bytes: int = 1,
                  max_bytes: int = 50 * 1024 * 1024, partition_max_bytes: int = 1024 * 1024,
                  isolation_level: int = 0, session_id: int = 0) -> Any:
    fetch_topics = []
    for topic, offsets in topics.items():
        partitions = tuple(build(1, version, "FetchPartition", partition=p, fetch_offset=o, current_leader_epoch=-1,
                                 last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=partition_max_bytes)
                           for p, o in offsets.items())
        fetch_topics.append(build(1, version, "FetchTopic", topic=topic, partitions=partitions))
    return build(1, version, replica_id=-1, max_wait=ms(max_wait_ms), min_bytes=min_bytes, max_bytes=max_bytes,
                 isolation_level=isolation_level, session_id=session_id, session_epoch=-1, topics=tuple(fetch_topics),
                 forgotten_topics_data=(), rack_id="", cluster_id=None)


def list_offsets_request(version: int, topic: str, partition: int, timestamp: int, isolation_level: int = 0) -> Any:
    p = build(2, version, "ListOffsetsPartition", partition_index=partition, current_leader_epoch=-1,
              timestamp=timestamp)
    t = build(2, version, "ListOffsetsTopic", name=topic, partitions=(p,))
    return build(2, version, replica_id=-1, isolation_level=isolation_level, topics=(t,))


def offset_for_leader_epoch_request(version: int, topic: str, partition: int, leader_epoch: int,
                                    current_leader_epoch: int = -1) -> Any:
    p = build(23, version, "OffsetForLeaderPartition", partition=partition, current_leader_epoch=current_leader_epoch,
              leader_epoch=leader_epoch)
    t = build(23, version, "OffsetForLeaderTopic", topic=topic, partitions=(p,))
    return build(23, version, replica_id=-1, topics=(t,))


def metadata_request(version: int, topics: list[str] | None, allow_auto_topic_creation: bool = True) -> Any:
    wanted = None if topics is None else tuple(build(3, version, "MetadataRequestTopic", name=t, topic_id=None)
                                               for t in topics)
    return build(3, version, topics=wanted, allow_auto_topic_creation=allow_auto_topic_creation,
                 include_topic_authorized_operations=False, include_cluster_authorized_operations=False)
