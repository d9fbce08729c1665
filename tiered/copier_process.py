"""The segment copier in a child process (``remote.log.manager.copier.process.enable``, ours, default true; used
for plugins that declare ``shared_across_processes``, i.e. whose objects another process configured alike sees:
the local-directory tier. Not an in-memory store, nor S3 mocked in-process by a test).

Why a process, measured (tests/soak, ``python -m bench soak``, profiled with pyinstrument): copying one 1 MiB
segment to the local-directory tier took ~50 ms alone and 300-450 ms with four reader threads decoding records,
and the copy backlog (RemoteCopyLagSegments) grew without bound under a writer plus readers. The time was not the
bytes: the profile put it in ``fsync``, ``mkstemp``, ``Path.resolve`` and ``mkdir``, the ~100 blocking calls that a
segment's nine objects and its metadata events take. Each releases the GIL, and taking it back from CPU-bound
readers costs up to the switch interval (5 ms) times the threads queued for it: the copy spent its time in the
GIL queue, one hand-off per system call. Fewer calls per object would only shave that count; a bounded reader
share cannot bound what a consumer does with its records outside the library, and slows every reader to speed up
one thread. A child process has its own GIL: ``copy_log_segment_data`` and the metadata events' ``put_bytes`` cost
the parent two hand-offs each (write the request, read the reply). Measured after: ~210 ms per segment with the
same four readers, and the soak's copy lag stays at a few segments. What still runs in the parent (the segment's
fsync before upload, the producer snapshot lookup, a temporary directory per copy) is the next cost.

The parent keeps the copy's logic (states, quotas, cleanup of a failed attempt, metrics). The child builds its own
plugin from the same ``remote.log.storage.manager.class.name`` and ``rsm.config.*``; a request is the (picklable)
metadata and segment data, the reply the custom metadata or the error, raised in the parent as
``RemoteStorageError``. A child that dies is replaced at the next call; a child that cannot start (a plugin only
importable in this process) leaves the copies in this process. One child serves one call at a time; concurrent
copies (several partitions) use up to ``max_processes`` children, started on demand.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from typing import IO, Any

from tiered.errors import RemoteStorageError
from tiered.rsm import LogSegmentData, RemoteLogSegmentMetadata

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
        self.fallback_store: Any = None  # the object store whose put_bytes :meth:`put_bytes` stands for
        self._lock = threading.Condition()
        self._starting = 0
        self._idle: list[_Child] = []
        self._all: list[_Child] = []
        self._closed = False

    def __call__(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        """The plugin's ``copy_log_segment_data(metadata, data)``, run by a child."""
        return self._run(("copy", metadata, data), f"copy of {metadata.remote_log_segment_id}",
                         lambda: self.fallback(metadata, data))

    def put_bytes(self, key: str, data: bytes) -> None:
        """The object store's ``put_bytes(key, data)`` (remote metadata events), run by a child: each event is a
        written and fsynced file, a dozen system calls the parent no longer waits for the GIL after."""
        assert self.fallback_store is not None
        store = self.fallback_store
        self._run(("put", key, data), f"put of {key}", lambda: store.put_bytes(key, data))

    def _run(self, request: tuple[Any, ...], what: str, fallback: Callable[[], Any]) -> Any:
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

    def close(self) -> None:
        with self._lock:
            self._closed = True
            children, self._all, self._idle = self._all, [], []
            self._lock.notify_all()
        for child in children:
            child.close()


def main() -> int:
    """The child: configure the plugin, then copy segments until the parent closes the pipe."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but replies may reach the pipe
    # The parent decides when copying stops: a Ctrl-C (SIGINT to the whole foreground process group) or a SIGTERM
    # to the group must not kill a copy half way. The child ends when the parent closes the pipe (or dies).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
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
                if request[0] == "copy":
                    _send(out, ("ok", rsm.copy_log_segment_data(request[1], request[2])))
                else:
                    rsm.put_bytes(request[1], request[2])  # type: ignore[attr-defined]
                    _send(out, ("ok", None))
            except Exception as exc:
                _send(out, ("error", type(exc).__name__, str(exc), getattr(exc, "retriable", True)))
    finally:
        rsm.close()


if __name__ == "__main__":
    sys.exit(main())


class ChildWritingStore:
    """An object store for :class:`tiered.metadata.RemoteLogMetadataStore` whose ``put_bytes`` runs in the copier
    process; everything else (listing, reading) is the parent's own store."""

    def __init__(self, store: Any, copier: ProcessCopier) -> None:
        self._store = store
        self._copier = copier
        copier.fallback_store = store

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        if if_absent:
            self._store.put_bytes(key, data, if_absent=True)  # an owner claim: rare, and its answer matters here
        else:
            self._copier.put_bytes(key, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)
