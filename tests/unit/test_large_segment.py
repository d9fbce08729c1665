"""KIP-1333 end to end: with the large-index feature finalized, one segment grows past 2 GiB of real bytes,
its offset index is in the 12-byte format, and reads past position 2^31 work before and after a restart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from local import LogConfig, LogManager
from local.features import finalize
from local.index import detect_entry_size
from local.records import MemoryRecords, SimpleRecord

GIB = 2**30
CHUNK = 1024 * 1024


@pytest.mark.slow
def test_segment_past_2_gib_with_12_byte_index(tmp_path: Path) -> None:
    data = tmp_path / "data"
    finalize([data], "4.4")
    props = {"log.dirs": str(data), "log.segment.bytes": str(3 * GIB), "log.index.interval.bytes": str(64 * CHUNK)}
    payload = os.urandom(CHUNK - 200)
    target = int(2.2 * GIB)
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
        log = manager.get_or_create_log("big", 0)
        batch = MemoryRecords.build([SimpleRecord(1_700_000_000_000, b"k", payload)])
        appended = 0
        while appended < target:
            log.append(batch)
            appended += batch.size_in_bytes
        assert log.number_of_segments() == 1
        seg = log.active_segment
        assert seg.size > 2**31
        assert seg.offset_index.entry_size == 12
        last = log.log_end_offset - 1
        entry = seg.offset_index.lookup(last)
        assert entry.position > 2**31
        info = log.read(last, CHUNK + 1024)
        batches = list(info.records.batches())
        assert [b.base_offset for b in batches] == [last]
        assert next(batches[0].records()).value == payload
        log.flush()
        end = log.log_end_offset
    index_path = data / "big-0" / "00000000000000000000.index"
    assert detect_entry_size(index_path, 8) == 12
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
        log = manager.get_log("big", 0)
        assert log is not None and log.log_end_offset == end
        info = log.read(end - 2, 3 * CHUNK)
        assert [b.base_offset for b in info.records.batches()] == [end - 2, end - 1]
    (data / ".kafka_cleanshutdown").unlink()
    index_path.unlink()  # force a rebuild: recovery writes the 12-byte format
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as manager:
        log = manager.get_log("big", 0)
        assert log is not None and log.log_end_offset == end
        assert log.active_segment.offset_index.entry_size == 12
        assert next(iter(log.read(end - 1, CHUNK * 2).records.batches())).base_offset == end - 1


def test_legacy_format_append_past_2_gib_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="features upgrade"):
        LogConfig.from_properties({"log.dirs": str(tmp_path), "log.segment.bytes": str(3 * GIB)})
