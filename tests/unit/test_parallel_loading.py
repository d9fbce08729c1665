"""Parallel segment loading (``num.segment.loading.threads.per.data.dir``): the same result as the sequential
path on any damaged dir, each result also checked on its own where the right outcome is known (a comparison
alone passes when both paths fail the same way), the ``remaining_segments_to_load`` gauge living only during a
multi-threaded load, and the load-progress hooks (progress bar, load report)."""

from __future__ import annotations

import io
import os
import shutil
import struct
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from local import filenames, load_worker, loader, metrics
from local.config import LogConfig, TopicConfig
from local.errors import KafkaStorageError
from local.log import Log
from local.manager import LogManager
from local.scheduler import MockTime
from tests.logutil import read_all_values, records, topic_config

T0 = 1_700_000_000_000
SEGMENTS = 12
PER_SEGMENT = 4


def make_config(root: Path) -> TopicConfig:
    return topic_config(root, segment_bytes=1 << 20, index_interval_bytes=1, file_delete_delay_ms=0, retention_ms=-1)


def build(path: Path, cfg: TopicConfig, segments: int = SEGMENTS) -> None:
    log = Log.open(path, cfg, time=MockTime(ms=T0))
    for i in range(segments * PER_SEGMENT):
        if i and i % PER_SEGMENT == 0:
            log.roll()
        log.append(records(b"v%d" % i, timestamp=T0 + i, producer_id=3, producer_epoch=0, base_sequence=i))
    log.close()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TopicConfig]:
    root = tmp_path_factory.mktemp("template")
    cfg = make_config(root)
    build(root / "topic-0", cfg)
    return root / "topic-0", cfg


def copy_of(template: tuple[Path, TopicConfig], root: Path) -> tuple[Path, TopicConfig]:
    """A writable copy of the template partition as ``root/topic-0``, and its config."""
    source, cfg = template
    path = root / "topic-0"
    shutil.copytree(source, path)
    return path, cfg


def seg(path: Path, base: int, suffix: str) -> Path:
    return path / f"{filenames.filename_prefix_from_offset(base)}{suffix}"


# A damage is (kind, segment number, parameter); the same list is applied to two copies of the template.
DAMAGES = ["log-junk", "log-flip", "index-junk", "index-zeros", "index-delete", "timeindex-cut", "orphan", "deleted"]
damage_lists = st.lists(
    st.tuples(st.sampled_from(DAMAGES), st.integers(0, SEGMENTS - 1), st.integers(1, 200)), min_size=1, max_size=4
)


def apply(path: Path, kind: str, n: int, param: int) -> None:
    base = n * PER_SEGMENT
    if kind == "log-junk":
        with seg(path, base, ".log").open("ab") as f:
            f.write(bytes((param * i) & 0xFF for i in range(param)))
    elif kind == "log-flip":
        log_file = seg(path, base, ".log")
        data = bytearray(log_file.read_bytes())
        if data:
            data[param % len(data)] ^= 0x5A
            log_file.write_bytes(bytes(data))
    elif kind == "index-junk":
        index = seg(path, base, ".index")
        if index.exists():
            with index.open("ab") as f:
                f.write(b"\xee" * (param % 13 + 1))
    elif kind == "index-zeros":
        index = seg(path, base, ".index")
        if index.exists():
            with index.open("ab") as f:
                f.write(b"\x00" * 8 * (param % 3 + 1))
    elif kind == "index-delete":
        seg(path, base, ".index").unlink(missing_ok=True)
    elif kind == "timeindex-cut":
        time_index = seg(path, base, ".timeindex")
        if time_index.exists():
            content = time_index.read_bytes()
            time_index.write_bytes(content[: max(0, len(content) - param % 12 - 1)])
    elif kind == "orphan":
        seg(path, 10_000 + param, ".index").write_bytes(b"\x00" * 16)
    elif kind == "deleted":
        seg(path, base, ".log.deleted").write_bytes(b"junk")


METADATA_DAMAGES = {"index-junk", "index-zeros", "index-delete", "timeindex-cut", "orphan", "deleted"}
ALL_VALUES = [(o, b"v%d" % o) for o in range(SEGMENTS * PER_SEGMENT)]


def flip_is_checked(source: Path, n: int, param: int) -> bool:
    """Whether a ``log-flip`` of segment ``n`` hits a byte the batch CRC covers (or the magic or CRC itself). A
    flip of the base offset, length or leader epoch fields (a batch's first 16 bytes) is not detectable by
    recovery, in Kafka as here: what the log holds afterwards is unspecified, so no oracle applies."""
    data = seg(source, n * PER_SEGMENT, ".log").read_bytes()
    pos, start = param % len(data), 0
    while start < len(data):
        (length,) = struct.unpack_from(">i", data, start + 8)
        if pos < start + 12 + length:
            return pos - start >= 16
        start += 12 + length
    return False


