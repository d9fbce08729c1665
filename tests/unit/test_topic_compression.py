"""A topic's ``compression.type`` (Kafka's LogValidator): a codec other than ``producer`` rebuilds every client batch
in another codec in that one, keeping its records and producer fields; ``producer`` keeps the producer's bytes, and
a follower's append is never rebuilt. It was accepted, shown by ``topics describe`` and documented, and read by
nothing: a helper's gzip topic stored lz4 and zstd batches as sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from local.log import Log
from local.producer_state import AppendOrigin
from local.records import MemoryRecords, SimpleRecord
from local.records.compression import CompressionType
from tests.logutil import make_log

T0 = 1_700_000_000_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _records(n: int, label: str) -> list[SimpleRecord]:
    return [SimpleRecord(T0 + i, f"k{i}".encode(), f"{label}-{i}".encode() * 20, headers=[("h", f"{i}".encode())])
            for i in range(n)]


def _read(log: Log) -> list[tuple[CompressionType, int, int, int, bool, list[tuple[int, int, bytes | None, bytes | None, tuple[object, ...]]]]]:
    out = []
    for batch in log.batches_from(0):
        records = [(r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers)) for r in batch.records()]
        out.append((batch.compression_type, batch.producer_id, batch.producer_epoch, batch.base_sequence,
                    batch.is_transactional, records))
    return out


@pytest.mark.parametrize("topic", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("sent", CODECS)
def test_a_topic_codec_rebuilds_each_client_batch_in_it_keeping_records_and_producer_fields(
    tmp_path: Path, topic: str, sent: str
) -> None:
    log = make_log(tmp_path, compression_type=topic)
    reference = make_log(tmp_path / "ref")  # compression.type=producer: the producer's bytes as sent
    target = CompressionType.NONE if topic == "uncompressed" else CompressionType.from_name(topic)
    batches = [
        MemoryRecords.build(_records(5, "plain"), sent),
        MemoryRecords.build(_records(3, "idem"), sent, producer_id=7, producer_epoch=2, base_sequence=0),
        MemoryRecords.build(_records(2, "txn"), sent, producer_id=8, producer_epoch=0, base_sequence=0,
                            is_transactional=True),
    ]
    for records in batches:
        info = log.append(records)
        assert info.first_offset == reference.append(records).first_offset
    got, sent_as = _read(log), _read(reference)
    assert [b[0] for b in got] == [target] * 3
    assert [b[0] for b in sent_as] == [CompressionType.from_name(sent)] * 3
    assert [b[1:] for b in got] == [b[1:] for b in sent_as]  # producer fields and every record, offsets included
    # An idempotent retry of the rebuilt batch is found a duplicate: the same offsets, nothing appended.
    retry = log.append(batches[1])
    assert (retry.first_offset, retry.last_offset) == (5, 7) and log.log_end_offset == 10


def test_producer_keeps_the_producers_codec_and_a_follower_append_is_never_rebuilt(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(MemoryRecords.build(_records(2, "a"), "lz4"))
    log.append(MemoryRecords.build(_records(2, "b"), "none"))
    assert [b[0] for b in _read(log)] == [CompressionType.LZ4, CompressionType.NONE]
    follower = make_log(tmp_path / "f", compression_type="gzip")
    follower.append_as_follower(MemoryRecords.build(_records(2, "a"), "lz4"))
    assert [b[0] for b in _read(follower)] == [CompressionType.LZ4]


def test_a_transaction_marker_is_never_rebuilt(tmp_path: Path) -> None:
    """The control flag was dropped by the rebuild: a marker appended to a gzip topic became a data batch, refused
    with a misleading producer-sequence error (a review's finding). Kafka never recompresses control batches."""
    outcomes = []
    for topic in ("producer", "gzip"):
        log = make_log(tmp_path / topic, compression_type=topic)
        log.append(MemoryRecords.build(_records(2, "txn"), "lz4", producer_id=8, producer_epoch=0, base_sequence=0,
                                       is_transactional=True))
        marker = MemoryRecords.end_transaction_marker(8, 0, commit=True)
        log.append(marker, origin=AppendOrigin.COORDINATOR)
        try:
            log.append(MemoryRecords.end_transaction_marker(8, 0, commit=False))  # (a client's: as Kafka answers)
            outcomes.append("accepted")
        except Exception as exc:
            outcomes.append(type(exc).__name__)
        batches = list(log.batches_from(0))
        assert batches[1].is_control_batch and batches[1].compression_type is CompressionType.NONE
    assert outcomes[0] == outcomes[1], outcomes


@pytest.mark.parametrize(("topic", "key", "low", "high"), [("gzip", "compression.gzip.level", 1, 9),
                                                          ("zstd", "compression.zstd.level", 1, 19),
                                                          ("lz4", "compression.lz4.level", 1, 12)])
def test_a_topic_codec_rebuilds_batches_at_its_level(tmp_path: Path, topic: str, key: str, low: int, high: int) -> None:
    """KIP-390's compression.<codec>.level: refused as unknown topic keys (a helper's pass), though Kafka 4.0 has
    them and the rebuild is where they apply. A batch rebuilt at each level is the one built at that level."""
    codec = CompressionType.from_name(topic)
    records = [SimpleRecord(T0 + i, f"k{i}".encode(), (f"value {i} of the batch, " * 8).encode()) for i in range(200)]
    stored = {}
    for level in (low, high):
        log = make_log(tmp_path / str(level), compression_type=topic, **{key.replace(".", "_"): level})
        log.append(MemoryRecords.build(records))
        (batch,) = list(log.batches_from(0))
        assert batch.compression_type is codec
        assert [r.value for r in batch.records()] == [r.value for r in records]
        built = MemoryRecords.build(records, codec, compression_level=level)
        stored[level] = batch.size_in_bytes
        assert batch.size_in_bytes == built.size_in_bytes
    assert stored[low] != stored[high]  # (the levels give different bytes: the check above tells them apart)


@pytest.mark.parametrize(("key", "value"), [("compression.gzip.level", "0"), ("compression.gzip.level", "10"),
                                            ("compression.lz4.level", "18"), ("compression.zstd.level", "23"),
                                            ("compression.zstd.level", "-131073"), ("compression.lz4.level", "x")])
def test_a_compression_level_out_of_kafkas_range_is_refused_naming_the_key(key: str, value: str) -> None:
    from local.config import LogConfig
    from local.errors import ConfigError

    with pytest.raises(ConfigError, match=rf"Invalid value {value} for configuration {key}"):
        LogConfig.from_properties({"log.dirs": "/nonexistent"}).topic_config({key: value})
