"""A damaged last file of a columnar copy is copied again from the remote segments.

The keeper checks the last file's bytes before the next segment's rows extend it. A file whose bytes were not the
manifest's (a flipped byte, a truncation) or that was gone used to stay in the manifest for good, the next rows in a
new file beside it: every read planned over it failed naming it until an operator removed the copy. It is retired
now, and its offsets go into the new file with the new segment's, from the remote segments (they hold the rows the
file held)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

import pyarrow.parquet as pq

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from tests.logutil import local_tier_props
from tiered.columnar.manifest import partition_dir, published_file, read_manifest, stored_file
from tiered.composition import remote_log_manager_of

ON = {"remote.storage.enable": "true", "remote.log.columnar.enable": "true"}


def _append(log: object, first: int, last: int) -> None:
    log.append(MemoryRecords.build([SimpleRecord(b"v%d" % i) for i in range(first, last)]))  # type: ignore[attr-defined]
    log.roll()  # type: ignore[attr-defined]


def _damage_flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x01
    path.write_bytes(bytes(data))  # (in place: the published link is the same file)


def _damage_gone(path: Path) -> None:
    path.unlink()
    (path.parent.parent / path.name).unlink()


@pytest.mark.parametrize("damage", [_damage_flip, _damage_gone], ids=["flipped-byte", "missing"])
def test_a_damaged_last_file_is_copied_again_with_the_next_rows(tmp_path: Path, damage: object,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    config = LogConfig.from_properties(local_tier_props(tmp_path, **{
        "remote.log.manager.copier.process.enable": "false"}))
    with LogManager(config, start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0, ON)
        _append(log, 0, 100)
        rlm = remote_log_manager_of(manager)
        assert rlm is not None and rlm.columnar is not None
        rlm.run_once(manager.all_logs())
        directory = partition_dir(rlm.columnar.root, "t", 0)
        first = read_manifest(directory)
        assert first is not None and [(f.base_offset, f.end_offset) for f in first.files] == [(0, 99)]
        damaged = first.files[0].name
        damage(stored_file(directory, damaged))  # type: ignore[operator]

        _append(log, 100, 200)
        rlm.run_once(manager.all_logs())
        now = read_manifest(directory)
        assert now is not None
        assert [(f.base_offset, f.end_offset) for f in now.files] == [(0, 199)]  # one file, copied again from 0
        assert damaged in {r.name for r in now.retired}
        values = pq.read_table(published_file(directory, now.files[0].name), columns=["offset", "value"]).to_pylist()
        assert values == [{"offset": i, "value": b"v%d" % i} for i in range(200)]
        assert sorted(p.name for p in directory.glob("*.parquet")) == [now.files[0].name]  # only it is published
        assert any(damaged in r.getMessage() and "copied again" in r.getMessage() for r in caplog.records)
