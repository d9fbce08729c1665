"""RemoteIndexCache: the offset, time and transaction indexes of remote segments, kept on local disk.

Kafka's ``RemoteIndexCache``, in our words. Files live in ``<log dir>/remote-log-index-cache/`` named as Kafka
names them, ``<startOffset>_<segmentId>.index|.timeindex|.txnindex`` (segment id in Kafka's base64url form).

- Bounded by bytes (``remote.log.index.file.cache.total.size.bytes``); the least recently used entry goes first.
- One download per key at a time: concurrent readers of a missing entry wait for the one load.
- A download goes to ``*.tmp``, is sanity-checked, then atomically renamed. A missing transaction index (a
  segment without aborted transactions) is cached as an empty file.
- An evicted entry's files are renamed ``*.deleted`` at once (so a restart never reloads them) and closed and
  removed by a cleaner thread; a reader still holding the entry finishes its lookup first.
- At start, leftover ``.tmp``/``.deleted`` files are removed and complete entries reloaded after a sanity check.
- A corrupt file on disk is refetched; a corrupt file from the store raises ``CorruptIndexError``.
- The offset index is opened with the legacy (8-byte) hint and its format auto-detected, so segments uploaded
  before and after the large-index feature was finalized coexist in one bucket.
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from local.errors import CorruptIndexError
from local.index import OffsetIndex, TimeIndex, TransactionIndex
from tiered.errors import RemoteResourceNotFoundError
from tiered.layout import kafka_uuid
from tiered.rsm import IndexType, RemoteLogSegmentMetadata

logger = logging.getLogger(__name__)

DIR_NAME = "remote-log-index-cache"
TMP_SUFFIX = ".tmp"
DELETED_SUFFIX = ".deleted"
_SUFFIXES = {IndexType.OFFSET: ".index", IndexType.TIMESTAMP: ".timeindex", IndexType.TRANSACTION: ".txnindex"}

# fetch_index(metadata, index_type) -> a readable binary stream; RemoteResourceNotFoundError when absent.
IndexFetcher = Callable[[RemoteLogSegmentMetadata, IndexType], IO[bytes]]


@dataclass
class Entry:
    """The three open indexes of one remote segment."""

    key: str
    prefix: str
    offset_index: OffsetIndex
    time_index: TimeIndex
    txn_index: TransactionIndex
    size: int
    lock: threading.RLock = field(default_factory=threading.RLock)
    marked_for_cleanup: bool = False
    cleaned: bool = False

    def lookup_offset(self, offset: int) -> int:
        with self.lock:
            self._check()
            return self.offset_index.lookup(offset).position

    def lookup_timestamp(self, timestamp: int, starting_offset: int) -> int:
        with self.lock:
            self._check()
            found = self.time_index.lookup(timestamp)
            return self.offset_index.lookup(max(found.offset, starting_offset)).position

    def _check(self) -> None:
        if self.marked_for_cleanup:
            raise _EntryEvicted(self.key)

    def mark_for_cleanup(self) -> None:
        with self.lock:
            if self.marked_for_cleanup:
                return
            self.marked_for_cleanup = True
            for index in (self.offset_index, self.time_index, self.txn_index):
                index.rename_to(Path(str(index.path) + DELETED_SUFFIX))

    def cleanup(self) -> None:
        with self.lock:
            if self.cleaned:
                return
            self.cleaned = True
            for index in (self.offset_index, self.time_index, self.txn_index):
                try:
                    index.close()
                except Exception:
                    logger.debug("closing %s failed", index.path, exc_info=True)
                index.delete_if_exists()


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
    ) -> None:
        if max_size_bytes < 0:
            raise ValueError(f"remote.log.index.file.cache.total.size.bytes must be >= 0, got {max_size_bytes}")
        self.cache_dir = Path(log_dir) / DIR_NAME
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self._fetch = fetcher
        self.max_size_bytes = max_size_bytes
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._loading: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._size = 0
        self.hits = self.misses = self.evictions = self.loads = 0
        self._cleanup_queue: queue.Queue[Entry | None] = queue.Queue()
        self._cleaner = threading.Thread(target=self._clean_loop, name="remote-log-index-cleaner", daemon=True)
        self._closed = False
        self._metrics = _Metrics(registry)
        # The three index downloads of an entry run at once, and read-ahead loads the next segment's entry.
        self._fetch_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="remote-index-fetch")
        # Its own thread: a read-ahead load waits on downloads in _fetch_pool, so it must not hold one of its workers.
        self._prefetch_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="remote-index-prefetch")
        self._init_from_disk()
        self._cleaner.start()

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
        return self._with_entry(metadata, lambda e: e.lookup_timestamp(timestamp, starting_offset))

    def prefetch(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Load ``metadata``'s entry in the background (a sequential reader is about to need it); a failure is
        only logged, and the reader's own load tries again."""
        if self._closed or _entry_key(metadata.remote_log_segment_id.id) in self._entries:
            return
        try:
            future = self._prefetch_pool.submit(self.get_index_entry, metadata)
        except RuntimeError:  # closed meanwhile
            return
        future.add_done_callback(_log_prefetch_failure)

    def get_index_entry(self, metadata: RemoteLogSegmentMetadata) -> Entry:
        key = _entry_key(metadata.remote_log_segment_id.id)
        while True:
            with self._lock:
                entry = self._entries.get(key)
                if entry is not None:
                    self._entries.move_to_end(key)
                    self.hits += 1
                    self._metrics.hit()
                    return entry
                event = self._loading.get(key)
                if event is None:
                    event = threading.Event()
                    self._loading[key] = event
                    owner = True
                else:
                    owner = False
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
        if entry is not None:
            entry.mark_for_cleanup()
            self._cleanup_queue.put(entry)

    def clear(self) -> None:
        """Drop every entry (their files go with the cleaner, as evicted ones do)."""
        with self._lock:
            keys = list(self._entries)
        for key in keys:
            self.remove(key)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._prefetch_pool.shutdown(wait=True, cancel_futures=True)
        self._fetch_pool.shutdown(wait=True, cancel_futures=True)
        self._cleanup_queue.put(None)
        self._cleaner.join(timeout=10)
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        for entry in entries:
            for index in (entry.offset_index, entry.time_index, entry.txn_index):
                index.close()

    def __enter__(self) -> RemoteIndexCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------------------

    def _with_entry(self, metadata: RemoteLogSegmentMetadata, fn: Callable[[Entry], int]) -> int:
        for _ in range(3):
            entry = self.get_index_entry(metadata)
            try:
                return fn(entry)
            except _EntryEvicted:
                continue  # evicted between get and use: load it again
        return fn(self.get_index_entry(metadata))

    def _evict_over_limit(self, keep: str) -> None:
        while self._size > self.max_size_bytes and len(self._entries) > 1:
            key, entry = next(iter(self._entries.items()))
            if key == keep:
                break
            del self._entries[key]
            self._size -= entry.size
            self.evictions += 1
            self._metrics.evicted()
            entry.mark_for_cleanup()
            self._cleanup_queue.put(entry)
        self._metrics.size(self._size, len(self._entries))

    def _clean_loop(self) -> None:
        while True:
            entry = self._cleanup_queue.get()
            if entry is None:
                return
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
        openers: dict[IndexType, Callable[[Path], Any]] = {
            IndexType.OFFSET: lambda p: _open_offset(p, base),
            IndexType.TIMESTAMP: lambda p: _open_time(p, base),
            IndexType.TRANSACTION: lambda p: _open_txn(p, base),
        }
        # The three downloads at once: one round trip instead of three. This thread loads the offset index.
        others: dict[IndexType, Future[Any]] = {}
        for index_type in (IndexType.TIMESTAMP, IndexType.TRANSACTION):
            try:
                others[index_type] = self._fetch_pool.submit(
                    self._load_index, paths[index_type], metadata, index_type, openers[index_type]
                )
            except RuntimeError:  # the pool is shut down (closing): load here
                done: Future[Any] = Future()
                done.set_result(self._load_index(paths[index_type], metadata, index_type, openers[index_type]))
                others[index_type] = done
        opened: list[Any] = []
        error: BaseException | None = None
        try:
            opened.append(self._load_index(paths[IndexType.OFFSET], metadata, IndexType.OFFSET, openers[IndexType.OFFSET]))
        except BaseException as exc:
            error = exc
        for future in others.values():
            try:
                opened.append(future.result())
            except BaseException as exc:
                error = error or exc
        if error is not None:
            for index in opened:
                index.close()
            raise error
        offset_index, time_index, txn_index = opened
        size = sum(p.stat().st_size for p in paths.values())
        return Entry(key, prefix, offset_index, time_index, txn_index, size)

    def _load_index(
        self, path: Path, metadata: RemoteLogSegmentMetadata, index_type: IndexType, open_index: Callable[[Path], Any]
    ) -> Any:
        if path.exists():
            try:
                return open_index(path)
            except CorruptIndexError as exc:
                logger.warning("corrupt cached remote index %s (%s): fetching it again", path, exc)
                path.unlink(missing_ok=True)
        tmp = path.with_name(path.name + TMP_SUFFIX)
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
            out.flush()
            os.fsync(out.fileno())
        try:
            open_index(tmp).close()  # sanity-check the download before it takes the real name
        except CorruptIndexError as exc:
            tmp.unlink(missing_ok=True)
            raise CorruptIndexError(
                f"the {index_type.name} index of remote segment {metadata.remote_log_segment_id} fetched from the "
                f"store is corrupt: {exc}",
                segment_id=str(metadata.remote_log_segment_id),
            ) from exc
        os.replace(tmp, path)
        return open_index(path)

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
            if len(found) != len(_SUFFIXES) or not start.isdigit():
                for p in paths.values():
                    p.unlink(missing_ok=True)
                continue
            base = int(start)
            try:
                entry = Entry(
                    key,
                    prefix,
                    _open_offset(paths[IndexType.OFFSET], base),
                    _open_time(paths[IndexType.TIMESTAMP], base),
                    _open_txn(paths[IndexType.TRANSACTION], base),
                    sum(p.stat().st_size for p in paths.values()),
                )
            except (CorruptIndexError, OSError) as exc:
                logger.warning("dropping cached remote indexes %s at start: %s", prefix, exc)
                for p in paths.values():
                    p.unlink(missing_ok=True)
                continue
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


def _log_prefetch_failure(future: Future[Any]) -> None:
    if not future.cancelled() and (exc := future.exception()) is not None:
        logger.debug("read-ahead of a remote index entry failed: %s", exc)
