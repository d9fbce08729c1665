"""A read-only open (local.read_only) of a partition that a live writer changes while it is copied: the writer
deleting a producer snapshot or a whole segment between the listing and the copy (or the open) makes the open list
the partition again, not fail (found by a Spark stream planning a micro-batch while the broker ran retention)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import local.read_only
from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord


def _data_dir(tmp_path: Path) -> tuple[LogConfig, Path]:
    config = LogConfig.from_properties({"log.dirs": str(tmp_path / "data"), "log.segment.bytes": str(1024 * 1024)})
    with LogManager(config, start_scheduler=False) as m:
        log = m.get_or_create_log("t", 0)
        for first in range(0, 30_000, 500):
            log.append(MemoryRecords.build([SimpleRecord(i, None, b"v%06d" % i + b"." * 80)
                                            for i in range(first, first + 500)]))
        assert len(log.segments) >= 3
    return config, tmp_path / "data" / "t-0"


def _expected(config: LogConfig) -> tuple[int, int]:
    with LogManager(config, start_scheduler=False, read_only=True) as m:
        log = m.get_log("t", 0)
        assert log is not None
        return log.log_start_offset, log.log_end_offset


@pytest.mark.parametrize("what", [".snapshot", ".log"])
def test_a_file_deleted_between_the_listing_and_its_copy_lists_the_partition_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str) -> None:
    config, pdir = _data_dir(tmp_path)
    start, end = _expected(config)
    victims = sorted(p for p in pdir.iterdir() if p.name.endswith(what))
    assert len(victims) >= 2
    victim = victims[0]
    real_copy, real_symlink = local.read_only._copy, os.symlink
    fired = []

    def writer_deletes_first(*args: object) -> None:  # the writer's deletion lands just before this process copies
        if not fired:
            fired.append(victim.name)
            os.unlink(victim)
            if what == ".log":  # a segment goes with its indexes
                for sibling in pdir.glob(victim.stem + ".*"):
                    sibling.unlink()

    if what == ".snapshot":
        monkeypatch.setattr(local.read_only, "_copy", lambda s, t: (writer_deletes_first(), real_copy(s, t))[1])
    else:  # the link is made (to a file about to vanish); the open finds it dangling
        monkeypatch.setattr(local.read_only.os, "symlink",
                            lambda s, t: (real_symlink(s, t), writer_deletes_first() if s == str(victim) else None)[0])
    with LogManager(config, start_scheduler=False, read_only=True) as m:
        log = m.get_log("t", 0)
        assert log is not None and fired == [victim.name]
        assert log.log_end_offset == end
        if what == ".log":  # the first segment is gone: the log now starts at the next one
            assert log.log_start_offset == int(victims[1].stem)
        else:
            assert log.log_start_offset == start


def test_what_the_loader_replaces_in_the_scratch_copy_never_reaches_the_original(tmp_path: Path) -> None:
    """Snapshots and checkpoints are hard links in the scratch copy (local.read_only): every write of them must be
    a rename of a new file, so the original keeps its bytes; the index files are copies, written in place."""
    from local.checkpoint import atomic_write
    from local.read_only import scratch_partition_dir

    _config, pdir = _data_dir(tmp_path)
    before = {p.name: p.read_bytes() for p in pdir.iterdir()}
    scratch = scratch_partition_dir(pdir, tmp_path / "scratch")
    linked = sorted(p.name for p in scratch.iterdir() if not p.is_symlink() and p.stat().st_nlink > 1)
    assert any(n.endswith(".snapshot") for n in linked) and "leader-epoch-checkpoint" in linked
    assert not any(".index" in n for n in linked), "an index is written in place: it must be a copy"
    for name in linked:
        atomic_write(scratch / name, b"written by a reader")
    for name in (n for n in before if ".index" in n):
        with open(scratch / name, "r+b") as f:
            f.write(b"\xff" * 8)
    assert {p.name: p.read_bytes() for p in pdir.iterdir()} == before


def test_a_reader_seeing_retention_delete_the_first_segment_says_no_deletion(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Retention deletes a segment's .log before its indexes: a reader's view made between the two found "an orphaned
    index file ... with no log file: deleting it" and printed it at every plan of a streaming query (a helper's
    pass), as if the reader deleted files of the live data dir. Its view is a scratch copy; it leaves the index out
    quietly, and the live data dir keeps it."""
    import logging

    config, pdir = _data_dir(tmp_path)
    first = sorted(p for p in pdir.iterdir() if p.name.endswith(".log"))[0]
    first.unlink()  # (retention, half done)
    index = first.with_suffix(".index")
    with caplog.at_level(logging.DEBUG, logger="local"), LogManager(config, start_scheduler=False, read_only=True) as m:
        log = m.get_log("t", 0)
        assert log is not None and log.log_start_offset > 0
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [w for w in warned if "orphaned" in w], warned
    assert any("orphaned index file" in r.getMessage() for r in caplog.records)  # (said at DEBUG)
    assert index.exists()
