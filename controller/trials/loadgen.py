"""Replay a :class:`TrafficShape` against an OpenAI-compatible ``/v1/completions`` endpoint and measure each request.

Design choices (see ``docs/trials.md``):

- **Prompts are token ids.** vLLM's ``/v1/completions`` accepts ``prompt`` as a list of token ids, so a prompt of
  exactly N tokens needs no tokenizer in the operator: ids are drawn uniformly from ``token_id_range`` (which must
  lie inside the model's vocabulary and away from special tokens). Output length is forced with ``max_tokens``
  and ``ignore_eos``.
- **Lengths** are log-normal with the shape's mean and cv (``LengthDistribution.lognormal_params()``), rounded,
  capped by the distribution's ``maximum`` and by ``max_model_len``.
- **Repetitive share**: a ``shape.repetitiveness`` share of requests carry a prompt made of one short motif
  repeated, the kind of context a lookup drafter (ngram, suffix) can copy from. **Prefix share**: the first
  ``prefix_share`` of every prompt comes from one shared token sequence (prefix caching hits).
- **Arrivals**: open loop sends at Poisson (``burstiness == 1``) or gamma gaps with mean ``1 / rate``, the same
  process as ``vllm bench serve --request-rate R --burstiness B``; closed loop keeps ``concurrency`` requests in
  flight. The seed fixes everything that is planned: lengths, token ids, send times.
- **Measurement** is streamed: TTFT is the first chunk carrying a choice, ITL the gaps between later chunks, TPOT
  ``(e2e - ttft) / (output_tokens - 1)`` as in ``vllm bench``; token counts come from the final ``usage`` chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import numpy as np

from controller.domain.slo import SLO
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.domain.trial import Percentiles

Mode = Literal["open", "closed"]
ProgressCallback = Callable[[int, int], None]

#: Length of the repeated motif in repetitive prompts.
MOTIF_TOKENS = 8


@dataclass(frozen=True)
class PlannedRequest:
    index: int
    send_at_s: float  # offset from the start of the run (open loop); 0 for closed loop
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    repetitive: bool = False

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)


@dataclass(frozen=True)
class LoadPlan:
    """Everything a run sends, decided up front from the shape and the seed."""

    mode: Mode
    concurrency: int  # closed loop: streams kept in flight; open loop: cap on in-flight (0 = none)
    requests: tuple[PlannedRequest, ...]
    seed: int

    @property
    def requested_output_tokens(self) -> int:
        return sum(r.max_tokens for r in self.requests)

    def fingerprint(self) -> str:
        """Stable identity of the request sequence (same seed and shape give the same fingerprint)."""
        import hashlib

        h = hashlib.sha256(f"{self.mode}|{self.concurrency}".encode())
        for r in self.requests:
            h.update(f"{r.send_at_s:.9f}|{r.max_tokens}|{r.repetitive}|".encode())
            h.update(np.asarray(r.prompt_token_ids, dtype=np.int64).tobytes())
        return h.hexdigest()[:16]


def sample_lengths(dist: LengthDistribution, n: int, rng: np.random.Generator, *, cap: int | None = None) -> list[int]:
    """``n`` integer lengths from the distribution (>= 1), capped by its maximum and ``cap``."""
    if dist.cv == 0:
        values = np.full(n, dist.mean)
    else:
        mu, sigma = dist.lognormal_params()
        values = rng.lognormal(mu, sigma, n)
    upper = min(x for x in (dist.maximum, cap) if x is not None) if (dist.maximum or cap) else None
    out = np.maximum(np.rint(values), 1).astype(np.int64)
    if upper is not None:
        out = np.minimum(out, upper)
    return [int(v) for v in out]


def plan_requests(
    shape: TrafficShape,
    *,
    num_requests: int,
    seed: int = 0,
    mode: Mode | None = None,
    burstiness: float = 1.0,
    token_id_range: tuple[int, int] = (300, 4000),
    max_model_len: int | None = None,
    max_concurrency: int | None = None,
) -> LoadPlan:
    """Plan ``num_requests`` requests that replay ``shape``. ``mode`` defaults to open loop when the shape has an
    arrival rate, closed loop otherwise."""
    if num_requests < 1:
        raise ValueError("num_requests must be >= 1")
    if burstiness <= 0:
        raise ValueError("burstiness must be > 0")
    low, high = token_id_range
    if not 0 <= low < high:
        raise ValueError(f"token_id_range must be 0 <= low < high, got {token_id_range}")
    chosen: Mode = mode or ("open" if shape.arrival_rate_rps > 0 else "closed")
    if chosen == "open" and shape.arrival_rate_rps <= 0:
        raise ValueError("open-loop replay needs a shape with arrival_rate_rps > 0")
    concurrency = max(1, math.ceil(shape.concurrency)) if chosen == "closed" else (max_concurrency or 0)
    if chosen == "closed" and max_concurrency:
        concurrency = min(concurrency, max_concurrency)

    rng = np.random.default_rng(seed)
    out_cap = max_model_len - 1 if max_model_len else None
    outputs = sample_lengths(shape.output_tokens, num_requests, rng, cap=out_cap)
    prompts = sample_lengths(shape.prompt_tokens, num_requests, rng, cap=out_cap)
    if max_model_len:
        prompts = [max(1, min(p, max_model_len - o)) for p, o in zip(prompts, outputs, strict=True)]
    repetitive = rng.random(num_requests) < shape.repetitiveness
    longest = max(prompts)
    shared_prefix = rng.integers(low, high, longest)
    if chosen == "open":
        rate = shape.arrival_rate_rps
        gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), num_requests)
        gaps[0] = 0.0
        send_at = np.cumsum(gaps)
    else:
        send_at = np.zeros(num_requests)

    planned: list[PlannedRequest] = []
    for i in range(num_requests):
        n = prompts[i]
        n_prefix = min(n, round(shape.prefix_share * n))
        body_len = n - n_prefix
        if repetitive[i]:
            motif = rng.integers(low, high, MOTIF_TOKENS)
            body = np.resize(motif, body_len)
        else:
            body = rng.integers(low, high, body_len)
        ids = np.concatenate([shared_prefix[:n_prefix], body]).astype(np.int64)
        planned.append(
            PlannedRequest(
                index=i,
                send_at_s=float(send_at[i]),
                prompt_token_ids=tuple(int(x) for x in ids),
                max_tokens=outputs[i],
                repetitive=bool(repetitive[i]),
            )
        )
    return LoadPlan(mode=chosen, concurrency=concurrency, requests=tuple(planned), seed=seed)


@dataclass
class RequestRecord:
    """What the client saw of one request. Times are seconds; ``start_s`` is relative to the run start."""

    index: int
    prompt_tokens: int
    max_tokens: int
    start_s: float = 0.0
    ok: bool = False
    error: str = ""
    ttft_s: float = 0.0
    e2e_s: float = 0.0
    output_tokens: int = 0
    itl_s: list[float] = field(default_factory=list)

    @property
    def tpot_s(self) -> float:
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1) if self.output_tokens > 1 else 0.0


def percentiles(values: Sequence[float]) -> Percentiles | None:
    if not values:
        return None
    p50, p95, p99 = (float(v) for v in np.percentile(np.asarray(values, dtype=float), [50, 95, 99]))
    return Percentiles(p50=max(p50, 0.0), p95=max(p95, p50, 0.0), p99=max(p99, p95, p50, 0.0))


@dataclass
class LoadReport:
    plan: LoadPlan
    records: list[RequestRecord]
    duration_s: float
    max_in_flight: int
    cancelled: bool = False

    @property
    def completed(self) -> list[RequestRecord]:
        return [r for r in self.records if r.ok]

    @property
    def failed(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.ok]

    def summary(self, slo: SLO | None = None) -> LoadSummary:
        """Aggregates in the units of :class:`TrialResult` (seconds, tokens/s)."""
        done = self.completed
        dur = self.duration_s if self.duration_s > 0 else 1e-9
        out_tokens = sum(r.output_tokens for r in done)
        in_tokens = sum(r.prompt_tokens for r in done)
        good = [r for r in done if slo is None or slo.request_is_good(ttft_s=r.ttft_s, tpot_s=r.tpot_s)]
        return LoadSummary(
            duration_s=self.duration_s,
            completed=len(done),
            failed=len(self.failed),
            output_tokens=out_tokens,
            prompt_tokens=in_tokens,
            output_tokens_per_s=out_tokens / dur,
            total_tokens_per_s=(out_tokens + in_tokens) / dur,
            request_throughput=len(done) / dur,
            goodput_rps=len(good) / dur,
            goodput_tokens_per_s=sum(r.output_tokens for r in good) / dur,
            ttft_s=percentiles([r.ttft_s for r in done]),
            tpot_s=percentiles([r.tpot_s for r in done if r.output_tokens > 1]),
            itl_s=percentiles([x for r in done for x in r.itl_s]),
            e2e_s=percentiles([r.e2e_s for r in done]),
            max_in_flight=self.max_in_flight,
        )


@dataclass(frozen=True)
class LoadSummary:
    duration_s: float
    completed: int
    failed: int
    output_tokens: int
    prompt_tokens: int
    output_tokens_per_s: float
    total_tokens_per_s: float
    request_throughput: float
    goodput_rps: float
    goodput_tokens_per_s: float
    ttft_s: Percentiles | None
    tpot_s: Percentiles | None
    itl_s: Percentiles | None
    e2e_s: Percentiles | None
    max_in_flight: int


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

    def _payload(self, req: PlannedRequest) -> bytes:
        return json.dumps(
            {
                "model": self.model,
                "prompt": list(req.prompt_token_ids),
                "max_tokens": req.max_tokens,
                "min_tokens": req.max_tokens,
                "ignore_eos": True,
                "temperature": self.temperature,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        ).encode()

    async def _one(self, session: aiohttp.ClientSession, req: PlannedRequest, t0: float, total: int) -> RequestRecord:
        rec = RequestRecord(index=req.index, prompt_tokens=req.prompt_tokens, max_tokens=req.max_tokens)
        self._in_flight += 1
        self._max_in_flight = max(self._max_in_flight, self._in_flight)
        start = time.perf_counter()
        rec.start_s = start - t0
        last = 0.0
        chunks = 0
        usage_tokens: int | None = None
        try:
            async with session.post(
                self.url, data=self._payload(req), headers={"Content-Type": "application/json"}
            ) as resp:
                if resp.status != 200:
                    rec.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                    return rec
                async for raw in resp.content:
                    if not raw.startswith(b"data:"):
                        continue
                    data = raw[5:].strip()
                    if data == b"[DONE]":
                        break
                    now = time.perf_counter()
                    if b'"choices":[{' in data and b'"usage":{' not in data and b'"error"' not in data:
                        choices: list[object] = [True]  # a token chunk: no need to parse it (hot path)
                        msg: dict[str, Any] = {}
                    else:
                        msg = json.loads(data)
                        if "error" in msg and "choices" not in msg:
                            rec.error = str(msg["error"])[:300]
                            return rec
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
            rec.e2e_s = time.perf_counter() - start
            rec.output_tokens = usage_tokens if usage_tokens is not None else chunks
            if chunks == 0 or rec.output_tokens == 0:
                rec.error = "stream ended without any token"
            else:
                rec.ok = True
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            rec.error = f"{type(exc).__name__}: {exc}"[:300]
        finally:
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
        self._in_flight = self._max_in_flight = self._done = 0
        connector = aiohttp.TCPConnector(limit=0, force_close=False, ttl_dns_cache=300)
        timeout = aiohttp.ClientTimeout(total=self.request_timeout_s, sock_connect=30)
        cancel = cancel or asyncio.Event()
        records: list[RequestRecord] = []
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            t0 = time.perf_counter()
            deadline = t0 + max_duration_s if max_duration_s else math.inf
            tasks: list[asyncio.Task[RequestRecord]] = []
            if plan.mode == "open":
                sem = asyncio.Semaphore(plan.concurrency) if plan.concurrency > 0 else None

                async def limited(req: PlannedRequest) -> RequestRecord:
                    if sem is None:
                        return await self._one(session, req, t0, n)
                    async with sem:
                        return await self._one(session, req, t0, n)

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
                    for req in queue:
                        if cancel.is_set() or time.perf_counter() >= deadline:
                            break
                        records.append(await self._one(session, req, t0, n))

                workers = [asyncio.create_task(worker()) for _ in range(min(plan.concurrency, n))]
                await _wait_or_cancel(workers, cancel)
            if tasks:
                await _wait_or_cancel(tasks, cancel)
                records.extend(t.result() for t in tasks if t.done() and not t.cancelled())
            duration = time.perf_counter() - t0
        records.sort(key=lambda r: r.index)
        return LoadReport(
            plan=plan,
            records=records,
            duration_s=duration,
            max_in_flight=self._max_in_flight,
            cancelled=cancel.is_set(),
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
