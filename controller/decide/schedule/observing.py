"""Observing: what production's traffic and SLO say each cycle (drift, breach, quiet hours), and freezing when
there is nothing to observe. Pure."""

from __future__ import annotations

from controller.decide.capacity import scaling
from controller.decide.context import Intent, PlanContext, move, per_replica
from controller.decide.schedule import switch as schedule
from controller.decide.signals import drift as drifts
from controller.decide.signals.breach import slo_breach
from controller.decide.tuning import rounds as tuning
from controller.domain.actions import Action, Notify, Severity
from controller.domain.codes import Code
from controller.domain.phases import Phase
from controller.domain.status import ScheduledConfig


def freeze(ctx: PlanContext) -> Intent:
    """No observation: take no action on missing data (code ``frozen``)."""
    reason = f"frozen: {ctx.observe_error or 'no observation'}; taking no action on missing data"
    status = ctx.status.model_copy(
        update={"phase": move(ctx.status.phase, Phase.FROZEN), "frozen_reason": reason, "tuning": None}
    )
    actions: tuple[Action, ...] = ()
    if ctx.status.phase is not Phase.FROZEN:
        actions = (Notify(Severity.WARNING, "Observation frozen", reason),)
    return Intent(Code.FROZEN, status, actions, (reason,))


def thaw(ctx: PlanContext) -> Intent:
    """Metrics are back after a freeze (code ``metrics-back``)."""
    status = ctx.status.model_copy(update={"phase": move(ctx.status.phase, Phase.OBSERVING), "frozen_reason": None})
    return Intent(Code.METRICS_BACK, status, notes=("metrics are back; observing again",))


def observe(ctx: PlanContext) -> Intent:
    """One observing cycle: raise a probed capacity that production exceeded within the SLO (code
    ``capacity-raised``, :func:`~controller.decide.capacity.scaling.production_capacity`), scale first when the load
    outgrows the replicas, correct a probed capacity that production disproved, re-tune on a breach or on drift,
    switch to (or pre-warm) the window's scheduled config, tune the next window ahead; otherwise keep observing
    (code ``observing``; why the replicas stay as they are, code ``replicas-kept-observing``)."""
    observation = ctx.observation
    assert observation is not None
    status = ctx.status
    entry = status.schedule_for(ctx.window.name)
    if entry is None:
        return tuning.start(
            ctx, f"no tuned config for window '{ctx.window.name}' yet", ctx.window, code=Code.TUNE_NO_CONFIG
        )
    verdict, drift_state = _assess_drift(ctx, entry)
    ctx = ctx.with_status(status.model_copy(update={"drift": drift_state}))
    sized = _size(ctx)
    ctx = ctx.with_status(sized.status)
    if scaling.scales_up(sized, ctx.status.replicas):
        # more load than the replicas carry: add replicas first; a re-tune would not add capacity soon enough
        return sized
    breach = slo_breach(observation, ctx.rules.slo, ctx.rules.rollout.min_samples)
    if breach:
        corrected = scaling.correct_capacity(ctx, breach)
        if corrected is not None and corrected.code == Code.CAPACITY_CORRECTED:
            return corrected
        if corrected is not None:
            ctx = ctx.with_status(corrected.status)
    if breach and not tuned_recently(ctx, entry, ctx.rules.schedule.retune_min_interval_s / 2):
        return tuning.start(
            ctx, f"window '{ctx.window.name}': {breach}", ctx.window, observed=True, code=Code.TUNE_SLO_BREACH
        )
    why_quiet = quiet(ctx, entry)
    # drift counts while the traffic is away from the tuned shape; once back within `exit` it is only waiting
    # out the dwell before the state flips back
    away = verdict.drifted and verdict.distance > ctx.rules.drift.exit
    if ctx.drifted or (away and not why_quiet):
        tuned_at = entry.tuned_at
        age = (ctx.now - tuned_at).total_seconds() if tuned_at else float("inf")
        if ctx.drifted or age >= ctx.rules.schedule.retune_min_interval_s:
            why = verdict.reason if verdict.drifted else "traffic drifted from the tuned shape"
            return tuning.start(
                ctx, f"window '{ctx.window.name}': {why}", ctx.window, observed=True, code=Code.TUNE_DRIFT
            )
    switch = schedule.scheduled_switch(ctx)
    if switch is not None and switch.code not in (
        Code.SWITCH_NOT_PAYING,
        Code.SWITCH_OTHER_TRAFFIC,
        Code.REJECTION_KEPT,
    ):
        return switch
    ahead = schedule.tune_ahead(ctx)
    if ahead is not None:
        return ahead
    return _keep_observing(ctx, verdict, why_quiet, sized, switch)


