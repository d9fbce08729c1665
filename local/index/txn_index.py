"""The transaction index ``.txnindex``: the aborted transactions whose markers a segment holds.

A plain append-only file (no mmap, no preallocation), created only when the first aborted transaction is
appended. Each entry is an :class:`~local.index.entries.AbortedTxn`, 34 bytes, big-endian::

    version i16 (0) | producerId i64 | firstOffset i64 | lastOffset i64 | lastStableOffset i64

Entries are in increasing ``lastOffset`` order. READ_COMMITTED fetches use it to list the aborted
transactions overlapping a fetch range. Not checksummed: a crash can leave a partial last entry, which
``sanity_check`` reports so that recovery rebuilds the index (a rebuild scans the log, and transactions can
span segments). Trailing bytes short of a full entry are never returned by reads.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Self

from local.errors import CorruptIndexError, InvalidOffsetError
from local.index.entries import ABORTED_TXN_SIZE, AbortedTxn, TxnIndexSearchResult

logger = logging.getLogger(__name__)


class TransactionIndex:
    """A segment's transaction index (Kafka's ``TransactionIndex``).

    ``start_offset`` is the segment's base offset. The file is opened on first use and reopened after
    :meth:`close` when used again (Kafka keeps the same behaviour), so a closed index still reads.
    """

    def __init__(self, start_offset: int, path: str | os.PathLike[str]) -> None:
        self._start_offset = start_offset
        self._path = path if isinstance(path, Path) else Path(path)
        self._lock = threading.RLock()
        self._fd: int | None = None
        # The last entry's last offset, read from the file at the first append (most segments never get one: a
        # partition's startup opens thousands of these and reading each file then would cost a syscall apiece).
        self._last_offset: int | None = None
        self._last_offset_known = False

    def _current_last_offset(self) -> int | None:
        """The last offset appended, read from the file the first time (caller holds the lock)."""
        if not self._last_offset_known:
            try:
                last = self._last_entry()
            except CorruptIndexError:
                logger.warning("Transaction index %s has an unreadable last entry", self._path, exc_info=True)
                last = None  # sanity_check reports it; recovery rebuilds the index
            self._last_offset = None if last is None else last.last_offset
            self._last_offset_known = True
        return self._last_offset

    # ---------------------------------------------------------------------------------------------------
    # file access

    @property
    def path(self) -> Path:
        return self._path

    @property
    def start_offset(self) -> int:
        return self._start_offset

    def _open(self) -> int:
        """The open descriptor, creating the file if needed (caller holds the lock)."""
        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def _read_all(self) -> bytes:
        """The whole file (small: one entry per aborted transaction), or b"" when it does not exist."""
        with self._lock:
            if self._fd is not None:
                size = os.fstat(self._fd).st_size
                chunks: list[bytes] = []
                read = 0
                while read < size:
                    chunk = os.pread(self._fd, size - read, read)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    read += len(chunk)
                return b"".join(chunks)
            try:
                return self._path.read_bytes()
            except FileNotFoundError:
                return b""

    def _entries(self) -> Iterator[tuple[int, AbortedTxn]]:
        """(position, entry) for every complete entry."""
        data = self._read_all()
        for position in range(0, len(data) - ABORTED_TXN_SIZE + 1, ABORTED_TXN_SIZE):
            try:
                txn = AbortedTxn.decode(data, position)
            except CorruptIndexError as e:
                raise CorruptIndexError(f"{e} in transaction index {self._path}", path=self._path, **e.context) from e
            yield position, txn

    def _last_entry(self) -> AbortedTxn | None:
        data = self._read_all()
        end = len(data) - len(data) % ABORTED_TXN_SIZE
        return AbortedTxn.decode(data, end - ABORTED_TXN_SIZE) if end else None

    # ---------------------------------------------------------------------------------------------------
    # writes

    def append(self, txn: AbortedTxn) -> None:
        """Append ``txn``; InvalidOffsetError unless its last offset is above the last one appended."""
        with self._lock:
            last_offset = self._current_last_offset()
            if last_offset is not None and txn.last_offset <= last_offset:
                raise InvalidOffsetError(
                    f"the last offset of appended transactions must increase: {txn.last_offset} is not above "
                    f"the current last offset {last_offset} of transaction index {self._path}",
                    offset=txn.last_offset,
                    last_offset=last_offset,
                    path=self._path,
                )
            data = txn.encode()
            written = os.write(self._open(), data)
            if written != len(data):  # a regular file takes a 34-byte write whole unless the disk is full
                raise OSError(f"short write of {written}/{len(data)} bytes to transaction index {self._path}")
            self._last_offset, self._last_offset_known = txn.last_offset, True

    def flush(self) -> None:
        """fsync the file if it was opened (never creates it)."""
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose last offset is >= ``offset``."""
        with self._lock:
            new_last: int | None = None
            for position, txn in self._entries():
                if txn.last_offset >= offset:
                    self._truncate_file(position)
                    self._last_offset, self._last_offset_known = new_last, True
                    return
                new_last = txn.last_offset

    def reset(self) -> None:
        """Remove every entry (an absent file stays absent)."""
        with self._lock:
            self._truncate_file(0)
            self._last_offset, self._last_offset_known = None, True

    def _truncate_file(self, size: int) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, size)
        else:
            try:
                os.truncate(self._path, size)
            except FileNotFoundError:
                pass

    # ---------------------------------------------------------------------------------------------------
    # reads

    def all_aborted_txns(self) -> list[AbortedTxn]:
        return [txn for _, txn in self._entries()]

    def is_empty(self) -> bool:
        """True when the file is absent or holds no complete entry."""
        return len(self._read_all()) < ABORTED_TXN_SIZE

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """The aborted transactions overlapping [``fetch_offset``, ``upper_bound_offset``).

        ``is_complete`` is True once an entry's last stable offset reaches ``upper_bound_offset``: no later
        segment can hold a transaction that overlaps the range, so the search stops here.
        """
        found: list[AbortedTxn] = []
        for _, txn in self._entries():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def sanity_check(self) -> None:
        """CorruptIndexError for a partial trailing entry or an entry whose last offset is below the start
        offset (the file belongs to another segment or is garbage)."""
        data = self._read_all()
        if len(data) % ABORTED_TXN_SIZE:
            raise CorruptIndexError(
                f"transaction index {self._path} is corrupt: {len(data)} bytes is not a multiple of "
                f"{ABORTED_TXN_SIZE}",
                path=self._path,
                length=len(data),
            )
        for position, txn in self._entries():
            if txn.last_offset < self._start_offset:
                raise CorruptIndexError(
                    f"last offset of aborted transaction {txn} at position {position} in transaction index "
                    f"{self._path} is below the start offset {self._start_offset}",
                    path=self._path,
                    position=position,
                    offset=txn.last_offset,
                    start_offset=self._start_offset,
                )

    # ---------------------------------------------------------------------------------------------------
    # life cycle

    def close(self) -> None:
        """Close the descriptor (a later use reopens it)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def delete_if_exists(self) -> bool:
        """Close and delete the file; False when it did not exist."""
        with self._lock:
            self.close()
            try:
                self._path.unlink()
            except FileNotFoundError:
                return False
            return True

    def rename_to(self, path: str | os.PathLike[str]) -> None:
        """Rename the file if it exists; the new path is adopted in any case."""
        with self._lock:
            target = Path(path)
            try:
                if self._path.exists():
                    os.replace(self._path, target)
            finally:
                self._path = target

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TransactionIndex(start_offset={self._start_offset}, path={str(self._path)!r})"
