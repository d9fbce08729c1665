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
