"""A tiny TCP proxy on 127.0.0.1 in front of an S3 server that resets (RST) the connection of each of the next
``count`` GETs whose request line holds ``pattern``, once ``after`` bytes of its response (headers included) got
through: a body broken off mid-stream, after botocore's retries ended with the headers. Everything else passes."""

from __future__ import annotations

import socket
import struct
import threading

from tests.integration.fault_proxy import close_write


def _reset(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RD)  # wakes the thread in recv on it: the close then sends the RST at once
    except OSError:
        pass
    sock.close()


class BodyResetProxy:
    def __init__(self, upstream: tuple[str, int], port: int = 0) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._pattern, self._left, self._after = b"", 0, 0
        self.gets: list[bytes] = []  # the request lines of the GETs seen (matching the pattern)
        self.resets = 0
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def reset_gets(self, pattern: bytes, count: int, after: int) -> None:
        with self._lock:
            self._pattern, self._left, self._after = pattern, count, after

    def __enter__(self) -> BodyResetProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept: the port is free once closed
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                return
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            cut: list[int | None] = [None]  # bytes of the current response still let through before the RST
            threading.Thread(target=self._requests, args=(client, upstream, cut), daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client, cut), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, cut: list[int | None]) -> None:
        try:
            while data := client.recv(65536):
                line = data.split(b"\r\n", 1)[0]
                if line.startswith(b"GET ") and self._pattern in line:
                    with self._lock:
                        self.gets.append(line)
                        if self._left:
                            self._left -= 1
                            cut[0] = self._after
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            close_write(upstream)

    def _responses(self, upstream: socket.socket, client: socket.socket, cut: list[int | None]) -> None:
        try:
            while data := upstream.recv(65536):
                left = cut[0]
                if left is not None and len(data) >= left:
                    client.sendall(data[:left])
                    with self._lock:
                        self.resets += 1
                    _reset(client)
                    upstream.close()
                    return
                if left is not None:
                    cut[0] = left - len(data)
                client.sendall(data)
        except OSError:
            pass
        finally:
            close_write(client)
