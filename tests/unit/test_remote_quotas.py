"""The remote tier's byte-rate quotas (``remote.log.manager.copy.max.bytes.per.second`` and its fetch twin): the
token bucket on a fake clock, and the copy task paying for every segment it copies."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from tests.logutil import local_tier_props
from tiered import rate_limiter
from tiered.backends.local_dir import LocalDirRemoteStorageManager
from tiered.composition import assemble_remote_log_manager
from tiered.metadata import RemoteLogMetadataStore
from tiered.rate_limiter import RateLimiter


class FakeClock:
    """``monotonic`` and ``sleep`` of the quota module: time moves only when the quota sleeps."""

    def __init__(self) -> None:
        self.now = 1_000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(rate_limiter, "_time", fake)
    return fake


def test_the_bucket_starts_full_holds_one_second_and_makes_a_debtor_wait(clock: FakeClock) -> None:
    quota = RateLimiter(1000)
    quota.acquire(600)
    quota.acquire(400)  # exactly the first second's allowance: no wait
    assert clock.sleeps == []
    quota.acquire(500)  # 500 bytes in debt at 1000 B/s
    assert clock.sleeps == [pytest.approx(0.5)]
    clock.now += 0.25  # a quarter second refills 250 bytes
    quota.acquire(250)
    assert clock.sleeps == [pytest.approx(0.5)]
    quota.acquire(1)
    assert clock.sleeps[1:] == [pytest.approx(0.001)]
    clock.now += 60  # idle for a minute: the bucket holds one second's worth, not sixty
    quota.acquire(3000)
    assert clock.sleeps[2:] == [pytest.approx(2.0)]


@pytest.mark.parametrize("rate", [None, 0, 2**62])
def test_no_rate_no_limit(clock: FakeClock, rate: int | None) -> None:
    quota = RateLimiter(rate)
    assert quota.rate is None
    for _ in range(3):
        quota.acquire(1 << 40)
    assert clock.sleeps == []


def test_the_copy_task_pays_for_each_segment_before_uploading_it(tmp_path: Path, clock: FakeClock) -> None:
    """Segments of about 1 MiB copied under a 256 KiB/s quota: the waits add up to the bytes beyond the first
    second's allowance, and each upload happens after its own wait."""
    rate = 256 * 1024
    uploads: list[float] = []

    class Recording(LocalDirRemoteStorageManager):
        def copy_log_segment_data(self, metadata, segment_data):  # type: ignore[no-untyped-def]
            uploads.append(clock.now)
            return super().copy_log_segment_data(metadata, segment_data)

    rsm = Recording()
    rsm.configure({"dir": str(tmp_path / "remote")})
    rlm = assemble_remote_log_manager(rsm, RemoteLogMetadataStore(rsm), tmp_path / "data",
        copy_max_bytes_per_second=rate,
    )
    config = LogConfig.from_properties(local_tier_props(tmp_path))
    with LogManager(config, remote_tier=rlm, start_scheduler=False) as m:
        log = m.get_or_create_log("t", 0, {"remote.storage.enable": "true"})
        now_ms = int(time.time() * 1000)
        for first in range(0, 3000, 100):
            log.append(MemoryRecords.build([SimpleRecord(now_ms, None, b"%08d" % i * 128) for i in range(first, first + 100)]))
        sizes = [seg.size for seg in list(log.segments.values())[:-1]]
        assert len(sizes) >= 2
        result = rlm.run_once(m.all_logs())
    assert result.segments_copied == len(sizes)
    assert sum(clock.sleeps) == pytest.approx((sum(sizes) - rate) / rate)
    # The n-th upload starts once the first n segments are paid for.
    assert uploads == [pytest.approx(1_000.0 + max(0, sum(sizes[: n + 1]) - rate) / rate) for n in range(len(sizes))]
