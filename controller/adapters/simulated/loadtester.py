"""The simulated :class:`~controller.ports.LoadTester`: trials on the replica engine, in virtual time.

A trial replays the traffic shape as a closed loop at ``shape.concurrency`` streams, rounded up to whole ones as
the trial runner's plan does (each stream sends its next request the moment the previous one finishes, like
``vllm bench serve --max-concurrency`` with an unbounded request rate), or, when the request asks for an open loop
(``TrialRequest.loop``), as Poisson arrivals at ``shape.arrival_rate_rps`` whatever the replica keeps up with
(``vllm bench serve --request-rate``): how capacity probes ask whether one replica holds the SLO at a rate, as
production's arrivals would test it.
Prompt and output lengths are drawn from the shape's log-normal distributions with the trial's seed; a
``prefix_share`` of each prompt comes from a handful of shared prefixes so the prefix cache sees realistic hits.

Measurement follows ``vllm bench serve``:

* the first ``budget.warmup_s`` seconds are warm-up; the measured window is ``[warmup, warmup + duration]``, cut
  short when ``budget.max_requests`` measured requests have finished;
* throughput counts the output tokens generated inside the window and the requests that finished inside it;
* latency percentiles use the requests that *arrived* after warm-up and finished in the window; per request
  TPOT = (e2e - TTFT) / (output tokens - 1); a request is *good* when TTFT <= ``slo.ttft_seconds`` and
  TPOT <= ``slo.tpot_seconds`` (``--goodput ttft:.. tpot:..``);
* goodput is the throughput times the share of those requests that are good (``goodput_rps``), or the share of
  their output tokens that belong to good requests (``goodput_tokens_per_s``), so it never exceeds throughput;
* speculative-decoding statistics come from the engine's counters over the window, as bench diffs ``/metrics``.

An infeasible config (the performance model says vLLM would refuse it or run out of memory) comes back as an
``infeasible`` result with the reason, never as an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from controller.domain.config import EngineConfig
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.domain.trial import Percentiles, SpecDecodeStats, TrialResult, TrialStatus
from controller.ports import TrialRequest
from controller.simulator.engine import DEFAULT_BLOCK_SIZE, DEFAULT_MAX_MODEL_LEN, ReplicaEngine, StepResult
from controller.simulator.perf import PerformanceModel
from controller.simulator.profiles import load_gpu, load_model

#: Number of distinct shared prompt prefixes when ``prefix_share > 0``.
PREFIX_GROUPS = 4


def sample_lengths(dist: LengthDistribution, n: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """``n`` token lengths from the log-normal ``dist`` (exactly ``mean`` when ``cv == 0``), at least 1."""
    if dist.cv == 0:
        values = np.full(n, dist.mean)
    else:
        mu, sigma = dist.lognormal_params()
        values = rng.lognormal(mu, sigma, n)
    if dist.maximum is not None:
        values = np.minimum(values, dist.maximum)
    lengths: npt.NDArray[np.int64] = np.maximum(np.rint(values), 1).astype(np.int64)
    return lengths


def percentiles(values: npt.NDArray[Any]) -> Percentiles:
    if len(values) == 0:
        return Percentiles(p50=0.0, p95=0.0, p99=0.0)
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return Percentiles(p50=max(float(p50), 0.0), p95=max(float(p95), 0.0), p99=max(float(p99), 0.0))


class SimulatedLoadTester:
    """Trials of ``model`` on ``gpu`` (profile names, see :mod:`controller.simulator.profiles`)."""

    def __init__(self, model: str, gpu: str, *, max_model_len: int = DEFAULT_MAX_MODEL_LEN) -> None:
        self.model = model
        self.gpu = gpu
        self.max_model_len = max_model_len
        self.perf = PerformanceModel(load_model(model), load_gpu(gpu))

    def run(self, request: TrialRequest) -> TrialResult:
        config, shape, slo = request.config, request.shape, request.slo
        reason = self.perf.feasibility(config)
        if reason is not None:
            return TrialResult(
                config=config, shape=shape, slo=slo, status=TrialStatus.INFEASIBLE, reason=reason, source="simulator"
            )
        try:
            return _Trial(self, request).run()
        except (ValueError, ArithmeticError) as exc:  # a simulator fault says nothing about the config
            return TrialResult(
                config=config,
                shape=shape,
                slo=slo,
                status=TrialStatus.FAILED,
                reason=f"simulation failed: {exc}",
                source="simulator",
            )


class _Trial:
    def __init__(self, tester: SimulatedLoadTester, request: TrialRequest) -> None:
        self.request = request
        self.config: EngineConfig = request.config
        self.shape: TrafficShape = request.shape
        self.engine = ReplicaEngine(
            tester.perf,
            request.config,
            seed=request.seed,
            max_model_len=tester.max_model_len,
            repetitiveness=request.shape.repetitiveness,
            record_token_times=False,
        )
        self.rng = np.random.default_rng([request.seed, 0x5EED])
        self.arrivals: list[float] = []
        self._prompts: npt.NDArray[np.int64] = np.zeros(0, np.int64)
        self._outputs: npt.NDArray[np.int64] = np.zeros(0, np.int64)
        self._next = 0

    def _refill(self, n: int = 1024) -> None:
        self._prompts = sample_lengths(self.shape.prompt_tokens, n, self.rng)
        self._outputs = sample_lengths(self.shape.output_tokens, n, self.rng)
        self._groups = self.rng.integers(0, PREFIX_GROUPS, n)
        self._next = 0

    def _submit(self, arrival: float | None = None) -> None:
        if self._next >= len(self._prompts):
            self._refill()
        i = self._next
        self._next += 1
        limit = self.engine.max_model_len
        prompt = int(min(self._prompts[i], limit - 1))
        output = int(min(self._outputs[i], limit - prompt))
        hashes: list[int] = []
        if self.shape.prefix_share > 0:
            blocks = int(prompt * self.shape.prefix_share) // DEFAULT_BLOCK_SIZE
            group = int(self._groups[i])
            hashes = [hash((group, b)) for b in range(blocks)]
        self.engine.add_request(prompt, output, arrival=arrival, prefix_hashes=hashes)
        self.arrivals.append(self.engine.now if arrival is None else arrival)

    def run(self) -> TrialResult:
        req = self.request
        budget = req.budget
        warmup = budget.warmup_s
        end = warmup + budget.duration_s
        streams = self.shape.closed_loop_streams()  # as on a canary: 4.4 requests in flight run on 5 streams
        k = self.config.num_speculative_tokens
        open_loop = req.loop == "open" and self.shape.arrival_rate_rps > 0
        self._start_load(open_loop, end, streams)
        tally = _Tally(per_pos=np.zeros(k, np.int64), window_end=end)
        self._drive(tally, open_loop, warmup)
        return self._result(tally, open_loop, streams)

    def _start_load(self, open_loop: bool, end: float, streams: int) -> None:
        """Open loop: Poisson arrivals at the shape's rate for the whole trial, whatever the replica keeps up with;
        closed loop: one request per stream."""
        if open_loop:
            gaps = np.random.default_rng([self.request.seed, 0xA221])
            at = float(gaps.exponential(1.0 / self.shape.arrival_rate_rps))
            while at < end:
                self._submit(arrival=at)
                at += float(gaps.exponential(1.0 / self.shape.arrival_rate_rps))
        else:
            for _ in range(streams):
                self._submit()

    def _drive(self, tally: _Tally, open_loop: bool, warmup: float) -> None:
        """Step the engine to the window's end (or its request budget), tallying the steps after warm-up; a closed
        loop sends a new request for each that finished."""
        engine = self.engine
        max_requests = self.request.budget.max_requests
        while engine.now < tally.window_end:
            result = engine.step()
            if result is None:  # idle until the next open-loop arrival (closed loops always have work)
                nxt = engine.next_arrival()
                if nxt is None or nxt >= tally.window_end:
                    break
                engine.idle_until(nxt)
                continue
            tally.steps += 1
            if warmup < result.end <= tally.window_end:
                tally.add(result, self.arrivals, warmup)
                if tally.measured >= max_requests:
                    tally.window_end = result.end
            if not open_loop:
                for _ in range(len(result.finished_ids)):
                    self._submit()

    def _result(self, tally: _Tally, open_loop: bool, streams: int) -> TrialResult:
        req = self.request
        budget = req.budget
        engine = self.engine
        warmup = budget.warmup_s
        k = self.config.num_speculative_tokens
        window_end = tally.window_end
        generated, preemptions, steps = tally.generated, tally.preemptions, tally.steps
        drafts, draft_tokens, accepted, per_pos = tally.drafts, tally.draft_tokens, tally.accepted, tally.per_pos
        kv_peak, itl = tally.kv_peak, tally.itl
        duration = max(min(engine.now, window_end) - warmup, 1e-9)
        cols = engine.finished_arrays()
        in_window = (cols["finish"] > warmup) & (cols["finish"] <= window_end + 1e-12)
        sample = in_window & (cols["arrival"] >= warmup)
        if not np.any(sample):
            sample = in_window
        if not np.any(sample):
            return TrialResult(
                config=self.config,
                shape=self.shape,
                slo=req.slo,
                status=TrialStatus.INFEASIBLE,
                reason=f"no request finished within the {budget.duration_s:g} s trial window",
                source="simulator",
                duration_s=duration,
            )
        ttft = cols["first_token"][sample] - cols["arrival"][sample]
        e2e = cols["finish"][sample] - cols["arrival"][sample]
        out = cols["output"][sample]
        tpot = np.where(out > 1, (e2e - ttft) / np.maximum(out - 1, 1), 0.0)
        good = (ttft <= req.slo.ttft_seconds) & (tpot <= req.slo.tpot_seconds)
        # requests that arrived after warm-up and were still waiting for their first token when the window closed,
        # already past the TTFT bound: misses, with a TTFT of at least their wait so far. Leaving them out would
        # measure only the lucky requests of an overloaded replica.
        cut = min(engine.now, window_end)
        waits = cut - engine.waiting_since(cut)
        late = waits[(cut - waits >= warmup) & (waits > req.slo.ttft_seconds)]
        ttft_all = np.concatenate([ttft, late])
        completed = int(np.count_nonzero(in_window))
        # goodput = throughput x the share of (post-warm-up) requests, and of their output tokens, within the SLO
        good_share = float(np.count_nonzero(good)) / (len(good) + len(late))
        out_late = float(out.mean()) * len(late)
        good_token_share = float(out[good].sum()) / max(float(out.sum()) + out_late, 1.0)
        prompt_in_window = int(cols["prompt"][in_window].sum())
        spec = None
        if k and drafts:
            spec = SpecDecodeStats(
                acceptance_rate=min(accepted / draft_tokens, 1.0),
                mean_acceptance_length=1.0 + accepted / drafts,
                per_position=tuple(float(x) / drafts for x in per_pos),
            )
        all_itl = np.concatenate(itl) if itl else np.zeros(0)
        return TrialResult(
            config=self.config,
            shape=self.shape,
            slo=req.slo,
            status=TrialStatus.MEASURED,
            source="simulator",
            duration_s=duration,
            completed=completed,
            failed=0,
            output_tokens_per_s=generated / duration,
            total_tokens_per_s=(generated + prompt_in_window) / duration,
            request_throughput=completed / duration,
            goodput_rps=completed * good_share / duration,
            goodput_tokens_per_s=generated * good_token_share / duration,
            ttft_s=percentiles(ttft_all),
            tpot_s=percentiles(tpot[out > 1]),
            itl_s=percentiles(all_itl),
            e2e_s=percentiles(e2e),
            spec_decode=spec,
            preemptions=preemptions,
            kv_cache_usage=min(kv_peak, 1.0),  # the peak, as trials on real servers report it
            log_tail=(
                f"simulated {steps} engine steps, {engine.num_requests} requests "
                + (
                    f"arriving at {self.shape.arrival_rate_rps:.2f} req/s (open loop)"
                    if open_loop
                    else f"at {streams} concurrent streams"
                ),
                f"window {duration:.1f} s after {warmup:g} s warm-up: {completed} finished, "
                f"{int(np.count_nonzero(good))}/{int(np.count_nonzero(sample)) + len(late)} within the SLO"
                + (f" ({len(late)} still waiting past the TTFT bound)" if len(late) else ""),
            ),
        )


@dataclass
class _Tally:
    """What the steps after warm-up added up to, and where the measuring window ends."""

    per_pos: npt.NDArray[np.int64]
    window_end: float
    generated: int = 0
    preemptions: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    kv_peak: float = 0.0
    itl: list[npt.NDArray[np.float64]] = field(default_factory=list)
    measured: int = 0
    """Requests that arrived after warm-up and finished."""
    steps: int = 0

    def add(self, result: StepResult, arrivals: list[float], warmup: float) -> None:
        self.generated += result.generated_tokens
        self.preemptions += result.preemptions
        self.drafts += result.num_drafts
        self.draft_tokens += result.num_draft_tokens
        self.accepted += result.num_accepted
        if len(self.per_pos):
            self.per_pos += result.accepted_per_pos
        self.kv_peak = max(self.kv_peak, result.kv_usage)
        self.itl.append(result.itl)
        for rid in result.finished_ids.tolist():
            if arrivals[rid] >= warmup:
                self.measured += 1
