"""Real Kafka clients against ``tiered run --kafka-listen`` (issue 32), each against its own loop with no server.

The server is ``tiered run`` in a child process (its own interpreter: a pure-Python client in this process does not
share a GIL with it), with the embedded local-directory remote tier and 1 MiB segments. Records of 1 KiB.

- Produce, acks=all: kafka-python's ``KafkaProducer`` against its own encode loop (``MemoryRecordsBuilder``, the
  producer's batch encoder, on the same records: what producing costs the client without a network or a server);
  confluent-kafka's ``Producer`` against the same producer on librdkafka's in-process mock cluster
  (``test.mock.num.brokers``: librdkafka's own broker, which stores and serves batches with no disk, no
  validation, no remote tier).
- Consume from offset 0, local tier, then remote tier (after the remote tier copied the segments and local
  retention deleted them; the segment cache warm from a first read): kafka-python's ``KafkaConsumer`` against its
  own decode loop (``MemoryRecords`` over the same bytes), confluent-kafka's ``Consumer`` against the mock cluster.
- p50/p99 of one Fetch (kio request over a socket, 1 MiB max) at random offsets served from the remote tier's warm
  cache, against the same fetches at offsets of the local tier.

Every ratio is ours / baseline (higher is better; latencies: lower is better), best of ``REPEAT`` runs each.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._util import report, report_latency

RECORDS = 20_000
VALUE = b"v" * 1024
REPEAT = 3
LIMIT = 120.0
REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server:
    def __init__(self, root: Path) -> None:
        props = {
            "log.dirs": str(root / "data"), "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "local", "rsm.config.dir": str(root / "remote"),
            "log.segment.bytes": str(1024 * 1024), "remote.log.manager.task.interval.ms": "100",
            "log.retention.check.interval.ms": "100", "group.initial.rebalance.delay.ms": "0",
        }
        config = root / "broker.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        port = _free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tiered.cli", "--config", str(config), "run", "--listen", "127.0.0.1:0",
             "--kafka-listen", f"127.0.0.1:{port}"],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if raw.startswith(b"kafka listening on "):
                self.bootstrap = raw.split()[-1].decode()
                break
        else:
            raise RuntimeError("tiered run did not start its Kafka listener")

    def cpu_s(self) -> float:
        """CPU seconds the server process used so far (user + system, from /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(LIMIT)


def _server_share(server: _Server, run: Any) -> tuple[float, float]:
    """``run()``'s rate, and the share of its wall time the server process spent on a CPU (1.0: one core busy)."""
    cpu = server.cpu_s()
    start = time.perf_counter()
    rate = run()
    return rate, (server.cpu_s() - cpu) / (time.perf_counter() - start)


def _records(n: int) -> list[tuple[bytes, bytes, int]]:
    now = int(time.time() * 1000)
    return [(b"key-%06d" % i, VALUE, now) for i in range(n)]


# kafka-python -----------------------------------------------------------------------------------------------------


def _kp_produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes, int]]) -> float:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, batch_size=256 * 1024,
                             max_request_size=8 * 1024 * 1024)
    producer.send(topic, b"warm-up").get(LIMIT)
    start = time.perf_counter()
    for key, value, ts in records:
        producer.send(topic, key=key, value=value, timestamp_ms=ts)
    producer.flush()
    elapsed = time.perf_counter() - start
    producer.close()
    return len(records) / elapsed


def _kp_encode(records: list[tuple[bytes, bytes, int]]) -> tuple[float, list[bytes]]:
    from kafka.record.memory_records import MemoryRecordsBuilder

    start = time.perf_counter()
    batches = []
    builder = MemoryRecordsBuilder(2, batch_size=256 * 1024, compression_type=0)
    for key, value, ts in records:
        if builder.append(timestamp=ts, key=key, value=value, headers=[]) is None:
            builder.close()
            batches.append(builder.buffer())
            builder = MemoryRecordsBuilder(2, batch_size=256 * 1024, compression_type=0)
            builder.append(timestamp=ts, key=key, value=value, headers=[])
    builder.close()
    batches.append(builder.buffer())
    return len(records) / (time.perf_counter() - start), batches


