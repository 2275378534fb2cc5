"""The trial runner: the real :class:`~controller.ports.LoadTester`.

launch -> wait ready -> warm up -> scrape /metrics -> replay the shape (sampling KV usage) -> scrape /metrics ->
(quality gate) -> tear down -> :class:`TrialResult`. Every way a candidate can fail (refused flag, crash, OOM,
start-up timeout) comes back as an ``infeasible`` result with the engine's reason and last log lines; only a
broken measurement (load generator, metrics, cancel) is ``failed``. The load generator runs in its own process
(:mod:`controller.trials.loadgen.worker`); a replay in which it did not keep its plan
(:mod:`controller.trials.verdict.validity`) is ``invalid``, retried once on a fresh engine, and never cached.
The result each ending comes to is built in :mod:`controller.trials.results`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

import httpx

from controller.domain.config import EngineConfig
from controller.domain.trial import Percentiles, TrialResult, TrialStatus
from controller.errors import MetricsUnavailable, ShiftlightError
from controller.ports import TrialRequest
from controller.trials.cache import TrialCache, TrialKey
from controller.trials.engine.launchers import Launch, Launcher
from controller.trials.engine.log import engine_reason
from controller.trials.loadgen.process import LoadClientFailed, ReplayProgress, replay_in_worker, replay_inline
from controller.trials.loadgen.replay import LoadPlan, LoadReport, plan_requests
from controller.trials.loadgen.warmup import WarmupRound, WarmupRule, WarmupVerdict, warm_until_steady
from controller.trials.loadgen.worker import WorkerSettings
from controller.trials.results import Verdict, cancelled, crashed, measured, none_completed
from controller.trials.verdict.metrics_delta import GaugeSampler, MetricsDelta, delta, scrape
from controller.trials.verdict.quality import QualityGate
from controller.trials.verdict.validity import ValidityRules, misses
from controller.trials.verdict.validity import codes as miss_codes
from controller.trials.verdict.validity import reason as invalid_reason

#: ``progress(phase, done, total)``; phases: launch, warmup, replay, quality, teardown, done.
ProgressReport = Callable[[str, int, int], None]


@dataclass(frozen=True)
class RunnerSettings:
    """How trials are shaped; the budget (duration, request cap, start-up timeout) comes with each request."""

    mode: Literal["open", "closed"] | None = None  # None: open loop when the shape has an arrival rate
    burstiness: float = 1.0
    token_id_range: tuple[int, int] = (300, 4000)
    max_model_len: int | None = None
    warmup_requests: int = 4
    warmup_rule: WarmupRule | None = None  # set: warm up in rounds until steady (warmup.py), not by count
    request_timeout_s: float = 600.0
    temperature: float = 0.0
    sample_interval_s: float = 1.0
    client: Literal["process", "inline"] = "process"  # inline: in the caller's process (CLI and tests only)
    client_cpus: tuple[int, ...] | None = None  # pin the load generator process to these cores
    validity: ValidityRules = field(default_factory=ValidityRules)
    invalid_retries: int = 1  # an invalid trial is run again this many times on a fresh engine


def compressed(request: TrialRequest, scale: float) -> TrialRequest:
    """The request as an engine running ``scale`` times faster than real time sees it (SLO and budget in wall time)."""
    slo = request.slo.model_copy(
        update={"ttft_seconds": request.slo.ttft_seconds / scale, "tpot_seconds": request.slo.tpot_seconds / scale}
    )
    budget = replace(
        request.budget, duration_s=request.budget.duration_s / scale, warmup_s=request.budget.warmup_s / scale
    )
    return replace(request, slo=slo, budget=budget)


def in_engine_time(result: TrialResult, scale: float, request: TrialRequest) -> TrialResult:
    """A result measured in wall time against an engine ``scale`` times faster than real time, in engine time."""

    def slower(p: Percentiles | None) -> Percentiles | None:
        return None if p is None else Percentiles(p50=p.p50 * scale, p95=p.p95 * scale, p99=p.p99 * scale)

    return result.model_copy(
        update={
            "slo": request.slo,
            "shape": request.shape,
            "duration_s": result.duration_s * scale,
            "output_tokens_per_s": result.output_tokens_per_s / scale,
            "total_tokens_per_s": result.total_tokens_per_s / scale,
            "request_throughput": result.request_throughput / scale,
            "goodput_rps": result.goodput_rps / scale,
            "goodput_tokens_per_s": result.goodput_tokens_per_s / scale,
            "ttft_s": slower(result.ttft_s),
            "tpot_s": slower(result.tpot_s),
            "itl_s": slower(result.itl_s),
            "e2e_s": slower(result.e2e_s),
        }
    )


class TrialRunner:
    """Runs one trial at a time through a :class:`Launcher`; implements the ``LoadTester`` port."""

    def __init__(
        self,
        launcher: Launcher,
        *,
        model: str,
        gpu_type: str,
        engine_version: str,
        settings: RunnerSettings | None = None,
        cache: TrialCache | None = None,
        quality_gate: QualityGate | None = None,
        gate_if: Callable[[EngineConfig], bool] | None = None,
        progress: ProgressReport | None = None,
        replay_progress: Callable[[ReplayProgress], None] | None = None,
    ) -> None:
        """``quality_gate`` runs on configs for which ``gate_if`` (the policy's "lossy knobs" test) is true;
        with ``gate_if=None`` every config is gated."""
        self.launcher = launcher
        self.model = model
        self.gpu_type = gpu_type
        self.engine_version = engine_version
        self.settings = settings or RunnerSettings()
        self.cache = cache
        self.quality_gate = quality_gate
        self.gate_if = gate_if
        self.progress = progress
        self.replay_progress = replay_progress  # each progress line of the replay (elapsed, live throughput)
        self._cancel = threading.Event()
        self.runs = 0  # trials actually executed (cache hits excluded)

    # ----- public -------------------------------------------------------------------------------
    def cancel(self) -> None:
        """Stop the running trial as soon as possible; it returns a ``failed`` result marked cancelled."""
        self._cancel.set()

    def gated(self, config: EngineConfig) -> bool:
        """Whether the quality gate covers ``config`` (a cached result of it is served only with a passed report)."""
        return self.quality_gate is not None and (self.gate_if is None or self.gate_if(config))

    def key(self, request: TrialRequest) -> TrialKey:
        return TrialKey.of(
            model=self.model,
            gpu_type=self.gpu_type,
            engine_version=self.engine_version,
            config=request.config,
            shape=request.shape,
        )

    def plan(self, request: TrialRequest) -> LoadPlan:
        s = self.settings
        shape, budget = request.shape, request.budget
        mode = request.loop or s.mode or ("open" if shape.arrival_rate_rps > 0 else "closed")
        if mode == "open":
            n = max(1, min(budget.max_requests, math.ceil(shape.arrival_rate_rps * budget.duration_s)))
        else:
            n = max(1, budget.max_requests)
        return plan_requests(
            shape,
            num_requests=n,
            seed=request.seed,
            mode=mode,
            burstiness=s.burstiness,
            token_id_range=s.token_id_range,
            max_model_len=s.max_model_len,
        )

    def run(self, request: TrialRequest) -> TrialResult:
        key = self.key(request)
        if self.cache is not None and not request.fresh:
            cached = self.cache.lookup(key, request, gated=self.gated(request.config), gate=self.quality_gate)
            if cached is not None:
                self._report("done", 1, 1)
                return cached
        self._cancel.clear()
        scale = float(getattr(self.launcher, "time_scale", 1.0))
        timed = compressed(request, scale) if scale != 1.0 else request
        # an invalid replay is retried on a fresh engine: a replay on the engine that already served the plan
        # would find its prompts in the prefix cache and flatter the retry
        for _ in range(1 + max(0, self.settings.invalid_retries)):
            result = self._run_uncached(timed)
            self.runs += 1
            if result.status is not TrialStatus.INVALID or self._cancel.is_set():
                break
        if scale != 1.0:
            result = in_engine_time(result, scale, request)
        if self.cache is not None and result.status not in (TrialStatus.FAILED, TrialStatus.INVALID):
            self.cache.put(key, result)
        return result

    # ----- internals ----------------------------------------------------------------------------
    def _report(self, phase: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(phase, done, total)

    def _base(self, request: TrialRequest) -> dict[str, object]:
        return {
            "config": request.config,
            "shape": request.shape,
            "slo": request.slo,
            "source": self.launcher.source,
        }

    def _run_uncached(self, request: TrialRequest) -> TrialResult:
        base = self._base(request)
        self._report("launch", 0, 1)
        launch = self.launcher.start(request.config, timeout_s=request.budget.startup_timeout_s)
        self._report("launch", 1, 1)
        try:
            if not launch.ready:
                tail = launch.log_tail or self.launcher.logs(launch)
                return TrialResult(
                    **base,
                    status=TrialStatus.INFEASIBLE,
                    reason=engine_reason(launch.error, tail),
                    startup_s=launch.startup_s,
                    log_tail=tuple(tail),
                )
            return self._measure(request, launch, base)
        finally:
            self._report("teardown", 0, 1)
            self.launcher.stop(launch)
            self._report("teardown", 1, 1)

    def _alive(self, launch: Launch) -> bool:
        try:
            return httpx.get(launch.endpoint + "/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def _replay(self, launch: Launch, plan: LoadPlan, phase: str, max_duration_s: float | None) -> LoadReport:
        s = self.settings

        def progress(p: ReplayProgress) -> None:
            self._report(phase, p.done, p.total)
            if phase == "replay" and self.replay_progress is not None:
                self.replay_progress(p)

        settings = WorkerSettings(
            base_url=launch.endpoint,
            model=launch.model,
            request_timeout_s=s.request_timeout_s,
            temperature=s.temperature,
            max_duration_s=max_duration_s or None,
        )
        if s.client == "inline":
            return replay_inline(plan, settings, progress=progress, cancelled=self._cancel.is_set)
        return replay_in_worker(plan, settings, progress=progress, cancelled=self._cancel.is_set, cpus=s.client_cpus)

    def _warm_until_steady(
        self, request: TrialRequest, launch: Launch, rule: WarmupRule, budget_s: float
    ) -> WarmupVerdict:
        """Warm-up rounds at the trial's concurrency (closed loop, fresh prompts each round) until ``rule`` says
        the engine is steady or the warm-up's time is spent."""
        s = self.settings
        streams = request.shape.closed_loop_streams() if request.shape.concurrency > 0 else 4

        def run_round(i: int) -> WarmupRound:
            plan = plan_requests(
                request.shape,
                num_requests=rule.round_requests(streams),
                seed=request.seed + 1_000_003 + i,
                mode="closed",
                token_id_range=s.token_id_range,
                max_model_len=s.max_model_len,
                max_concurrency=streams,
            )
            summary = self._replay(launch, plan, "warmup", budget_s).summary()
            return WarmupRound(summary.output_tokens_per_s, summary.tpot_s.p50 if summary.tpot_s else None)

        return warm_until_steady(run_round, rule, budget_s=budget_s)

    def _measure(self, request: TrialRequest, launch: Launch, base: dict[str, object]) -> TrialResult:
        plan = self.plan(request)
        try:
            warmed = self._warm_up(request, launch, base)
            if isinstance(warmed, TrialResult):
                return warmed
            base = warmed  # every result from here on records the warm-up rounds
            if self._cancel.is_set():
                return cancelled(base, launch)
            report, server = self._replay_sampled(request, launch, plan)
        except MetricsUnavailable as exc:
            if not self._alive(launch):
                return crashed(
                    base, launch, f"engine stopped answering during the trial ({exc})", self.launcher.logs(launch)
                )
            return TrialResult(
                **base,
                status=TrialStatus.FAILED,
                reason=f"server metrics unavailable: {exc}",
                startup_s=launch.startup_s,
            )
        except LoadClientFailed as exc:
            if self._cancel.is_set():
                return cancelled(base, launch)
            return TrialResult(**base, status=TrialStatus.FAILED, reason=str(exc), startup_s=launch.startup_s)
        if report.cancelled or self._cancel.is_set():
            return cancelled(base, launch)
        if report.failed and not self._alive(launch):
            return crashed(base, launch, "engine crashed during the trial", self.launcher.logs(launch))
        if not report.completed:
            return none_completed(base, launch, report, self.launcher.logs(launch))
        verdict = self._verdict(request, launch, base, report)
        if isinstance(verdict, TrialResult):
            return verdict
        return measured(base, launch, report, report.summary(request.slo), server, verdict)

    def _warm_up(
        self, request: TrialRequest, launch: Launch, base: dict[str, object]
    ) -> dict[str, object] | TrialResult:
        """Warm the engine up (until steady, or a fixed number of requests): the base of every later result, or
        the INVALID result of an engine that never settled."""
        s = self.settings
        budget = request.budget
        if s.warmup_rule is not None and budget.warmup_s > 0:
            verdict = self._warm_until_steady(request, launch, s.warmup_rule, budget.warmup_s)
            base = {**base, "warmup_rounds": verdict.rounds}
            if not verdict.steady:
                return TrialResult(
                    **base, status=TrialStatus.INVALID, reason=verdict.describe(), startup_s=launch.startup_s
                )
        elif s.warmup_requests > 0 and budget.warmup_s > 0:
            warm = plan_requests(
                request.shape,
                num_requests=s.warmup_requests,
                seed=request.seed + 1_000_003,
                mode="closed",
                token_id_range=s.token_id_range,
                max_model_len=s.max_model_len,
                max_concurrency=s.warmup_requests,
            )
            self._replay(launch, warm, "warmup", budget.warmup_s)
        return base

    def _replay_sampled(self, request: TrialRequest, launch: Launch, plan: LoadPlan) -> tuple[LoadReport, MetricsDelta]:
        """Replay the trial's plan while the server's metrics are scraped before, sampled during and scraped after."""
        before = scrape(launch.endpoint)
        with GaugeSampler(launch.endpoint, interval_s=self.settings.sample_interval_s) as sampler:
            report = self._replay(launch, plan, "replay", request.budget.duration_s)
        after = scrape(launch.endpoint)
        return report, delta(before, after, kv_peak=sampler.kv_peak)

    def _verdict(
        self, request: TrialRequest, launch: Launch, base: dict[str, object], report: LoadReport
    ) -> Verdict | TrialResult:
        """MEASURED, INVALID (the load missed the validity rules) or REJECTED (the quality gate failed); a result
        when the quality gate could not run."""
        if missed := misses(report.adherence, self.settings.validity):
            return Verdict(TrialStatus.INVALID, invalid_reason(missed), invalid_codes=miss_codes(missed))
        if self.quality_gate is None or not self.gated(request.config):
            return Verdict(TrialStatus.MEASURED)
        self._report("quality", 0, 1)
        try:
            quality = self.quality_gate.evaluate(launch.endpoint, launch.model)
        except ShiftlightError as exc:
            if not self._alive(launch):
                return crashed(
                    base,
                    launch,
                    f"engine stopped answering during the quality gate ({exc})",
                    self.launcher.logs(launch),
                )
            return TrialResult(
                **base,
                status=TrialStatus.FAILED,
                reason=f"quality gate could not run: {exc}",
                startup_s=launch.startup_s,
            )
        self._report("quality", 1, 1)
        if not quality.passed:
            return Verdict(TrialStatus.REJECTED, f"quality gate: {quality.reason}", quality)
        return Verdict(TrialStatus.MEASURED, "", quality)
