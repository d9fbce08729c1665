"""``tiered run`` as an operator meets it: a real subprocess, scraped and called over HTTP, stopped by a signal.

- ``/metrics`` is scraped while records produced over HTTP roll segments: the remote tier's copy metrics move
  (Kafka's ``RemoteCopyRequestsPerSec``/``RemoteCopyBytesPerSec``), and after local retention a consume from
  offset 0 over HTTP reads the remote tier (``RemoteFetchRequestsPerSec`` moves) and gives back every record
  produced, key, value, headers and timestamp alike.
- SIGTERM to the process group in the middle of a segment copy: the copy in flight finishes (in the copier child,
  which the signal reaches too), no other starts, the process exits 0
  within its stop bound, and the bucket holds no orphan (every data object belongs to a FINISHED segment, no
  STARTED-only attempt, no temporary file), nor is the copier child process left running.
- A copy that cannot finish within ``--stop-timeout``: exit 1 within the bound, and the next start's pass deletes
  the attempt (no orphan).

Synchronisation is by what the process says (``listening on``, ``GATE``, ``stopping:``) and by polling the
endpoint; time appears only as a generous failure bound.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from local.remote_state import RemoteLogStateFile
from tests.logutil import local_tier_props
from tiered.backends.local_dir import LocalDirRemoteStorageManager
from tiered.copier_process import BATCH_UPLOADS
from tiered.layout import kafka_uuid
from tiered.metadata import RemoteLogMetadataStore
from tiered.remote_log_manager import RemoteLogManager
from tiered.rsm import TopicIdPartition

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
LIMIT = 120.0  # seconds: a failure bound on waits that end at once when the code is right
TOPIC_OVERRIDES = {"remote.storage.enable": "true", "local.retention.bytes": "1"}


def _props(root: Path, **extra: str) -> dict[str, str]:
    """The embedded tier's properties with the background tasks every 100 ms (a run copies soon)."""
    return local_tier_props(root, **{"remote.log.manager.task.interval.ms": "100",
                                     "log.retention.check.interval.ms": "100", **extra})


def _write_config(root: Path, props: dict[str, str]) -> Path:
    path = root / "broker.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def _temp_dir(parent: Path) -> Path:
    temp = parent / "child-temp"
    temp.mkdir(exist_ok=True)
    return temp


class RunProcess:
    """``tiered run`` (or another ``command``) in a child process; its stdout and stderr lines are collected on
    threads."""

    def __init__(self, config: Path, *extra: str, command: tuple[str, ...] = ("run", "--listen", "127.0.0.1:0")) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tiered.cli", "--config", str(config), *command, *extra],
            # its temp dir in the test's (a copy cut short by the test leaves its tiered-copy-* dir there)
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(_temp_dir(config.parent))},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, signalled as a whole as systemd or a terminal does
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._changed = threading.Condition()
        self._readers = [threading.Thread(target=self._read, args=(s, lines), daemon=True)
                         for s, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: Any, lines: list[str]) -> None:
        for raw in stream:
            with self._changed:
                lines.append(raw.decode().rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            lines.append("<EOF>")
            self._changed.notify_all()

    def wait_line(self, lines: list[str], prefix: str) -> str:
        """The first line starting with ``prefix``; fails after LIMIT or when the stream ends without one."""
        with self._changed:
            found = self._changed.wait_for(
                lambda: any(line.startswith(prefix) for line in lines) or "<EOF>" in lines, timeout=LIMIT)
        line = next((line for line in lines if line.startswith(prefix)), None)
        if not found or line is None:
            pytest.fail(f"tiered run never printed {prefix!r}; stdout {self.out}, stderr {self.err}")
        return line

    @property
    def url(self) -> str:
        return self.wait_line(self.out, "listening on ").split()[-1]

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=LIMIT)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=LIMIT)


def _http(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=LIMIT) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _metrics(url: str) -> dict[str, float]:
    """The samples of a scrape without labels (name -> value), labelled ones summed by name."""
    status, text = _http("GET", url + "/metrics")
    assert status == 200
    out: dict[str, float] = {}
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            name = name.split("{", 1)[0]
            out[name] = out.get(name, 0.0) + float(value)
    return out


