"""The copier process's round trips (tiered/copier_process.py): a segment's COPY_SEGMENT_STARTED event goes to the
child with the copy itself, and still lands before the copy's first object; a failed deferred put fails the copy
and uploads nothing. (Each round trip costs the parent a few waits for the GIL under load: the soak's copy lag.)"""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from tiered import layout
from tiered.backends.local_dir import LocalDirRemoteStorageManager
from tiered.copier_process import ChildWritingStore, ProcessCopier
from tiered.errors import RemoteStorageError
from tiered.metadata import RemoteLogMetadataStore
from tiered.rsm import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

LIMIT = 60.0
TIP = TopicIdPartition(uuid.uuid4(), "t", 0)


def _segment(tmp: Path) -> tuple[RemoteLogSegmentMetadata, LogSegmentData]:
    src = tmp / "src"
    src.mkdir()
    for name in ("0.log", "0.index", "0.timeindex", "1.snapshot"):
        (src / name).write_bytes(os.urandom(64))
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(TIP), 0, 0, 0, 0, 0, 64, {0: 0})
    return md, LogSegmentData(src / "0.log", src / "0.index", src / "0.timeindex", None, src / "1.snapshot", b"0\n1\n0 0\n")


def _started_key(rsm: Any, md: RemoteLogSegmentMetadata) -> str:
    return layout.metadata_event_key(rsm.prefix, md.remote_log_segment_id, md.start_offset, 0)


def test_the_started_event_goes_with_the_copy_and_lands_before_its_objects(tmp_path: Path) -> None:
    """GatedDir (tests/gated_rsm.py) stops the child's copy after the ``.log`` upload until the test opens its FIFO:
    opening it for writing returns once the child waits there, so the test looks at the store at that point."""
    remote, gate = tmp_path / "remote", tmp_path / "gate"
    os.mkfifo(gate)
    props = {"dir": str(remote), "gate": str(gate)}
    from tests.gated_rsm import GatedDir

    rsm = GatedDir()
    rsm.configure(props)
    copier = ProcessCopier("tests.gated_rsm.GatedDir", props, lambda m, d: pytest.fail("no fallback"))
    store = RemoteLogMetadataStore(ChildWritingStore(rsm.store, rsm, copier), rsm.prefix)
    md, data = _segment(tmp_path)
    started = remote / _started_key(rsm, md)
    recorded, results = threading.Event(), []

    def copy_task() -> None:  # as the copy task does, in one thread: the event deferred, then the copy
        store.add_remote_log_segment_metadata(md)
        recorded.set()
        results.append(copier.copy_with_checksums(md, data, 1 << 20))

    try:
        copy = threading.Thread(target=copy_task)
        copy.start()
        assert recorded.wait(LIMIT)
        with open(gate, "wb"):  # blocks until the child is at the gate, the .log uploaded
            assert started.exists()
            assert any(p.name.endswith(".log") for p in remote.rglob("*"))
        copy.join(LIMIT)
        assert not copy.is_alive() and len(results) == 1
        checksums, custom = results[0]
        assert custom is None and checksums.objects[".log"].size == 64
        assert copier.processes == 1
    finally:
        copier.close()


def test_a_failed_deferred_put_fails_the_copy_naming_the_key_and_uploads_nothing(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    rsm = LocalDirRemoteStorageManager()
    rsm.configure({"dir": str(remote)})
    copier = ProcessCopier("local", {"dir": str(remote)}, lambda m, d: pytest.fail("no fallback"))
    store = RemoteLogMetadataStore(ChildWritingStore(rsm.store, rsm, copier), rsm.prefix)
    md, data = _segment(tmp_path)
    key = _started_key(rsm, md)
    # Where the event's directory must go, a file: the child's put of the event fails.
    (remote / key).parent.parent.mkdir(parents=True)
    (remote / key).parent.write_bytes(b"in the way")
    try:
        store.add_remote_log_segment_metadata(md)  # deferred: its own put fails only with the copy
        with pytest.raises(RemoteStorageError, match="deferred to this request") as failed:
            copier.copy_with_checksums(md, data, 1 << 20)
        assert key in str(failed.value)
        assert [p for p in remote.rglob("*") if p.is_file() and p.name != (remote / key).parent.name] == []
        # The next request of the thread carries nothing left over.
        (remote / key).parent.unlink()
        copier.put("other/key.json", b"{}")
        assert not (remote / key).exists() and (remote / "other" / "key.json").exists()
    finally:
        copier.close()


def test_a_batch_writes_each_segments_started_event_before_its_objects_and_finished_after(tmp_path: Path) -> None:
    """At GatedDir's gate (the first .log of the batch uploaded), the child has written that segment's
    COPY_SEGMENT_STARTED event and not its FINISHED one (a kill there leaves a STARTED copy, which the next run
    deletes, never objects nobody knows of)."""
    from tests.gated_rsm import GatedDir
    from tiered.copier_process import BatchCopier
    from tiered.rlm_copy import CopyJob

    remote, gate = tmp_path / "remote", tmp_path / "gate"
    os.mkfifo(gate)
    props = {"dir": str(remote), "gate": str(gate)}
    rsm = GatedDir()
    rsm.configure(props)
    copier = ProcessCopier("tests.gated_rsm.GatedDir", props, lambda m, d: pytest.fail("no fallback"))
    store = RemoteLogMetadataStore(ChildWritingStore(rsm.store, rsm, copier), rsm.prefix)
    md, data = _segment(tmp_path)
    batch = BatchCopier(copier, store, rsm)
    outcome: list[Any] = []
    copy = threading.Thread(target=lambda: outcome.append(batch.copy([CopyJob(md, data, 4096, 128, 1)])))
    copy.start()
    try:
        with open(gate, "wb"):  # blocks until the child waits at the gate
            assert (remote / _started_key(rsm, md)).exists()
            assert not (remote / _started_key(rsm, md).replace(".0.json", ".1.json")).exists()
        copy.join(LIMIT)
        assert not copy.is_alive() and outcome[0].failure is None and len(outcome[0].copied) == 1
        assert (remote / _started_key(rsm, md).replace(".0.json", ".1.json")).exists()
    finally:
        copier.close()


def test_a_child_whose_parent_died_before_its_reply_exits_quietly(tmp_path: Path) -> None:
    """SIGKILL of tiered run while its copier child starts: the child's 'ready' meets a closed pipe. It exits,
    without a traceback on the terminal the run was started from."""
    import subprocess
    import sys

    from tiered.copier_process import _send

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    child = subprocess.Popen([sys.executable, "-m", "tiered.copier_process"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    child.stdout.close()  # the parent's end of the replies: gone, as when the parent is killed
    _send(child.stdin, ("tiered.backends.local_dir.LocalDirRemoteStorageManager", {"dir": str(tmp_path / "bucket")}))
    child.stdin.close()
    err = child.stderr.read()
    assert child.wait(timeout=120) == 0
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err
