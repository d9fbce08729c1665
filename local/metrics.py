"""Metrics of the local log engine: Kafka's LogManager gauges in one prometheus_client registry, the progress
of startup loading for listeners (a progress bar), and the JSON report of the last load that ``tiered status``
reads.

``remaining_segments_to_load`` has a child per data dir and loading thread only while a partition is being loaded
with more than one segment-loading thread; the loader removes the child when loading ends, failed or not.

Load progress: the loader calls :func:`partition_loading`, :func:`segments_opened` and :func:`partition_loaded`;
every registered :class:`LoadProgressListener` hears them (from loading threads, so listeners must be thread-safe).
:class:`RichLoadProgress` is one that draws a progress bar on a terminal.

Load report: :func:`partition_loaded` keeps each partition's load summary in memory; :func:`write_load_report`
writes a data dir's summaries to ``<data dir>/tiered-load-stats.json`` (temp file + rename: a crash leaves the old
report or the new one), and :func:`read_load_report` reads it back. The report is diagnostic only: nothing at
startup reads it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

from prometheus_client import CollectorRegistry, Counter, Gauge

logger = logging.getLogger(__name__)

REGISTRY = CollectorRegistry(auto_describe=True)

REMAINING_SEGMENTS_TO_LOAD = Gauge(
    "remaining_segments_to_load",
    "Segments of the partition being loaded that are still to be opened and checked, per data dir and thread",
    ["data_dir", "thread"],
    registry=REGISTRY,
)
REMAINING_LOGS_TO_LOAD = Gauge(
    "remaining_logs_to_load", "Partitions of a data dir still to be loaded", ["data_dir"], registry=REGISTRY
)
SEGMENTS_RECOVERED = Counter(
    "log_segments_recovered", "Segments whose indexes were rebuilt at startup", ["data_dir"], registry=REGISTRY
)
BYTES_TRUNCATED = Counter(
    "log_bytes_truncated", "Bytes cut from segments by recovery at startup", ["data_dir"], registry=REGISTRY
)
LOAD_SECONDS = Gauge("log_load_seconds", "Time the last startup took to load a data dir", ["data_dir"], registry=REGISTRY)
OFFLINE_LOG_DIRS = Gauge("offline_log_directory_count", "Data dirs taken offline after an I/O error", registry=REGISTRY)

LOAD_REPORT_FILENAME = "tiered-load-stats.json"

_children_lock = threading.Lock()


def remaining_segments_callback(data_dir: str) -> Callable[[str, int | None], None]:
    """A loader callback that sets (count) or removes (None) the gauge child of one loading thread."""

    def update(thread: str, remaining: int | None) -> None:
        with _children_lock:
            if remaining is None:
                try:
                    REMAINING_SEGMENTS_TO_LOAD.remove(data_dir, thread)
                except KeyError:
                    pass
            else:
                REMAINING_SEGMENTS_TO_LOAD.labels(data_dir, thread).set(remaining)

    return update


def remaining_segments_children(data_dir: str) -> dict[str, float]:
    """The live gauge children of ``data_dir`` (thread -> remaining): empty when no multi-threaded load runs."""
    out: dict[str, float] = {}
    for metric in REGISTRY.collect():
        if metric.name != "remaining_segments_to_load":
            continue
        for sample in metric.samples:
            if sample.labels.get("data_dir") == data_dir:
                out[sample.labels["thread"]] = sample.value
    return out


# ----------------------------------------------------------------------------------------------------------
# Load progress


class LoadProgressListener(Protocol):
    """Hears the progress of startup loading. Called from loading threads: implementations must be thread-safe
    and quick (they run inside the load)."""

    def partition_loading(self, data_dir: str, partition: str, segments: int) -> None:
        """Phase 1 of ``partition`` starts, with ``segments`` segments to open."""

    def segments_opened(self, data_dir: str, partition: str, count: int) -> None:
        """``count`` more segments of ``partition`` were opened and checked."""

    def partition_loaded(self, data_dir: str, partition: str, summary: Mapping[str, Any]) -> None:
        """``partition`` is loaded; ``summary`` is the loader's ``stats_summary``."""


_listeners: list[LoadProgressListener] = []
_listeners_lock = threading.Lock()
_reports: dict[str, dict[str, dict[str, Any]]] = {}


