"""Progressive rollout: weighted steps, bake time, automatic rollback.

Pure: takes the rollout state, the latest observation and ``now``; returns the next state and actions. Each step's
data is judged by :func:`controller.decide.rollout.analysis.analyse` (candidate vs stable; importable from here too).
The candidate replicas each step runs, and a pre-validated swap's surge, are sized in
:mod:`controller.decide.rollout.sizing`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from controller.decide.rollout.analysis import (
    Analysis,
    analyse,
)
from controller.decide.rollout.sizing import Swap, candidate_need, candidate_replicas_for
from controller.decide.rules import RolloutRules
from controller.domain.actions import (
    Action,
    DeployCandidate,
    Notify,
    Promote,
    RequestApproval,
    Rollback,
    Scale,
    SetWeights,
    Severity,
)
from controller.domain.codes import Code
from controller.domain.config import EngineConfig
from controller.domain.observation import Observation
from controller.domain.phases import Phase
from controller.domain.rollout import AnalysisRecord, RolloutState
from controller.domain.slo import SLO


@dataclass(frozen=True)
class RolloutStep:
    """What to do with a rollout this cycle."""

    rollout: RolloutState | None
    phase: Phase
    actions: tuple[Action, ...] = ()
    notes: tuple[str, ...] = field(default=())
    code: Code = Code.ROLLOUT_STEP
    """Why, machine-readable: the code its notification carries (``step``, ``rollback``, ``slo-breach``, ...), or
    ``rollout-step`` for a cycle that only waits, holds or scales the candidate."""


def start(
    *,
    rollout_id: str,
    from_config: EngineConfig,
    to_config: EngineConfig,
    rules: RolloutRules,
    now: datetime,
    reason: str,
    proposed_by: str,
    expected_gain: float | None,
    needs_approval: bool,
    candidate_replicas: int = 1,
    expected_ttft_ratio: float | None = None,
    expected_tpot_ratio: float | None = None,
    latency_vs_stable: bool = True,
    window: str | None = None,
    swap: Swap | None = None,
) -> RolloutStep:
    """Begin a rollout: deploy the candidate with its first step's share of the ``candidate_replicas`` (the stable
    fleet's size), then wait for approval of step 0 or for the candidate to be ready. A pre-validated ``swap``
    deploys its surge of replicas at once and shifts in its own steps and bake."""
    state = RolloutState(
        id=rollout_id,
        from_config=from_config,
        to_config=to_config,
        steps=swap.steps if swap is not None else rules.steps,
        window=window,
        bake_s=swap.bake_s if swap is not None else None,
        surge_replicas=swap.surge_replicas if swap is not None else None,
        started_at=now,
        reason=reason,
        proposed_by=proposed_by,
        expected_gain=expected_gain,
        expected_ttft_ratio=expected_ttft_ratio,
        expected_tpot_ratio=expected_tpot_ratio,
        latency_vs_stable=latency_vs_stable,
    )
    if swap is not None:
        first = swap.surge_replicas
        deploy = DeployCandidate(
            to_config,
            first,
            f"surge {first} replica(s) of {to_config.label()}, sized for the coming window's forecast, before the "
            f"swap shifts traffic in {len(swap.steps)} step(s) of {swap.bake_s:.0f} s",
        )
    else:
        first = candidate_replicas_for(candidate_replicas, state.steps[0])
        deploy = DeployCandidate(
            to_config,
            first,
            f"warm up {first} replica(s) of {to_config.label()} as the candidate before it takes traffic",
        )
    if needs_approval or 0 in rules.manual_gates:
        why = f"approval needed before shifting traffic to {to_config.label()}: {reason}"
        return RolloutStep(
            state,
            Phase.AWAITING_APPROVAL,
            (
                deploy,
                RequestApproval(rollout_id, 0, why),
                Notify(Severity.WARNING, "Approval needed", why, code=Code.APPROVAL_REQUIRED),
            ),
            code=Code.APPROVAL_REQUIRED,
        )
    return RolloutStep(
        state,
        Phase.ROLLING_OUT,
        (
            deploy,
            Notify(Severity.INFO, "Rollout started", f"rollout {rollout_id} started: {reason}", code=Code.STARTED),
        ),
        code=Code.STARTED,
    )


def _apply_step(state: RolloutState, index: int, now: datetime, reason: str, code: Code = Code.STEP) -> RolloutStep:
    weight = state.steps[index]
    new = state.model_copy(update={"step_index": index, "weight": weight, "step_started_at": now})
    why = f"{reason}; step {index + 1}/{len(state.steps)}: {weight}% of traffic to {state.to_config.label()}"
    return RolloutStep(
        new,
        Phase.ROLLING_OUT,
        (SetWeights(weight, why, step=index), Notify(Severity.INFO, f"Rollout at {weight}%", why, code=code)),
        code=code,
    )


def _rollback(
    state: RolloutState, now: datetime, reason: str, analysis: AnalysisRecord | None = None, code: Code = Code.ROLLBACK
) -> RolloutStep:
    analyses = (*state.analyses, analysis) if analysis else state.analyses
    new = state.model_copy(update={"weight": 0, "analyses": analyses})
    why = f"rolled back {state.to_config.label()} at {state.weight}%: {reason}"
    actions = (Rollback(why), Notify(Severity.CRITICAL, "Rollback", why, code=code))
    return RolloutStep(new, Phase.ROLLED_BACK, actions, code=code)


def advance(
    *,
    state: RolloutState,
    phase: Phase,
    observation: Observation | None,
    slo: SLO,
    rules: RolloutRules,
    now: datetime,
    candidate_ready_replicas: int | None = None,
    fleet_replicas: int = 1,
) -> RolloutStep:
    """One cycle of a rollout in ``phase`` (RollingOut, AwaitingApproval or Paused).

    ``observation`` is None when metrics are unavailable: the rollout is then frozen where it is (never promoted).
    The candidate runs ``ceil(fleet_replicas x weight)`` replicas at each step (the route and the replicas move
    together, so both variants carry the same load per replica); a step's weight is applied only once that many
    candidate replicas are ready (``candidate_ready_replicas``; None: readiness is not reported, assume ready).
    A pre-validated swap's step (one with ``surge_replicas``) passes on low traffic once it has baked its own bake,
    where a full rollout's waits ``rules.low_traffic_after_s``.
    """

    cycle = _Cycle(now, candidate_ready_replicas, fleet_replicas)
    if state.abort_requested:
        return _rollback(
            state, now, f"aborted by a user{': ' + state.abort_reason if state.abort_reason else ''}", code=Code.ABORTED
        )
    if phase is Phase.AWAITING_APPROVAL:
        return _awaiting_approval(state, phase, cycle)
    if phase is Phase.PAUSED or state.paused:
        return _paused_or_resumed(state, now)
    if state.weight == 0:
        return cycle.apply(0, state, f"candidate {state.to_config.label()} is ready", Code.CANDIDATE_READY)
    if observation is None:
        return RolloutStep(state, phase, notes=(f"frozen at {state.weight}%: metrics unavailable, not promoting",))
    return _judge_step(state, observation, slo, rules, cycle)


@dataclass(frozen=True)
class _Cycle:
    """What one cycle of a rollout knows besides its state: the time and the candidate's replicas."""

    now: datetime
    candidate_ready_replicas: int | None
    fleet_replicas: int

    def apply(self, index: int, base: RolloutState, reason: str, code: Code) -> RolloutStep:
        """Move to step ``index`` once the candidate replicas it needs are ready (scale them up first)."""
        need = candidate_need(base, index, self.fleet_replicas)
        ready = self.candidate_ready_replicas
        if ready is not None and ready < need:
            why = f"step {index + 1} ({base.steps[index]}%) needs {need} ready candidate replicas, {ready} are ready"
            return RolloutStep(base, Phase.ROLLING_OUT, (Scale("candidate", need, why),), notes=(why,))
        return _apply_step(base, index, self.now, reason, code)


