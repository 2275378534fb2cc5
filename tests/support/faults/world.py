"""A small simulated world to run the control loop in: the real :class:`~controller.reconcile.Reconciler` on the
in-process fleet with a :class:`~controller.clock.FakeClock` and small policies (short trials, bake times of a few
cycles), and the :class:`Outcome` row each reliability scenario reports."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from controller.adapters.notify.recording import RecordingNotifier
from controller.adapters.simulated.fleet import SimulatedCluster, SimulatedMetrics, SimulatedRouter
from controller.adapters.simulated.loadtester import SimulatedLoadTester
from controller.clock import FakeClock
from controller.decide import Rules
from controller.decide.search.optimizer import OptimizerAdvisor
from controller.domain.actions import SetWeights
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.phases import Phase
from controller.domain.rollout import Approval
from controller.domain.status import TargetStatus
from controller.domain.trial import TrialResult
from controller.policy import Policy, load_policy, profile_feasibility
from controller.ports import (
    Advisor,
    Cluster,
    LoadTester,
    TrafficRouter,
)
from controller.reconcile import Ports, Reconciler
from controller.simulator.fleet.records import FleetTick
from controller.simulator.fleet.service import SimulatedFleet
from controller.simulator.perf import PerformanceModel
from controller.simulator.profiles import load_gpu, load_model
from controller.simulator.traffic.diurnal import DiurnalTraffic
from controller.testing.faults import restart_operator

# ----- the simulated world -------------------------------------------------------------------------------------------
WORLD_START = datetime(2026, 11, 30, 11, 0, tzinfo=UTC)
#: The repository root (policies and examples are read from it).
REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class WorldSettings:
    seed: int = 7
    model: str = "nemotron-3-super-nvfp4"
    gpu: str = "gb300-dgx-station"
    policy_path: str = str(REPO / "policies" / "v1" / "hybrid-mtp-workstation.yaml")
    traffic_profile: str = "agents-flat"
    start: datetime = WORLD_START
    cycle_s: float = 60.0
    cold_start_s: float = 120.0
    bake_s: float = 120.0
    min_samples: int = 100
    max_trials: int = 4
    trial_duration_s: float = 30.0
    warmup_s: float = 5.0
    approval: str = "auto"


@dataclass(frozen=True)
class CycleRecord:
    """One control cycle as the world saw it."""

    index: int
    at: datetime
    phase_before: Phase
    phase: Phase
    route_weight: int
    """The candidate weight production actually had after the cycle acted."""
    status_weight: int | None
    actions: tuple[str, ...]
    reasons: tuple[str, ...]
    trials: tuple[TrialResult, ...]
    ticks: tuple[FleetTick, ...]
    fault: str
    """The fault active while the cycle's traffic was served ('' when none)."""
    approvals: int
    requeue_s: float

    @property
    def candidate_requests(self) -> int:
        return sum(t.variants["candidate"].requests for t in self.ticks if "candidate" in t.variants)

    @property
    def requests(self) -> int:
        return sum(v.requests for t in self.ticks for v in t.variants.values())

    @property
    def max_candidate_weight(self) -> int:
        return max((t.candidate_weight for t in self.ticks), default=0)


def world_policy(settings: WorldSettings) -> Policy:
    policy = load_policy(settings.policy_path).for_target(model=settings.model, gpu=settings.gpu)
    budget = policy.trial_budget.model_copy(
        update={
            "max_trials": settings.max_trials,
            "trial_duration_s": settings.trial_duration_s,
            "warmup_s": settings.warmup_s,
        }
    )
    # the scenarios force rollbacks by a latency ratio to stable (CLEARLY_BAD) far inside the SLO: without the
    # policy's SLO-headroom waiver, so they do not depend on the analysis's tolerances
    thresholds = policy.rollout.thresholds.model_copy(update={"slo_headroom": 0.0})
    rollout = policy.rollout.model_copy(update={"thresholds": thresholds})
    policy = policy.model_copy(update={"approval": settings.approval, "trial_budget": budget, "rollout": rollout})
    return policy.with_feasibility(profile_feasibility(policy))


Hook = Callable[["SimWorld"], None]


