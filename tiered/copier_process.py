"""The segment copier in a child process (``remote.log.manager.copier.process.enable``, ours, default true; used
for plugins whose object store declares ``shared_across_processes`` (:class:`tiered.StoreCapabilities`), i.e. whose
objects another process configured alike sees: the local-directory and S3 tiers. Not an in-memory store; S3 mocked
in-process by a test (moto's ``mock_aws``) needs ``remote.log.manager.copier.process.enable=false``, as the child
would reach the real endpoint).

On S3 (SeaweedFS on loopback, 120 small segments of 60 partitions, two CPU-bound threads in the parent, three
rounds each, interleaved, a busy machine): 8.0 segments/s through the child against 3.6 in the parent (2.2x).

Why a process, measured (tests/soak, ``python -m bench soak``, profiled with pyinstrument): copying one 1 MiB
segment to the local-directory tier took ~50 ms alone and 300-450 ms with four reader threads decoding records,
and the copy backlog (RemoteCopyLagSegments) grew without bound under a writer plus readers. The time was not the
bytes: the profile put it in ``fsync``, ``mkstemp``, ``Path.resolve`` and ``mkdir``, the ~100 blocking calls that a
segment's nine objects and its metadata events take. Each releases the GIL, and taking it back from CPU-bound
readers costs up to the switch interval (5 ms) times the threads queued for it: the copy spent its time in the
GIL queue, one hand-off per system call. Fewer calls per object would only shave that count; a bounded reader
share cannot bound what a consumer does with its records outside the library, and slows every reader to speed up
one thread. A child process has its own GIL: ``copy_log_segment_data`` and the metadata events' ``put`` cost
the parent two hand-offs each (write the request, read the reply). Measured after: ~210 ms per segment with the
same four readers, and the soak's copy lag stays at a few segments. What still runs in the parent (the segment's
fsync before upload, the producer snapshot lookup, a temporary directory per copy) is the next cost.

Measured again on a machine loaded beside CPU-bound processes (issue 27): what costs the parent is not the system
calls but the *long* waits (a reply from the child, an fsync), after each of which taking the GIL back costs up to
the switch interval times the threads queued for it, plus the OS's wake-up latency (a 5 ms put to the child took
60-78 ms with four CPU-bound threads). So the work per segment moved here and is batched: the copy task sends up to
16 segments per request (:class:`BatchCopier`, with a metadata store in the plugin's bucket), and the child writes,
for each, its COPY_SEGMENT_STARTED event, the checksums (:func:`tiered.checksums.compute_segment_checksums`), the
objects (8 segments uploaded at once: the store's waits overlap) and its COPY_SEGMENT_FINISHED event, in offset
order; a segment the log has not flushed yet is synced here first. Remote deletes go through the child too
(:class:`ChildDeletingRsm`), each with its DELETE_SEGMENT_STARTED event. Events that must only precede what the
child does next in the same thread (the STARTED ones) are deferred to that request (:class:`ChildWritingStore`).

The parent keeps the copy's logic (states, quotas, cleanup of a failed attempt, metrics). The child builds its own
plugin from the same ``remote.log.storage.manager.class.name`` and ``rsm.config.*``; a request is the (picklable)
metadata and segment data, the reply the custom metadata or the error, raised in the parent as
``RemoteStorageError``. Before each COPY_SEGMENT_FINISHED event the child lists the partition's owner records
(:func:`tiered.metadata.check_owner_epoch`): a claim by another data dir stops the batch there, as the parent's check
before each segment stops its own copies. A child never outlives its parent: one whose parent is gone (a SIGKILL of
``tiered run`` alone) starts and finishes no copy and ends (:func:`_watch_parent`), as if the machine had died;
the copies it had in flight are left STARTED, for the next owner to delete. A child that dies is replaced at the
next call; a child that cannot start (a plugin only
importable in this process) leaves the copies in this process. One child serves one call at a time; concurrent
copies (several partitions) use up to ``max_processes`` children, started on demand.
"""

from __future__ import annotations

import builtins
import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import IO, Any, BinaryIO

from local.scratch import ScratchDir
from tiered.checksums import SegmentChecksums, compute_segment_checksums
from tiered.errors import NotPartitionOwnerError, RemoteStorageError
from tiered.rsm import LogSegmentData, RemoteLogSegmentMetadata, RemoteLogSegmentState
from tiered.store import ObjectStore, read_all

