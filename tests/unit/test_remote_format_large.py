"""A 2+ GiB sparse segment in the manifest format (zstd + AES-256-GCM) on the local-directory backend: the upload's
peak RSS, measured in a subprocess, grows by a few chunks only; ranged reads past 2^31 and at chunk boundaries
there return the original bytes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.formatutil import KeyPairPaths, combo_config, write_key_pair
from tiered import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tiered.backends import load_rsm

CHUNK = 4 * 1024 * 1024
FAR = 2**31 + 3 * CHUNK + 123  # past 2^31, inside a chunk
HEAD = b"head of the segment " * 1000
TAIL = b"far past two GiB " * 50_000  # crosses a chunk boundary: FAR..FAR+850 KB
SIZE = FAR + len(TAIL)

_CHILD = textwrap.dedent("""
    import json, resource, sys, uuid
    from tests.formatutil import segment_files
    from tiered import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
    from tiered.backends import load_rsm

    config, log, out = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    rsm = load_rsm("local", config)
    data = segment_files(__import__("pathlib").Path(out) / "idx", b"")
    data = type(data)(__import__("pathlib").Path(log), data.offset_index, data.time_index, None,
                      data.producer_snapshot_index, data.leader_epoch_index)
    tip = TopicIdPartition(uuid.UUID(int=7), "big", 0)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, uuid.UUID(int=9)), 0, 1, 2, 0, 2, 2**31 - 1, {0: 0})
    rsm.store.put("warm-up", b"x")  # imports and first allocations before the baseline
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rsm.copy_log_segment_data(md, data)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"before_kib": before, "after_kib": after}))
""")


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> list[KeyPairPaths]:
    return [write_key_pair(tmp_path_factory.mktemp("keys"), "k1")]


def _upload_growth(config: dict[str, str], log: Path, tmp_path: Path) -> int:
    """Bytes by which copying ``log`` raised the peak RSS of a fresh process."""
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(config), str(log), str(tmp_path)], cwd=repo,
                          capture_output=True, text=True, timeout=600, env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    rss = json.loads(proc.stdout.strip().splitlines()[-1])
    return (rss["after_kib"] - rss["before_kib"]) * 1024  # type: ignore[no-any-return]


@pytest.mark.slow
def test_an_incompressible_segment_uploads_in_bounded_memory(pairs: list[KeyPairPaths], tmp_path: Path) -> None:
    """Encryption only: the stored object is as large as the segment (256 MiB), none of it held in memory."""
    import os

    log = tmp_path / "random.log"
    with open(log, "wb") as f:
        for _ in range(64):
            f.write(os.urandom(CHUNK))
    growth = _upload_growth({"dir": str(tmp_path / "remote"), **combo_config("aes", pairs, CHUNK)}, log, tmp_path)
    assert growth < 8 * CHUNK, f"the upload grew the peak RSS by {growth / 2**20:.1f} MiB (chunks of 4 MiB)"


@pytest.mark.slow
def test_a_2_gib_segment_uploads_in_bounded_memory_and_reads_past_2_31(pairs: list[KeyPairPaths], tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    with open(log, "wb") as f:
        f.write(HEAD)
        f.seek(FAR)
        f.write(TAIL)
    assert log.stat().st_size == SIZE > 2**31
    config = {"dir": str(tmp_path / "remote"), **combo_config("zstd+aes", pairs, CHUNK)}
    growth = _upload_growth(config, log, tmp_path)
    assert growth < 8 * CHUNK, f"the upload grew the peak RSS by {growth / 2**20:.1f} MiB (chunks of 4 MiB)"

    rsm = load_rsm("local", config)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(TopicIdPartition(__import__("uuid").UUID(int=7), "big", 0),
                                                     __import__("uuid").UUID(int=9)), 0, 1, 2, 0, 2, 2**31 - 1, {0: 0})
    manifest = rsm.manifest(md)  # type: ignore[attr-defined]
    assert manifest.size == SIZE and manifest.chunk_count == -(-SIZE // CHUNK)
    assert manifest.stored_size < 64 * 1024 * 1024  # zeros compress
    assert rsm.fetch_log_segment(md, 0, len(HEAD) - 1).read() == HEAD
    assert rsm.fetch_log_segment(md, FAR, SIZE - 1).read() == TAIL
    boundary = (FAR // CHUNK + 1) * CHUNK  # the first chunk boundary inside TAIL
    assert rsm.fetch_log_segment(md, boundary - 5, boundary + 4).read() == TAIL[boundary - 5 - FAR : boundary + 5 - FAR]
    assert rsm.fetch_log_segment(md, 2**31 - 2, 2**31 + 1).read() == bytes(4)
    assert rsm.fetch_log_segment(md, SIZE - 3).read() == TAIL[-3:]