def _poll(what: str, check: Callable[[], bool]) -> None:
    """Poll ``check`` (an HTTP scrape) until it holds; LIMIT is only the failure bound."""
    deadline = time.monotonic() + LIMIT
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {LIMIT} s")
        time.sleep(0.05)


def _create_partition(root: Path, topic: str, records: int = 0) -> int:
    """The partition with remote storage enabled (and ``records`` records), written before ``run`` holds the lock;
    returns its number of segments."""
    with LogManager(LogConfig.from_properties(_props(root)), start_scheduler=False) as manager:
        log = manager.get_or_create_log(topic, 0, TOPIC_OVERRIDES)
        now = int(time.time() * 1000)
        for first in range(0, records, 100):
            log.append(MemoryRecords.build([SimpleRecord(now, None, b"%06d" % i * 33) for i in range(first, first + 100)]))
        return log.number_of_segments()


def test_metrics_move_while_records_produced_over_http_are_copied_and_read_back(tmp_path: Path) -> None:
    _create_partition(tmp_path, "events")
    run = RunProcess(_write_config(tmp_path, _props(tmp_path)))
    try:
        url = run.url
        before = _metrics(url)
        assert before["RemoteCopyBytesPerSec_total"] == 0 and before["RemoteCopyRequestsPerSec_total"] == 0
        assert "offline_log_directory_count" in before and "RemoteLogIndexCacheHits_total" in before
        assert _http("GET", url + "/health") == (200, b'{"status": "serving", "offline_log_dirs": {}, '
                                                 b'"offline_partitions": [], "remote_tier": true}\n')

        sent = []
        now = int(time.time() * 1000)  # recent: retention.ms (7 days) keeps them in the remote tier
        for n in range(40):  # 40 x 100 records of ~1 KiB: four 1 MiB segments roll
            batch = [{"key": f"k{n}-{i}", "value": "v" * 1000 + str(i), "headers": [{"key": "n", "value": str(n)}],
                      "timestamp": now + n} for i in range(100)]
            status, body = _http("POST", url + "/topics/events/partitions/0/records", batch)
            assert status == 200, body
            reply = json.loads(body)
            assert (reply["first_offset"], reply["last_offset"], reply["count"]) == (100 * n, 100 * n + 99, 100)
            sent.extend(batch)

        _poll("three segment copies", lambda: _metrics(url)["RemoteCopyBytesPerSec_total"] >= 3 * 1024 * 1024 * 0.9)
        copied = _metrics(url)
        assert copied["RemoteCopyRequestsPerSec_total"] >= 3
        assert copied["RemoteCopyErrorsPerSec_total"] == 0

        def consumed_from_remote() -> bool:  # local retention deletes what was copied; offset 0 then reads remotely
            _, body = _http("GET", url + "/topics/events/partitions/0/records?offset=0&max_bytes=1000")
            assert json.loads(body)["records"][0]["key"] == "k0-0"
            return _metrics(url)["RemoteFetchRequestsPerSec_total"] > 0

        _poll("a read from the remote tier", consumed_from_remote)
        got: list[dict[str, Any]] = []
        offset = 0
        while offset < len(sent):
            status, body = _http("GET", url + f"/topics/events/partitions/0/records?offset={offset}&max_bytes=300000")
            assert status == 200, body
            reply = json.loads(body)
            assert reply["records"] and reply["next_offset"] == reply["records"][-1]["offset"] + 1
            assert sum(len(r["value"]) + len(r["key"]) + 3 for r in reply["records"][1:]) <= 300000
            got.extend(reply["records"])
            offset = reply["next_offset"]
        assert [r["offset"] for r in got] == list(range(len(sent)))
        assert [{k: r[k] for k in ("key", "value", "headers", "timestamp")} for r in got] == sent
        assert _http("GET", url + f"/topics/events/partitions/0/records?offset={len(sent) + 1}")[0] == 416

        assert run.stop() == 0
        assert "stopped" in run.err
    finally:
        run.kill()


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _bucket(root: Path, topic: str) -> tuple[RemoteLogMetadataStore, TopicIdPartition]:
    rsm = LocalDirRemoteStorageManager()
    rsm.configure({"dir": str(root / "remote")})
    with LogManager(LogConfig.from_properties({"log.dirs": str(root / "data")}), start_scheduler=False) as plain:
        log = plain.get_log(topic, 0)
        assert log is not None and log.topic_id is not None
        return RemoteLogMetadataStore.in_bucket(rsm), TopicIdPartition(log.topic_id, topic, 0)


