"""Fault injection for tests and benchmarks: ports that fail the way real systems do, an operator "restart", a
small simulated world to run the control loop in, and the reliability scenarios ``docs/reliability.md`` tabulates.

Port wrappers (each wraps a real or simulated adapter and passes everything else through):

* :class:`FaultyLoadTester`: chosen trials come back ``infeasible`` (engine crash, CUDA OOM, startup timeout) or
  ``failed`` (the canary pool is gone), with the reason and the log tail a real launcher would report;
* :class:`ConflictingCluster` / :class:`ConflictingRouter`: every write raises
  :class:`~controller.errors.ClusterConflict` (HTTP 409) while a shared :class:`ConflictBudget` lasts;
* :class:`UnavailableAdvisor` (raises :class:`~controller.errors.AdvisorUnavailable`) and :class:`GarbageAdvisor`
  (out-of-policy, infeasible and duplicate proposals);
* :func:`restart_operator`: the status goes through its JSON wire form and a fresh Reconciler is built, as when
  the operator's pod is killed between two cycles.

:class:`SimWorld` runs the real :class:`~controller.reconcile.Reconciler` on the in-process fleet with a
:class:`~controller.clock.FakeClock` and small policies (short trials, bake times of a few cycles).
``python -m controller.testing.faults --table`` runs every scenario and prints the markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from functools import cache, partial
from pathlib import Path
from typing import Any

from controller.adapters.memory import RecordingNotifier
from controller.adapters.simulated import SimulatedCluster, SimulatedMetrics, SimulatedRouter
from controller.adapters.simulated_loadtester import SimulatedLoadTester
from controller.advisor.graph import AgentAdvisor
from controller.advisor.scripted import ScriptedChatModel
from controller.clock import FakeClock
from controller.decide import drift
from controller.decide.optimizer import OptimizerAdvisor
from controller.domain.actions import SetWeights
from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.phases import Phase
from controller.domain.status import Approval, TargetStatus
from controller.domain.trial import TrialResult, TrialStatus
from controller.errors import AdvisorUnavailable, ClusterConflict, ShiftlightError
from controller.policy import Policy, load_policy
from controller.ports import (
    Advisor,
    AdvisorContext,
    Cluster,
    LoadTester,
    Proposal,
    TrafficRouter,
    TrialRequest,
)
from controller.reconcile import Ports, Reconciler, rules_from_policy
from controller.simulator.fleet import FleetTick, SimulatedFleet
from controller.simulator.perf import PerformanceModel
from controller.simulator.profiles import load_gpu, load_model
from controller.simulator.traffic import DiurnalTraffic

__all__ = [
    "CLEARLY_BAD",
    "IN_POLICY",
    "SCENARIOS",
    "CanaryFailure",
    "ConflictBudget",
    "ConflictingCluster",
    "ConflictingRouter",
    "CycleRecord",
    "FaultyLoadTester",
    "GarbageAdvisor",
    "Outcome",
    "SimWorld",
    "UnavailableAdvisor",
    "WorldSettings",
    "canary_failure_result",
    "fail_always",
    "fail_calls",
    "garbage_configs",
    "operator_cycle",
    "render_table",
    "restart_operator",
    "run_all",
    "run_bad_input_cases",
    "run_scenario",
    "wire_roundtrip",
    "world_policy",
]


# ----- load tester ---------------------------------------------------------------------------------------------------
class CanaryFailure(StrEnum):
    CRASH = "crash"
    OOM = "oom"
    STARTUP_TIMEOUT = "startup-timeout"
    NODE_GONE = "canary-node-gone"


def canary_failure_result(request: TrialRequest, failure: CanaryFailure) -> TrialResult:
    """The TrialResult a real launcher reports when the canary fails this way (reason and vLLM-like log tail)."""
    cfg = request.config
    timeout = request.budget.startup_timeout_s
    status = TrialStatus.INFEASIBLE
    if failure is CanaryFailure.CRASH:
        reason = "engine crashed: EngineCore exited with code -11 (SIGSEGV) during CUDA graph capture"
        tail: tuple[str, ...] = (
            "INFO [gpu_model_runner.py] Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 61%",
            "ERROR [core.py] EngineCore encountered a fatal error.",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "ERROR [core_client.py] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
        )
        startup = 95.0
    elif failure is CanaryFailure.OOM:
        reason = "out of memory: CUDA OOM while profiling the KV cache (torch.OutOfMemoryError)"
        tail = (
            "INFO [gpu_worker.py] Memory profiling takes 31.2 seconds",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
            "of 251.50 GiB of which 1.12 GiB is free.",
            "RuntimeError: Engine core initialization failed. See root cause above.",
        )
        startup = 60.0
    elif failure is CanaryFailure.STARTUP_TIMEOUT:
        reason = f"startup timeout: /health not ready after {timeout:g} s"
        tail = (
            "INFO [backends.py] Using cache directory for torch.compile",
            f"INFO [gpu_model_runner.py] Capturing CUDA graphs (decode, FULL): 12% ({cfg.label()})",
            f"shiftlight: killed the canary after {timeout:g} s without a ready /health",
        )
        startup = timeout
    else:
        status = TrialStatus.FAILED
        reason = (
            "canary pool unavailable: 0/3 nodes match nodeSelector shiftlight.dev/pool=canary "
            "(node canary-0 NotReady); trials paused until the pool is back"
        )
        tail = ("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",)
        startup = 0.0
    return TrialResult(
        config=cfg,
        shape=request.shape,
        slo=request.slo,
        status=status,
        reason=reason,
        source="kubernetes",
        startup_s=startup,
        log_tail=tail,
    )


FailurePlan = Callable[[int, TrialRequest], CanaryFailure | None]


def fail_calls(failures: dict[int, CanaryFailure]) -> FailurePlan:
    """Fail the n-th trial (0-based call index) with the given failure; the others run."""
    return lambda n, _req: failures.get(n)


def fail_always(failure: CanaryFailure) -> FailurePlan:
    return lambda _n, _req: failure


class FaultyLoadTester:
    """A LoadTester whose chosen trials fail like a real canary would. ``plan(call_index, request)`` says which."""

    def __init__(self, inner: LoadTester, plan: FailurePlan) -> None:
        self.inner = inner
        self.plan = plan
        self.calls: list[tuple[TrialRequest, CanaryFailure | None]] = []

    def run(self, request: TrialRequest) -> TrialResult:
        failure = self.plan(len(self.calls), request)
        self.calls.append((request, failure))
        if failure is None:
            return self.inner.run(request)
        return canary_failure_result(request, failure)


# ----- cluster and router ------------------------------------------------------------------------------------------
@dataclass
class ConflictBudget:
    """How many more writes fail with HTTP 409 (shared by the cluster and the router wrappers)."""

    remaining: int = 0
    raised: list[str] = field(default_factory=list)

    def check(self, what: str) -> None:
        if self.remaining > 0:
            self.remaining -= 1
            self.raised.append(what)
            raise ClusterConflict(
                f"409 Conflict on {what}: the object has been modified; please apply your changes to the latest "
                "version and try again",
                delay_s=5.0,
            )


class ConflictingCluster:
    """A Cluster whose writes (deploy, scale, retire, promote and, with ``events``, Events) raise 409 while the
    budget lasts. Reads pass through."""

    def __init__(self, inner: Cluster, budget: ConflictBudget, *, events: bool = True) -> None:
        self.inner = inner
        self.budget = budget
        self.events = events

    def deploy(self, target: TargetRef, variant: str, config: EngineConfig, replicas: int) -> None:
        self.budget.check(f"deploy {variant}")
        self.inner.deploy(target, variant, config, replicas)

    def scale(self, target: TargetRef, variant: str, replicas: int) -> None:
        self.budget.check(f"scale {variant}")
        self.inner.scale(target, variant, replicas)

    def retire(self, target: TargetRef, variant: str) -> None:
        self.budget.check(f"retire {variant}")
        self.inner.retire(target, variant)

    def promote(self, target: TargetRef) -> None:
        self.budget.check("promote")
        self.inner.promote(target)

    def ready_replicas(self, target: TargetRef, variant: str) -> int:
        return self.inner.ready_replicas(target, variant)

    def external_autoscaler(self, target: TargetRef) -> str | None:
        return self.inner.external_autoscaler(target)

    def record_event(self, target: TargetRef, reason: str, message: str, *, warning: bool = False) -> None:
        if self.events:
            self.budget.check(f"event {reason}")
        self.inner.record_event(target, reason, message, warning=warning)


class ConflictingRouter:
    """A TrafficRouter whose ``set_weight`` raises 409 while the budget lasts."""

    def __init__(self, inner: TrafficRouter, budget: ConflictBudget) -> None:
        self.inner = inner
        self.budget = budget

    def get_weight(self, target: TargetRef) -> int:
        return self.inner.get_weight(target)

    def set_weight(self, target: TargetRef, candidate_weight: int) -> None:
        self.budget.check(f"route weight {candidate_weight}")
        self.inner.set_weight(target, candidate_weight)


# ----- advisors ------------------------------------------------------------------------------------------------------
class UnavailableAdvisor:
    """An advisor whose endpoint is down: every call raises :class:`AdvisorUnavailable`."""

    def __init__(self, reason: str = "LLM endpoint http://127.0.0.1:8000/v1 refused the connection") -> None:
        self.reason = reason
        self.calls = 0

    def propose(self, context: AdvisorContext) -> Sequence[Proposal]:
        self.calls += 1
        raise AdvisorUnavailable(self.reason, delay_s=30.0)


#: A config inside the hybrid-MTP workstation policy's space, the base the garbage is made from.
IN_POLICY = EngineConfig(
    speculative_method="mtp",
    num_speculative_tokens=1,
    async_scheduling=True,
    mamba_ssm_cache_dtype="float32",
    mamba_backend="flashinfer",
    max_num_seqs=256,
    max_num_batched_tokens=8192,
)


def garbage_configs(active: EngineConfig, base: EngineConfig = IN_POLICY) -> list[EngineConfig]:
    """Configs an advisor must never get trialled: out of policy, infeasible together, or the active one."""
    return [
        base.model_copy(update={"max_num_seqs": 7}),  # not an allowed value
        base.model_copy(update={"tensor_parallel_size": 8}),  # a knob the policy does not tune
        base.model_copy(update={"kv_cache_dtype": "fp8"}),  # lossy and fixed by the policy
        # every knob in policy, but CUDA graphs of 1024 cannot cover max_num_seqs 512 x (1 + 3)
        base.model_copy(update={"num_speculative_tokens": 3, "max_num_seqs": 512, "max_cudagraph_capture_size": 1024}),
        active,  # a duplicate
    ]


class GarbageAdvisor:
    """An advisor answering with configs the guardrails must refuse (see :func:`garbage_configs`)."""

    def __init__(self) -> None:
        self.calls = 0
        self.proposed: list[EngineConfig] = []

    def propose(self, context: AdvisorContext) -> Sequence[Proposal]:
        self.calls += 1
        configs = garbage_configs(context.active)
        self.proposed += configs
        return [Proposal(c, "trust me", "agent") for c in configs]


# ----- restarts ------------------------------------------------------------------------------------------------------
def wire_roundtrip(status: TargetStatus) -> TargetStatus:
    """The status as a restarted operator reads it back from the CR: JSON text and validation."""
    text = json.dumps(status.model_dump(mode="json"))
    return TargetStatus.model_validate(json.loads(text))


def restart_operator(status: TargetStatus, build: Callable[[], Reconciler]) -> tuple[Reconciler, TargetStatus]:
    """Kill the operator between two cycles: only the persisted status survives, a fresh Reconciler takes over."""
    return build(), wire_roundtrip(status)


# ----- the simulated world -------------------------------------------------------------------------------------------
WORLD_START = datetime(2026, 11, 30, 11, 0, tzinfo=UTC)
#: The repository root (policies and examples are read from it).
REPO = Path(__file__).resolve().parents[2]


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
    policy = policy.model_copy(update={"approval": settings.approval, "trial_budget": budget})
    return policy.with_feasibility(policy.profile_feasibility())


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
        rules = rules_from_policy(self.policy, self.traffic.windows)
        self.rules = replace(rules, rollout=replace(rules.rollout, bake_s=s.bake_s, min_samples=s.min_samples))
        self.target = TargetRef(namespace="prod", name="workhorse", model=s.model)
        self.status = TargetStatus()
        self.reconciler = self.build_reconciler()
        self.records: list[CycleRecord] = []
        self.restarts = 0

    def build_reconciler(self) -> Reconciler:
        return Reconciler(self.ports, self.policy, rules=self.rules, observe_window_s=self.settings.cycle_s)

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
            reasons=tuple(self.status.last_reasons),
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


def _rollout_started(world: SimWorld) -> bool:
    return world.status.rollout is not None


def _first(records: Sequence[CycleRecord], pred: Callable[[CycleRecord], bool]) -> CycleRecord | None:
    return next((r for r in records if pred(r)), None)


#: The latency multiplier the restart, conflict and lost-write scenarios use to force a rollback at 25 %: far
#: beyond any latency trade-off a canary could have measured, so those scenarios do not depend on the analysis's
#: tolerances.
CLEARLY_BAD = 3.0


def scenario_bad_config(multiplier: float = 2.0, at_weight: int = 25) -> Outcome:
    """A config that turns slow once it carries ``at_weight`` percent: rolled back, exposure bounded."""
    world = SimWorld()
    state = {"injected_at": -1}

    def inject(w: SimWorld) -> None:
        if state["injected_at"] < 0 and w.fleet.candidate_weight >= at_weight:
            w.fleet.faults.latency_multiplier["candidate"] = multiplier
            state["injected_at"] = len(w.records)

    world.run(40, before=inject, until=lambda w: w.status.phase is Phase.OBSERVING and bool(w.status.history))
    bad = [r for r in world.records if r.fault]
    rollback = _first(world.records, lambda r: "Rollback" in r.actions)
    min_fail = world.rules.rollout.min_failure_samples
    seen = 0
    enough: CycleRecord | None = None
    for r in bad:
        seen += r.candidate_requests
        if seen >= min_fail:
            enough = r
            break
    cand_bad = sum(r.candidate_requests for r in bad if rollback is None or r.index <= rollback.index)
    total_bad = sum(r.requests for r in bad if rollback is None or r.index <= rollback.index)
    max_w = max((r.max_candidate_weight for r in bad), default=0)
    cycles = rollback.index - enough.index + 1 if rollback is not None and enough is not None else -1
    reason = rollback.reasons[0] if rollback is not None else ""
    data = {
        "rolled_back": rollback is not None,
        "max_weight_while_bad": max_w,
        "candidate_requests_while_bad": cand_bad,
        "requests_while_bad": total_bad,
        "cycles_to_rollback": cycles,
        "weight_after": world.fleet.candidate_weight,
        "blocked": world.status.blocked_configs,
        "applied_weights": world.applied_weights(),
        "promoted": world.promoted(),
        "reason": reason,
        "candidate_left": world.fleet.variant("candidate") is not None,
        "world": world,
    }
    share = cand_bad / total_bad if total_bad else 0.0
    return Outcome(
        scenario="bad config",
        fault=f"candidate latency x{multiplier:g} from the {at_weight}% step on",
        outcome=(
            f"rolled back at {max_w}% ({reason.split(': ', 1)[-1]}); config blocked, never promoted"
            if rollback is not None
            else "NOT rolled back"
        ),
        exposure=f"max {max_w}% weight; {cand_bad} of {total_bad} requests ({share:.0%}) served by the bad config",
        recovery=f"rollback {cycles} cycle(s) after the analysis had {min_fail} failure samples",
        lost="nothing: stable served the rest; the candidate's samples stay in status.analyses",
        data=data,
    )


class PhaseScript:
    """Users and faults acting on the world, keyed on what they see (so restarts cannot change their timing).

    ``kind="full"``: manual approval at step 0, a pause at 25 % for two cycles, a metrics outage at 50 % for two
    cycles, promotion, then NaN metrics for two cycles while observing (Frozen).
    ``kind="rollback"``: a latency fault at 25 % (RolledBack).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.done: set[str] = set()
        self.countdown: dict[str, int] = {}

    def __call__(self, w: SimWorld) -> None:
        st, rollout = w.status, w.status.rollout
        for name in list(self.countdown):
            self.countdown[name] -= 1
            if self.countdown[name] <= 0:
                del self.countdown[name]
                if name == "pause":
                    w.set_paused(False)
                else:
                    w.fleet.faults.metrics = None
        if self.kind == "rollback":
            if rollout is not None and rollout.weight >= 25:
                w.fleet.faults.latency_multiplier["candidate"] = CLEARLY_BAD
            return
        if st.phase is Phase.AWAITING_APPROVAL and "approve" not in self.done:
            if "seen-gate" in self.done:
                w.approve("alice")
                self.done.add("approve")
            self.done.add("seen-gate")
        elif rollout is not None and rollout.weight == 25 and "pause" not in self.done:
            w.set_paused(True)
            self.done.add("pause")
            self.countdown["pause"] = 3
        elif rollout is not None and rollout.weight == 50 and "outage" not in self.done:
            w.fleet.faults.metrics = "outage"
            self.done.add("outage")
            self.countdown["outage"] = 2
        elif st.phase is Phase.OBSERVING and w.promoted() and "nan" not in self.done:
            w.fleet.faults.metrics = "nan"
            self.done.add("nan")
            self.countdown["nan"] = 2


