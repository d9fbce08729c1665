from __future__ import annotations

import shutil
from pathlib import Path

import pytest

# A real Kafka 4.0 KRaft log dir (data written by a broker, kept as a fixture so a plain clone is self-contained).
GOLDEN = Path(__file__).resolve().parent / "fixtures" / "kafka-4.0-kraft-logs"


@pytest.fixture
def golden_dir(tmp_path: Path) -> Path:
    """A writable copy of the real Kafka 4.0 KRaft log dir in tests/fixtures."""
    if not GOLDEN.is_dir():
        raise RuntimeError(f"golden Kafka log dir not found at {GOLDEN}")
    target = tmp_path / "kafka-4.0-kraft-logs"
    shutil.copytree(GOLDEN, target)
    for path in target.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    target.chmod(0o755)
    return target
