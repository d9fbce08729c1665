"""The manifest format of remote segments through the object-store RSM: every combination of transforms on the
local-directory, fsspec and in-process moto backends, ranged reads at chunk boundaries, tampering, keys, settings
and old plain-layout segments in the same store. (Real S3 servers: tests/integration/test_remote_format_s3.py.)"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.formatutil import (
    COMBOS,
    KeyPairPaths,
    combo_config,
    metadata,
    ring_config,
    segment_files,
    text_like,
    write_key_pair,
)
from tiered import IndexType, RemoteLogSegmentMetadata
from tiered.backends import load_rsm
from tiered.backends.composed import MANIFEST_SUFFIX, PACKED_INDEXES_SUFFIX, ObjectStoreRemoteStorageManager
from tiered.errors import (
    EncryptionKeyNotFoundError,
    RemoteChunkError,
    RemoteConfigError,
    RemoteResourceNotFoundError,
)
from tiered.format import SegmentManifest
from tiered.layout import kafka_uuid, partition_prefix, segment_key

SEGMENT = 10_000  # bytes of .log in the round trips


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> list[KeyPairPaths]:
    d = tmp_path_factory.mktemp("keys")
    return [write_key_pair(d, "k1"), write_key_pair(d, "k2")]


def _moto() -> Iterator[dict[str, str]]:
    from moto import mock_aws

    with mock_aws():
        import boto3

        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="fmt")
        yield {"bucket": "fmt", "region": "us-east-1", "aws_access_key_id": "test", "aws_secret_access_key": "test",
               "multipart_chunk_size_bytes": str(5 * 2**20), "multipart_threshold_bytes": str(5 * 2**20)}


@pytest.fixture(params=["local", "fsspec-memory", "moto"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    if request.param == "local":
        yield "local", {"dir": str(tmp_path / "remote"), "prefix": "t"}
    elif request.param == "fsspec-memory":
        yield "fsspec", {"url": f"memory://fmt-{uuid.uuid4().hex}/root"}
    else:
        for config in _moto():
            yield "s3", config


def _rsm(backend: tuple[str, dict[str, str]], **extra: str) -> ObjectStoreRemoteStorageManager:
    return load_rsm(backend[0], {**backend[1], **extra})  # type: ignore[return-value]


def _read(rsm: ObjectStoreRemoteStorageManager, md: RemoteLogSegmentMetadata, start: int, end: int | None) -> bytes:
    with rsm.fetch_log_segment(md, start, end) as stream:
        return stream.read()


def _ranges(size: int, chunk: int) -> list[tuple[int, int | None]]:
    return [(0, None), (0, chunk - 1), (chunk - 1, chunk), (chunk, 2 * chunk - 1), (chunk - 1, chunk - 1),
            (chunk, None), (size - 1, None), (size - 1, size + 50), (3, size - 4), (size, None), (size + 10, size + 20),
            (2 * chunk - 1, 3 * chunk)]


@pytest.mark.parametrize("chunk", [1250, 1024], ids=["chunk-divides", "chunk-does-not-divide"])
@pytest.mark.parametrize("combo", list(COMBOS))
def test_round_trip_every_combination(backend: tuple[str, dict[str, str]], pairs: list[KeyPairPaths], combo: str,
                                      chunk: int, tmp_path: Path) -> None:
    rsm = _rsm(backend, **combo_config(combo, pairs, chunk))
    log = text_like(SEGMENT)
    data, md = segment_files(tmp_path / "seg", log), metadata(size=SEGMENT)
    rsm.copy_log_segment_data(md, data)
    for start, end in _ranges(SEGMENT, chunk):
        expected = log[start : None if end is None else end + 1]
        assert _read(rsm, md, start, end) == expected, (start, end)
    for index_type, path in ((IndexType.OFFSET, data.offset_index), (IndexType.TIMESTAMP, data.time_index),
                             (IndexType.TRANSACTION, data.transaction_index),
                             (IndexType.PRODUCER_SNAPSHOT, data.producer_snapshot_index)):
        assert path is not None
        assert rsm.fetch_index(md, index_type).read() == path.read_bytes(), index_type
    assert rsm.fetch_index(md, IndexType.LEADER_EPOCH).read() == data.leader_epoch_index
    stored = rsm.store.get(segment_key(rsm.prefix, md, ".log"))
    manifest = rsm.manifest(md)
    if combo == "plain":  # the plain layout: Kafka's files as they are, no manifest
        assert manifest is None and stored == log
        assert not rsm.store.exists(segment_key(rsm.prefix, md, MANIFEST_SUFFIX))
    else:
        assert manifest is not None and manifest.chunk_count == -(-SEGMENT // chunk)
        assert not rsm.store.exists(segment_key(rsm.prefix, md, ".index"))  # packed into .indexes instead
        assert log[:200] not in stored
        if "zstd" in combo:
            assert len(stored) < SEGMENT // 2
        if "aes" in combo:
            assert manifest.envelope is not None and manifest.envelope.key_id == "k1"
    # a fresh instance (no cached manifest) reads the same
    assert _read(_rsm(backend, **combo_config(combo, pairs, chunk)), md, chunk - 1, 2 * chunk) == log[chunk - 1 : 2 * chunk + 1]
    assert len(rsm.store.list_keys(partition_prefix(rsm.prefix, md.topic_id_partition))) == (6 if combo == "plain" else 3)
    rsm.delete_log_segment_data(md)
    assert rsm.store.list_keys(partition_prefix(rsm.prefix, md.topic_id_partition)) == []


def test_a_segment_without_a_transaction_index_reports_it_missing(pairs: list[KeyPairPaths], tmp_path: Path) -> None:
    rsm = load_rsm("local", {"dir": str(tmp_path / "r"), **combo_config("zstd+aes", pairs, 1024)})
    md = metadata()
    rsm.copy_log_segment_data(md, segment_files(tmp_path / "seg", text_like(5000), txn=False))
    with pytest.raises(RemoteResourceNotFoundError, match=r"\.txnindex"):
        rsm.fetch_index(md, IndexType.TRANSACTION)


def test_old_plain_segments_in_the_same_store_keep_reading(pairs: list[KeyPairPaths], tmp_path: Path) -> None:
    root = {"dir": str(tmp_path / "r")}
    old_log, new_log = os.urandom(7000), text_like(9000)
    old_md, new_md = metadata(0, 99), metadata(100, 199)
    load_rsm("local", root).copy_log_segment_data(old_md, segment_files(tmp_path / "a", old_log))
    rsm: ObjectStoreRemoteStorageManager = load_rsm("local", {**root, **combo_config("zstd+aes", pairs, 2048)})  # type: ignore[assignment]
    rsm.copy_log_segment_data(new_md, segment_files(tmp_path / "b", new_log))
    assert _read(rsm, old_md, 100, 5000) == old_log[100:5001]
    assert _read(rsm, new_md, 100, 5000) == new_log[100:5001]
    assert rsm.fetch_index(old_md, IndexType.OFFSET).read() == (tmp_path / "a" / "00000000000000000100.index").read_bytes()
    # and back: a plain-configured instance with the ring still reads the encrypted one
    plain = load_rsm("local", {**root, **ring_config(pairs, None)})
    with plain.fetch_log_segment(new_md, 0) as s:
        assert s.read() == new_log


def test_heuristic_skips_compression_of_already_compressed_batches(pairs: list[KeyPairPaths], tmp_path: Path) -> None:
    from local.records import MemoryRecords, SimpleRecord

    records = [SimpleRecord(i, None, b"value %d" % i * 20) for i in range(200)]
    zstd_batches = MemoryRecords.build(records, "zstd").buffer
    plain_batches = MemoryRecords.build(records).buffer
    config = {"dir": str(tmp_path / "r"), "compression.enabled": "true", "compression.heuristic.enabled": "true"}
    rsm: ObjectStoreRemoteStorageManager = load_rsm("local", config)  # type: ignore[assignment]
    compressed_md, plain_md = metadata(0, 199), metadata(200, 399)
    rsm.copy_log_segment_data(compressed_md, segment_files(tmp_path / "a", bytes(zstd_batches)))
    rsm.copy_log_segment_data(plain_md, segment_files(tmp_path / "b", bytes(plain_batches)))
    m1, m2 = rsm.manifest(compressed_md), rsm.manifest(plain_md)
    assert m1 is not None and m1.compression_level is None and m1.transforms == []
    assert m2 is not None and m2.compression_level == 3 and m2.transforms == ["zstd"]
    assert _read(rsm, compressed_md, 0, None) == bytes(zstd_batches)
    assert _read(rsm, plain_md, 0, None) == bytes(plain_batches)


# Tampering and keys ----------------------------------------------------------------------------------------


@pytest.fixture
def encrypted(pairs: list[KeyPairPaths], tmp_path: Path) -> tuple[ObjectStoreRemoteStorageManager, RemoteLogSegmentMetadata, bytes]:
    rsm: ObjectStoreRemoteStorageManager = load_rsm("local", {"dir": str(tmp_path / "r"), **combo_config("aes", pairs, 1024)})  # type: ignore[assignment]
    md, log = metadata(), os.urandom(5000)
    rsm.copy_log_segment_data(md, segment_files(tmp_path / "seg", log))
    return rsm, md, log


def _fresh(rsm: ObjectStoreRemoteStorageManager, **extra: str) -> ObjectStoreRemoteStorageManager:
    return load_rsm("local", {**{k: str(v) for k, v in rsm.props.items()}, **extra})  # type: ignore[return-value]


def test_a_flipped_byte_in_a_stored_chunk_is_refused_naming_object_and_chunk(encrypted: tuple) -> None:  # type: ignore[type-arg]
    rsm, md, log = encrypted
    key = segment_key(rsm.prefix, md, ".log")
    path = rsm.store.root / key  # type: ignore[attr-defined]
    stored = bytearray(path.read_bytes())
    manifest = rsm.manifest(md)
    assert manifest is not None
    stored[manifest.stored_offsets[2] + 40] ^= 0x01
    path.write_bytes(bytes(stored))
    fresh = _fresh(rsm)
    assert _read(fresh, md, 0, 2047) == log[:2048]  # chunks 0 and 1 are untouched
    with pytest.raises(RemoteChunkError, match=r"chunk 2 of remote object .*\.log") as info:
        _read(fresh, md, 2048, 2100)
    assert (info.value.key, info.value.chunk) == (key, 2)


def test_swapped_chunks_are_refused_by_the_tag_even_with_matching_crcs(encrypted: tuple) -> None:  # type: ignore[type-arg]
    rsm, md, _ = encrypted
    m = rsm.manifest(md)
    assert m is not None
    key = segment_key(rsm.prefix, md, ".log")
    path = rsm.store.root / key  # type: ignore[attr-defined]
    stored = path.read_bytes()
    o = m.stored_offsets
    c1, c2 = stored[o[1] : o[2]], stored[o[2] : o[3]]
    assert len(c1) == len(c2)
    path.write_bytes(stored[: o[1]] + c2 + c1 + stored[o[3] :])
    crcs = list(m.crcs)
    crcs[1], crcs[2] = crcs[2], crcs[1]  # an attacker fixing up the manifest's crcs too
    doctored = SegmentManifest(m.segment_id, m.size, m.chunk_size, m.stored_offsets, tuple(crcs), m.compression_level,
                               m.envelope, m.indexes)
    rsm.store.put(segment_key(rsm.prefix, md, MANIFEST_SUFFIX), doctored.encode())
    with pytest.raises(RemoteChunkError, match=r"chunk 1 .*AES-GCM authentication failed") as info:
        _read(_fresh(rsm), md, 1024, 1100)
    assert info.value.chunk == 1


def test_a_wrong_data_key_is_refused(encrypted: tuple, pairs: list[KeyPairPaths]) -> None:  # type: ignore[type-arg]
    rsm, md, _ = encrypted
    m = rsm.manifest(md)
    assert m is not None and m.envelope is not None
    from tiered.format import Envelope

    assert rsm.key_provider is not None
    kid, algorithm, wrapped = rsm.key_provider.wrap(os.urandom(32), "k1")  # a valid wrap of another key
    rsm.store.put(segment_key(rsm.prefix, md, MANIFEST_SUFFIX), m.with_envelope(Envelope(kid, algorithm, wrapped)).encode())
    with pytest.raises(RemoteChunkError, match=r"chunk 0 .*authentication failed"):
        _read(_fresh(rsm), md, 0, 10)
    with pytest.raises(RemoteChunkError, match=r"the \.index index of remote object .*\.indexes"):
        _fresh(rsm).fetch_index(md, IndexType.OFFSET)


def test_a_key_id_missing_from_the_ring_is_named(encrypted: tuple, pairs: list[KeyPairPaths], tmp_path: Path) -> None:  # type: ignore[type-arg]
    rsm, md, _ = encrypted
    only_k2 = load_rsm("local", {"dir": str(rsm.store.root), **ring_config([pairs[1]], "k2")})  # type: ignore[attr-defined]
    with pytest.raises(EncryptionKeyNotFoundError, match=r"key pair 'k1' is not in the key ring .*k2.*to read") as info:
        _read(only_k2, md, 0, 10)  # type: ignore[arg-type]
    manifest = segment_key(rsm.prefix, md, MANIFEST_SUFFIX)  # type: ignore[attr-defined]
    assert info.value.key_id == "k1" and info.value.key == manifest  # type: ignore[attr-defined]
    assert str(info.value).startswith(f"segment {kafka_uuid(md.remote_log_segment_id.id)} (manifest {manifest}): ")
    no_ring = load_rsm("local", {"dir": str(rsm.store.root)})
    with pytest.raises(EncryptionKeyNotFoundError, match=r"key pair 'k1' .*no key ring"):
        _read(no_ring, md, 0, 10)  # type: ignore[arg-type]


def test_a_truncated_object_names_the_short_chunk(encrypted: tuple) -> None:  # type: ignore[type-arg]
    rsm, md, _ = encrypted
    path = rsm.store.root / segment_key(rsm.prefix, md, ".log")  # type: ignore[attr-defined]
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(RemoteChunkError, match=r"chunk 4 .*ends after"):
        _read(_fresh(rsm), md, 0, None)


def test_a_manifest_of_an_unknown_version_is_a_clear_error(encrypted: tuple) -> None:  # type: ignore[type-arg]
    rsm, md, _ = encrypted
    doc = json.loads(rsm.store.get(segment_key(rsm.prefix, md, MANIFEST_SUFFIX)))
    doc["version"] = 9
    rsm.store.put(segment_key(rsm.prefix, md, MANIFEST_SUFFIX), json.dumps(doc).encode())
    from tiered.errors import RemoteStorageError

    with pytest.raises(RemoteStorageError, match=r"rsm-manifest cannot be read: .*version 9 is not supported"):
        _read(_fresh(rsm), md, 0, 10)


# Settings ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("extra", "message"), [
    ({"chunk.size": "10"}, r"Invalid value 10 for configuration rsm.config.chunk.size: must be in 1024\.\."),
    ({"compression.enabled": "yes"}, "rsm.config.compression.enabled: expected true or false"),
    ({"compression.level": "23"}, r"rsm.config.compression.level: must be in -7\.\.22"),
    ({"compression.heuristic.enabled": "true"}, "needs rsm.config.compression.enabled=true"),
    ({"encryption.enabled": "true"}, "Missing required configuration rsm.config.encryption.key.pair.id"),
    ({"encryption.enabled": "true", "encryption.key.pair.id": "k9", "encryption.key.pairs": "k1",
      "encryption.key.pairs.k1.public.key.file": "/nonexistent/p.pem", "encryption.key.pairs.k1.private.key.file": "/x"},
     r"rsm.config.encryption.key.pair.id: not one of rsm.config.encryption.key.pairs \(k1\)"),
    ({"encryption.key.pairs": "k1"}, "Missing required configuration rsm.config.encryption.key.pairs.k1.public.key.file"),
    ({"encryption.key.pairs": "a.b"}, "key pair id 'a.b': expected"),
    ({"encryption.key.pairs": "k1", "encryption.key.pairs.k1.public.key.file": "/nonexistent/p.pem",
      "encryption.key.pairs.k1.private.key.file": "/nonexistent/q.pem"},
     r"/nonexistent/p.pem for configuration rsm.config.encryption.key.pairs.k1.public.key.file: cannot read"),
    ({"encryption.key.pairs.k7.public.key.file": "/p"}, "key pair 'k7' is not listed in rsm.config.encryption.key.pairs"),
])
def test_bad_settings_fail_at_configure_naming_the_key(extra: dict[str, str], message: str, tmp_path: Path) -> None:
    with pytest.raises(RemoteConfigError, match=message):
        load_rsm("local", {"dir": str(tmp_path), **extra})


def test_a_pem_file_that_holds_no_key_or_a_mismatched_pair_is_refused(pairs: list[KeyPairPaths], tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key")
    config = {"dir": str(tmp_path / "r"), "encryption.key.pairs": "k1",
              "encryption.key.pairs.k1.public.key.file": str(junk),
              "encryption.key.pairs.k1.private.key.file": str(pairs[0].private)}
    with pytest.raises(RemoteConfigError, match=r"public.key.file: not a PEM public key"):
        load_rsm("local", config)
    config["encryption.key.pairs.k1.public.key.file"] = str(pairs[1].public)
    with pytest.raises(RemoteConfigError, match="does not belong to its private key"):
        load_rsm("local", config)


def test_the_private_key_path_is_never_shown(tmp_path: Path) -> None:
    config = {"dir": str(tmp_path), "encryption.key.pairs": "k1", "encryption.key.pairs.k1.public.key.file": "/nope/pub",
              "encryption.key.pairs.k1.private.key.file": "/secret/place/priv.pem"}
    (tmp_path / "pub").write_text("x")
    config["encryption.key.pairs.k1.public.key.file"] = str(tmp_path / "pub")
    with pytest.raises(RemoteConfigError) as info:
        load_rsm("local", config)
    assert "/secret/place" not in str(info.value)


def test_the_manifest_upload_comes_last_and_a_failed_copy_leaves_nothing(pairs: list[KeyPairPaths], tmp_path: Path) -> None:
    rsm: ObjectStoreRemoteStorageManager = load_rsm("local", {"dir": str(tmp_path / "r"), **combo_config("zstd+aes", pairs, 1024)})  # type: ignore[assignment]
    order: list[str] = []
    real_put = rsm.store.put

    def put(key: str, data: bytes) -> None:
        order.append(key.rsplit(".", 1)[-1])
        if key.endswith(MANIFEST_SUFFIX):
            raise OSError("store down")
        real_put(key, data)

    rsm.store.put = put  # type: ignore[method-assign,assignment]
    md = metadata()
    from tiered.errors import RemoteStorageError

    with pytest.raises(RemoteStorageError, match="store down"):
        rsm.copy_log_segment_data(md, segment_files(tmp_path / "seg", text_like(4000)))
    assert order == [PACKED_INDEXES_SUFFIX[1:], MANIFEST_SUFFIX[1:]]
    assert rsm.store.list_keys("") == []


def test_a_segment_costs_one_manifest_get_one_index_get_and_one_unwrap(pairs: list[KeyPairPaths], tmp_path: Path) -> None:
    writer = load_rsm("local", {"dir": str(tmp_path / "r"), **combo_config("zstd+aes", pairs, 1024)})
    md, log = metadata(), text_like(6000)
    writer.copy_log_segment_data(md, segment_files(tmp_path / "seg", log))
    rsm: ObjectStoreRemoteStorageManager = _fresh(writer)  # type: ignore[arg-type]
    gets: list[str] = []
    real_get, real_get_range = rsm.store.get, rsm.store.get_range

    def counting_get(key: str) -> bytes:
        gets.append(key.rsplit(".", 1)[-1])
        return real_get(key)

    def counting_get_range(key: str, start: int, end: int) -> bytes:
        gets.append(key.rsplit(".", 1)[-1])
        return real_get_range(key, start, end)

    rsm.store.get = counting_get  # type: ignore[method-assign]
    rsm.store.get_range = counting_get_range  # type: ignore[method-assign]
    assert rsm.key_provider is not None
    unwraps: list[str] = []
    real_unwrap = rsm.key_provider.unwrap

    def counting_unwrap(key_id: str, algorithm: str, wrapped: bytes) -> bytes:
        unwraps.append(key_id)
        return real_unwrap(key_id, algorithm, wrapped)

    rsm.key_provider.unwrap = counting_unwrap  # type: ignore[method-assign]
    for kind in (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.TRANSACTION, IndexType.PRODUCER_SNAPSHOT):
        rsm.fetch_index(md, kind).read()
    for start in range(0, 6000, 1000):
        assert _read(rsm, md, start, start + 999) == log[start : start + 1000]
    assert [g for g in gets if g != "log"] == ["rsm-manifest", "indexes"]
    assert unwraps == ["k1"]


def test_a_key_provider_class_stands_in_for_the_ring(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A KMS behind the KeyProvider interface: configured by class name, wraps new segments, rotates, and a key it
    no longer holds is named."""
    a, b = os.urandom(32).hex(), os.urandom(32).hex()
    kms = {"encryption.key.provider.class": "tests.formatutil.ToyKms", "encryption.key.provider.keys": f"a:{a},b:{b}",
           "encryption.key.provider.active": "a"}
    config = {"dir": str(tmp_path / "r"), "encryption.enabled": "true", "compression.enabled": "true",
              "chunk.size": "1024", **kms}
    rsm: ObjectStoreRemoteStorageManager = load_rsm("local", config)  # type: ignore[assignment]
    md, log = metadata(), text_like(5000)
    rsm.copy_log_segment_data(md, segment_files(tmp_path / "seg", log))
    m = rsm.manifest(md)
    assert m is not None and m.envelope is not None and (m.envelope.key_id, m.envelope.key_wrap) == ("a", "AES-KW-256")
    assert _read(rsm, md, 1000, 3000) == log[1000:3001]

    from tiered.cli import main

    props = tmp_path / "server.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in {
        "log.dirs": str(tmp_path / "data"), "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "local", **{f"rsm.config.{k}": v for k, v in config.items()}}.items()))
    assert main(["keys", "rotate", "--config", str(props), "--new-key-pair-id", "b"]) == 0
    assert "re-wrapped 1 segment data key(s) under key pair b" in capsys.readouterr().out
    only_b = load_rsm("local", {**config, "encryption.key.provider.keys": f"b:{b}", "encryption.key.provider.active": "b"})
    assert _read(only_b, md, 0, None) == log  # type: ignore[arg-type]
    only_a = load_rsm("local", {**config, "encryption.key.provider.keys": f"a:{a}"})
    with pytest.raises(EncryptionKeyNotFoundError, match="no key 'b'"):
        _read(only_a, md, 0, 10)  # type: ignore[arg-type]


