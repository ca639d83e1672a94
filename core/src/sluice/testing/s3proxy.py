"""A loopback HTTP proxy in front of a real S3 server: it counts requests, and fails the ones
a test asks it to (what a healthy server never does on demand: a 500 or 503, a connection
dropped before the answer).

Nothing in the pipe is S3's own but the names of :func:`classify`, so the same proxy stands
in front of the tests' Iceberg REST catalog too (its commit is a ``POST`` whose "key" is
``namespaces/<ns>/tables/<table>``).

Requests and answers pass through byte for byte (signatures stay valid: the client signs for
the proxy's host, which the proxy forwards unchanged), over keep-alive connections. Each
request is classified as S3 names its operations (``PUT``, ``GET``, ``HEAD``, ``LIST``,
``DELETE``, ``POST``) for :attr:`S3Proxy.counts`. A planned fault (:meth:`S3Proxy.fail`)
applies to the next requests matching a method and a key pattern:

``500`` / ``503``
    the proxy answers with that status and an S3 error document; the server never sees the
    request.
``drop``
    the request reaches the server, and the proxy closes the client's connection before the
    answer: the client cannot know whether it happened.

:attr:`S3Proxy.unconditional` strips ``If-None-Match`` and ``If-Match`` from every ``PUT``: in
front of a server that does not check signatures (moto's), it stands for an S3 server that
ignores conditional writes.

:meth:`S3Proxy.on` runs a function of the test's just before such a request goes on to the
server (e.g. pausing the server with SIGSTOP: the request then waits in its socket).
"""

from __future__ import annotations

import contextlib
import re
import select
import socket
import socketserver
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO, Literal
from urllib.parse import parse_qs, urlsplit

from ..brokers import HOST, free_port

__all__ = ["S3Proxy", "classify"]

FaultKind = Literal["500", "503", "drop"]
_ERRORS = {"500": ("Internal Server Error", "InternalError"), "503": ("Slow Down", "SlowDown")}


@dataclass
class _Fault:
    kind: FaultKind | Callable[[], None]  # or a function to run before forwarding
    method: str  # PUT, GET, ... or * for any
    key: re.Pattern[str]
    times: int


def classify(method: str, target: str) -> tuple[str, str]:
    """(operation, object key) of a path-style request: a GET of a bucket is a ``LIST``."""
    parts = urlsplit(target)
    path = parts.path.lstrip("/")
    _, _, key = path.partition("/")
    query = parse_qs(parts.query, keep_blank_values=True)
    if method == "GET" and (not key or "list-type" in query or "prefix" in query):
        return "LIST", key
    return method, key


