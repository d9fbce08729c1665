"""Stateful property test: Log against a plain list-of-batches model.

Rules append, read, roll, truncate, apply retention and reopen (clean and unclean); after every step the
log's offsets and contents must equal the model's.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from local.errors import RecordBatchTooLargeError
from local.log import Log
from local.scheduler import MockTime
from tests.logutil import read_all_values, records, topic_config

T0 = 1_700_000_000_000

values = st.lists(st.binary(min_size=0, max_size=64), min_size=1, max_size=5)


class LogMachine(RuleBasedStateMachine):
    @initialize(segment_bytes=st.integers(150, 2000), index_interval=st.sampled_from([1, 64, 4096]))
    def setup(self, segment_bytes: int, index_interval: int) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="logmodel-"))
        self.time = MockTime(ms=T0)
        self.config = topic_config(
            self.tmp, segment_bytes=segment_bytes, index_interval_bytes=index_interval, file_delete_delay_ms=0
        )
        self.model: list[tuple[int, bytes]] = []  # (offset, value) of every record still in the log
        self.next_offset = 0
        self.log_start = 0
        self.log = self._open(clean=True)

    def _open(self, clean: bool) -> Log:
        return Log.open(
            self.tmp / "t-0", self.config, time=self.time, scheduler=self.time.scheduler, had_clean_shutdown=clean,
            log_start_offset=self.log_start,
        )

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(vals=values)
    def append(self, vals: list[bytes]) -> None:
        self.time.sleep(1)
        batch = records(*vals, timestamp=self.time.milliseconds())
        if len(bytes(batch)) > self.config.segment_bytes:
            # Kafka refuses a batch no segment can hold (RecordBatchTooLargeException), and writes nothing.
            with pytest.raises(RecordBatchTooLargeError):
                self.log.append(batch)
            assert self.log.log_end_offset == self.next_offset
            return
        info = self.log.append(batch)
        assert info.first_offset == self.next_offset
        for v in vals:
            self.model.append((self.next_offset, v))
            self.next_offset += 1

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @precondition(lambda self: self.next_offset > self.log_start)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        # Truncation happens at batch boundaries in practice (a follower truncates to a leader's epoch end).
        boundaries = sorted({b.base_offset for b in self.log.batches_from(self.log_start)} | {self.next_offset})
        target = data.draw(st.sampled_from(boundaries))
        self.log.truncate_to(target)
        self.model = [(o, v) for o, v in self.model if o < target]
        self.next_offset = min(self.next_offset, target)

    @rule(keep_bytes=st.integers(0, 3000))
    def retention(self, keep_bytes: int) -> None:
        self.log.config = dataclasses.replace(self.config, retention_bytes=keep_bytes)
        self.log.delete_old_segments()
        self.log.config = self.config
        self.log_start = self.log.log_start_offset
        self.model = [(o, v) for o, v in self.model if o >= self.log_start]

    @rule(clean=st.booleans())
    def reopen(self, clean: bool) -> None:
        if clean:
            self.log.close()
        else:
            self.log.flush()
            self.log.close_handlers()
        self.log = self._open(clean)

    @rule(data=st.data())
    def read_from_anywhere(self, data: st.DataObject) -> None:
        if not self.model:
            return
        offset = data.draw(st.integers(self.log_start, self.next_offset - 1))
        got = read_all_values(self.log, offset)
        assert got == [(o, v) for o, v in self.model if o >= offset]

    @invariant()
    def offsets_match(self) -> None:
        if not hasattr(self, "log"):
            return
        assert self.log.log_end_offset == self.next_offset
        assert self.log.log_start_offset == self.log_start

    @invariant()
    def contents_match(self) -> None:
        if not hasattr(self, "log"):
            return
        assert read_all_values(self.log) == self.model


LogMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=25, deadline=None)
TestLogModel = LogMachine.TestCase
