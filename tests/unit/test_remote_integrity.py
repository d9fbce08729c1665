"""Remote tier integrity (issue 13, items 4, 7 and 9): checksums end to end through the log, the segment cache's
disk copy checked on the way back, failed copies cleaned at the next pass without a restart, every rsm.config value
validated, secrets kept out of errors and logs, partitions limited to int32."""

from __future__ import annotations

import json
import logging
import re
import socket
import time
import traceback
import uuid
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from local import LogConfig, LogManager
from local.errors import ConfigError, CorruptRecordError
from local.filenames import parse_partition_dir_name
from local.records import MemoryRecords, SimpleRecord
from tests.logutil import local_tier_props, read_all_values
from tiered import TopicIdPartition
from tiered.backends import load_rsm
from tiered.backends.local_dir import LocalDirRemoteStorageManager, LocalDirStore
from tiered.cache.chunk_cache import ChunkCache
from tiered.cache.index_cache import RemoteIndexCache
from tiered.checksums import ObjectChecksums, SegmentChecksums
from tiered.cli import main
from tiered.composition import assemble_remote_log_manager
from tiered.errors import RemoteChecksumError, RemoteConfigError, RemoteStorageError
from tiered.layout import segment_key
from tiered.metadata import RemoteLogMetadataStore
from tiered.remote_log_manager import RemoteLogManager
from tiered.rsm import RemoteLogSegmentState
from tiered.scrub.object_checksums import verify_object_checksums

MIB = 1024 * 1024
T0 = int(time.time() * 1000) - 60_000
TOPIC_OVERRIDES = {"remote.storage.enable": "true", "local.retention.bytes": "1"}


_props = local_tier_props  # the embedded local-directory tier, 1 MiB segments


def _produce(log: Any, n: int) -> None:
    for first in range(0, n, 100):
        batch = [SimpleRecord(T0 + i, b"k%d" % i, (b"%08d" % i) * 25) for i in range(first, min(first + 100, n))]
        log.append(MemoryRecords.build(batch))


def _remote_files(tmp: Path, suffix: str) -> list[Path]:
    return sorted(p for p in (tmp / "remote").rglob(f"*{suffix}") if p.is_file())


# Checksums through the log --------------------------------------------------------------------------------------


def test_a_flipped_byte_in_a_remote_segment_is_an_error_through_log_read_never_a_wrong_value(tmp_path: Path) -> None:
    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0, TOPIC_OVERRIDES)
        _produce(log, 12_000)
        expected = read_all_values(log)
        rlm = manager.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        assert rlm.run_once(manager.all_logs()).segments_copied >= 2
        manager.cleanup_logs()
        assert log.local_log_start_offset > 0
        tip = rlm.topic_id_partition(log)
        first = rlm.finished_segments(tip)[0]
        sums = rlm.metadata.segment_checksums(first)
        assert sums is not None and sums.chunk_bytes == MIB  # the default with the 4 MiB segment cache chunks
        assert set(sums.objects) == {".log", ".index", ".timeindex", ".snapshot", "leader-epoch-checkpoint"}
        assert read_all_values(log) == expected  # verified reads of intact objects
        rlm.chunk_cache.clear()  # type: ignore[union-attr]

        key = segment_key(rlm.rsm.prefix, first, ".log")  # type: ignore[attr-defined]
        path = tmp_path / "remote" / key
        damaged = bytearray(path.read_bytes())
        damaged[700_000] ^= 0x40  # inside a record's value: its batch CRC is not what a reader would see first
        path.write_bytes(bytes(damaged))
        with pytest.raises(RemoteChecksumError) as info:
            read_all_values(log)
        assert (info.value.key, info.value.start, info.value.end) == (key, 0, min(MIB, len(damaged)) - 1)
        assert isinstance(info.value, CorruptRecordError)
        assert rlm.checksums.mismatches == 2  # fetched once more before giving up

        # A damaged offset index: the index cache downloads it, checks it, refetches once, then refuses it.
        second = rlm.finished_segments(tip)[1]
        index_path = tmp_path / "remote" / segment_key(rlm.rsm.prefix, second, ".index")  # type: ignore[attr-defined]
        raw = bytearray(index_path.read_bytes())
        raw[5] ^= 0x01
        index_path.write_bytes(bytes(raw))
        rlm.index_cache.clear()
        with pytest.raises(RemoteChecksumError, match=str(index_path.name)):
            rlm.index_cache.lookup_offset(second, second.start_offset + 10)


