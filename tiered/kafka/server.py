"""The Kafka listener: an asyncio server on its own thread, the engine's work on a thread pool.

Connections, framing and waiting live on the event loop; every request is parsed there (a header and a ``kio``
decode), then handled and its response encoded on a pool of ``num.io.threads`` threads, because the engine's calls
block (file and remote reads, fsyncs, locks). A handler may answer later instead of at once: a fetch that found
less than ``min_bytes`` waits on the loop for an append (or its ``max_wait_ms``) and runs again, and a JoinGroup or
SyncGroup hands back a future the group coordinator completes; neither holds a pool thread while it waits.

Requests of one connection are handled one at a time, in order, and answered in order (Kafka mutes a connection
while its request is in flight), so an idempotent producer's pipelined batches reach the log in the order sent.

Bounds, so that no client can exhaust the process or stall the others:

- a frame larger than ``socket.request.max.bytes`` (or of negative size) closes its connection before anything is
  read into memory; so does a request that cannot be parsed, an unknown API key or a version not served (Kafka's
  ``InvalidRequestException``), and a handler that fails unexpectedly (logged; the others go on);
- each connection holds at most two requests (one being handled, the next one read), and the bytes of all requests
  read and not yet answered stay under ``queued.max.request.bytes``: they are charged as they arrive (a size
  prefix alone holds nothing), and a connection whose next bytes would exceed it waits before reading more;
- answers written and not yet read by their clients count against ``queued.max.request.bytes`` too: a fetch asks
  for no more than what is left of it (one batch at least, as KIP-74 has it), so clients that send fetches and
  never read hold at most that much together, then a batch each;
- a connection idle for ``connections.max.idle.ms``, or that takes that long to send one request or to read
  one response, is closed (slow senders and readers alike);
- at most ``max.connections`` connections: more are closed as soon as they are accepted.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import errno
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from tiered.kafka.protocol import AnswerCharge, ProtocolError, Request, frame_size, parse_request

logger = logging.getLogger(__name__)

NO_RESPONSE = object()  # a request answered with nothing (Produce with acks=0)
_ACCEPT_ERROR_EVERY_S = 10.0  # a failure to accept (out of descriptors) is logged at most once per this
_BODY_CHUNK = 1 << 20  # a request body is read (and charged to queued.max.request.bytes) in pieces of at most this


#: The unsupported requests said (_say_unsupported) at most, each once.
_UNSUPPORTED_SAID_MAX = 256
_KIP_848 = ("; it is KIP-848's consumer group protocol, which this broker does not serve: set the consumer's "
            "group.protocol=classic")
_UNSUPPORTED_HINTS = {68: _KIP_848, 69: _KIP_848}


class WaitForAppend:
    """A handler's answer "not yet": call ``retry()`` (on the pool) once an append after ``version`` was notified
    or the monotonic ``deadline`` passed. ``retry`` answers like a handler; past its deadline it must answer."""

    __slots__ = ("deadline", "retry", "version")

    def __init__(self, version: int, deadline: float, retry: Callable[[], Any]) -> None:
        self.version = version
        self.deadline = deadline
        self.retry = retry


class _CloseConnection(Exception):
    pass


class _ByteBudget:
    """``queued.max.request.bytes``: bytes of requests read and not yet answered, over every connection."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.free = total
        self._changed = asyncio.Condition()

    async def acquire(self, size: int) -> int:
        size = min(size, self.total)  # a request larger than the whole budget waits for all of it
        async with self._changed:
            await self._changed.wait_for(lambda: self.free >= size)
            self.free -= size
        return size

    async def release(self, size: int) -> None:
        async with self._changed:
            self.free += size
            self._changed.notify_all()