class S3Proxy:
    """Forwards ``127.0.0.1:<port>`` to ``upstream`` (``host:port``)."""

    def __init__(self, upstream: str, port: int | None = None) -> None:
        host, _, number = upstream.rpartition(":")
        self.upstream = (host or HOST, int(number))
        self.port = port or free_port()
        self.counts: Counter[str] = Counter()
        self.injected: list[str] = []
        #: strip the conditions of PUTs (see the module docstring)
        self.unconditional = False
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server((HOST, self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> S3Proxy:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> S3Proxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def fail(self, kind: FaultKind, method: str = "*", key: str = ".*", times: int = 1) -> None:
        """Fail the next ``times`` requests of ``method`` whose key matches ``key`` (a
        regular expression searched in the object key)."""
        with self._lock:
            self._faults.append(_Fault(kind, method.upper(), re.compile(key), times))

    def on(self, method: str, key: str, action: Callable[[], None], times: int = 1) -> None:
        """Run ``action`` before each of the next ``times`` requests of ``method`` whose key
        matches ``key`` goes on to the server (which then answers it as usual)."""
        with self._lock:
            self._faults.append(_Fault(action, method.upper(), re.compile(key), times))

    def clear(self) -> None:
        """Forget the planned faults and the record of those injected."""
        with self._lock:
            self._faults.clear()
            self.injected.clear()
            self.unconditional = False

    def reset_counts(self) -> Counter[str]:
        """The counts so far, and start counting from zero."""
        with self._lock:
            counts, self.counts = self.counts, Counter()
        return counts

    def _fault_for(self, operation: str, key: str) -> FaultKind | Callable[[], None] | None:
        with self._lock:
            self.counts[operation] += 1
            for fault in self._faults:
                if fault.method in ("*", operation) and fault.key.search(key):
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                    kind = fault.kind if isinstance(fault.kind, str) else "on"
                    self.injected.append(f"{kind} {operation} {key}")
                    return fault.kind
        return None

    # ---- the byte pipe ---------------------------------------------------------------------

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        reader = client.makefile("rb")
        try:
            while True:
                head = _read_head(reader)
                if head is None:
                    return
                method, target = head[0].split(b" ", 2)[:2]
                operation, key = classify(method.decode(), target.decode())
                if (_header(head, b"expect") or b"").lower() == b"100-continue":
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")  # the body follows
                body = _read_body(reader, head)
                if self.unconditional and method == b"PUT":
                    conditions = (b"if-none-match", b"if-match")
                    head = [
                        h for h in head if h.partition(b":")[0].strip().lower() not in conditions
                    ]
                fault = self._fault_for(operation, key)
                if callable(fault):
                    fault()
                elif fault in ("500", "503"):
                    client.sendall(_error(fault))
                    continue
                if upstream is not None and _closed(upstream):
                    upstream.close()  # the server closed it while idle (Jetty: after 30 s)
                    upstream = None
                if upstream is None:
                    upstream = socket.create_connection(self.upstream, timeout=60)
                    upstream_reader = upstream.makefile("rb")
                upstream.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
                answer = _read_head(upstream_reader)
                while answer is not None and answer[0].split(b" ")[1:2] == [b"100"]:
                    answer = _read_head(upstream_reader)  # interim: the client had its own
                if answer is None:
                    return
                payload = b"" if method == b"HEAD" else _read_body(upstream_reader, answer)
                if fault == "drop":
                    return
                client.sendall(b"\r\n".join(answer) + b"\r\n\r\n" + payload)
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                client.close()
            if upstream is not None:
                with contextlib.suppress(OSError):
                    upstream.close()


def _closed(connection: socket.socket) -> bool:
    """Whether the server closed ``connection`` (an idle kept-alive one): it is readable
    with nothing to read. A request sent on it would get no answer, and the client would see
    its connection dropped by the proxy."""
    readable, _, _ = select.select([connection], [], [], 0)
    if not readable:
        return False
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _read_head(reader: BinaryIO) -> list[bytes] | None:
    """The request or status line and the header lines (without the blank line); None at
    the end of the connection."""
    lines: list[bytes] = []
    while True:
        line = reader.readline(65536)
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            if not lines:
                continue
            return lines
        lines.append(line.rstrip(b"\r\n"))


def _header(head: list[bytes], name: bytes) -> bytes | None:
    for line in head[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def _read_body(reader: BinaryIO, head: list[bytes]) -> bytes:
    """The body as it was sent (a chunked body with its chunk framing)."""
    if (_header(head, b"transfer-encoding") or b"").lower() == b"chunked":
        out = b""
        while True:
            size_line = reader.readline(65536)
            out += size_line
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, then the blank line
                    trailer = reader.readline(65536)
                    out += trailer
                    if trailer in (b"\r\n", b"\n", b""):
                        return out
            out += reader.read(size + 2)
    length = _header(head, b"content-length")
    if length is None:
        status = head[0].split(b" ")
        if len(status) > 1 and status[1].isdigit() and head[0].startswith(b"HTTP/"):
            code = int(status[1])
            if code in (204, 304) or 100 <= code < 200:
                return b""
        return b""
    data: bytes = reader.read(int(length))
    return data


def _error(kind: str) -> bytes:
    reason, code = _ERRORS[kind]
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
        f"<Message>injected by the test proxy</Message></Error>"
    ).encode()
    return (
        f"HTTP/1.1 {kind} {reason}\r\nContent-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
