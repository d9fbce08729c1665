"""Bad and hostile input on the Kafka listener's wire: each case closes (or answers) its own connection, within the
bounds, and another client is served right after, by the same server.

Cases: truncated frames, sizes past ``socket.request.max.bytes`` or negative, unknown API keys, versions not
served, bodies that do not parse, random bytes (hypothesis, against the parser and against the server), a sender
that stalls mid-request and an idle connection (``connections.max.idle.ms``), a client that never reads its
responses, more connections than ``max.connections``, a request larger than the whole ``queued.max.request.bytes``
budget, and a handler that fails.
"""

from __future__ import annotations

import io
import socket
import struct
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import Records

from local.records import MemoryRecords, SimpleRecord
from tests.kafkautil import (
    LIMIT,
    RawClient,
    build,
    encode_request,
    fetch_request,
    listener,
    metadata_request,
    produce_request,
)
from tiered.kafka.dispatcher import SUPPORTED
from tiered.kafka.protocol import ProtocolError, parse_request
from tiered.kafka.wire_check import check_lengths

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))


def _served(address: str) -> bool:
    """A new connection gets an ApiVersions answer."""
    with RawClient(address) as client:
        response = client.call(18, 3, build(18, 3, client_software_name="probe", client_software_version="1"))
    return response.error_code == ErrorCode.none


@pytest.fixture
def kafka(tmp_path: Path):
    with listener(tmp_path, **{"socket.request.max.bytes": str(1024 * 1024)}) as k:
        yield k


def _frame(api_key: int, version: int, body: bytes, correlation: int = 1) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation, 4) + b"test"
    return struct.pack(">i", len(header) + len(body)) + header + body


@pytest.mark.parametrize("data", [
    pytest.param(struct.pack(">i", 2**31 - 1) + b"x" * 10, id="size-past-the-limit"),
    pytest.param(struct.pack(">i", -5), id="negative-size"),
    pytest.param(_frame(999, 0, b""), id="unknown-api-key"),
    pytest.param(_frame(0, 2, b"\0" * 20), id="produce-v2-no-longer-served"),
    pytest.param(_frame(1, 13, b"\0" * 20), id="fetch-above-ours"),
    pytest.param(_frame(3, 4, b"\x7f\xff\xff\xff"), id="array-length-past-the-body"),
    pytest.param(_frame(0, 9, b"\x05\xff\xff"), id="flexible-body-cut-short"),
    pytest.param(struct.pack(">i", 3) + b"\0\0\0", id="frame-shorter-than-a-header"),
])
def test_a_bad_request_closes_only_its_connection(kafka, data):
    with RawClient(kafka.address) as bad:
        bad.send(data)
        assert bad.closed_by_server()
    assert _served(kafka.address)


def test_a_request_not_served_is_said_once_per_client_and_kind(kafka, caplog):
    """A KIP-848 consumer (group.protocol=consumer) is never assigned and an old producer times out: their
    connections are closed, as Kafka does, and neither client says why (a helper's pass). The broker says it once
    per client and request kind, with the way out where there is one."""
    import logging

    with caplog.at_level(logging.WARNING, logger="tiered.kafka"):
        for data in (_frame(68, 0, b"\0" * 20), _frame(68, 0, b"\0" * 20), _frame(0, 2, b"\0" * 20), _frame(999, 0, b"")):
            with RawClient(kafka.address) as bad:
                bad.send(data)
                assert bad.closed_by_server()
    said = [r.getMessage() for r in caplog.records if "its connection is closed" in r.getMessage()]
    assert len(said) == 3, said
    assert "client id 'test'" in said[0] and "ConsumerGroupHeartbeat (API key 68) v0" in said[0]
    assert "group.protocol=classic" in said[0]
    low, high = SUPPORTED[0]
    assert "Produce (API key 0) v2" in said[1] and f"it serves {low} to {high}" in said[1]
    assert "(API key 999)" in said[2] and "an API this broker does not serve" in said[2]
    assert _served(kafka.address)


