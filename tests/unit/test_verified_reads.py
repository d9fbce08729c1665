"""Verified reads (issue 13, items 2 and 3): a decoded batch's CRC is checked and a bad one named; a read never
answers with later offsets than asked; a remote read never skips a damaged, short or missing object."""

from __future__ import annotations

import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from local import LogConfig, LogManager
from local.errors import CorruptRecordError, OffsetOutOfRangeError
from local.file_records import FileRecords
from local.log import Log
from local.records import MemoryRecords, SimpleRecord
from local.records.batch import ATTRIBUTES_OFFSET, LENGTH_OFFSET, RECORD_BATCH_OVERHEAD
from local.records.legacy import build_legacy_message
from tests.logutil import local_tier_props, make_log, read_all_values
from tiered.errors import RemoteChecksumError, RemoteResourceNotFoundError, RemoteStorageError
from tiered.remote_log_manager import RemoteLogManager
from tiered.rsm import RemoteLogSegmentMetadata

T0 = int(time.time() * 1000) - 60_000
MIB = 1024 * 1024
PER_BATCH = 100
TOPIC_OVERRIDES = {"remote.storage.enable": "true", "local.retention.bytes": str(MIB)}


def _value(i: int) -> bytes:
    return (b"%08d" % i) * 25


def _produce(log: Log, n: int, t0: int = T0) -> None:
    for first in range(0, n, PER_BATCH):
        log.append(MemoryRecords.build([SimpleRecord(t0 + i, b"k%d" % i, _value(i)) for i in range(first, min(first + PER_BATCH, n))]))


def _batch_positions(path: Path) -> dict[int, int]:
    """base offset -> position of every batch in a segment file."""
    records = FileRecords.open(path, mutable=False, file_already_exists=True)
    try:
        return {b.base_offset: b.position for b in records.batches(verify=False)}
    finally:
        records.close_handlers()


def _flip(data: bytearray, position: int) -> None:
    data[position] ^= 0x01


# --------------------------------------------------------------------------------------------------------------
# Codec level: MemoryRecords and FileRecords


def test_memory_records_check_crcs_by_default_and_name_origin_position_offset() -> None:
    one = MemoryRecords.build([SimpleRecord(T0, b"k", b"good value")], base_offset=10)
    two = MemoryRecords.build([SimpleRecord(T0, b"k", b"other")], base_offset=11)
    data = bytearray(bytes(one) + bytes(two))
    _flip(data, len(data) - 2)  # a byte of the second batch's value
    records = MemoryRecords(data, origin="remote segment S", position=4096, context={"segment_id": "S"})
    batches = records.batches()
    assert next(batches).base_offset == 10  # the first is fine and comes out before the second is looked at
    with pytest.raises(CorruptRecordError) as info:
        next(batches)
    err = info.value
    assert (err.position, err.offset, err.segment_id) == (4096 + len(bytes(one)), 11, "S")  # type: ignore[attr-defined]
    assert "remote segment S" in str(err) and f"position {4096 + len(bytes(one))}" in str(err) and "offset 11" in str(err)
    with pytest.raises(CorruptRecordError):
        list(records.records())
    # the documented opt-out (check.crcs=false): the bytes are decoded as they are
    assert next(r.value for r in MemoryRecords(data).records(verify=False)) == b"good value"
    assert len(list(MemoryRecords(data).batches(verify=False))) == 2


def test_every_byte_the_crc_covers_is_checked() -> None:
    good = bytes(MemoryRecords.build([SimpleRecord(T0, b"key", b"value"), SimpleRecord(T0 + 1, None, b"v2")]))
    for position in range(ATTRIBUTES_OFFSET, len(good)):
        data = bytearray(good)
        _flip(data, position)
        with pytest.raises(CorruptRecordError):
            list(MemoryRecords(data).records())


def test_legacy_messages_are_checked_too() -> None:
    data = bytearray(build_legacy_message(5, b"k", b"legacy value", magic=1))
    _flip(data, len(data) - 1)
    with pytest.raises(CorruptRecordError, match="legacy message at offset 5"):
        list(MemoryRecords(data).batches())