def _awaiting_approval(state: RolloutState, phase: Phase, cycle: _Cycle) -> RolloutStep:
    """A rejection ends the rollout, an approval of the next step applies it; else the rollout waits."""
    if state.rejected():
        return _rejected(state, cycle.now)
    next_index = state.step_index if state.weight == 0 else state.step_index + 1
    if state.approved_step(next_index):
        approver = next(
            a.by for a in state.approvals if a.step == next_index and a.decision == "approved" and state.binds(a)
        )
        return cycle.apply(next_index, state, f"approved by {approver}", Code.APPROVED)
    return RolloutStep(state, phase, notes=(f"waiting for approval of step {next_index + 1}",))


def _rejected(state: RolloutState, now: datetime) -> RolloutStep:
    rejection = next(a for a in state.approvals if a.decision == "rejected" and state.binds(a))
    why = f"{rejection.by} rejected rollout {state.id}" + (f": {rejection.comment}" if rejection.comment else "")
    if state.weight > 0:
        return _rollback(state, now, why, code=Code.REJECTED)
    # no traffic moved yet: the candidate warmed up for the rejected rollout is retired
    retire = Rollback(f"retire the candidate {state.to_config.label()} of rejected rollout {state.id}")
    return RolloutStep(
        None,
        Phase.OBSERVING,
        (retire, Notify(Severity.INFO, "Rollout rejected", why, code=Code.REJECTED)),
        code=Code.REJECTED,
    )