logger = logging.getLogger(__name__)
_LEN = struct.Struct(">I")


def _send(out: IO[bytes], obj: object) -> None:
    """One message, written with as few system calls as the pipe allows (each one is a GIL hand-off)."""
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_LEN.pack(len(payload)) + payload)
    fd = out.fileno()
    while view:
        view = view[os.write(fd, view):]


def _recv(inp: IO[bytes]) -> Any:
    """One message: a single ``read`` for the usual small reply (header and payload arrive together)."""
    fd = inp.fileno()
    data = os.read(fd, 1 << 16)
    while len(data) < _LEN.size:
        more = os.read(fd, 1 << 16)
        if not more:
            raise EOFError("the copier process closed its pipe")
        data += more
    (size,) = _LEN.unpack_from(data)
    chunks = [data]
    have = len(data)
    while have < _LEN.size + size:
        more = os.read(fd, max(1 << 16, _LEN.size + size - have))
        if not more:
            raise EOFError("the copier process closed its pipe mid-message")
        chunks.append(more)
        have += len(more)
    return pickle.loads(b"".join(chunks)[_LEN.size:])


class CopierStartError(RemoteStorageError):
    """The child process could not start or build the plugin: copies then run in this process."""


class _Child:
    def __init__(self, class_name: str, props: Mapping[str, str]) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # the same tiered as the parent's
        env[PARENT_ENV] = str(os.getpid())  # (the child ends once this process is gone: see _watch_parent)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tiered.copier_process"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.inp, self.out = self.proc.stdout, self.proc.stdin
        try:
            _send(self.out, (class_name, dict(props)))
            reply = _recv(self.inp)
        except (OSError, EOFError) as exc:
            self.close()
            raise CopierStartError(f"the copier process did not start: {exc}") from exc
        if reply[0] != "ready":
            self.close()
            raise CopierStartError(f"the copier process cannot build {class_name!r}: {reply[1]}: {reply[2]}")

    def call(self, request: tuple[Any, ...], what: str) -> Any:
        _send(self.out, request)
        reply = _recv(self.inp)
        if reply[0] == "ok":
            return reply[1]
        _, kind, message, retriable = reply
        raise RemoteStorageError(f"{what} in the copier process failed: {kind}: {message}", retriable=bool(retriable))

    def close(self) -> None:
        try:
            self.out.close()  # EOF: the child's loop ends
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            self.inp.close()


