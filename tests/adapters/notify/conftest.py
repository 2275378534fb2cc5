"""A real local Slack incoming-webhook receiver: an HTTP server on a free loopback port, in a thread."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: str = "ok"


class Receiver:
    """Records every POST; answers from a script of replies (then 200 ``ok``). ``hold`` blocks answers."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.script: list[Reply] = []
        self.hold = threading.Event()
        self.hold.set()
        self.arrived = threading.Event()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                payload = json.loads(self.rfile.read(length))
                with receiver.lock:
                    receiver.requests.append(payload)
                    receiver.paths.append(self.path)
                    reply = receiver.script.pop(0) if receiver.script else Reply()
                receiver.arrived.set()
                receiver.hold.wait(timeout=30)
                body = reply.body.encode()
                self.send_response(reply.status)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/services/T0SHIFT/B0LIGHT/s3cr3tT0k3nDoNotLog"
        self._thread = threading.Thread(target=self.server.serve_forever, name="slack-receiver", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.hold.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


class FakeMonotonic:
    """A monotonic clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def fake_clock() -> FakeMonotonic:
    return FakeMonotonic()