def _paused_or_resumed(state: RolloutState, now: datetime) -> RolloutStep:
    if state.paused:
        return RolloutStep(state, Phase.PAUSED, notes=(f"paused at {state.weight}%",))
    step_start = state.step_started_at or now
    resumed = state.model_copy(update={"step_started_at": max(step_start, now)})
    return RolloutStep(resumed, Phase.ROLLING_OUT, notes=("resumed",))


def _judge_step(
    state: RolloutState, observation: Observation, slo: SLO, rules: RolloutRules, cycle: _Cycle
) -> RolloutStep:
    """Analyse the current step: roll back on a failure, hold on missing data, wait while it bakes."""
    now = cycle.now
    step_age = (now - state.step_started_at).total_seconds() if state.step_started_at else 0.0
    bake_s = state.bake_s if state.bake_s is not None else rules.bake_s
    # a pre-validated swap's step passes on low traffic once it has baked (the pair's evidence is production's)
    judged = (
        rules
        if state.surge_replicas is None
        else replace(rules, low_traffic_after_s=min(rules.low_traffic_after_s, bake_s))
    )
    analysis = analyse(
        candidate=observation.variants.get("candidate"),
        stable=observation.variants.get("stable"),
        slo=slo,
        rules=judged,
        expected_ttft_ratio=state.expected_ttft_ratio,
        expected_tpot_ratio=state.expected_tpot_ratio,
        latency_vs_stable=state.latency_vs_stable,
        weight=state.weight,
        step_age_s=step_age,
        fleet_replicas=cycle.fleet_replicas,
    )
    record = AnalysisRecord(
        step=state.step_index,
        weight=state.weight,
        at=now,
        outcome=analysis.verdict if analysis.verdict != "Pending" else "Inconclusive",
        reason=analysis.reason,
    )
    if analysis.verdict == "Failed":
        short = _short_restart(state, analysis.code, now, cycle.candidate_ready_replicas, cycle.fleet_replicas, record)
        if short is not None:
            return short
        return _rollback(state, now, analysis.reason, record, code=analysis.code)
    if analysis.verdict == "Inconclusive" and analysis.lacks_data:
        why = f"holding step {state.step_index + 1} at {state.weight}% ({analysis.code}): {analysis.reason}"
        return RolloutStep(state, Phase.ROLLING_OUT, notes=(why,))

    baked = state.step_started_at is not None and step_age >= bake_s
    if analysis.verdict == "Pending" or not baked:
        wait = (
            analysis.reason
            if analysis.verdict == "Pending"
            else f"baking step {state.step_index + 1} ({analysis.reason})"
        )
        return RolloutStep(state, Phase.ROLLING_OUT, notes=(wait,))
    return _baked(state, analysis, record, rules, cycle)


