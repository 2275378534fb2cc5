"""Helpers for observe tests: simulator processes, a Poisson load generator with client-side timing, and a
delaying HTTP proxy in front of Prometheus (real HTTP, for slow / failing / authenticated answers)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from tests.support.prometheus_server import free_port

REPO = Path(__file__).resolve().parents[2]
#: The speculative config of the suite's one vLLM server.
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}


# ---- simulator processes -----------------------------------------------------------------------------------------


@dataclass
class Simulator:
    endpoint: str
    model: str
    process: subprocess.Popen[bytes]

    @property
    def address(self) -> str:
        return self.endpoint.removeprefix("http://")


@contextlib.contextmanager
def running_simulator(model: str, tmp: Path, *, seed: int = 0) -> Iterator[Simulator]:
    """``python -m controller.simulator.server`` on a free loopback port (real time), stopped by PID."""
    port = free_port()
    log = (tmp / f"simulator-{port}.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controller.simulator.server",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h200",
            "--port",
            str(port),
            "--seed",
            str(seed),
            "--served-model-name",
            model,
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    sim = Simulator(f"http://127.0.0.1:{port}", model, process)
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"simulator exited: {(tmp / f'simulator-{port}.log').read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{sim.endpoint}/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError("simulator did not become healthy")
            time.sleep(0.1)
        yield sim
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        log.close()


# ---- load generator ----------------------------------------------------------------------------------------------


@dataclass
class RequestRecord:
    start: float
    end: float = 0.0
    first_token: float | None = None
    output_tokens: int = 0
    prompt_tokens: int = 0
    ok: bool = False
    error: str = ""  # why it is not ok: the exception the request ended with
    status: int | None = None  # the HTTP status of the answer (None: none came back)
    retried: str = ""  # the transport error of a first attempt that got no answer (it was sent once more)

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.start

    @property
    def tpot(self) -> float | None:
        if self.first_token is None or self.output_tokens < 2:
            return None
        return (self.end - self.first_token) / (self.output_tokens - 1)


@dataclass
class LoadResult:
    started: float
    finished: float
    records: list[RequestRecord] = field(default_factory=list)

    def arrivals_in(self, start: float, end: float) -> int:
        return sum(1 for r in self.records if start <= r.start < end)

    def concurrency_in(self, start: float, end: float) -> float:
        """Time-averaged requests in flight over [start, end) as seen by the client."""
        busy = sum(max(0.0, min(r.end, end) - max(r.start, start)) for r in self.records if r.ok)
        return busy / (end - start)


#: vLLM's HTTP server closes a connection after 5 s idle (``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``), and httpx keeps an
#: idle connection for 5 s by default: a request could go out on a connection the server is closing at that moment.
#: The load's client lets idle connections go well before the server does.
KEEPALIVE_EXPIRY_S = 2.0


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


async def _one(client: httpx.AsyncClient, url: str, body: dict[str, object], record: RequestRecord) -> None:
    """Send one request and fill its record. A transport error before any answer came back (the connection was
    refused, reset or closed under the request: the server has not served it) sends it once more, keeping the first
    error in ``record.retried``; any other failure leaves its error in ``record.error``."""
    for attempt in range(2):
        try:
            await _send(client, url, body, record)
            return
        except httpx.TransportError as exc:
            if attempt == 0 and record.status is None:
                record.retried = _describe(exc)
                continue
            record.end, record.error = time.time(), _describe(exc)
            raise
        except Exception as exc:
            record.end, record.error = time.time(), _describe(exc)
            raise


async def _send(client: httpx.AsyncClient, url: str, body: dict[str, object], record: RequestRecord) -> None:
    if not body.get("stream"):
        response = await client.post(url, json=body)
        record.status = response.status_code
        response.raise_for_status()
        usage = response.json()["usage"]
        record.output_tokens, record.prompt_tokens = int(usage["completion_tokens"]), int(usage["prompt_tokens"])
        record.end = time.time()
        record.ok = True
        return
    async with client.stream("POST", url, json=body) as response:
        record.status = response.status_code
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            # the first chunk carrying a choice holds the first token(s), even when its text is still empty
            # (a byte-level token that does not complete a UTF-8 character yet)
            if chunk.get("choices") and record.first_token is None:
                record.first_token = time.time()
            if chunk.get("usage"):
                record.output_tokens = int(chunk["usage"]["completion_tokens"])
                record.prompt_tokens = int(chunk["usage"]["prompt_tokens"])
    record.end = time.time()
    record.ok = True


def poisson_load(
    endpoint: str,
    model: str,
    *,
    rate: float,
    duration_s: float,
    prompt_tokens: int,
    output_tokens: int,
    seed: int = 0,
    repetitive: bool = False,
    temperature: float | None = None,
    stream_every: int = 1,
) -> LoadResult:
    """Open-loop Poisson arrivals at ``rate`` req/s for ``duration_s``; token-id prompts of exactly
    ``prompt_tokens``; exactly ``output_tokens`` generated (``ignore_eos``). Every ``stream_every``-th request
    streams (client-side TTFT/TPOT); the others do not, which keeps the server's frontend work per token low."""
    rng = random.Random(seed)

    def prompt() -> list[int]:
        if repetitive:  # a short pattern repeated: lookup (ngram) drafters find matches
            pattern = [rng.randint(100, 3000) for _ in range(8)]
            return (pattern * (prompt_tokens // 8 + 1))[:prompt_tokens]
        return [rng.randint(100, 3000) for _ in range(prompt_tokens)]

    async def run() -> LoadResult:
        result = LoadResult(started=time.time(), finished=0.0)
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64, keepalive_expiry=KEEPALIVE_EXPIRY_S)
        async with httpx.AsyncClient(timeout=120, limits=limits) as client:
            tasks = []
            next_at = time.time()
            deadline = result.started + duration_s
            while True:
                next_at += rng.expovariate(rate)
                if next_at >= deadline:
                    break
                await asyncio.sleep(max(0.0, next_at - time.time()))
                body: dict[str, object] = {
                    "model": model,
                    "prompt": prompt(),
                    "max_tokens": output_tokens,
                    "ignore_eos": True,
                }
                if len(result.records) % stream_every == 0:
                    body["stream"] = True
                    body["stream_options"] = {"include_usage": True}
                if temperature is not None:
                    body["temperature"] = temperature
                record = RequestRecord(start=time.time())
                result.records.append(record)
                tasks.append(asyncio.create_task(_one(client, f"{endpoint}/v1/completions", body, record)))
            await asyncio.gather(*tasks, return_exceptions=True)
        result.finished = time.time()
        return result

    return asyncio.run(run())


def client_quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def bucket_index(value: float, bounds: Sequence[float]) -> int:
    return next((i for i, b in enumerate(bounds) if value <= b), len(bounds))


# ---- a delaying / recording proxy --------------------------------------------------------------------------------


class DelayProxy:
    """A threaded HTTP proxy to ``upstream`` that waits ``delay_s`` before forwarding and records request headers.
    Upstream failures answer 502, like a real reverse proxy."""

    def __init__(self, upstream: str, delay_s: float = 0.0) -> None:
        self.upstream = upstream
        self.delay_s = delay_s
        self.seen_headers: list[dict[str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def _forward(self) -> None:
                proxy.seen_headers.append({k.lower(): v for k, v in self.headers.items()})
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                time.sleep(proxy.delay_s)
                try:
                    answer = httpx.request(
                        self.command,
                        proxy.upstream + self.path,
                        content=body,
                        headers={"content-type": self.headers.get("content-type", "")},
                        timeout=30,
                    )
                    status, payload = answer.status_code, answer.content
                except httpx.HTTPError as exc:
                    status, payload = 502, f"bad gateway: {exc}".encode()
                try:
                    self.send_response(status)
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up (timeout)

            do_GET = _forward
            do_POST = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> DelayProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
