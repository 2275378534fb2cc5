"""Time-of-day schedule: switch to the config scheduled for this window (or pre-warm the next window's ahead of its
start), and tune a window that has no config yet before it begins. What a switch is worth, from what was measured,
is weighed in :mod:`controller.decide.schedule.worth`. Pure."""

from __future__ import annotations

from datetime import timedelta

from controller.decide import rejections
from controller.decide.capacity.scaling import short_of_replicas
from controller.decide.capacity.sizing import holds, length_distance, replicas_for
from controller.decide.context import (
    Intent,
    PlanContext,
    measured_cold_start_s,
    next_window,
    prewarm_lead_s,
    remaining_s,
    window_at,
)
from controller.decide.rollout.lifecycle import begin as begin_rollout
from controller.decide.rollout.sizing import Swap, rollout_span_s
from controller.decide.schedule.worth import OTHER_REPETITIVENESS, same_traffic, switch_economics, switch_gain
from controller.decide.tuning.rounds import start as start_tuning
from controller.domain.actions import RunTrial
from controller.domain.approval import needs_approval
from controller.domain.codes import Code
from controller.domain.status import ScheduledConfig
from controller.domain.traffic import TimeWindow


def scheduled_switch(ctx: PlanContext) -> Intent | None:
    """Move to the config scheduled for this window (code ``scheduled-switch``), or pre-warm the next window's ahead
    of its start (code ``prewarm``); first measure the active config on the window's traffic when nothing says
    what it does there (code ``switch-check``, :func:`measure_active`); code ``switch-not-paying`` (status
    unchanged, the note says why) when the switch's GPU saving over the window does not exceed its rollout's cost
    (:func:`switch_economics`); code ``pre-validated-swap`` when production already served both configs in their
    windows (:func:`pre_validated`: a surge, a fast shift, the analysis and rollback on); None when no switch is
    due or worth its goodput gain. The pre-warm's lead is the scheduled config's measured cold start and a margin
    (:func:`~controller.decide.context.prewarm_lead_s`)."""
    status = ctx.status
    if status.schedule_account is not None and status.schedule_account.falls_back(ctx.now):
        return static_fallback(ctx)
    lead = prewarm_lead_s(ctx)
    ramp = ramp_span_s(ctx)
    upcoming = window_ahead(ctx, lead + ramp)
    ahead = upcoming.name != ctx.window.name
    window = upcoming if ahead else ctx.window
    entry = status.schedule_for(window.name)
    if entry is None or not _due(ctx, window, entry):
        return None
    rejected = rejections.standing(ctx, entry.config.key(), window.name, entry.shape)
    if rejected is not None:
        why = rejections.describe(rejected, ctx.rules.rollout.rejection_memory_s)
        return Intent(Code.REJECTION_KEPT, status, (), (f"not switching to its scheduled config: {why}",))
    if short_of_replicas(ctx, entry.capacity_rps) or _dwelling(ctx):
        # short: the autoscaler's replicas cannot carry today's load on it, which a pre-warmed candidate meets
        # first: a rollout would only fail
        return None
    when = f"window '{window.name}' starts at {window.start_hour:02g}:00" if ahead else f"window '{window.name}'"
    other = other_traffic(ctx, window, entry) if ahead else None
    if other is not None:
        return Intent(Code.SWITCH_OTHER_TRAFFIC, status, (), (f"{when}: {other}",))
    swap = pre_validated(ctx, window, entry)
    gain = switch_gain(ctx, entry)
    reason = _why_switch(ctx, window, entry, when, gain=gain, swap=swap, ahead=ahead)
    if not isinstance(reason, str):
        return reason
    why = reason
    if swap is not None:
        why = (
            f"pre-validated swap ({swap.surge_replicas} replica(s) surged, {len(swap.steps)} step(s) of "
            f"{swap.bake_s:.0f} s, analysis on): production served both configs after their rollouts; " + why
        )
    if ahead:
        span = f" ({ramp / 60:.0f} min of them for the rollout's steps, ahead of the window's ramp)" if ramp else ""
        why = f"pre-warming {(lead + ramp) / 60:.0f} min ahead{span}: " + why
    started = begin_rollout(ctx, entry.config, why, proposed_by="schedule", gain=gain, window=window.name, swap=swap)
    if started.code in WITHHELD:
        return started
    code = Code.PRE_VALIDATED_SWAP if swap is not None else Code.PREWARM if ahead else Code.SCHEDULED_SWITCH
    return Intent(code, started.status, started.actions, started.notes)