def _script_settings(kind: str) -> WorldSettings:
    return WorldSettings(approval="manual" if kind == "full" else "auto")


def run_script(kind: str, restart_in: Phase | None) -> SimWorld:
    """Run a phase script for a fixed number of cycles, restarting the operator before every cycle that starts in
    ``restart_in``."""
    world = SimWorld(_script_settings(kind))
    script = PhaseScript(kind)

    def before(w: SimWorld) -> None:
        script(w)
        if restart_in is not None and w.status.phase is restart_in:
            w.restart()

    world.run(30 if kind == "full" else 20, before=before)
    return world


PHASE_SCRIPTS: dict[Phase, str] = {
    Phase.OBSERVING: "full",
    Phase.TRIALLING: "full",
    Phase.AWAITING_APPROVAL: "full",
    Phase.ROLLING_OUT: "full",
    Phase.PAUSED: "full",
    Phase.FROZEN: "full",
    Phase.ROLLED_BACK: "rollback",
}


@cache
def _reference(kind: str) -> SimWorld:
    return run_script(kind, None)


def scenario_restart(phase: Phase) -> Outcome:
    kind = PHASE_SCRIPTS[phase]
    ref = _reference(kind)
    world = run_script(kind, phase)
    same_weights = world.applied_weights() == ref.applied_weights()
    same_phases = world.phases() == ref.phases()
    approvals = max((r.approvals for r in world.records), default=0)
    data = {
        "restarts": world.restarts,
        "weights": world.applied_weights(),
        "reference_weights": ref.applied_weights(),
        "phases": world.phases(),
        "reference_phases": ref.phases(),
        "same_final_status": world.status.model_dump(exclude={"updated_at"})
        == ref.status.model_dump(exclude={"updated_at"}),
        "approvals": approvals,
        "world": world,
    }
    weights = "/".join(str(w) for w in world.applied_weights())
    return Outcome(
        scenario=f"operator killed in {phase.value}",
        fault=f"restart (status via JSON) before each of {world.restarts} cycles in {phase.value}",
        outcome=(
            "resumed; same phases and route weights as without restarts"
            if same_weights and same_phases
            else "DIVERGED from the run without restarts"
        ),
        exposure=f"route weights {weights} (reference {'/'.join(str(w) for w in ref.applied_weights())})",
        recovery="next cycle (no cycle lost)",
        lost=f"nothing: {approvals} approval(s) kept" if kind == "full" else "nothing",
        data=data,
    )


