"""A chunk stream: one open fetch of an object, feeding a sequential reader's read-ahead chunk by chunk.

Each ranged GET pays a request's latency and the server's lookup; a stream pays them once per object. The stream
reads the object from its first chunk to the end, keeping its window (up to the chunk its reader's read-ahead
asked for, :meth:`ChunkStream.advance`) claimed: readers wait on the claimed chunks' futures as on any load in
flight. Chunks already held or being loaded by someone else are read past; before the fetch is open they are
skipped, and chunks on disk come from disk. Claims left when the fetch fails (or the stream ends with some) are
fetched one by one with the ranged fetcher, whose failure fails the readers waiting on them; only closing the cache
cancels them. A stream runs on one of the cache's :class:`DaemonThreads`, which it gives back at the object's end,
when stopped, or once its reader has been gone for ``STREAM_IDLE_SECONDS``.

The stream talks to its cache through :class:`StreamPort` only. Lock order (checked, :mod:`tiered.cache.locks`):
the stream's condition, then the cache's state lock.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, wait
from typing import IO, Protocol

from tiered.cache.chunk_memory import Chunk
from tiered.cache.locks import STREAM, RankedLock

logger = logging.getLogger(__name__)

Fetcher = Callable[[int, int], bytes]
# (start, end_inclusive or None for the object's end) -> a binary stream of those bytes, read as they arrive
Opener = Callable[[int, "int | None"], IO[bytes]]

STREAM_IDLE_SECONDS = 5.0  # a stream whose reader stopped this long closes its fetch
READ_PIECE = 1024 * 1024  # a stream reads its chunk in pieces this size (freed at once, so reused, not faulted)


class StreamPort(Protocol):
    """What a stream needs of its cache."""

    chunk_size: int

    @property
    def closed(self) -> bool: ...

    def known_size(self, obj: str) -> int | None:
        """The object's size, when a caller gave it or a short chunk told it."""
        ...

    def learn_size(self, obj: str, size: int) -> None: ...

    def claim(self, obj: str, indexes: Iterable[int]) -> dict[int, Future[Chunk]]:
        """Loads of the chunks among ``indexes`` nobody holds or loads, now in flight for the caller to resolve."""
        ...

    def land(self, obj: str, index: int, fut: Future[Chunk]) -> None:
        """A claimed load is no longer in flight (the caller resolves its future next)."""
        ...

    def from_disk(self, obj: str, index: int) -> Chunk | None:
        """The chunk from the disk tier (now held in memory too), or None."""
        ...

    def fetched(self, obj: str, index: int, data: Chunk) -> None:
        """A chunk read off the store: held, and written to disk off the reader's path."""
        ...

    def fetch_chunk(self, index: int, size: int | None, fetcher: Fetcher) -> bytes:
        """Chunk ``index`` by a ranged fetch."""
        ...

    def buffer(self) -> bytearray:
        """A chunk-sized buffer to read into (a recycled one when one is free)."""
        ...

    def stream_opened(self) -> None: ...

    def stream_ended(self, stream: ChunkStream) -> None: ...


