"""One decision: dispatch on the phase, collect the intents of the concerns that apply, and fold them into the
next status once. Pure: no I/O, no clock reads (``now`` is passed in), no adapters.

Flow: ``plan()`` builds a frozen :class:`PlanContext` from the status read at the start of the cycle, the
observation and the screened proposals, and counts the cycle into the schedule's running account
(:mod:`controller.decide.schedule.account`; a week the schedule lost sets it aside, code ``schedule-not-paying``). The
phase picks the concern (rollout bookkeeping, freeze/thaw, a tuning
round, observing); while a round or a rollout runs, replicas still follow the load (scaling); the daily digest is
added when due. Each concern returns an :class:`Intent` (next status, actions, notes, a reason code); the fold
stamps the cycle's window, time and reasons on the last intent's status and returns a :class:`Decision`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from controller.decide import outcome
from controller.decide.capacity import scaling
from controller.decide.context import Intent, PlanContext, move, window_at
from controller.decide.rollout import lifecycle as rolling
from controller.decide.rollout.sizing import candidate_replicas_for
from controller.decide.rules import Rules
from controller.decide.schedule import account, observing
from controller.decide.schedule.digest import digest
from controller.decide.tuning import probe
from controller.decide.tuning import rounds as tuning
from controller.domain.actions import Action, Scale
from controller.domain.codes import Code
from controller.domain.config import EngineConfig
from controller.domain.observation import Observation
from controller.domain.phases import Phase
from controller.domain.proposal import Proposal
from controller.domain.status import Reason, TargetStatus
from controller.domain.traffic import TrafficShape


@dataclass(frozen=True)
class Decision:
    """The next status, the actions to take in order, the notes, and the reason code of each intent that led to
    them (machine-readable; the notes and action reasons are the sentences people read)."""

    status: TargetStatus
    actions: tuple[Action, ...]
    notes: tuple[str, ...]
    codes: tuple[Code, ...] = ()


def plan(
    *,
    status: TargetStatus,
    observation: Observation | None,
    observe_error: str | None,
    proposals: Sequence[Proposal],
    rules: Rules,
    now: datetime,
    is_lossy: Callable[[EngineConfig], bool] = lambda _c: False,
    drifted: bool = False,
    candidate_ready_replicas: int | None = None,
    external_autoscaler: str | None = None,
    forecast: Mapping[str, TrafficShape] | None = None,
) -> Decision:
    """Decide this cycle. ``proposals`` have already passed the guardrails.

    ``drifted`` forces a re-tune (the built-in detector runs on every observing cycle anyway);
    ``external_autoscaler`` names an HPA/KEDA object that owns the replica count, if any;
    ``forecast`` maps window names to the fleet-level traffic shape expected in each window's busy hour.
    """
    window = window_at(rules.windows, now)
    ctx = PlanContext(
        status=status,
        observation=observation,
        observe_error=observe_error,
        proposals=proposals,
        rules=rules,
        now=now,
        window=window,
        is_lossy=is_lossy,
        drifted=drifted,
        candidate_ready_replicas=candidate_ready_replicas,
        external_autoscaler=external_autoscaler,
        forecast=dict(forecast or {}),
    )
    counted = account.tally(ctx)
    if counted is not None:
        ctx = ctx.with_status(counted.status)
    trialling_now = status.phase is Phase.TRIALLING and observation is not None
    intents = trialling_steps(ctx) if trialling_now else [dispatch(ctx)]
    if counted is not None and counted.code == Code.SCHEDULE_NOT_PAYING:
        intents.insert(0, counted)
    if status.phase not in (Phase.OBSERVING, Phase.FROZEN) and observation is not None and rules.scaling is not None:
        asked = max((n for i in intents for n in _scaled_to(i.actions, "candidate")), default=0)
        intents.append(follow_load(ctx.with_status(intents[-1].status), candidate_asked=asked))
    due = digest(intents[-1].status, rules, now)
    if due is not None:
        intents.append(due)
    decision = fold(intents, window_name=window.name, now=now)
    if rules.tuning.dry_run:  # nothing is scaled in dry run (the act layer withholds it): the replicas did not change
        kept = decision.status.model_copy(update={"replicas_changed_at": status.replicas_changed_at})
        decision = replace(decision, status=kept)
    return decision


def dispatch(ctx: PlanContext) -> Intent:
    """The concern the phase calls for. A tuning round's cycle is not one of them: :func:`plan` runs it
    (:func:`trialling_steps`) whenever the phase is Trialling and there is an observation; without one, it freezes
    here like any other phase."""
    phase = ctx.status.phase
    if phase in (Phase.ROLLING_OUT, Phase.AWAITING_APPROVAL, Phase.PAUSED):
        return rolling.advance(ctx, fleet_replicas=fleet_ahead(ctx))
    if phase is Phase.ROLLED_BACK:
        status = ctx.status.model_copy(update={"phase": move(phase, Phase.OBSERVING), "rollout": None})
        return Intent(Code.OBSERVING_AFTER_ROLLBACK, status)
    if ctx.observation is None:
        return observing.freeze(ctx)
    if phase is Phase.FROZEN:
        return observing.thaw(ctx)
    return observing.observe(ctx)


def trialling_steps(ctx: PlanContext) -> list[Intent]:
    """A tuning round's cycle: record the noise its repeats measured, run the next proposals while they pay for
    their GPU time, and once the search stops (code ``search-stopped`` first, with why) probe the capacity of its
    choice (with managed replicas) and settle the round when nothing is left to run."""
    round_ = ctx.status.tuning
    if round_ is None:
        return [Intent(Code.NO_ROUND, ctx.status.model_copy(update={"phase": move(ctx.status.phase, Phase.OBSERVING)}))]
    ctx = ctx.with_status(tuning.with_noise(ctx.status, round_, ctx.now))
    step = tuning.next_trials(ctx, round_)
    if step is not None:
        return [step]
    stopped = tuning.search_stop(ctx, round_)
    if stopped is not None:
        ctx = ctx.with_status(stopped.status)
        assert ctx.status.tuning is not None
        round_ = ctx.status.tuning
    step = None
    if ctx.rules.scaling is not None:
        step = probe.capacity_probe(ctx, round_)
    if step is None:
        step = outcome.select(ctx, round_)
    return [stopped, step] if stopped is not None and stopped.code == Code.SEARCH_STOPPED else [step]


def fleet_ahead(ctx: PlanContext) -> int:
    """The stable fleet this cycle leaves behind: the replica count replicas-follow-load (:func:`follow_load`) scales
    it to, else the current one. A rollout step sizes its candidate on it, so a step does not move the route on
    replicas sized for a fleet the same cycle grows."""
    if ctx.observation is None or ctx.rules.scaling is None:
        return ctx.status.replicas
    to = _scaled_to(scaling.scale(ctx).actions, "stable")
    return to[-1] if to else ctx.status.replicas


def follow_load(ctx: PlanContext, *, candidate_asked: int = 0) -> Intent:
    """Replicas follow the load whatever the tuning or rollout is doing; a candidate carrying part of the traffic
    keeps its share of a rescaled fleet (a pre-validated swap's surge keeps its size), and never fewer than the
    ``candidate_asked`` replicas a rollout step asked for in the same cycle (the next step's share)."""
    sized = scaling.scale(ctx)
    actions = list(sized.actions)
    rollout = sized.status.rollout
    if rollout is not None and rollout.weight > 0 and rollout.surge_replicas is None:
        # a pre-validated swap's surge is sized for the coming window's whole load already
        for fleet in _scaled_to(sized.actions, "stable"):
            need = candidate_replicas_for(fleet, rollout.weight)
            if need <= candidate_asked:
                continue  # the step asked for at least this many: scaling down would undo it
            why = f"the fleet scales to {fleet}: the candidate keeps {rollout.weight}% of it"
            actions.append(Scale("candidate", need, why, code=sized.code))
    return Intent(sized.code, sized.status, tuple(actions), sized.notes)


def _scaled_to(actions: Sequence[Action], variant: str) -> list[int]:
    """The replica counts ``actions`` scale ``variant`` to, in order."""
    return [a.replicas for a in actions if isinstance(a, Scale) and a.variant == variant]


def fold(intents: Sequence[Intent], *, window_name: str, now: datetime) -> Decision:
    """The cycle's decision: the last intent's status (each intent builds on the one before), every intent's
    actions and notes in order, and the cycle's bookkeeping (time, window, reasons, when replicas changed). Each
    action carries a code: its own, else the code of the intent that asked for it; each reason in status carries
    the code of the action or the intent it came from."""
    status = intents[-1].status
    actions = tuple(a if a.code else replace(a, code=i.code) for i in intents for a in i.actions)
    coded = tuple((c, n) for i in intents for c, n in (*i.coded_notes, *((i.code, n) for n in i.notes)))
    notes = tuple(n for _, n in coded)
    noted = tuple(Reason(code=c, message=n) for c, n in coded)
    reasons = tuple(Reason(code=a.code, message=a.reason) for a in actions) + noted
    rescaled = any(isinstance(a, Scale) and a.variant == "stable" for a in actions)
    final = status.model_copy(
        update={
            "updated_at": now,
            "window": window_name,
            "last_reasons": reasons or status.last_reasons,
            "replicas_changed_at": now if rescaled else status.replicas_changed_at,
        }
    )
    return Decision(final, actions, notes, tuple(i.code for i in intents))


__all__ = ["Decision", "dispatch", "fleet_ahead", "fold", "follow_load", "plan", "trialling_steps"]
