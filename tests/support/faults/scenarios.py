"""Reliability scenarios for degraded dependencies: metrics, advisors, canaries, traffic spikes, 409 conflicts
and drift."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from controller.advisor.graph import AgentAdvisor
from controller.advisor.scripted import ScriptedChatModel
from controller.decide.search.optimizer import OptimizerAdvisor
from controller.decide.signals import drift
from controller.domain.config import STOCK
from controller.domain.phases import Phase
from controller.domain.trial import TrialStatus
from controller.policy import Policy
from controller.ports import (
    Advisor,
    LoadTester,
)
from controller.simulator.traffic.diurnal import DiurnalTraffic
from controller.testing.faults import (
    CanaryFailure,
    ConflictBudget,
    ConflictingCluster,
    ConflictingRouter,
    FaultyLoadTester,
    GarbageAdvisor,
    UnavailableAdvisor,
    fail_always,
    fail_calls,
)
from tests.support.faults.world import CLEARLY_BAD, Outcome, SimWorld, WorldSettings, _first


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
    ended = (
        "promoted"
        if world.promoted()
        else ("rolled back" if world.status.blocked_in_windows or world.status.blocked_configs else "in progress")
    )
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
