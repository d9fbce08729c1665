"""The LogManager: every partition log of one node, across its data dirs (Kafka's ``LogManager``).

Each data dir holds partition dirs named ``<topic>-<partition>`` plus the per-dir files Kafka keeps:
``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``, the clean-shutdown marker
``.kafka_cleanshutdown`` (present => the loader skips recovery) and our feature-level file. A ``.lock`` file,
held with ``flock``, keeps two processes from opening one data dir.

Storage faults, as Kafka handles them (its ``LogDirFailureChannel``): an I/O error while loading, appending,
rolling, flushing, cleaning or writing checkpoints takes that data dir offline at once. The manager owns the
:class:`~local.dir_failure.LogDirFailureChannel` every log reports to; on a report it drops the dir's logs
(each refuses reads and writes with ``LogDirOfflineError`` from then on, and ``get_or_create_log`` of one of
its partitions raises it), and the other dirs keep working. A partition that cannot be loaded for a reason
other than I/O (a corrupt ``partition.metadata`` or ``leader-epoch-checkpoint``, a bad topic override file)
takes only itself offline: ``offline_partitions`` names it, the file and why, and the load report of its dir
(which ``tiered status`` shows) lists it. Nothing comes back online before a restart.

The remote tier (``remote.log.storage.system.enable=true``) is handed in: built (``remote_tier=``) or as a factory
(``remote_tier_factory=``), both from ``tiered``'s composition root (``tiered.open_log_manager(config)`` does it);
given neither, the manager finds the installed one (:mod:`local.remote` says how) and fails with a ``ConfigError``
saying what to do when there is none. ``close()`` closes the tier too, unless it was handed in with
``owns_remote_tier=False`` (a tier shared by several managers, closed by whoever built it).

``LogManager(config, read_only=True)`` is what the read-only commands use: it writes nothing to the data dirs
(no lock, no checkpoints, no clean-shutdown marker, no load report, no directory created; a missing dir is an
error), runs no background work, and opens a partition only when asked for it, from a scratch copy (see
:mod:`local.read_only`).
"""

from __future__ import annotations

import fcntl
import glob
import logging
import os
import re
import shutil
import threading
import time as _time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from local import filenames, metrics
from local.checkpoint import CleanShutdownFile, OffsetCheckpointFile, PartitionMetadataFile
from local.dir_failure import LogDirFailureChannel, check_partition_files
from local.errors import (
    ConfigError,
    KafkaStorageError,
    KafkaStorageIOError,
    LogDirOfflineError,
    PartitionOfflineError,
    ReadOnlyLogError,
    RemoteStorageNotConfiguredError,
    TooManyPartitionsError,
)
from local.log import Log
from local.scheduler import SYSTEM_TIME, Scheduler, Time
from local.topic_intents import (
    remove_deleted_dirs,
    remove_intents,
    settle_intents,
    unsettled_partition_dirs,
    write_intents,
)

if TYPE_CHECKING:
    from local.cleaner.log_cleaner import LogCleaner
    from local.config import LogConfig
    from local.remote import RemoteTier, RemoteTierFactory

logger = logging.getLogger(__name__)
# Read-only opens of a partition a live writer changes meanwhile (local.read_only): listed and copied again at most
# this many times.
_READ_ONLY_ATTEMPTS = 5

LOCK_FILENAME = ".lock"
TOPIC_CONFIG_FILENAME = "tiered-topic.properties"


@dataclass(frozen=True, slots=True)
class OfflinePartition:
    """A partition the manager does not serve: its data dir went offline, or it could not be loaded."""

    topic: str
    partition: int
    data_dir: Path
    path: str  # the file that failed to load, or the partition dir
    reason: str
    dir_offline: bool  # True: the whole data dir went offline (I/O error); False: only this partition

    def error(self) -> KafkaStorageError:
        """The error an operation on this partition raises."""
        name = f"{self.topic}-{self.partition}"
        if self.dir_offline:
            return LogDirOfflineError(
                f"{name} is offline: its data dir {self.data_dir} was taken offline ({self.reason})",
                topic=self.topic, partition=self.partition, path=self.path, log_dir=str(self.data_dir),
            )
        return PartitionOfflineError(
            f"{name} is offline: it could not be loaded from {self.path} ({self.reason})",
            topic=self.topic, partition=self.partition, path=self.path, reason=self.reason,
        )


# What a data dir Kafka or tiered wrote holds at its top (any one of them), and a partition dir's files.
_DATA_DIR_FILES = frozenset({
    "meta.properties", filenames.RECOVERY_POINT_CHECKPOINT_FILENAME, filenames.LOG_START_OFFSET_CHECKPOINT_FILENAME,
    filenames.REPLICATION_OFFSET_CHECKPOINT_FILENAME, "cleaner-offset-checkpoint", filenames.CLEAN_SHUTDOWN_FILENAME,
    filenames.FEATURES_FILENAME, LOCK_FILENAME, "tiered-load-stats.json",
})
# ... or made there for the remote tier: Kafka's remote-log-index-cache, the segment cache, a local metadata store,
# tiered's own files
_DATA_DIR_PREFIXES = ("remote-log-", "tiered-")
# A partition dir's own files (any suffix: .swap, .cleaned, .deleted), in a dir of any of Kafka's partition names
# (topic-0, topic-0.<id>-delete, -future, -stray)
_PARTITION_FILE = re.compile(r"^([0-9]{20}\.(log|index|timeindex|txnindex|snapshot)(\.[a-z]+)?|partition\.metadata|"
                             r"leader-epoch-checkpoint)$")


def _is_partition_dir_name(name: str) -> bool:
    try:
        filenames.parse_partition_dir_name(name)
    except ValueError:
        return False
    return True


def foreign_dir_reason(data_dir: Path) -> str | None:
    """Why ``data_dir`` is not to be taken for a data dir, or None. A directory that holds files (not hidden ones,
    ``lost+found`` or ``*.properties``, such as the broker's own config) but none a Kafka or tiered data dir has at
    its top, and no partition directory with a segment or ``partition.metadata``, is someone's other files: /etc
    taken for one got checkpoints written into it, its ``name-N`` subdirectories (dbus-1) taken for partitions, and
    a file there named like a segment truncated by the recovery of invalid bytes (a helper's pass). (Kafka in KRaft
    mode refuses every log dir without the meta.properties ``kafka-storage format`` writes; empty and new ones are
    taken here.)"""
    if any(os.path.lexists(os.path.join(data_dir, name)) for name in _DATA_DIR_FILES):
        return None  # (a few stats: a data dir of thousands of partitions is not listed for this at every open)
    try:
        every = list(os.scandir(data_dir))
    except (FileNotFoundError, NotADirectoryError):
        return None  # (made, or refused as not a directory, where it is opened)
    except OSError:
        return None  # (unreadable: reported where it is opened)
    if any(e.name.startswith(_DATA_DIR_PREFIXES) for e in every):
        return None
    entries = [e for e in every if not e.name.startswith(".") and e.name != "lost+found"
               and not (e.name.endswith(".properties") and e.is_file())]
    if not entries:
        return None
    for entry in entries:
        if "-" not in entry.name or not entry.is_dir():  # (a symlinked partition dir counts)
            continue
        try:
            names = os.listdir(entry.path)
        except OSError:
            continue
        if any(_PARTITION_FILE.match(n) for n in names):
            return None
        if not names and _is_partition_dir_name(entry.name):  # (made, and killed before its first file)
            return None
    shown = ", ".join(sorted(e.name for e in entries)[:3]) + (", ..." if len(entries) > 3 else "")
    return (f"{data_dir} does not look like a Kafka data dir: it holds {shown} but no file a Kafka or tiered data dir "
            "has (meta.properties, recovery-point-offset-checkpoint, ...) and no partition directory with segments; "
            "pass a new or empty directory, or a data dir Kafka or tiered wrote")