def _assess_drift(ctx: PlanContext, entry: ScheduledConfig) -> tuple[drifts.DriftVerdict, drifts.DriftState]:
    """How far the live traffic per replica is from the shape the window's config was tuned for."""
    assert ctx.observation is not None
    status = ctx.status
    live = per_replica(ctx.observation.shape, status.replicas)
    if entry.shape.concurrency > live.concurrency:
        # a window tuned for its busy hour also serves its quieter minutes: only more load, or another
        # length mix, is drift
        live = live.model_copy(update={"concurrency": entry.shape.concurrency})
    previous = status.drift
    if status.window is not None and status.window != ctx.window.name:
        # the drift state measured distance to the last window's tuned shape: start afresh against this one's
        previous = drifts.DriftState()
    return drifts.assess(live, entry.shape, previous, now=ctx.now, params=ctx.rules.drift)


def _size(ctx: PlanContext) -> Intent:
    """The replicas the load needs, after raising a probed capacity that production exceeded within the SLO."""
    raised = scaling.production_capacity(ctx)
    if raised is None:
        return scaling.scale(ctx)
    sized = scaling.scale(ctx.with_status(raised.status))
    # the raised capacity's note under its own code, before the sizing's
    coded = (*((Code.CAPACITY_RAISED, n) for n in raised.notes), *sized.coded_notes)
    return Intent(sized.code, sized.status, sized.actions, sized.notes, coded)


def _keep_observing(
    ctx: PlanContext, verdict: drifts.DriftVerdict, why_quiet: str, sized: Intent, switch: Intent | None
) -> Intent:
    """Keep the active config: observing, or a switch that does not pay, is not on this traffic or was rejected."""
    assert ctx.observation is not None
    drift_note = f"drift {verdict.reason}"
    if verdict.drifted and why_quiet:
        drift_note += f"; not re-tuning: {why_quiet}"
    note = f"observing: {ctx.observation.shape.describe()}; {drift_note}"
    if switch is not None:
        return Intent(switch.code, ctx.status, sized.actions, (*sized.notes, note, *switch.notes))
    replicas = (*sized.coded_notes, *((Code.REPLICAS_KEPT_OBSERVING, n) for n in sized.notes))
    return Intent(Code.OBSERVING, ctx.status, sized.actions, (note,), replicas)


def quiet(ctx: PlanContext, entry: ScheduledConfig) -> str:
    """Why the traffic is too light for drift to matter (empty when it is not): the replicas run at less than
    ``quiet_utilisation`` of the capacity probed for the window's config, with the SLO met. A window tuned for
    its busy hour serves its quiet stretches; re-tuning for them would pick a config that is fast at a light
    load and short of capacity when the busy hour returns."""
    assert ctx.observation is not None
    if ctx.rules.scaling is None or not entry.capacity_rps:
        return ""
    per_replica_load = ctx.observation.shape.arrival_rate_rps / max(1, ctx.status.replicas)
    utilisation = per_replica_load / entry.capacity_rps
    if utilisation >= ctx.rules.quiet_utilisation:
        return ""
    return (
        f"{per_replica_load:.2f} req/s per replica is {utilisation:.0%} of the "
        f"{entry.capacity_rps:.2f} req/s the window's config serves"
    )


def tuned_recently(ctx: PlanContext, entry: ScheduledConfig, within_s: float) -> bool:
    return entry.tuned_at is not None and (ctx.now - entry.tuned_at).total_seconds() < within_s


__all__ = ["freeze", "observe", "quiet", "thaw", "tuned_recently"]
