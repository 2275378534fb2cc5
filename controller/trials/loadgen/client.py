"""The async streaming client that sends a :class:`LoadPlan` and records what it saw (see ``docs/trials.md``).

Output length is forced with ``max_tokens`` and ``ignore_eos``. Measurement is streamed: TTFT is the first chunk
carrying a choice, ITL the gaps between later chunks, TPOT ``(e2e - ttft) / (output_tokens - 1)`` as in
``vllm bench``; token counts come from the final ``usage`` chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import aiohttp

from controller.trials.loadgen.plan import LoadPlan, PlannedRequest
from controller.trials.loadgen.report import (
    LOOP_STALL_SLACK_S,
    LOOP_TICK_S,
    LoadReport,
    RequestRecord,
    measure_adherence,
)

ProgressCallback = Callable[[int, int], None]


class _Sent:
    """Per-request tracing context: set when the request's headers are on the wire."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at: float | None = None


async def _read_stream(
    resp: aiohttp.ClientResponse, rec: RequestRecord, start: float
) -> tuple[int, float, int | None] | None:
    """Read a streamed completion to its end, timing its token chunks into ``rec`` (TTFT, inter-token gaps).
    Returns the token chunks, when the last came and the completion tokens of the final usage chunk (None without
    one); None when the server streamed an error (``rec.error`` says which)."""
    last = 0.0
    chunks = 0
    usage_tokens: int | None = None
    done = False
    # read the answer to its end: a response left unread past ``[DONE]`` (the chunked terminator
    # still on the wire) cannot go back to the pool, so every request would open a new connection
    async for raw in resp.content:
        if done or not raw.startswith(b"data:"):
            continue
        data = raw[5:].strip()
        if data == b"[DONE]":
            done = True
            continue
        now = time.perf_counter()
        if b'"choices":[{' in data and b'"usage":{' not in data and b'"error"' not in data:
            choices: list[object] = [True]  # a token chunk: no need to parse it (hot path)
            msg: dict[str, Any] = {}
        else:
            msg = json.loads(data)
            if "error" in msg and "choices" not in msg:
                rec.error = str(msg["error"])[:300]
                return None
            choices = msg.get("choices") or []
        # every chunk with a choice carries generated tokens, even when they detokenize to ""
        # (special or partial-UTF-8 tokens); token counts come from the final usage chunk
        if choices:
            if chunks == 0:
                rec.ttft_s = now - start
            else:
                rec.itl_s.append(now - last)
            chunks += 1
            last = now
        usage = msg.get("usage")
        if usage:
            usage_tokens = int(usage.get("completion_tokens", 0))
            rec.prompt_tokens = int(usage.get("prompt_tokens", rec.prompt_tokens))
    return chunks, last, usage_tokens