class ProcessCopier:
    """``copy(metadata, segment_data)`` with the contract of ``RemoteStorageManager.copy_log_segment_data``, run
    in a child process (see the module docstring)."""

    def __init__(
        self, class_name: str, props: Mapping[str, str],
        fallback: Callable[[RemoteLogSegmentMetadata, LogSegmentData], bytes | None], max_processes: int = 2,
    ) -> None:
        self.class_name = class_name
        self.max_processes = max(1, max_processes)
        self.props = dict(props)
        self.fallback = fallback  # the in-process copy, used when no child can start
        self.failed_to_start: str | None = None
        self.fallback_rsm: Any = None  # the plugin (and its object store) a request runs on when no child can start
        self._lock = threading.Condition()
        # Puts deferred to the calling thread's next request (see ChildWritingStore): (key, data) in order.
        self._deferred = threading.local()
        self._starting = 0
        self._idle: list[_Child] = []
        self._all: list[_Child] = []
        self._closed = False
        self.requests = 0  # requests sent to a child (or run here when none could start)
        # Exists while the copies are stopping: a child's batch starts no other segment (see _copy_batch).
        self._stop_dir = ScratchDir("tiered-copier-")  # a killed process's: swept by the next one
        self.stop_file = self._stop_dir.path / "stop"
        self.deletes_in_child = False  # set by ChildDeletingRsm: DELETE_SEGMENT_STARTED events go with the deletes

    def __call__(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        """The plugin's ``copy_log_segment_data(metadata, data)``, run by a child."""
        return self._run(("copy", metadata, data), f"copy of {metadata.remote_log_segment_id}",
                         lambda: self.fallback(metadata, data))

    def copy_with_checksums(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData, checksum_chunk_bytes: int
    ) -> tuple[SegmentChecksums, bytes | None]:
        """The checksums of the segment's files (:func:`tiered.checksums.compute_segment_checksums`, before the
        upload) and the plugin's ``copy_log_segment_data(metadata, data)``, both run by a child: reading the files
        costs this process no GIL hand-off per read."""

        def here() -> tuple[SegmentChecksums, bytes | None]:
            return compute_segment_checksums(data, checksum_chunk_bytes), self.fallback(metadata, data)

        result: tuple[SegmentChecksums, bytes | None] = self._run(
            ("copy+checksums", metadata, data, checksum_chunk_bytes), f"copy of {metadata.remote_log_segment_id}", here
        )
        return result

    def put(self, key: str, data: bytes) -> None:
        """The object store's ``put(key, data)`` (remote metadata events), run by a child: each event is a
        written and fsynced file, a dozen system calls the parent no longer waits for the GIL after."""
        assert self.fallback_rsm is not None
        store = self.fallback_rsm.object_store
        self._run(("put", key, data), f"put of {key}", lambda: store.put(key, data))

    def delete_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        """The plugin's ``delete_log_segment_data(metadata)``, run by a child (with this thread's deferred puts
        first: the segment's DELETE_SEGMENT_STARTED event)."""
        assert self.fallback_rsm is not None
        rsm = self.fallback_rsm
        self._run(("delete", metadata), f"delete of {metadata.remote_log_segment_id}",
                  lambda: rsm.delete_log_segment_data(metadata))

    def put_with_next_request(self, key: str, data: bytes) -> None:
        """``put(key, data)``, done by the child just before the next request of this thread (a put or a
        copy), in the same round trip. What must be in the store before a copy's objects (its COPY_SEGMENT_STARTED
        event) costs no round trip of its own: under load each one is a few waits for the GIL (see the module
        docstring). A failed deferred put fails that next request, naming the key."""
        pending: list[tuple[str, bytes]] | None = getattr(self._deferred, "puts", None)
        if pending is None:
            pending = self._deferred.puts = []
        pending.append((key, data))

    def _take_deferred(self) -> list[tuple[str, bytes]]:
        pending: list[tuple[str, bytes]] = getattr(self._deferred, "puts", None) or []
        self._deferred.puts = []
        return pending

    def _run(self, request: tuple[Any, ...], what: str, fallback: Callable[[], Any]) -> Any:
        puts = self._take_deferred()
        if puts:
            request = ("after-puts", puts, request)
            store = self.fallback_rsm.object_store
            inner = fallback

            def fallback() -> Any:
                for key, data in puts:
                    store.put(key, data)
                return inner()

        return self._run_request(request, what, fallback)

    def _run_request(self, request: tuple[Any, ...], what: str, fallback: Callable[[], Any]) -> Any:
        self.requests += 1
        with self._lock:
            # An idle child, or room for a new one (at most max_processes), or wait for one to be free.
            self._lock.wait_for(lambda: self._closed or self.failed_to_start is not None or bool(self._idle)
                                or len(self._all) + self._starting < self.max_processes)
            if self._closed:
                raise RemoteStorageError("the copier process is closed", retriable=False)
            child = self._idle.pop() if self._idle else None
            if child is None and self.failed_to_start is None:
                self._starting += 1
        if child is None:
            if self.failed_to_start is not None:
                return fallback()
            try:
                child = _Child(self.class_name, self.props)
            except CopierStartError as exc:
                logger.warning("%s: copying in this process instead", exc)
                with self._lock:
                    self._starting -= 1
                    self.failed_to_start = str(exc)
                    self._lock.notify_all()
                return fallback()
            with self._lock:
                self._starting -= 1
                self._all.append(child)
        try:
            result = child.call(request, what)
        except (OSError, EOFError, pickle.PickleError) as exc:  # the child died or the pipe broke: replace it
            self._discard(child)
            raise RemoteStorageError(f"{what}: the copier process failed ({exc})", retriable=True) from exc
        except BaseException:
            self._release(child)
            raise
        self._release(child)
        return result

    def _release(self, child: _Child) -> None:
        with self._lock:
            if self._closed:
                child.close()
            else:
                self._idle.append(child)
            self._lock.notify_all()

    def _discard(self, child: _Child) -> None:
        with self._lock:
            if child in self._all:
                self._all.remove(child)
            self._lock.notify_all()
        child.close()

    @property
    def processes(self) -> int:
        return len(self._all)

    def request_stop(self) -> None:
        """The batches in progress start no other segment (those in flight finish); until :meth:`resume`."""
        self.stop_file.touch()

    def resume(self) -> None:
        self.stop_file.unlink(missing_ok=True)

    def close(self) -> None:
        self._stop_dir.cleanup()
        with self._lock:
            self._closed = True
            children, self._all, self._idle = self._all, [], []
            self._lock.notify_all()
        for child in children:
            child.close()


# Segments of a batch uploaded at once by the child: their objects' writes (and a store's waits, an fsync per
# object for the local directory) overlap; the FINISHED events are still written in offset order.
BATCH_UPLOADS = 8
_uploads: ThreadPoolExecutor | None = None
_uploads_lock = threading.Lock()


def _upload_pool() -> ThreadPoolExecutor:
    global _uploads
    with _uploads_lock:
        if _uploads is None:
            _uploads = ThreadPoolExecutor(BATCH_UPLOADS, thread_name_prefix="copier-upload")
        return _uploads


def _fsync_files(data: LogSegmentData) -> None:
    for path in (data.log_segment, data.offset_index, data.time_index, data.transaction_index,
                 data.producer_snapshot_index):
        if path is None:
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class _StartedFailed(Exception):
    """The put of a segment's COPY_SEGMENT_STARTED event failed (it may or may not have landed)."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _copy_batch(rsm: Any, prefix: str, jobs: list[Any], stop_file: str | None = None) -> Any:
    """A batch of segment copies, in the child (see :class:`BatchCopier`). Up to BATCH_UPLOADS segments are in
    flight at once; each is started only when there is room, in offset order, and not once ``stop_file`` exists (the
    parent is stopping: the segments in flight finish, no other starts, as Kafka's copy task checks isCancelled()
    between segments). A segment in flight writes its COPY_SEGMENT_STARTED event, then its checksums and objects;
    then, in offset order, its COPY_SEGMENT_FINISHED event is written (the same bytes the parent's metadata store
    writes). The first failure stops it: no FINISHED event after it, so the remote copies never have a hole (a
    FINISHED segment after an unfinished one would make the next copies start past it). The segments in flight after
    it are reported as abandoned: the parent deletes them (and their STARTED events)."""
    from collections import deque
    from concurrent.futures import Future

    from tiered import layout
    from tiered.metadata import check_copy_not_deleted, check_owner_epoch, encode_metadata
    from tiered.rlm_copy import CopyFailure, CopyOutcome
    from tiered.rsm import RemoteLogSegmentMetadataUpdate

    def upload(job: Any) -> tuple[SegmentChecksums, bytes | None]:
        md = job.metadata
        try:  # the STARTED event before anything of the segment (the segments in flight write theirs at once)
            rsm.object_store.put(layout.metadata_event_key(prefix, md.remote_log_segment_id, md.start_offset,
                                                           int(md.state)), encode_metadata(md))
        except Exception as exc:
            raise _StartedFailed(exc) from exc
        if job.sync:  # not flushed by the log yet: durable before it is copied (the log's recovery point follows)
            _fsync_files(job.data)
        return compute_segment_checksums(job.data, job.checksum_chunk_bytes), rsm.copy_log_segment_data(md, job.data)

    def failed(stage: str, exc: Exception) -> Any:
        return CopyFailure(stage, type(exc).__name__, str(exc), bool(getattr(exc, "retriable", True)))

    pool = _upload_pool()
    in_flight: deque[Future[tuple[SegmentChecksums, bytes | None]]] = deque()
    started = 0
    copied: list[tuple[SegmentChecksums, bytes | None]] = []
    while True:
        while (started < len(jobs) and len(in_flight) < BATCH_UPLOADS and not _orphaned()
               and not (stop_file is not None and os.path.exists(stop_file))):
            in_flight.append(pool.submit(upload, jobs[started]))
            started += 1
        if not in_flight:
            return CopyOutcome(copied)
        job = jobs[len(copied)]
        md = job.metadata
        stage, failure = "copy", None
        try:
            try:
                sums, custom = in_flight.popleft().result()
            except _StartedFailed as exc:
                stage = "started"
                raise exc.cause from None
            if custom is not None and len(custom) > job.custom_metadata_max_bytes:
                failure = CopyFailure("custom", "", "", False, len(custom))
            else:
                if _orphaned():  # (the parent was killed: what it does not know of, it does not count)
                    raise RemoteStorageError("the process that asked for the copy is gone", retriable=True)
                stage = "finished"  # (a store error in the check fails the copy as its FINISHED put's would)
                if job.owner_epoch >= 0:
                    try:
                        check_owner_epoch(rsm.object_store, prefix, md, job.owner_epoch)
                    except NotPartitionOwnerError:
                        stage = "owner"
                        raise
                finished = md.create_with_updates(RemoteLogSegmentMetadataUpdate(
                    md.remote_log_segment_id, job.finished_at_ms, custom, RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                    md.broker_id))
                check_copy_not_deleted(rsm.object_store, prefix, finished)
                key = layout.metadata_event_key(prefix, md.remote_log_segment_id, md.start_offset, int(finished.state))
                rsm.object_store.put(key, encode_metadata(finished, sums))
                check_copy_not_deleted(rsm.object_store, prefix, finished)  # (a deletion between: see the store's)
        except Exception as exc:
            failure = failed(stage, exc)
        if failure is not None:
            futures_wait(in_flight)  # their events and objects land (or fail) before the parent cleans them up
            return CopyOutcome(copied, failure, abandoned=len(in_flight))
        copied.append((sums, custom))


# In the child: the pid of the process that started it. A child whose parent is gone (killed with SIGKILL: the
# child is in its own process group only when its parent made one) writes no COPY_SEGMENT_FINISHED event and starts
# no segment, and ends (see :func:`_watch_parent`): a copy its parent never hears of is one a crash left, for the
# next owner to delete, not one finished behind the back of a data dir that may have changed hands meanwhile.
_PARENT: int | None = None
PARENT_ENV = "TIERED_COPIER_PARENT"


def _orphaned() -> bool:
    return _PARENT is not None and os.getppid() != _PARENT


def _watch_parent(interval_s: float = 0.5) -> None:
    """The child's daemon thread: end the process once its parent is gone, whatever it is doing (an upload that
    would otherwise go on for minutes included): what a SIGKILL of the whole machine leaves, and no more."""
    import time

    while not _orphaned():
        time.sleep(interval_s)
    os._exit(1)


def _serve(rsm: Any, request: tuple[Any, ...]) -> Any:
    """One request of the parent, in the child."""
    kind = request[0]
    if kind == "copy-batch":
        return _copy_batch(rsm, request[1], request[2], request[3])
    if kind == "after-puts":  # the deferred puts first, in order; the request only if they all landed
        for key, data in request[1]:
            try:
                rsm.object_store.put(key, data)
            except Exception as exc:
                raise RemoteStorageError(
                    f"put of {key} (deferred to this request) failed: {type(exc).__name__}: {exc}",
                    retriable=getattr(exc, "retriable", True),
                ) from exc
        return _serve(rsm, request[2])
    if kind == "copy":
        return rsm.copy_log_segment_data(request[1], request[2])
    if kind == "delete":
        rsm.delete_log_segment_data(request[1])
        return None
    if kind == "copy+checksums":
        sums = compute_segment_checksums(request[2], request[3])
        return sums, rsm.copy_log_segment_data(request[1], request[2])
    rsm.object_store.put(request[1], request[2])
    return None


def main() -> int:
    """The child: configure the plugin, then copy segments until the parent closes the pipe."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but replies may reach the pipe
    # The parent decides when copying stops: a Ctrl-C (SIGINT to the whole foreground process group) or a SIGTERM
    # to the group must not kill a copy half way. The child ends when the parent closes the pipe, or is gone.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    global _PARENT
    _PARENT = int(os.environ.get(PARENT_ENV) or os.getppid())
    threading.Thread(target=_watch_parent, name="copier-parent-watch", daemon=True).start()
    from tiered.backends import load_rsm

    class_name, props = _recv(inp)
    try:
        rsm = load_rsm(class_name, props)
    except Exception as exc:
        _send(out, ("error", type(exc).__name__, str(exc)))
        return 1
    _send(out, ("ready",))
    try:
        while True:
            try:
                request = _recv(inp)
            except EOFError:
                return 0
            try:
                _send(out, ("ok", _serve(rsm, request)))
            except Exception as exc:
                _send(out, ("error", type(exc).__name__, str(exc), getattr(exc, "retriable", True)))
    finally:
        rsm.close()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the parent died (killed) while a reply was on its way: nobody is left to tell
        os._exit(0)