LOST_WRITE_ACTIONS = ("DeployCandidate", "SetWeights 25", "Promote", "Rollback")


def scenario_lost_status_write(action: str) -> Outcome:
    """The operator dies after a cycle acted but before its status write (or the write is refused): the next
    operator starts from the previous status, re-decides and re-applies the same effect."""
    world = SimWorld()
    rollback = action == "Rollback"
    state: dict[str, Any] = {"lost": False, "errors": [], "after": []}

    def finished(w: SimWorld) -> bool:
        return w.status.phase is Phase.OBSERVING and bool(w.status.history)

    for _ in range(40):
        if rollback and world.status.rollout is not None and world.status.rollout.weight >= 25:
            world.fleet.faults.latency_multiplier["candidate"] = CLEARLY_BAD
        previous = world.status
        try:
            record = world.cycle()
        except ShiftlightError as exc:  # a cycle that raised wrote nothing: the next one starts from the same status
            state["errors"].append(f"{type(exc).__name__}: {exc}")
            continue
        if state["lost"]:
            state["after"].append(record)
        if not state["lost"] and action in record.actions:
            world.status = previous
            world.restart()
            state["lost"] = True
        if state["lost"] and finished(world):
            break
    errors: list[str] = state["errors"]
    converged = finished(world) and not errors[-1:]
    data = {
        "errors": errors,
        "converged": converged,
        "weights": world.applied_weights(),
        "history": world.status.history,
        "phase": world.status.phase,
        "active": world.status.active_config,
        "world": world,
    }
    weights = "/".join(str(w) for w in world.applied_weights())
    if errors:
        outcome = f"WEDGED: {len(errors)} cycles in a row raised {errors[-1]}"
    elif converged:
        outcome = f"re-applied the same effect once and converged ({'rolled back' if rollback else 'promoted'})"
    else:
        outcome = f"did not converge (phase {world.status.phase.value})"
    return Outcome(
        scenario=f"status write lost after {action}",
        fault=f"operator killed after applying {action}, before the status write",
        outcome=outcome,
        exposure=f"route weights {weights}",
        recovery="next cycle" if not errors else "none without a human",
        lost="nothing; the effect is written twice (idempotent)" if not errors else "the operator (crash loop)",
        data=data,
    )


