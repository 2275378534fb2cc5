"""Run the whole loop on the simulator: diurnal traffic -> observe -> propose -> trial -> roll out -> schedule.

Simulated time is compressed (a day in well under a minute of CPU) and seeded; the same seed prints the same
report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from controller.adapters.notify.recording import RecordingNotifier
from controller.adapters.simulated.fleet import SimulatedCluster, SimulatedForecaster, SimulatedMetrics, SimulatedRouter
from controller.adapters.simulated.loadtester import SimulatedLoadTester
from controller.clock import FakeClock
from controller.cycle import CycleSettings, CycleSpec, cycle_for
from controller.decide import ApiPrice, DigestRules, OptimizerAdvisor
from controller.demo.model import DemoSettings, TimelinePoint
from controller.demo.progress import OnHour, hour_progress
from controller.demo.report import DemoReport, build_report
from controller.domain.config import STOCK
from controller.domain.observation import TargetRef
from controller.domain.status import TargetStatus
from controller.domain.trial import TrialResult
from controller.policy import Policy, load_policy, profile_feasibility
from controller.reconcile import Ports
from controller.simulator.fleet.records import FleetTick
from controller.simulator.fleet.service import SimulatedFleet
from controller.simulator.perf import PerformanceModel
from controller.simulator.profiles import load_gpu, load_model
from controller.simulator.traffic.diurnal import DiurnalTraffic

DEMO_START = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)


@dataclass
class DemoRun:
    settings: DemoSettings
    policy: Policy
    fleet: SimulatedFleet
    notifier: RecordingNotifier
    cluster: SimulatedCluster
    status: TargetStatus = field(default_factory=TargetStatus)
    timeline: list[TimelinePoint] = field(default_factory=list)
    trials: list[tuple[datetime, TrialResult]] = field(default_factory=list)
    actions: list[tuple[datetime, str, str]] = field(default_factory=list)
    """Each action the operator took: when, its type and its reason (what its Event says)."""


def demo_policy(settings: DemoSettings) -> Policy:
    """The policy file, pointed at the simulated model and GPU, with automatic approval so the demo runs alone, and
    the demo's rollout bake and sample count (a simulated day's rollouts judged on its own traffic)."""
    policy = load_policy(settings.policy_path).for_target(model=settings.model, gpu=settings.gpu)
    rollout = policy.rollout.model_copy(update={"bake_seconds": settings.bake_s, "min_samples": settings.min_samples})
    policy = policy.model_copy(update={"approval": "auto", "rollout": rollout})
    return policy.with_feasibility(profile_feasibility(policy))


def run_demo(settings: DemoSettings, *, on_hour: OnHour | None = None) -> DemoReport:
    """Simulate the day (``on_hour`` is told of each simulated hour as soon as it is done) and write the report."""
    run = simulate_day(settings, on_hour=on_hour)
    return build_report(run.settings, run.status, run.timeline, run.trials, run.notifier, run.actions)


def simulate_day(settings: DemoSettings, *, on_hour: OnHour | None = None) -> DemoRun:
    """The control loop over the simulated fleet for ``settings.hours``; ``on_hour`` gets each simulated hour's
    progress as soon as the hour is done (the last one, when the run ends part-way through it, at the end)."""
    policy = demo_policy(settings)
    clock = FakeClock(DEMO_START)
    traffic = DiurnalTraffic(settings.seed, settings.traffic_profile)
    fleet = SimulatedFleet(
        settings.model, settings.gpu, traffic, clock, settings.seed, slo=policy.slo, cold_start_s=settings.cold_start_s
    )
    perf = PerformanceModel(load_model(settings.model), load_gpu(settings.gpu))
    notifier = RecordingNotifier()
    cluster = SimulatedCluster(fleet)
    advisor = OptimizerAdvisor(
        policy, prior=lambda config, shape: perf.estimate(config, shape).output_tokens_per_s, seed=settings.seed
    )
    ports = Ports(
        metrics=SimulatedMetrics(fleet),
        load_tester=SimulatedLoadTester(settings.model, settings.gpu),
        router=SimulatedRouter(fleet),
        advisor=advisor,
        notifier=notifier,
        cluster=cluster,
        clock=clock,
        forecaster=SimulatedForecaster(traffic),
    )
    digest = DigestRules(
        hour=9,
        gpu_usd_per_hour=load_gpu(settings.gpu).cost_per_hour_usd,
        api=ApiPrice(
            input_per_million=settings.api_input_usd_per_million,
            output_per_million=settings.api_output_usd_per_million,
        ),
    )
    run = DemoRun(settings, policy, fleet, notifier, cluster)
    target = TargetRef(namespace="demo", name="workhorse", model=settings.model)

    def record_trial(result: TrialResult) -> None:
        run.trials.append((clock.now(), result))

    # the demo's replicas stay as the fleet starts them: no replica bounds for Shiftlight to manage
    cycle = CycleSettings(observe_window_s=settings.cycle_s, digest=digest, on_trial=record_trial)
    reconciler = cycle_for(CycleSpec(windows=traffic.windows), policy, cycle, ports)
    end = DEMO_START + timedelta(hours=settings.hours)
    stock_cache: dict[tuple[object, ...], float] = {}
    hour = DEMO_START

    def report_hours(*, partial: bool = False) -> None:
        """Tell of every hour simulated to its end (``partial``: and of the one under way)."""
        nonlocal hour
        while hour + timedelta(hours=1) <= clock.now() or (partial and hour < clock.now()):
            if on_hour is not None:
                on_hour(hour_progress(hour, DEMO_START, run.timeline, run.actions, traffic.windows))
            hour += timedelta(hours=1)

    while clock.now() < end:
        fleet.advance(settings.cycle_s)
        for tick in fleet.ticks_between(clock.now() - timedelta(seconds=settings.cycle_s), clock.now()):
            run.timeline.append(_point(tick, perf, stock_cache, run.status))
        result = reconciler.reconcile(target, run.status)
        run.status = result.status
        run.actions.extend((clock.now(), type(a).__name__, a.reason) for a in result.plan.actions)
        report_hours()
    report_hours(partial=True)
    return run


def _point(
    tick: FleetTick, perf: PerformanceModel, cache: dict[tuple[object, ...], float], status: TargetStatus
) -> TimelinePoint:
    """Tokens/s the fleet's configs deliver at this tick's concurrency, next to what the stock config would."""
    shape = tick.shape
    key = (round(shape.concurrency, 1), round(shape.prompt_tokens.mean), round(shape.output_tokens.mean))
    if key not in cache:
        est = perf.estimate(STOCK, shape)
        cache[key] = est.output_tokens_per_s if est.feasible else 0.0
    stock = cache[key]
    actual = sum(v.capacity_tokens_per_s for v in tick.variants.values())
    requests = sum(v.requests for v in tick.variants.values())
    good = sum(v.good_requests for v in tick.variants.values())
    stable = tick.variants.get("stable")
    label = stable.config.label() if stable is not None and stable.config is not None else "none"
    return TimelinePoint(
        at=tick.start,
        concurrency=shape.concurrency,
        arrival_rate=shape.arrival_rate_rps,
        prompt_mean=shape.prompt_tokens.mean,
        output_mean=shape.output_tokens.mean,
        tokens_per_s=actual,
        stock_tokens_per_s=stock,
        requests=requests,
        good_requests=good,
        candidate_weight=tick.candidate_weight,
        stable_config=label,
        phase=status.phase.value,
        gpu_seconds=sum(v.gpu_seconds for v in tick.variants.values()),
        output_tokens=sum(v.output_tokens for v in tick.variants.values()),
        prompt_tokens=sum(v.prompt_tokens for v in tick.variants.values()),
        replicas=sum(v.replicas for v in tick.variants.values()),
    )
