"""Helpers for tests of the log engine: configs small enough to roll, and record builders."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from local.config import LogConfig, TopicConfig
from local.log import Log
from local.records import MemoryRecords, SimpleRecord
from local.scheduler import MockTime


def topic_config(tmp_path: Path, **fields: Any) -> TopicConfig:
    """Kafka's defaults, with fields replaced directly (bypassing validation, like Kafka's internal.* test keys)."""
    base = LogConfig.from_properties({"log.dirs": str(tmp_path / "data")}).topic_config()
    return dataclasses.replace(base, **fields)


def make_log(
    tmp_path: Path,
    name: str = "topic-0",
    time: MockTime | None = None,
    *,
    clean: bool = True,
    **fields: Any,
) -> Log:
    time = time or MockTime()
    return Log.open(
        tmp_path / name,
        topic_config(tmp_path, **fields),
        time=time,
        scheduler=time.scheduler,
        had_clean_shutdown=clean,
    )


def records(*values: bytes, timestamp: int = 1_700_000_000_000, **kwargs: Any) -> MemoryRecords:
    """One batch holding ``values`` (keys k0, k1, ...) all stamped ``timestamp``."""
    simple = [SimpleRecord(timestamp, f"k{i}".encode(), v) for i, v in enumerate(values)]
    return MemoryRecords.build(simple, **kwargs)


def read_all_values(log: Log, start: int | None = None) -> list[tuple[int, bytes | None]]:
    """Every (offset, value) from ``start`` (default: log start) to the log end, through Log.read."""
    offset = log.log_start_offset if start is None else start
    out: list[tuple[int, bytes | None]] = []
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 20)
        got = False
        for batch in info.records.batches():
            for rec in batch.records():
                if rec.offset >= offset:
                    out.append((rec.offset, rec.value))
                    got = True
            offset = max(offset, batch.last_offset + 1)
        if not got:
            break
    return out


def local_tier_props(root: Path, **extra: str) -> dict[str, str]:
    """Broker properties for a data dir ``root/data`` with the embedded local-directory remote tier in
    ``root/remote`` and 1 MiB segments (so a few thousand records roll), plus ``extra``."""
    return {
        "log.dirs": str(root / "data"),
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "local",
        "rsm.config.dir": str(root / "remote"),
        "log.segment.bytes": str(1024 * 1024),
        **extra,
    }


def serve_a_stale_search_once(index: Any, stale: Any) -> None:
    """Make the next read of ``index``'s search snapshot return ``stale`` (what a lock-free lookup that took its
    snapshot before a truncation still holds), and later reads the live one: the race of a lookup with
    ``truncate_to`` and new appends, replayed deterministically."""
    live_class = type(index)
    live = live_class._search  # the slot's descriptor: the live snapshot stays stored where the index keeps it

    def search(self: Any) -> Any:
        stale_once, self.__dict__["_stale"] = self.__dict__.get("_stale"), None
        return stale_once if stale_once is not None else live.__get__(self, live_class)

    def set_search(self: Any, value: Any) -> None:
        live.__set__(self, value)

    index.__class__ = type(f"Racing{live_class.__name__}", (live_class,), {"_search": property(search, set_search)})
    index.__dict__["_stale"] = stale


def held_files(match: Callable[[str], bool]) -> list[str]:
    """The files this process holds a descriptor of whose paths ``match`` (from /proc/self/fd)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor)
        if match(target):
            held.append(target)
    return held
