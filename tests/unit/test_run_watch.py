"""``tiered run``'s progress report (``_watch``) asks the remote store nothing."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from local.scheduler import MockTime
from tests.unit.test_copy_rules import NOW, Tier, _segments
from tiered.commands.run import _watch
from tiered.metadata import RemoteLogMetadataStore
from tiered.rlm_tasks import local_copy_lag


@pytest.mark.parametrize("terminal", [False, True])
def test_the_report_loads_no_partition_metadata(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, terminal: bool) -> None:
    """The report's backlog (for a progress bar) read each partition's metadata from the store at the start, from the
    main thread, beside the start's claim doing the same: every event object was read twice at every start of a
    `tiered run` (a helper's trace: 14 GETs of 8 objects, 2 partitions). It is what the data dir knows now."""
    tier = Tier(tmp_path, time=MockTime(ms=NOW))
    try:
        log = tier.log()
        _segments(log, [30, 30, 30, 1])
        loads: list[object] = []
        real_load = RemoteLogMetadataStore.load

        def load(self: RemoteLogMetadataStore, tip: Any) -> Any:
            loads.append(tip)
            return real_load(self, tip)

        monkeypatch.setattr(RemoteLogMetadataStore, "load", load)
        out = io.StringIO()
        console = Console(file=out, force_terminal=terminal, width=120)
        assert console.is_terminal == terminal
        _watch(tier.manager, console, threading.Event(), time.monotonic() + 0.3, None)
        assert loads == []
        if terminal:
            assert "copying to the remote tier" in out.getvalue()
        assert local_copy_lag(log, tier.rlm.known_copied_to(log))[0] == 3  # the bar's backlog: the closed segments
    finally:
        tier.manager.close()