def add_load_listener(listener: LoadProgressListener) -> None:
    with _listeners_lock:
        _listeners.append(listener)


def remove_load_listener(listener: LoadProgressListener) -> None:
    with _listeners_lock:
        if listener in _listeners:
            _listeners.remove(listener)


@contextmanager
def load_listener(listener: LoadProgressListener) -> Iterator[LoadProgressListener]:
    """Register ``listener`` for the duration of a ``with`` block (say, around ``LogManager(config)``)."""
    add_load_listener(listener)
    try:
        yield listener
    finally:
        remove_load_listener(listener)


def _each_listener() -> list[LoadProgressListener]:
    with _listeners_lock:
        return list(_listeners)


def partition_loading(data_dir: str, partition: str, segments: int) -> None:
    for listener in _each_listener():
        listener.partition_loading(data_dir, partition, segments)


def segments_opened(data_dir: str, partition: str, count: int) -> None:
    for listener in _each_listener():
        listener.segments_opened(data_dir, partition, count)


def partition_loaded(data_dir: str, partition: str, summary: Mapping[str, Any]) -> None:
    with _listeners_lock:
        _reports.setdefault(data_dir, {})[partition] = dict(summary)
    for listener in _each_listener():
        listener.partition_loaded(data_dir, partition, summary)


# ----------------------------------------------------------------------------------------------------------
# The load report file


def write_load_report(data_dir: str | os.PathLike[str], summary: Mapping[str, Any] | None = None) -> Path:
    """Write the summaries of the partitions of ``data_dir`` loaded since the last report, plus ``summary`` (the
    data dir's totals: clean shutdown, elapsed time...), to ``<data_dir>/tiered-load-stats.json``."""
    directory = Path(data_dir)
    with _listeners_lock:
        partitions = _reports.pop(str(directory), {})
    report = {"version": 0, **dict(summary or {}), "partitions": dict(sorted(partitions.items()))}
    target = directory / LOAD_REPORT_FILENAME
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, target)
    return target


def read_load_report(data_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The last load report of ``data_dir``, or None when there is none or it cannot be parsed (with a warning)."""
    path = Path(data_dir) / LOAD_REPORT_FILENAME
    try:
        report = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        logger.warning("ignoring unreadable load report %s: %s", path, exc)
        return None
    return report if isinstance(report, dict) else None


# ----------------------------------------------------------------------------------------------------------
# A progress bar


class RichLoadProgress:
    """A :class:`LoadProgressListener` drawing one progress bar per data dir (segments opened of segments
    found so far) with ``rich``, only when the console is a terminal. Use as a context manager around startup::

        with RichLoadProgress():
            manager = LogManager(config)
    """

    def __init__(self, console: Any = None, *, force: bool = False) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console or Console(stderr=True)
        self.enabled = force or self.console.is_terminal
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("segments"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self._tasks: dict[str, Any] = {}
        self._partitions: dict[str, int] = {}
        self._totals: dict[str, int] = {}
        self._lock = threading.Lock()

    def _task(self, data_dir: str) -> Any:
        task = self._tasks.get(data_dir)
        if task is None:
            task = self._progress.add_task(f"loading {data_dir}", total=0)
            self._tasks[data_dir] = task
            self._partitions[data_dir] = 0
            self._totals[data_dir] = 0
        return task

    def partition_loading(self, data_dir: str, partition: str, segments: int) -> None:
        with self._lock:
            task = self._task(data_dir)
            self._totals[data_dir] += segments
            self._progress.update(task, total=self._totals[data_dir])

    def segments_opened(self, data_dir: str, partition: str, count: int) -> None:
        with self._lock:
            self._progress.advance(self._task(data_dir), count)

    def partition_loaded(self, data_dir: str, partition: str, summary: Mapping[str, Any]) -> None:
        with self._lock:
            task = self._task(data_dir)
            self._partitions[data_dir] += 1
            self._progress.update(task, description=f"loading {data_dir} ({self._partitions[data_dir]} partitions)")

    def __enter__(self) -> Self:
        if self.enabled:
            self._progress.start()
        add_load_listener(self)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        remove_load_listener(self)
        if self.enabled:
            self._progress.stop()