def _due(ctx: PlanContext, window: TimeWindow, entry: ScheduledConfig) -> bool:
    """Whether the window's scheduled config is another than the active one, and not blocked for the window."""
    key = entry.config.key()
    return key != ctx.status.active_config.key() and key not in ctx.status.blocked_for(window.name)


def _dwelling(ctx: PlanContext) -> bool:
    """Whether the last switch is more recent than the schedule's least dwell."""
    last = ctx.status.last_switch_at
    return last is not None and (ctx.now - last).total_seconds() < ctx.rules.schedule.min_dwell_s


def _why_switch(
    ctx: PlanContext,
    window: TimeWindow,
    entry: ScheduledConfig,
    when: str,
    *,
    gain: float | None,
    swap: Swap | None,
    ahead: bool,
) -> str | Intent | None:
    """Why switching to the window's config is worth it; else a switch check, a switch that does not pay (an
    Intent), or None when its gain is too small."""
    status = ctx.status
    if gain is None:
        check = measure_active(ctx, entry, when)
        if check is not None:
            return check
        # the active config came from another window and was never measured on this one's traffic: the
        # window's own search is the only evidence of what holds its SLO here
        return (
            f"{when}: its scheduled config {entry.config.label()} was measured on its traffic "
            f"({entry.reason}); the active {status.active_config.label()} never was"
        )
    seconds = window.hours * 3600 if ahead else remaining_s(ctx.now, window)
    benefit_s = (gain - 1) * seconds
    if gain < ctx.rules.tuning.min_gain or benefit_s < ctx.rules.schedule.switch_cost_s:
        return None
    worth = switch_economics(ctx, window, entry, seconds, swap=swap)
    if worth is not None and not worth.pays:
        # with managed replicas a switch pays in GPUs: the replicas it saves over the window, at the
        # pessimistic end of the forecast and the capacities, against its whole rollout
        why = (
            f"{when}: not switching to its scheduled config {entry.config.label()} "
            f"({gain:.2f}x the active {status.active_config.label()} on its traffic): it "
            f"{worth.describe()}"
        )
        return Intent(Code.SWITCH_NOT_PAYING, status, (), (why,))
    why = (
        f"{when}: its scheduled config {entry.config.label()} measured {gain:.2f}x the active "
        f"{status.active_config.label()} on its traffic ({entry.reason})"
    )
    if worth is not None:
        why += f"; it {worth.describe()}"
    return why


#: Codes of a rollout that does not start (dry run, a rejection that stands): the switch says so under that code.
WITHHELD = frozenset({Code.DRY_RUN, Code.REJECTION_KEPT})


def window_ahead(ctx: PlanContext, lead_s: float) -> TimeWindow:
    """The window a switch ``lead_s`` ahead is for: the next window when it starts within the lead, else the one
    ``now`` is in. Never the one after the next: a lead longer than the next window (a short one between two long
    ones) pre-warms the next window's config, whose lead it is, not a later window's."""
    upcoming, starts_in_s = next_window(ctx.rules, ctx.now)
    return upcoming if starts_in_s <= lead_s else ctx.window


