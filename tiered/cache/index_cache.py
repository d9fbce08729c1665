"""RemoteIndexCache: the offset, time and transaction indexes of remote segments, kept on local disk.

Kafka's ``RemoteIndexCache``, in our words. Files live in ``<log dir>/remote-log-index-cache/`` named as Kafka
names them, ``<startOffset>_<segmentId>.index|.timeindex|.txnindex`` (segment id in Kafka's base64url form).

- Bounded by bytes (``remote.log.index.file.cache.total.size.bytes``); the least recently used entry goes first.
- An entry is loaded with its offset index, which every read needs; its time and transaction indexes are
  fetched on first use (by ``offset_for_timestamp`` and READ_COMMITTED reads): a sequential consumer pays one
  request per segment for indexes, not three.
- One download per key at a time: concurrent readers of a missing entry wait for the one load.
- A download goes to ``*.tmp``, is sanity-checked, then atomically renamed. A missing transaction index (a
  segment without aborted transactions) is cached as an empty file.
- An evicted entry's files are renamed ``*.deleted`` at once (so a restart never reloads them) and closed and
  removed by a cleaner thread; a reader still holding the entry finishes its lookup first.
- A full file system (ENOSPC/EDQUOT) while downloading: the partial file is removed, the least recently used
  entries are evicted (half the cache's bytes, their files removed at once) and the bound lowered to what is left
  for this process (the file system holds no more), and the download is tried once more; when that fails too, the
  read fails with an ``OSError`` (ENOSPC) naming the cache dir and the segment. A WARNING says so at most once every
  ``FULL_LOG_SECONDS``, without a traceback.
- At start, leftover ``.tmp``/``.deleted`` files are removed and entries with an offset index reloaded after a
  sanity check (their other indexes are opened when first used).
- A corrupt file on disk is refetched; a corrupt file from the store raises ``CorruptIndexError``.
- With a ``verifier`` (a :class:`tiered.checksums.ChecksumVerifier`, which the RemoteLogManager installs), a
  downloaded index is checked against the crc32c checksums recorded when its segment was copied, before it takes
  its name: a mismatch (or a missing or short object) is fetched once more, then raises
  :class:`tiered.errors.RemoteChecksumError` naming the object and the byte range. A cached file reopened for a
  segment whose metadata is known is checked too, and refetched when it does not match. Segments copied before
  checksums existed are not checked.
- The offset index is opened with the legacy (8-byte) hint and its format auto-detected, so segments uploaded
  before and after the large-index feature was finalized coexist in one bucket.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import queue
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

from local.errors import CorruptIndexError
from local.index import OffsetIndex, TimeIndex, TransactionIndex
from local.index.entries import TxnIndexSearchResult
from tiered.errors import RemoteResourceNotFoundError
from tiered.layout import kafka_uuid
from tiered.rsm import IndexType, RemoteLogSegmentMetadata

if TYPE_CHECKING:
    from tiered.checksums import ChecksumProblem, ChecksumVerifier

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

DIR_NAME = "remote-log-index-cache"
TMP_SUFFIX = ".tmp"
DELETED_SUFFIX = ".deleted"
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
FULL_LOG_SECONDS = 60.0
ROOM_RETRY_SECONDS = 300.0  # a bound lowered on a full file system is lifted after so long (lowered again if still full)
_SUFFIXES = {IndexType.OFFSET: ".index", IndexType.TIMESTAMP: ".timeindex", IndexType.TRANSACTION: ".txnindex"}

# fetch_index(metadata, index_type) -> a readable binary stream; RemoteResourceNotFoundError when absent.
IndexFetcher = Callable[[RemoteLogSegmentMetadata, IndexType], IO[bytes]]


class Entry:
    """The indexes of one remote segment. The offset index is open from the start; ``time_index`` and
    ``txn_index`` are fetched (or opened from disk) on first access. ``lock`` guards lookups against eviction;
    ``load_lock`` serialises those loads."""

    def __init__(
        self,
        key: str,
        paths: dict[IndexType, Path],
        offset_index: OffsetIndex,
        sizes: dict[IndexType, int],
        loader: Callable[[Entry, IndexType], Any],
        metadata: RemoteLogSegmentMetadata | None = None,
    ) -> None:
        self.key, self.paths = key, paths
        self.offset_index = offset_index
        self.sizes = sizes  # the bytes of each of its files on disk that the cache counts
        self.metadata = metadata  # what the store knows the segment by (None for an entry restored at start)
        self.lock = threading.RLock()
        self.load_lock = threading.Lock()
        self.marked_for_cleanup = False
        self.cleaned = False
        self._loader = loader
        self._time_index: TimeIndex | None = None
        self._txn_index: TransactionIndex | None = None

    @property
    def size(self) -> int:
        return sum(self.sizes.values())

    @property
    def time_index(self) -> TimeIndex:
        index = self._time_index
        return index if index is not None else self._loader(self, IndexType.TIMESTAMP)

    @property
    def txn_index(self) -> TransactionIndex:
        index = self._txn_index
        return index if index is not None else self._loader(self, IndexType.TRANSACTION)

    def loaded(self, index_type: IndexType) -> Any:
        """The index of that type if it is open, else None."""
        if index_type is IndexType.OFFSET:
            return self.offset_index
        return self._time_index if index_type is IndexType.TIMESTAMP else self._txn_index

    def set_loaded(self, index_type: IndexType, index: Any) -> None:
        if index_type is IndexType.TIMESTAMP:
            self._time_index = index
        elif index_type is IndexType.TRANSACTION:
            self._txn_index = index

    def lookup_offset(self, offset: int) -> int:
        with self.lock:
            self.check()
            return self.offset_index.lookup(offset).position

    def lookup_timestamp(self, timestamp: int, starting_offset: int) -> int:
        time_index = self.time_index
        with self.lock:
            self.check()
            found = time_index.lookup(timestamp)
            return self.offset_index.lookup(max(found.offset, starting_offset)).position

    def lookup_timestamp_offset(self, timestamp: int) -> int:
        """The offset of the time index's entry for ``timestamp`` (the segment's base offset below its first)."""
        time_index = self.time_index
        with self.lock:
            self.check()
            return time_index.lookup(timestamp).offset

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        txn_index = self.txn_index
        with self.lock:
            self.check()
            return txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    def check(self) -> None:
        """Raise when the entry was evicted (its files are going): the caller loads the segment's entry again."""
        if self.marked_for_cleanup:
            raise _EntryEvicted(self.key)

    def mark_for_cleanup(self) -> None:
        """Rename every file of the entry ``*.deleted`` (so a restart never reloads them); lookups now fail."""
        with self.lock:
            if self.marked_for_cleanup:
                return
            self.marked_for_cleanup = True
            for index_type, path in self.paths.items():
                index = self.loaded(index_type)
                if index is not None:
                    index.rename_to(Path(str(index.path) + DELETED_SUFFIX))
                elif path.exists():  # restored at start and not opened since
                    os.replace(path, Path(str(path) + DELETED_SUFFIX))

    def cleanup(self) -> None:
        with self.lock:
            if self.cleaned:
                return
            self.cleaned = True
            for index_type, path in self.paths.items():
                index = self.loaded(index_type)
                if index is not None:
                    try:
                        index.close()
                    except Exception:
                        logger.debug("closing %s failed", index.path, exc_info=True)
                    index.delete_if_exists()
                Path(str(path) + DELETED_SUFFIX).unlink(missing_ok=True)

    def close(self) -> None:
        for index_type in _SUFFIXES:
            index = self.loaded(index_type)
            if index is not None:
                index.close()


