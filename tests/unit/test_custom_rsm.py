"""A RemoteStorageManager of the user's own, named by dotted path, works end to end: the example of
``docs/custom-rsm.md`` (``docs/examples/directory_rsm.py``, not an object-store backend) through the ``tiered`` CLI
in separate processes, and through the library's ``LogManager(config)``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tiered import IndexType, LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tiered.errors import RemoteResourceNotFoundError

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
CLASS_NAME = "directory_rsm.DirectoryStorage"
LINES = [f"value-{i:06d}-{'x' * 150}" for i in range(15_000)]  # ~2.5 MiB: three 1 MiB segments


@pytest.fixture
def example_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "tiered.cli", *args], input=stdin, capture_output=True, text=True,
                          timeout=300, env=env)


def _write_config(tmp_path: Path, **extra: str) -> Path:
    props = {
        "log.dirs": str(tmp_path / "data"),
        "log.segment.bytes": "1048576",
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": CLASS_NAME,
        "rsm.config.root": str(tmp_path / "remote"),
        **extra,
    }
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def test_a_custom_rsm_by_dotted_path_produces_offloads_and_serves_remote_offsets_through_the_cli(tmp_path: Path) -> None:
    config = str(_write_config(tmp_path))
    produce = run_cli("--config", config, "produce", "-t", "t", "--topic-config", "remote.storage.enable=true",
                      "--topic-config", "local.retention.bytes=1048576", stdin="\n".join(LINES) + "\n")
    assert produce.returncode == 0, produce.stderr

    offload = run_cli("--config", config, "offload")
    assert offload.returncode == 0, offload.stderr
    assert "copied 2 segment(s)" in offload.stdout and "local retention deleted 1 segment(s)" in offload.stdout

    # The segments are in the plugin's own layout; their metadata in the default local store in the data dir.
    assert len(list((tmp_path / "remote").rglob("segment.log"))) == 2
    events = sorted(p for p in (tmp_path / "data" / "remote-log-metadata").rglob("*.json")
                    if not p.name.startswith("owner-"))
    assert len(events) == 4  # COPY_SEGMENT_STARTED and COPY_SEGMENT_FINISHED of each segment
    assert len(list((tmp_path / "data" / "remote-log-metadata").rglob("owner-*.json"))) == 1  # the partition's claim
    assert not (tmp_path / "data" / "t-0" / "00000000000000000000.log").exists()  # offset 0 lives remotely only

    first = run_cli("--config", config, "consume", "-t", "t", "--offset", "0", "--max-messages", "2", "--json")
    assert first.returncode == 0, first.stderr
    assert [json.loads(line)["value"] for line in first.stdout.splitlines()] == LINES[:2]
    everything = run_cli("--config", config, "consume", "-t", "t")
    assert everything.returncode == 0, everything.stderr
    assert everything.stdout.splitlines() == LINES


def test_the_library_opens_the_same_tier_with_log_manager_config_alone(tmp_path: Path, example_on_path: None) -> None:
    from local import LogConfig, LogManager
    from local.records import MemoryRecords, SimpleRecord
    from tests.logutil import read_all_values
    from tiered.composition import remote_log_manager_of

    config = _write_config(tmp_path, **{"remote.log.manager.copier.process.enable": "false"})
    with LogManager(LogConfig.from_properties(str(config)), start_scheduler=False) as manager:
        log = manager.get_or_create_log("t", 0, {"remote.storage.enable": "true", "local.retention.bytes": "1048576"})
        now = int(time.time() * 1000)  # within retention.ms: only local retention deletes
        for start in range(0, len(LINES), 500):
            log.append(MemoryRecords.build([SimpleRecord(now, None, v.encode()) for v in LINES[start:start + 500]]))

        rlm = remote_log_manager_of(manager)
        assert rlm is not None and type(rlm.rsm).__name__ == "DirectoryStorage"
        assert rlm.run_once(manager.all_logs()).segments_copied == 2
        manager.cleanup_logs()
        assert log.local_log_start_offset > 0
    with LogManager(LogConfig.from_properties(str(config)), start_scheduler=False) as manager:  # a restart
        log = manager.get_or_create_log("t", 0)
        assert [v for _, v in read_all_values(log, 0)] == [line.encode() for line in LINES]


def _segment(tmp_path: Path, with_txn: bool) -> tuple[RemoteLogSegmentMetadata, LogSegmentData]:
    files = {}
    for name, content in [("log", b"L" * 5000), ("index", b"I" * 16), ("timeindex", b"T" * 24), ("snapshot", b"S" * 10),
                          ("txnindex", b"X" * 34)]:
        files[name] = tmp_path / f"00000000000000000100.{name}"
        files[name].write_bytes(content)
    tip = TopicIdPartition(uuid.uuid4(), "example", 3)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), 100, 199, 0, 0, 0, 5000, {0: 100})
    data = LogSegmentData(files["log"], files["index"], files["timeindex"], files["txnindex"] if with_txn else None,
                          files["snapshot"], b"0\n1\n0 100\n")
    return md, data


def test_the_example_keeps_the_plugin_contract(tmp_path: Path, example_on_path: None) -> None:
    from directory_rsm import DirectoryStorage

    rsm = DirectoryStorage()
    rsm.configure({"root": str(tmp_path / "remote")})
    md, data = _segment(tmp_path, with_txn=False)
    assert rsm.copy_log_segment_data(md, data) is None
    assert rsm.copy_log_segment_data(md, data) is None  # idempotent
    with rsm.fetch_log_segment(md, 10, 19) as stream:  # end inclusive
        assert stream.read() == b"L" * 10
    with rsm.fetch_log_segment(md, 4990) as stream:
        assert stream.read() == b"L" * 10
    assert rsm.fetch_index(md, IndexType.LEADER_EPOCH).read() == b"0\n1\n0 100\n"
    assert rsm.fetch_index(md, IndexType.OFFSET).read() == b"I" * 16
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_index(md, IndexType.TRANSACTION)  # copied without one
    rsm.delete_log_segment_data(md)
    rsm.delete_log_segment_data(md)  # gone already: not an error
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_log_segment(md, 0)
    assert not any(p.is_file() for p in (tmp_path / "remote").rglob("*"))


def test_a_failed_copy_of_the_example_leaves_nothing(tmp_path: Path, example_on_path: None) -> None:
    from directory_rsm import DirectoryStorage

    from tiered.errors import RemoteStorageError

    rsm = DirectoryStorage()
    rsm.configure({"root": str(tmp_path / "remote")})
    md, data = _segment(tmp_path, with_txn=True)
    data.producer_snapshot_index.unlink()  # the copy fails after the log and three indexes
    with pytest.raises(RemoteStorageError, match="failed"):
        rsm.copy_log_segment_data(md, data)
    assert not any(p.is_file() for p in (tmp_path / "remote").rglob("*"))


def test_the_guide_shows_the_tested_example_unchanged() -> None:
    guide = (EXAMPLES.parent / "custom-rsm.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", guide, flags=re.DOTALL)
    assert (EXAMPLES / "directory_rsm.py").read_text() in blocks