def _orphans(root: Path, store: RemoteLogMetadataStore, tip: TopicIdPartition) -> list[str]:
    finished = {kafka_uuid(md.remote_log_segment_id.id) for md in store.readable_segments(tip)}
    data = [p.name for p in (root / "remote").rglob("*") if p.is_file() and not p.name.endswith(".json")]
    return [name for name in data if not any(i in name for i in finished)]


def _gated_run(root: Path, *extra: str) -> tuple[RunProcess, Path]:
    gate = root / "gate"
    os.mkfifo(gate)
    props = _props(root, **{"remote.log.storage.manager.class.name": "tests.gated_rsm.GatedDir",
                            "rsm.config.gate": str(gate)})
    return RunProcess(_write_config(root, props), *extra), gate


def test_sigterm_during_a_copy_finishes_that_copy_starts_no_other_and_leaves_no_orphan(tmp_path: Path) -> None:
    segments = _create_partition(tmp_path, "c", records=60_000)
    # More copy candidates than the copier process has in flight (BATCH_UPLOADS): those in flight when signalled
    # finish, the others never start.
    assert segments - 1 > BATCH_UPLOADS
    run, gate = _gated_run(tmp_path, "--stop-timeout", str(LIMIT))
    try:
        run.wait_line(run.err, "GATE ")  # the first copy has uploaded its .log and waits
        copiers = _children(run.proc.pid)
        assert copiers, "the copy runs in a copier child process"
        os.killpg(run.proc.pid, signal.SIGTERM)  # the whole group: the copier child must finish its copy too
        run.wait_line(run.err, "stopping:")  # the copy tasks were told to stop after the segment in flight
        _poll("the copy's wait at the gate", lambda: _open_gate(gate))  # let the copy go on
        assert run.proc.wait(timeout=LIMIT) == 0, run.err
        assert "stopped" in run.err
    finally:
        run.kill()
    assert not [pid for pid in copiers if _alive(pid)], "a copier process outlived tiered run"

    store, tip = _bucket(tmp_path, "c")
    finished = store.readable_segments(tip)
    assert 1 <= len(finished) <= BATCH_UPLOADS, "the copies in flight finished and no other started"
    assert _is_prefix(finished)
    assert store.find_stale_copies(tip) == []
    assert _orphans(tmp_path, store, tip) == []
    assert not [p for p in (tmp_path / "remote").rglob("*.tmp")]


def _is_prefix(finished: list[Any]) -> bool:
    """Whether remote segments are the partition's first ones, from offset 0, without a hole."""
    return bool(finished) and finished[0].start_offset == 0 and all(
        b.start_offset == a.end_offset + 1 for a, b in itertools.pairwise(finished))


def test_a_copy_that_cannot_finish_within_the_stop_timeout_exits_1_and_the_next_start_copies_the_rest(
    tmp_path: Path,
) -> None:
    segments = _create_partition(tmp_path, "c", records=60_000)
    run, gate = _gated_run(tmp_path, "--stop-timeout", "1")
    try:
        run.wait_line(run.err, "GATE ")
        copiers = _children(run.proc.pid)
        started = time.monotonic()
        run.proc.send_signal(signal.SIGTERM)
        assert run.proc.wait(timeout=LIMIT) == 1
        assert time.monotonic() - started < LIMIT / 2
        run.wait_line(run.err, "tiered run: the copies in progress did not finish within 1 s")
        # The copier child ends once run is gone, its copy still waiting at the gate (it never outlives run).
        _poll("the copier child's exit", lambda: not [pid for pid in copiers if _alive(pid)])
    finally:
        run.kill()
        _open_gate(gate)
    _the_next_start_cleans_up_and_copies_all(tmp_path, segments)


