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
from types import SimpleNamespace
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
    planned_s: float = 0.0  # when the plan wanted it sent (open loop: its send time; closed: its stream freed)
    sent_s: float | None = None  # when its headers were on the wire (None: never sent)
    end_s: float | None = None  # when the client was done with it (answer read to the end, or failed)

    @property
    def send_lag_s(self) -> float | None:
        """How late the request went out against the plan (connection setup and client stalls included)."""
        return None if self.sent_s is None else max(self.sent_s - self.planned_s, 0.0)

    @property
    def tpot_s(self) -> float:
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1) if self.output_tokens > 1 else 0.0


def percentiles(values: Sequence[float]) -> Percentiles | None:
    if not values:
        return None
    p50, p95, p99 = (float(v) for v in np.percentile(np.asarray(values, dtype=float), [50, 95, 99]))
    return Percentiles(p50=max(p50, 0.0), p95=max(p95, p50, 0.0), p99=max(p99, p95, p50, 0.0))


#: The client's event-loop monitor wakes this often; a wake-up later than ``LOOP_TICK_S + LOOP_STALL_SLACK_S``
#: marks the time past the slack as a stall (the client could neither read answers nor send requests then).
LOOP_TICK_S = 0.01
LOOP_STALL_SLACK_S = 0.005
#: ``min_in_flight`` is the lowest mean in-flight count over any window of this length in the steady phase.
IN_FLIGHT_WINDOW_S = 0.1
_GRID_S = 0.001


@dataclass(frozen=True)
class Adherence:
    """What the run planned and what the client achieved, measured from the client's side.

    In-flight counts a request from its headers going out until its answer was read to the end; an answer
    whose end the client could read only after a stall of its event loop counts as ended when the stall began.
    Both in-flight figures cover the steady phase: closed loop from the moment every stream has sent its first
    request until the first stream finds the plan exhausted; open loop from the first to the last send.
    """

    mode: Mode
    planned_concurrency: int  # closed loop: streams to keep in flight; open loop: the in-flight cap (0 = none)
    mean_in_flight: float
    min_in_flight: float  # lowest mean over any IN_FLIGHT_WINDOW_S window of the steady phase
    planned_rate_rps: float  # open loop: the plan's send rate over the requests sent; closed loop: 0
    achieved_rate_rps: float  # open loop: sends per second between the first and the last send; closed loop: 0
    send_lag_s: Percentiles | None  # how late requests went out against the plan
    max_send_lag_s: float
    loop_stall_s: float  # total time the client's event loop was stalled during the run
    max_loop_stall_s: float  # the longest single stall
    client_cpu_s: float  # CPU time of the client's whole process over the run
    loop_cpu_s: float  # CPU time of the thread running the client's event loop
    connections_opened: int  # TCP connections the client opened (a closed loop reuses one per stream)


def in_flight_profile(
    intervals: Sequence[tuple[float, float]],
    stalls: Sequence[tuple[float, float]],
    window: tuple[float, float],
    *,
    min_window_s: float = IN_FLIGHT_WINDOW_S,
) -> tuple[float, float]:
    """``(mean, min)`` in-flight count over ``window`` from request ``(sent, end)`` intervals. A request whose end
    the client read inside a stall ``(start, end)`` of its event loop, or in the burst right after it, finished
    some time during the stall: it counts as done from the stall's start. ``min`` is the lowest mean over any
    ``min_window_s`` window (the whole window when it is shorter). Times in seconds on one clock."""
    start, end = window
    n_bins = math.ceil((end - start) / _GRID_S - 1e-9)
    if n_bins <= 0:
        return 0.0, 0.0
    grace = LOOP_TICK_S + LOOP_STALL_SLACK_S
    latest_first = sorted(stalls, reverse=True)
    delta = np.zeros(n_bins + 1)
    for lo, hi in intervals:
        for s_lo, s_hi in latest_first:  # latest first, so a chain of stalls is followed back to its start
            if lo < s_lo < hi <= s_hi + grace:
                hi = s_lo
        a, b = max(lo, start), min(hi, end)
        if b <= a:
            continue
        delta[round((a - start) / _GRID_S)] += 1
        delta[round((b - start) / _GRID_S)] -= 1
    level = np.cumsum(delta)[:n_bins]
    mean = float(level.mean())
    width = max(1, min(n_bins, round(min_window_s / _GRID_S)))
    total = np.concatenate([[0.0], np.cumsum(level)])
    return mean, float((total[width:] - total[:-width]).min() / width)