def _kp_decode(batches: list[bytes]) -> float:
    from kafka.record.memory_records import MemoryRecords

    start = time.perf_counter()
    count = 0
    for data in batches:
        records = MemoryRecords(bytes(data))
        while (batch := records.next_batch()) is not None:
            for record in batch:
                count += record.value is not None
    return count / (time.perf_counter() - start)


def _kp_consume(bootstrap: str, topic: str, expected: int) -> float:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             fetch_max_bytes=50 * 1024 * 1024, max_partition_fetch_bytes=4 * 1024 * 1024)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got = 0
    start = time.perf_counter()
    while got < expected and time.perf_counter() - start < LIMIT:
        for records in consumer.poll(timeout_ms=500, max_records=100_000).values():
            got += len(records)
    elapsed = time.perf_counter() - start
    consumer.close()
    if got < expected:
        raise RuntimeError(f"kafka-python consumed {got} of {expected} records")
    return got / elapsed


# confluent-kafka --------------------------------------------------------------------------------------------------


def _ck_produce(conf: dict[str, Any], topic: str, records: list[tuple[bytes, bytes, int]]) -> float:
    import confluent_kafka

    producer = confluent_kafka.Producer({**conf, "acks": "all", "linger.ms": 5, "enable.idempotence": True})
    producer.produce(topic, b"warm-up")
    producer.flush(LIMIT)
    start = time.perf_counter()
    for key, value, ts in records:
        while True:
            try:
                producer.produce(topic, value=value, key=key, timestamp=ts)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(LIMIT):
        raise RuntimeError("confluent-kafka did not deliver every record")
    return len(records) / (time.perf_counter() - start)


def _ck_consume(conf: dict[str, Any], topic: str, expected: int | None = None) -> float:
    """Records/s of a consume from the earliest offset; ``expected`` None: up to the high watermark (the mock
    cluster keeps only the last few MB of a partition)."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer({**conf, "group.id": "bench", "enable.auto.commit": False,
                                         "fetch.max.bytes": 50 * 1024 * 1024})
    if expected is None:
        low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=LIMIT)
        expected = high - low
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    got = 0
    start = time.perf_counter()
    while got < expected and time.perf_counter() - start < LIMIT:
        for message in consumer.consume(10_000, 0.5):
            if message.error() is None:
                got += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    if got < expected:
        raise RuntimeError(f"confluent-kafka consumed {got} of {expected} records")
    return got / elapsed


def _mock_cluster() -> tuple[Any, str]:
    """librdkafka's in-process mock cluster, kept alive by a client handle; its bootstrap address."""
    import confluent_kafka

    holder = confluent_kafka.Producer({"test.mock.num.brokers": 1, "bootstrap.servers": ""})
    metadata = holder.list_topics(timeout=10)
    broker = next(iter(metadata.brokers.values()))
    return holder, f"{broker.host}:{broker.port}"


# Fetch latency ----------------------------------------------------------------------------------------------------


def _fetch_latencies(bootstrap: str, topic: str, offsets: list[int]) -> list[float]:
    from tests.kafkautil import RawClient, fetch_request

    out = []
    with RawClient(bootstrap) as client:
        for offset in offsets:
            request = fetch_request(12, {topic: {0: offset}}, partition_max_bytes=1024 * 1024)
            start = time.perf_counter()
            response = client.call(1, 12, request)
            out.append(time.perf_counter() - start)
            assert response.responses[0].partitions[0].records
    return out


def _list_offset(bootstrap: str, topic: str, timestamp: int) -> int:
    from tests.kafkautil import RawClient, list_offsets_request

    with RawClient(bootstrap) as client:
        return int(client.call(2, 9, list_offsets_request(9, topic, 0, timestamp)).topics[0].partitions[0].offset)


def _wait_remote(bootstrap: str, topic: str) -> int:
    deadline = time.monotonic() + LIMIT
    while time.monotonic() < deadline:
        local_start = _list_offset(bootstrap, topic, -4)
        if local_start >= RECORDS // 2:
            return local_start
        time.sleep(0.1)
    raise RuntimeError("the remote tier did not take the segments in time")


