"""Stateful property test of the tiered log: every offset read through the local and remote tiers returns
what was appended, whatever the order of appends, rolls, offloads, local retention and restarts."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord

OVERRIDES = {"remote.storage.enable": "true", "local.retention.bytes": "1"}


class TieredLogMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="tieredmodel-"))
        self.props = {
            "log.dirs": str(self.tmp / "data"),
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "local",
            "rsm.config.dir": str(self.tmp / "remote"),
            "remote.log.segment.cache.chunk.size.bytes": "4096",
        }
        self.model: list[bytes] = []
        self._open()

    def _open(self) -> None:
        self.manager = LogManager(LogConfig.from_properties(self.props), start_scheduler=False)
        self.log = self.manager.get_or_create_log("m", 0, OVERRIDES)

    def teardown(self) -> None:
        self.manager.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(values=st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=8))
    def append(self, values: list[bytes]) -> None:
        now = int(time.time() * 1000)
        info = self.log.append(MemoryRecords.build([SimpleRecord(now, None, v) for v in values]))
        assert info.first_offset == len(self.model)
        self.model.extend(values)

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule()
    def offload_and_retain(self) -> None:
        self.manager.remote_tier.run_once(self.manager.all_logs())  # type: ignore[union-attr]
        self.manager.cleanup_logs()
        # every closed segment holding data was copied (an empty one has nothing to copy)
        rlm = self.manager.remote_tier
        closed_with_data = [s for s in list(self.log.segments.values())[:-1] if s.size > 0]
        if closed_with_data:
            assert rlm.highest_offset_in_remote_storage(self.log) == self.log.active_segment.base_offset - 1  # type: ignore[union-attr]
        assert self.log.local_log_start_offset <= self.log.active_segment.base_offset
        event(f"remote holds {self.log.local_log_start_offset > 0}")

    @rule()
    def restart(self) -> None:
        self.manager.close()
        self._open()

    @rule(data=st.data())
    def read_anywhere(self, data: st.DataObject) -> None:
        if not self.model:
            return
        offset = data.draw(st.integers(0, len(self.model) - 1))
        info = self.log.read(offset, data.draw(st.sampled_from([1, 100, 4096, 1 << 20])))
        batches = list(info.records.batches())
        assert batches, f"nothing returned at offset {offset}"
        first = next(r for r in batches[0].records() if r.offset >= offset)
        assert (first.offset, first.value) == (offset, self.model[offset])

    @invariant()
    def whole_log_matches(self) -> None:
        if not hasattr(self, "log"):
            return
        assert self.log.log_start_offset == 0
        got: list[bytes | None] = []
        offset = 0
        while offset < self.log.log_end_offset:
            for batch in self.log.read(offset, 64 * 1024).records.batches():
                got.extend(r.value for r in batch.records() if r.offset >= offset)
                offset = batch.last_offset + 1
        assert got == self.model


# TIERED_MODEL_EXAMPLES raises the example count for a longer local run.
TieredLogMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("TIERED_MODEL_EXAMPLES", "15")), stateful_step_count=20, deadline=None
)
TestTieredLogModel = TieredLogMachine.TestCase