def test_a_truncated_frame_then_a_closed_socket(kafka):
    with RawClient(kafka.address) as bad:
        bad.send(struct.pack(">i", 1000) + b"\0" * 10)
    assert _served(kafka.address)
    budget = kafka.server._budget
    deadline = time.monotonic() + LIMIT
    while budget.free != budget.total and time.monotonic() < deadline:  # the close is handled on the loop
        time.sleep(0.01)
    assert budget.free == budget.total  # the bytes it held were given back


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200), st.sampled_from(sorted(SUPPORTED)), st.integers(-2, 20))
def test_random_bodies_either_parse_or_raise_protocol_error(body, api_key, version):
    frame = struct.pack(">hhih", api_key, version, 1, -1) + body
    try:
        parse_request(frame, SUPPORTED)
    except ProtocolError:
        pass


def _uvarint(value: int) -> bytes:
    out = b""
    while value > 0x7F:
        out += bytes([value & 0x7F | 0x80])
        value >>= 7
    return out + bytes([value])


_HUGE_COUNTS = [
    # a Produce v9 body (flexible): transactional id null, acks, timeout, then a compact array count of 2**32 - 1
    (0, 9, b"\x00\x00\x02\x00\x00\x75\x30" + _uvarint(2**32)),
    # a Fetch v12 body whose topics array announces 2**31 - 1 elements
    (1, 12, struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 0, 0, -1) + _uvarint(2**31)),
    # a legacy (int32) count: Metadata v4's topics
    (3, 4, struct.pack(">i", 2**31 - 1)),
]


def _flexible_frame(api_key: int, version: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, 1, 4) + b"test" + b"\x00"  # header v2: no tagged fields
    return struct.pack(">i", len(header) + len(body)) + header + body