def check_on_its_own(outcome: tuple[object, ...], source: Path, damages: list[tuple[str, int, int]], clean: bool,
                     recovery_point: int) -> None:
    """The right outcome of one load, where it is known whatever the other thread count did.

    - Only index, time index and stray-file damage: every record is there, right, in all twelve segments.
    - A recovery of the whole log (unclean, recovery point 0) with detectable data damage: a contiguous prefix
      of the records written, each right, holding at least every segment before the first damaged one, and
      the log end right after it.
    """
    metadata_only = all(kind in METADATA_DAMAGES for kind, _, _ in damages)
    full_recovery = not clean and recovery_point == 0 and all(
        kind != "log-flip" or flip_is_checked(source, n, param) for kind, n, param in damages
    )
    if outcome[0] == "open failed":  # allowed only where no oracle applies (damage a trusted start met)
        assert not metadata_only and not full_recovery, f"the log did not open: {outcome} ({damages})"
        return
    values, bases, offsets = outcome[0], outcome[1], outcome[2]
    if metadata_only:
        assert values == ALL_VALUES, f"records lost or wrong with only index damage: {damages}"
        assert bases == list(range(0, SEGMENTS * PER_SEGMENT, PER_SEGMENT))
        assert offsets[:2] == (0, SEGMENTS * PER_SEGMENT)  # type: ignore[index]
    elif full_recovery:
        assert isinstance(values, list), f"recovery failed: {values} ({damages})"
        assert values == ALL_VALUES[: len(values)], f"recovered records are not a prefix of those written: {damages}"
        first_damaged = min(n for kind, n, _ in damages if kind not in METADATA_DAMAGES)
        assert len(values) >= first_damaged * PER_SEGMENT, f"intact segments lost: {damages}"
        assert offsets[1] == len(values)  # type: ignore[index]


def load_outcome(path: Path, cfg: TopicConfig, threads: int, clean: bool, recovery_point: int) -> tuple[object, ...]:
    """Everything a load decides, comparable across two copies of a dir. A clean start trusts the log (as
    Kafka's does), so damage it does not look for may surface as an error: then the error is the outcome."""
    try:
        log = Log.open(
            path, cfg, time=MockTime(ms=T0 + 1000), had_clean_shutdown=clean, recovery_point=recovery_point,
            num_segment_loading_threads=threads,
        )
    except KafkaStorageError as exc:
        return ("open failed", type(exc).__name__)
    try:
        values: object = read_all_values(log)
    except KafkaStorageError as exc:
        values = ("read failed", type(exc).__name__)
    stats = log.load_stats
    outcome = (
        values,
        [s.base_offset for s in log.segments.values()],
        (log.log_start_offset, log.log_end_offset, log.recovery_point),
        (stats.segments_loaded, stats.segments_recovered, stats.segments_deleted, stats.bytes_truncated),
        sorted(w.replace(str(path), "<dir>") for w in stats.warnings),
    )
    # Handles only: what loading decided is compared, not what a clean close trims.
    log.close_handlers()
    files = {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}
    return (*outcome, files)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damages=damage_lists, clean=st.booleans(), recovery_segment=st.integers(0, SEGMENTS))
def test_four_threads_load_exactly_what_one_thread_loads(
    template: tuple[Path, TopicConfig], tmp_path: Path, damages: list[tuple[str, int, int]], clean: bool,
    recovery_segment: int,
) -> None:
    source, cfg = template
    outcomes = []
    for threads in (1, 4):
        copy = tmp_path / f"t{threads}" / "topic-0"
        shutil.rmtree(copy.parent, ignore_errors=True)
        shutil.copytree(source, copy)
        for kind, n, param in damages:
            apply(copy, kind, n, param)
        outcome = load_outcome(copy, cfg, threads, clean, recovery_segment * PER_SEGMENT)
        check_on_its_own(outcome, source, damages, clean, recovery_segment * PER_SEGMENT)
        outcomes.append(outcome)
    sequential, parallel = outcomes
    for what, a, b in zip(("values", "bases", "offsets", "stats", "warnings", "files"), sequential, parallel):
        assert a == b, f"{what} differ between 1 and 4 loading threads"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damages=damage_lists, threads=st.sampled_from([1, 4]))
