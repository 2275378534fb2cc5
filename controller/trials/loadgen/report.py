"""What a load run measured: per-request records, planned against achieved (adherence), and the summary."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from controller.domain.slo import SLO
from controller.domain.trial import Percentiles
from controller.trials.loadgen.plan import LoadPlan, Mode


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
    steady_s: float | None = None  # length of the steady phase the in-flight figures cover (None: not recorded)


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
        steady_s=max(end - start, 0.0),
    )