@pytest.mark.parametrize(("extra", "message"), [
    ({"encryption.key.provider.class": "tests.formatutil.Nope"}, "cannot load it"),
    ({"encryption.key.provider.class": "tests.formatutil.KeyPairPaths"}, "cannot make and configure it"),
    ({"encryption.key.provider.class": "pathlib.PurePath"}, "not a key provider"),
    ({"encryption.key.provider.class": "tests.formatutil.ToyKms", "encryption.enabled": "true"}, "no active key"),
    ({"encryption.key.provider.class": "tests.formatutil.ToyKms", "encryption.key.pairs": "k1",
      "encryption.key.pairs.k1.public.key.file": "/p", "encryption.key.pairs.k1.private.key.file": "/q"}, "not both"),
])
def test_a_bad_key_provider_class_fails_at_configure(extra: dict[str, str], message: str, tmp_path: Path) -> None:
    with pytest.raises(RemoteConfigError, match=rf"rsm.config.encryption.key.provider.class: .*{message}"):
        load_rsm("local", {"dir": str(tmp_path), **extra})


def test_a_manifest_of_another_segment_is_refused(pairs: list[KeyPairPaths], tmp_path: Path) -> None:
    rsm: ObjectStoreRemoteStorageManager = load_rsm("local", {"dir": str(tmp_path / "r"), **combo_config("zstd", pairs, 1024)})  # type: ignore[assignment]
    a, b = metadata(0, 99), metadata(100, 199)
    rsm.copy_log_segment_data(a, segment_files(tmp_path / "a", text_like(3000)))
    rsm.copy_log_segment_data(b, segment_files(tmp_path / "b", text_like(4000)))
    for suffix in (".log", PACKED_INDEXES_SUFFIX, MANIFEST_SUFFIX):  # compression only: no AAD to catch it
        rsm.store.put(segment_key(rsm.prefix, b, suffix), rsm.store.get(segment_key(rsm.prefix, a, suffix)))
    from tiered.errors import RemoteStorageError

    with pytest.raises(RemoteStorageError, match=r"describes segment .*, not .*: refused"):
        _read(_fresh(rsm), b, 0, 10)