def test_a_copier_process_whose_tiered_run_was_killed_finishes_no_copy_and_ends(tmp_path: Path) -> None:
    """kill -9 of tiered run alone (its copier child not signalled): the child went on with its batch, up to 16
    segments, and wrote their COPY_SEGMENT_FINISHED events after run was gone, behind the back of a data dir that
    may have changed hands meanwhile (a helper's tiered attach on another machine then found them outside its
    lineage and deleted 16,000 acknowledged records). The child ends once its parent is gone, writing no FINISHED
    event, as a kill of the whole machine leaves it; the next start deletes what it left and copies everything."""
    segments = _create_partition(tmp_path, "c", records=60_000)
    run, gate = _gated_run(tmp_path)
    try:
        run.wait_line(run.err, "GATE ")  # the first copy has uploaded its .log and waits
        copiers = _children(run.proc.pid)
        assert copiers, "the copy runs in a copier child process"
        run.proc.kill()
        run.proc.wait(timeout=LIMIT)
        _poll("the copier child's exit", lambda: not [pid for pid in copiers if _alive(pid)])
    finally:
        run.kill()
        _open_gate(gate)
    _the_next_start_cleans_up_and_copies_all(tmp_path, segments)


def _the_next_start_cleans_up_and_copies_all(root: Path, segments: int) -> None:
    """The copier child ended with run, its copies in flight left STARTED (none FINISHED after run was gone): the
    next start deletes them and copies every closed segment, leaving no orphan."""
    store, tip = _bucket(root, "c")
    assert store.readable_segments(tip) == [] and store.find_stale_copies(tip)
    with LogManager(LogConfig.from_properties(_props(root)), start_scheduler=False) as manager:
        rlm = manager.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        result = rlm.run_once(manager.all_logs())
        assert result.stale_copies_cleaned >= 1 and (result.copy_errors, result.segments_copied) == (0, segments - 1)
    store, tip = _bucket(root, "c")
    assert store.find_stale_copies(tip) == []
    assert _is_prefix(store.readable_segments(tip))
    assert _orphans(root, store, tip) == []


