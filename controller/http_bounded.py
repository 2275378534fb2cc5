"""Bounded reads from outside HTTP endpoints: one helper for Prometheus, Grafana, the LLM endpoint, a canary's
``/metrics`` and the quality gate.

Whatever an endpoint answers, one request costs the caller at most:

* a **total deadline** (not a per-read timeout): the request runs on a worker thread of its own and the caller
  waits for it no longer than the deadline. The body is streamed and the deadline is checked between chunks; a
  header or body sent one byte at a time cannot hold the caller past it. When the deadline passes, the caller
  shuts the request's socket down (the socket is taken from httpcore's connection trace), so the worker ends at
  its next read instead of lingering; should it linger anyway (a DNS lookup, say), it is a daemon thread bounded
  by the per-read timeout, and at most :data:`MAX_LINGERING` such workers exist at once: past that, new requests
  fail at once with kind ``deadline`` instead of piling up threads.
* a **byte cap**: the body is counted as it arrives and the read stops at the cap (kind ``too-large``). Bodies are
  asked for and accepted unencoded only (``Accept-Encoding: identity``; another ``Content-Encoding`` is kind
  ``malformed``), so the cap counts the bytes that are kept in memory.
* a **bounded parse**: :func:`parse_json` refuses nesting deeper than a limit before ``json.loads`` runs (the
  brackets outside strings are counted in the bytes), and turns every exception of parsing (``RecursionError``,
  ``MemoryError``, ``ValueError``) into :class:`ReadFailed` of kind ``malformed``.

Every failure is a :class:`ReadFailed` with a ``kind`` (see :data:`FailureKind`) and, for an answer, its HTTP
``status``; its message never quotes the answer. Each adapter translates it into its own error type (for
metrics, :class:`~controller.errors.MetricsUnavailable`, so the loop freezes).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

#: A byte cap that fits every answer Shiftlight reads from outside (a fleet's batched Prometheus answer is well under
#: a megabyte; a vLLM ``/metrics`` page some hundred kilobytes).
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
#: The deepest JSON nesting accepted (Prometheus and OpenAI answers nest fewer than ten levels).
MAX_JSON_DEPTH = 64
#: Workers still running after their caller gave up, at most; past that a request fails at once.
MAX_LINGERING = 16

FailureKind = Literal["deadline", "connection", "too-large", "http-status", "malformed", "too-deep", "too-many"]

_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class ReadFailed(Exception):
    """A bounded read failed. ``kind`` says how (machine-readable), ``status`` is the HTTP status when one came."""

    def __init__(self, kind: FailureKind, detail: str = "", *, status: int | None = None) -> None:
        self.kind: FailureKind = kind
        self.status = status
        self.detail = detail
        super().__init__(self.describe())

    def describe(self) -> str:
        """The kind, the status and a detail of Shiftlight's own wording: never a byte of the answer."""
        what = f"HTTP {self.status}" if self.kind == "http-status" else self.kind
        return f"{what}: {self.detail}" if self.detail else what


@dataclass(frozen=True)
class Limits:
    """How much one request may cost: ``deadline_s`` in all (connect, headers, body), ``max_bytes`` of body."""

    deadline_s: float
    max_bytes: int = DEFAULT_MAX_BYTES
    max_depth: int = MAX_JSON_DEPTH