def test_a_full_recovery_is_right_on_its_own_with_any_thread_count(
    template: tuple[Path, TopicConfig], tmp_path: Path, damages: list[tuple[str, int, int]], threads: int
) -> None:
    """Unclean, from recovery point 0, where the right result is known: checked against it, not against the
    other thread count."""
    source, cfg = template
    assume(all(kind != "log-flip" or flip_is_checked(source, n, param) for kind, n, param in damages))
    copy = tmp_path / f"r{threads}" / "topic-0"
    shutil.rmtree(copy.parent, ignore_errors=True)
    shutil.copytree(source, copy)
    for kind, n, param in damages:
        apply(copy, kind, n, param)
    outcome = load_outcome(copy, cfg, threads, False, 0)
    check_on_its_own(outcome, source, damages, False, 0)


# ------------------------------------------------------------------------------------------------------------
# remaining_segments_to_load


def observing_callback(label: str) -> tuple[object, list[dict[str, float]]]:
    """The metrics callback, wrapped to record the live gauge children after every update."""
    real = metrics.remaining_segments_callback(label)
    seen: list[dict[str, float]] = []

    def update(thread: str, remaining: int | None) -> None:
        real(thread, remaining)
        seen.append(metrics.remaining_segments_children(label))

    return update, seen


@pytest.mark.parametrize("clean,threads", [(True, 4), (False, 4), (True, 2)])
def test_gauge_children_exist_only_during_a_multi_threaded_load(
    template: tuple[Path, TopicConfig], tmp_path: Path, clean: bool, threads: int
) -> None:
    path, cfg = copy_of(template, tmp_path)
    label = f"{tmp_path}/gauge"
    callback, seen = observing_callback(label)
    log = Log.open(
        path, cfg, had_clean_shutdown=clean, num_segment_loading_threads=threads, remaining_segments_callback=callback,
        time=MockTime(ms=T0),
    )
    during = [children for children in seen if children]
    assert during, "no gauge child was ever set during the load"
    threads = set().union(*during)
    assert any(name.startswith("log-loader-topic-0") for name in threads)
    assert all(0 <= v <= SEGMENTS for children in during for v in children.values())
    assert min(v for children in during for v in children.values()) == 0  # counted down to the end
    assert metrics.remaining_segments_children(label) == {}
    log.close()