def test_segment_cache_chunks_damaged_on_disk_after_they_were_mapped_are_read_back_not_served(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker's remote reads: the segment cache holds the chunks it read as maps of their files, which show a
    file damaged on local disk afterwards. The cache sees the files changed since it checked and mapped them, reads
    them back (from disk against their crc32c, which fails, or straight from the store while the object's disk
    lookups are skipped after a miss) and serves the remote bytes. It served the damaged ones (every consumer fetch
    failing its CRC check) until the broker restarted."""
    import os

    from tiered.cache import disk_store

    monkeypatch.setattr(disk_store, "RECHECK_SECONDS", 0.0)  # the cache compares at every read, not once a second
    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0, TOPIC_OVERRIDES)
        _produce(log, 12_000)
        expected = read_all_values(log)
        rlm = manager.remote_tier
        assert isinstance(rlm, RemoteLogManager) and rlm.chunk_cache is not None
        assert rlm.run_once(manager.all_logs()).segments_copied >= 2
        manager.cleanup_logs()
        assert log.local_log_start_offset > 0
        assert read_all_values(log) == expected  # through the remote tier: the chunks enter the cache
        rlm.chunk_cache.flush()  # on disk, and held as maps of their files from now on
        assert read_all_values(log) == expected
        chunks = [p for p in (tmp_path / "data").rglob("*.val") if p.stat().st_size > 1000]
        assert chunks
        for chunk in chunks:
            st = chunk.stat()
            with open(chunk, "r+b") as f:  # a byte inside some record
                f.seek(st.st_size // 2)
                byte = f.read(1)
                f.seek(-1, 1)
                f.write(bytes([byte[0] ^ 0x40]))
            os.utime(chunk, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))  # not within the timestamp granularity
        fetched = rlm.chunk_cache.fetches
        assert read_all_values(log) == expected
        assert rlm.chunk_cache.fetches == fetched + len(chunks)  # each damaged chunk fetched again, the rest served


def test_a_cached_index_damaged_on_disk_is_fetched_again(tmp_path: Path) -> None:
    with LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0, TOPIC_OVERRIDES)
        _produce(log, 12_000)
        rlm = manager.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        rlm.run_once(manager.all_logs())
        md = rlm.finished_segments(rlm.topic_id_partition(log))[0]
        position = rlm.index_cache.lookup_offset(md, md.start_offset + 500)
        cached = next((tmp_path / "data" / "remote-log-index-cache").glob("*.index"))
        fetches: list[Any] = []

        def fetch_index(m: Any, t: Any) -> Any:
            fetches.append(t)
            return rlm.rsm.fetch_index(m, t)

        cache = RemoteIndexCache(tmp_path / "other", fetch_index, verifier=rlm.checksums)
        try:
            copy = cache.cache_dir / cached.name
            damaged = bytearray(cached.read_bytes())
            entry = next(i for i in range(0, len(damaged), 8) if int.from_bytes(damaged[i + 4 : i + 8], "big") == position)
            damaged[entry + 7] ^= 0x01  # the looked-up position, off by one: no sanity check can tell
            copy.write_bytes(bytes(damaged))
            assert cache.lookup_offset(md, md.start_offset + 500) == position
            assert len(fetches) == 1  # the damaged file was not used: it was fetched again
        finally:
            cache.close()
        copy.write_bytes(bytes(damaged))  # damaged again, then a restart reloads it from disk
        cache = RemoteIndexCache(tmp_path / "other", fetch_index, verifier=rlm.checksums)
        try:
            assert len(cache) == 1  # restored at start (it passes the sanity check)
            assert cache.lookup_offset(md, md.start_offset + 500) == position
            assert len(fetches) == 2  # checked once the segment was known, and fetched again
            assert cache.lookup_offset(md, md.start_offset + 500) == position and len(fetches) == 2
        finally:
            cache.close()


def test_a_segment_cache_chunk_damaged_on_disk_is_fetched_again(tmp_path: Path) -> None:
    data = bytes(range(256)) * 40  # 10 KiB: 3 chunks of 4 KiB
    calls: list[tuple[int, int]] = []

    def fetch(a: int, b: int) -> bytes:
        calls.append((a, b))
        return data[a : b + 1]

    with ChunkCache(tmp_path, chunk_size=4096, prefetch_chunks=0) as cache:
        assert cache.read("obj", len(data), 0, len(data) - 1, fetch) == data
        cache.flush()
    assert len(calls) == 3
    files = sorted(p for p in tmp_path.rglob("*.val"))
    assert len(files) == 3
    for f in files:  # a bit flip in each chunk file, behind the cache's back
        raw = bytearray(f.read_bytes())
        raw[100] ^= 0x08
        f.write_bytes(bytes(raw))
    with ChunkCache(tmp_path, chunk_size=4096, prefetch_chunks=0) as cache:  # a new process: chunks come from disk
        assert bytes(cache.read("obj", len(data), 0, len(data) - 1, fetch)) == data
        assert cache.disk_mismatches == 3 and len(calls) == 6  # each refetched once
        cache.flush()
    with ChunkCache(tmp_path, chunk_size=4096, prefetch_chunks=0) as cache:  # the refetched chunks are sound on disk
        assert bytes(cache.read("obj", len(data), 0, len(data) - 1, fetch)) == data
        assert cache.disk_mismatches == 0 and len(calls) == 6


def _offloaded(tmp_path: Path, records: int) -> tuple[dict[str, str], list[tuple[int, bytes | None]]]:
    """Partition t-0 of ``records`` records, offloaded and deleted locally (all but the active segment remote-only):
    the broker properties and every value."""
    props = _props(tmp_path)
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0, TOPIC_OVERRIDES)
        _produce(log, records)
        expected = read_all_values(log)
        manager.remote_tier.run_once(manager.all_logs())  # type: ignore[union-attr]
        manager.cleanup_logs()
        assert log.local_log_start_offset > 0
    return props, expected


def test_a_segment_copied_before_checksums_existed_still_reads(tmp_path: Path) -> None:
    props, expected = _offloaded(tmp_path, 12_000)
    for event in (tmp_path / "remote").rglob("*.json"):  # as an older version wrote them
        record = json.loads(event.read_bytes())
        record.pop("checksums", None)
        record.pop("json_crc32c", None)
        event.write_text(json.dumps(record))
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
        log = manager.get_log("t", 0)
        assert log is not None
        rlm = manager.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        segs = rlm.finished_segments(rlm.topic_id_partition(log))
        assert segs and all(rlm.metadata.segment_checksums(md) is None for md in segs)
        assert read_all_values(log) == expected
        assert verify_object_checksums(rlm.rsm, segs[0]) == []


def test_checksum_chunk_size_is_configurable_and_recorded(tmp_path: Path) -> None:
    props = _props(tmp_path, **{"rsm.config.checksum.chunk.bytes": "65536"})
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0, TOPIC_OVERRIDES)
        _produce(log, 6_000)
        rlm = manager.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        rlm.run_once(manager.all_logs())
        md = rlm.finished_segments(rlm.topic_id_partition(log))[0]
        sums = RemoteLogMetadataStore.in_bucket(rlm.rsm).segment_checksums(md)  # type: ignore[arg-type]
        assert sums is not None and sums.chunk_bytes == 65536
        assert len(sums.objects[".log"].crcs) == -(-sums.objects[".log"].size // 65536)
    with pytest.raises(ConfigError, match=r"Invalid value 100 for configuration rsm.config.checksum.chunk.bytes: must be in 4096\.\."):
        LogManager(LogConfig.from_properties(_props(tmp_path, **{"rsm.config.checksum.chunk.bytes": "100"})),
                   start_scheduler=False)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5000), st.dictionaries(st.sampled_from([".log", ".index", ".snapshot"]), st.binary(max_size=3000)))
def test_checksums_round_trip_in_both_forms(chunk: int, objects: dict[str, bytes]) -> None:
    from tiered.checksums import checksums_of_bytes

    sums = SegmentChecksums(chunk, {s: checksums_of_bytes(b, chunk) for s, b in objects.items()})
    assert SegmentChecksums.decode(sums.encode()) == sums
    assert SegmentChecksums.from_json(json.loads(json.dumps(sums.to_json()))) == sums
    for cut in range(1, min(len(sums.encode()), 20)):
        with pytest.raises(ValueError):
            SegmentChecksums.decode(sums.encode()[:-cut])
    with pytest.raises(ValueError):
        SegmentChecksums(chunk, {".log": ObjectChecksums(chunk + 1, (1,))})


# Failed copies are cleaned at the next pass, not at a restart ----------------------------------------------------


class OutageStore(LocalDirStore):
    """Goes down (every call fails, deletes included) right after storing an object whose key ends with
    ``down_after``, as an S3 outage in the middle of a copy does; ``down = False`` ends the outage."""

    down_after: str | None = None
    down = False

    def _check(self, what: str) -> None:
        if self.down:
            raise RemoteStorageError(f"{what}: connection refused (outage)", retriable=True)

    def _stored(self, key: str) -> None:
        if self.down_after is not None and key.endswith(self.down_after):
            self.down, self.down_after = True, None
            raise RemoteStorageError(f"put of {key}: connection reset", retriable=True)

    def put(self, key: str, data: bytes | BinaryIO, *, if_absent: bool = False) -> None:
        self._check(key)
        super().put(key, data, if_absent=if_absent)
        self._stored(key)

    def get(self, key: str) -> bytes:
        self._check(key)
        return super().get(key)

    def get_range(self, key: str, start: int, end_inclusive: int) -> bytes:
        self._check(key)
        return super().get_range(key, start, end_inclusive)

    def delete_many(self, keys: Any) -> None:
        keys = list(keys)
        self._check(keys[0] if keys else "delete")
        super().delete_many(keys)

    def list(self, prefix: str) -> list[str]:
        self._check(prefix)
        return super().list(prefix)


class OutageDir(LocalDirRemoteStorageManager):
    store_class = OutageStore
    store: OutageStore


@pytest.mark.parametrize("down_after", [".index", ".0.json", ".snapshot"],
                         ids=["after-log-and-index", "started-event-reply-lost", "after-snapshot"])
def test_a_copy_failing_in_an_outage_leaves_no_orphan_after_the_next_pass(tmp_path: Path, down_after: str) -> None:
    rsm = OutageDir()
    rsm.configure({"dir": str(tmp_path / "remote")})
    rlm = assemble_remote_log_manager(rsm, RemoteLogMetadataStore.in_bucket(rsm), tmp_path / "data")
    config = LogConfig.from_properties({"log.dirs": str(tmp_path / "data"), "log.segment.bytes": str(MIB)})
    with LogManager(config, remote_tier=rlm, start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0, TOPIC_OVERRIDES)
        _produce(log, 12_000)
        segments = log.number_of_segments()
        tip = rlm.topic_id_partition(log)
        rlm.run_once(manager.all_logs())  # loads the (empty) partition: the once-per-process scan is done
        assert rlm.finished_segments(tip) != []
        _produce(log, 12_000)  # more segments to copy
        rsm.store.down_after = down_after
        first = rlm.run_once(manager.all_logs())
        assert first.copy_errors == 1 and rsm.store.down
        assert (tmp_path / "remote").exists()
        leftovers = {p.name for p in (tmp_path / "remote").rglob("*") if p.is_file()}
        rsm.store.down = False  # the outage ends; the same process goes on
        second = rlm.run_once(manager.all_logs())
        assert second.stale_copies_cleaned == 1 and second.copy_errors == 0
        fresh = RemoteLogMetadataStore.in_bucket(rsm)
        assert fresh.find_stale_copies(tip) == []
        finished = {kafka_id(md) for md in fresh.readable_segments(tip)}
        data_objects = [p.name for p in (tmp_path / "remote").rglob("*") if p.is_file() and p.suffix != ".json"]
        assert data_objects and all(name.split("-", 1)[1].split(".")[0] in finished for name in data_objects)
        events = [p.name for p in (tmp_path / "remote").rglob("*.json")]
        started_only = [e for e in events if e.endswith(f".{int(RemoteLogSegmentState.COPY_SEGMENT_STARTED)}.json")
                        and e.split("-", 1)[1].split(".")[0] not in finished]
        assert started_only == []
        assert leftovers - {p.name for p in (tmp_path / "remote").rglob("*") if p.is_file()}  # something was removed
        assert len(finished) == log.number_of_segments() - 1 and log.number_of_segments() > segments


def kafka_id(md: Any) -> str:
    from tiered.layout import kafka_uuid

    return kafka_uuid(md.remote_log_segment_id.id)


# Configuration and secrets ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("max_attempts", "abc", "Invalid value abc for configuration rsm.config.max_attempts: expected a whole number in 1..100"),
        ("max_attempts", "0", "Invalid value 0 for configuration rsm.config.max_attempts: must be in 1..100"),
        ("connect_timeout_ms", "-5", "Invalid value -5 for configuration rsm.config.connect_timeout_ms: must be in 1..3600000"),
        ("multipart_chunk_size_bytes", "1024", "rsm.config.multipart_chunk_size_bytes: must be in 5242880..5368709120"),
        ("path_style", "maybe", "Invalid value maybe for configuration rsm.config.path_style: expected true or false"),
        ("retry_mode", "fast", "rsm.config.retry_mode: must be one of standard, legacy, adaptive"),
        ("sse", "rot13", "rsm.config.sse: must be one of AES256, aws:kms"),
        ("endpoint_url", "ftp://host", "Invalid value ftp://host for configuration rsm.config.endpoint_url: expected a URL"),
        ("endpoint_url", "http://u:Pa55word@host:99999", "Invalid value http://***@host:99999 for configuration rsm.config.endpoint_url: the port"),
        ("aws_secret_access_key", "abc\x01def", "Invalid value [hidden] for configuration rsm.config.aws_secret_access_key"),
        ("bucket", "B!", "Invalid value B! for configuration rsm.config.bucket"),
        ("checksum.chunk.bytes", "1e6", "rsm.config.checksum.chunk.bytes: expected a whole number in 4096..1073741824"),
    ],
)
def test_every_s3_value_is_validated_with_key_value_and_range(key: str, value: str, message: str) -> None:
    props = {"bucket": "tiered-test", "region": "us-east-1", key: value}
    with pytest.raises(RemoteConfigError) as info:
        load_rsm("s3", props)
    assert message in str(info.value)
    assert isinstance(info.value, ConfigError) and info.value.key == f"rsm.config.{key}"
    assert "Pa55word" not in str(info.value) and "\x01" not in str(info.value)


def test_missing_and_bad_values_of_the_other_backends(tmp_path: Path) -> None:
    with pytest.raises(RemoteConfigError, match=re.escape("Missing required configuration rsm.config.bucket")):
        load_rsm("s3", {})
    with pytest.raises(RemoteConfigError, match=re.escape("Missing required configuration rsm.config.dir")):
        load_rsm("local", {})
    (tmp_path / "file").write_text("x")
    with pytest.raises(RemoteConfigError, match=r"Invalid value .*file for configuration rsm.config.dir"):
        load_rsm("local", {"dir": str(tmp_path / "file")})
    with pytest.raises(RemoteConfigError, match=re.escape("Missing required configuration rsm.config.url")):
        load_rsm("fsspec", {})
    with pytest.raises(RemoteConfigError, match=re.escape("rsm.config.storage_options.endpoint_url: expected a URL")):
        load_rsm("fsspec", {"url": "memory://b/x", "storage_options.endpoint_url": "nope"})


def test_a_bad_rsm_value_is_a_usage_error_in_the_cli_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["offload", "--log-dirs", str(tmp_path / "data"), "-o", "remote.log.storage.system.enable=true",
            "-o", "remote.log.storage.manager.class.name=s3", "-o", "rsm.config.bucket=bucket1",
            "-o", "rsm.config.max_attempts=abc"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Invalid value abc for configuration rsm.config.max_attempts: expected a whole number in 1..100" in err
    assert "Traceback" not in err


def test_a_plugin_that_cannot_load_is_a_configuration_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["offload", "--log-dirs", str(tmp_path / "data"), "-o", "remote.log.storage.system.enable=true",
            "-o", "remote.log.storage.manager.class.name=no.such.Plugin"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Invalid value no.such.Plugin for configuration remote.log.storage.manager.class.name" in err
    with pytest.raises(ConfigError, match="expected a dotted path"):
        load_rsm("Plugin")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_password_in_endpoint_url_never_appears_in_errors_logs_or_reprs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # botocore's own debug records included
    secret, key_id, token = "Sup3rSecretPass", "AKIDUSERNAME", "SessionTok3nValue"
    url = f"http://{key_id}:{secret}@127.0.0.1:{_closed_port()}"
    rsm = load_rsm("s3", {"bucket": "tiered-test", "region": "us-east-1", "endpoint_url": url, "max_attempts": "1",
                          "connect_timeout_ms": "200", "aws_session_token": token, "path_style": "true"})
    with pytest.raises(RemoteStorageError) as info:
        rsm.fetch_log_segment(_md(), 0, 10)
    texts = [str(info.value), "".join(traceback.format_exception(info.value)), repr(rsm), repr(info.value)]
    texts += [r.getMessage() for r in caplog.records] + [r.exc_text or "" for r in caplog.records]
    assert caplog.records  # botocore did log the request
    for text in texts:
        assert secret not in text and key_id not in text and token not in text
    assert "127.0.0.1" in str(info.value) or "s3://tiered-test" in str(info.value)
    rsm.close()


def test_secrets_from_a_library_error_are_masked_and_not_chained(tmp_path: Path) -> None:
    rsm = load_rsm("fsspec", {"url": f"file://{tmp_path / 'fs'}", "storage_options.password": "hunter2-pw"})

    def broken(*args: Any, **kwargs: Any) -> bytes:
        raise OSError("cannot reach https://admin:hunter2-pw@store.example/x with password hunter2-pw")

    rsm.store.fs.cat_file = broken  # type: ignore[attr-defined]
    with pytest.raises(RemoteStorageError) as info:
        rsm.store.get("k")  # type: ignore[attr-defined]
    text = "".join(traceback.format_exception(info.value))
    assert "hunter2-pw" not in text and "admin" not in text and "https://***@store.example" in text
    from tiered.options import redact_config

    assert redact_config({"storage_options.password": "p", "storage_options.key": "k", "url": "s3://u:p@h/x"}) == {
        "storage_options.password": "[hidden]", "storage_options.key": "[hidden]", "url": "s3://***@h/x"}


# Partitions are int32 -------------------------------------------------------------------------------------------


def test_partitions_are_0_to_2_pow_31_minus_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = LogConfig.from_properties({"log.dirs": str(tmp_path / "data")})
    with LogManager(config, start_scheduler=False) as manager:
        for bad in (2**31, 2**40, -1):
            with pytest.raises(ValueError, match=r"invalid partition .*0\.\.2147483647"):
                manager.get_or_create_log("t", bad)
        assert manager.get_or_create_log("t", 2**31 - 1).partition == 2**31 - 1
    assert not (tmp_path / "data" / "t-2147483648").exists()
    with pytest.raises(ValueError, match="invalid partition"):
        parse_partition_dir_name("t-2147483648")
    with pytest.raises(ValueError, match="invalid partition"):
        TopicIdPartition(uuid.uuid4(), "t", 2**31)
    with pytest.raises(SystemExit) as exit_info:
        main(["consume", "--log-dirs", str(tmp_path / "data"), "-t", "t", "-p", "2147483648"])
    assert exit_info.value.code == 2
    assert "invalid partition 2147483648: must be in 0..2147483647" in capsys.readouterr().err


def _md() -> Any:
    from tiered import RemoteLogSegmentId, RemoteLogSegmentMetadata

    tip = TopicIdPartition(uuid.uuid4(), "t", 0)
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), 0, 9, T0, 0, T0, 100, {0: 0})


def test_a_gap_from_a_metadata_object_the_store_did_not_answer_says_so(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """One GET of a middle segment's COPY_SEGMENT_FINISHED event failed (503s past the retries): the read then said
    only "the remote tier has a gap", which reads like damage (a helper's S3 fault pass). It names the object it
    could not read and says to read again; once the store answers, the read is whole."""
    props, expected = _offloaded(tmp_path, 20_000)
    events = sorted((tmp_path / "remote").rglob("__remote_log_metadata/*.1.json"))
    assert len(events) >= 3, events
    victim = events[1].name
    real_get = LocalDirStore.get

    def unanswered(self: LocalDirStore, key: str) -> bytes:
        if key.endswith(victim):
            raise RemoteStorageError(f"get of {key} failed: SlowDown (503) after 3 attempts")
        return real_get(self, key)

    monkeypatch.setattr(LocalDirStore, "get", unanswered)
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
        log = manager.get_log("t", 0)
        assert log is not None
        with pytest.raises(CorruptRecordError, match="the remote tier has a gap") as gap:
            read_all_values(log)
    assert victim in str(gap.value) and "SlowDown (503)" in str(gap.value) and "read again" in str(gap.value)
    monkeypatch.setattr(LocalDirStore, "get", real_get)
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
        log = manager.get_log("t", 0)
        assert log is not None and read_all_values(log) == expected