class LogManager:
    """Owns the data dirs and their logs; see the module docstring."""

    def __init__(
        self,
        config: LogConfig,
        *,
        time: Time = SYSTEM_TIME,
        scheduler: Scheduler | None = None,
        remote_tier: RemoteTier | None = None,
        remote_tier_factory: RemoteTierFactory | None = None,
        broker_epoch: int = 0,
        start_scheduler: bool = True,
        read_only: bool = False,
        owns_remote_tier: bool = True,
    ) -> None:
        self.config = config
        self.read_only = read_only
        # False: the tier handed in (remote_tier=) is shared with other managers (a Spark planner's, kept across
        # plans); the caller closes it, close() leaves it open
        self._owns_remote_tier = owns_remote_tier or remote_tier is None
        self._scratch_root: Path | None = None
        self._unopened: dict[tuple[str, int], tuple[Path, Path]] = {}  # read-only: partition -> (dir, data dir)
        self.time = time
        self.broker_epoch = broker_epoch
        self.scheduler = scheduler or Scheduler("tiered-log-manager", time)
        self._lock = threading.RLock()
        self._logs: dict[tuple[str, int], Log] = {}
        self._log_dirs_of: dict[tuple[str, int], Path] = {}
        self._dir_locks: dict[Path, int] = {}
        self._created_dirs: set[Path] = set()  # data dirs this manager made (a failed constructor removes them)
        self.offline_dirs: dict[Path, str] = {}
        self.offline_partitions: dict[tuple[str, int], OfflinePartition] = {}
        self._offline_logs: dict[tuple[str, int], Log] = {}  # dropped logs whose handles close() releases
        self._kept_offsets: dict[str, dict[tuple[str, int], int]] = {}  # checkpoint name -> offline partition's
        # The partition maps (_logs, _log_dirs_of) and the offline bookkeeping have their own lock, held only for
        # the map operations themselves (never while calling into a log): a log reports its I/O error holding its
        # own lock, so the listener must never wait for the manager lock (held by delete_log while it waits for a
        # log lock). Every walk of a map is of a copy taken under it.
        self._offline_lock = threading.Lock()
        self.log_dir_failure_channel = LogDirFailureChannel()
        self.log_dir_failure_channel.add_listener(self._on_log_dir_failure)
        self._append_listeners: tuple[Callable[[Log], None], ...] = ()
        self.load_stats: dict[str, dict[str, Any]] = {}
        self._topic_configs: dict[str, Mapping[str, Any]] = {}  # topic -> overrides (persisted per partition)
        self._closed = False
        self._checkpoint_lock = threading.Lock()  # one writer at a time per checkpoint file (same .tmp name)
        self.live_dirs: list[Path] = []
        self.cleaner: LogCleaner | None = None  # set after loading (a writer's, log.cleaner.enable)
        for data_dir in config.log_dirs:
            foreign = foreign_dir_reason(Path(data_dir))
            if foreign is not None:
                raise ConfigError(foreign)
        if read_only:
            self._scratch_root = self._open_dirs_read_only([Path(d) for d in config.log_dirs])
        for data_dir in [] if read_only else config.log_dirs:
            self._open_dir(Path(data_dir))
        if not self.live_dirs:
            raise KafkaStorageError(
                f"no usable data dir among {[str(d) for d in config.log_dirs]}: "
                + "; ".join(f"{d}: {why}" for d, why in self.offline_dirs.items())
            )
        self.remote_tier = remote_tier
        if self.remote_tier is None and config.remote_log_storage_system_enable:
            try:
                cache_root = None
                if self._scratch_root is not None:  # the tier's caches may grow large: not on a memory file system
                    from local.read_only import disk_scratch_dir

                    cache_root = disk_scratch_dir(self._scratch_root)
                self.remote_tier = _build_remote_tier(config, remote_tier_factory, cache_root)
            except BaseException:
                self._release_dirs()  # a caller may fix the config and open the dirs again in this process
                raise
        if read_only:
            self._index_read_only()
            return
        try:
            self._check_open_files_for_loading()
        except BaseException:
            self._release_dirs()
            raise
        self._load_logs()
        # Kafka's LogCleaner for the compacted topics (local.cleaner); its threads start with startup().
        if config.log_cleaner_enable:
            from local.cleaner.log_cleaner import LogCleaner

            self.cleaner = LogCleaner(config, self._logs_by_partition, self._data_dir_of_key, time=time,
                                      on_io_error=self._handle_io_error)
        if start_scheduler:
            self.startup()

    # ------------------------------------------------------------------------------------------------------
    # Data dirs

    def _open_dir(self, data_dir: Path) -> None:
        try:
            if not data_dir.exists():
                data_dir.mkdir(parents=True, exist_ok=True)
                self._created_dirs.add(data_dir)
            fd = os.open(data_dir / LOCK_FILENAME, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise KafkaStorageError(
                    f"data dir {data_dir} is locked by another process (its {LOCK_FILENAME} is held)",
                    path=str(data_dir),
                ) from None
            probe = data_dir / ".write-probe"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            self._mark_offline(data_dir, f"cannot be opened for writing: {exc}", exc)
            self._register_partitions_of_offline_dir(data_dir)
            return
        self._dir_locks[data_dir] = fd
        self.live_dirs.append(data_dir)

    def _release_dirs(self) -> None:
        """Unlock the data dirs and drop a read-only manager's scratch dir (a constructor that failed). A data dir
        this manager created and left holding only its lock is removed (while still locked), so a command that
        failed on its config leaves no data dir behind."""
        for data_dir, fd in self._dir_locks.items():
            if data_dir in self._created_dirs:
                _remove_if_only_lock(data_dir)
            os.close(fd)
        self._dir_locks.clear()
        if self._scratch_root is not None:
            from local.read_only import remove_scratch_root

            remove_scratch_root(self._scratch_root)

    def _open_dirs_read_only(self, dirs: list[Path]) -> Path:
        missing = [str(d) for d in dirs if not d.is_dir()]
        if missing:
            raise KafkaStorageError(
                f"no such data dir: {', '.join(missing)} (a read-only command never creates one)", path=missing[0]
            )
        self.live_dirs.extend(dirs)
        from local.read_only import make_scratch_root

        return make_scratch_root()

    def _index_read_only(self) -> None:
        """Read-only: list the partitions; each is opened (from a scratch copy) when first asked for. The partitions
        of a topic's creation or deletion not yet committed (or cut by a crash) are left out, as a writer's start
        leaves them (:mod:`local.topic_intents`)."""
        try:
            unsettled = unsettled_partition_dirs(self.live_dirs)
        except OSError as exc:
            logger.warning("cannot read the topic intents (%s): the partitions are listed as they are", exc)
            unsettled = set()
        for data_dir in self.live_dirs:
            for child in sorted(data_dir.iterdir()):
                try:
                    key = filenames.parse_partition_dir_name(child.name)
                except ValueError:
                    continue
                if child.is_dir() and child not in unsettled:
                    self._unopened[key] = (child, data_dir)
                    self._log_dirs_of[key] = data_dir

    def _open_read_only(self, key: tuple[str, int]) -> Log | None:
        from local.read_only import NO_SPACE, scratch_partition_dir

        with self._lock:
            log = self._logs.get(key)
            if log is not None or key not in self._unopened:
                failed = self.offline_partitions.get(key)
                if failed is not None:
                    raise failed.error()
                return log
            source, data_dir = self._unopened.pop(key)
            assert self._scratch_root is not None
            start_offsets = self._read_checkpoint(data_dir, filenames.LOG_START_OFFSET_CHECKPOINT_FILENAME)
            recovery_points = self._read_checkpoint(data_dir, filenames.RECOVERY_POINT_CHECKPOINT_FILENAME)
            clean = CleanShutdownFile(data_dir / filenames.CLEAN_SHUTDOWN_FILENAME).exists()
            on_disk = False  # the scratch copy on the memory file system, where there is one (local.read_only)
            for attempt in range(1, _READ_ONLY_ATTEMPTS + 1):
                scratch = source
                try:
                    scratch = scratch_partition_dir(source, self._scratch_root, on_disk=on_disk)
                    opened = Log.open(
                        scratch,
                        self.config.topic_config(self._topic_overrides(source), persisted=True),
                        scheduler=None,
                        time=self.time,
                        log_start_offset=start_offsets.get(key, 0),
                        recovery_point=recovery_points.get(key, 0),
                        had_clean_shutdown=clean,
                        remote_tier=self.remote_tier,
                        use_large_index=self._use_large_index(),
                        read_only=True,
                    )
                    break
                except FileNotFoundError as exc:
                    # A live writer removed a file between the listing and its copy or open (a producer snapshot, a
                    # segment retention deleted): list the partition again, as it is now.
                    if attempt == _READ_ONLY_ATTEMPTS or not source.is_dir():
                        raise
                    logger.debug("%s changed while it was opened read-only (%s): again", source, exc)
                except OSError as exc:
                    if exc.errno in NO_SPACE and not on_disk and attempt < _READ_ONLY_ATTEMPTS:
                        # The loader's own writes (a recovery's rebuilt index) filled the memory file system: again
                        # from a scratch copy on disk.
                        logger.info("no room to load %s from its scratch copy %s (%s): again on disk", source, scratch,
                                    exc)
                        on_disk = True
                        if scratch != source:
                            shutil.rmtree(scratch, ignore_errors=True)
                        continue
                    raise
                except (KafkaStorageError, ValueError) as exc:  # a corrupt per-partition file: named, like at startup
                    raise self._partition_offline(data_dir, source, key[0], key[1], exc, scratch).error() from exc
            with self._offline_lock:
                self._logs[key] = opened
            return opened

    def _mark_offline(self, data_dir: Path, why: str, exc: BaseException | None = None) -> None:
        """Report ``data_dir`` to the failure channel, which calls :meth:`_on_log_dir_failure` once."""
        self.log_dir_failure_channel.maybe_add_offline_log_dir(data_dir, why, exc)

    def _on_log_dir_failure(self, data_dir: Path, why: str) -> None:
        """The channel's listener: drop every log of ``data_dir`` (each refuses reads and writes from now on).
        Runs in the thread that hit the error, possibly holding that log's lock: never waits for a log lock."""
        logger.error("taking data dir %s offline: %s", data_dir, why)
        dropped: list[Log] = []
        with self._offline_lock:
            self.offline_dirs[data_dir] = why
            if data_dir in self.live_dirs:
                self.live_dirs.remove(data_dir)
            for key, d in list(self._log_dirs_of.items()):
                if d != data_dir:
                    continue
                log = self._logs.pop(key, None)
                self._log_dirs_of.pop(key, None)
                self.offline_partitions[key] = OfflinePartition(
                    key[0], key[1], data_dir, str(log.dir) if log is not None else str(data_dir), why, True
                )
                if log is not None:
                    self._offline_logs[key] = log
                    dropped.append(log)
            fd = self._dir_locks.pop(data_dir, None)
        cleaner = self.cleaner
        if cleaner is not None:
            cleaner.manager.handle_log_dir_failure(data_dir)
        for log in dropped:
            try:
                log.mark_offline(why)
            except OSError:
                pass
        if fd is not None:
            os.close(fd)
        metrics.OFFLINE_LOG_DIRS.set(len(self.offline_dirs))

    def _use_large_index(self) -> bool:
        return bool(self.config.large_index_enabled)

    # ------------------------------------------------------------------------------------------------------
    # Loading

    def _check_open_files_for_loading(self) -> None:
        """Refuse to load partitions that would not fit under the process's limit of open files, before any is
        loaded: past it, the load failed part way with "Too many open files", took the data dir offline and left its
        partitions' files as a crash does (a helper's 2,050 partitions under ``ulimit -n 1024``)."""
        count = 0
        for data_dir in self.live_dirs:
            try:
                count += sum(1 for child in os.scandir(data_dir) if child.is_dir() and _is_partition_dir_name(child.name))
            except OSError:
                continue  # (the load says what is wrong with the dir)
        refusal = open_files_refusal(count)
        if refusal is not None:
            raise TooManyPartitionsError(
                f"cannot load the {count} partition(s) of {', '.join(map(str, self.live_dirs))}: {refusal}; nothing "
                "was loaded or changed")

    def _load_logs(self) -> None:
        try:  # a topic's creation or deletion a crash interrupted: rolled back or finished in every data dir at once
            settle_intents(list(self.live_dirs))
        except OSError as exc:
            logger.warning("cannot settle the topic intents a crash left (%s): the partitions load as they are", exc)
        for data_dir in list(self.live_dirs):
            try:
                self._load_dir(data_dir)
            except OSError as exc:
                self._mark_offline(data_dir, f"I/O error while loading: {exc}", exc)
                self._register_partitions_of_offline_dir(data_dir)

    def _sibling_topic_id(self, pdir: Path, topic: str) -> uuid.UUID | None:
        """For a partition dir without ``partition.metadata``: the topic id its topic's other partitions record, when
        they agree (None otherwise, and for a dir that has the file). Such a dir got a random id, a second id for one
        topic, which its remote data (keyed by the id) and a Kafka broker would not take. Kafka writes the file from
        the controller's id; this engine's id of a topic is in its other partitions."""
        if (pdir / filenames.PARTITION_METADATA_FILENAME).exists():
            return None
        ids = set()
        for data_dir in self.live_dirs:
            for sibling in data_dir.glob(f"{glob.escape(topic)}-*"):
                meta = sibling / filenames.PARTITION_METADATA_FILENAME
                if sibling == pdir or not meta.is_file():
                    continue
                try:
                    if filenames.parse_partition_dir_name(sibling.name)[0] == topic:
                        ids.add(PartitionMetadataFile(meta).read())
                except (OSError, ValueError, KafkaStorageError):
                    continue  # (its own load says what is wrong with it)
        if len(ids) != 1:
            return None
        [topic_id] = ids
        logger.warning("%s has no %s: it takes the topic id %s its topic's other partitions record", pdir,
                       filenames.PARTITION_METADATA_FILENAME, topic_id)
        return topic_id

    def _register_partitions_of_offline_dir(self, data_dir: Path) -> None:
        """At startup, the partitions found in a dir that went offline before they were loaded are offline
        too: ``get_or_create_log`` must not create an empty one in another dir in place of its data."""
        why = self.offline_dirs.get(data_dir, "offline")
        try:
            names = [child.name for child in data_dir.iterdir()]
        except OSError:
            return  # not even listable: nothing is known of its partitions
        for name in names:
            try:
                key = filenames.parse_partition_dir_name(name)
            except ValueError:
                continue
            with self._offline_lock:
                if key not in self._logs:
                    self.offline_partitions.setdefault(
                        key, OfflinePartition(key[0], key[1], data_dir, str(data_dir / name), why, True)
                    )

    def _load_dir(self, data_dir: Path) -> None:
        started = _time.perf_counter()
        remove_deleted_dirs(data_dir)  # (a partition dir whose removal a crash cut: never loaded as a log)
        marker = CleanShutdownFile(data_dir / filenames.CLEAN_SHUTDOWN_FILENAME)
        clean = marker.exists()
        if clean:
            # Gone before anything is loaded (Kafka deletes it after): a load that fails part way (a full disk, too
            # many open files) leaves the files as a crash does, and the next start treats them so, rather than
            # taking the preallocated indexes it left for damage.
            marker.delete()
        recovery_points = self._read_checkpoint(data_dir, filenames.RECOVERY_POINT_CHECKPOINT_FILENAME)
        start_offsets = self._read_checkpoint(data_dir, filenames.LOG_START_OFFSET_CHECKPOINT_FILENAME)
        partition_dirs = []
        for child in sorted(data_dir.iterdir()):
            if not child.is_dir():
                continue
            try:
                partition_dirs.append((child, filenames.parse_partition_dir_name(child.name)))
            except ValueError:
                continue  # e.g. remote-log-index-cache, -delete / -future dirs
        label = str(data_dir)
        metrics.REMAINING_LOGS_TO_LOAD.labels(label).set(len(partition_dirs))
        callback = (
            metrics.remaining_segments_callback(label)
            if self.config.num_segment_loading_threads_per_data_dir > 1
            else None
        )
        remaining = len(partition_dirs)
        lock = threading.Lock()
        stats: dict[str, Any] = {"partitions": 0, "segments_loaded": 0, "segments_recovered": 0, "bytes_truncated": 0}
        offline: dict[str, dict[str, str]] = {}  # partition dir name -> the file that failed and why

        def load_one(item: tuple[Path, tuple[str, int]]) -> None:
            nonlocal remaining
            pdir, (topic, partition) = item
            try:
                topic_config = self.config.topic_config(self._topic_overrides(pdir), persisted=True)
                log = Log.open(
                    pdir,
                    topic_config,
                    topic_id=self._sibling_topic_id(pdir, topic),
                    scheduler=self.scheduler,
                    time=self.time,
                    log_start_offset=start_offsets.get((topic, partition), 0),
                    recovery_point=recovery_points.get((topic, partition), 0),
                    had_clean_shutdown=clean,
                    remote_tier=self.remote_tier,
                    use_large_index=self._use_large_index(),
                    num_segment_loading_threads=self.config.num_segment_loading_threads_per_data_dir,
                    remaining_segments_callback=callback,
                    log_dir_failure_channel=self.log_dir_failure_channel,
                )
            except OSError:
                raise  # an I/O error takes the whole dir offline (_load_logs)
            except (KafkaStorageError, ValueError) as exc:
                # A corrupt per-partition file: only this partition goes offline. (ValueError: a parser that
                # still lets UnicodeDecodeError out; _partition_offline then finds the bad file itself.)
                failed = self._partition_offline(data_dir, pdir, topic, partition, exc)
                with lock:
                    # Its checkpointed offsets are kept (written back with the dir's checkpoints): once the file
                    # is repaired, the partition comes back where it was, deleted records still deleted.
                    for name, offsets in ((filenames.RECOVERY_POINT_CHECKPOINT_FILENAME, recovery_points),
                                          (filenames.LOG_START_OFFSET_CHECKPOINT_FILENAME, start_offsets)):
                        if (topic, partition) in offsets:
                            self._kept_offsets.setdefault(name, {})[(topic, partition)] = offsets[(topic, partition)]
                    offline[pdir.name] = {"path": failed.path, "reason": failed.reason}
                    remaining -= 1
                    metrics.REMAINING_LOGS_TO_LOAD.labels(label).set(remaining)
                return
            log.log_start_offset_checkpointer = self.checkpoint_log_start_offset_of
            log.append_listener = self._appended
            log.truncation_listener = self._on_truncation
            with self._offline_lock:
                self._logs[(topic, partition)] = log
                self._log_dirs_of[(topic, partition)] = data_dir
            with lock:
                remaining -= 1
                metrics.REMAINING_LOGS_TO_LOAD.labels(label).set(remaining)
                st = log.load_stats
                stats["partitions"] += 1
                if st is not None:
                    stats["segments_loaded"] += st.segments_loaded
                    stats["segments_recovered"] += st.segments_recovered
                    stats["bytes_truncated"] += st.bytes_truncated
                    metrics.SEGMENTS_RECOVERED.labels(label).inc(st.segments_recovered)
                    metrics.BYTES_TRUNCATED.labels(label).inc(st.bytes_truncated)

        threads = max(1, self.config.num_recovery_threads_per_data_dir)
        try:
            if threads > 1 and len(partition_dirs) > 1:
                with ThreadPoolExecutor(threads, thread_name_prefix=f"log-recovery-{data_dir.name}") as pool:
                    list(pool.map(load_one, partition_dirs))
            else:
                for item in partition_dirs:
                    load_one(item)
        finally:
            try:
                metrics.REMAINING_LOGS_TO_LOAD.remove(label)
            except KeyError:
                pass
        elapsed = _time.perf_counter() - started
        metrics.LOAD_SECONDS.labels(label).set(elapsed)
        stats["elapsed_ms"] = round(elapsed * 1000, 3)
        stats["clean_shutdown"] = clean
        if offline:
            stats["offline_partitions"] = offline
        self.load_stats[label] = stats
        try:
            metrics.write_load_report(data_dir, stats)
        except OSError as exc:
            logger.warning("could not write the load report of %s: %s", data_dir, exc)
        logger.info("loaded %d partition(s) of %s in %.0f ms", stats["partitions"], data_dir, elapsed * 1000)

    def _partition_offline(
        self, data_dir: Path, pdir: Path, topic: str, partition: int, exc: Exception, scratch: Path | None = None
    ) -> OfflinePartition:
        """Record ``topic-partition`` (dir ``pdir``) as offline because loading it raised ``exc``; ``scratch``: the
        read-only copy it was loaded from, whose paths in the error are given back as the real files'."""
        path = getattr(exc, "path", None) or getattr(exc, "filename", None)
        if not path:
            # An error that names no file (a parser's bare UnicodeDecodeError): find the bad file the way
            # `tiered status` does, else name the partition dir.
            bad, _ = check_partition_files(pdir)
            path = bad.split(": ", 1)[0] if bad is not None and bad.startswith(str(pdir)) else str(pdir)
        reason = str(exc) if str(path) in str(exc) else f"{path}: {exc}"
        if scratch is not None:
            path, reason = str(path).replace(str(scratch), str(pdir)), reason.replace(str(scratch), str(pdir))
        failed = OfflinePartition(topic, partition, data_dir, str(path), f"{type(exc).__name__}: {reason}", False)
        logger.error("partition %s-%d of %s is offline: cannot load it (%s)", topic, partition, data_dir, failed.reason)
        with self._offline_lock:
            self.offline_partitions[(topic, partition)] = failed
        return failed

    def _read_checkpoint(self, data_dir: Path, name: str) -> dict[tuple[str, int], int]:
        path = data_dir / name
        if not path.exists():
            return {}
        try:
            return dict(OffsetCheckpointFile(path).read())
        except KafkaStorageError as exc:
            # Kafka treats a corrupt checkpoint as absent: full recovery from offset 0 is safe, just slower.
            logger.warning("ignoring corrupt checkpoint %s (%s): recovering every segment", path, exc)
            return {}

    def _topic_overrides(self, partition_dir: Path) -> Mapping[str, Any] | None:
        """Topic overrides persisted beside the partition (Kafka keeps them in its metadata log)."""
        topic = filenames.parse_partition_dir_name(partition_dir.name)[0]
        if topic in self._topic_configs:
            return self._topic_configs[topic]
        path = partition_dir / TOPIC_CONFIG_FILENAME
        if not path.exists():
            return None
        from local.config import read_properties

        overrides = read_properties(path)
        self._topic_configs[topic] = overrides
        return overrides

    def _persist_overrides(self, partition_dir: Path, overrides: Mapping[str, Any]) -> None:
        from local.checkpoint import atomic_write
        from local.properties import format_properties

        text = format_properties({str(k): str(v) for k, v in overrides.items()})
        partition_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(partition_dir / TOPIC_CONFIG_FILENAME, text.encode("ascii"))

    # ------------------------------------------------------------------------------------------------------
    # Append listeners

    def add_append_listener(self, listener: Callable[[Log], None]) -> None:
        """Call ``listener(log)`` after every append that writes records to any log of this manager, from the
        appending thread, outside the log's lock (Kafka's purgatory check after an append: the Kafka listener
        wakes its waiting fetches there, whichever path appended). It must be quick and must not raise."""
        with self._offline_lock:
            self._append_listeners = (*self._append_listeners, listener)

    def remove_append_listener(self, listener: Callable[[Log], None]) -> None:
        with self._offline_lock:
            self._append_listeners = tuple(x for x in self._append_listeners if x != listener)

    def _appended(self, log: Log) -> None:
        for listener in self._append_listeners:
            listener(log)

    # ------------------------------------------------------------------------------------------------------
    # Logs

    def create_partitions(
        self,
        topic: str,
        partitions: Iterable[int],
        overrides: Mapping[str, Any] | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> None:
        """Create the new partitions ``partitions`` of ``topic`` (those that exist are left as they are), all or none,
        as Kafka's controller creates a topic in one metadata batch: refused first (:class:`TooManyPartitionsError`)
        when their files would not fit under the process's limit of open files; every partition dir is made before
        any of them is seen, and all are seen at once (a reader never finds the topic with some of its partitions);
        a creation that fails part way (a full disk) deletes the partitions it made before the error is raised; and
        one a crash interrupts is rolled back at the next start (:mod:`local.topic_intents`)."""
        _check_creation_args(topic, overrides, topic_id)
        if isinstance(partitions, Sized):  # refused from the count before a huge range becomes a list
            have = sum(1 for t, _p in list(self._logs) if t == topic)
            refusal = open_files_refusal(len(partitions) - have)
            if refusal is not None:
                raise TooManyPartitionsError(f"cannot create {len(partitions) - have} partition(s) of {topic}: {refusal}")
        wanted = list(partitions)
        with self._lock:  # (what is new, decided where a concurrent get_or_create_log cannot make one meanwhile)
            self._check_open()
            new = [p for p in wanted if self.get_log(topic, p) is None]
            refusal = open_files_refusal(len(new))
            if refusal is not None:
                raise TooManyPartitionsError(f"cannot create {len(new)} partition(s) of {topic}: {refusal}")
            if len(new) <= 1 or self.read_only:
                for p in new:
                    self.get_or_create_log(topic, p, overrides, topic_id=topic_id)
                return
            for p in new:
                failed = self.offline_partitions.get((topic, p))
                if failed is not None:
                    raise failed.error()  # (before any intent: an offline dir's partition is never rolled back)
            if not self.live_dirs:
                raise LogDirOfflineError(
                    f"cannot create {len(new)} partition(s) of {topic}: every data dir is offline "
                    + "; ".join(f"{d}: {why}" for d, why in self.offline_dirs.items()), topic=topic)
            if topic_id is None:  # new partitions of a topic join it: one topic id for all its partitions
                topic_id = next((log.topic_id for (t, _), log in self._logs_by_partition().items()
                                 if t == topic and log.topic_id is not None), None) or uuid.uuid4()
            if overrides is not None:
                self._topic_configs[topic] = dict(overrides)
            intents = write_intents(list(self.live_dirs), "create", topic, topic_id, new)
            made: list[tuple[int, Log, Path]] = []
            try:
                for p in new:
                    log, data_dir = self._create_log(topic, p, overrides, topic_id, assigned=[d for *_, d in made])
                    made.append((p, log, data_dir))
                remove_intents(intents)  # the commit: from here on a crash leaves the whole topic
            except BaseException:
                undone = True
                for p, log, _ in reversed(made):
                    try:
                        log.delete()
                    except Exception:  # (the dir may be offline now: its intent rolls it back at the next start)
                        undone = False
                        logger.warning("could not delete partition %s-%d after the failed creation", topic, p,
                                       exc_info=True)
                if undone:
                    try:
                        remove_intents(intents)
                    except OSError:  # (left: the next start rolls back what is not there any more)
                        logger.warning("could not remove the intent of the failed creation of %s", topic)
                raise
            self._register_new(topic, made)

    def get_or_create_log(
        self,
        topic: str,
        partition: int,
        overrides: Mapping[str, Any] | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> Log:
        """The log of ``topic-partition``, created in the data dir with the fewest partitions if new.

        ``overrides`` use topic keys (``segment.bytes``, ``retention.ms``...) and are validated here.
        """
        _check_creation_args(topic, overrides, topic_id)
        key = (topic, partition)
        if self.read_only:
            log = self.get_log(topic, partition)
            if log is None or overrides is not None:
                raise ReadOnlyLogError(
                    f"cannot create or reconfigure {topic}-{partition}: the data dirs are open read-only"
                )
            return log
        with self._lock:
            self._check_open()
            log = self._logs.get(key)
            if log is not None and overrides is not None:
                new_config = self.config.topic_config(overrides)
                _validate_turning_off_remote_storage(log, new_config)
            if overrides is not None:
                self._topic_configs[topic] = dict(overrides)
            giving_up_remote = False
            if log is not None:
                if overrides is not None:
                    log.config = new_config
                    self._persist_overrides(log.dir, overrides)
                    giving_up_remote = log.has_remote_data and not new_config.remote_storage_enable
                if not giving_up_remote:
                    return log
            else:
                return self._create_and_register(topic, partition, overrides, topic_id)
        # Remote storage turned off with remote.log.delete.on.disable=true (validated above; KIP-950): the records
        # below the local log start are gone to readers from now on; the remote tier's expiration task deletes them.
        # (Outside the manager's lock: the log start checkpoint takes the checkpoint lock.)
        from local.log import LogStartOffsetIncrementReason

        log.maybe_increment_log_start_offset(log.local_log_start_offset, LogStartOffsetIncrementReason.SEGMENT_DELETION)
        return log

    def _create_and_register(self, topic: str, partition: int, overrides: Mapping[str, Any] | None,
                             topic_id: uuid.UUID | None) -> Log:
        """A new log of ``topic-partition`` (get_or_create_log's, under ``_lock``)."""
        key = (topic, partition)
        failed = self.offline_partitions.get(key)
        if failed is not None:
            raise failed.error()  # never a fresh empty log in another dir in place of the offline one
        if not self.live_dirs:
            raise LogDirOfflineError(
                f"cannot create {topic}-{partition}: every data dir is offline "
                + "; ".join(f"{d}: {why}" for d, why in self.offline_dirs.items()),
                topic=topic, partition=partition,
            )
        log, data_dir = self._create_log(topic, partition, overrides, topic_id)
        self._register_new(topic, [(partition, log, data_dir)])
        return log

    def _create_log(self, topic: str, partition: int, overrides: Mapping[str, Any] | None,
                    topic_id: uuid.UUID | None, assigned: Sequence[Path] = ()) -> tuple[Log, Path]:
        """A new log of ``topic-partition`` made in the live data dir with the fewest partitions (``assigned``: the
        dirs of logs made for the same creation, not registered yet), not registered yet (under ``_lock``)."""
        topic_config = self.config.topic_config(self._topic_configs.get(topic))
        with self._offline_lock:
            logs_in = Counter(self._log_dirs_of.values())
            logs_in.update(assigned)
            data_dir = min(self.live_dirs, key=lambda d: logs_in[d])
            if topic_id is None:  # a new partition of a topic joins it: one topic id for all its partitions
                topic_id = next((other.topic_id for (t, _), other in self._logs.items()
                                 if t == topic and other.topic_id is not None), None)
        pdir = data_dir / filenames.partition_dir_name(topic, partition)
        try:
            if overrides is not None:
                self._persist_overrides(pdir, overrides)
            log = Log.open(
                pdir,
                topic_config,
                scheduler=self.scheduler,
                time=self.time,
                topic_id=topic_id,
                remote_tier=self.remote_tier,
                use_large_index=self._use_large_index(),
                log_dir_failure_channel=self.log_dir_failure_channel,
            )
        except OSError as exc:
            if isinstance(exc, LogDirOfflineError):
                raise
            why = f"I/O error while creating {pdir}: {exc}"
            self._mark_offline(data_dir, why, exc)
            raise KafkaStorageIOError(
                f"{why}; data dir {data_dir} is now offline",
                path=exc.filename or str(pdir), log_dir=str(data_dir), errno=exc.errno,
                topic=topic, partition=partition,
            ) from exc
        return log, data_dir

    def _register_new(self, topic: str, made: Sequence[tuple[int, Log, Path]]) -> None:
        """Logs :meth:`_create_log` made, seen from now on, all at once; those whose dir failed meanwhile are offline
        partitions (the first one's error is raised once every one is recorded)."""
        failed: list[tuple[Log, str, OfflinePartition]] = []
        with self._offline_lock:  # the dirs may have failed meanwhile (another log's I/O error)
            for partition, log, data_dir in made:
                key = (topic, partition)
                dir_failure = self.offline_dirs.get(data_dir)
                if dir_failure is None:
                    self._logs[key] = log
                    self._log_dirs_of[key] = data_dir
                    log.log_start_offset_checkpointer = self.checkpoint_log_start_offset_of
                    log.append_listener = self._appended
                    log.truncation_listener = self._on_truncation
                    continue
                offline = OfflinePartition(topic, partition, data_dir, str(log.dir), dir_failure, True)
                self.offline_partitions[key] = offline
                self._offline_logs[key] = log
                failed.append((log, dir_failure, offline))
        for log, dir_failure, _ in failed:
            log.mark_offline(dir_failure)
        if failed:
            raise failed[0][2].error()

    def get_log(self, topic: str, partition: int) -> Log | None:
        if self.read_only:  # opened when first asked for; an offline partition raises, naming its file
            return self._open_read_only((topic, partition))
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[Log]:
        for key in list(self._unopened):
            try:
                self._open_read_only(key)
            except PartitionOfflineError:
                continue  # named in offline_partitions; the others are served
        with self._offline_lock:
            return list(self._logs.values())

    def partitions(self) -> list[tuple[str, int]]:
        """Every (topic, partition) of the live data dirs, opened or not."""
        with self._offline_lock:
            return sorted(set(self._logs) | set(self._unopened))

    def data_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._log_dirs_of.get((topic, partition))

    def _logs_by_partition(self) -> dict[tuple[str, int], Log]:
        with self._offline_lock:
            return dict(self._logs)

    def _data_dir_of_key(self, key: tuple[str, int]) -> Path | None:
        return self._log_dirs_of.get(key)

    def _on_truncation(self, log: Log, offset: int) -> None:
        """A log truncated to ``offset``: a cleaner checkpoint past it comes down (Kafka's LogManager.truncateTo)."""
        data_dir = self._log_dirs_of.get((log.topic, log.partition))
        if self.cleaner is not None and data_dir is not None:
            self.cleaner.manager.maybe_truncate_checkpoint(data_dir, (log.topic, log.partition), offset)

    def delete_partitions(self, topic: str, partitions: Sequence[int]) -> None:
        """Delete these partitions of ``topic`` (a topic's deletion), all or none across a crash: an intent names
        them first, and a start finishes a deletion it finds (:mod:`local.topic_intents`)."""
        with self._lock:
            self._check_open()
            logs = {p: self.get_log(topic, p) for p in partitions}
            topic_id = next((log.topic_id for log in logs.values() if log is not None and log.topic_id), None)
            intents = write_intents(self.live_dirs, "delete", topic, topic_id, list(partitions)) \
                if len(partitions) > 1 else []
            for p in partitions:
                self.delete_log(topic, p)
            remove_intents(intents)

    def delete_log(self, topic: str, partition: int) -> None:
        with self._lock:
            self._check_open()  # once closed, the dirs are unlocked: another LogManager may own them now
            with self._offline_lock:  # both maps in one step: a dir failure sees the partition in both or neither
                log = self._logs.pop((topic, partition), None)
                self._log_dirs_of.pop((topic, partition), None)
            if log is not None:
                cleaner = self.cleaner
                data_dir = log.dir.parent
                if cleaner is not None:  # Kafka: abort its cleaning, forget its cleaner checkpoint
                    cleaner.manager.abort_cleaning((topic, partition))
                    cleaner.manager.update_checkpoints(data_dir, remove=(topic, partition))
                log.delete()

    # ------------------------------------------------------------------------------------------------------
    # Background work

    def startup(self) -> None:
        """Schedule retention, flushing and checkpointing (Kafka's LogManager.startup)."""
        cfg = self.config
        self.scheduler.startup()
        self.scheduler.schedule("kafka-log-retention", self._scheduled_cleanup, cfg.log_retention_check_interval_ms, cfg.log_retention_check_interval_ms)
        self.scheduler.schedule("kafka-log-flusher", self.flush_dirty_logs, cfg.log_flush_scheduler_interval_ms, cfg.log_flush_scheduler_interval_ms)
        self.scheduler.schedule(
            "kafka-recovery-point-checkpoint", self.checkpoint_recovery_offsets,
            cfg.log_flush_offset_checkpoint_interval_ms, cfg.log_flush_offset_checkpoint_interval_ms,
        )
        self.scheduler.schedule(
            "kafka-log-start-offset-checkpoint", self.checkpoint_log_start_offsets,
            cfg.log_flush_start_offset_checkpoint_interval_ms, cfg.log_flush_start_offset_checkpoint_interval_ms,
        )
        if self.remote_tier is not None:
            # Kafka's RemoteLogManager: per-partition copy and expiration tasks every
            # remote.log.manager.task.interval.ms, on the remote tier's own copier and expiration pools.
            self.remote_tier.start_tasks(self.all_logs)
        if self.cleaner is not None:
            self.cleaner.startup()

    def _scheduled_cleanup(self) -> None:
        if not self._closed:  # (a run that starts while close() runs: nothing to do, nothing to report)
            self.cleanup_logs()

    def cleanup_logs(self) -> int:
        """One retention pass over the logs that are not compacted; returns the number of segments deleted. (As in
        Kafka, a compacted log's retention, ``compact,delete``, is the log cleaner's: see :mod:`local.cleaner`.)"""
        self._check_writable("run retention")
        self._check_open()
        total = 0
        cleaner = self.cleaner
        if cleaner is not None:  # Kafka: paused for the pass, so that a policy changing under it races nothing
            paused = cleaner.manager.pause_cleaning_for_non_compacted_partitions()
            logs = [log for _, log in paused]
        else:
            logs = [log for log in self.all_logs() if not log.config.compact]
        try:
            total = self._delete_old_segments(logs)
        finally:
            if cleaner is not None:
                cleaner.manager.resume_cleaning([key for key, _ in paused])
        return total

    def _delete_old_segments(self, logs: list[Log]) -> int:
        total = 0
        for log in logs:
            try:
                total += log.delete_old_segments()
            except RemoteStorageNotConfiguredError as exc:
                logger.error("%s", exc)  # that partition keeps every segment; the others go on
            except OSError as exc:
                self._handle_io_error(log, exc)
        return total

    def flush_dirty_logs(self) -> None:
        now = self.time.milliseconds()
        for log in self.all_logs():
            try:
                if now - log.last_flush_time >= log.config.flush_ms:
                    log.flush()
            except OSError as exc:
                self._handle_io_error(log, exc)

    def checkpoint_recovery_offsets(self) -> None:
        self._checkpoint(filenames.RECOVERY_POINT_CHECKPOINT_FILENAME, lambda log: log.recovery_point)

    def checkpoint_log_start_offsets(self) -> None:
        # Kafka writes only the logs whose start offset is above their first segment (i.e. was moved).
        self._checkpoint(filenames.LOG_START_OFFSET_CHECKPOINT_FILENAME, lambda log: log.log_start_offset)

    def checkpoint_log_start_offset_of(self, log: Log) -> None:
        """Write the log-start-offset checkpoint of ``log``'s data dir now: a log calls it when its log start offset
        moves, BEFORE it (or the remote tier) deletes anything below it. Raises ``OSError``: the caller then
        deletes nothing (and :meth:`cleanup_logs` takes the dir offline); the log retries before its next deletion."""
        data_dir = self._log_dirs_of.get((log.topic, log.partition))
        if data_dir is None or data_dir not in self.live_dirs:
            return
        self._write_checkpoint(data_dir, filenames.LOG_START_OFFSET_CHECKPOINT_FILENAME, lambda lg: lg.log_start_offset)

    def _write_checkpoint(self, data_dir: Path, name: str, value: Any) -> None:
        with self._checkpoint_lock:
            with self._offline_lock:
                logs = [(key, log) for key, log in self._logs.items() if self._log_dirs_of.get(key) == data_dir]
            entries = {key: value(log) for key, log in logs}
            # An offline partition's checkpointed offsets are kept: repaired, it comes back where it was.
            for key, offset in self._kept_offsets.get(name, {}).items():
                failed = self.offline_partitions.get(key)
                if failed is not None and failed.data_dir == data_dir:
                    entries.setdefault(key, offset)
            OffsetCheckpointFile(data_dir / name).write(entries)

    def _checkpoint(self, name: str, value: Any) -> None:
        for data_dir in list(self.live_dirs):
            try:
                self._write_checkpoint(data_dir, name, value)
            except OSError as exc:
                self._mark_offline(data_dir, f"cannot write {name}: {exc}", exc)

    def _handle_io_error(self, log: Log, exc: OSError) -> None:
        if isinstance(exc, KafkaStorageIOError) and log.is_offline:
            return  # the log reported it already (its dir is offline)
        data_dir = self._log_dirs_of.get((log.topic, log.partition))
        if data_dir is not None:
            self._mark_offline(data_dir, f"I/O error on {log.name}: {exc}", exc)

    def check_dir_online(self, topic: str, partition: int) -> None:
        """Raise ``LogDirOfflineError`` (``PartitionOfflineError`` for a partition that could not be loaded)
        naming the dir, the file and why, unless ``topic-partition`` is served."""
        failed = self.offline_partitions.get((topic, partition))
        if failed is not None:
            raise failed.error()
        data_dir = self._log_dirs_of.get((topic, partition))
        if data_dir is None or data_dir in self.offline_dirs:
            raise LogDirOfflineError(f"the data dir of {topic}-{partition} is offline", topic=topic, partition=partition)

    # ------------------------------------------------------------------------------------------------------
    # Shutdown

    def close(self) -> None:
        """Clean shutdown: stop background work, close every log, write checkpoints and the clean-shutdown marker."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self.read_only:
                self._close_read_only()
                return
            if self.remote_tier is not None:
                self.remote_tier.stop_tasks()  # before the logs close: no copy or expiration runs on a closed log
            if self.cleaner is not None:
                self.cleaner.shutdown()  # a cleaning in flight stops before its swap
            self.scheduler.shutdown(run_pending=True)
            if self.remote_tier is not None and self._owns_remote_tier and hasattr(self.remote_tier, "close"):
                self.remote_tier.close()
            for log in self.all_logs():
                try:
                    log.close()
                except OSError as exc:
                    self._handle_io_error(log, exc)
            for log in list(self._offline_logs.values()):
                log.close_handlers()  # no flush, no checkpoint: the dir failed (handles may already be released)
            self.checkpoint_recovery_offsets()
            self.checkpoint_log_start_offsets()
            for data_dir in list(self.live_dirs):
                try:
                    CleanShutdownFile(data_dir / filenames.CLEAN_SHUTDOWN_FILENAME).write(self.broker_epoch)
                except OSError as exc:
                    self._mark_offline(data_dir, f"cannot write the clean shutdown marker: {exc}", exc)
            for fd in self._dir_locks.values():
                os.close(fd)
            self._dir_locks.clear()

    def _close_read_only(self) -> None:
        from local.read_only import remove_scratch_root

        if self.remote_tier is not None and self._owns_remote_tier and hasattr(self.remote_tier, "close"):
            self.remote_tier.close()
        with self._offline_lock:
            logs = list(self._logs.values())
        for log in logs:
            log.close_handlers()
        if self._scratch_root is not None:
            remove_scratch_root(self._scratch_root)

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError("the log manager is closed")

    def _check_writable(self, what: str) -> None:
        if self.read_only:
            raise ReadOnlyLogError(f"cannot {what}: the data dirs are open read-only")

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


FDS_PER_NEW_PARTITION = 3  # its active segment's .log and two mapped indexes (CPython's mmap keeps a descriptor)
_FDS_SPARE = 64  # kept free for what else the process opens meanwhile (sockets, checkpoints, a store's connections)


def open_files_refusal(new_partitions: int) -> str | None:
    """Why ``new_partitions`` more partitions would not fit under this process's limit of open files (each holds
    :data:`FDS_PER_NEW_PARTITION` descriptors), or None: a creation that ran out part way failed with "Too many open
    files" and took the data dir offline. None too where the count of open descriptors is not known."""
    if new_partitions <= 0:
        return None
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        open_now = len(os.listdir("/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"))
    except (ImportError, OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY:
        return None
    needed = new_partitions * FDS_PER_NEW_PARTITION + _FDS_SPARE
    if open_now + needed <= soft:
        return None
    return (f"they would hold about {new_partitions * FDS_PER_NEW_PARTITION} more open files, and this process may "
            f"open {max(soft - open_now, 0)} more (its limit is {soft}, `ulimit -n`; {open_now} are open): raise the "
            "limit, or create fewer partitions")


def _validate_turning_off_remote_storage(log: Log, new_config: Any) -> None:
    """Kafka's ``LogConfig.validateTurningOffRemoteStorageWithDelete``: remote storage cannot be turned off on a
    tiered partition (or one with remote data) unless the operator says the remote data goes too. Whether data is
    there yet does not matter: a copy under way lands after the change (and a topic deleted then would strand it).

    Nor turned on again while the deletion that turning it off started is not finished: the copies left would be
    taken for the partition's remote data again, with holes where the deletion had been, and local retention would
    delete the only copies of those records."""
    if (
        new_config.remote_storage_enable
        and not log.config.remote_storage_enable
        and log.config.remote_log_delete_on_disable
        and log.has_remote_data
    ):
        raise ConfigError(
            f"remote storage of {log.name} was turned off with remote.log.delete.on.disable=true and its remote data "
            "is still being deleted (by the next remote pass of tiered run or tiered offload): turn it on again once "
            "that is done (tiered status shows no remote segment for it)"
        )
    if (
        (log.config.remote_storage_enable or log.has_remote_data)
        and not new_config.remote_storage_enable
        and not new_config.remote_log_delete_on_disable
    ):
        raise ConfigError(
            f"It is invalid to disable remote storage of {log.name} without deleting remote data. If you want to "
            "keep the remote data and turn to read only, please set `remote.storage.enable=true,"
            "remote.log.copy.disable=true`. If you want to disable remote storage and delete all remote data, please "
            "set `remote.storage.enable=false,remote.log.delete.on.disable=true`."
        )


def _remove_if_only_lock(data_dir: Path) -> None:
    try:
        if [entry.name for entry in data_dir.iterdir()] == [LOCK_FILENAME]:
            (data_dir / LOCK_FILENAME).unlink()
            data_dir.rmdir()
    except OSError as exc:  # already failing: the constructor's error is the one to report
        logger.debug("could not remove the unused data dir %s: %s", data_dir, exc)


def _build_remote_tier(
    config: LogConfig, factory: RemoteTierFactory | None, cache_root: Path | None
) -> RemoteTier:
    """The remote tier of a manager that was not handed one (see :mod:`local.remote` for where the factory comes
    from). A read-only manager passes its scratch dir: the tier's caches must not write into the data dirs."""
    from local.remote import find_remote_tier_factory

    build = factory if factory is not None else find_remote_tier_factory(config)
    return build(config) if cache_root is None else build(config, cache_root)


def _check_creation_args(topic: Any, overrides: Any, topic_id: Any) -> None:
    """TypeError naming the argument before anything is made: a str topic id failed only once the partition dir
    existed (left without its partition.metadata, given a random id at the next start), a list of overrides with an
    AttributeError."""
    if not isinstance(topic, str):
        raise TypeError(f"the topic must be a str, got {type(topic).__name__} {topic!r}")
    if overrides is not None and not isinstance(overrides, Mapping):
        raise TypeError(f"the overrides of {topic} must be a mapping of topic config keys to values (e.g. "
                        f"{{'segment.bytes': 1048576}}), got {type(overrides).__name__} {overrides!r}")
    if topic_id is not None and not isinstance(topic_id, uuid.UUID):
        raise TypeError(f"the topic id of {topic} must be a uuid.UUID (local.checkpoint.kafka_uuid_from_str reads "
                        f"Kafka's 22-character form), got {type(topic_id).__name__} {topic_id!r}")
