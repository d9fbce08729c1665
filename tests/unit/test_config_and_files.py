"""LogConfig, the feature gate, and the small Kafka files (checkpoints, partition.metadata, snapshots) against
the golden Kafka 4.0 log dir, byte for byte."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from local.checkpoint import (
    CleanShutdownFile,
    EpochEntry,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    decode_checkpoint,
    encode_checkpoint,
)
from local.config import LogConfig, parse_properties
from local.epoch import LeaderEpochFileCache
from local.errors import ConfigError, CorruptCheckpointError, CorruptSnapshotError, FeatureDowngradeError
from local.features import finalize, large_index_finalized, read_features
from local.producer_state import SnapshotEntry, decode_snapshot, encode_snapshot


def test_defaults_match_kafka(tmp_path: Path) -> None:
    cfg = LogConfig.from_properties({"log.dirs": str(tmp_path)})
    t = cfg.topic_config()
    assert (t.segment_bytes, t.segment_ms, t.retention_ms, t.retention_bytes) == (2**30, 604_800_000, 604_800_000, -1)
    assert (t.index_interval_bytes, t.segment_index_bytes, t.file_delete_delay_ms) == (4096, 10 * 2**20, 60_000)
    assert (t.max_message_bytes, t.local_retention_ms, t.local_retention_bytes) == (1_048_588, -2, -2)
    assert cfg.log_retention_check_interval_ms == 300_000
    assert cfg.remote_log_index_file_cache_total_size_bytes == 2**30
    assert cfg.remote_log_metadata_custom_metadata_max_bytes == 128
    assert cfg.num_segment_loading_threads_per_data_dir == 1


def test_properties_parsing_and_precedence(tmp_path: Path) -> None:
    text = (
        "# comment\n! also a comment\nlog.dirs = " + str(tmp_path) + "\n"
        "log.retention.hours: 2\nlog.retention.minutes 30\n"
        "log.segment.bytes=\\\n   2097152\n"
        "rsm.config.dir=/tmp/x\\u0041\n"
    )
    props = parse_properties(text)
    assert props["log.segment.bytes"] == "2097152" and props["rsm.config.dir"] == "/tmp/xA"
    path = tmp_path / "server.properties"
    path.write_text(text)
    cfg = LogConfig.from_properties(path)
    assert cfg.topic_config().retention_ms == 30 * 60_000  # minutes win over hours
    assert cfg.topic_config().segment_bytes == 2 * 2**20
    assert cfg.rsm_config == {"dir": "/tmp/xA"}
    assert LogConfig.from_properties({"log.dirs": "a", "log.retention.ms": "5", "log.retention.hours": "1"}).topic_config().retention_ms == 5


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("log.segment.bytes", "100", "must be at least 1048576"),
        ("log.segment.bytes", "abc", "expected a whole number"),
        ("log.preallocate", "yes", "expected true or false"),
        ("log.message.timestamp.type", "Now", "must be one of CreateTime, LogAppendTime"),
        ("num.segment.loading.threads.per.data.dir", "0", "must be at least 1"),
    ],
)
def test_invalid_values_name_key_value_and_range(tmp_path: Path, key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        LogConfig.from_properties({"log.dirs": str(tmp_path), key: value})
    assert key in str(info.value) and value in str(info.value) and message in str(info.value)


def test_topic_overrides_and_local_retention_inheritance(tmp_path: Path) -> None:
    cfg = LogConfig.from_properties({"log.dirs": str(tmp_path), "log.retention.bytes": "5000000"})
    t = cfg.topic_config({"segment.bytes": 2**21, "remote.storage.enable": "true"})
    assert t.segment_bytes == 2**21 and t.remote_storage_enable
    assert t.effective_local_retention_bytes == 5_000_000  # -2 inherits retention.bytes
    with pytest.raises(ConfigError, match=r"local\.retention\.bytes"):
        cfg.topic_config({"remote.storage.enable": "true", "local.retention.bytes": "9000000"})
    with pytest.raises(ConfigError, match="Unknown topic configuration"):
        cfg.topic_config({"segment.byte": 1})


def test_unknown_broker_key_is_warned(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        LogConfig.from_properties({"log.dirs": str(tmp_path), "log.segmnet.bytes": "1"})
    assert "log.segmnet.bytes" in caplog.text


def test_large_segments_need_the_finalized_feature(tmp_path: Path) -> None:
    props = {"log.dirs": str(tmp_path / "a"), "log.segment.bytes": str(3 * 2**30)}
    with pytest.raises(ConfigError, match=r"features upgrade --release-version 4\.4"):
        LogConfig.from_properties(props)
    assert not large_index_finalized([tmp_path / "a"])
    finalize([tmp_path / "a"], "4.4")
    finalize([tmp_path / "a"], "4.4")  # idempotent
    cfg = LogConfig.from_properties(props)
    assert cfg.large_index_enabled and cfg.topic_config().segment_bytes == 3 * 2**30
    assert read_features(tmp_path / "a").release_version == "4.4"
    with pytest.raises(FeatureDowngradeError, match="never go down"):
        finalize([tmp_path / "a"], "4.0")
    with pytest.raises(ConfigError, match=r"known: 4\.0, 4\.4"):
        finalize([tmp_path / "a"], "9.9")


def test_golden_text_files_round_trip_byte_for_byte(golden_dir: Path) -> None:
    for rel in ("foo-0/leader-epoch-checkpoint", "__cluster_metadata-0/leader-epoch-checkpoint"):
        path = golden_dir / rel
        original = path.read_bytes()
        entries = LeaderEpochCheckpointFile(path).read()
        assert entries
        LeaderEpochCheckpointFile(path).write(entries)
        assert path.read_bytes() == original
    assert LeaderEpochCheckpointFile(golden_dir / "foo-0/leader-epoch-checkpoint").read() == [EpochEntry(0, 0), EpochEntry(2, 3)]
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint", "log-start-offset-checkpoint"):
        path = golden_dir / name
        original = path.read_bytes()
        OffsetCheckpointFile(path).write(OffsetCheckpointFile(path).read())
        assert path.read_bytes() == original
    meta = golden_dir / "foo-0/partition.metadata"
    original = meta.read_bytes()
    topic_id = PartitionMetadataFile(meta).read()
    assert PartitionMetadataFile.encode(topic_id) == original
    assert CleanShutdownFile(golden_dir / ".kafka_cleanshutdown").exists()
    assert CleanShutdownFile(golden_dir / ".kafka_cleanshutdown").read() >= 0


def test_golden_snapshots_round_trip(golden_dir: Path) -> None:
    data = (golden_dir / "foo-0/00000000000000000003.snapshot").read_bytes()
    entries = decode_snapshot(data)
    assert len(data) == 56 and len(entries) == 1
    e = entries[0]
    assert (e.producer_id, e.producer_epoch, e.last_sequence, e.last_offset, e.current_txn_first_offset) == (0, 0, 2, 2, -1)
    assert encode_snapshot(entries) == data
    empty = (golden_dir / "__cluster_metadata-0/00000000000000000116.snapshot").read_bytes()
    assert empty == bytes.fromhex("000148674bc700000000") == encode_snapshot([])
    bad = bytearray(data)
    bad[-1] ^= 1
    with pytest.raises(CorruptSnapshotError, match="crc"):
        decode_snapshot(bytes(bad))
    with pytest.raises(CorruptSnapshotError, match="version"):
        decode_snapshot(b"\x00\x07" + data[2:])


def test_checkpoint_errors() -> None:
    assert decode_checkpoint("", str) == []
    with pytest.raises(CorruptCheckpointError, match="version"):
        decode_checkpoint("1\n0\n", str)
    with pytest.raises(CorruptCheckpointError, match="expected 2 entries"):
        decode_checkpoint("0\n2\na\n", str)
    with pytest.raises(CorruptCheckpointError, match="malformed line 3"):
        decode_checkpoint("0\n1\nx y z\n", lambda line: int(line))
    assert encode_checkpoint(["1 2"]) == "0\n1\n1 2\n"


def test_leader_epoch_cache_rules(tmp_path: Path) -> None:
    cache = LeaderEpochFileCache("t-0", LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint"))
    cache.assign(0, 0)
    cache.assign(1, 10)
    cache.assign(1, 12)  # same epoch, later offset: ignored
    cache.assign(3, 20)
    assert [(e.epoch, e.start_offset) for e in cache.epoch_entries()] == [(0, 0), (1, 10), (3, 20)]
    assert cache.end_offset_for(1, 30) == (1, 20)
    assert cache.end_offset_for(2, 30) == (1, 20)
    assert cache.end_offset_for(3, 30) == (3, 30)
    assert cache.end_offset_for(4, 30) == (-1, -1)
    assert cache.epoch_for_offset(15) == 1
    cache.truncate_from_start(15)
    assert cache.epoch_entries()[0] == EpochEntry(1, 15)
    cache.truncate_from_end(20)
    assert cache.latest_epoch() == 1
    assert LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint").read() == cache.epoch_entries()
    cache.assign(2, 5)  # a lower start offset drops the conflicting later entries
    assert cache.epoch_entries() == [EpochEntry(2, 5)]


@given(st.lists(st.builds(SnapshotEntry, st.integers(0, 2**63 - 1), st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1),
                          st.integers(-1, 2**63 - 1), st.integers(0, 2**31 - 1), st.integers(-1, 2**63 - 1),
                          st.integers(-1, 2**31 - 1), st.integers(-1, 2**63 - 1)), max_size=20))
def test_snapshot_codec_round_trip(entries: list[SnapshotEntry]) -> None:
    assert decode_snapshot(encode_snapshot(entries)) == entries


def test_log_dirs_as_bytes_are_refused_and_a_list_of_paths_is_a_list(tmp_path: Path) -> None:
    """str() of bytes or of a list made one data dir named by its repr (``b'/x'``, ``['/x']``), relative to the
    working directory, where the records then went."""
    for bad in (str(tmp_path).encode(), [str(tmp_path).encode()], 5):
        with pytest.raises(ConfigError, match=r"log\.dirs"):
            LogConfig.from_properties({"log.dirs": bad})
    a, b = tmp_path / "a", tmp_path / "b"
    assert LogConfig.from_properties({"log.dirs": [str(a), b]}).log_dirs == [a, b]
    assert LogConfig.from_properties({"log.dirs": a}).log_dirs == [a]