class LoadGenerator:
    """Async streaming client. One instance drives one run against one endpoint."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        request_timeout_s: float = 600.0,
        temperature: float = 0.0,
        progress: ProgressCallback | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/v1/completions"
        self.model = model
        self.request_timeout_s = request_timeout_s
        self.temperature = temperature
        self.progress = progress
        self._in_flight = 0
        self._max_in_flight = 0
        self._done = 0
        self.output_tokens = 0  # output tokens of the requests completed so far (live throughput)
        self._connections = 0
        self._stalls: list[tuple[float, float]] = []
        self._max_stall = 0.0

    def payload(self, req: PlannedRequest) -> bytes:
        """The request body sent for ``req``."""
        return json.dumps(
            {
                "model": self.model,
                "prompt": list(req.prompt_token_ids) if req.prompt_text is None else req.prompt_text,
                "max_tokens": req.max_tokens,
                "ignore_eos": True,  # forces max_tokens (vLLM then adds no stop ids); min_tokens would add work
                # to every engine step (a logits processor), which ``vllm bench serve`` does not ask for
                "temperature": self.temperature,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        ).encode()

    def _trace_config(self) -> aiohttp.TraceConfig:
        trace = aiohttp.TraceConfig()

        async def headers_sent(_s: object, ctx: SimpleNamespace, _p: aiohttp.TraceRequestHeadersSentParams) -> None:
            sent = ctx.trace_request_ctx
            if isinstance(sent, _Sent) and sent.at is None:
                sent.at = time.perf_counter()
                self._in_flight += 1
                self._max_in_flight = max(self._max_in_flight, self._in_flight)

        async def connection_made(_s: object, _c: SimpleNamespace, _p: aiohttp.TraceConnectionCreateEndParams) -> None:
            self._connections += 1

        trace.on_request_headers_sent.append(headers_sent)
        trace.on_connection_create_end.append(connection_made)
        return trace

    async def _watch_loop(self) -> None:
        """Wake every LOOP_TICK_S and record how much later than that the loop let us run (a stall)."""
        last = time.perf_counter()
        while True:
            await asyncio.sleep(LOOP_TICK_S)
            now = time.perf_counter()
            late = now - last - LOOP_TICK_S
            if late > LOOP_STALL_SLACK_S:
                self._stalls.append((now - late + LOOP_STALL_SLACK_S, now))
                self._max_stall = max(self._max_stall, late)
            last = now

    async def _one(
        self, session: aiohttp.ClientSession, req: PlannedRequest, t0: float, total: int, planned: float
    ) -> RequestRecord:
        rec = RequestRecord(index=req.index, prompt_tokens=req.prompt_tokens, max_tokens=req.max_tokens)
        rec.planned_s = planned - t0
        sent = _Sent()
        start = time.perf_counter()
        rec.start_s = start - t0
        try:
            async with session.post(
                self.url,
                data=self.payload(req),
                headers={"Content-Type": "application/json"},
                trace_request_ctx=sent,
            ) as resp:
                if resp.status != 200:
                    rec.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                    return rec
                read = await _read_stream(resp, rec, start)
                if read is None:
                    return rec
                chunks, last, usage_tokens = read
            rec.e2e_s = (last if chunks else time.perf_counter()) - start
            rec.output_tokens = usage_tokens if usage_tokens is not None else chunks
            if chunks == 0 or rec.output_tokens == 0:
                rec.error = "stream ended without any token"
            else:
                rec.ok = True
                self.output_tokens += rec.output_tokens
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            rec.error = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            now = time.perf_counter()
            rec.end_s = now - t0
            if sent.at is not None:
                rec.sent_s = sent.at - t0
                self._in_flight -= 1
            self._done += 1
            if self.progress is not None:
                self.progress(self._done, total)
        return rec

    async def run(
        self,
        plan: LoadPlan,
        *,
        max_duration_s: float | None = None,
        cancel: asyncio.Event | None = None,
    ) -> LoadReport:
        """Send the plan; stop issuing new requests after ``max_duration_s`` or when ``cancel`` is set (in-flight
        requests are then cancelled too). Returns what was measured."""
        n = len(plan.requests)
        self._in_flight = self._max_in_flight = self._done = self._connections = self.output_tokens = 0
        self._stalls, self._max_stall = [], 0.0
        connector = aiohttp.TCPConnector(limit=0, force_close=False, ttl_dns_cache=300, keepalive_timeout=60)
        timeout = aiohttp.ClientTimeout(total=self.request_timeout_s, sock_connect=30)
        cancel = cancel or asyncio.Event()
        records: list[RequestRecord] = []
        steady_end: list[float] = []  # closed loop: when the first stream found the plan exhausted
        cpu0, loop_cpu0 = time.process_time(), time.thread_time()
        async with aiohttp.ClientSession(
            connector=connector, timeout=timeout, trace_configs=[self._trace_config()]
        ) as session:
            watcher = asyncio.create_task(self._watch_loop())
            t0 = time.perf_counter()
            deadline = t0 + max_duration_s if max_duration_s else math.inf
            tasks: list[asyncio.Task[RequestRecord]] = []
            if plan.mode == "open":
                sem = asyncio.Semaphore(plan.concurrency) if plan.concurrency > 0 else None

                async def limited(req: PlannedRequest) -> RequestRecord:
                    if sem is None:
                        return await self._one(session, req, t0, n, t0 + req.send_at_s)
                    async with sem:
                        return await self._one(session, req, t0, n, t0 + req.send_at_s)

                for req in plan.requests:
                    now = time.perf_counter()
                    delay = min(t0 + req.send_at_s - now, deadline - now)
                    if delay > 0:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(cancel.wait(), timeout=delay)
                    if cancel.is_set() or time.perf_counter() >= deadline:
                        break
                    tasks.append(asyncio.create_task(limited(req)))
            else:
                queue = iter(plan.requests)

                async def worker() -> None:
                    freed = t0
                    for req in queue:
                        if cancel.is_set() or time.perf_counter() >= deadline:
                            break
                        rec = await self._one(session, req, t0, n, freed)
                        records.append(rec)
                        freed = t0 + (rec.end_s or 0.0)
                    steady_end.append(time.perf_counter() - t0)

                workers = [asyncio.create_task(worker()) for _ in range(min(plan.concurrency, n))]
                await _wait_or_cancel(workers, cancel)
            if tasks:
                await _wait_or_cancel(tasks, cancel)
                records.extend(t.result() for t in tasks if t.done() and not t.cancelled())
            duration = time.perf_counter() - t0
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        cpu, loop_cpu = time.process_time() - cpu0, time.thread_time() - loop_cpu0
        records.sort(key=lambda r: r.index)
        stalls = [(a - t0, b - t0) for a, b in self._stalls]
        return LoadReport(
            plan=plan,
            records=records,
            duration_s=duration,
            max_in_flight=self._max_in_flight,
            cancelled=cancel.is_set(),
            adherence=measure_adherence(
                plan,
                records,
                stalls,
                duration_s=duration,
                steady_end_s=min(steady_end) if steady_end else None,
                max_loop_stall_s=self._max_stall,
                client_cpu_s=cpu,
                loop_cpu_s=loop_cpu,
                connections_opened=self._connections,
            ),
        )


async def _wait_or_cancel(
    tasks: Sequence[asyncio.Task[object]] | Sequence[asyncio.Task[None]] | Sequence[asyncio.Task[RequestRecord]],
    cancel: asyncio.Event,
) -> None:
    """Wait for ``tasks``; if ``cancel`` is set first, cancel what is still running and wait for it to unwind."""
    waiter: asyncio.Future[object] = asyncio.ensure_future(cancel.wait())
    try:
        remaining: set[asyncio.Future[object]] = set(tasks)  # type: ignore[arg-type]
        while remaining:
            done, remaining = await asyncio.wait(remaining | {waiter}, return_when=asyncio.FIRST_COMPLETED)
            if waiter in done:
                for t in remaining:
                    t.cancel()
                await asyncio.gather(*remaining, return_exceptions=True)
                return
            remaining.discard(waiter)
    finally:
        waiter.cancel()


def run_plan(
    base_url: str,
    model: str,
    plan: LoadPlan,
    *,
    max_duration_s: float | None = None,
    progress: ProgressCallback | None = None,
    temperature: float = 0.0,
) -> LoadReport:
    """Synchronous wrapper: run ``plan`` in a fresh event loop."""
    gen = LoadGenerator(base_url, model, progress=progress, temperature=temperature)
    return asyncio.run(gen.run(plan, max_duration_s=max_duration_s))
