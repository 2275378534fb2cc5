"""Time-of-day schedule: switch to the config scheduled for this window (or pre-warm the next window's ahead of its
start), and tune a window that has no config yet before it begins. Pure."""

from __future__ import annotations

from datetime import timedelta

from controller.decide.context import Intent, PlanContext, remaining_s, window_at
from controller.decide.rolling import begin as begin_rollout
from controller.decide.scaling import short_of_replicas
from controller.decide.tuning import start as start_tuning


def scheduled_switch(ctx: PlanContext) -> Intent | None:
    """Move to the config scheduled for this window (code ``scheduled-switch``), or pre-warm the next window's ahead
    of its start (code ``prewarm``); None when no switch is due or worth its cost."""
    status = ctx.status
    lead = ctx.rules.schedule.prewarm_lead_s
    upcoming = window_at(ctx.rules.windows, ctx.now + timedelta(seconds=lead))
    ahead = upcoming.name != ctx.window.name
    for window in (upcoming,) if ahead else (ctx.window,):
        entry = status.schedule_for(window.name)
        if entry is None or entry.config.key() == status.active_config.key():
            return None
        if entry.config.key() in status.blocked_configs:
            return None
        if short_of_replicas(ctx, entry.capacity_rps):
            # the autoscaler's replicas cannot carry today's load on it, which a pre-warmed candidate meets
            # first: a rollout would only fail
            return None
        last = status.last_switch_at
        if last is not None and (ctx.now - last).total_seconds() < ctx.rules.schedule.min_dwell_s:
            return None
        base = next(
            (
                t
                for t in reversed(status.trials)
                if t.config.key() == status.active_config.key() and t.shape == entry.shape and t.ok
            ),
            None,
        )
        base_goodput = base.objective() if base is not None else entry.stock_goodput_tokens_per_s
        gain = entry.goodput_tokens_per_s / base_goodput if base_goodput else float("inf")
        benefit_s = (gain - 1) * (window.hours * 3600 if ahead else remaining_s(ctx.now, window))
        if gain < ctx.rules.tuning.min_gain or benefit_s < ctx.rules.schedule.switch_cost_s:
            return None
        when = f"window '{window.name}' starts at {window.start_hour:02g}:00" if ahead else f"window '{window.name}'"
        why = (
            f"{when}: its scheduled config {entry.config.label()} measured {gain:.2f}x the active "
            f"{status.active_config.label()} on its traffic ({entry.reason})"
        )
        if ahead:
            why = f"pre-warming {lead / 60:.0f} min ahead: " + why
        started = begin_rollout(ctx, entry.config, why, proposed_by="schedule", gain=gain)
        return Intent("prewarm" if ahead else "scheduled-switch", started.status, started.actions, started.notes)
    return None


def tune_ahead(ctx: PlanContext) -> Intent | None:
    """Tune the next window that has no config yet, on its forecast shape, before it starts (code
    ``tune-ahead``)."""
    if not ctx.forecast:
        return None
    step = 900.0
    for i in range(1, int(ctx.rules.schedule.tune_ahead_s // step) + 1):
        when = ctx.now + timedelta(seconds=i * step)
        window = window_at(ctx.rules.windows, when)
        if window.name == ctx.window.name or ctx.status.schedule_for(window.name) is not None:
            continue
        if window.name in ctx.forecast:
            why = f"tuning ahead: window '{window.name}' starts at {window.start_hour:02g}:00 and has no config"
            return start_tuning(ctx, why, window, code="tune-ahead")
    return None


__all__ = ["scheduled_switch", "tune_ahead"]