def ramp_span_s(ctx: PlanContext) -> float:
    """How much earlier than its cold start the next window's config is pre-warmed: the stepped rollout's span
    (:func:`~controller.decide.rollout.sizing.rollout_span_s` on today's fleet) when the next window's forecast busy
    hour brings more load than the fleet serves now (a ramp), so the steps move on today's lighter load and the
    ramp meets the config promoted, not a candidate holding half of a rising load on replicas sized for the lighter
    one. Not when every canary trial of that config on today's traffic missed the SLO: the earlier steps carry
    today's traffic, not the window's (a config never measured on it is left to the rollout's analysis, as any
    rollout is). 0 otherwise (no forecast, no ramp, nothing to switch to)."""
    upcoming, _ = next_window(ctx.rules, ctx.now)
    entry = ctx.status.schedule_for(upcoming.name)
    met = ctx.forecast.get(upcoming.name)
    now = ctx.observation
    if entry is None or entry.config.key() == ctx.status.active_config.key() or met is None or now is None:
        return 0.0
    if met.arrival_rate_rps <= now.shape.arrival_rate_rps:
        return 0.0
    here = ctx.status.schedule_for(ctx.window.name)
    today = here.shape if here is not None else now.shape
    key = entry.config.key()
    seen = [t for t in ctx.status.trials if t.config.key() == key and same_traffic(ctx, t.shape, today)]
    if seen and not any(holds(t, keeps_up=False) for t in seen):
        return 0.0
    cold = measured_cold_start_s(ctx.status, entry.config)
    return rollout_span_s(
        ctx.rules.rollout, ctx.rules.schedule.prewarm_lead_s if cold is None else cold, ctx.status.replicas
    )


def other_traffic(ctx: PlanContext, window: TimeWindow, entry: ScheduledConfig) -> str | None:
    """Why pre-warming ``entry``'s config ahead of ``window`` would meet traffic it was not measured on, or None.

    A pre-warm (or a pre-validated swap) meets the window's forecast busy hour, and is sized for it. When that
    traffic's length mix is further from the shape the config was scheduled on than ``capacity_transfer_distance``,
    or its repetitiveness more than 0.25 away, neither the config's measured gain nor its probed capacity says what
    it does there (a weekend evening's agents meeting the documents config a Saturday night's breach scheduled for
    the evening; a Saturday morning's documents meeting the weekdays' agents config), and the window starts on the
    active config. Inside the window the switch is weighed as before (its traffic is the drift and breach rules').
    None without a forecast for the window."""
    met = ctx.forecast.get(window.name)
    if met is None or same_traffic(ctx, met, entry.shape):
        return None
    distance = length_distance(met, entry.shape)
    repetitive = abs(met.repetitiveness - entry.shape.repetitiveness)
    return (
        f"not pre-warming its scheduled config {entry.config.label()}: it was measured on "
        f"{entry.shape.prompt_tokens.mean:.0f} in / {entry.shape.output_tokens.mean:.0f} out tokens, "
        f"{entry.shape.repetitiveness:.0%} repetitive, and the window's forecast busy hour is "
        f"{met.prompt_tokens.mean:.0f} in / {met.output_tokens.mean:.0f} out, {met.repetitiveness:.0%} repetitive "
        f"(length distance {distance:.2f}, at most {ctx.rules.capacity_transfer_distance:.2f}; repetitiveness "
        f"{repetitive:.2f} apart, at most {OTHER_REPETITIVENESS:.2f})"
    )


def pre_validated(ctx: PlanContext, window: TimeWindow, entry: ScheduledConfig) -> Swap | None:
    """A swap instead of a full analysed rollout, when production already served both configs after a rollout that
    passed: the scheduled config in ``window`` and the active config in the window now (``status.served``, each
    with its canary trial and its analysed steps). The swap surges the new config's replicas for ``window``'s
    forecast at once (at its probed capacity, with the scaling rules' headroom and bounds; the fleet's size when
    either is unknown) and shifts in the schedule's ``swap_steps``, each baked ``swap_bake_s``, the analysis and
    the automatic rollback on. None otherwise, or while a human approves rollouts."""
    status = ctx.status
    if status.served_in(window.name, entry.config.key()) is None:
        return None
    if status.served_in(ctx.window.name, status.active_config.key()) is None:
        return None
    if needs_approval(ctx.rules.tuning.approval, lossy=ctx.is_lossy(entry.config)):
        return None
    surge = max(1, status.replicas)
    scaling = ctx.rules.scaling
    forecast = ctx.forecast.get(window.name)
    rate = forecast.arrival_rate_rps if forecast is not None else entry.fleet_rate_rps
    if scaling is not None and entry.capacity_rps and rate:
        surge = min(max(replicas_for(rate, entry.capacity_rps, scaling), scaling.min_replicas, 1), scaling.max_replicas)
    rules = ctx.rules.schedule
    return Swap(steps=rules.swap_steps, bake_s=rules.swap_bake_s, surge_replicas=max(1, surge))


