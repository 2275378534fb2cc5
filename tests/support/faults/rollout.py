"""Reliability scenarios around a rollout: a bad config, operator restarts in every phase, lost status writes."""

from __future__ import annotations

from functools import cache
from typing import Any

from controller.domain.phases import Phase
from controller.errors import ShiftlightError
from tests.support.faults.world import CLEARLY_BAD, CycleRecord, Outcome, SimWorld, WorldSettings, _first


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
        "blocked": (*world.status.blocked_configs, *(b.key for b in world.status.blocked_in_windows)),
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