class ChunkStream:
    """See the module docstring."""

    def __init__(self, port: StreamPort, obj: str, index: int, size: int | None, fetcher: Fetcher, opener: Opener,
                 threads: DaemonThreads) -> None:
        self.port, self.obj, self.size = port, obj, size
        self.fetcher, self.opener = fetcher, opener
        self.next = index  # the next chunk to take off the stream
        self._upto = index - 1  # the last chunk the reader's read-ahead asked for
        self._claimed: dict[int, Future[Chunk]] = {}
        self._wake = threading.Condition(RankedLock("chunk stream", STREAM))  # type: ignore[arg-type]
        self._stopped = False
        self._threads = threads
        self._done: Future[None] | None = None
        self.alive = True

    def start(self) -> None:
        self._done = self._threads.submit(self.run)

    def join(self) -> None:
        if self._done is not None:
            wait([self._done])

    @property
    def done(self) -> Future[None] | None:
        """Resolved when the stream has ended (None before :meth:`start`)."""
        return self._done

    def advance(self, upto: int) -> None:
        """The reader's read-ahead reaches chunk ``upto``: claimed at once, so readers wait for this stream, not for
        a second fetch."""
        with self._wake:
            self._upto = max(self._upto, upto)
            self._claim(self._limit())
            self._wake.notify()

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()

    def _size(self) -> int | None:
        """The object's size, when the caller gave it or a short chunk told it."""
        return self.size if self.size is not None else self.port.known_size(self.obj)

    def _limit(self) -> int:
        size = self._size()
        return self._upto if size is None else min(self._upto, (size - 1) // self.port.chunk_size)

    def _past_the_end(self) -> bool:
        size = self._size()
        return size is not None and self.next * self.port.chunk_size >= size

    def _claim(self, upto: int) -> None:
        """Claim the chunks ``next..upto`` that nobody holds or loads (under the condition)."""
        wanted = [i for i in range(self.next, upto + 1) if i not in self._claimed]
        if wanted:
            self._claimed.update(self.port.claim(self.obj, wanted))

    def run(self) -> None:
        body: IO[bytes] | None = None
        port, cs = self.port, self.port.chunk_size
        try:
            while not self._past_the_end():
                with self._wake:
                    while not self._stopped and self.next > self._limit():
                        if not self._wake.wait(STREAM_IDLE_SECONDS) and self.next > self._limit():
                            return  # the reader went away
                    if self._stopped:
                        return
                    upto = self._limit()
                    self._claim(upto)
                while self.next <= upto:
                    i = self.next
                    with self._wake:
                        fut = self._claimed.get(i)
                    if body is None:
                        if fut is None:
                            self.next += 1  # held or loaded elsewhere, and nothing open to read past
                            continue
                        data = port.from_disk(self.obj, i)
                        if data is not None:
                            self._publish(i, data)
                            self.next += 1
                            continue
                        # To the object's end (a whole object is then a plain GET, which stores serve fastest).
                        body = self.opener(i * cs, None)
                        port.stream_opened()
                    buf = port.buffer()
                    n = read_into(body, buf)
                    chunk: Chunk = buf if n == cs else bytes(memoryview(buf)[:n])  # short: the object's last
                    del buf
                    if fut is not None:
                        port.fetched(self.obj, i, chunk)
                        self._publish(i, chunk)
                    del chunk  # nothing but the cache refers to the buffer now: it can be recycled
                    self.next += 1
                    if n < cs:  # the object ends in this chunk
                        port.learn_size(self.obj, i * cs + n)
                        return
        except Exception as exc:
            logger.debug("streaming read of %s failed at chunk %d: %s", self.obj, self.next, exc)
        finally:
            self.alive = False
            port.stream_ended(self)
            if body is not None:
                try:
                    body.close()
                except Exception:
                    logger.debug("closing the fetch of %s failed", self.obj, exc_info=True)
            self._settle_claims()

    def _release(self, i: int) -> Future[Chunk]:
        """Chunk ``i``'s claimed future, no longer claimed nor in flight (the caller resolves it)."""
        with self._wake:
            fut = self._claimed.pop(i)
        self.port.land(self.obj, i, fut)
        return fut

    def _publish(self, i: int, data: Chunk) -> None:
        self._release(i).set_result(data)

    def _settle_claims(self) -> None:
        """Claims the stream did not fill: fetched one by one (the fetch broke, or a reader asked as the stream
        was ending), or cancelled when the cache closes."""
        port = self.port
        while True:
            with self._wake:
                if not self._claimed:
                    return
                i = min(self._claimed)
            if port.closed:
                self._release(i).cancel()
                continue
            try:
                data = port.fetch_chunk(i, self._size(), self.fetcher)
                port.fetched(self.obj, i, data)
            except Exception as exc:
                self._release(i).set_exception(exc)
            else:
                self._publish(i, data)


class DaemonThreads:
    """A fixed set of daemon threads running submitted calls in turn, started on first use. Unlike a
    ThreadPoolExecutor's workers, which the interpreter joins at exit, a stream waiting out its idle timeout on
    one of them does not hold up the exit of a program that never closed its cache."""

    def __init__(self, count: int, name: str, on_exit: Callable[[], None] | None = None) -> None:
        self._count, self._name = count, name
        self._on_exit = on_exit  # what each thread runs last, on its way out (releases what the thread holds)
        self._tasks: queue.SimpleQueue[tuple[Callable[[], None], Future[None]] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], None]) -> Future[None]:
        done: Future[None] = Future()
        with self._lock:
            if not self._threads:
                for i in range(self._count):
                    thread = threading.Thread(target=self._work, name=f"{self._name}_{i}", daemon=True)
                    thread.start()
                    self._threads.append(thread)
            self._tasks.put((fn, done))
        return done

    def _work(self) -> None:
        try:
            self._run_tasks()
        finally:
            if self._on_exit is not None:
                self._on_exit()

    def _run_tasks(self) -> None:
        while (task := self._tasks.get()) is not None:
            fn, done = task
            try:
                fn()
            except BaseException as exc:  # a stream catches its own errors; this only keeps the thread alive
                done.set_exception(exc)
            else:
                done.set_result(None)

    def shutdown(self) -> None:
        with self._lock:
            threads, self._threads = self._threads, []
            for _ in threads:
                self._tasks.put(None)
        for thread in threads:
            thread.join()


def read_into(body: IO[bytes], buf: bytearray) -> int:
    """Fill ``buf`` from ``body`` (less only at its end), in pieces: each piece's memory is freed before the next
    is read, so the allocator hands the same pages back instead of faulting in new ones."""
    view, got, size = memoryview(buf), 0, len(buf)
    while got < size:
        piece = body.read(min(READ_PIECE, size - got))
        if not piece:
            break
        view[got : got + len(piece)] = piece
        got += len(piece)
    return got