@pytest.mark.parametrize("threads,segments,pools", [(3, SEGMENTS, [3]), (3, 2, [3]), (1, SEGMENTS, []), (3, 1, [])])
def test_a_load_checks_on_as_many_workers_as_it_was_given(
    template: tuple[Path, TopicConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int, segments: int,
    pools: list[int],
) -> None:
    """One segment per chunk (12 chunks), 3 loading threads: the checker pool asked for has 3 workers, and no
    more than 3 loader threads ever report progress. One thread, or one segment, needs no pool."""
    path, cfg = copy_of(template, tmp_path)
    for base in range(segments * PER_SEGMENT, SEGMENTS * PER_SEGMENT, PER_SEGMENT):
        for suffix in (".log", ".index", ".timeindex", ".snapshot"):
            seg(path, base, suffix).unlink(missing_ok=True)
    monkeypatch.setattr(loader, "_PHASE1_CHUNK", 1)
    asked: list[int] = []
    real_pool = load_worker.pool

    def recording_pool(workers: int) -> load_worker.CheckerPool:
        asked.append(workers)
        return real_pool(workers)

    monkeypatch.setattr(load_worker, "pool", recording_pool)
    label = f"{tmp_path}/workers"
    callback, seen = observing_callback(label)
    log = Log.open(
        path, cfg, num_segment_loading_threads=threads, remaining_segments_callback=callback, time=MockTime(ms=T0)
    )
    assert asked == pools
    reporters = set().union(*seen)
    assert len(reporters) <= (threads if pools else 0)
    assert read_all_values(log) == [(i, b"v%d" % i) for i in range(segments * PER_SEGMENT)]
    log.close()


def test_each_checking_thread_reports_under_its_own_gauge_child(
    template: tuple[Path, TopicConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks checked alternately by two named workers (a stand-in pool): two gauge children, one per worker."""
    path, cfg = copy_of(template, tmp_path)
    monkeypatch.setattr(loader, "_PHASE1_CHUNK", 1)

    class Alternating:
        submitted = 0

        def submit(self, directory: str, chunk: load_worker.Chunk, requested: int) -> Future[tuple[str, list[str | None]]]:
            done: Future[tuple[str, list[str | None]]] = Future()
            done.set_result((f"worker-{self.submitted % 2}", load_worker.check_chunk(directory, chunk, requested)))
            self.submitted += 1
            return done

    monkeypatch.setattr(load_worker, "pool", lambda workers: Alternating())
    label = f"{tmp_path}/alternating"
    callback, seen = observing_callback(label)
    log = Log.open(path, cfg, num_segment_loading_threads=2, remaining_segments_callback=callback, time=MockTime(ms=T0))
    both = {"log-loader-topic-0-0", "log-loader-topic-0-1"}
    assert set().union(*seen) == both and any(set(children) == both for children in seen)
    log.close()


@pytest.mark.parametrize("clean", [True, False])  # unclean: the recovery of unflushed segments counts down too
def test_single_threaded_load_creates_no_gauge_child(
    template: tuple[Path, TopicConfig], tmp_path: Path, clean: bool
) -> None:
    path, cfg = copy_of(template, tmp_path)
    label = f"{tmp_path}/single"
    callback, seen = observing_callback(label)
    log = Log.open(
        path, cfg, num_segment_loading_threads=1, remaining_segments_callback=callback, time=MockTime(ms=T0),
        had_clean_shutdown=clean,
    )
    assert log.load_stats.segments_recovered == (0 if clean else SEGMENTS)
    assert seen == []
    assert metrics.remaining_segments_children(label) == {}
    log.close()


def test_gauge_children_are_removed_when_a_load_fails(
    template: tuple[Path, TopicConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from local.loader import LogLoader

    path, cfg = copy_of(template, tmp_path)
    label = f"{tmp_path}/failing"
    callback, seen = observing_callback(label)
    real = LogLoader._open_segment

    def failing(self: LogLoader, base: int) -> object:
        if base == 5 * PER_SEGMENT:
            raise OSError(5, "Input/output error", str(seg(path, base, ".log")))
        return real(self, base)

    monkeypatch.setattr(LogLoader, "_open_segment", failing)
    with pytest.raises(OSError, match="Input/output error"):
        Log.open(path, cfg, num_segment_loading_threads=4, remaining_segments_callback=callback, time=MockTime(ms=T0))
    assert any(seen), "the gauge was never set before the failure"
    assert metrics.remaining_segments_children(label) == {}


class ChildrenProbe:
    """A load listener that samples the gauge children of a data dir each time segments are opened."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.samples: list[dict[str, float]] = []
        self.opened = 0
        self.partitions: dict[str, dict[str, object]] = {}
        self.lock = threading.Lock()

    def partition_loading(self, data_dir: str, partition: str, segments: int) -> None:
        pass

    def segments_opened(self, data_dir: str, partition: str, count: int) -> None:
        with self.lock:
            self.opened += count
            self.samples.append(metrics.remaining_segments_children(self.data_dir))

    def partition_loaded(self, data_dir: str, partition: str, summary: object) -> None:
        with self.lock:
            self.partitions[partition] = dict(summary)  # type: ignore[call-overload]


@pytest.mark.parametrize("threads", [1, 4])
def test_log_manager_loads_with_the_configured_segment_threads(
    template: tuple[Path, TopicConfig], tmp_path: Path, threads: int
) -> None:
    source, _ = template
    data = tmp_path / "data"
    for partition in range(2):
        shutil.copytree(source, data / f"topic-{partition}")
    config = LogConfig.from_properties(
        {
            "log.dirs": str(data),
            "num.segment.loading.threads.per.data.dir": str(threads),
            "num.recovery.threads.per.data.dir": "2",
        }
    )
    probe = ChildrenProbe(str(data))
    with metrics.load_listener(probe):
        manager = LogManager(config, start_scheduler=False)
    try:
        assert probe.opened == 2 * SEGMENTS
        assert set(probe.partitions) == {"topic-0", "topic-1"}
        if threads == 1:
            assert all(sample == {} for sample in probe.samples)
        else:
            assert any(probe.samples), "no remaining_segments_to_load child seen during a 4-thread load"
        assert metrics.remaining_segments_children(str(data)) == {}
        for partition in range(2):
            log = manager.get_log("topic", partition)
            assert log is not None and log.log_end_offset == SEGMENTS * PER_SEGMENT
    finally:
        manager.close()


# ------------------------------------------------------------------------------------------------------------
# Progress bar and load report


def test_rich_progress_bar_counts_every_segment(template: tuple[Path, TopicConfig], tmp_path: Path) -> None:
    from rich.console import Console

    path, cfg = copy_of(template, tmp_path / "data")
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with metrics.RichLoadProgress(console, force=True):
        Log.open(path, cfg, num_segment_loading_threads=4, time=MockTime(ms=T0)).close()
    text = out.getvalue()
    assert f"{SEGMENTS}/{SEGMENTS}" in text and "segments" in text and "1 partitions" in text


def test_rich_progress_stays_quiet_off_a_terminal(template: tuple[Path, TopicConfig], tmp_path: Path) -> None:
    from rich.console import Console

    path, cfg = copy_of(template, tmp_path / "data")
    out = io.StringIO()
    with metrics.RichLoadProgress(Console(file=out, force_terminal=False)) as progress:
        Log.open(path, cfg, time=MockTime(ms=T0)).close()
    assert not progress.enabled and out.getvalue() == ""


def test_load_report_round_trip(template: tuple[Path, TopicConfig], tmp_path: Path) -> None:
    data = tmp_path / "data"
    path, cfg = copy_of(template, data)
    with seg(path, 0, ".index").open("ab") as f:
        f.write(b"\x01")
    Log.open(path, cfg, time=MockTime(ms=T0)).close()
    report_file = metrics.write_load_report(data, {"clean_shutdown": True, "elapsed_ms": 1.5})
    assert report_file.name == metrics.LOAD_REPORT_FILENAME
    report = metrics.read_load_report(data)
    assert report is not None
    assert report["clean_shutdown"] is True
    assert report["partitions"]["topic-0"]["segments_loaded"] == SEGMENTS
    assert report["partitions"]["topic-0"]["segments_recovered"] == 1
    report_file.write_text("{not json")
    assert metrics.read_load_report(data) is None


# ------------------------------------------------------------------------------------------------------------
# The phase-1 worker processes (local.load_worker)


def chunk_of(path: Path) -> list[tuple[int, bool, bool]]:
    bases = sorted(int(p.name[:20]) for p in path.glob("*.log"))
    return [(base, seg(path, base, ".index").exists(), seg(path, base, ".txnindex").exists()) for base in bases]


def test_worker_process_finds_what_this_process_finds(template: tuple[Path, TopicConfig], tmp_path: Path) -> None:
    """A real ``python -m local.load_worker`` child answers as the in-process check does, damage included."""
    path, _ = copy_of(template, tmp_path)
    apply(path, "index-junk", 2, 5)
    apply(path, "timeindex-cut", 4, 3)
    seg(path, 6 * PER_SEGMENT, ".index").unlink()
    chunk = chunk_of(path)
    expected = load_worker.check_chunk(str(path), chunk, 8)
    assert [p is None for p in expected].count(False) == 3
    child = load_worker._Child()
    try:
        assert child.check(str(path), chunk, 8) == expected
        assert child.check(str(path), chunk[:2], 12) == load_worker.check_chunk(str(path), chunk[:2], 12)
        with pytest.raises(FileNotFoundError, match="no-such-dir"):
            child.check(str(tmp_path / "no-such-dir"), chunk[:1], 8)
        assert child.check(str(path), chunk[:1], 8) == expected[:1]  # the child survives an error
    finally:
        child.close()
    assert child.process.returncode == 0


def test_a_dead_worker_process_leaves_its_chunks_to_the_thread(template: tuple[Path, TopicConfig], tmp_path: Path) -> None:
    path, _ = copy_of(template, tmp_path)
    apply(path, "index-zeros", 1, 1)
    chunk = chunk_of(path)
    expected = load_worker.check_chunk(str(path), chunk, 8)
    pool = load_worker.CheckerPool(1)
    try:
        assert pool.submit(str(path), chunk, 8).result()[1] == expected
        children = list(pool._children)
        assert len(children) == 1
        children[0].process.kill()
        children[0].process.wait()
        assert pool.submit(str(path), chunk, 8).result()[1] == expected
    finally:
        pool.shutdown()


def test_parallel_load_is_not_run_again_by_a_script_without_a_main_guard(template: tuple[Path, TopicConfig], tmp_path: Path) -> None:
    """Worker processes must not re-import the caller's ``__main__`` (as multiprocessing's spawn and fork server
    do): a script without an ``if __name__ == "__main__"`` guard runs once."""
    import subprocess
    import sys

    path, _ = copy_of(template, tmp_path)
    marker = tmp_path / "runs"
    script = tmp_path / "script.py"
    script.write_text(
        "from pathlib import Path\n"
        "from local.log import Log\n"
        "from tests.logutil import topic_config\n"
        f"with open({str(marker)!r}, 'a') as f: f.write('run\\n')\n"
        f"cfg = topic_config(Path({str(tmp_path)!r}), segment_bytes=1 << 20, index_interval_bytes=1)\n"
        f"log = Log.open(Path({str(path)!r}), cfg, num_segment_loading_threads=4)\n"
        "print(log.number_of_segments())\n"
        "log.close()\n"
    )
    repo = Path(__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=repo, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(SEGMENTS)
    assert marker.read_text() == "run\n"