@dataclass(frozen=True)
class Answer:
    """A whole answer, read within the limits."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    limits: Limits = field(repr=False)

    def json(self) -> Any:
        """The body parsed as JSON within the depth limit; :class:`ReadFailed` (``malformed``/``too-deep``) else."""
        return parse_json(self.body, max_depth=self.limits.max_depth)


def json_depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects in ``body`` (brackets inside strings do not count)."""
    brackets = _STRINGS.sub(b"", body).translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for byte in brackets:
        if byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def parse_json(body: bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``body`` as JSON, refusing nesting deeper than ``max_depth`` before parsing; every failure is a
    :class:`ReadFailed` that quotes none of ``body``."""
    try:
        if json_depth(body) > max_depth:
            raise ReadFailed("too-deep", f"JSON nested deeper than {max_depth} levels")
        return json.loads(body)
    except ReadFailed:
        raise
    except (ValueError, RecursionError, MemoryError, TypeError) as exc:
        raise ReadFailed("malformed", f"not JSON ({type(exc).__name__})") from None


class _Call:
    """One request on its worker thread: its socket (for the caller to shut down) and its outcome."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sock: socket.socket | None = None
        self.cancelled = False
        self.done = threading.Event()
        self.answer: Answer | None = None
        self.error: ReadFailed | None = None

    def trace(self, name: str, info: Mapping[str, Any]) -> None:
        """httpcore's trace hook: keep the connection's socket (plain, then TLS)."""
        if name in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if isinstance(sock, socket.socket):
                with self.lock:
                    self.sock = sock
                    cancelled = self.cancelled
                if cancelled:
                    _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


_lingering = 0
_lingering_lock = threading.Lock()


def _linger(delta: int) -> int:
    global _lingering
    with _lingering_lock:
        _lingering += delta
        return _lingering


def _read(call: _Call, request: httpx.Request, client: httpx.Client, limits: Limits, deadline: float) -> Answer:
    try:
        response = client.send(request, stream=True)
    except httpx.TimeoutException:
        raise ReadFailed("deadline", f"no answer within {limits.deadline_s:g}s") from None
    except (httpx.HTTPError, OSError, ValueError) as exc:
        if call.cancelled:
            raise ReadFailed("deadline", f"no answer within {limits.deadline_s:g}s") from None
        raise ReadFailed("connection", f"connection failed ({type(exc).__name__})") from None
    try:
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise ReadFailed(
                "malformed", "the answer is encoded (only identity is accepted)", status=response.status_code
            )
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limits.max_bytes:
            raise ReadFailed("too-large", f"answer over {limits.max_bytes} bytes", status=response.status_code)
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_raw():  # each chunk as it arrives
            size += len(chunk)
            if size > limits.max_bytes:
                raise ReadFailed("too-large", f"answer over {limits.max_bytes} bytes", status=response.status_code)
            if time.monotonic() > deadline:
                raise ReadFailed("deadline", f"answer not read within {limits.deadline_s:g}s")
            chunks.append(chunk)
        return Answer(response.status_code, dict(response.headers), b"".join(chunks), limits)
    except httpx.TimeoutException:
        raise ReadFailed("deadline", f"answer not read within {limits.deadline_s:g}s") from None
    except (httpx.HTTPError, OSError) as exc:
        if call.cancelled:
            raise ReadFailed("deadline", f"answer not read within {limits.deadline_s:g}s") from None
        raise ReadFailed("connection", f"the answer broke off ({type(exc).__name__})") from None
    finally:
        response.close()


def request(
    method: str,
    url: str,
    *,
    limits: Limits,
    headers: Mapping[str, str] | None = None,
    content: bytes | None = None,
    data: Mapping[str, str] | None = None,
    json_body: Any = None,
    verify: ssl.SSLContext | bool = True,
) -> Answer:
    """One request read whole within ``limits`` (see the module's doc), or :class:`ReadFailed`. Any status is an
    answer; the caller decides what a non-2xx status means."""
    if _linger(0) >= MAX_LINGERING:
        raise ReadFailed("deadline", f"{MAX_LINGERING} earlier reads are still stalled")
    deadline = time.monotonic() + limits.deadline_s
    call = _Call()
    # each read waits at most the whole deadline; the deadline itself is checked between chunks and by the caller
    timeout = httpx.Timeout(limits.deadline_s)
    client = httpx.Client(verify=verify, timeout=timeout, follow_redirects=False)
    sent = {**(headers or {}), "Accept-Encoding": "identity"}
    try:
        req = client.build_request(
            method, url, headers=sent, content=content, data=data, json=json_body, extensions={"trace": call.trace}
        )
    except (httpx.HTTPError, ValueError, TypeError) as exc:
        client.close()
        raise ReadFailed("connection", f"the request could not be built ({type(exc).__name__})") from None

    def work() -> None:
        try:
            call.answer = _read(call, req, client, limits, deadline)
        except ReadFailed as exc:
            call.error = exc
        except Exception as exc:  # anything else the transport raises is a failed connection, never the caller's
            call.error = ReadFailed("connection", f"connection failed ({type(exc).__name__})")
        finally:
            client.close()
            with call.lock:
                call.done.set()
                if call.cancelled:
                    _linger(-1)

    worker = threading.Thread(target=work, name="bounded-read", daemon=True)
    worker.start()
    if not call.done.wait(max(0.0, deadline - time.monotonic())):
        with call.lock:
            finished = call.done.is_set()
            if not finished:  # the worker now lingers until its socket's shutdown ends its read
                call.cancelled = True
                _linger(+1)
            sock = call.sock
        if not finished:
            if sock is not None:
                _shutdown(sock)
            raise ReadFailed("deadline", f"no whole answer within {limits.deadline_s:g}s")
    if call.error is not None:
        raise call.error
    assert call.answer is not None
    return call.answer


__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_LINGERING",
    "Answer",
    "FailureKind",
    "Limits",
    "ReadFailed",
    "json_depth",
    "parse_json",
    "request",
]