def _baked(
    state: RolloutState, analysis: Analysis, record: AnalysisRecord, rules: RolloutRules, cycle: _Cycle
) -> RolloutStep:
    """A baked step: a human decides an inconclusive one; a successful one promotes, waits at a manual gate or
    moves on to the next step."""
    with_record = state.model_copy(update={"analyses": (*state.analyses, record)})
    if analysis.verdict == "Inconclusive":
        why = f"analysis inconclusive at {state.weight}%: {analysis.reason}; a human decides"
        return RolloutStep(
            with_record,
            Phase.AWAITING_APPROVAL,
            (
                RequestApproval(state.id, state.step_index + 1, why),
                Notify(Severity.WARNING, "Approval needed", why, code=analysis.code),
            ),
            code=analysis.code,
        )

    # Successful and baked.
    if state.step_index + 1 >= len(state.steps):
        why = f"promoted {state.to_config.label()} after {len(state.steps)} steps: {analysis.reason}"
        return RolloutStep(
            _finished(with_record),
            Phase.OBSERVING,
            (Promote(state.to_config, why), Notify(Severity.INFO, "Rollout complete", why, code=Code.PROMOTED)),
            code=analysis.code,
        )
    next_index = state.step_index + 1
    if next_index in rules.manual_gates and not state.approved_step(next_index):
        why = f"step {next_index + 1} ({state.steps[next_index]}%) is a manual gate: {analysis.reason}"
        return RolloutStep(
            with_record,
            Phase.AWAITING_APPROVAL,
            (
                RequestApproval(state.id, next_index, why),
                Notify(Severity.WARNING, "Approval needed", why, code=Code.MANUAL_GATE),
            ),
            code=Code.MANUAL_GATE,
        )
    return cycle.apply(next_index, with_record, f"step {state.step_index + 1} passed: {analysis.reason}", analysis.code)


MAX_SHORT_RESTARTS = 2
"""How many times one step's analysis restarts on a candidate short of the replicas its load needs before an SLO
breach rolls back as usual."""
_LOAD_CODES = frozenset({Code.SLO_BREACH, Code.BEYOND_TOP_BUCKET})
"""Failures an overloaded replica shows whatever its config: the absolute latency bounds."""


def _short_restart(
    state: RolloutState,
    code: Code,
    now: datetime,
    candidate_ready_replicas: int | None,
    fleet_replicas: int,
    record: AnalysisRecord,
) -> RolloutStep | None:
    """A step whose candidate breached a latency bound while short of the replicas its share of the fleet needs
    (``fleet_replicas``, the fleet this cycle scales to, at the step's weight): its data came from replicas carrying
    more than their planned load, so the step restarts on the grown fleet instead of rolling back; so does the
    cycle after such a restart, whose data still holds the new replicas' cold start. At most
    :data:`MAX_SHORT_RESTARTS` per step; None when the breach stands (the caller rolls back)."""
    if code not in _LOAD_CODES or candidate_ready_replicas is None:
        return None
    # an Inconclusive record of the running step is a restart: a stable breach's moves the step on or ends it
    restarts = [r for r in state.analyses if r.step == state.step_index and r.outcome == "Inconclusive"]
    if len(restarts) >= MAX_SHORT_RESTARTS:
        return None
    need = candidate_need(state, state.step_index, fleet_replicas)
    after_restart = bool(restarts) and restarts[-1].at == state.step_started_at
    if candidate_ready_replicas >= need and not after_restart:
        return None
    why = (
        f"step {state.step_index + 1} at {state.weight}% restarts its analysis: {record.reason} while the candidate "
        f"ran {candidate_ready_replicas} of the {need} ready replicas its share of the fleet needs"
        + (" (its data holds the last restart's cold start)" if candidate_ready_replicas >= need else "")
    )
    held = record.model_copy(update={"outcome": "Inconclusive", "reason": why})
    new = state.model_copy(update={"step_started_at": now, "analyses": (*state.analyses, held)})
    return RolloutStep(new, Phase.ROLLING_OUT, notes=(why,), code=Code.CANDIDATE_SHORT)


def _finished(state: RolloutState) -> RolloutState:
    """A finished rollout keeps its record at 100%."""
    return state.model_copy(update={"weight": 100})


__all__ = [
    "RolloutStep",
    "advance",
    "start",
]
