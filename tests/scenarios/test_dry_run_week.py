"""Scenario: a TunedService in dry run on the simulator, a simulated week of diurnal traffic whose windows the
schedule would switch between, through the real control loop with a fake clock. Production (the fleet's
Deployments, their replicas and the route's weights) is byte-identical before and after; the canary pool still
measures, and status, Events and notifications say what Shiftlight would have done. (Withheld replica changes, with
managed replicas, are in ``tests/act/test_guard.py``.)"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import timedelta

import pytest

from controller.adapters.notify.recording import RecordingNotifier
from controller.adapters.simulated.fleet import SimulatedCluster, SimulatedForecaster, SimulatedMetrics, SimulatedRouter
from controller.adapters.simulated.loadtester import SimulatedLoadTester
from controller.clock import FakeClock
from controller.decide import OptimizerAdvisor, Rules
from controller.demo.model import DemoSettings
from controller.demo.run import DEMO_START, demo_policy
from controller.domain import Phase
from controller.domain.actions import Notify
from controller.domain.codes import Code
from controller.domain.observation import TargetRef
from controller.domain.status import TargetStatus
from controller.reconcile import Ports, Reconciler
from controller.simulator.fleet.service import SimulatedFleet
from controller.simulator.perf import PerformanceModel
from controller.simulator.profiles import load_gpu, load_model
from controller.simulator.traffic.diurnal import DiurnalTraffic

pytestmark = pytest.mark.slow

DAYS = 7
CYCLE_S = 300.0
TARGET = TargetRef(namespace="demo", name="workhorse", model=DemoSettings().model)


def production(fleet: SimulatedFleet) -> str:
    """Production as JSON: each Deployment's config and its replicas' ready times, and the route's weight."""
    variants = {
        name: {
            "config": v.config.model_dump(mode="json"),
            "replicas": v.replicas,
            "ready_at": [t.isoformat() for t in v.ready_at],
            "deployed_at": v.deployed_at.isoformat(),
        }
        for name, v in sorted(fleet.variants.items())
    }
    return json.dumps({"variants": variants, "candidate_weight": fleet.candidate_weight}, sort_keys=True)


@dataclass
class DryRunWeek:
    before: str
    after: str
    codes: list[str]
    statuses: list[TargetStatus]
    router: SimulatedRouter
    cluster: SimulatedCluster
    notifier: RecordingNotifier
    trials: int


@pytest.fixture(scope="module")
def week() -> DryRunWeek:
    return dry_run(DAYS)


def dry_run(days: float) -> DryRunWeek:
    """``days`` of the demo's fleet and traffic (four windows a day) under a dry-run policy, one cycle every 5
    minutes."""
    settings = DemoSettings(seed=7)
    policy = demo_policy(settings).model_copy(update={"dry_run": True})
    clock = FakeClock(DEMO_START)
    traffic = DiurnalTraffic(settings.seed, settings.traffic_profile)
    fleet = SimulatedFleet(
        settings.model, settings.gpu, traffic, clock, settings.seed, slo=policy.slo, stable_replicas=1
    )
    perf = PerformanceModel(load_model(settings.model), load_gpu(settings.gpu))
    notifier, cluster, router = RecordingNotifier(), SimulatedCluster(fleet), SimulatedRouter(fleet)
    advisor = OptimizerAdvisor(
        policy, prior=lambda config, shape: perf.estimate(config, shape).output_tokens_per_s, seed=settings.seed
    )
    ports = Ports(
        metrics=SimulatedMetrics(fleet),
        load_tester=SimulatedLoadTester(settings.model, settings.gpu),
        router=router,
        advisor=advisor,
        notifier=notifier,
        cluster=cluster,
        clock=clock,
        forecaster=SimulatedForecaster(traffic),
    )
    rules = Rules.from_policy(policy, traffic.windows)
    rules = replace(
        rules,
        rollout=replace(rules.rollout, bake_s=settings.bake_s, min_samples=settings.min_samples),
        tuning=replace(rules.tuning, max_trials=6),  # short rounds: the days are about what follows them
    )
    reconciler = Reconciler(ports, rules, observe_window_s=CYCLE_S)
    before = production(fleet)
    status = TargetStatus(replicas=1)
    codes: list[str] = []
    statuses: list[TargetStatus] = []
    trials = 0
    while clock.now() < DEMO_START + timedelta(days=days):
        fleet.advance(CYCLE_S)
        result = reconciler.reconcile(TARGET, status)
        status = result.status
        codes.extend(result.plan.codes)
        codes.extend(r.code for r in status.last_reasons)
        statuses.append(status)
        trials += len(result.trials)
    return DryRunWeek(before, production(fleet), codes, statuses, router, cluster, notifier, trials)


def test_production_is_byte_identical_after_the_dry_run(week: DryRunWeek) -> None:
    assert week.after == week.before
    assert week.router.history == []
    assert [c.op for c in week.cluster.calls if c.op != "event"] == []


def test_the_schedule_would_have_switched_and_said_so(week: DryRunWeek) -> None:
    # the canary measured, the rounds chose configs, and the schedule found switches it would make
    assert week.trials > 0
    assert Code.DRY_RUN in week.codes
    scheduled = {s.window for s in week.statuses[-1].schedule}
    assert len(scheduled) >= 2
    # no phase ever claims a rollout
    assert all(s.phase not in (Phase.ROLLING_OUT, Phase.AWAITING_APPROVAL, Phase.PAUSED) for s in week.statuses)
    assert all(s.rollout is None for s in week.statuses)
    for code in (Code.SCHEDULED_SWITCH, Code.PREWARM, Code.STARTED, Code.ROLLOUT_STARTED, Code.APPROVAL_REQUIRED):
        assert code not in week.codes


def test_notifications_and_events_say_what_would_have_happened(week: DryRunWeek) -> None:
    posted: list[Notify] = [n for _, n in week.notifier.posted]
    dry = [n for n in posted if n.code == Code.DRY_RUN]
    assert dry, [n.title for n in posted]
    assert all(n.reason.startswith("dry-run: would roll out") for n in dry)
    # said once per decision, not every cycle of the window
    assert len(dry) < len([c for c in week.codes if c == Code.DRY_RUN]) / 4
    assert not any(n.title.startswith(("Rollout", "Approval needed")) for n in posted)
    reasons = {e.reason for e in week.cluster.events}
    assert "DryRun" in reasons
    # the decisions the loop made are dry-run ones: nothing reached the act layer to withhold
    assert not [e for e in week.cluster.events if e.reason == "DryRunWithheld"]