_COPY_STARTED_EVENT = f".{int(RemoteLogSegmentState.COPY_SEGMENT_STARTED)}.json"  # tiered.layout.metadata_event_key


class BatchCopier:
    """:class:`tiered.rlm_copy.CopyBatch` through a :class:`ProcessCopier`, for a :class:`RemoteLogMetadataStore`
    in the plugin's own bucket (the child writes the events where the store reads them, under its ``prefix``).

    A batch is one request: per segment, the STARTED event, the checksums, the objects and the FINISHED event,
    written by the child in that order (what the parent's copy task does one call at a time). The parent then
    records the events in its view (:meth:`record`, no second write). When no child can start, the batch runs in
    this process, the same way."""

    def __init__(self, copier: ProcessCopier, store: Any, rsm: Any) -> None:
        self._copier = copier
        self._store = store  # tiered.metadata.RemoteLogMetadataStore
        self._rsm = rsm

    def copy(self, jobs: list[Any]) -> Any:
        prefix, stop = self._store.prefix, str(self._copier.stop_file)
        what = f"copy of {len(jobs)} segment(s) from {jobs[0].metadata.remote_log_segment_id}" if jobs else "copy"
        return self._copier._run(("copy-batch", prefix, jobs, stop), what, lambda: _copy_batch(self._rsm, prefix, jobs, stop))

    def record(self, md: RemoteLogSegmentMetadata, checksums: SegmentChecksums | None = None) -> None:
        self._store.record_written(md, checksums)


