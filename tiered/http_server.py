"""The HTTP endpoint of ``tiered run``: Prometheus metrics, produce, consume and health, on one port.

``tiered run`` holds the data dirs' locks, so while it runs this endpoint is how data gets in and out:

- ``GET /metrics``: every metric the process registers, in Prometheus' text format (or OpenMetrics when the
  scraper asks for it): the log manager's (``local.metrics``: ``remaining_logs_to_load``,
  ``offline_log_directory_count``...) and the remote tier's (Kafka's ``RemoteCopyBytesPerSec``,
  ``RemoteCopyLagSegments``..., the index and segment caches').
- ``POST /topics/<topic>/partitions/<p>/records``: append records. The body (``Content-Length`` or
  ``Transfer-Encoding: chunked``, at most MAX_BODY_BYTES) is a JSON array of records, one record, or one record per
  line, in the JSON record format (:mod:`tiered.record_json`, docs/record-json.md) ``tiered produce --json`` reads.
  Optional query ``compression`` (none, gzip, snappy, lz4, zstd). The records are cut into batches of at most the
  topic's ``max.message.bytes`` (:mod:`tiered.batching`) and appended in one append (several, of whole batches,
  when they exceed ``segment.bytes``). Answers ``{"topic", "partition", "count", "batches", "first_offset",
  "last_offset"}``. A missing topic is created with one partition, 0 (with its stored config, as ``tiered produce``
  creates it); any other partition of a missing topic, or one an existing topic lacks, is 404 naming the command
  that makes it. A partition another data dir owns (:mod:`tiered.ownership`) is ``409``, as a deposed Kafka leader
  answers NOT_LEADER_OR_FOLLOWER, for reads as for writes.
- ``GET /topics/<topic>/partitions/<p>/records?offset=&max_bytes=&isolation=``: read from ``offset`` (default:
  the log start offset), local and remote tiers alike, records of ``max_bytes`` at most (default 1 MiB; at least
  one record, as a Kafka fetch returns at least one batch; each record counts its key, value and headers and
  RECORD_FIELDS_BYTES for the rest). ``isolation``: ``high_watermark`` (default),
  ``log_end`` or ``txn_committed``. Answers ``{"records": [...], "next_offset", "log_start_offset",
  "log_end_offset", "high_watermark"}``, each record in the JSON record format (as ``tiered consume --json`` prints
  it, so POSTing them back stores the same bytes). An offset outside ``log start..log end`` is ``416`` naming the
  range; an unknown partition ``404``; an offset a recovery recorded as lost (:mod:`local.lost_offsets`) ``410``
  with ``first_lost_offset``, ``last_lost_offset`` and ``next_offset`` (where to read on), and a read that reaches
  such offsets answers the records before them.
- ``GET /health``: ``200`` with ``{"status": "serving", "offline_log_dirs": {dir: why}, "offline_partitions":
  [...], "remote_tier": bool}`` while serving (offline dirs are reported, not fatal, as in Kafka); ``503`` with
  ``"status": "stopping"`` once a stop began.

Every answer is JSON, errors included: ``{"error": "..."}`` with ``400`` for a request that cannot work (bad or
too deeply nested JSON, a bad timestamp or base64, an invalid topic name, an invalid ``Content-Length`` or chunked
body, a record above ``max.message.bytes``, a malformed request line), ``404`` for an unknown path or partition,
``405`` (with ``Allow``) for a method a path does not serve (``HEAD`` is answered as ``GET``, without the body),
``410`` for lost offsets (above), ``411`` for a POST without a length, ``413`` for a body larger than
``MAX_BODY_BYTES``, ``500`` for a storage
failure (its one-line message); the standard library's own refusals (``414``, ``431``, ``505``) are JSON too
(``send_error``). A request refused before its body was read closes the connection: its body is never parsed as
the next request. Requests are served on threads (``ThreadingHTTPServer``); the log's own locks order concurrent
appends. At most ``tiered.http.max.connections`` connections are served at once (a thread and a descriptor each): one
more is answered ``503`` and closed; a connection that has not sent a whole request ``tiered.http.idle.timeout.ms``
after its last answer (or its start), however slowly its bytes come (a body has the time its size takes at
MIN_BODY_BYTES_PER_S more), or whose client stalls that long reading an
answer, is closed (a stalled body answered ``408``); a client that stops reading its answer is one INFO line. While
``tiered run``'s start claims a partition at a new owner epoch, a request to it waits for the claim (at most 15 s,
then ``503`` with ``Retry-After``); half of ``tiered.http.max.connections`` may wait so at once, one more is
answered ``503`` at once, so that ``/health`` and other partitions are still served.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024
MIN_BODY_BYTES_PER_S = 64 * 1024  # the slowest a body may come (its deadline grows by its size at this rate)
DEFAULT_MAX_BYTES = 1024 * 1024
# What a record counts against max_bytes besides its key, value and headers (its offset, timestamp and the rest of
# its answer): records of empty values counted nothing, and one GET of max_bytes=1 answered 300,000 of them (35 MB;
# at a larger scale 16 GB of memory and 100 s, a helper's pass).
RECORD_FIELDS_BYTES = 64
_MAX_CHUNK_LINE = 1024  # a chunk size line, with its extensions; and a trailer field
_MAX_TRAILERS = 100
_RECORDS_PATH = re.compile(r"^/topics/(?P<topic>[^/]+)/partitions/(?P<partition>[^/]+)/records/?$")
_ALLOWED = {"/metrics": ("GET",), "/health": ("GET",)}  # and GET or POST on _RECORDS_PATH; HEAD wherever GET is


class HttpError(Exception):
    """A request answered with ``status`` and ``{"error": message}`` (and ``headers``, e.g. ``Allow``)."""

    def __init__(self, status: HTTPStatus, message: str, **headers: str) -> None:
        super().__init__(message)
        self.status = status
        self.headers = {name.capitalize(): value for name, value in headers.items()}


class _Union(Collector):
    """The metrics of several registries, collected as one (each is read at scrape time)."""

    def __init__(self, registries: Iterable[CollectorRegistry]) -> None:
        self.registries = list(registries)

    def collect(self) -> Iterator[Any]:
        for registry in self.registries:
            yield from registry.collect()


def metrics_registry(manager: Any) -> CollectorRegistry:
    """One registry serving the log manager's metrics and, when enabled, the remote tier's."""
    from local import metrics

    registries = [metrics.REGISTRY]
    remote = getattr(getattr(manager, "remote_tier", None), "metrics", None)
    if remote is not None:
        registries.append(remote.registry)
    union = CollectorRegistry(auto_describe=False)
    union.register(_Union(registries))
    return union


class Endpoint:
    """What the handler calls, on a running :class:`local.LogManager` (see the module docstring)."""

    def __init__(self, manager: Any, *, claim_waiters: int = 32) -> None:
        self.manager = manager
        self.registry = metrics_registry(manager)
        self.stopping = threading.Event()
        # How many requests may wait for a partition's claim at once (_wait_for_claim): each holds a connection and
        # its thread, and a burst of them took every connection (/health answered 503 "too many connections").
        self.claim_waiters = claim_waiters
        self._claim_waits = threading.BoundedSemaphore(claim_waiters)

    # /health ------------------------------------------------------------------------------------------------

    def health(self) -> tuple[HTTPStatus, dict[str, Any]]:
        m = self.manager
        body = {
            "status": "stopping" if self.stopping.is_set() else "serving",
            "offline_log_dirs": {str(d): why for d, why in dict(m.offline_dirs).items()},
            "offline_partitions": sorted(f"{t}-{p}" for t, p in dict(m.offline_partitions)),
            "remote_tier": m.remote_tier is not None,
        }
        return (HTTPStatus.SERVICE_UNAVAILABLE if self.stopping.is_set() else HTTPStatus.OK), body

    # produce --------------------------------------------------------------------------------------------------

    def produce(self, topic: str, partition: int, body: bytes, compression: str) -> dict[str, Any]:
        from local.records import CompressionType
        from tiered.batching import build_batches, group_appends
        from tiered.commands._common import check_partition_to_write
        from tiered.record_json import record_from_json

        _check_partition_name(topic, partition)
        now = int(time.time() * 1000)
        objects = _json_objects(body)
        if not objects:
            raise HttpError(HTTPStatus.BAD_REQUEST, "no records in the request body")
        try:
            records = [record_from_json(obj, now) for obj in objects]
        except ValueError as exc:
            raise HttpError(HTTPStatus.BAD_REQUEST, str(exc)) from None
        CompressionType.from_name(compression)  # before the topic is created: an unknown codec is a 400
        check_partition_to_write(self.manager, topic, partition)
        log = self.manager.get_or_create_log(topic, partition)
        from tiered.composition import lost_ownership

        self._wait_for_claim(log)
        lost = lost_ownership(self.manager, log)
        if lost is not None:  # (Kafka's listener answers NOT_LEADER_OR_FOLLOWER)
            raise HttpError(HTTPStatus.CONFLICT, lost)
        # One batch per max.message.bytes of records (Kafka's limit on a batch), one append per segment.bytes of
        # batches: a POST is one append, all or nothing, unless it is larger than a segment.
        limit = min(log.config.max_message_bytes, log.config.segment_bytes)
        limit_name = "max.message.bytes" if limit == log.config.max_message_bytes else "segment.bytes"
        batches = build_batches(records, limit, compression, limit_name=limit_name)
        first = last = -1
        for data in group_appends(batches, log.config.segment_bytes):
            info = log.append(data)
            first = info.first_offset if first < 0 else first
            last = info.last_offset
        return {"topic": topic, "partition": partition, "count": len(records), "batches": len(batches),
                "first_offset": first, "last_offset": last}

    def _wait_for_claim(self, log: Any) -> None:
        """Wait while the start claims ``log``'s partition at a new owner epoch (at most as long as the start holds
        it: :func:`tiered.composition.awaiting_claim`); ``503`` with ``Retry-After`` if it is claimed still, and at
        once while ``claim_waiters`` requests wait already."""
        from tiered.composition import awaiting_claim

        waiting = awaiting_claim(self.manager, log)
        if waiting is None:
            return
        if not self._claim_waits.acquire(blocking=False):
            raise HttpError(HTTPStatus.SERVICE_UNAVAILABLE, f"{waiting} ({self.claim_waiters} requests wait for "
                            "claims already)", **{"Retry-After": "1"})
        try:
            waiting = awaiting_claim(self.manager, log, wait_s=math.inf)
        finally:
            self._claim_waits.release()
        if waiting is not None:
            raise HttpError(HTTPStatus.SERVICE_UNAVAILABLE, waiting, **{"Retry-After": "1"})

    # consume ---------------------------------------------------------------------------------------------------

    def consume(self, topic: str, partition: int, query: dict[str, list[str]]) -> dict[str, Any]:
        from local.errors import LostOffsetsError
        from local.fetch import FetchIsolation
        from tiered.commands.consume import record_json, records_from

        _check_partition_name(topic, partition)  # a name no topic can have is a bad request, not a missing partition
        log = self.manager.get_log(topic, partition)
        if log is None:
            raise HttpError(HTTPStatus.NOT_FOUND, f"no partition {topic}-{partition}")
        from tiered.composition import lost_ownership

        self._wait_for_claim(log)
        lost = lost_ownership(self.manager, log)
        if lost is not None:  # (its records past the handover are not the partition's: the owner serves them)
            raise HttpError(HTTPStatus.CONFLICT, lost)
        isolation_name = _param(query, "isolation", "high_watermark")
        try:
            isolation = FetchIsolation[isolation_name.upper()]
        except KeyError:
            raise HttpError(HTTPStatus.BAD_REQUEST, f"invalid isolation {isolation_name!r}: expected high_watermark, "
                            "log_end or txn_committed") from None
        offset = _int_param(query, "offset", log.log_start_offset, 0)
        max_bytes = _int_param(query, "max_bytes", DEFAULT_MAX_BYTES, 1)
        start, end = log.log_start_offset, log.log_end_offset
        if not start <= offset <= end:
            raise HttpError(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                            f"offset {offset} is out of range for {log.name}: log start offset {start}, log end offset {end}")
        records: list[dict[str, Any]] = []
        size = 0
        next_offset = offset
        try:
            for batch, rec in records_from(log, offset, isolation):
                rec_size = (RECORD_FIELDS_BYTES + len(rec.key or b"") + len(rec.value or b"")
                            + sum(len(k) + len(v or b"") for k, v in rec.headers))
                if records and size + rec_size > max_bytes:
                    break
                records.append(record_json(batch, rec))
                size += rec_size
                next_offset = rec.offset + 1
        except LostOffsetsError:
            if not records:
                raise  # 410: the read starts in the hole
            # else the records before the hole, and next_offset at it: the next request is answered 410
        return {"records": records, "next_offset": next_offset, "log_start_offset": log.log_start_offset,
                "log_end_offset": log.log_end_offset, "high_watermark": log.high_watermark}


def _check_partition_name(topic: str, partition: int) -> None:
    """400 naming what is wrong when ``topic``/``partition`` is no partition's name (the engine's own rule)."""
    from local import filenames

    try:
        filenames.partition_dir_name(topic, partition)
    except ValueError as exc:
        raise HttpError(HTTPStatus.BAD_REQUEST, str(exc)) from None


def _json_objects(body: bytes) -> list[Any]:
    """A JSON array of records, one record, or one record per line."""
    from tiered.record_json import NestedTooDeeply, loads

    try:
        text = body.decode()
    except UnicodeDecodeError:
        raise HttpError(HTTPStatus.BAD_REQUEST, "the request body is not UTF-8") from None
    try:
        parsed = loads(text)
    except NestedTooDeeply as exc:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"the request body is not a record: {exc}") from None
    except ValueError:
        out = []
        for lineno, line in enumerate(text.split("\n"), 1):  # not splitlines: U+2028 may be inside a JSON string
            if line.strip():
                try:
                    out.append(loads(line))
                except ValueError as exc:
                    raise HttpError(HTTPStatus.BAD_REQUEST, f"line {lineno} of the body is not JSON: {exc}") from None
        return out
    return parsed if isinstance(parsed, list) else [parsed]


_QUERY_PARAMS = {"POST": frozenset({"compression"}), "GET": frozenset({"offset", "max_bytes", "isolation"})}


def _param(query: dict[str, list[str]], name: str, default: str) -> str:
    values = query.get(name)
    if values is not None and len(values) > 1:  # (the last one was taken, silently: ?offset=1&offset=2 read from 2)
        raise HttpError(HTTPStatus.BAD_REQUEST, f"{name} is given {len(values)} times: give it once")
    return values[0] if values else default


def _int_param(query: dict[str, list[str]], name: str, default: int, lo: int) -> int:
    text = _param(query, name, "")
    if not text:
        return default
    if not re.fullmatch(r"-?[0-9]{1,19}", text):  # (int() takes "1_0" as 10 and " +1" as 1)
        raise HttpError(HTTPStatus.BAD_REQUEST, f"invalid {name} {text!r}: expected a whole number >= {lo}")
    value = int(text)
    if value < lo:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"invalid {name} {value}: must be >= {lo}")
    return value


def _partition(text: str) -> int:
    value = int(text) if re.fullmatch(r"[0-9]{1,10}", text) else -1  # (int() takes "1_0" as 10 and " +0" as 0)
    if not 0 <= value <= 2**31 - 1:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"invalid partition {text!r}: expected a whole number in 0..{2**31 - 1}")
    return value


class _Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.idle_timeout_s)  # every read and write of the connection
        self._answering = False

    def handle_one_request(self) -> None:
        # From waiting for the request line until the request is read whole: at most tiered.http.idle.timeout.ms in
        # all (the socket's timeout bounds each read only: a byte every few seconds held a connection for ever).
        self.server.reading(self.connection)
        self._answering = False
        try:
            super().handle_one_request()
        finally:
            self.server.read(self.connection)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_HEAD(self) -> None:
        self._serve("GET")  # answered as GET, without the body (_send)

    def do_OPTIONS(self) -> None:
        self._serve("OPTIONS")

    def __getattr__(self, name: str) -> Any:
        # Any other method (``do_FOO``): refused by _serve as 405 naming the path's methods, or 404 for a path it
        # does not know, in JSON, rather than the standard library's HTML 501.
        if name.startswith("do_") and name[3:]:
            return lambda: self._serve(name[3:])
        raise AttributeError(name)

    def _serve(self, method: str) -> None:
        endpoint = self.server.endpoint
        self._body_read = False
        if method != "POST":
            self.server.read(self.connection)  # (a POST's request is read whole with its body: _body)
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        try:
            allowed = _ALLOWED.get(url.path) or (("GET", "POST") if _RECORDS_PATH.match(url.path) else None)
            if allowed is not None and method not in allowed:
                raise HttpError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} {url.path} is not served: use "
                                f"{' or '.join(allowed)}", allow=", ".join(allowed))
            if method == "GET" and url.path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                self._send(HTTPStatus.OK, encoder(endpoint.registry), content_type)
                return
            if method == "GET" and url.path == "/health":
                status, body = endpoint.health()
                self._json(status, body)
                return
            match = _RECORDS_PATH.match(url.path)
            if match is None:
                raise HttpError(HTTPStatus.NOT_FOUND, f"no endpoint {method} {url.path}: expected GET /metrics, "
                                "GET /health, GET or POST /topics/<topic>/partitions/<p>/records")
            topic, partition = unquote(match["topic"]), _partition(unquote(match["partition"]))
            known = _QUERY_PARAMS[method]
            unknown = sorted(set(query) - known)
            if unknown:  # a typo (?ofset=5) read from the log start, silently
                raise HttpError(HTTPStatus.BAD_REQUEST, f"unknown query parameter(s) {', '.join(unknown)} of {method} "
                                f"{url.path}: expected {', '.join(sorted(known))}")
            if method == "POST":
                self._json(HTTPStatus.OK, endpoint.produce(topic, partition, self._body(), _param(query, "compression", "none")))
            else:
                self._json(HTTPStatus.OK, endpoint.consume(topic, partition, query))
        except HttpError as exc:
            self._json(exc.status, {"error": str(exc)}, exc.headers)
        except Exception as exc:
            if self._answering:  # the answer was under way: its client stopped reading, or went away
                self.close_connection = True
                logger.info("client %s stopped reading its answer: %s: %s", self.address_string(), type(exc).__name__, exc)
                return
            self._json(*_error_status(exc))

    def _body(self) -> bytes:
        """The request's body: ``Content-Length`` bytes, or a chunked body decoded (``Transfer-Encoding:
        chunked``), at most MAX_BODY_BYTES. A body that cannot be read whole is refused and the connection closed,
        so none of its bytes is ever taken for the next request."""
        encoding = self.headers.get("Transfer-Encoding")
        if encoding is not None:
            if self.headers.get("Content-Length") is not None:
                self.close_connection = True  # RFC 9112 6.1: the chunked framing wins, the connection ends after
            if encoding.strip().lower() != "chunked":
                raise HttpError(HTTPStatus.NOT_IMPLEMENTED, f"Transfer-Encoding {encoding!r} is not supported: send "
                                "the body with a Content-Length or as Transfer-Encoding: chunked")
            body = self._read_chunked()
        else:
            lengths = self.headers.get_all("Content-Length") or []
            if not lengths:
                self.close_connection = True  # whatever follows may be a body sent without a length: never a request
                raise HttpError(HTTPStatus.LENGTH_REQUIRED, "a POST needs a Content-Length (or Transfer-Encoding: "
                                "chunked)")
            text = lengths[0].strip()
            if len(set(lengths)) > 1 or not re.fullmatch(r"[0-9]{1,19}", text):
                raise HttpError(HTTPStatus.BAD_REQUEST, f"invalid Content-Length {', '.join(lengths)!r}: expected "
                                "one whole number of bytes >= 0")
            length = int(text)
            if length > MAX_BODY_BYTES:
                raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                                f"the body is {length} bytes, more than {MAX_BODY_BYTES}: send fewer records per request")
            self.server.reading(self.connection, length)
            body = self._read(self.rfile.read, length)
            if len(body) < length:
                raise HttpError(HTTPStatus.BAD_REQUEST, f"the body ended after {len(body)} of its {length} bytes")
        self._body_read = True
        self.server.read(self.connection)
        return body

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self._read(self.rfile.readline, _MAX_CHUNK_LINE + 1)
            size_text = line.split(b";", 1)[0].strip()
            if not line.endswith(b"\n") or not re.fullmatch(rb"[0-9A-Fa-f]{1,15}", size_text):
                raise HttpError(HTTPStatus.BAD_REQUEST, f"invalid chunk size line {line[:40]!r} in a chunked body")
            size = int(size_text, 16)
            if size == 0:
                break
            self.server.reading(self.connection, size)
            total += size
            if total > MAX_BODY_BYTES:
                raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                                f"the chunked body is more than {MAX_BODY_BYTES} bytes: send fewer records per request")
            data = self._read(self.rfile.read, size)
            if len(data) < size or self._read(self.rfile.readline, 3) not in (b"\r\n", b"\n"):
                raise HttpError(HTTPStatus.BAD_REQUEST, f"a chunk of {size} bytes in a chunked body is cut short or "
                                "not followed by CRLF")
            parts.append(data)
        for _ in range(_MAX_TRAILERS + 1):  # trailer fields, ignored, up to the empty line
            line = self._read(self.rfile.readline, _MAX_CHUNK_LINE + 1)
            if line in (b"\r\n", b"\n"):
                return b"".join(parts)
            if not line.endswith(b"\n"):
                break
        raise HttpError(HTTPStatus.BAD_REQUEST, "a chunked body's trailer does not end with an empty line")

    def _read(self, read: Any, size: int) -> bytes:
        """``read(size)`` of the body; a client that stalls longer than ``tiered.http.idle.timeout.ms`` is answered
        408 and the connection closed (it held a thread and a descriptor for as long as it liked)."""
        try:
            data: bytes = read(size)
        except TimeoutError:
            data = b""
            stalled = True
        else:
            cut = len(data) < size if read == self.rfile.read else not data.endswith(b"\n")
            # (the reaper ended the body's reading at its deadline: the same stall, however few bytes came)
            stalled = cut and self.server.reaped(self.connection)
        if stalled:
            self.close_connection = True
            raise HttpError(HTTPStatus.REQUEST_TIMEOUT, f"the body stalled for {self.server.idle_timeout_s:g} s "
                            "(tiered.http.idle.timeout.ms): send it whole" if not data else
                            f"the body did not arrive whole within {self.server.idle_timeout_s:g} s "
                            f"(tiered.http.idle.timeout.ms) and the time its size takes at {MIN_BODY_BYTES_PER_S} "
                            "bytes/s: send it faster")
        return data

    def _has_unread_body(self) -> bool:
        headers = getattr(self, "headers", None)  # not there when the request line itself was refused
        if headers is None or getattr(self, "_body_read", False):
            return False
        return headers.get("Transfer-Encoding") is not None or (headers.get("Content-Length") or "").strip() not in ("", "0")

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's errors (a malformed request line or header, a URI too long) as JSON, as every
        other answer is; ``message`` is its one line."""
        if not str(getattr(self, "request_version", "")).startswith("HTTP/1."):
            self.request_version = self.protocol_version  # an unparsed line: answer with a status line anyway
        status = HTTPStatus(code)
        self.close_connection = True
        self._json(status, {"error": message or status.phrase}, {"Connection": "close"})

    def _json(self, status: HTTPStatus, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        if status >= 400 and self._has_unread_body():
            self.close_connection = True  # the body's bytes are not read: they must not be taken for a request
            headers = {**(headers or {}), "Connection": "close"}
        self._send(status, (json.dumps(body) + "\n").encode(), "application/json", headers)

    def _send(self, status: HTTPStatus, payload: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self._answering = True
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        if self.close_connection and "Connection" not in (headers or {}):
            headers = {**(headers or {}), "Connection": "close"}  # (the client is told, not only the socket closed)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), format % args)


def _error_status(exc: Exception) -> tuple[HTTPStatus, dict[str, Any]]:
    from local.errors import (
        ConfigError,
        InvalidRecordError,
        InvalidTimestampError,
        InvalidTopicError,
        KafkaStorageError,
        LostOffsetsError,
        OffsetOutOfRangeError,
        RecordTooLargeError,
        UnknownTopicOrPartitionError,
        UnsupportedCompressionTypeError,
    )
    from tiered.errors import TieredStorageError

    message = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, OffsetOutOfRangeError):
        return HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, {"error": message}
    if isinstance(exc, LostOffsetsError):  # a recorded hole (local.lost_offsets): gone for good, read on after it
        return HTTPStatus.GONE, {"error": message, "first_lost_offset": exc.first_offset,  # type: ignore[attr-defined]
                                 "last_lost_offset": exc.last_offset, "next_offset": exc.next_offset}  # type: ignore[attr-defined]
    if isinstance(exc, UnknownTopicOrPartitionError):
        return HTTPStatus.NOT_FOUND, {"error": message}
    if isinstance(exc, (ConfigError, InvalidRecordError, InvalidTimestampError, InvalidTopicError, RecordTooLargeError,
                        UnsupportedCompressionTypeError)):
        return HTTPStatus.BAD_REQUEST, {"error": message}
    if isinstance(exc, (KafkaStorageError, TieredStorageError, OSError)):
        logger.warning("request failed: %s", message)
        return HTTPStatus.INTERNAL_SERVER_ERROR, {"error": message}
    logger.exception("unexpected error serving a request")
    return HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"unexpected error: {type(exc).__name__}: {message}"}