def scenario_metrics_missing(fault: str) -> Outcome:
    """Metrics go away (outage / NaN / empty) for three cycles while the rollout is at 25 %."""
    world = SimWorld()
    state = {"left": -1}

    def before(w: SimWorld) -> None:
        if state["left"] < 0 and w.status.rollout is not None and w.status.rollout.weight == 25:
            w.fleet.faults.metrics = fault  # type: ignore[assignment]
            state["left"] = 3
        elif state["left"] > 0:
            state["left"] -= 1
            if state["left"] == 0:
                w.fleet.faults.metrics = None

    world.run(40, before=before, until=lambda w: bool(w.promoted()))
    # records whose observation failed: the cycle ran with the fault set
    missing = [r for r in world.records if "metrics" in r.fault]
    held = all(r.phase is Phase.ROLLING_OUT and r.route_weight == 25 for r in missing)
    promoted_while_missing = any("Promote" in r.actions or "SetWeights" in " ".join(r.actions) for r in missing)
    reasons = [r.reasons for r in missing]
    after = world.records[missing[-1].index + 1 :] if missing else []
    resumed = _first(after, lambda r: any(a.startswith("SetWeights") for a in r.actions))
    data = {
        "missing_cycles": len(missing),
        "held": held,
        "moved_while_missing": promoted_while_missing,
        "reasons": reasons,
        "frozen_reasons": [world.records[r.index].reasons for r in missing],
        "promoted": world.promoted(),
        "weights": world.applied_weights(),
        "resumed_after_cycles": (resumed.index - missing[-1].index) if resumed and missing else -1,
        "world": world,
    }
    return Outcome(
        scenario=f"metrics {fault} mid-rollout",
        fault=f"Prometheus answers {fault} for {len(missing)} cycles at the 25% step",
        outcome=("held at 25%, reason in status; " if held else "NOT held; ")
        + ("promoted after metrics returned" if world.promoted() else "not promoted"),
        exposure="25% (unchanged while blind)",
        recovery=f"next step {data['resumed_after_cycles']} cycle(s) after metrics returned",
        lost="bake time only: the step's analysis resumes over all samples since the step began",
        data=data,
    )