@dataclass
class LoadReport:
    plan: LoadPlan
    records: list[RequestRecord]
    duration_s: float
    max_in_flight: int
    cancelled: bool = False
    adherence: Adherence | None = None  # what was planned and achieved (None for reports built by hand)

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
            adherence=self.adherence,
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
    adherence: Adherence | None = None


class _Sent:
    """Per-request tracing context: set when the request's headers are on the wire."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at: float | None = None


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
        self._connections = 0
        self._stalls: list[tuple[float, float]] = []
        self._max_stall = 0.0

    def _payload(self, req: PlannedRequest) -> bytes:
        return json.dumps(
            {
                "model": self.model,
                "prompt": list(req.prompt_token_ids),
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
        last = 0.0
        chunks = 0
        usage_tokens: int | None = None
        done = False
        try:
            async with session.post(
                self.url,
                data=self._payload(req),
                headers={"Content-Type": "application/json"},
                trace_request_ctx=sent,
            ) as resp:
                if resp.status != 200:
                    rec.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                    return rec
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
            rec.e2e_s = (last if chunks else time.perf_counter()) - start
            rec.output_tokens = usage_tokens if usage_tokens is not None else chunks
            if chunks == 0 or rec.output_tokens == 0:
                rec.error = "stream ended without any token"
            else:
                rec.ok = True
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
        self._in_flight = self._max_in_flight = self._done = self._connections = 0
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


def measure_adherence(
    plan: LoadPlan,
    records: Sequence[RequestRecord],
    stalls: Sequence[tuple[float, float]],
    *,
    duration_s: float,
    steady_end_s: float | None = None,
    max_loop_stall_s: float = 0.0,
    client_cpu_s: float = 0.0,
    loop_cpu_s: float = 0.0,
    connections_opened: int = 0,
) -> Adherence:
    """Planned against achieved, from the records of one run (times relative to its start)."""
    sent = sorted(r.sent_s for r in records if r.sent_s is not None)
    intervals = [(r.sent_s, r.end_s if r.end_s is not None else duration_s) for r in records if r.sent_s is not None]
    lags = [lag for r in records if (lag := r.send_lag_s) is not None]
    planned_rate = achieved_rate = 0.0
    if plan.mode == "closed":
        streams = min(plan.concurrency, len(plan.requests))
        # every stream is up once the first ``streams`` requests are out (each stream's first request is sent
        # before any stream sends its second)
        start = sent[streams - 1] if len(sent) >= streams else (sent[-1] if sent else 0.0)
        end = steady_end_s if steady_end_s is not None else duration_s
    else:
        start, end = (sent[0], sent[-1]) if sent else (0.0, 0.0)
        by_plan = sorted(r.planned_s for r in records if r.sent_s is not None)
        if len(sent) > 1 and by_plan[-1] > by_plan[0]:
            planned_rate = (len(by_plan) - 1) / (by_plan[-1] - by_plan[0])
        if len(sent) > 1 and end > start:
            achieved_rate = (len(sent) - 1) / (end - start)
    if end <= start:  # too short for a steady phase: judge the whole run
        start, end = (sent[0] if sent else 0.0), duration_s
    mean, low = in_flight_profile(intervals, stalls, (start, end))
    return Adherence(
        mode=plan.mode,
        planned_concurrency=plan.concurrency,
        mean_in_flight=mean,
        min_in_flight=low,
        planned_rate_rps=planned_rate,
        achieved_rate_rps=achieved_rate,
        send_lag_s=percentiles(lags),
        max_send_lag_s=max(lags, default=0.0),
        loop_stall_s=sum(b - a for a, b in stalls),
        max_loop_stall_s=max_loop_stall_s,
        client_cpu_s=client_cpu_s,
        loop_cpu_s=loop_cpu_s,
        connections_opened=connections_opened,
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
