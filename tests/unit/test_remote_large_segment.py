"""A remote segment larger than 2 GiB: copied, then read back at positions past 2^31 through the 12-byte offset
index and 64-bit fetches; its metadata records the int32-clamped size, which the read path never uses."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from local.index import OffsetIndex
from local.records import MemoryRecords, SimpleRecord
from tiered import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tiered.backends import load_rsm
from tiered.composition import assemble_remote_log_manager
from tiered.errors import RemoteStorageError
from tiered.metadata import RemoteLogMetadataStore
from tiered.rsm import RemoteStorageManager

FAR = 2**31 + 4096


@pytest.mark.slow
def test_remote_segment_past_2_gib(tmp_path: Path) -> None:
    seg = tmp_path / "seg"
    seg.mkdir()
    near = bytes(MemoryRecords.build([SimpleRecord(1, None, b"near")], base_offset=0))
    far = bytes(MemoryRecords.build([SimpleRecord(2, None, b"far past 2 GiB")], base_offset=1))
    with open(seg / "0.log", "wb") as f:
        f.write(near)
        f.seek(FAR)  # a hole: the segment is sparse locally
        f.write(far)
    index = OffsetIndex(seg / "0.index", 0, 4096, use_large_format=True)
    index.append(1, FAR)
    index.close()
    (seg / "0.timeindex").write_bytes(b"")
    (seg / "1.snapshot").write_bytes(bytes.fromhex("000148674bc700000000"))
    rsm = load_rsm("local", {"dir": str(tmp_path / "remote")})
    tip = TopicIdPartition(uuid.uuid4(), "big", 0)
    size = FAR + len(far)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), 0, 1, 2, 0, 2, size, {0: 0})
    assert md.segment_size_in_bytes == 2**31 - 1  # clamped: the serialized size is an int32
    rsm.copy_log_segment_data(md, LogSegmentData(seg / "0.log", seg / "0.index", seg / "0.timeindex", None,
                                                 seg / "1.snapshot", b"0\n1\n0 0\n"))
    (seg / "0.log").unlink()
    assert rsm.fetch_log_segment(md, FAR, FAR + len(far) - 1).read() == far
    rlm = assemble_remote_log_manager(rsm, RemoteLogMetadataStore(rsm), tmp_path / "cache")  # type: ignore[arg-type]
    got = rlm.reader.read_segment(md, 1, 1024, True)
    batch = next(MemoryRecords(got.data).batches())
    assert batch.base_offset == 1 and next(batch.records()).value == b"far past 2 GiB"
    assert (got.end, got.next_offset) == (FAR + len(far), 2)  # 64-bit positions all the way
    assert rlm.reader.read_segment(md, 0, 1024, True).data[: len(near)] == near

    class Legacy(RemoteStorageManager):
        def fetch_log_segment_int32(self, metadata, start_position, end_position=None):  # type: ignore[no-untyped-def]
            return rsm.fetch_log_segment(metadata, start_position, end_position)

    with pytest.raises(RemoteStorageError, match="2 GiB"):
        Legacy().fetch_log_segment(md, FAR, FAR + 10)
    os.sync()