class KafkaServer:
    """See the module docstring. ``handle(request)`` runs on the pool and returns the encoded response bytes, a
    :class:`WaitForAppend`, a ``concurrent.futures.Future`` of either, or ``NO_RESPONSE``."""

    def __init__(self, broker: Any, handle: Callable[[Request], Any], supported: dict[int, tuple[int, int]],
                 host: str, port: int) -> None:
        config = broker.config
        self.broker = broker
        self._handle = handle
        self._supported = supported
        self._unsupported_said: set[tuple[str, str | None, int, int]] = set()  # (host, client id, API key, version)
        self.max_request_bytes = config.socket_request_max_bytes
        self.idle_timeout_s = config.connections_max_idle_ms / 1000
        self.max_connections = config.max_connections
        self._queued_bytes = config.queued_max_request_bytes
        self._pool = concurrent.futures.ThreadPoolExecutor(config.num_io_threads, thread_name_prefix="kafka-io")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET  # ([::1]:9092: an IPv6 address)
        self._sock = socket.create_server((host, port), family=family, reuse_port=False)
        self._sock.setblocking(False)
        self.host, self.port = self._sock.getsockname()[:2]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="kafka-listener", daemon=True)
        self._started = threading.Event()
        self._connections: set[asyncio.Task[None]] = set()
        self._server: asyncio.AbstractServer | None = None
        self._budget: _ByteBudget | None = None
        self.connections_refused = 0
        self._accept_errors = 0
        self._accept_error_logged = -_ACCEPT_ERROR_EVERY_S

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    # Life cycle ---------------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.set_exception_handler(self._on_loop_error)
        self.broker.appends.bind(self._loop)
        self._budget = _ByteBudget(self._queued_bytes)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._accept, sock=self._sock, limit=64 * 1024))
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def _on_loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The loop's errors, but the accept loop's failures to accept (out of descriptors, EMFILE/ENFILE: asyncio
        logs a traceback per attempt, thousands a minute while idle clients hold every descriptor) are one line per
        :data:`_ACCEPT_ERROR_EVERY_S` seconds with how many there were."""
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
            now = time.monotonic()
            self._accept_errors += 1
            if now - self._accept_error_logged >= _ACCEPT_ERROR_EVERY_S:
                logger.error("cannot accept Kafka connections: %s (%d time(s) since the last report; raise ulimit -n "
                             "or set max.connections)", exc, self._accept_errors)
                self._accept_error_logged, self._accept_errors = now, 0
            return
        loop.default_exception_handler(context)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop accepting, close every connection, wait for the requests in the pool to end."""
        if not self._thread.is_alive():
            self._pool.shutdown(wait=True)
            return
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        with contextlib.suppress(concurrent.futures.TimeoutError):
            future.result(timeout_s)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)
        self._pool.shutdown(wait=True, cancel_futures=True)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # Connections --------------------------------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= self.max_connections:
            self.connections_refused += 1
            logger.warning("closing a Kafka connection from %s: max.connections (%d) reached",
                           writer.get_extra_info("peername"), self.max_connections)
            writer.close()
            return
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        try:
            await self._serve(reader, writer, peer)
        except _CloseConnection as exc:
            logger.info("closing the Kafka connection from %s: %s", peer, exc)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Any) -> None:
        frames: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=1)
        host = f"/{peer[0]}" if isinstance(peer, tuple) and peer else ""
        busy = [False]  # a request of this connection is being handled: the connection is not idle
        receiving = asyncio.ensure_future(self._receive(reader, frames, busy))
        try:
            while True:
                frame = await frames.get()
                if frame is None:
                    break
                busy[0] = True
                charge = AnswerCharge()  # what the handler charged to the unsent answers' bound: held until taken
                try:
                    try:
                        response = await self._process(frame, host, charge)
                    finally:
                        busy[0] = False
                        assert self._budget is not None
                        await self._budget.release(min(len(frame), self._budget.total))
                    if response is not None:
                        writer.write(response)
                        try:
                            await asyncio.wait_for(writer.drain(), self.idle_timeout_s)
                        except TimeoutError:
                            raise _CloseConnection(f"it did not read a response within connections.max.idle.ms "
                                                   f"({self.idle_timeout_s:g} s)") from None
                finally:
                    charge.release()
            reason = receiving.result() if receiving.done() else None
            if reason:
                raise _CloseConnection(reason)
        finally:
            receiving.cancel()
            with contextlib.suppress(BaseException):
                await receiving
            while not frames.empty():  # a frame read but never handled gives its bytes back
                frame = frames.get_nowait()
                if frame is not None and self._budget is not None:
                    await self._budget.release(min(len(frame), self._budget.total))

    async def _receive(self, reader: asyncio.StreamReader, frames: asyncio.Queue[bytes | None],
                       busy: list[bool]) -> str | None:
        """Read frames into ``frames`` until the client closes or breaks a bound; the reason to close, if any. The
        wait for the next request counts as idle only while no request of the connection is being handled (a
        JoinGroup may wait for a rebalance as long as its rebalance timeout)."""
        assert self._budget is not None
        try:
            while True:
                try:
                    prefix = await self._next_prefix(reader, busy)
                except asyncio.IncompleteReadError:
                    return None  # the client closed
                except TimeoutError:
                    return f"idle for connections.max.idle.ms ({self.idle_timeout_s:g} s)"
                size = frame_size(prefix)
                if size < 0 or size > self.max_request_bytes:
                    return (f"a request of {size} bytes is outside 0..socket.request.max.bytes "
                            f"({self.max_request_bytes})")
                try:
                    frame = await self._read_body(reader, size)
                except TimeoutError:
                    return (f"a request of {size} bytes did not arrive within connections.max.idle.ms "
                            f"({self.idle_timeout_s:g} s)")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return None
                await frames.put(frame)
        except ConnectionError:
            return None
        finally:
            with contextlib.suppress(asyncio.QueueFull):
                frames.put_nowait(None)

    async def _read_body(self, reader: asyncio.StreamReader, size: int) -> bytes:
        """The ``size`` bytes of a request body, within ``connections.max.idle.ms``, charged to the byte budget as
        they arrive (at most the whole budget for one frame): a size prefix alone holds none of it, or six idle
        connections announcing 100 MiB each would stop every other client's requests until they time out. The
        budget, given back when the request is answered, is the caller's; here only on a failure."""
        assert self._budget is not None
        budget = self._budget
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.idle_timeout_s
        parts: list[bytes] = []
        got = held = 0
        try:
            while got < size:
                data = await asyncio.wait_for(reader.read(min(_BODY_CHUNK, size - got)), deadline - loop.time())
                if not data:
                    raise asyncio.IncompleteReadError(b"", size - got)
                parts.append(data)
                got += len(data)
                charge = min(len(data), budget.total - held)
                if charge:
                    held += await asyncio.wait_for(budget.acquire(charge), max(deadline - loop.time(), 0))
        except BaseException:
            if held:
                await budget.release(held)
            raise
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def _next_prefix(self, reader: asyncio.StreamReader, busy: list[bool]) -> bytes:
        while True:
            try:
                # a cancelled readexactly consumes nothing: what arrived stays buffered for the next wait
                return await asyncio.wait_for(reader.readexactly(4), self.idle_timeout_s)
            except TimeoutError:
                if not busy[0]:
                    raise

    # Requests -----------------------------------------------------------------------------------------------------

    async def _process(self, frame: bytes, client_host: str, charge: AnswerCharge | None = None) -> bytes | None:
        try:
            request = dataclasses.replace(parse_request(frame, self._supported), client_host=client_host,
                                          charge=charge)
        except ProtocolError as exc:
            if exc.unsupported is not None:
                self._say_unsupported(client_host, *exc.unsupported)
            raise _CloseConnection(str(exc)) from None
        loop = asyncio.get_running_loop()
        result = await self._on_pool(loop, self._handle, request)
        while True:
            if isinstance(result, WaitForAppend):
                await self.broker.appends.wait_past(result.version, result.deadline - time.monotonic())
                result = await self._on_pool(loop, result.retry)
            elif isinstance(result, concurrent.futures.Future):
                result = await asyncio.wrap_future(result)
            else:
                break
        if result is NO_RESPONSE:
            return None
        assert isinstance(result, bytes)
        return result

    def _say_unsupported(self, host: str, api_key: int, version: int, client_id: str | None) -> None:
        """A WARNING, once per client and request kind, for a request of an API or version this broker does not
        serve: its connection is closed (as Kafka does), and clients show nothing of it (a KIP-848 consumer is never
        assigned; an old producer times out), so the broker's log is where a user finds why."""
        from kio.index import api_key_map

        said = (host, client_id, api_key, version)
        if said in self._unsupported_said or len(self._unsupported_said) >= _UNSUPPORTED_SAID_MAX:
            return
        self._unsupported_said.add(said)
        name = api_key_map.get(api_key)
        versions = self._supported.get(api_key)
        if versions is None:
            served = "an API this broker does not serve"
        else:
            served = f"a version this broker does not serve (it serves {versions[0]} to {versions[1]})"
        hint = _UNSUPPORTED_HINTS.get(api_key, "; the client may be older or newer than this broker serves, see "
                                      "docs/kafka-protocol.md")
        logger.warning("a Kafka client (client id %r, %s) sent %s (API key %d) v%d, %s: its connection is closed%s",
                       client_id, host, "".join(w.capitalize() for w in name.split("_")) if name else "a request",
                       api_key, version, served, hint)

    async def _on_pool(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return await loop.run_in_executor(self._pool, fn, *args)
        except ProtocolError as exc:
            raise _CloseConnection(str(exc)) from None
        except Exception as exc:
            logger.error("a Kafka request failed unexpectedly: %s", exc, exc_info=exc)
            raise _CloseConnection(f"the request failed: {type(exc).__name__}: {exc}") from None