def _open_gate(fifo: Path) -> bool:
    """Let a reader blocked on the gate go on; False when there is none (yet, or any more)."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # ENXIO: nobody has it open for reading
        return False
    return True


def test_ctrl_c_during_offload_finishes_the_copy_in_flight_starts_no_other_and_exits_130(tmp_path: Path) -> None:
    segments = _create_partition(tmp_path, "c", records=60_000)
    assert segments - 1 > BATCH_UPLOADS  # see the SIGTERM test above
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    config = _write_config(tmp_path, _props(tmp_path, **{
        "remote.log.storage.manager.class.name": "tests.gated_rsm.GatedDir", "rsm.config.gate": str(gate)}))
    offload = RunProcess(config, command=("offload",))
    try:
        offload.wait_line(offload.err, "GATE ")  # the first copy has uploaded its .log and waits at the gate
        os.killpg(offload.proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole foreground group
        offload.wait_line(offload.err, "tiered offload: stopping after the segment copies in progress")
        _poll("the copy's wait at the gate", lambda: _open_gate(gate))
        assert offload.proc.wait(timeout=LIMIT) == 130, offload.err
        offload.wait_line(offload.err, "<EOF>")
    finally:
        offload.kill()
        _open_gate(gate)
    store, tip = _bucket(tmp_path, "c")
    copied = len(store.readable_segments(tip))
    assert 1 <= copied <= BATCH_UPLOADS
    assert any(line.startswith(f"tiered offload: interrupted: copied {copied} segment(s)") for line in offload.err)
    assert not any("Traceback" in line for line in offload.err)
    assert _is_prefix(store.readable_segments(tip))
    assert store.find_stale_copies(tip) == []
    assert _orphans(tmp_path, store, tip) == []


def test_a_hole_cut_by_hand_is_an_error_line_then_410s_and_verify_fails_naming_the_file(tmp_path: Path) -> None:
    """Issue 27's hole, as an operator meets it: a closed segment in the middle of a log truncated by hand, then
    ``tiered run``. Its load logs one ERROR naming the real file and the lost range; HTTP reads before the hole
    answer the records up to it, in it 410 with the range (never 500), after it the records; ``verify`` exits 1."""
    from tests.unit.test_lost_offsets import PER_SEGMENT, _segment, _write

    pdir = _write(tmp_path / "data")
    middle = _segment(pdir, PER_SEGMENT)
    os.truncate(middle, 1000)  # a careless hand, on the real file
    config = _write_config(tmp_path, {"log.dirs": str(tmp_path / "data")})
    run = RunProcess(config)
    try:
        url = run.url
        line = run.wait_line(run.err, "ERROR local.loader: t-0: ")
        assert f"{middle} was damaged: recovery cut it at byte {middle.stat().st_size} and offsets " in line
        first_lost = int(line.split(" and offsets ")[1].split("..")[0])
        assert f"offsets {first_lost}..1999 are lost (recorded in {pdir / 'tiered-lost-offsets'}" in line
        status, body = _http("GET", url + "/topics/t/partitions/0/records?offset=999")
        reply = json.loads(body)
        assert status == 200 and reply["next_offset"] == first_lost
        assert [r["offset"] for r in reply["records"]] == list(range(999, first_lost))
        for offset in (first_lost, 1500, 1999):
            status, body = _http("GET", url + f"/topics/t/partitions/0/records?offset={offset}")
            assert status == 410, body
            assert json.loads(body)["next_offset"] == 2000 and str(middle) in json.loads(body)["error"]
        status, body = _http("GET", url + "/topics/t/partitions/0/records?offset=2000")
        assert status == 200 and json.loads(body)["records"][0]["value"] == "v2000"
        assert run.stop() == 0, run.err
    finally:
        run.kill()
    proc = subprocess.run([sys.executable, "-m", "tiered.cli", "verify", "--log-dirs", str(tmp_path / "data")],
                          capture_output=True, text=True, timeout=LIMIT)
    assert proc.returncode == 1 and f"{middle}, position {middle.stat().st_size}, offset {first_lost}: [lost_offsets]" \
        in proc.stdout, proc.stdout + proc.stderr


def test_tiered_run_cleans_a_compacted_topic_and_serves_the_latest_values(tmp_path: Path) -> None:
    """Issue 30: `tiered run` runs Kafka's log cleaner threads: a compacted topic's closed segments are cleaned
    (cleaner-offset-checkpoint moves to the active segment), HTTP reads answer the latest value of each key, and the
    cleaner's gauges are on /metrics."""
    props = {"log.dirs": str(tmp_path / "data"), "log.cleaner.backoff.ms": "100",
             "log.cleaner.min.cleanable.ratio": "0.01"}
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        log = m.get_or_create_log("users", 0, {"cleanup.policy": "compact"})
        for i in range(3000):
            log.append(MemoryRecords.build([SimpleRecord(int(time.time() * 1000), b"user-%d" % (i % 30), b"v%d" % i)]))
        log.roll()
    run = RunProcess(_write_config(tmp_path, props))
    checkpoint = tmp_path / "data" / "cleaner-offset-checkpoint"
    try:
        url = run.url
        _poll("the cleaning of users-0", lambda: checkpoint.exists() and "users 0 3000" in checkpoint.read_text())
        status, body = _http("GET", url + "/topics/users/partitions/0/records?offset=0")
        assert status == 200, body
        got = {r["key"]: (r["offset"], r["value"]) for r in json.loads(body)["records"]}
        assert got == {f"user-{k}": (2970 + k, f"v{2970 + k}") for k in range(30)}
        assert len(json.loads(body)["records"]) == 30
        assert "max_dirty_percent" in _metrics(url) and "cleaner_recopy_percent" in _metrics(url)
        assert run.stop() == 0, run.err
    finally:
        run.kill()