def scenario_metrics_observing() -> Outcome:
    """A metrics outage while observing (and mid-tuning) freezes the loop; it thaws when metrics return."""
    world = SimWorld()
    state = {"left": -1}

    def before(w: SimWorld) -> None:
        if state["left"] < 0 and w.status.phase is Phase.TRIALLING and w.status.tuning is not None:
            if len(w.status.tuning.trial_keys) >= 1:
                w.fleet.faults.metrics = "outage"
                state["left"] = 2
        elif state["left"] > 0:
            state["left"] -= 1
            if state["left"] == 0:
                w.fleet.faults.metrics = None

    world.run(40, before=before, until=lambda w: bool(w.promoted()))
    frozen = [r for r in world.records if r.phase is Phase.FROZEN]
    rounds = sorted({r.reasons[0] for r in world.records if any("started tuning round" in x for x in r.reasons)})
    trials_before = [r for r in world.records if r.trials and (not frozen or r.index < frozen[0].index)]
    data = {
        "frozen_cycles": len(frozen),
        "frozen_reason": frozen[0].reasons if frozen else (),
        "actions_while_frozen": [a for r in frozen for a in r.actions],
        "promoted": world.promoted(),
        "rounds": rounds,
        "trials_before_freeze": sum(len(r.trials) for r in trials_before),
        "world": world,
    }
    return Outcome(
        scenario="metrics outage mid-tuning",
        fault="Prometheus unreachable for 2 cycles during a tuning round",
        outcome=f"Frozen for {len(frozen)} cycles (reason in status), then a new tuning round and a promotion",
        exposure="none (no traffic on a candidate)",
        recovery="observing again the cycle metrics returned",
        lost=f"the interrupted round: its {data['trials_before_freeze']} trial(s) are kept in status but re-run",
        data=data,
    )


def _check_trials(world: SimWorld) -> list[str]:
    """Every trial must have been a valid in-policy config."""
    bad = []
    for t in world.trials():
        if t.config.key() == STOCK.key():
            continue
        why = world.policy.validate_config(t.config, active=STOCK)
        if why:
            bad.append(f"{t.config.label()}: {why}")
    return bad


def scenario_advisor(kind: str) -> Outcome:
    """The advisor is down, or answers garbage: the optimizer proposes; nothing invalid is trialled."""
    holder: dict[str, Any] = {}

    def make(policy: Policy, optimizer: Advisor) -> Advisor:
        if kind == "llm-down":
            adv: Advisor = UnavailableAdvisor()
        elif kind == "garbage":
            adv = GarbageAdvisor()
        elif kind == "agent-llm-down":
            chat = ScriptedChatModel(script=[ConnectionError("connection refused: 127.0.0.1:8000")])
            assert isinstance(optimizer, OptimizerAdvisor)
            adv = AgentAdvisor(
                policy.model_copy(update={"llm": policy.llm.model_copy(update={"enabled": True})}),
                chat_model=chat,
                optimizer=optimizer,
            )
        else:  # agent-garbage: the LLM answers, but not JSON, then out-of-policy JSON
            chat = ScriptedChatModel(
                script=[
                    "Sure! I would increase max_num_seqs a lot {not json",
                    json.dumps(
                        {
                            "action": "propose",
                            "hypothesis": "bigger is better",
                            "proposals": [
                                {"base": "active", "changes": {"max_num_seqs": 4096}, "rationale": "more"},
                                {"base": "active", "changes": {"tensor_parallel_size": 8}, "rationale": "more GPUs"},
                            ],
                        }
                    ),
                ]
            )
            assert isinstance(optimizer, OptimizerAdvisor)
            adv = AgentAdvisor(
                policy.model_copy(update={"llm": policy.llm.model_copy(update={"enabled": True})}),
                chat_model=chat,
                optimizer=optimizer,
            )
            holder["chat"] = chat
        holder["advisor"] = adv
        return adv

    world = SimWorld(advisor=make)
    world.run(30, until=lambda w: bool(w.promoted()))
    proposers = world.status.tuning.trial_proposers if world.status.tuning else ()
    trial_by = [t.config.label() for t in world.trials()]
    notes = [x for r in world.records for x in r.reasons if "advisor failed" in x or "rejected" in x]
    invalid = _check_trials(world)
    promoted = world.promoted()
    data = {
        "trials": trial_by,
        "invalid_trials": invalid,
        "notes": notes,
        "promoted": promoted,
        "proposers": proposers,
        "advisor": holder["advisor"],
        "world": world,
    }
    labels = {
        "llm-down": ("advisor down", "Advisor raises AdvisorUnavailable on every call"),
        "garbage": ("advisor garbage", "Advisor proposes out-of-policy, infeasible and duplicate configs"),
        "agent-llm-down": ("LLM down (agent)", "the agent's chat model refuses connections"),
        "agent-garbage": ("LLM garbage (agent)", "the agent's chat model answers non-JSON, then out-of-policy JSON"),
    }
    name, fault = labels[kind]
    return Outcome(
        scenario=name,
        fault=fault,
        outcome=(
            f"optimizer proposed; {len(trial_by)} valid trials, {len(invalid)} invalid; "
            + ("promoted a measured config" if promoted else "no rollout")
        ),
        exposure="none: guardrails refused every bad proposal before a trial",
        recovery="same cycle (fallback advisor)",
        lost="the LLM's ideas for this round; the reasons are in status.last_reasons",
        data=data,
    )


def scenario_canary(failures: dict[int, CanaryFailure], *, name: str, max_trials: int = 6) -> Outcome:
    """Chosen canary trials crash, run out of memory or never become ready: recorded as infeasible, tuning goes on."""
    tester: dict[str, FaultyLoadTester] = {}

    def wrap(inner: LoadTester) -> LoadTester:
        tester["t"] = FaultyLoadTester(inner, fail_calls(failures))
        return tester["t"]

    world = SimWorld(WorldSettings(max_trials=max_trials), wrap_load_tester=wrap)
    world.run(30, until=lambda w: bool(w.promoted()))
    failed = [t for t in world.trials() if t.status in (TrialStatus.INFEASIBLE, TrialStatus.FAILED)]
    failed_keys = {t.config.key() for t in failed}
    deployed = [c for c in world.deployed_candidates() if c.key() in failed_keys]
    measured = [t for t in world.trials() if t.ok]
    measured_keys = {t.config.key() for t in measured}
    rolled_out = [c for c in world.deployed_candidates() if c.key() in measured_keys]
    ended = "promoted" if world.promoted() else ("rolled back" if world.status.blocked_configs else "in progress")
    data = {
        "rolled_out_measured": rolled_out,
        "failed": failed,
        "measured": len(measured),
        "deployed_failed": deployed,
        "promoted": world.promoted(),
        "world": world,
    }
    kinds = ", ".join(sorted({f.value for f in failures.values()}))
    return Outcome(
        scenario=name,
        fault=f"canary trials {sorted(n + 1 for n in failures)} fail ({kinds})",
        outcome=(
            f"{len(failed)} infeasible results with reason and log tail; tuning went on ({len(measured)} measured); "
            + f"the best measured config went to rollout ({ended})"
        ),
        exposure="none: a failed config is never deployed to production",
        recovery="same round (the next proposals run)",
        lost=f"{len(failed)} trial slot(s) of the round's budget",
        data=data,
    )


