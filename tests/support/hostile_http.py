"""A loopback HTTP server that answers as a hostile (or broken) endpoint would: a canned status and body, a body or
headers dripped one byte at a time, a body far over any cap, with or without a length. It counts the bytes each
answer managed to send before the client hung up, so a test can assert that a read was cut off without timing it.

Every request is answered the same way (whatever its path), and what each request carried is recorded."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Behaviour:
    """What the server answers. ``mode``:

    * ``canned``: ``status`` with ``body`` (and ``content_type``), whole;
    * ``drip-body``: a 200 whose declared ``length`` bytes come one every ``interval_s``;
    * ``drip-headers``: a status line and headers that come one byte every ``interval_s`` and never end;
    * ``flood``: a 200 of ``length`` bytes sent as fast as the client reads, declared (``declare_length``) or
      delimited by closing the connection.

    A dripping or flooding answer stops at ``length`` bytes, or when a send fails (the client hung up)."""

    mode: str = "canned"
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    interval_s: float = 0.2
    length: int = 200
    declare_length: bool = True


@dataclass
class Served:
    """One answer: the request's path and headers, and how many bytes of the answer were sent."""

    path: str
    headers: dict[str, str]
    sent: int = 0
    done: threading.Event = field(default_factory=threading.Event)


class HostileServer:
    """Answers every request with :attr:`behaviour` on a free loopback port; a context manager."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.served: list[Served] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                record = Served(self.path, {k.lower(): v for k, v in self.headers.items()})
                server.served.append(record)
                try:
                    server.send(self, record)
                except OSError:
                    pass  # the client hung up: what was sent is counted
                finally:
                    self.close_connection = True
                    record.done.set()

            do_GET = _answer
            do_POST = _answer

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="hostile-http", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def _write(self, handler: BaseHTTPRequestHandler, record: Served, data: bytes) -> None:
        handler.wfile.write(data)
        handler.wfile.flush()
        record.sent += len(data)

    def send(self, handler: BaseHTTPRequestHandler, record: Served) -> None:
        b = self.behaviour
        if b.mode == "canned":
            head = (
                f"HTTP/1.1 {b.status} X\r\nContent-Type: {b.content_type}\r\nContent-Length: {len(b.body)}\r\n"
                "Connection: close\r\n\r\n"
            )
            self._write(handler, record, head.encode() + b.body)
        elif b.mode == "drip-body":
            head = f"HTTP/1.1 200 OK\r\nContent-Type: {b.content_type}\r\nContent-Length: {b.length}\r\n\r\n"
            self._write(handler, record, head.encode())
            for _ in range(b.length):
                self._write(handler, record, b" ")
                time.sleep(b.interval_s)
        elif b.mode == "drip-headers":
            head = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * b.length
            for byte in head:
                self._write(handler, record, bytes([byte]))
                time.sleep(b.interval_s)
        elif b.mode == "flood":
            declared = f"Content-Length: {b.length}\r\n" if b.declare_length else ""
            head = f"HTTP/1.1 200 OK\r\nContent-Type: {b.content_type}\r\n{declared}Connection: close\r\n\r\n"
            self._write(handler, record, head.encode())
            chunk = b" " * 65536
            left = b.length
            while left > 0:
                self._write(handler, record, chunk[:left])
                left -= len(chunk)
        else:
            raise ValueError(f"unknown mode {b.mode!r}")

    def last(self, timeout_s: float = 60.0) -> Served:
        """The latest answer, once its handler has finished (the client hung up or it ran out)."""
        record = self.served[-1]
        record.done.wait(timeout_s)
        return record

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


@contextlib.contextmanager
def hostile(behaviour: Behaviour) -> Iterator[HostileServer]:
    with HostileServer(behaviour) as server:
        yield server
