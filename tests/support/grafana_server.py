"""A stand-in for Grafana's HTTP API in front of real Prometheus servers, for tests.

    with running_grafana(token="t0k", datasources={"prom": prometheus.url}) as grafana:
        GrafanaMetrics(GrafanaSettings(url=grafana.url, token_file=..., datasource_uid="prom"))

It serves what Shiftlight uses of Grafana, as Grafana answers it:

* every request needs ``Authorization: Bearer <token>``; otherwise 401 (this stand-in echoes the header it got in
  the body, so a test can show that the client never repeats such a body with the token in it);
* ``GET``/``POST /api/datasources/proxy/uid/<uid>/<path>`` forwards to the datasource's URL + ``<path>``
  (query string and form body included): 404 for an unknown UID, 502 when the datasource cannot be reached;
* ``POST /api/annotations`` records the JSON body (:attr:`GrafanaStandIn.annotations`) and answers its id.

It runs in a thread on a free loopback port and stops with :meth:`GrafanaStandIn.stop`.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

PROXY_PREFIX = "/api/datasources/proxy/uid/"


@dataclass
class GrafanaStandIn:
    token: str
    datasources: dict[str, str]
    annotations: list[dict[str, Any]] = field(default_factory=list)
    proxied: list[str] = field(default_factory=list)
    """The datasource path (without the query string) of every forwarded request: ``"<uid> /<path>"``."""
    refused: int = 0
    server: ThreadingHTTPServer | None = None
    thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> GrafanaStandIn:
        handler = type("Handler", (_Handler,), {"owner": self, "lock": threading.Lock()})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="grafana-stand-in", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        if self.thread is not None:
            self.thread.join(timeout=10)


class _Handler(BaseHTTPRequestHandler):
    """Grafana's answers; ``owner`` (the stand-in it serves) and ``lock`` are set on a subclass per server."""

    owner: GrafanaStandIn
    lock: threading.Lock

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def message(self, status: int, text: str) -> None:
        self.answer(status, json.dumps({"message": text}).encode())

    def authorised(self) -> bool:
        got = self.headers.get("Authorization", "")
        if got == f"Bearer {self.owner.token}":
            return True
        with self.lock:
            self.owner.refused += 1
        self.message(401, f"Invalid API key (got {got!r})")
        return False

    def body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def proxy(self, method: str) -> None:
        if not self.authorised():
            return
        rest = self.path[len(PROXY_PREFIX) :]
        uid, _, path = rest.partition("/")
        target = self.owner.datasources.get(uid)
        if target is None:
            self.message(404, "Data source not found")
            return
        with self.lock:
            self.owner.proxied.append(f"{uid} /{path.partition('?')[0]}")
        headers = {"Content-Type": self.headers.get("Content-Type", "application/x-www-form-urlencoded")}
        try:
            upstream = httpx.request(
                method, f"{target.rstrip('/')}/{path}", content=self.body(), headers=headers, timeout=30
            )
        except httpx.HTTPError:
            self.message(502, "Bad Gateway")
            return
        self.answer(upstream.status_code, upstream.content, upstream.headers.get("Content-Type", ""))

    def do_GET(self) -> None:
        if self.path.startswith(PROXY_PREFIX):
            self.proxy("GET")
        else:
            self.message(404, "Not found")

    def do_POST(self) -> None:
        if self.path.startswith(PROXY_PREFIX):
            self.proxy("POST")
            return
        if self.path != "/api/annotations":
            self.message(404, "Not found")
            return
        if not self.authorised():
            return
        try:
            annotation = json.loads(self.body())
        except ValueError:
            self.message(400, "bad request data")
            return
        with self.lock:
            self.owner.annotations.append(annotation)
            number = len(self.owner.annotations)
        self.answer(200, json.dumps({"id": number, "message": "Annotation added"}).encode())


@contextlib.contextmanager
def running_grafana(*, token: str, datasources: Mapping[str, str]) -> Iterator[GrafanaStandIn]:
    grafana = GrafanaStandIn(token=token, datasources=dict(datasources)).start()
    try:
        yield grafana
    finally:
        grafana.stop()