def scenario_canary_gone() -> Outcome:
    """The canary pool disappears: every trial reports FAILED with the reason (expressed through the LoadTester)."""
    tester: dict[str, FaultyLoadTester] = {}

    def wrap(inner: LoadTester) -> LoadTester:
        tester["t"] = FaultyLoadTester(inner, fail_always(CanaryFailure.NODE_GONE))
        return tester["t"]

    world = SimWorld(wrap_load_tester=wrap)
    world.run(12)
    rounds = [r for r in world.records if any("started tuning round" in x for x in r.reasons)]
    failed = [t for t in world.trials() if t.status is TrialStatus.FAILED]
    data = {
        "failed": failed,
        "trial_calls": len(tester["t"].calls),
        "rounds": len(rounds),
        "cycles": len(world.records),
        "promoted": world.promoted(),
        "deployed": world.deployed_candidates(),
        "phases": world.phases(),
        "world": world,
    }
    return Outcome(
        scenario="canary node gone",
        fault="every trial: canary pool unavailable (TrialStatus.FAILED)",
        outcome=(
            f"failed trials recorded with the reason; nothing deployed; trials paused with the reason: "
            f"{len(rounds)} round(s) ({len(failed)} trial attempts) in {len(world.records)} cycles"
        ),
        exposure="none",
        recovery="tuning resumes when the pause (the re-tune interval) ends",
        lost="the attempts of one round",
        data=data,
    )


def scenario_spike(factor: float = 3.0) -> Outcome:
    """A traffic spike hits while the rollout is at 25 %: stable and candidate both degrade."""
    world = SimWorld()
    state = {"on": False}

    def before(w: SimWorld) -> None:
        if not state["on"] and w.status.rollout is not None and w.status.rollout.weight == 25:
            w.fleet.faults.traffic_spike = factor
            state["on"] = True

    world.run(24, before=before)
    spiked = [r for r in world.records if r.fault]
    rollback = _first(spiked, lambda r: "Rollback" in r.actions)
    gate = _first(spiked, lambda r: r.phase is Phase.AWAITING_APPROVAL)
    analyses = world.status.rollout.analyses if world.status.rollout is not None else ()
    data = {
        "rolled_back": rollback is not None,
        "awaiting_approval": gate is not None,
        "reasons": [r.reasons for r in spiked],
        "analyses": analyses,
        "promoted": world.promoted(),
        "weights": world.applied_weights(),
        "final_phase": world.status.phase,
        "world": world,
    }
    if gate is not None:
        outcome = (
            f"Inconclusive (stable breaches the SLO too): waits for a human at {world.fleet.candidate_weight}%, "
            "no rollback"
        )
    elif rollback is not None:
        outcome = f"rolled back: {rollback.reasons[0]}"
    elif world.promoted():
        outcome = "candidate kept passing the analysis; promoted"
    else:
        outcome = f"held ({world.status.phase.value})"
    return Outcome(
        scenario="traffic spike mid-rollout",
        fault=f"traffic x{factor:g} from the 25% step on",
        outcome=outcome,
        exposure=(
            f"route weights {'/'.join(str(w) for w in world.applied_weights())}; "
            f"held at {world.fleet.candidate_weight}% while the verdict is open"
            if gate is not None
            else f"route weights {'/'.join(str(w) for w in world.applied_weights())}"
        ),
        recovery="a human approves or rejects (shiftctl)" if gate is not None else "n/a",
        lost="nothing" if rollback is None else "a good config (false rollback; it is now blocked)",
        data=data,
    )


CONFLICT_ARMS = {
    "step": "from the 5% step on (route and Deployment writes)",
    "rollout-start": "from the cycle that chooses a config (candidate Deployment write)",
    "rollback": "on the Deployment writes of a rollback (the route write succeeds)",
}


def scenario_conflicts(arm: str = "step", writes: int = 6) -> Outcome:
    """Writes fail with 409 for ``writes`` calls, starting where ``arm`` says (see :data:`CONFLICT_ARMS`)."""
    budget = ConflictBudget()
    rollback = arm == "rollback"
    world = SimWorld(
        wrap_cluster=lambda c: ConflictingCluster(c, budget, events=not rollback),
        wrap_router=None if rollback else (lambda r: ConflictingRouter(r, budget)),
    )
    state = {"armed": False}

    def before(w: SimWorld) -> None:
        rollout, tuning = w.status.rollout, w.status.tuning
        if state["armed"]:
            return
        step_reached = arm == "step" and rollout is not None and rollout.weight == 5
        chosen = arm == "rollout-start" and tuning is not None and len(tuning.trial_keys) >= w.rules.tuning.max_trials
        if step_reached or chosen:
            state["armed"] = True
        elif rollback and rollout is not None and rollout.weight == 25:
            w.fleet.faults.latency_multiplier["candidate"] = CLEARLY_BAD
            state["armed"] = True
        if state["armed"]:
            budget.remaining = writes

    def finished(w: SimWorld) -> bool:
        if rollback:
            return w.status.phase is Phase.OBSERVING and bool(w.status.history)
        return bool(w.promoted())

    world.run(40, before=before, until=finished)
    conflicted = [r for r in world.records if any("ClusterConflict" in x for x in r.reasons)]
    ahead = [
        r
        for r in world.records
        if r.status_weight is not None and r.phase is not Phase.OBSERVING and r.status_weight > r.route_weight
    ]
    weights = world.applied_weights()
    titles = world.notifier.titles()
    dup_notes = len(titles) - len(set(titles))
    data = {
        "conflicts": list(budget.raised),
        "conflicted_cycles": len(conflicted),
        "status_ahead_of_route": ahead,
        "weights": weights,
        "promoted": world.promoted(),
        "history": world.status.history,
        "notifications": titles,
        "duplicate_notifications": dup_notes,
        "candidate_left": world.fleet.variant("candidate") is not None,
        "world": world,
    }
    done = "rolled back, candidate retired" if rollback else "promoted"
    return Outcome(
        scenario=f"409 on writes ({arm})",
        fault=f"{writes} writes fail with 409 {CONFLICT_ARMS[arm]}",
        outcome=(
            f"{len(conflicted)} cycles kept the previous status; "
            + (f"converged: {done}" if finished(world) else "did not converge")
            + f"; route weights {'/'.join(str(w) for w in weights)}"
        ),
        exposure=(
            "status never ahead of the route"
            if not ahead
            else f"status said {ahead[0].status_weight}% while the route was already at {ahead[0].route_weight}% "
            f"for {len(ahead)} cycle(s)"
        ),
        recovery=f"{len(conflicted)} cycle(s) of delay",
        lost=(f"nothing; {dup_notes} duplicate notification(s) from retried cycles" if dup_notes else "nothing"),
        data=data,
    )


