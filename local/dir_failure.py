"""Data dirs taken offline after an I/O error (Kafka's ``LogDirFailureChannel``).

Kafka's rule for storage faults: an ``IOException`` while a log appends, rolls, flushes or loads does not
crash the broker and is not retried; the data dir holding that log is taken offline at once, every log of the
dir then refuses reads and writes, and the other data dirs keep serving. A restart (after the disk is fixed)
brings the dir back: the loader recovers it from its files like after a crash.

The channel is where a log reports such an error. The :class:`~local.manager.LogManager` owns one for all its
data dirs and listens to it (it takes every log of the failed dir offline); a :class:`~local.log.Log` opened on
its own gets a private channel, so that it still refuses writes after its own I/O error. A dir is reported
once: later reports of the same dir are ignored (the first error is the one that names the cause).

Listeners are called in the reporting thread, which may hold the lock of the log that failed: a listener must
not wait for another log's lock (see ``Log.mark_offline``). As in Kafka, the dirs are also queued for a handler
thread that wants to take them one at a time (:meth:`take_next_offline_log_dir`).

:func:`check_partition_files` parses the per-partition files whose corruption keeps a partition from loading,
as the loader does, without changing anything: the manager uses it to name the bad file when a parser's error
does not, and ``tiered status`` to report offline partitions before (or without) a startup.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

OfflineListener = Callable[[Path, str], None]
"""Called with (data dir, reason) once, when a data dir goes offline."""


def check_partition_files(partition_dir: Path) -> tuple[str | None, list[str]]:
    """Parse ``partition.metadata``, ``leader-epoch-checkpoint``, ``remote-log-state`` and the producer snapshots
    of a partition dir.

    Returns (why the partition cannot load, naming each bad file; None when they are sound) and notes: a
    corrupt producer snapshot does not keep a partition offline (the loader deletes it and rebuilds the
    producer state from the log), it is only noted. Reads only.
    """
    from local import filenames
    from local.checkpoint import LeaderEpochCheckpointFile, PartitionMetadataFile
    from local.errors import KafkaStorageError
    from local.producer_state import decode_snapshot
    from local.remote_state import RemoteLogStateFile

    offline: list[str] = []
    metadata = partition_dir / filenames.PARTITION_METADATA_FILENAME
    epochs = partition_dir / filenames.LEADER_EPOCH_CHECKPOINT_FILENAME
    checks: list[tuple[Path, Callable[[], object]]] = [
        (metadata, lambda: PartitionMetadataFile(metadata).read()),
        (epochs, lambda: LeaderEpochCheckpointFile(epochs).read()),
        (RemoteLogStateFile(partition_dir).path, lambda: RemoteLogStateFile(partition_dir).read()),
    ]
    for path, parse in checks:
        if not path.exists():
            continue
        try:
            parse()
        except (KafkaStorageError, OSError, ValueError) as exc:
            offline.append(str(exc) if str(path) in str(exc) else f"{path}: {exc}")
    notes = []
    for snapshot in sorted(partition_dir.glob("*" + filenames.PRODUCER_SNAPSHOT_FILE_SUFFIX)):
        try:
            decode_snapshot(snapshot.read_bytes(), str(snapshot))
        except (KafkaStorageError, OSError, ValueError) as exc:
            notes.append(f"corrupt producer snapshot {snapshot.name} (deleted and rebuilt at the next load): {exc}")
    return ("; ".join(offline) or None), notes


class LogDirFailureChannel:
    """The data dirs that failed, why, and who must hear of it (see the module docstring). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offline: dict[Path, str] = {}
        self._listeners: list[OfflineListener] = []
        self._queue: queue.Queue[Path] = queue.Queue()

    def add_listener(self, listener: OfflineListener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def maybe_add_offline_log_dir(self, log_dir: str | Path, message: str, exc: BaseException | None = None) -> bool:
        """Record that ``log_dir`` failed (Kafka's ``maybeAddOfflineLogDir``); True when it was not offline yet.

        The error is logged with its cause, the dir is queued and every listener is told, in this thread.
        """
        log_dir = Path(log_dir)
        with self._lock:
            if log_dir in self._offline:
                return False
            self._offline[log_dir] = message
            listeners = list(self._listeners)
        logger.error("data dir %s goes offline: %s", log_dir, message, exc_info=exc)
        self._queue.put(log_dir)
        for listener in listeners:
            try:
                listener(log_dir, message)
            except Exception:  # one listener's failure must not keep the others from hearing of it
                logger.exception("listener %r failed on the offline data dir %s", listener, log_dir)
        return True

    def has_offline_log_dir(self, log_dir: str | Path) -> bool:
        return Path(log_dir) in self._offline

    def offline_reason(self, log_dir: str | Path) -> str | None:
        """Why ``log_dir`` went offline, or None while it is online."""
        return self._offline.get(Path(log_dir))

    @property
    def offline_log_dirs(self) -> dict[Path, str]:
        """A copy: every offline data dir and why."""
        with self._lock:
            return dict(self._offline)

    def take_next_offline_log_dir(self, timeout: float | None = None) -> Path | None:
        """The next dir that went offline, in order, waiting up to ``timeout`` seconds (None: forever)."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