def test_a_file_slice_names_the_file_and_the_position_in_it(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    batches = [bytes(MemoryRecords.build([SimpleRecord(T0, None, b"v%d" % i)], base_offset=i)) for i in range(3)]
    data = bytearray(b"".join(batches))
    second = len(batches[0])
    _flip(data, second + len(batches[1]) - 1)
    path.write_bytes(data)
    records = FileRecords.open(path, mutable=False, file_already_exists=True)
    try:
        view = records.slice(second, len(data) - second)
        with pytest.raises(CorruptRecordError) as info:
            list(view.batches())
        assert info.value.position == second and info.value.offset == 1  # type: ignore[attr-defined]
        assert info.value.path == str(path) and str(path) in str(info.value)  # type: ignore[attr-defined]
        assert [b.base_offset for b in view.batches(verify=False)] == [1, 2]
    finally:
        records.close_handlers()


# --------------------------------------------------------------------------------------------------------------
# Local log


@pytest.fixture
def local_log(tmp_path: Path):
    log = make_log(tmp_path, segment_bytes=MIB)
    _produce(log, 12_000, 1_700_000_000_000)  # the log's mock clock's time
    assert log.number_of_segments() >= 2
    yield log
    log.close()


def _damage_local(log: Log, offset: int, at: int, value: bytes | None = None) -> tuple[Path, int]:
    """Change the byte(s) at ``at`` within the batch whose base offset is ``offset``; returns its file, position."""
    segment = log.segments.floor_segment(offset)
    assert segment is not None
    path = segment.log.path
    position = _batch_positions(path)[offset]
    with open(path, "r+b") as f:
        f.seek(position + at)
        old = f.read(len(value) if value is not None else 1)
        f.seek(position + at)
        f.write(value if value is not None else bytes([old[0] ^ 0x01]))
    return path, position


def test_a_flipped_byte_in_a_local_segment_is_an_error_through_log_read(local_log: Log) -> None:
    path, position = _damage_local(local_log, 300, RECORD_BATCH_OVERHEAD + 40)
    info = local_log.read(300)
    with pytest.raises(CorruptRecordError) as err:
        list(info.records.batches())
    assert (err.value.path, err.value.position, err.value.offset) == (str(path), position, 300)  # type: ignore[attr-defined]
    # a read from an earlier offset gets the good batches, then the error, never the damaged values
    seen: list[bytes | None] = []
    with pytest.raises(CorruptRecordError):
        for batch in local_log.read(100).records.batches():
            seen.extend(r.value for r in batch.records())
    assert seen == [_value(i) for i in range(100, 300)]
    # the plain read path still serves the bytes without decoding them
    assert bytes(info.records)[: 8] == struct.pack(">q", 300)


def test_a_local_read_never_answers_with_later_offsets(local_log: Log) -> None:
    # The base offset is outside the CRC: a batch relabelled 350..449 must not be the answer to a read of 300.
    _damage_local(local_log, 300, 0, struct.pack(">q", 350))
    with pytest.raises(CorruptRecordError, match="no batch holds offset 300"):
        local_log.read(300)
    assert next(local_log.read(0).records.records()).value == _value(0)  # what is before it still reads
    with pytest.raises(CorruptRecordError, match=r"holds offsets 400\.\.499, not after the offset 449"):
        read_all_values(local_log, 0)  # a consumer from earlier: 350..449 then 400..499 overlap


@pytest.mark.parametrize("relabel", [296, 200, 0])
def test_a_batch_relabelled_to_earlier_offsets_is_an_error_not_wrong_offsets(local_log: Log, relabel: int) -> None:
    # 300..399 relabelled 296..395 would hand out the value of 304 as offset 300: it overlaps the batch before it.
    _damage_local(local_log, 300, 0, struct.pack(">q", relabel))
    with pytest.raises(CorruptRecordError, match=r"(batch header|base offset) is damaged"):
        for batch in local_log.read(300).records.batches():
            assert all(r.value == _value(r.offset) for r in batch.records())
    with pytest.raises(CorruptRecordError):  # a consumer reading from earlier meets the overlap in the slice
        for batch in local_log.read(100).records.batches():
            assert all(r.value == _value(r.offset) for r in batch.records())


def _gapped_log(tmp_path: Path, policy: str) -> Log:
    """A log with gaps as a cleaner (or a real broker's compacted topic) leaves them: segment 0's first batch holds
    offset 2, a gap inside it (5..9), and segment 20 after a gap at the end of segment 0 (13..19)."""
    log = make_log(tmp_path, cleanup_policy=policy)
    for base, values in ((2, (b"a", b"b", b"c")), (10, (b"d", b"e", b"f"))):
        log.append_as_follower(MemoryRecords.build([SimpleRecord(T0, b"k", v) for v in values], base_offset=base))
    log.roll(20)
    log.append_as_follower(MemoryRecords.build([SimpleRecord(T0, b"k", b"g")], base_offset=20))
    return log


@pytest.mark.parametrize("policy", ["delete", "compact"])
def test_a_read_in_a_gap_answers_with_the_next_batch_whatever_the_cleanup_policy(tmp_path: Path, policy: str) -> None:
    # A data dir carries no topic configs (a real broker keeps them in its metadata): an intact batch after a gap is
    # Kafka's normal case, never damage, whatever the policy says.
    log = _gapped_log(tmp_path, policy)
    try:
        for offset, base in ((0, 2), (1, 2), (2, 2), (5, 10), (9, 10), (12, 10), (13, 20), (19, 20), (20, 20)):
            assert next(log.read(offset).records.batches()).base_offset == base, offset
        assert read_all_values(log, 0) == [(2, b"a"), (3, b"b"), (4, b"c"), (10, b"d"), (11, b"e"), (12, b"f"), (20, b"g")]
    finally:
        log.close()


def test_a_damaged_batch_after_a_gap_is_still_an_error(tmp_path: Path) -> None:
    log = _gapped_log(tmp_path, "delete")
    try:
        path, position = _damage_local(log, 10, RECORD_BATCH_OVERHEAD + 3)
        with pytest.raises(CorruptRecordError, match="is corrupt") as err:
            log.read(7)  # the batch that would answer it fails its CRC: the read raises, it never skips it
        assert (err.value.path, err.value.position) == (str(path), position)  # type: ignore[attr-defined]
    finally:
        log.close()


def test_a_last_batch_relabelled_upwards_is_caught_by_the_next_segments_base_offset(tmp_path: Path) -> None:
    log = _gapped_log(tmp_path, "delete")
    try:
        _damage_local(log, 10, 0, struct.pack(">q", 18))  # 10..12 now claims 18..20: the next segment starts at 20
        with pytest.raises(CorruptRecordError, match="the next segment starts at offset 20: a batch header is damaged"):
            log.read(13)
    finally:
        log.close()


def test_a_damaged_length_in_a_closed_segment_does_not_skip_to_the_next(local_log: Log) -> None:
    first = local_log.segments.first_segment
    assert first is not None
    last_base = max(_batch_positions(first.log.path))
    _damage_local(local_log, last_base, LENGTH_OFFSET, struct.pack(">i", 0x0FFFFFFF))  # runs past the file's end
    with pytest.raises(CorruptRecordError, match=f"no batch holds offset {last_base + 5}"):
        local_log.read(last_base + 5)


def test_a_segment_whose_first_batch_starts_below_its_base_offset_is_an_error(local_log: Log) -> None:
    second = local_log.segments.higher_segment(0)
    assert second is not None and second.base_offset > 0
    _damage_local(local_log, second.base_offset, 0, struct.pack(">q", second.base_offset - 3))
    with pytest.raises(CorruptRecordError, match="batch header is damaged"):
        local_log.read(second.base_offset)


def test_tiered_consume_stops_with_exit_1_on_a_corrupt_local_batch(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager(LogConfig.from_properties({"log.dirs": str(data)}), start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0)
        _produce(log, 1000)
        log.flush()
        path, position = _damage_local(log, 500, RECORD_BATCH_OVERHEAD + 5)
        corrupt_values = {_value(i) for i in range(500, 600)}
    proc = subprocess.run([sys.executable, "-m", "tiered.cli", "consume", "--log-dirs", str(data), "-t", "t"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "record batch at offset 500 is corrupt" in proc.stderr and str(path) in proc.stderr
    assert f"position {position}" in proc.stderr
    printed = proc.stdout.splitlines()
    assert printed == [_value(i).decode() for i in range(500)]  # nothing of the corrupt batch, nothing after it
    assert not corrupt_values & {p.encode() for p in printed}
    off = subprocess.run([sys.executable, "-m", "tiered.cli", "consume", "--log-dirs", str(data), "-t", "t",
                          "--no-check-crcs", "--max-messages", "3"], capture_output=True, text=True, timeout=300)
    assert off.returncode == 0 and off.stdout.splitlines() == [_value(i).decode() for i in range(3)]


# --------------------------------------------------------------------------------------------------------------
# Remote tier (local-directory backend; the conformance suite repeats the core of this on every backend)


_props = local_tier_props  # the embedded local-directory tier, 1 MiB segments


@pytest.fixture
def tiered(tmp_path: Path):
    manager = LogManager(LogConfig.from_properties(_props(tmp_path)), start_scheduler=False)
    log = manager.get_or_create_log("t", 0, TOPIC_OVERRIDES)
    _produce(log, 25_000)
    rlm = manager.remote_tier
    assert isinstance(rlm, RemoteLogManager)
    rlm.run_once(manager.all_logs())
    manager.cleanup_logs()
    segments = [md for md in rlm.finished_segments(rlm.topic_id_partition(log)) if md.end_offset < log.local_log_start_offset]
    assert len(segments) >= 3
    yield manager, log, rlm, segments
    manager.close()


def _remote_log_file(tmp_path: Path, md: RemoteLogSegmentMetadata) -> Path:
    from tiered.layout import kafka_uuid

    [path] = (tmp_path / "remote").rglob(f"*{kafka_uuid(md.remote_log_segment_id.id)}.log")
    return path


def _names(exc: BaseException, md: RemoteLogSegmentMetadata) -> bool:
    from tiered.layout import kafka_uuid

    text = str(exc)
    return str(md.remote_log_segment_id.id) in text or kafka_uuid(md.remote_log_segment_id.id) in text


def test_a_damaged_first_batch_length_does_not_skip_to_the_next_remote_segment(tiered, tmp_path: Path) -> None:
    # Regression: read(6000) answered with offset 7000 (the next segment) when 6000's batch length was damaged.
    _, log, _, segments = tiered
    md = segments[1]
    path = _remote_log_file(tmp_path, md)
    data = bytearray(path.read_bytes())
    struct.pack_into(">i", data, LENGTH_OFFSET, 0x0FFFFFFF)
    path.write_bytes(data)
    with pytest.raises(CorruptRecordError) as err:
        log.read(md.start_offset)
    assert _names(err.value, md) and err.value.position == 0  # type: ignore[attr-defined]
    # the segments around it still read
    assert next(r.offset for r in log.read(segments[0].start_offset).records.records()) == segments[0].start_offset
    assert next(log.read(segments[2].start_offset).records.records()).offset == segments[2].start_offset


@pytest.mark.parametrize("damage", ["flip", "truncate", "cut_header", "relabel", "relabel_earlier", "relabel_last"])
def test_a_damaged_or_short_remote_object_is_an_error_never_wrong_or_later_data(tiered, tmp_path: Path, damage: str) -> None:
    _, log, _, segments = tiered
    md = segments[1]
    path = _remote_log_file(tmp_path, md)
    data = bytearray(path.read_bytes())
    positions = {}
    pos = 0
    while pos < len(data):
        positions[struct.unpack_from(">q", data, pos)[0]] = pos
        pos += struct.unpack_from(">i", data, pos + LENGTH_OFFSET)[0] + 12
    target = md.start_offset + 30 * PER_BATCH if damage != "relabel_last" else max(positions)
    at = positions[target]
    if damage == "flip":
        _flip(data, at + RECORD_BATCH_OVERHEAD + 7)
    elif damage == "truncate":
        del data[at + 100 :]
    elif damage == "cut_header":
        del data[at + 10 :]
    elif damage == "relabel":  # the base offset is outside the CRC
        struct.pack_into(">q", data, at, target + 50)
    elif damage == "relabel_earlier":  # would hand out the value of target + 4 as offset target
        struct.pack_into(">q", data, at, target - 4)
    else:  # the segment's last batch moved up: nothing after it in the segment to overlap
        struct.pack_into(">q", data, at, target + 1)
    path.write_bytes(data)
    with pytest.raises(CorruptRecordError) as err:
        info = log.read(target + 5)
        list(info.records.batches())
    assert _names(err.value, md), str(err.value)
    if isinstance(err.value, RemoteChecksumError):
        # The object's recorded chunk checksums caught it first: the error names the chunk holding the damage.
        assert err.value.start <= at <= err.value.end
    else:
        assert err.value.position == at  # type: ignore[attr-defined]
    # A consumer reading the segment from its start gets good batches, then the error: never a value of a
    # damaged batch, never the next segment's offsets (the whole damaged chunk is refused when checksums exist).
    offset, values = md.start_offset, list[tuple[int, bytes | None]]()
    with pytest.raises(CorruptRecordError):
        while True:
            info = log.read(offset, 64 * 1024)
            for batch in info.records.batches():
                values.extend((r.offset, r.value) for r in batch.records())
                offset = batch.last_offset + 1
    good = [(i, _value(i)) for i in range(md.start_offset, target)]
    assert values == good[: len(values)]


def test_a_deleted_remote_object_is_an_error(tiered, tmp_path: Path) -> None:
    _, log, _, segments = tiered
    md = segments[0]
    _remote_log_file(tmp_path, md).unlink()
    with pytest.raises(RemoteResourceNotFoundError) as err:
        log.read(md.start_offset + 1)
    assert _names(err.value, md)


def _fsspec_props(tmp: Path) -> dict[str, str]:
    props = _props(tmp)
    del props["rsm.config.dir"]
    return {**props, "remote.log.storage.manager.class.name": "fsspec", "rsm.config.url": f"file://{tmp / 'remote'}"}


@pytest.mark.parametrize("backend", ["local", "fsspec"])
def test_a_remote_tier_whose_data_is_gone_is_an_error_in_consume_not_an_empty_answer(tmp_path: Path, backend: str) -> None:
    # The case: an fsspec remote tier whose data is gone made ``consume`` print nothing and exit 0.
    props_of = _props if backend == "local" else _fsspec_props
    manager = LogManager(LogConfig.from_properties(props_of(tmp_path)), start_scheduler=False)
    log = manager.get_or_create_log("t", 0, TOPIC_OVERRIDES)
    _produce(log, 25_000)
    assert isinstance(manager.remote_tier, RemoteLogManager)
    manager.remote_tier.run_once(manager.all_logs())
    manager.cleanup_logs()
    local_start = log.local_log_start_offset
    assert local_start > 0 == log.log_start_offset
    manager.close()
    import shutil

    shutil.rmtree(tmp_path / "remote")
    (tmp_path / "remote").mkdir()
    with LogManager(LogConfig.from_properties(props_of(tmp_path)), start_scheduler=False) as fresh:
        log = fresh.get_log("t", 0)
        assert log is not None
        with pytest.raises((RemoteStorageError, OffsetOutOfRangeError)) as err:
            log.read(10)
        assert "offset 10" in str(err.value)
    props = tmp_path / "broker.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in props_of(tmp_path).items()))
    proc = subprocess.run([sys.executable, "-m", "tiered.cli", "--config", str(props), "consume", "-t", "t", "--offset", "10"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout[-300:] + proc.stderr
    assert "offset 10" in proc.stderr and "Traceback" not in proc.stderr


def test_tiered_consume_does_not_print_the_next_segment_after_a_damaged_remote_batch(tiered, tmp_path: Path) -> None:
    manager, _log, _, segments = tiered
    md = segments[1]
    path = _remote_log_file(tmp_path, md)
    data = bytearray(path.read_bytes())
    struct.pack_into(">i", data, LENGTH_OFFSET, 0x0FFFFFFF)
    path.write_bytes(data)
    manager.close()
    props = tmp_path / "broker.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in _props(tmp_path).items()))
    proc = subprocess.run([sys.executable, "-m", "tiered.cli", "--config", str(props), "consume", "-t", "t", "--offset",
                           str(md.start_offset), "--max-messages", "5"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-300:] + proc.stderr
    assert proc.stdout == "" and _names(RuntimeError(proc.stderr), md) and "Traceback" not in proc.stderr