class Server(ThreadingHTTPServer):
    """The endpoint on ``(host, port)``; port 0 picks a free one (read it back from :attr:`port`)."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # the listen backlog (socketserver's 5 left a burst of clients waiting seconds)

    def __init__(self, endpoint: Endpoint, host: str, port: int, *, max_connections: int = 64,
                 idle_timeout_s: float = 30.0) -> None:
        self.endpoint = endpoint
        # Each connection holds a thread and a descriptor: unbounded, idle clients took every descriptor of the
        # process, and the log manager, failing to write a checkpoint, took the data dir offline (a helper's pass).
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        self.connections_refused = 0
        self._count = 0
        self._count_lock = threading.Lock()
        self._deadlines: dict[socket.socket, float] = {}  # connections reading a request: when they must be done
        self._bodies: set[socket.socket] = set()  # of those, the ones reading a body
        self._reaped: set[socket.socket] = set()  # bodies whose reading _reap ended (answered 408)
        self._stopped = threading.Event()
        if ":" in host:  # an IPv6 address ([::1]:8080): the server's default family is IPv4
            self.address_family = socket.AF_INET6
        super().__init__((host, port), _Handler)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        host = str(self.server_address[0])
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    @property
    def open_connections(self) -> int:
        """Connections being served now (each on its thread)."""
        with self._count_lock:
            return self._count

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection, or, with ``max_connections`` open already, a 503 written at once and the
        connection closed (no thread: a burst of connections costs the process nothing it keeps)."""
        with self._count_lock:
            full = self._count >= self.max_connections
            if not full:
                self._count += 1
        if full:
            self.connections_refused += 1
            if self.connections_refused % 1000 == 1:  # (a flood of them is not a flood of lines)
                logger.warning("refusing an HTTP connection from %s: tiered.http.max.connections (%d) are open (%d "
                               "refused so far)", client_address[0] if isinstance(client_address, tuple)
                               else client_address, self.max_connections, self.connections_refused)
            body = (json.dumps({"error": f"too many connections: {self.max_connections} are open "
                                         "(tiered.http.max.connections); try again"}) + "\n").encode()
            try:
                request.settimeout(1.0)
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                b"Content-Length: %d\r\nConnection: close\r\nRetry-After: 1\r\n\r\n%s" % (len(body), body))
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._closed_one()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._closed_one()

    def _closed_one(self) -> None:
        with self._count_lock:
            self._count -= 1

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A request whose handling raised (socketserver printed the traceback to stderr): a client that went away
        mid-request or mid-answer is one INFO line; anything else one WARNING line, the traceback with -v."""
        import sys

        exc = sys.exc_info()[1]
        who = client_address[0] if isinstance(client_address, tuple) and client_address else client_address
        if isinstance(exc, (ConnectionError, TimeoutError)):
            logger.info("client %s went away: %s", who, exc)
        else:
            logger.warning("a request from %s failed: %s: %s", who, type(exc).__name__, exc,
                           exc_info=logger.isEnabledFor(logging.DEBUG))

    def reading(self, connection: socket.socket, body_bytes: int = 0) -> None:
        """``connection`` waits for, or reads, a request: it has ``idle_timeout_s`` from now for it (:meth:`_reap`),
        and with ``body_bytes`` more to come, the time they take at MIN_BODY_BYTES_PER_S more (a large body on a
        slow link is no trickle)."""
        with self._count_lock:
            self._deadlines[connection] = time.monotonic() + self.idle_timeout_s + body_bytes / MIN_BODY_BYTES_PER_S
            if body_bytes:
                self._bodies.add(connection)

    def read(self, connection: socket.socket) -> None:
        """``connection``'s request is read whole (or the connection ends)."""
        with self._count_lock:
            self._deadlines.pop(connection, None)
            self._bodies.discard(connection)
            self._reaped.discard(connection)

    def reaped(self, connection: socket.socket) -> bool:
        """Whether :meth:`_reap` ended the reading of ``connection``'s body (it is answered 408)."""
        with self._count_lock:
            return connection in self._reaped

    def _reap(self) -> None:
        """Shut the connections whose request was not read whole in time (their thread's read then ends). A body's
        reading only: its thread answers 408, as when the body stalls a whole timeout (a stall is both, and which
        came first depended on the machine's load)."""
        while not self._stopped.wait(min(1.0, self.idle_timeout_s / 4)):
            now = time.monotonic()
            with self._count_lock:
                late = [(c, c in self._bodies) for c, deadline in self._deadlines.items() if deadline <= now]
                for c, body in late:
                    del self._deadlines[c]
                    if body:
                        self._reaped.add(c)
            for c, body in late:
                with contextlib.suppress(OSError):
                    c.shutdown(socket.SHUT_RD if body else socket.SHUT_RDWR)

    def start(self) -> None:
        threading.Thread(target=self._reap, name="tiered-http-reaper", daemon=True).start()
        self._thread = threading.Thread(target=self.serve_forever, name="tiered-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop taking requests (those being served finish on their threads) and release the port."""
        self.endpoint.stopping.set()
        self._stopped.set()
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
        self.server_close()

