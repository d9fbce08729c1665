"""A data dir deleted under a running log: the next roll fails and takes the dir offline (Kafka: the snapshot's
NoSuchFileException); it never recreates the dir, which the next start would load as the partition, starting
mid-log with a new topic id."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from local.config import LogConfig
from local.errors import KafkaStorageError
from local.manager import LogManager
from local.records import MemoryRecords, SimpleRecord


def test_a_roll_after_the_data_dir_was_deleted_fails_and_does_not_recreate_it(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    config = LogConfig.from_properties({"log.dirs": f"{d1},{d2}", "log.segment.bytes": "1048576"})
    with LogManager(config) as manager:
        log = manager.get_or_create_log("t", 0)
        data_dir = log.dir.parent
        for _ in range(5):
            log.append(MemoryRecords.build([SimpleRecord(b"k", b"v" * 1000)]))
        shutil.rmtree(data_dir)
        with pytest.raises(KafkaStorageError):
            log.roll()
        assert not data_dir.exists(), sorted(p.name for p in data_dir.rglob("*"))
        assert data_dir in manager.offline_dirs


def test_a_partition_dir_without_partition_metadata_takes_its_topics_id_not_a_new_one(tmp_path: Path) -> None:
    """A partition dir that lost partition.metadata (a dir made again by hand, or by an earlier version's snapshot
    of a deleted dir) loaded with a random topic id: one topic, two ids. It takes the id its topic's other
    partitions record; where they do not agree (or there is none), a new one as before."""
    from local import filenames

    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    config = LogConfig.from_properties({"log.dirs": f"{d1},{d2}"})
    with LogManager(config) as manager:
        manager.create_partitions("t", range(3))
        manager.get_or_create_log("u", 0)
        topic_id = manager.get_log("t", 0).topic_id  # type: ignore[union-attr]
        lonely = manager.get_log("u", 0).dir  # type: ignore[union-attr]
        stripped = manager.get_log("t", 1).dir  # type: ignore[union-attr]
    (stripped / filenames.PARTITION_METADATA_FILENAME).unlink()
    (lonely / filenames.PARTITION_METADATA_FILENAME).unlink()
    with LogManager(config) as manager:
        assert {manager.get_log("t", p).topic_id for p in range(3)} == {topic_id}  # type: ignore[union-attr]
        assert manager.get_log("u", 0) is not None  # no sibling: an id of its own, as before
    assert (stripped / filenames.PARTITION_METADATA_FILENAME).is_file()


def test_delete_records_whose_checkpoint_cannot_be_written_takes_the_dir_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log start moved in memory before its checkpoint failed (a full disk): the request failed, yet readers saw
    the records gone, and the dir stayed online until a restart brought them back. Kafka's checkpoint failure takes
    the dir offline."""
    import errno

    from local.errors import KafkaStorageIOError, LogDirOfflineError

    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    config = LogConfig.from_properties({"log.dirs": f"{d1},{d2}"})
    with LogManager(config) as manager:
        log = manager.get_or_create_log("t", 0)
        other = manager.get_or_create_log("u", 0)
        for _ in range(20):
            log.append(MemoryRecords.build([SimpleRecord(b"k", b"v")]))

        def full(_log: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device", str(log.dir.parent / "log-start-offset-checkpoint"))

        monkeypatch.setattr(log, "log_start_offset_checkpointer", full)
        with pytest.raises(KafkaStorageIOError, match="log-start-offset-checkpoint"):
            log.delete_records(10)
        assert log.dir.parent in manager.offline_dirs
        with pytest.raises(LogDirOfflineError):
            log.read(5, 1000)
        other.append(MemoryRecords.build([SimpleRecord(b"k", b"v")]))  # the other dir serves on
    monkeypatch.undo()
    with LogManager(config) as manager:  # space again: the request failed, nothing was deleted
        log = manager.get_log("t", 0)
        assert log is not None and log.log_start_offset == 0 and log.log_end_offset == 20