@pytest.mark.parametrize("copied", ["before_the_original_starts", "while_the_original_runs"])
def test_a_copy_of_a_data_dir_run_beside_its_original_leaves_one_writer(tmp_path: Path, copied: str) -> None:
    """A ``cp -a`` of the owning data dir, run beside its original on one bucket: both held the same claim, the
    content check never saw the other's copies in a running process, both tiered, and the bucket served an
    interleaving of the two machines' records (a helper's pass). Each ``tiered run`` now claims its partitions at a
    new owner epoch before it takes writes: of two data dirs holding one claim, the one that claims later owns the
    partition, and the other refuses writes (409) from its next pass (a copy of the state before the original
    claimed again is refused at once)."""
    a, c = tmp_path / "a", tmp_path / "c"
    a.mkdir()
    _create_partition(a, "events", records=9000)
    with LogManager(LogConfig.from_properties(_props(a)), start_scheduler=False) as manager:
        rlm = manager.remote_tier
        assert isinstance(rlm, RemoteLogManager)
        assert rlm.run_once(manager.all_logs()).segments_copied >= 1  # A claims owner epoch 0 and tiers

    def copy_a() -> None:
        try:
            shutil.copytree(a / "data", c / "data", symlinks=True)
        except shutil.Error as exc:  # a file the running original renamed meanwhile (a temp file): cp -a goes on too
            if not all("No such file" in str(why) for _src, _dst, why in exc.args[0]):
                raise
        (c / "data" / ".lock").unlink(missing_ok=True)

    if copied == "before_the_original_starts":
        copy_a()
    store, tip = _bucket(a, "events")
    run_a = RunProcess(_write_config(a, _props(a)))
    run_c = None
    try:
        url_a = run_a.url  # (it claims owner epoch 1 behind its endpoints)
        _poll("the original's claim at owner epoch 1", lambda: [r.owner_epoch for r in store.owner_records(tip)] == [0, 1])
        if copied == "while_the_original_runs":
            copy_a()  # its claim is owner epoch 1, the newest: it claims epoch 2 at its start
        run_c = RunProcess(_write_config(c, _props(c, **{"rsm.config.dir": str(a / "remote")})))
        url_c = run_c.url
        owner, deposed = (url_a, url_c) if copied == "before_the_original_starts" else (url_c, url_a)
        if copied == "while_the_original_runs":
            _poll("the copy's claim at owner epoch 2", lambda: store.owner_records(tip)[-1].owner_epoch == 2)
        newest = store.owner_records(tip)[-1]
        assert newest.owner_epoch == (1 if copied == "before_the_original_starts" else 2)
        assert newest.log_dirs == (str((a if owner == url_a else c) / "data"),)
        status, body = _http("POST", owner + "/topics/events/partitions/0/records", [{"value": "from the owner"}])
        assert status == 200, body
        assert json.loads(body)["first_offset"] == 9000

        def refuses() -> bool:
            status, body = _http("POST", deposed + "/topics/events/partitions/0/records", [{"value": "deposed"}])
            assert status in (200, 409), body
            return status == 409 and b"lost ownership of its remote data" in body

        _poll("the other data dir refusing writes", refuses)
        # Reads too: its records past the handover are not the partition's (a helper read them with 200).
        status, body = _http("GET", deposed + "/topics/events/partitions/0/records?offset=8999")
        assert status == 409 and b"lost ownership of its remote data" in body, body
        status, body = _http("GET", owner + "/topics/events/partitions/0/records?offset=8999")
        assert status == 200 and json.loads(body)["records"][1]["value"] == "from the owner", body
        assert run_a.stop() == 0 and run_c.stop() == 0
    finally:
        run_a.kill()
        if run_c is not None:
            run_c.kill()
    root = a if copied == "before_the_original_starts" else c
    proc = subprocess.run([sys.executable, "-m", "tiered.cli", "--config", str(root / "broker.properties"), "consume",
                           "-t", "events", "--offset", "8999", "--json"], capture_output=True, text=True, timeout=LIMIT)
    assert proc.returncode == 0, proc.stderr
    values = [json.loads(line)["value"] for line in proc.stdout.splitlines()]
    assert values[:2] == [f"{8999:06d}" * 33, "from the owner"]
    assert RemoteLogStateFile(root / "data" / "events-0").read().owner_epoch == newest.owner_epoch
    verify = subprocess.run([sys.executable, "-m", "tiered.cli", "--config", str(root / "broker.properties"), "verify",
                             "--remote"], capture_output=True, text=True, timeout=LIMIT)
    assert verify.returncode == 0, verify.stdout + verify.stderr
