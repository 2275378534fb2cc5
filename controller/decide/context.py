"""The planner's frozen input (:class:`PlanContext`), its output unit (:class:`Intent`) and the small shape and status
helpers every concern shares. Pure.

A concern is a family of functions ``(ctx) -> Intent | None``. An :class:`Intent` is the next status the concern
wants, the actions and notes that go with it, and a machine-readable reason ``code`` next to the sentences. Status
is never mutated: a function that builds on another's result continues with ``ctx.with_status(intent.status)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from controller.decide.rules import Rules
from controller.domain.actions import Action
from controller.domain.codes import Code
from controller.domain.config import EngineConfig
from controller.domain.observation import Observation
from controller.domain.phases import Phase, transition
from controller.domain.proposal import Proposal
from controller.domain.status import ScheduledConfig, TargetStatus
from controller.domain.traffic import TimeWindow, TrafficShape
from controller.domain.trial import TrialResult


@dataclass(frozen=True)
class PlanContext:
    """Everything one decision may look at: the status read at the start of the cycle (or the one an earlier step
    of this cycle produced), what was observed, the proposals that passed the guardrails, the rules and the time."""

    status: TargetStatus
    observation: Observation | None
    observe_error: str | None
    proposals: Sequence[Proposal]
    rules: Rules
    now: datetime
    window: TimeWindow
    """The time-of-day window ``now`` falls in."""
    is_lossy: Callable[[EngineConfig], bool] = lambda _c: False
    drifted: bool = False
    """A re-tune was asked for from outside (the built-in detector runs on every observing cycle anyway)."""
    candidate_ready_replicas: int | None = None
    external_autoscaler: str | None = None
    """The HPA/KEDA object that owns the replica count, if any."""
    forecast: Mapping[str, TrafficShape] = field(default_factory=dict)
    """Window name -> the fleet-level traffic shape expected in its busy hour."""

    def with_status(self, status: TargetStatus) -> PlanContext:
        return replace(self, status=status)


@dataclass(frozen=True)
class Intent:
    """What one concern decided: the status it leads to, its actions and notes, and a machine-readable reason."""

    code: Code
    status: TargetStatus
    actions: tuple[Action, ...] = ()
    notes: tuple[str, ...] = ()
    coded_notes: tuple[tuple[Code, str], ...] = ()
    """Notes of a concern this one folded in, under that concern's code (observing sizes the replicas inside its own
    intent): they come before ``notes``."""


def window_at(windows: Sequence[TimeWindow], now: datetime) -> TimeWindow:
    hour = now.hour + now.minute / 60 + now.second / 3600
    return next((w for w in windows if w.contains(hour)), windows[0])


def remaining_s(now: datetime, window: TimeWindow) -> float:
    """Seconds from ``now`` to the end of ``window`` (which contains now)."""
    hour = now.hour + now.minute / 60 + now.second / 3600
    return ((window.end_hour - hour) % 24 or 24) * 3600


def per_replica(shape: TrafficShape, replicas: int) -> TrafficShape:
    """The share of the fleet's traffic one replica sees (what a canary trial must replay)."""
    n = max(1, replicas)
    return shape.model_copy(
        update={"arrival_rate_rps": shape.arrival_rate_rps / n, "concurrency": shape.concurrency / n}
    )


def scaled(shape: TrafficShape, factor: float) -> TrafficShape:
    return shape.model_copy(
        update={"arrival_rate_rps": shape.arrival_rate_rps * factor, "concurrency": shape.concurrency * factor}
    )


def round_trials(status: TargetStatus) -> list[TrialResult]:
    """Results of the current tuning round, in the order they ran."""
    if status.tuning is None:
        return []
    keys = set(status.tuning.trial_keys)
    shape = status.tuning.shape
    return [t for t in status.trials if t.shape == shape and t.config.key() in keys]