class SimWorld:
    """Production (the fleet), the users and one operator process, on a fake clock.

    ``wrap_*`` put fault wrappers around the simulated adapters; ``advisor`` replaces the optimizer (which then
    stays as the fallback). :meth:`cycle` advances the fleet by one cycle, runs one reconcile and records it.
    """

    def __init__(
        self,
        settings: WorldSettings | None = None,
        *,
        wrap_load_tester: Callable[[LoadTester], LoadTester] | None = None,
        wrap_cluster: Callable[[Cluster], Cluster] | None = None,
        wrap_router: Callable[[TrafficRouter], TrafficRouter] | None = None,
        advisor: Callable[[Policy, Advisor], Advisor] | None = None,
    ) -> None:
        self.settings = s = settings or WorldSettings()
        self.policy = world_policy(s)
        self.clock = FakeClock(s.start)
        self.traffic = DiurnalTraffic(s.seed, s.traffic_profile)
        self.fleet = SimulatedFleet(
            s.model, s.gpu, self.traffic, self.clock, s.seed, slo=self.policy.slo, cold_start_s=s.cold_start_s
        )
        self.perf = PerformanceModel(load_model(s.model), load_gpu(s.gpu))
        perf = self.perf
        self.optimizer = OptimizerAdvisor(
            self.policy, prior=lambda config, shape: perf.estimate(config, shape).output_tokens_per_s, seed=s.seed
        )
        self.notifier = RecordingNotifier()
        self.sim_cluster = SimulatedCluster(self.fleet)
        self.sim_router = SimulatedRouter(self.fleet)
        self.sim_load_tester = SimulatedLoadTester(s.model, s.gpu)
        self.metrics = SimulatedMetrics(self.fleet)
        chosen = advisor(self.policy, self.optimizer) if advisor is not None else self.optimizer
        self.ports = Ports(
            metrics=self.metrics,
            load_tester=wrap_load_tester(self.sim_load_tester) if wrap_load_tester else self.sim_load_tester,
            router=wrap_router(self.sim_router) if wrap_router else self.sim_router,
            advisor=chosen,
            notifier=self.notifier,
            cluster=wrap_cluster(self.sim_cluster) if wrap_cluster else self.sim_cluster,
            clock=self.clock,
            fallback_advisor=self.optimizer if chosen is not self.optimizer else None,
        )
        rules = Rules.from_policy(self.policy, self.traffic.windows)
        self.rules = replace(rules, rollout=replace(rules.rollout, bake_s=s.bake_s, min_samples=s.min_samples))
        self.target = TargetRef(namespace="prod", name="workhorse", model=s.model)
        self.status = TargetStatus()
        self.reconciler = self.build_reconciler()
        self.records: list[CycleRecord] = []
        self.restarts = 0

    def build_reconciler(self) -> Reconciler:
        return Reconciler(self.ports, self.rules, observe_window_s=self.settings.cycle_s)

    def restart(self) -> None:
        self.reconciler, self.status = restart_operator(self.status, self.build_reconciler)
        self.restarts += 1

    def fault_label(self) -> str:
        f = self.fleet.faults
        parts = [f"latency x{m:g} on {v}" for v, m in sorted(f.latency_multiplier.items()) if m != 1.0]
        parts += [f"errors {r:.0%} on {v}" for v, r in sorted(f.error_rate.items()) if r > 0]
        if f.metrics:
            parts.append(f"metrics {f.metrics}")
        if f.traffic_spike != 1.0:
            parts.append(f"traffic x{f.traffic_spike:g}")
        return ", ".join(parts)

    def cycle(self) -> CycleRecord:
        fault = self.fault_label()
        before = self.clock.now()
        self.fleet.advance(self.settings.cycle_s)
        ticks = tuple(self.fleet.ticks_between(before, self.clock.now()))
        phase_before = self.status.phase
        result = self.reconciler.reconcile(self.target, self.status)
        self.status = result.status
        actions = tuple(
            f"SetWeights {a.candidate_weight}" if isinstance(a, SetWeights) else type(a).__name__
            for a in result.plan.actions
        )
        rollout = self.status.rollout
        record = CycleRecord(
            index=len(self.records),
            at=self.clock.now(),
            phase_before=phase_before,
            phase=self.status.phase,
            route_weight=self.fleet.candidate_weight,
            status_weight=rollout.weight if rollout is not None else None,
            actions=actions,
            reasons=tuple(r.message for r in self.status.last_reasons),
            trials=result.trials,
            ticks=ticks,
            fault=fault,
            approvals=len(rollout.approvals) if rollout is not None else 0,
            requeue_s=result.requeue_after_s,
        )
        self.records.append(record)
        return record

    def run(self, cycles: int, *, before: Hook | None = None, until: Callable[[SimWorld], bool] | None = None) -> None:
        for _ in range(cycles):
            if before is not None:
                before(self)
            self.cycle()
            if until is not None and until(self):
                return

    # ----- reading back -------------------------------------------------------------------------------------------
    def applied_weights(self) -> list[int]:
        """Every candidate weight production's route was actually set to, in order."""
        return [w for _, w in self.sim_router.history]

    def trials(self) -> list[TrialResult]:
        return [t for r in self.records for t in r.trials]

    def deployed_candidates(self) -> list[EngineConfig]:
        return [c.config for c in self.sim_cluster.calls if c.op == "deploy" and c.config is not None]

    def promoted(self) -> list[str]:
        return [h for h in self.status.history if " promoted " in h]

    def phases(self) -> list[Phase]:
        return [r.phase for r in self.records]

    # ----- user actions (what shiftctl's status patches do) -------------------------------------------------------
    def approve(self, by: str = "alice") -> None:
        rollout = self.status.rollout
        assert rollout is not None
        step = rollout.step_index if rollout.weight == 0 else rollout.step_index + 1
        approval = Approval(by=by, at=self.clock.now(), step=step, decision="approved")
        self._set_rollout(approvals=(*rollout.approvals, approval))

    def set_paused(self, paused: bool) -> None:
        self._set_rollout(paused=paused)

    def _set_rollout(self, **update: Any) -> None:
        assert self.status.rollout is not None
        self.status = self.status.model_copy(update={"rollout": self.status.rollout.model_copy(update=update)})


# ----- scenarios -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """One row of the reliability table."""

    scenario: str
    fault: str
    outcome: str
    exposure: str
    recovery: str
    lost: str
    data: dict[str, Any] = field(default_factory=dict, compare=False)


def _first(records: Sequence[CycleRecord], pred: Callable[[CycleRecord], bool]) -> CycleRecord | None:
    return next((r for r in records if pred(r)), None)


#: The latency multiplier the restart, conflict and lost-write scenarios use to force a rollback at 25 %: far
#: beyond any latency trade-off a canary could have measured, so those scenarios do not depend on the analysis's
#: tolerances.
CLEARLY_BAD = 3.0