def static_fallback(ctx: PlanContext) -> Intent | None:
    """After a week the schedule lost against the best static config measured
    (:mod:`controller.decide.schedule.account`):
    move to that config once and switch no more until the fallback ends (code ``schedule-not-paying``). None when
    it is already active, blocked for this window, or the last switch is too recent."""
    status = ctx.status
    account = status.schedule_account
    assert account is not None and account.fallback_config is not None
    config = account.fallback_config
    if config.key() == status.active_config.key() or config.key() in status.blocked_for(ctx.window.name):
        return None
    last = status.last_switch_at
    if last is not None and (ctx.now - last).total_seconds() < ctx.rules.schedule.min_dwell_s:
        return None
    why = account.fallback_reason or f"the schedule is not paying: serving {config.label()} in every window"
    started = begin_rollout(ctx, config, why, proposed_by="schedule", gain=None)
    if started.code in WITHHELD:
        return started
    return Intent(Code.SCHEDULE_NOT_PAYING, started.status, started.actions, started.notes)


def measure_active(ctx: PlanContext, entry: ScheduledConfig, when: str) -> Intent | None:
    """Before a switch that claims no gain: one trial of the active config on the window's traffic (code
    ``switch-check``), so that the switch is weighed against what the active config does there (the next cycle's
    :func:`switch_gain` reads that trial). A config that serves one window well often serves the next as well
    (the day's config at night), and a switch there and back each day costs two rollouts. None when the active
    config was measured on that shape already (whatever came of it: a trial that failed or missed the SLO lets
    the switch go ahead), or while trials are paused."""
    status = ctx.status
    active = status.active_config
    if any(t.config.key() == active.key() and t.shape == entry.shape for t in status.trials):
        return None
    paused = status.tuning_paused_until
    if paused is not None and ctx.now < paused:
        return None
    why = (
        f"{when}: measuring the active {active.label()} on the traffic its scheduled config "
        f"{entry.config.label()} was measured on, before switching to it"
    )
    return Intent(Code.SWITCH_CHECK, status, (RunTrial(active, entry.shape, why, "schedule"),), (why,))


def tune_ahead(ctx: PlanContext) -> Intent | None:
    """Tune the next window that has no config yet, on its forecast shape, before it starts (code
    ``tune-ahead``); not while the schedule is set aside for a static config."""
    account = ctx.status.schedule_account
    if not ctx.forecast or (account is not None and account.falls_back(ctx.now)):
        return None
    step = 900.0
    for i in range(1, int(ctx.rules.schedule.tune_ahead_s // step) + 1):
        when = ctx.now + timedelta(seconds=i * step)
        window = window_at(ctx.rules.windows, when)
        if window.name == ctx.window.name or ctx.status.schedule_for(window.name) is not None:
            continue
        if window.name in ctx.forecast:
            why = f"tuning ahead: window '{window.name}' starts at {window.start_hour:02g}:00 and has no config"
            return start_tuning(ctx, why, window, code=Code.TUNE_AHEAD)
    return None


__all__ = [
    "measure_active",
    "other_traffic",
    "pre_validated",
    "ramp_span_s",
    "scheduled_switch",
    "static_fallback",
    "tune_ahead",
    "window_ahead",
]