def scenario_drift() -> Outcome:
    """Traffic changes shape after a promotion: the planner's drift detector (hysteresis, dwell) starts a re-tune."""
    world = SimWorld()
    world.rules = replace(
        world.rules,
        drift=drift.DriftParams(dwell_s=2 * world.settings.cycle_s),
        schedule=replace(world.rules.schedule, retune_min_interval_s=600.0),
    )
    world.reconciler = world.build_reconciler()
    world.run(30, until=lambda w: bool(w.promoted()))
    promoted_at = len(world.records)
    world.traffic = DiurnalTraffic(world.settings.seed, "documents-flat")
    world.fleet.traffic = world.traffic

    def retuning(w: SimWorld) -> bool:
        return w.status.phase is Phase.TRIALLING

    world.run(30, until=retuning)
    after = world.records[promoted_at:]
    retune = _first(after, lambda r: r.phase is Phase.TRIALLING)
    cycles = retune.index - promoted_at + 1 if retune is not None else -1
    data = {
        "retune": retune,
        "cycles": cycles,
        "reasons": [r.reasons for r in after],
        "tuning": world.status.tuning,
        "world": world,
    }
    return Outcome(
        scenario="drift",
        fault="traffic switches from 256 agent streams to 6 long-document streams after a promotion",
        outcome=(
            f"drift detected (dwell {2 * world.settings.cycle_s:g} s); a re-tune round started on the new shape"
            if retune is not None
            else "no re-tune"
        ),
        exposure="the tuned config serves the new shape until the re-tune's rollout",
        recovery=f"re-tune {cycles} cycles after the change",
        lost="nothing",
        data=data,
    )


@dataclass(frozen=True)
class BadInputCase:
    name: str
    kind: str  # "cr" | "policy"
    expected_field: str
    error: str
    field: str
    source: str

    @property
    def named_field(self) -> bool:
        return self.field == self.expected_field and self.expected_field in self.error


_EXAMPLE_CR = REPO / "examples" / "tunedservice.yaml"
_GOOD_POLICY = """\
version: 1
name: small
space:
  max_num_seqs: [64, 128]
rollout:
  steps: [5, 25, 100]
"""


def _example_cr() -> dict[str, Any]:
    import yaml

    with open(_EXAMPLE_CR, encoding="utf-8") as fh:
        body: dict[str, Any] = yaml.safe_load(fh)
    return body


def _rollout_status() -> dict[str, Any]:
    from controller.domain.status import RolloutState

    now = WORLD_START
    rollout = RolloutState(
        id="day-1",
        from_config=STOCK,
        to_config=EngineConfig(max_num_seqs=128),
        steps=(5, 25, 100),
        step_index=1,
        weight=25,
        started_at=now,
        step_started_at=now,
        approvals=(Approval(by="alice", at=now, step=0, decision="approved"),),
    )
    status: dict[str, Any] = TargetStatus(phase=Phase.ROLLING_OUT, rollout=rollout).model_dump(mode="json")
    return status


def _set_path(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    node: Any = body
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(keys[-1])] = value
    else:
        node[keys[-1]] = value
    return body


#: (name, where, value, expected field) for TunedService bodies; ``status.*`` paths start from a rollout status.
CR_CASES: tuple[tuple[str, str, Any, str], ...] = (
    ("no deployments", "spec.workload.deployments", [], "spec.workload.deployments"),
    ("negative TTFT SLO", "spec.slo.ttft_seconds", -1, "spec.slo.ttft_seconds"),
    ("unknown approval mode", "spec.approvalMode", "sometimes", "spec.approvalMode"),
    ("replica bounds inverted", "spec.replicas.minReplicas", 9, "spec.replicas"),
    ("weight above 100", "status.rollout.weight", 150, "status.rollout.weight"),
    ("unknown phase", "status.phase", "Exploding", "status.phase"),
    (
        "approval without approver",
        "status.rollout.approvals",
        [{"by": "", "at": "2026-11-30T11:00:00Z", "step": 1, "decision": "approved"}],
        "status.rollout.approvals[0].by",
    ),
    ("empty rollout steps", "status.rollout.steps", [], "status.rollout.steps"),
)

#: (name, policy YAML, expected field)
POLICY_CASES: tuple[tuple[str, str, str], ...] = (
    ("steps not increasing", _GOOD_POLICY.replace("[5, 25, 100]", "[50, 25, 100]"), "rollout"),
    ("steps not ending at 100", _GOOD_POLICY.replace("[5, 25, 100]", "[5, 25, 50]"), "rollout"),
    ("max_num_seqs 0", _GOOD_POLICY.replace("[64, 128]", "[0, 128]"), "space.max_num_seqs[0]"),
    ("misspelt section", _GOOD_POLICY.replace("rollout:", "rolout:"), "rolout"),
    ("SLO not a number", _GOOD_POLICY + "slo:\n  tpot_seconds: fast\n", "slo.tpot_seconds"),
    ("unknown approval", _GOOD_POLICY + "approval: sometimes\n", "approval"),
)


