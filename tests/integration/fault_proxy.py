"""A small TCP fault proxy on 127.0.0.1 in front of a real S3 server: passes traffic through until a request
carrying a given pattern arrives, then the store is "down" in one of three ways until :meth:`FaultProxy.up`:

- ``reset``: that request's connection, and every one after, is reset (RST);
- ``cut``: that request reaches the server, its response is cut after a few bytes; every later connection is reset;
- ``hang``: that request, and every later one, is accepted and never answered (the client's timeouts fire).
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any

_CUT_AFTER = 12  # bytes of the response that get through in ``cut`` mode


def _reset(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def close_write(sock: socket.socket) -> None:
    """Pass the end of one direction on (a half-close), whatever state the socket is in."""
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


class FaultProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._down: str | None = None
        self._trigger: tuple[bytes, str] | None = None
        self._sockets: set[socket.socket] = set()
        self._hanging: list[socket.socket] = []
        self._closed = False
        self.triggered = threading.Event()
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept_loop)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def fail_on(self, pattern: bytes, mode: str) -> None:
        assert mode in ("reset", "cut", "hang")
        with self._lock:
            self._trigger = (pattern, mode)

    def up(self) -> None:
        """The outage ends: new connections pass again; the hanging ones are closed."""
        with self._lock:
            self._down = None
            hanging, self._hanging = self._hanging, []
        for sock in hanging:
            _reset(sock)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets = list(self._sockets) + self._hanging
        self._listener.close()
        for sock in sockets:
            try:
                sock.close()
            except OSError:
                pass
        for thread in self._threads:
            thread.join(timeout=5)

    # ------------------------------------------------------------------------------------------------------

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)

    def _hang(self, sock: socket.socket) -> None:
        with self._lock:
            self._hanging.append(sock)

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                down = self._down
            if down == "hang":
                self._hang(client)
                continue
            if down is not None:
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            self._track(client)
            self._track(upstream)
            state = {"cut": False}
            self._spawn(self._requests, client, upstream, state)
            self._spawn(self._responses, upstream, client, state)

    def _requests(self, client: socket.socket, upstream: socket.socket, state: dict[str, bool]) -> None:
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                with self._lock:
                    down, fire = self._down, None
                    trigger = self._trigger
                    if down is None and trigger is not None and trigger[0] in data:
                        self._trigger = None
                        fire = trigger[1]
                        self._down = "hang" if fire == "hang" else "reset"
                        self.triggered.set()
                if fire == "cut":
                    state["cut"] = True
                    upstream.sendall(data)
                    continue
                if fire == "hang" or down == "hang":
                    self._hang(client)
                    upstream.close()
                    return
                if fire == "reset" or down is not None:
                    _reset(client)
                    upstream.close()
                    return
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            close_write(upstream)

    def _responses(self, upstream: socket.socket, client: socket.socket, state: dict[str, bool]) -> None:
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                if state["cut"]:
                    client.sendall(data[:_CUT_AFTER])
                    _reset(client)
                    upstream.close()
                    return
                client.sendall(data)
        except OSError:
            pass
        finally:
            close_write(client)