def test_a_huge_array_count_closes_its_connection_and_the_server_lives(tmp_path):
    """kio's native decoder reserves memory for an announced count; for 2**32 elements the allocation fails and
    aborts the process. The listener runs in a child process here, so that failure fails this test, not pytest."""
    import subprocess
    import sys

    frames = [(_flexible_frame(k, v, b) if v >= 9 or k == 1 else _frame(k, v, b)) for k, v, b in _HUGE_COUNTS]
    script = f"""
import sys
from pathlib import Path
from tests.kafkautil import RawClient, build, listener
with listener(Path({str(tmp_path)!r})) as kafka:
    for frame in {frames!r}:
        with RawClient(kafka.address) as bad:
            bad.send(frame)
            assert bad.closed_by_server()
    with RawClient(kafka.address) as good:
        assert good.call(18, 3, build(18, 3, client_software_name="probe", client_software_version="1")).api_keys
print("served")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=10 * LIMIT,
                          cwd=Path(__file__).resolve().parents[2])
    assert (done.returncode, done.stdout.strip()) == (0, "served"), done.stderr[-2000:]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from([(k, v) for k, (low, high) in sorted(SUPPORTED.items()) for v in range(low, high + 1)])
       .flatmap(lambda kv: st.from_type(load_request_schema(*kv))))
def test_the_length_walk_ends_where_kio_encoded_every_request_served(entity):
    from kio.serial import entity_writer

    cls = type(entity)
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, entity)
    data = b"hdr" + buffer.getvalue()
    assert check_lengths(cls, data, 3) == len(data)
    if len(data) > 4:
        with pytest.raises(ValueError):
            check_lengths(cls, data[:-1], 3)  # one byte short: a length or a field passes the end


def test_random_frames_never_stop_the_server(tmp_path):
    import random

    rng = random.Random(32)
    with listener(tmp_path) as kafka:
        for _ in range(60):
            key = rng.choice([*SUPPORTED, 999])
            low, high = SUPPORTED.get(key, (0, 0))
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64)))
            with RawClient(kafka.address) as client:
                client.send(_frame(key, rng.randint(low, high), body))
                client.sock.shutdown(socket.SHUT_WR)
                while client.read_frame() is not None:  # an answer (some bodies parse) or a close
                    pass
        assert _served(kafka.address)


def test_a_stalled_sender_and_an_idle_connection_are_closed(tmp_path):
    with (listener(tmp_path, **{"connections.max.idle.ms": "300"}) as kafka, RawClient(kafka.address) as stalled,
          RawClient(kafka.address) as idle):
        stalled.send(struct.pack(">i", 100) + b"\0" * 10)  # and never the rest
        started = time.monotonic()
        assert stalled.closed_by_server()
        assert idle.closed_by_server()
        assert time.monotonic() - started < LIMIT
        assert _served(kafka.address)


def test_a_client_that_never_reads_is_bounded_and_closed(tmp_path):
    with listener(tmp_path, **{"connections.max.idle.ms": "1000"}) as kafka:
        with RawClient(kafka.address) as client:
            client.call(0, 9, produce_request(9, "t", 0, bytes(MemoryRecords.build(
                [SimpleRecord(b"v" * 100_000) for _ in range(5)]))))
        reader = RawClient(kafka.address)
        reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        request = encode_request(1, 12, fetch_request(12, {"t": {0: 0}}))
        try:
            for _ in range(200):  # ~100 MB of answers asked for, none read
                reader.sock.sendall(request)
        except OSError:
            pass  # the server closed it while we were still sending
        assert _served(kafka.address)  # others are served meanwhile
        # the server stops writing to it (its buffer is bounded by drain), and closes it after the idle bound
        reader.sock.settimeout(LIMIT)
        received = 0
        while True:
            try:
                chunk = reader.sock.recv(1 << 20)
            except OSError:
                break
            if not chunk:
                break
            received += len(chunk)
        reader.close()
        assert received < 200 * 500_000  # far from every answer: it was cut off
        assert _served(kafka.address)


def test_answers_clients_never_read_are_bounded_together(tmp_path):
    """Each client that sends a fetch and never reads pinned a whole answer (up to fetch.max.bytes): a few hundred
    sockets grew the broker by gigabytes. Answers not yet taken count against queued.max.request.bytes now: once
    they fill it, a fetch gets one batch (KIP-74's progress), and whole answers again when they are taken. (The
    bound is larger than what loopback's socket buffers absorb, so an answer no one reads stays in the process.)"""
    wmem_max = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    bound = max(8 * 1024 * 1024, 2 * wmem_max + 1024 * 1024)  # past what the kernel takes of one answer
    props = {"queued.max.request.bytes": str(bound), "socket.request.max.bytes": str(1024 * 1024),
             "connections.max.idle.ms": "60000"}
    wide = 4 * bound
    with listener(tmp_path, **props) as kafka:
        with RawClient(kafka.address) as client:
            client.call(3, 12, metadata_request(12, ["t"]))
            for _ in range(bound // 100_000 + 40):  # batches of ~100 KB, more than the bound holds
                client.call(0, 9, produce_request(9, "t", 0, bytes(MemoryRecords.build(
                    [SimpleRecord(b"v" * 100_000)]))))
        big = encode_request(1, 12, fetch_request(12, {"t": {0: 0}}, partition_max_bytes=wide))
        silent = []
        try:
            for _ in range(4):
                reader = RawClient(kafka.address)
                reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                reader.sock.sendall(big)
                silent.append(reader)
            deadline = time.monotonic() + LIMIT
            while kafka.broker.unsent.held < bound and time.monotonic() < deadline:
                time.sleep(0.01)
            held = kafka.broker.unsent.held
            assert bound <= held < bound + 4 * 200_000  # the answers no one takes fill the bound, and no more
            with RawClient(kafka.address) as client:  # a reading client makes progress: one batch at a time
                answer = client.call(1, 12, fetch_request(12, {"t": {0: 0}}, partition_max_bytes=wide))
                assert 0 < len(answer.responses[0].partitions[0].records) < 200_000
        finally:
            for reader in silent:
                reader.close()
        deadline = time.monotonic() + LIMIT
        while kafka.broker.unsent.held and time.monotonic() < deadline:
            time.sleep(0.01)
        assert kafka.broker.unsent.held == 0
        with RawClient(kafka.address) as client:  # taken or dropped: whole answers again
            answer = client.call(1, 12, fetch_request(12, {"t": {0: 0}}, partition_max_bytes=wide))
            assert len(answer.responses[0].partitions[0].records) > bound - 200_000


def test_more_connections_than_max_connections(tmp_path):
    with listener(tmp_path, **{"max.connections": "3"}) as kafka:
        held = [RawClient(kafka.address) for _ in range(3)]
        try:
            for client in held:  # the three are accepted and served
                assert client.call(3, 12, metadata_request(12, [])).brokers
            extra = RawClient(kafka.address)
            assert extra.closed_by_server()
            extra.close()
            assert kafka.server.connections_refused >= 1
        finally:
            for client in held:
                client.close()
        deadline = time.monotonic() + LIMIT
        while len(kafka.server._connections) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _served(kafka.address)


def test_many_connections_do_not_starve_a_new_client(kafka):
    held = [RawClient(kafka.address) for _ in range(200)]
    try:
        for client in held[::20]:
            assert client.call(3, 12, metadata_request(12, [])).brokers
        assert _served(kafka.address)
    finally:
        for client in held:
            client.close()


def test_a_request_larger_than_the_queued_bytes_budget_is_still_served(tmp_path):
    props = {"queued.max.request.bytes": "1024", "socket.request.max.bytes": str(4 * 1024 * 1024)}
    with listener(tmp_path, **props) as kafka, RawClient(kafka.address) as client:
        client.call(3, 12, metadata_request(12, ["t"]))
        records = bytes(MemoryRecords.build([SimpleRecord(b"x" * 100_000)]))
        (p,) = client.call(0, 9, produce_request(9, "t", 0, records)).responses[0].partition_responses
        assert p.error_code == ErrorCode.none
        assert kafka.server._budget.free == 1024


def test_size_prefixes_alone_hold_none_of_the_queued_bytes_budget(tmp_path):
    """Connections that send only a size prefix announcing a large request, and nothing more, held the whole
    ``queued.max.request.bytes`` budget until ``connections.max.idle.ms``: every other client's next request waited
    behind them (24 bytes from six sockets stopped a broker for ten minutes). The budget is charged as a body
    arrives now: the others are served, and the budget is whole again once each request is answered."""
    props = {"queued.max.request.bytes": str(4 * 1024 * 1024), "socket.request.max.bytes": str(2 * 1024 * 1024)}
    with listener(tmp_path, **props) as kafka:
        announcers = [RawClient(kafka.address) for _ in range(4)]
        try:
            for client in announcers:  # 4 x 2 MiB announced: twice the budget
                client.send(struct.pack(">i", 2 * 1024 * 1024))
            partial = RawClient(kafka.address)
            partial.send(struct.pack(">i", 2 * 1024 * 1024) + bytes(1024 * 1024))  # half a body: half held
            announcers.append(partial)
            deadline = time.monotonic() + LIMIT
            while kafka.server._budget.free > 3 * 1024 * 1024 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert kafka.server._budget.free == 3 * 1024 * 1024  # only the bytes that arrived are charged
            assert _served(kafka.address)
            with RawClient(kafka.address) as client:
                client.call(3, 12, metadata_request(12, ["t"]))  # (creates the topic)
                records = bytes(MemoryRecords.build([SimpleRecord(b"x" * 100_000)]))
                (p,) = client.call(0, 9, produce_request(9, "t", 0, records)).responses[0].partition_responses
                assert p.error_code == ErrorCode.none
        finally:
            for client in announcers:
                client.close()
        deadline = time.monotonic() + LIMIT
        while kafka.server._budget.free != 4 * 1024 * 1024 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert kafka.server._budget.free == 4 * 1024 * 1024  # the closed half body gave its bytes back


def test_a_failing_handler_closes_its_connection_and_nothing_else(kafka, monkeypatch):
    from tiered.kafka import dispatcher

    def broken(broker, request):
        raise RuntimeError("a bug")

    low, high, _ = dispatcher.APIS[3]
    monkeypatch.setitem(dispatcher.APIS, 3, (low, high, broken))
    with RawClient(kafka.address) as client:
        client.send(encode_request(3, 12, metadata_request(12, [])))
        assert client.closed_by_server()
    assert _served(kafka.address)


def test_a_connection_waiting_for_its_answer_is_not_idle(tmp_path):
    """A JoinGroup waits for a rebalance longer than connections.max.idle.ms: its connection stays open."""
    from tests.kafkautil import decode_response, ms

    def join(client, member_id, correlation=1):
        body = build(11, 5, group_id="g", session_timeout=ms(30_000), rebalance_timeout=ms(60_000),
                     member_id=member_id, group_instance_id=None, protocol_type="consumer",
                     protocols=(build(11, 5, "JoinGroupRequestProtocol", name="range", metadata=b""),))
        client.send(encode_request(11, 5, body, correlation))

    props = {"connections.max.idle.ms": "300", "group.initial.rebalance.delay.ms": "0"}
    with listener(tmp_path, **props) as kafka, RawClient(kafka.address) as a:
        first = a.call(11, 5, build(11, 5, group_id="g", session_timeout=ms(30_000), rebalance_timeout=ms(60_000),
                                    member_id="", group_instance_id=None, protocol_type="consumer",
                                    protocols=(build(11, 5, "JoinGroupRequestProtocol", name="range", metadata=b""),)))
        join(a, first.member_id)
        joined = decode_response(11, 5, a.read_frame())[1]
        assert joined.generation_id == 1
        with RawClient(kafka.address) as b:
            second = decode_response(11, 5, (b.send(encode_request(11, 5, build(
                11, 5, group_id="g", session_timeout=ms(30_000), rebalance_timeout=ms(60_000), member_id="",
                group_instance_id=None, protocol_type="consumer",
                protocols=(build(11, 5, "JoinGroupRequestProtocol", name="range", metadata=b""),)), 2)),
                b.read_frame())[1])[1]
            join(b, second.member_id, 3)  # waits for the first member to rejoin
            time.sleep(0.9)  # three idle bounds: the subject of the test is this bound
            assert a.closed_by_server()  # the first member's connection was idle meanwhile: closed
            with RawClient(kafka.address) as again:  # a member id outlives its connection
                join(again, joined.member_id, 4)
                assert decode_response(11, 5, again.read_frame())[1].generation_id == 2
            frame = b.read_frame()
            assert frame is not None, "the waiting connection was closed as idle"
            assert decode_response(11, 5, frame)[1].generation_id == 2


def test_stop_with_requests_waiting_closes_them_quietly(tmp_path, caplog):
    """tiered run's stop with a JoinGroup waiting for a rebalance, a fetch long-polling and an idle connection: each
    connection is closed, stop returns, and nothing is logged as an error (no callback fails on a cancelled answer)."""
    import logging

    from tests.kafkautil import ms

    caplog.set_level(logging.WARNING)
    with listener(tmp_path, **{"group.initial.rebalance.delay.ms": "3600000"}) as kafka:  # the join waits
        clients = [RawClient(kafka.address) for _ in range(3)]
        try:
            joiner, poller, idle = clients
            idle.call(3, 12, metadata_request(12, ["t"]))
            protocols = (build(11, 5, "JoinGroupRequestProtocol", name="range", metadata=b""),)
            join = build(11, 5, group_id="g", session_timeout=ms(30_000), rebalance_timeout=ms(60_000),
                         member_id="", group_instance_id=None, protocol_type="consumer", protocols=protocols)
            member_id = joiner.call(11, 5, join).member_id
            joiner.send(encode_request(11, 5, build(11, 5, group_id="g", session_timeout=ms(30_000),
                                                    rebalance_timeout=ms(60_000), member_id=member_id,
                                                    group_instance_id=None, protocol_type="consumer",
                                                    protocols=protocols)))
            poller.send(encode_request(1, 12, fetch_request(12, {"t": {0: 0}}, max_wait_ms=3_600_000)))
            # the listener waits for both: the join for the group's first rebalance, the fetch for data
            deadline = time.monotonic() + LIMIT
            while not kafka.broker.appends._waiters and time.monotonic() < deadline:
                time.sleep(0.01)
            assert kafka.broker.appends._waiters
            kafka.stop()
            assert [c.closed_by_server() for c in clients] == [True, True, True]
        finally:
            for c in clients:
                c.close()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


def test_running_out_of_descriptors_to_accept_is_one_line_not_a_traceback_each_time(tmp_path, caplog):
    """Idle clients holding every descriptor made asyncio log a traceback per accept attempt: 18,299 in one run.
    The listener reports it once per interval with a count, and hands other loop errors to asyncio as before."""
    import errno
    import logging

    with listener(tmp_path) as kafka:
        server = kafka.server
        loop = server._loop
        with caplog.at_level(logging.ERROR, logger="tiered.kafka.server"):
            for _ in range(500):
                server._on_loop_error(loop, {"message": "socket.accept() out of system resource",
                                             "exception": OSError(errno.EMFILE, "Too many open files")})
        lines = [r.getMessage() for r in caplog.records if r.name == "tiered.kafka.server"]
        assert len(lines) == 1 and "cannot accept Kafka connections" in lines[0] and "ulimit -n" in lines[0]
        assert _served(kafka.address)
