"""A careless library user: non-int offsets and calls on a closed LogManager or Log must be refused before anything
on disk changes (a float log start written to the checkpoints made the partition unloadable; a closed manager, whose
dirs are unlocked, deleted partitions another LogManager owned)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from local import LogConfig, LogManager
from local.errors import KafkaStorageError
from local.records import MemoryRecords, SimpleRecord


def _records(n: int) -> MemoryRecords:
    return MemoryRecords.build([SimpleRecord(b"k", b"v%d" % i) for i in range(n)])


def _config(tmp_path: Path) -> LogConfig:
    return LogConfig.from_properties({"log.dirs": str(tmp_path)})


@pytest.mark.parametrize("bad", [2.5, 3.0, True, Decimal("3"), "3"])
@pytest.mark.parametrize("method", ["delete_records", "truncate_to", "truncate_fully_and_start_at", "roll", "read"])
def test_a_non_int_offset_is_refused_and_the_partition_still_loads(tmp_path: Path, bad: object, method: str) -> None:
    with LogManager(_config(tmp_path)) as manager:
        log = manager.get_or_create_log("t", 0)
        log.append(_records(10))
        with pytest.raises(TypeError, match="offset"):
            getattr(log, method)(bad)
        assert (log.log_start_offset, log.log_end_offset) == (0, 10)
        assert log.append(_records(1)).first_offset == 10
    with LogManager(_config(tmp_path)) as manager:
        log = manager.get_log("t", 0)
        assert log is not None, manager.offline_partitions
        assert (log.log_start_offset, log.log_end_offset) == (0, 11)


def test_an_index_like_offset_is_accepted(tmp_path: Path) -> None:
    class Offset:
        def __index__(self) -> int:
            return 4

    with LogManager(_config(tmp_path)) as manager:
        log = manager.get_or_create_log("t", 0)
        log.append(_records(10))
        assert log.delete_records(Offset()) == 4
        assert type(log.log_start_offset) is int
    with LogManager(_config(tmp_path)) as manager:
        assert manager.get_log("t", 0).log_start_offset == 4


def test_a_closed_manager_and_its_logs_change_nothing_another_manager_owns(tmp_path: Path) -> None:
    first = LogManager(_config(tmp_path))
    old = first.get_or_create_log("t", 0)
    old.append(_records(10))
    first.get_or_create_log("u", 0).append(_records(10))
    first.close()
    with LogManager(_config(tmp_path)) as second:  # the dirs are unlocked: this one (or another process) owns them
        with pytest.raises(KafkaStorageError, match="closed"):
            old.delete_records(5)
        with pytest.raises(KafkaStorageError, match="closed"):
            old.truncate_to(3)
        with pytest.raises(KafkaStorageError, match="closed"):
            first.delete_log("u", 0)
        with pytest.raises(KafkaStorageError, match="closed"):
            first.delete_partitions("u", [0])
        with pytest.raises(KafkaStorageError, match="closed"):
            first.cleanup_logs()
        assert (tmp_path / "u-0").is_dir()
        u = second.get_log("u", 0)
        assert [r.offset for b in u.read(0, 1 << 20).records.batches() for r in b.records()] == list(range(10))
    with LogManager(_config(tmp_path)) as third:
        assert [(log.name, log.log_start_offset, log.log_end_offset) for log in
                sorted(third.all_logs(), key=lambda log: log.name)] == [("t-0", 0, 10), ("u-0", 0, 10)]


def test_a_read_racing_truncations_never_reports_damage(tmp_path: Path) -> None:
    """A truncation cuts the file under a read that does not take the log lock: the read must find the log before
    or after it (or out of range), never raise a CorruptRecordError about a healthy segment."""
    import random
    import threading

    from local.errors import OffsetOutOfRangeError

    with LogManager(_config(tmp_path)) as manager:
        log = manager.get_or_create_log("t", 0)
        done = threading.Event()
        damage: list[BaseException] = []

        def writer() -> None:  # a bounded number of steps (a busy machine makes the run longer, not weaker)
            rnd = random.Random(1)
            try:
                for _ in range(300):
                    log.append(_records(rnd.randint(1, 20)))
                    if rnd.random() < 0.3 and log.log_end_offset > 5:
                        log.truncate_to(rnd.randint(max(0, log.log_end_offset - 30), log.log_end_offset - 1))
                    if rnd.random() < 0.05:
                        log.roll()
            finally:
                done.set()

        def reader() -> None:
            rnd = random.Random(2)
            while not done.is_set():
                leo = log.log_end_offset
                if leo == 0:
                    continue
                try:  # (the read itself: what it returns is a view of the file, which a later truncation may change)
                    log.read(rnd.randint(max(0, leo - 40), leo - 1), 1 << 20)
                except OffsetOutOfRangeError:
                    pass
                except Exception as exc:  # (CorruptRecordError, or anything else a thread would only print)
                    damage.append(exc)

        threads = [threading.Thread(target=writer), threading.Thread(target=reader), threading.Thread(target=reader)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert damage == [], damage[:3]


@pytest.mark.parametrize(("args", "named"), [
    ({"topic_id": "3fa85f64-5717-4562-b3fc-2c963f66afa6"}, "topic id"),
    ({"overrides": ["segment.bytes"]}, "overrides"),
])
def test_a_partition_with_an_argument_of_the_wrong_type_is_not_made(tmp_path: Path, args: dict[str, object],
                                                                     named: str) -> None:
    """A str topic id failed only once the partition dir existed: left without partition.metadata, the next start
    loaded it with a random topic id."""
    with LogManager(_config(tmp_path)) as manager:
        with pytest.raises(TypeError, match=named):
            manager.get_or_create_log("t", 0, **args)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=named):
            manager.create_partitions("t", [0, 1], **args)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="topic must be a str"):
            manager.get_or_create_log(b"t", 0)  # type: ignore[arg-type]
        assert manager.get_log("t", 0) is None
    assert not (tmp_path / "t-0").exists() and not (tmp_path / "t-1").exists()


@pytest.mark.parametrize(("records", "kwargs", "named"), [
    ("hello", {}, "append takes MemoryRecords"),
    ([SimpleRecord(b"k", b"v")], {}, "append takes MemoryRecords"),
    (None, {}, "append takes MemoryRecords"),
    (_records(1), {"leader_epoch": "1"}, "leader_epoch must be an int"),
])
def test_an_append_of_the_wrong_type_names_what_append_takes(tmp_path: Path, records: object,
                                                             kwargs: dict[str, object], named: str) -> None:
    with LogManager(_config(tmp_path)) as manager:
        log = manager.get_or_create_log("t", 0)
        with pytest.raises(TypeError, match=named):
            log.append(records, **kwargs)  # type: ignore[arg-type]
        assert log.log_end_offset == 0 and log.append(_records(2)).first_offset == 0


def test_delete_records_below_zero_is_refused_not_ignored(tmp_path: Path) -> None:
    """Kafka's DeleteRecords takes -1 for "up to the high watermark" (its handler resolves it); Log.delete_records(-1)
    returned the log start as if it had done what was asked."""
    from local.errors import OffsetOutOfRangeError

    with LogManager(_config(tmp_path)) as manager:
        log = manager.get_or_create_log("t", 0)
        log.append(_records(10))
        with pytest.raises(OffsetOutOfRangeError, match="negative offset"):
            log.delete_records(-1)
        assert log.log_start_offset == 0 and log.delete_records(10) == 10



def test_the_remote_storage_api_types_refuse_what_would_reach_the_bucket_wrong() -> None:
    """A str topic id, a float offset or str custom metadata were accepted and went into keys and events."""
    import uuid

    import numpy as np

    from tiered.rsm import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

    with pytest.raises(TypeError, match=r"uuid\.UUID"):
        TopicIdPartition(str(uuid.uuid4()), "t", 0)  # type: ignore[arg-type]
    tip = TopicIdPartition(uuid.uuid4(), "t", 0)
    sid = RemoteLogSegmentId(tip, uuid.uuid4())

    def md(**changed: object) -> RemoteLogSegmentMetadata:
        fields: dict[str, object] = {"remote_log_segment_id": sid, "start_offset": 0, "end_offset": 9,
                                     "max_timestamp_ms": 0, "broker_id": 0, "event_timestamp_ms": 0,
                                     "segment_size_in_bytes": 100, "segment_leader_epochs": {0: 0}}
        return RemoteLogSegmentMetadata(**{**fields, **changed})  # type: ignore[arg-type]

    for bad in ({"start_offset": 0.5}, {"end_offset": "9"}, {"broker_id": True}, {"custom_metadata": "abc"},
                {"remote_log_segment_id": "x"}):
        with pytest.raises(TypeError):
            md(**bad)
    converted = md(end_offset=np.int64(9))
    assert type(converted.end_offset) is int and converted.end_offset == 9
