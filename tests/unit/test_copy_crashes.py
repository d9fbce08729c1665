"""A crash at any step of a segment copy: the process dies (no cleanup runs), restarts, and the next pass
deletes what the dead attempt left, copies the segment again, and readers only ever see finished copies."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import BinaryIO

import pytest

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from tiered.backends.local_dir import LocalDirRemoteStorageManager, LocalDirStore
from tiered.composition import assemble_remote_log_manager
from tiered.metadata import RemoteLogMetadataStore
from tiered.remote_log_manager import RemoteLogManager
from tiered.rsm import RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState


class Crash(BaseException):
    """Stands for the process dying: nothing catches it, so no cleanup runs."""


class CrashingStore(LocalDirStore):
    crash_on: str | None = None

    def put(self, key: str, data: bytes | BinaryIO, *, if_absent: bool = False) -> None:
        if self.crash_on == "FINISHED" and key.endswith(f".{int(RemoteLogSegmentState.COPY_SEGMENT_FINISHED)}.json"):
            raise Crash(key)
        super().put(key, data, if_absent=if_absent)
        if self.crash_on and self.crash_on != "FINISHED" and key.endswith(self.crash_on):
            raise Crash(key)


class CrashingDir(LocalDirRemoteStorageManager):
    store_class = CrashingStore
    store: CrashingStore


def _rlm(tmp: Path, crash_on: str | None) -> RemoteLogManager:
    rsm = CrashingDir()
    rsm.configure({"dir": str(tmp / "remote")})
    rsm.store.crash_on = crash_on
    return assemble_remote_log_manager(rsm, RemoteLogMetadataStore.in_bucket(rsm), tmp / "data")


@pytest.mark.parametrize("crash_on", [".log", ".index", ".timeindex", ".snapshot", "FINISHED"])
def test_crash_at_each_copy_step(tmp_path: Path, crash_on: str) -> None:
    props = {"log.dirs": str(tmp_path / "data"), "log.segment.bytes": str(2**20)}
    overrides = {"remote.storage.enable": "true", "local.retention.bytes": "1"}
    now = int(time.time() * 1000)
    values = [(b"%05d" % i) * 40 for i in range(8000)]
    crashing = _rlm(tmp_path, crash_on)
    manager = LogManager(LogConfig.from_properties(props), remote_tier=crashing, start_scheduler=False)
    log = manager.get_or_create_log("c", 0, overrides)
    for first in range(0, len(values), 100):
        log.append(MemoryRecords.build([SimpleRecord(now, None, v) for v in values[first : first + 100]]))
    assert log.number_of_segments() > 1
    with pytest.raises(Crash):
        crashing.run_once(manager.all_logs())
    tip = crashing.topic_id_partition(log)
    assert crashing.finished_segments(tip) == []  # a reader sees nothing of the dead attempt
    assert manager.cleanup_logs() == 0  # and nothing local may be deleted
    for lg in manager.all_logs():
        lg.close_handlers()  # the process died: no clean close...
    for fd in manager._dir_locks.values():
        os.close(fd)  # ...and the kernel released its data-dir locks

    restarted = _rlm(tmp_path, None)
    stale = RemoteLogMetadataStore.in_bucket(restarted.rsm).find_stale_copies(tip)  # type: ignore[arg-type]
    assert len(stale) == 1
    with LogManager(LogConfig.from_properties(props), remote_tier=restarted, start_scheduler=False) as m2:
        log2 = m2.get_log("c", 0)
        assert log2 is not None
        result = restarted.run_once(m2.all_logs())
        assert result.stale_copies_cleaned == 1 and result.segments_copied == log2.number_of_segments() - 1
        # the copy left STARTED was deleted after a claim at the next owner epoch (a copy of this data dir holding the
        # crashed run's claim would have been fenced first)
        assert [r.owner_epoch for r in restarted.parts.metadata.owner_records(tip)] == [0, 1]
        m2.cleanup_logs()
        assert log2.local_log_start_offset > 0
        objects = sorted(p.name for p in (tmp_path / "remote").rglob("*") if p.is_file() and p.suffix != ".json")
        assert all(str(s.remote_log_segment_id.id) not in o for s in stale for o in objects)
        assert len([o for o in objects if o.endswith(".log")]) == result.segments_copied  # no orphans left
        got = []
        offset = 0
        while offset < log2.log_end_offset:
            for batch in log2.read(offset, 128 * 1024).records.batches():
                got.extend(r.value for r in batch.records() if r.offset >= offset)
                offset = batch.last_offset + 1
        assert got == values


def test_update_to_an_unknown_segment_is_refused(tmp_path: Path) -> None:
    rlm = _rlm(tmp_path, None)
    import uuid

    from tiered.rsm import RemoteLogSegmentId, TopicIdPartition

    sid = RemoteLogSegmentId.generate_new(TopicIdPartition(uuid.uuid4(), "x", 0))
    with pytest.raises(KeyError, match="no remote segment"):
        rlm.metadata.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(sid, 0, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0))
