"""Stateful property tests: the offset and time indexes against sorted-list models.

Each machine appends (single entries and bursts that cross the 8 KiB warm section), looks up anything,
truncates, trims and reopens from disk, and checks every answer against a plain Python model.
"""

from __future__ import annotations

import bisect
import random
import shutil
import tempfile
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from local.errors import IndexFullError, InvalidIndexTimestampError, InvalidOffsetError
from local.index import (
    LARGE_OFFSET_ENTRY_SIZE,
    LEGACY_OFFSET_ENTRY_SIZE,
    OffsetIndex,
    OffsetPosition,
    TimeIndex,
    TimestampOffset,
)

MAX_ENTRIES = 2500  # above the warm section of either format (1024 or 682 entries)
SETTINGS = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

targets = st.one_of(st.integers(-(2**40), 2**40), st.integers(0, 60_000))


class OffsetIndexMachine(RuleBasedStateMachine):
    """OffsetIndex vs a list of (offset, position) pairs."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="offset-index-props-"))
        self.path = self.dir / "00000000000000001000.index"
        self.base = 1000
        self.model: list[tuple[int, int]] = []
        self.index: OffsetIndex

    @initialize(large=st.booleans())
    def open_index(self, large: bool) -> None:
        self.large = large
        self.size = LARGE_OFFSET_ENTRY_SIZE if large else LEGACY_OFFSET_ENTRY_SIZE
        self.index = OffsetIndex(self.path, self.base, MAX_ENTRIES * self.size, use_large_format=large)

    def _next(self, rng: random.Random) -> tuple[int, int]:
        last_offset, last_position = self.model[-1] if self.model else (self.base - 1, -1)
        step = 2**33 if self.large and rng.random() < 0.01 else rng.randint(1, 5000)
        return last_offset + rng.randint(1, 20), last_position + step

    @rule(seed=st.integers(0, 2**32), count=st.integers(1, 900))
    def append_burst(self, seed: int, count: int) -> None:
        rng = random.Random(seed)
        for _ in range(count):
            if len(self.model) >= self.index.max_entries:
                with pytest.raises(IndexFullError):
                    self.index.append(*self._next(rng))
                return
            offset, position = self._next(rng)
            if position > 2**31 - 1 and not self.large:
                return
            self.index.append(offset, position)
            self.model.append((offset, position))

    @rule(delta=st.integers(-5, 0))
    def append_out_of_order(self, delta: int) -> None:
        if self.model and not self.index.is_full:
            with pytest.raises(InvalidOffsetError):
                self.index.append(self.model[-1][0] + delta, self.model[-1][1] + 1)

    @rule(probe=targets)
    def lookup(self, probe: int) -> None:
        offsets = [offset for offset, _ in self.model]
        slot = bisect.bisect_right(offsets, probe) - 1
        expected = OffsetPosition(self.base, 0) if slot < 0 else OffsetPosition(*self.model[slot])
        assert self.index.lookup(probe) == expected

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def lookup_near_an_entry(self, data: st.DataObject) -> None:
        slot = data.draw(st.integers(0, len(self.model) - 1))
        offset, position = self.model[slot]
        assert self.index.lookup(offset) == OffsetPosition(offset, position)
        next_offset = self.model[slot + 1][0] if slot + 1 < len(self.model) else offset + 10
        assert self.index.lookup(next_offset - 1) == OffsetPosition(offset, position)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def fetch_upper_bound(self, data: st.DataObject) -> None:
        slot = data.draw(st.integers(0, len(self.model) - 1))
        fetch_size = data.draw(st.integers(0, 20_000))
        start = OffsetPosition(*self.model[slot])
        limit = start.position + fetch_size
        positions = [position for _, position in self.model]
        upper = bisect.bisect_left(positions, limit)
        expected = OffsetPosition(*self.model[upper]) if upper < len(self.model) else None
        assert self.index.fetch_upper_bound_offset(start, fetch_size) == expected

    @rule(probe=targets)
    def truncate_to(self, probe: int) -> None:
        self.index.truncate_to(probe)
        self.model = [(offset, position) for offset, position in self.model if offset < probe]

    @rule()
    def close_and_reopen(self) -> None:
        self.index.close()
        # Reopened without the format hint: the format comes from the file (or the default when empty).
        self.index = OffsetIndex(self.path, self.base, MAX_ENTRIES * self.size)
        if self.model:
            assert self.index.is_large_format == self.large or self.index.entries == 0
        self.large = self.index.is_large_format
        self.size = self.index.entry_size
        assert self.index.entries == len(self.model) and self.index.is_full
        self.index.sanity_check()
        self.index.resize(MAX_ENTRIES * self.size)

    @rule()
    def reopen_read_only(self) -> None:
        self.index.flush()
        self.index.trim_to_valid_size()
        reader = OffsetIndex(self.path, self.base, writable=False)
        assert reader.entries == len(self.model)
        assert [reader.entry(i) for i in range(reader.entries)] == [OffsetPosition(*e) for e in self.model]
        reader.close()
        self.index.resize(MAX_ENTRIES * self.size)

    @invariant()
    def counts_agree(self) -> None:
        if hasattr(self, "index"):
            assert self.index.entries == len(self.model)
            assert self.index.last_offset == (self.model[-1][0] if self.model else self.base)

    def teardown(self) -> None:
        if hasattr(self, "index"):
            self.index.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class TimeIndexMachine(RuleBasedStateMachine):
    """TimeIndex vs a list of (timestamp, offset) pairs, with Kafka's maybe_append rules as the model."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="time-index-props-"))
        self.path = self.dir / "00000000000000000500.timeindex"
        self.base = 500
        self.model: list[tuple[int, int]] = []
        self.index = TimeIndex(self.path, self.base, MAX_ENTRIES * 12)

    def _last(self) -> tuple[int, int]:
        return self.model[-1] if self.model else (-1, self.base)

    @rule(timestamp_step=st.integers(-3, 50), offset_step=st.integers(-2, 20), skip_full_check=st.booleans())
    def maybe_append(self, timestamp_step: int, offset_step: int, skip_full_check: bool) -> None:
        last_ts, last_offset = self._last()
        timestamp, offset = max(last_ts, 0) + timestamp_step, last_offset + offset_step
        count = len(self.model)
        if skip_full_check and count and timestamp == last_ts and offset >= last_offset:
            self.index.maybe_append(timestamp, offset, skip_full_check)  # the roll/close entry again: a no-op,
            return  # full or not (Kafka appends only a larger timestamp)
        if (not skip_full_check and count >= MAX_ENTRIES - 1) or count >= MAX_ENTRIES:
            with pytest.raises(IndexFullError):
                self.index.maybe_append(timestamp, offset, skip_full_check)
        elif count and offset < last_offset:
            with pytest.raises(InvalidOffsetError):
                self.index.maybe_append(timestamp, offset, skip_full_check)
        elif count and timestamp < last_ts:
            with pytest.raises(InvalidIndexTimestampError):
                self.index.maybe_append(timestamp, offset, skip_full_check)
        elif offset < self.base:
            return
        else:
            self.index.maybe_append(timestamp, offset, skip_full_check)
            if timestamp > last_ts:
                self.model.append((timestamp, offset))

    @rule(seed=st.integers(0, 2**32), count=st.integers(1, 900))
    def append_burst(self, seed: int, count: int) -> None:
        rng = random.Random(seed)
        for _ in range(count):
            if len(self.model) >= MAX_ENTRIES - 1:
                return
            last_ts, last_offset = self._last()
            timestamp, offset = max(last_ts, 0) + rng.randint(1, 1000), last_offset + rng.randint(0, 7)
            self.index.maybe_append(timestamp, offset)
            self.model.append((timestamp, offset))

    @rule(probe=st.integers(-10, 1_000_000))
    def lookup(self, probe: int) -> None:
        timestamps = [ts for ts, _ in self.model]
        slot = bisect.bisect_right(timestamps, probe) - 1
        expected = TimestampOffset(-1, self.base) if slot < 0 else TimestampOffset(*self.model[slot])
        assert self.index.lookup(probe) == expected

    @rule(probe=st.integers(400, 20_000))
    def truncate_to(self, probe: int) -> None:
        self.index.truncate_to(probe)
        self.model = [(ts, offset) for ts, offset in self.model if offset < probe]

    @rule()
    def close_and_reopen(self) -> None:
        self.index.close()
        self.index = TimeIndex(self.path, self.base, MAX_ENTRIES * 12)
        self.index.sanity_check()
        self.index.resize(MAX_ENTRIES * 12)

    @invariant()
    def last_entry_agrees(self) -> None:
        assert self.index.entries == len(self.model)
        assert self.index.last_entry == TimestampOffset(*self._last())

    def teardown(self) -> None:
        self.index.close()
        shutil.rmtree(self.dir, ignore_errors=True)


TestOffsetIndexModel = OffsetIndexMachine.TestCase
TestOffsetIndexModel.settings = SETTINGS
TestTimeIndexModel = TimeIndexMachine.TestCase
TestTimeIndexModel.settings = SETTINGS