def operator_cycle(world: SimWorld, body: dict[str, Any], policy_text: str) -> None:
    """One operator cycle from the raw inputs, the way the reactor runs it: the CR (spec and status) and the policy
    are validated first; only when both are valid does a Reconciler act on the world. Raises InvalidInput."""
    from controller.crd.models import parse_tuned_service
    from controller.policy import parse_policy

    _, status = parse_tuned_service(body)
    parse_policy(policy_text, source="policies/small.yaml")
    result = world.reconciler.reconcile(world.target, status)
    world.status = result.status


def run_bad_input_cases(world: SimWorld | None = None) -> list[BadInputCase]:
    """Feed every bad CR and policy to an operator cycle; each must fail with an :class:`InvalidInput` naming the
    field. With ``world``, the CR's status is the world's live status (a rollout in progress), corrupted per case."""
    from controller.errors import InvalidInput

    live = world.status.model_dump(mode="json") if world is not None else _rollout_status()
    out: list[BadInputCase] = []
    cases: list[tuple[str, str, str, dict[str, Any], str]] = []
    for name, path, value, expected in CR_CASES:
        body = _example_cr()
        body["status"] = json.loads(json.dumps(live))
        _set_path(body, path, value)
        cases.append((name, "cr", expected, body, _GOOD_POLICY))
    for name, text, expected in POLICY_CASES:
        body = _example_cr()
        body["status"] = json.loads(json.dumps(live))
        cases.append((name, "policy", expected, body, text))
    for name, kind, expected, body, text in cases:
        try:
            if world is not None:
                operator_cycle(world, body, text)
            else:
                from controller.crd.models import parse_tuned_service
                from controller.policy import parse_policy

                parse_tuned_service(body)
                parse_policy(text, source="policies/small.yaml")
        except InvalidInput as exc:
            out.append(BadInputCase(name, kind, expected, str(exc), exc.field, exc.source))
        else:
            out.append(BadInputCase(name, kind, expected, "accepted", "", ""))
    return out


def scenario_bad_inputs() -> Outcome:
    """Bad CRs and policies arrive while a rollout is at 25 %: one clear error naming the field, and the world (route,
    Deployments, status) is exactly as it was."""
    world = SimWorld()
    world.run(30, until=lambda w: w.status.rollout is not None and w.status.rollout.weight == 25)
    before = (world.fleet.candidate_weight, len(world.sim_cluster.calls), len(world.sim_router.history), world.status)
    cases = run_bad_input_cases(world)
    after = (world.fleet.candidate_weight, len(world.sim_cluster.calls), len(world.sim_router.history), world.status)
    named = sum(1 for c in cases if c.named_field)
    untouched = before == after
    return Outcome(
        scenario="bad CRs and policies",
        fault=f"{len(cases)} malformed TunedService specs, statuses and policy files during a rollout at 25%",
        outcome=f"{named}/{len(cases)} rejected with an error naming the source and field",
        exposure="none: " + ("route, Deployments and status untouched" if untouched else "THE WORLD CHANGED"),
        recovery="fix the input",
        lost="nothing (no half-applied status or route)",
        data={"cases": cases, "untouched": untouched, "world": world},
    )


# ----- all of it -----------------------------------------------------------------------------------------------------
SCENARIOS: dict[str, Callable[[], Outcome]] = {
    "bad-config": scenario_bad_config,
    "bad-config-x3": partial(scenario_bad_config, CLEARLY_BAD),
    **{f"restart-{p.value}": partial(scenario_restart, p) for p in PHASE_SCRIPTS},
    **{f"lost-write-{a.split()[0]}": partial(scenario_lost_status_write, a) for a in LOST_WRITE_ACTIONS},
    "metrics-outage": lambda: scenario_metrics_missing("outage"),
    "metrics-nan": lambda: scenario_metrics_missing("nan"),
    "metrics-empty": lambda: scenario_metrics_missing("empty"),
    "metrics-mid-tuning": scenario_metrics_observing,
    "llm-down": lambda: scenario_advisor("llm-down"),
    "advisor-garbage": lambda: scenario_advisor("garbage"),
    "agent-llm-down": lambda: scenario_advisor("agent-llm-down"),
    "agent-garbage": lambda: scenario_advisor("agent-garbage"),
    "canary-crash-oom-timeout": lambda: scenario_canary(
        {1: CanaryFailure.CRASH, 2: CanaryFailure.OOM, 3: CanaryFailure.STARTUP_TIMEOUT},
        name="canary crash/OOM/timeout",
    ),
    "canary-gone": scenario_canary_gone,
    "traffic-spike": scenario_spike,
    **{f"conflicts-{arm}": partial(scenario_conflicts, arm) for arm in CONFLICT_ARMS},
    "drift": scenario_drift,
    "bad-inputs": scenario_bad_inputs,
}


@cache
def run_scenario(name: str) -> Outcome:
    return SCENARIOS[name]()


def run_all() -> list[Outcome]:
    return [run_scenario(name) for name in SCENARIOS]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


TABLE_HEADER = (
    "| scenario | fault injected | what the system did | exposure | recovery | what was lost |\n"
    "|---|---|---|---|---|---|\n"
)


def render_table(outcomes: Sequence[Outcome]) -> str:
    rows = [
        "| " + " | ".join(_cell(x) for x in (o.scenario, o.fault, o.outcome, o.exposure, o.recovery, o.lost)) + " |"
        for o in outcomes
    ]
    return TABLE_HEADER + "\n".join(rows) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m controller.testing.faults")
    parser.add_argument("--table", action="store_true", help="run every scenario and print the markdown table")
    parser.add_argument("--only", nargs="*", default=None, help="scenario names to run")
    args = parser.parse_args(argv)
    names = args.only or list(SCENARIOS)
    outcomes = [run_scenario(n) for n in names]
    if args.table:
        sys.stdout.write(render_table(outcomes))
    else:
        for o in outcomes:
            sys.stdout.write(f"{o.scenario}: {o.outcome}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