def move(current: Phase, target: Phase) -> Phase:
    """The phase after ``current`` when a decision wants ``target`` (staying put is not a transition)."""
    return current if current is target and target is not Phase.ROLLING_OUT else transition(current, target)


def observing(status: TargetStatus) -> TargetStatus:
    """``status`` moved to the observing phase."""
    return status.model_copy(update={"phase": move(status.phase, Phase.OBSERVING)})


def measured_cold_start_s(status: TargetStatus, config: EngineConfig) -> float | None:
    """The longest cold start ``config``'s engine was measured to take: its canary trials' start-ups and what its
    promotions recorded. None when nothing reported one."""
    key = config.key()
    seen = [t.startup_s for t in status.trials if t.config.key() == key and t.startup_s > 0]
    seen += [s.cold_start_s for s in status.served if s.config.key() == key and s.cold_start_s]
    return max(seen, default=None)


def next_window(rules: Rules, now: datetime) -> tuple[TimeWindow, float]:
    """The window after the one ``now`` falls in, and the seconds until it starts (to the minute; a day ahead at
    most: one window all day has no next one but itself).

    As if each minute of the day ahead were looked at in turn (``now`` plus 1, 2, ... 1,440 minutes) until one
    falls in another window; only the minutes where that can happen are looked at (:func:`_bound_minutes`), so a
    decision does not walk the whole day when the windows are few."""
    current = window_at(rules.windows, now).name
    for minute in _bound_minutes(rules.windows, now):
        when = now + timedelta(minutes=minute)
        window = window_at(rules.windows, when)
        if window.name != current:
            start = when.replace(second=0, microsecond=0)
            return window, max(0.0, (start - now).total_seconds())
    return window_at(rules.windows, now), 24 * 3600.0


def _bound_minutes(windows: Sequence[TimeWindow], now: datetime) -> list[int]:
    """The minutes ahead (1 to 1,440, in order) at which ``now`` plus that many minutes first reaches or passes a
    window's start or end hour, each with its neighbours (against rounding), and the first minute. The window
    ``window_at`` picks only changes between two minutes a bound lies between (midnight is no change unless a bound
    is there), so the first minute in another window is among these."""
    day = 24 * 60
    of_day = now.hour * 60 + now.minute
    seconds_h = now.second / 3600
    minutes = {1}
    for window in windows:
        for bound in (window.start_hour, window.end_hour):
            first = (math.ceil((bound - seconds_h) * 60) - of_day) % day or day
            minutes.update(m for m in (first - 1, first, first + 1) if 1 <= m <= day)
    return sorted(minutes)


def prewarm_lead_s(ctx: PlanContext) -> float:
    """How long before the next window begins its scheduled config is pre-warmed: that config's measured cold start
    (:func:`measured_cold_start_s`) plus the schedule's ``prewarm_margin_s``, so the candidate's replicas are ready
    as the window begins; the schedule's ``prewarm_lead_s`` when it was never measured (or the window keeps the
    active config)."""
    rules = ctx.rules.schedule
    upcoming, _ = next_window(ctx.rules, ctx.now)
    entry = ctx.status.schedule_for(upcoming.name)
    if entry is None or entry.config.key() == ctx.status.active_config.key():
        return rules.prewarm_lead_s
    cold = measured_cold_start_s(ctx.status, entry.config)
    return rules.prewarm_lead_s if cold is None else cold + rules.prewarm_margin_s


def with_schedule(status: TargetStatus, entry: ScheduledConfig) -> TargetStatus:
    others = tuple(s for s in status.schedule if s.window != entry.window)
    return status.model_copy(update={"schedule": (*others, entry)})


__all__ = [
    "Intent",
    "PlanContext",
    "measured_cold_start_s",
    "move",
    "next_window",
    "observing",
    "per_replica",
    "prewarm_lead_s",
    "remaining_s",
    "round_trials",
    "scaled",
    "window_at",
    "with_schedule",
]
