"""A SIGKILL at every step of keeping the columnar copy (tiered.columnar.keeper) loses nothing and duplicates nothing.

The child (columnar_child.py) runs one pass of the copy tasks of a broker whose topic ``c`` has
``remote.log.columnar.enable=true`` and kills itself with SIGKILL right after a step: the first Parquet file
written under its temp name (``written``), renamed to its final name (``renamed``), named by the manifest
(``published``), linked into the partition dir (``shown``); the same steps of the first file that takes the rows of
the file before it (a merge), and the deletion of the file it replaced; or, with the log start offset moved past the
first file, that file retired in the manifest (``retired``) or deleted (``deleted``). Then a pass in this process
must leave: a manifest whose files are contiguous and end where the remote segments end, no temp file and no file
the manifest does not name, the partition dir's links exactly the published files (what ``spark.read.parquet`` of
the directory reads), and rows that are exactly the log's records from the log start on (the engine's own reads are
the oracle).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from local import LogConfig, LogManager
from local.fetch import FetchIsolation
from local.log import LogStartOffsetIncrementReason
from local.records import CompressionType, MemoryRecords, SimpleRecord
from tests.logutil import local_tier_props
from tiered.columnar.location import columnar_root
from tiered.columnar.manifest import FILES_DIR, MANIFEST_NAME, partition_dir, read_manifest
from tiered.commands.consume import records_from
from tiered.remote_log_manager import RemoteLogManager

pytestmark = pytest.mark.crash

CHILD = Path(__file__).with_name("columnar_child.py")
REPO = Path(__file__).resolve().parents[2]
RECORDS = 30_000
LIMIT = 120.0  # seconds: a failure bound for a child that gets to its step in a few seconds
T0 = int(time.time() * 1000) - 3_600_000  # recent: retention by time must not delete the records


def _build(root: Path, file_bytes: int = 1) -> None:
    """The topic, its columnar files ``file_bytes`` large (1: a file a segment; more: files take the next segments)."""
    with LogManager(LogConfig.from_properties(local_tier_props(root)), start_scheduler=False) as m:
        log = m.get_or_create_log("c", 0, {"remote.storage.enable": "true", "remote.log.columnar.enable": "true",
                                           "remote.log.columnar.file.delete.delay.ms": "0",
                                           "remote.log.columnar.file.bytes": str(file_bytes)})
        for first in range(0, RECORDS, 250):
            log.append(MemoryRecords.build([SimpleRecord(T0 + i, b"k%d" % i, b"v%06d" % i + b"." * 90)
                                            for i in range(first, first + 250)], CompressionType.NONE))


def _pass(root: Path, log_start: int | None = None) -> None:
    with LogManager(LogConfig.from_properties(local_tier_props(root)), start_scheduler=False) as m:
        if log_start is not None:
            log = m.get_log("c", 0)
            assert log is not None
            log.maybe_increment_log_start_offset(log_start, LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION)
        rlm = m.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        rlm.run_once(m.all_logs())


def _kill_at(root: Path, step: str) -> None:
    temp = root / "child-temp"  # its temp dirs (a copier process's), which a SIGKILL leaves, in the test's own dir
    temp.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, str(CHILD), str(root), step], cwd=REPO, capture_output=True,
                          env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(temp)}, timeout=LIMIT)
    out = proc.stdout.decode()
    assert proc.returncode == -9, f"the child was not killed at {step}: {proc.returncode} {out}\n{proc.stderr.decode()}"
    assert out.strip().splitlines()[-1] == f"KILLED {step}", out


def _check(root: Path, files: int | None = None) -> None:
    props = local_tier_props(root)
    directory = partition_dir(columnar_root(LogConfig.from_properties(props)), "c", 0)  # type: ignore[arg-type]
    m = read_manifest(directory)
    assert m is not None and m.files
    with LogManager(LogConfig.from_properties(props), start_scheduler=False, read_only=True) as manager:
        log = manager.get_log("c", 0)
        assert log is not None
        rlm = manager.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        finished = rlm.finished_segments(rlm.topic_id_partition(log))
        log_start = log.log_start_offset
        expected = [(r.offset, r.value) for _b, r in records_from(log, log_start, FetchIsolation.HIGH_WATERMARK)]
    assert m.files[-1].end_offset == finished[-1].end_offset
    assert [s.base_offset for f in m.files for s in f.segments] == [md.start_offset for md in finished
                                                                     if md.end_offset >= m.files[0].base_offset]
    if files is not None:
        assert len(m.files) == files
    assert m.files[0].base_offset <= log_start <= m.files[0].end_offset
    assert all(a.end_offset + 1 == b.base_offset for a, b in zip(m.files, m.files[1:], strict=False))
    stored = sorted(p.name for p in (directory / FILES_DIR).iterdir())
    assert stored == sorted(f.name for f in m.files), "a temp file, an orphan or a retired file was left"
    shown = sorted(p.name for p in directory.iterdir() if p.name not in (MANIFEST_NAME, FILES_DIR))
    assert shown == stored, "what a read of the directory sees is not the published files"
    assert all(os.path.samefile(directory / n, directory / FILES_DIR / n) for n in shown)
    rows: list[tuple[int, bytes]] = []
    for f in m.files:
        table = pq.read_table(directory / f.name, columns=["offset", "value"])
        assert table.num_rows == f.rows
        rows.extend(zip(table.column("offset").to_pylist(), table.column("value").to_pylist(), strict=True))
    rows = [r for r in rows if r[0] >= log_start]
    assert rows == [r for r in expected if r[0] <= m.files[-1].end_offset]
    assert len({o for o, _ in rows}) == len(rows)


@pytest.mark.parametrize("step", ["written", "renamed", "published", "shown"])
def test_a_writer_killed_at_each_step_of_a_new_file_leaves_no_duplicate_and_no_gap(tmp_path: Path, step: str) -> None:
    _build(tmp_path)
    _kill_at(tmp_path, step)
    directory = columnar_root(LogConfig.from_properties(local_tier_props(tmp_path)))
    assert directory is not None
    left = sorted(p.name for p in (directory / "c-0" / FILES_DIR).iterdir())
    listed = read_manifest(directory / "c-0")
    named = [f.name for f in listed.files] if listed is not None else []
    # what the dead pass left: a temp file; a file no manifest names; the first file published
    if step == "written":
        assert [n for n in left if n.endswith(".tmp")] and not named, left
    elif step == "renamed":
        assert [n for n in left if n.endswith(".parquet") and n not in named] and not named, left
    else:
        assert len(named) == 1 and named[0] in left, left
    _pass(tmp_path)
    _check(tmp_path)


@pytest.mark.parametrize("step", ["retired", "deleted"])
def test_a_writer_killed_while_following_retention_leaves_no_duplicate_and_no_gap(tmp_path: Path, step: str) -> None:
    _build(tmp_path)
    _pass(tmp_path)
    props = local_tier_props(tmp_path)
    first = read_manifest(partition_dir(columnar_root(LogConfig.from_properties(props)), "c", 0))  # type: ignore[arg-type]
    assert first is not None and len(first.files) >= 2
    _pass(tmp_path, log_start=first.files[0].end_offset + 5)  # in this process: retires and deletes the first file
    second = read_manifest(partition_dir(columnar_root(LogConfig.from_properties(props)), "c", 0))  # type: ignore[arg-type]
    assert second is not None and second.files[0] == first.files[1] and not second.retired
    # again, killed: the log start moves past the next file
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        log = m.get_log("c", 0)
        assert log is not None
        log.maybe_increment_log_start_offset(second.files[0].end_offset + 7,
                                             LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION)
    _kill_at(tmp_path, step)
    _pass(tmp_path)
    _check(tmp_path)


@pytest.mark.parametrize("step", ["written#2", "renamed#2", "published#2", "shown#2", "deleted#1"])
def test_a_writer_killed_while_a_file_takes_the_next_segment_leaves_no_duplicate_and_no_gap(tmp_path: Path,
                                                                                       step: str) -> None:
    _build(tmp_path, file_bytes=2**40)  # every segment's rows go into one file
    _kill_at(tmp_path, step)
    directory = columnar_root(LogConfig.from_properties(local_tier_props(tmp_path)))
    assert directory is not None
    listed = read_manifest(directory / "c-0")
    assert listed is not None and len(listed.files) == 1
    on_disk = {p.name for p in (directory / "c-0" / FILES_DIR).iterdir()}
    if step in ("published#2", "shown#2"):  # the merged file published, the one it replaced retired
        assert len(listed.files[0].segments) == 2 and len(listed.retired) == 1 and listed.retired[0].name in on_disk
    elif step == "deleted#1":  # at the end of the pass, every merge done: one of the replaced files deleted
        assert len(listed.files[0].segments) == len(listed.retired) + 1 >= 3
        assert [r.name in on_disk for r in listed.retired].count(False) == 1
    else:  # the first file still the manifest's; the dead pass's merged file under a temp name or unnamed
        assert len(listed.files[0].segments) == 1 and not listed.retired
        assert len(on_disk) == 2, on_disk  # its file, the dead pass's
    _pass(tmp_path)
    _check(tmp_path, files=1)


def test_a_copy_made_before_files_lived_in_their_own_dir_is_taken_in(tmp_path: Path) -> None:
    """A partition dir of the first layout (the files themselves beside the manifest, no ``_files/``): the next
    writer keeps them, in ``_files/``, with the links a directory read needs."""
    import shutil

    _build(tmp_path)
    _pass(tmp_path)
    directory = columnar_root(LogConfig.from_properties(local_tier_props(tmp_path)))
    assert directory is not None
    shutil.rmtree(directory / "c-0" / FILES_DIR)  # the links in the partition dir are now the only names of the files
    _pass(tmp_path)
    _check(tmp_path)