def _create_tiered(bootstrap: str, topic: str) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"remote.storage.enable": "true",
                                                               "local.retention.bytes": "1"})])
    admin.close()


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-kafka-"))
    records = _records(RECORDS)
    server = _Server(root)
    holder, mock = _mock_cluster()
    try:
        boot = server.bootstrap
        # produce, acks=all
        runs = [_server_share(server, lambda i=i: _kp_produce(boot, f"kp-{i}", records)) for i in range(REPEAT)]
        ours = max(r for r, _ in runs)
        print(f"(server CPU during kafka-python produce: {max(c for _, c in runs):.2f} of a core)")
        encode_runs = [_kp_encode(records) for _ in range(REPEAT)]
        report("kafka-python produce acks=all", ours, max(r for r, _ in encode_runs), "records/s",
               "its own batch encode loop")
        runs = [_server_share(server, lambda i=i: _ck_produce({"bootstrap.servers": boot}, f"ck-{i}", records))
                for i in range(REPEAT)]
        ours = max(r for r, _ in runs)
        print(f"(server CPU during confluent-kafka produce: {max(c for _, c in runs):.2f} of a core)")
        base = max(_ck_produce({"bootstrap.servers": mock}, f"ck-{i}", records) for i in range(REPEAT))
        report("confluent-kafka produce acks=all", ours, base, "records/s", "librdkafka's mock cluster")

        # consume, local tier
        batches = encode_runs[0][1]
        ours = max(_kp_consume(boot, "kp-0", RECORDS) for _ in range(REPEAT))
        report("kafka-python consume, local tier", ours, max(_kp_decode(batches) for _ in range(REPEAT)),
               "records/s", "its own decode loop")
        runs = [_server_share(server, lambda: _ck_consume({"bootstrap.servers": boot}, "ck-0", RECORDS))
                for _ in range(REPEAT)]
        ours = max(r for r, _ in runs)
        print(f"(server CPU during confluent-kafka consume: {max(c for _, c in runs):.2f} of a core)")
        base = max(_ck_consume({"bootstrap.servers": mock}, "ck-0") for _ in range(REPEAT))
        report("confluent-kafka consume, local tier", ours, base, "records/s",
               "librdkafka's mock cluster (the records it keeps)")

        # consume, remote tier (warm segment cache after a first read)
        _create_tiered(boot, "tiered")
        _kp_produce(boot, "tiered", records)
        local_start = _wait_remote(boot, "tiered")
        print(f"(tiered: offsets 0..{local_start - 1} in the remote tier only)")
        _kp_consume(boot, "tiered", local_start)
        ours = max(_kp_consume(boot, "tiered", RECORDS) for _ in range(REPEAT))
        report("kafka-python consume, remote tier (warm)", ours, max(_kp_decode(batches) for _ in range(REPEAT)),
               "records/s", "its own decode loop")
        ours = max(_ck_consume({"bootstrap.servers": boot}, "tiered", RECORDS) for _ in range(REPEAT))
        base = max(_ck_consume({"bootstrap.servers": mock}, "ck-0") for _ in range(REPEAT))
        report("confluent-kafka consume, remote tier (warm)", ours, base, "records/s",
               "librdkafka's mock cluster (the records it keeps)")

        # one Fetch: remote (warm cache) against local
        rng = random.Random(32)
        remote_offsets = [rng.randrange(0, local_start) for _ in range(300)]
        local_offsets = [rng.randrange(local_start, RECORDS) for _ in range(300)]
        _fetch_latencies(boot, "tiered", remote_offsets)  # warm the caches
        remote = _fetch_latencies(boot, "tiered", remote_offsets)
        local = _fetch_latencies(boot, "tiered", local_offsets)
        for name, q in (("p50", 50), ("p99", 99)):
            r = statistics.quantiles(remote, n=100)[q - 1] if q != 50 else statistics.median(remote)
            b = statistics.quantiles(local, n=100)[q - 1] if q != 50 else statistics.median(local)
            report_latency(f"Fetch 1 MiB from the remote tier, warm cache, {name}", r, b, "the local tier")
    finally:
        del holder
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