_DELETE_STARTED_EVENT = f".{int(RemoteLogSegmentState.DELETE_SEGMENT_STARTED)}.json"


class ChildDeletingRsm:
    """The plugin, its ``delete_log_segment_data`` run by the copier process (the composition root sets it up with the copier process):
    a segment's objects are deleted with one request instead of a blocking call per object here (each a wait for
    the GIL under load), the segment's DELETE_SEGMENT_STARTED event in the same request, before them. Everything
    else is the plugin's own."""

    def __init__(self, rsm: Any, copier: ProcessCopier) -> None:
        self._rsm = rsm
        self._copier = copier
        copier.deletes_in_child = True

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._copier.delete_segment(metadata)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rsm, name)


class ChildWritingStore(ObjectStore):
    """The plugin's object store for :class:`tiered.metadata.RemoteLogMetadataStore`, whose writes run in the copier
    process; reads, listings and deletes are the parent's own store's."""

    def __init__(self, store: ObjectStore, rsm: Any, copier: ProcessCopier) -> None:
        self._store = store
        self._copier = copier
        self.capabilities = store.capabilities
        copier.fallback_rsm = rsm

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}({self._store!r})"

    def put(self, key: str, data: bytes | BinaryIO, *, if_absent: bool = False) -> None:
        if if_absent:
            self._store.put(key, data, if_absent=True)  # an owner claim: rare, and its answer matters here
            return
        data = read_all(data)
        if key.endswith(_COPY_STARTED_EVENT) or (key.endswith(_DELETE_STARTED_EVENT) and self._copier.deletes_in_child):
            # A COPY_SEGMENT_STARTED (DELETE_SEGMENT_STARTED) event: only the copy's objects (the deletion of the
            # objects) must come after it, and the child does that too, in this thread's next request. It goes with
            # that request (one round trip less per segment); a failure fails that request, and the copy's cleanup
            # (the deletion's retry) handles what may have landed.
            self._copier.put_with_next_request(key, data)
        else:
            self._copier.put(key, data)

    def get(self, key: str) -> bytes:
        return self._store.get(key)

    def get_range(self, key: str, start: int, end_inclusive: int) -> bytes:
        return self._store.get_range(key, start, end_inclusive)

    def size(self, key: str) -> int:
        return self._store.size(key)

    def list(self, prefix: str) -> Iterable[str]:
        return self._store.list(prefix)

    def list_keys(self, prefix: str) -> builtins.list[str]:
        return self._store.list_keys(prefix)

    def exists(self, key: str) -> bool:
        return self._store.exists(key)

    def delete(self, key: str) -> None:
        self._store.delete(key)

    def delete_many(self, keys: Iterable[str]) -> None:
        self._store.delete_many(keys)