class _EntryEvicted(Exception):
    pass


class RemoteIndexCache:
    """See the module docstring. ``fetcher`` is usually ``rsm.fetch_index``."""

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        fetcher: IndexFetcher,
        *,
        max_size_bytes: int = 1024 * 1024 * 1024,
        registry: Any = None,
        verifier: ChecksumVerifier | None = None,
    ) -> None:
        if max_size_bytes < 0:
            raise ValueError(f"remote.log.index.file.cache.total.size.bytes must be >= 0, got {max_size_bytes}")
        self.cache_dir = Path(log_dir) / DIR_NAME
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self._fetch = fetcher
        self.verifier: ChecksumVerifier | None = verifier
        self.max_size_bytes = max_size_bytes
        # Lowered when the file system filled up before the bound (None: not so far), for this process.
        self._room_bytes: int | None = None
        self._room_lowered_at = 0.0  # when (monotonic): the bound is lifted ROOM_RETRY_SECONDS later
        self._full_logged = -FULL_LOG_SECONDS
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._loading: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._size = 0
        self.hits = self.misses = self.evictions = self.loads = 0
        self._cleanup_queue: queue.Queue[Entry | None] = queue.Queue()
        # Started at the first entry to clean up: a short-lived cache (a Spark planner's, a CLI command's) that
        # never evicts starts no thread, and its close() waits for none.
        self._cleaner: threading.Thread | None = None
        self._closed = False
        self._metrics = _Metrics(registry)
        self._init_from_disk()

    # ------------------------------------------------------------------------------------------------------

    @property
    def size_bytes(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def lookup_offset(self, metadata: RemoteLogSegmentMetadata, offset: int) -> int:
        """The position in the remote ``.log`` to read from for ``offset``."""
        return self._with_entry(metadata, lambda e: e.lookup_offset(offset))

    def lookup_timestamp(self, metadata: RemoteLogSegmentMetadata, timestamp: int, starting_offset: int) -> int:
        """The position in the remote ``.log`` to scan from for the first batch with a timestamp >= ``timestamp``
        at or after ``starting_offset`` (the segment's time index is fetched on first use)."""
        return self._with_entry(metadata, lambda e: e.lookup_timestamp(timestamp, starting_offset))

    def lookup_timestamp_offset(self, metadata: RemoteLogSegmentMetadata, timestamp: int) -> int:
        """The offset of the remote time index's entry for ``timestamp``: no record before that entry's batch has a
        timestamp >= ``timestamp``, so a search by timestamp starts there (Kafka's ``lookupTimestamp``)."""
        return self._with_entry(metadata, lambda e: e.lookup_timestamp_offset(timestamp))

    def collect_aborted_txns(
        self, metadata: RemoteLogSegmentMetadata, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """The aborted transactions of the segment overlapping ``[fetch_offset, upper_bound_offset)`` (the
        segment's transaction index is fetched on first use)."""

        return self._with_entry(metadata, lambda e: e.collect_aborted_txns(fetch_offset, upper_bound_offset))

    def get_index_entry(self, metadata: RemoteLogSegmentMetadata) -> Entry:
        key = _entry_key(metadata.remote_log_segment_id.id)
        while True:
            restored: Entry | None = None
            event: threading.Event | None = None
            owner = False
            with self._lock:
                entry = self._entries.get(key)
                if entry is not None and entry.metadata is not None:
                    self._entries.move_to_end(key)
                    self.hits += 1
                    self._metrics.hit()
                    return entry
                if entry is not None:
                    restored = entry  # restored at start: its offset index was only sanity-checked
                else:
                    event = self._loading.get(key)
                    if event is None:
                        event = threading.Event()
                        self._loading[key] = event
                        owner = True
            if restored is not None:
                # Now that the segment is known, check the restored offset index against the segment's checksums
                # (outside the lock: it reads the file) before anyone uses it; fetch it again when it does not match.
                try:
                    problem = self._check(metadata, IndexType.OFFSET, restored.paths[IndexType.OFFSET])
                except OSError:
                    continue  # evicted meanwhile (its files renamed): load it afresh
                if problem is not None:
                    logger.warning("cached remote index %s does not match its checksums (%s): fetching it again",
                                   restored.paths[IndexType.OFFSET], problem)
                    self.remove(key)
                else:
                    with self._lock:
                        if restored.metadata is None:
                            restored.metadata = metadata  # now it can fetch its other indexes
                continue
            assert event is not None
            if not owner:
                event.wait()
                continue  # the owner's load either succeeded (a hit now) or failed (we try ourselves)
            try:
                self.misses += 1
                self._metrics.miss()
                entry = self._create_entry(key, metadata)
                with self._lock:
                    self._entries[key] = entry
                    self._size += entry.size
                    self.loads += 1
                    self._evict_over_limit(keep=key)
                return entry
            finally:
                with self._lock:
                    self._loading.pop(key, None)
                event.set()

    def remove(self, segment_id: Any) -> None:
        """Drop a segment's entry (its remote copy was deleted)."""
        key = segment_id if isinstance(segment_id, str) else kafka_uuid(segment_id)
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is not None:
                self._size -= entry.size
                entry.mark_for_cleanup()  # under the lock: see _make_room
        if entry is not None:
            self._clean_up_later(entry)

    def clear(self) -> None:
        """Drop every entry (their files go with the cleaner, as evicted ones do)."""
        with self._lock:
            keys = list(self._entries)
        for key in keys:
            self.remove(key)

    def close(self) -> None:
        if self._closed:
            return
        with self._lock:
            self._closed = True
            cleaner = self._cleaner
        if cleaner is not None:
            self._cleanup_queue.put(None)
            cleaner.join(timeout=10)
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        for entry in entries:
            entry.close()

    def __enter__(self) -> RemoteIndexCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------------------

    def _with_entry(self, metadata: RemoteLogSegmentMetadata, fn: Callable[[Entry], _T]) -> _T:
        for _ in range(3):
            entry = self.get_index_entry(metadata)
            try:
                return fn(entry)
            except _EntryEvicted:
                continue  # evicted between get and use: load it again
        return fn(self.get_index_entry(metadata))

    def _evict_over_limit(self, keep: str) -> None:
        if self._room_bytes is not None and time.monotonic() - self._room_lowered_at >= ROOM_RETRY_SECONDS:
            self._room_bytes = None  # space may have come back: the next ENOSPC lowers it again
        limit = self.max_size_bytes if self._room_bytes is None else min(self.max_size_bytes, self._room_bytes)
        while self._size > limit and len(self._entries) > 1:
            key, entry = next(iter(self._entries.items()))
            if key == keep:
                break
            del self._entries[key]
            self._size -= entry.size
            self.evictions += 1
            self._metrics.evicted()
            entry.mark_for_cleanup()
            self._clean_up_later(entry, locked=True)
        self._metrics.size(self._size, len(self._entries))

    def _clean_up_later(self, entry: Entry, locked: bool = False) -> None:
        """Hand ``entry`` (marked for cleanup) to the cleaner thread, which the first one starts; after
        :meth:`close`, clean it up here and now. ``locked``: the caller holds ``self._lock``."""
        if locked:
            queued = self._ensure_cleaner()
        else:
            with self._lock:
                queued = self._ensure_cleaner()
        if queued:
            self._cleanup_queue.put(entry)
        else:
            self._clean(entry)

    def _ensure_cleaner(self) -> bool:
        """Start the cleaner thread unless it runs (called holding ``self._lock``); False once closed."""
        if self._closed:
            return False
        if self._cleaner is None:
            self._cleaner = threading.Thread(target=self._clean_loop, name="remote-log-index-cleaner", daemon=True)
            self._cleaner.start()
        return True

    def _clean_loop(self) -> None:
        while True:
            entry = self._cleanup_queue.get()
            if entry is None:
                return
            self._clean(entry)

    @staticmethod
    def _clean(entry: Entry) -> None:
        try:
            entry.cleanup()
        except Exception:
            logger.exception("failed to clean up remote index entry %s", entry.key)

    def _paths(self, prefix: str) -> dict[IndexType, Path]:
        return {t: self.cache_dir / f"{prefix}{s}" for t, s in _SUFFIXES.items()}

    def _create_entry(self, key: str, metadata: RemoteLogSegmentMetadata) -> Entry:
        prefix = f"{metadata.start_offset}_{key}"
        paths = self._paths(prefix)
        base = metadata.start_offset
        offset_index = self._load_index(
            paths[IndexType.OFFSET], metadata, IndexType.OFFSET, lambda p: _open_offset(p, base), keep=key
        )
        sizes = {IndexType.OFFSET: paths[IndexType.OFFSET].stat().st_size}
        return Entry(key, paths, offset_index, sizes, self._load_secondary, metadata)

    def _load_secondary(self, entry: Entry, index_type: IndexType) -> Any:
        """``entry``'s time or transaction index, opened from disk or fetched from the store, on first use."""
        with entry.load_lock:
            index = entry.loaded(index_type)
            if index is not None:
                return index
            entry.check()
            metadata = entry.metadata
            if metadata is None:
                raise RuntimeError(f"remote index entry {entry.key} has no segment metadata: get it with get_index_entry")
            base = metadata.start_offset
            opener: Callable[[Path, int], Any] = _open_time if index_type is IndexType.TIMESTAMP else _open_txn
            index = self._load_index(
                entry.paths[index_type], metadata, index_type, lambda p: opener(p, base), keep=entry.key
            )
            size = index.path.stat().st_size
            with entry.lock:
                if entry.marked_for_cleanup:  # evicted meanwhile: this file is nobody's
                    index.close()
                    index.delete_if_exists()
                    raise _EntryEvicted(entry.key)
                entry.set_loaded(index_type, index)
                # (a restored entry counted the file it found on disk already; it may have been fetched again)
                grown = size - entry.sizes.get(index_type, 0)
                entry.sizes[index_type] = size
        with self._lock:
            if self._entries.get(entry.key) is entry:
                self._size += grown
                self._evict_over_limit(keep=entry.key)
        return index

    def _load_index(
        self,
        path: Path,
        metadata: RemoteLogSegmentMetadata,
        index_type: IndexType,
        open_index: Callable[[Path], Any],
        keep: str = "",
    ) -> Any:
        """The index at ``path``: the cached file, checked, or downloaded (``keep``: the key of the entry it is
        for, which making room on a full file system never evicts)."""
        if path.exists():
            problem = self._check(metadata, index_type, path)
            if problem is not None:
                logger.warning("cached remote index %s does not match its checksums (%s): fetching it again", path, problem)
                path.unlink(missing_ok=True)
            else:
                try:
                    return open_index(path)
                except CorruptIndexError as exc:
                    logger.warning("corrupt cached remote index %s (%s): fetching it again", path, exc)
                    path.unlink(missing_ok=True)
        tmp = path.with_name(path.name + TMP_SUFFIX)
        for attempt in range(2):
            self._download_making_room(tmp, metadata, index_type, keep)
            problem = self._check(metadata, index_type, tmp)
            if problem is None:
                break
            tmp.unlink(missing_ok=True)
            assert self.verifier is not None  # (only a verifier finds a problem)
            self.verifier.note_mismatch(problem, attempt)
            if attempt:
                raise problem.error()
        try:
            index = open_index(tmp)  # sanity-checked before it takes the real name
        except CorruptIndexError as exc:
            tmp.unlink(missing_ok=True)
            raise CorruptIndexError(
                f"the {index_type.name} index of remote segment {metadata.remote_log_segment_id} fetched from the "
                f"store is corrupt: {exc}",
                segment_id=str(metadata.remote_log_segment_id),
            ) from exc
        index.rename_to(path)  # the index opened for the check is the one kept: the file is read once
        return index

    def _check(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType, path: Path) -> ChecksumProblem | None:
        verifier = self.verifier
        return None if verifier is None else verifier.check_file(metadata, index_type, path)

    def _download_making_room(self, tmp: Path, metadata: RemoteLogSegmentMetadata, index_type: IndexType, keep: str) -> None:
        """:meth:`_download`; on a full file system, evict and try once more (module docstring). A failed download
        leaves no file."""
        try:
            self._download(tmp, metadata, index_type)
            return
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if not (isinstance(exc, OSError) and exc.errno in FULL_ERRNOS):
                raise
        evicted, freed, limit = self._make_room(keep)
        try:
            self._download(tmp, metadata, index_type)
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if not (isinstance(exc, OSError) and exc.errno in FULL_ERRNOS):
                raise
            message = (f"remote index cache dir {self.cache_dir} is full ({os.strerror(exc.errno)}) even after "
                       f"evicting {evicted} entr{'y' if evicted == 1 else 'ies'} ({freed} bytes): cannot cache the "
                       f"{index_type.name} index of remote segment {metadata.remote_log_segment_id}")
            self._note_full(message)
            raise OSError(exc.errno, message, str(tmp)) from None
        self._note_full(f"remote index cache dir {self.cache_dir} is full: evicted {evicted} least recently used "
                        f"entr{'y' if evicted == 1 else 'ies'} ({freed} bytes) and lowered its bound to {limit} bytes "
                        f"for this process")

    def _make_room(self, keep: str) -> tuple[int, int, int]:
        """Remove the files of entries evicted before that the cleaner has not removed yet, and evict least recently
        used entries (never ``keep``) for half the cache's bytes (one entry at least), their files removed now (not by the cleaner: the retry needs the room), and lower the bound to what is left. How
        many entries, their bytes, the new bound."""
        while True:  # the entries evicted before and not cleaned up yet: their files go now
            try:
                pending = self._cleanup_queue.get_nowait()
            except queue.Empty:
                break
            if pending is None:  # (closing: the cleaner's stop goes back)
                self._cleanup_queue.put(None)
                break
            self._clean(pending)
        evicted: list[Entry] = []
        with self._lock:
            target = self._size // 2
            for key in list(self._entries):
                if self._size <= target and evicted:
                    break
                if key == keep:
                    continue
                entry = self._entries.pop(key)
                self._size -= entry.size
                self.evictions += 1
                self._metrics.evicted()
                # Renamed *.deleted before the lock is let go (as _evict_over_limit does): a reader missing the
                # entry from now on must not find its file under its name and open it as the new entry's index.
                entry.mark_for_cleanup()
                evicted.append(entry)
            self._room_bytes = self._size
            self._room_lowered_at = time.monotonic()
            self._metrics.size(self._size, len(self._entries))
        freed = 0
        for entry in evicted:
            freed += entry.size
            self._clean(entry)
        return len(evicted), freed, self._size

    def _note_full(self, message: str) -> None:
        now = time.monotonic()
        if now - self._full_logged >= FULL_LOG_SECONDS:
            self._full_logged = now
            logger.warning("%s", message)

    def _download(self, tmp: Path, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> None:
        try:
            stream = self._fetch(metadata, index_type)
        except RemoteResourceNotFoundError:
            if index_type is not IndexType.TRANSACTION:
                raise
            stream = None  # no aborted transactions in this segment: cache an empty file
        with open(tmp, "wb") as out:
            if stream is not None:
                with stream:
                    shutil.copyfileobj(stream, out, 1024 * 1024)
            if index_type is IndexType.TRANSACTION and out.tell() > 0:
                # Only a transaction index is made durable before it takes its name: one cut short by a power
                # loss would hide aborted transactions from READ_COMMITTED reads. An offset or time index cut
                # short fails its sanity check or sends reads to an earlier position (the scan from there is
                # right, only longer), so, as in Kafka, they are not synced: each sync commits the file
                # system's journal, which stalls the segment cache's writes behind it.
                out.flush()
                os.fsync(out.fileno())

    def _init_from_disk(self) -> None:
        """Sweep leftovers of a crash and reload complete entries that pass a sanity check."""
        prefixes: dict[str, set[str]] = {}
        for path in self.cache_dir.iterdir():
            name = path.name
            if name.endswith(TMP_SUFFIX) or name.endswith(DELETED_SUFFIX):
                path.unlink(missing_ok=True)
                continue
            for suffix in _SUFFIXES.values():
                if name.endswith(suffix):
                    prefixes.setdefault(name[: -len(suffix)], set()).add(suffix)
        for prefix, found in sorted(prefixes.items()):
            start, _, key = prefix.partition("_")
            paths = self._paths(prefix)
            if _SUFFIXES[IndexType.OFFSET] not in found or not start.isdigit():
                for p in paths.values():
                    p.unlink(missing_ok=True)
                continue
            try:
                offset_index = _open_offset(paths[IndexType.OFFSET], int(start))
            except (CorruptIndexError, OSError) as exc:
                logger.warning("dropping cached remote indexes %s at start: %s", prefix, exc)
                for p in paths.values():
                    p.unlink(missing_ok=True)
                continue
            sizes = {t: p.stat().st_size for t, p in paths.items() if p.exists()}
            entry = Entry(key, paths, offset_index, sizes, self._load_secondary)
            self._entries[key] = entry
            self._size += entry.size
        self._evict_over_limit(keep="")


def _open_offset(path: Path, base: int) -> OffsetIndex:
    index = OffsetIndex(path, base, writable=False, use_large_format=False)
    index.sanity_check()
    return index


def _open_time(path: Path, base: int) -> TimeIndex:
    index = TimeIndex(path, base, writable=False)
    index.sanity_check()
    return index


def _open_txn(path: Path, base: int) -> TransactionIndex:
    index = TransactionIndex(base, path)
    index.sanity_check()
    return index


class _Metrics:
    """Hit/miss/eviction counters and size gauges, registered only when a registry is given."""

    def __init__(self, registry: Any) -> None:
        self._enabled = registry is not None
        if not self._enabled:
            return
        from prometheus_client import Counter, Gauge

        self._hits = Counter("RemoteLogIndexCacheHits", "RemoteIndexCache hits", registry=registry)
        self._misses = Counter("RemoteLogIndexCacheMisses", "RemoteIndexCache misses", registry=registry)
        self._evictions = Counter("RemoteLogIndexCacheEvictions", "RemoteIndexCache evictions", registry=registry)
        self._size = Gauge("RemoteLogIndexCacheSizeBytes", "Bytes held by the RemoteIndexCache", registry=registry)
        self._entries = Gauge("RemoteLogIndexCacheEntries", "Entries in the RemoteIndexCache", registry=registry)

    def hit(self) -> None:
        if self._enabled:
            self._hits.inc()

    def miss(self) -> None:
        if self._enabled:
            self._misses.inc()

    def evicted(self) -> None:
        if self._enabled:
            self._evictions.inc()

    def size(self, size: int, entries: int) -> None:
        if self._enabled:
            self._size.set(size)
            self._entries.set(entries)


@functools.lru_cache(maxsize=4096)
def _entry_key(segment_uuid: Any) -> str:
    """The cache key of a segment: its id in Kafka's base64 form (memoized: every read of a segment asks)."""
    return kafka_uuid(segment_uuid)
