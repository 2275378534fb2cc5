"""How far ahead of its window a scheduled config is pre-warmed: its measured cold start and the margin, and, when
the window's forecast brings more load than the fleet serves now and no canary trial saw the config miss the SLO
on today's traffic, the whole stepped rollout on top, so the ramp meets the new config promoted."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from controller import decide
from controller.decide import RolloutRules
from controller.decide.context import PlanContext, prewarm_lead_s, window_at
from controller.decide.rollout.sizing import rollout_span_s
from controller.decide.schedule.switch import ramp_span_s, window_ahead
from controller.domain.status import TargetStatus
from controller.domain.traffic import LengthDistribution, TimeWindow, TrafficShape
from controller.domain.trial import Percentiles, TrialResult
from tests.support.builders import observed, plan_context
from tests.support.day_night import (
    DAY,
    DAY_CONFIG,
    DAY_NIGHT_RULES,
    NIGHT_CONFIG,
    NIGHT_SHAPE,
    day_entry,
    held_probe,
    night_entry,
)

NOW = datetime(2026, 12, 1, 23, 0, tzinfo=UTC)
RULES = replace(DAY_NIGHT_RULES, rollout=RolloutRules(steps=(10, 50, 100), bake_s=180))
COLD_S = 200.0
BASE = COLD_S + RULES.schedule.prewarm_margin_s
SPAN = 3 * 180 + COLD_S  # three steps baked; on 2 replicas only the last adds one (1, 1, 2) and waits for it


def night_probe(*, cold: bool = True, held: bool = True, today: bool = True) -> TrialResult:
    """The night config's canary trial on the traffic the fleet serves now (the night's mix at 1 req/s), or with
    ``today`` false on another mix (2k-token prompts)."""
    shape = NIGHT_SHAPE if today else NIGHT_SHAPE.model_copy(update={"prompt_tokens": LengthDistribution(mean=2000)})
    probe = held_probe(NIGHT_CONFIG, shape, 600).model_copy(update={"startup_s": COLD_S if cold else 0.0})
    if not held:
        probe = probe.model_copy(update={"ttft_s": Percentiles(p50=5.0, p95=9.0, p99=10.0)})  # SLO: 2 s
    return probe


def context(
    *,
    now_rps: float = 3.0,
    forecast_rps: float | None = 28.0,
    cold: bool = True,
    held: bool = True,
    today: bool = True,
    scheduled: bool = True,
) -> PlanContext:
    status = TargetStatus(
        active_config=DAY_CONFIG if scheduled else NIGHT_CONFIG,
        window=DAY.name,
        replicas=2,
        schedule=(night_entry(),),
        trials=(night_probe(cold=cold, held=held, today=today),),
    )
    now_shape = NIGHT_SHAPE.model_copy(update={"arrival_rate_rps": now_rps})
    forecast: dict[str, TrafficShape] = {}
    if forecast_rps is not None:
        forecast["night"] = NIGHT_SHAPE.model_copy(update={"arrival_rate_rps": forecast_rps})
    return plan_context(
        status, RULES, NOW, window_at(RULES.windows, NOW), observation=observed(now_shape, NOW), forecast=forecast
    )


@pytest.mark.parametrize(
    ("ctx", "span"),
    [
        (context(), SPAN),  # the night ramps up and its config held today's traffic: the rollout goes first
        (context(forecast_rps=2.0), 0.0),  # the night is lighter: the steps can move on its load
        (context(forecast_rps=3.0), 0.0),  # as much load: no ramp
        (context(forecast_rps=None), 0.0),  # no forecast: nothing says the load rises
        (context(held=False), 0.0),  # the config missed the SLO on today's traffic: its steps wait for the night's
        (context(held=False, today=False), SPAN),  # it missed it on other traffic only: the analysis judges today's
        (context(today=False), SPAN),  # never measured on today's traffic: the rollout's analysis judges it
        (context(cold=False), 3 * 180 + RULES.schedule.prewarm_lead_s),  # no cold start measured: the fixed lead
        (context(scheduled=False), 0.0),  # the night keeps the active config: nothing to roll out
    ],
)
def test_ramp_span(ctx: PlanContext, span: float) -> None:
    assert ramp_span_s(ctx) == span


def test_the_cold_start_lead_is_the_same_with_or_without_a_ramp() -> None:
    """The replicas sized ahead of the next window (capacity scaling) keep the cold start's lead."""
    for forecast_rps in (28.0, 2.0):
        assert prewarm_lead_s(context(forecast_rps=forecast_rps)) == BASE
    assert prewarm_lead_s(context(cold=False)) == RULES.schedule.prewarm_lead_s


@pytest.mark.parametrize(
    ("steps", "bake_s", "fleet", "span"),
    [
        ((5, 25, 50, 100), 300, 1, 4 * 300),  # one replica carries every step: no step waits for another
        ((5, 25, 50, 100), 300, 8, 4 * 300 + 3 * 100),  # 1, 2, 4, 8 candidate replicas: three steps wait
        ((10, 50, 100), 180, 4, 3 * 180 + 2 * 100),  # 1, 2, 4
        ((10, 50, 100), 180, 2, 3 * 180 + 1 * 100),  # 1, 1, 2
        ((100,), 60, 6, 60),  # one step: its replicas are the first ones, already counted in the cold start
    ],
)
def test_rollout_span_follows_the_policy_steps_bake_and_fleet(
    steps: tuple[int, ...], bake_s: float, fleet: int, span: float
) -> None:
    assert rollout_span_s(RolloutRules(steps=steps, bake_s=bake_s), 100.0, fleet) == span


@pytest.mark.parametrize(
    ("forecast_rps", "held", "prewarms"),
    [(12.0, True, True), (2.0, True, False), (12.0, False, False)],
)
def test_a_ramp_starts_the_prewarm_earlier_through_the_plan(forecast_rps: float, held: bool, prewarms: bool) -> None:
    """Through the planner, 15 minutes before the night (the cold start and margin are 8 min 20 s): a ramp to 12
    req/s pre-warms the night's config now; without the ramp, or when its canary trial missed the SLO on today's
    traffic, it is too early."""
    ctx = context(held=held)
    day = day_entry(ctx.status.schedule[0].shape)
    # the day's config measured on the night's traffic: half the night config's capacity
    active_there = held_probe(DAY_CONFIG, NIGHT_SHAPE.model_copy(update={"arrival_rate_rps": 0.5}), 300)
    status = ctx.status.model_copy(
        update={"replicas": 4, "schedule": (*ctx.status.schedule, day), "trials": (*ctx.status.trials, active_there)}
    )
    decision = decide.plan(
        status=status,
        observation=ctx.observation,
        observe_error=None,
        proposals=(),
        rules=RULES,
        now=NOW.replace(minute=45),
        forecast={"night": NIGHT_SHAPE.model_copy(update={"arrival_rate_rps": forecast_rps})},
    )
    codes = [str(c) for c in decision.codes]
    assert ("prewarm" in codes) is prewarms, (codes, decision.notes)


@pytest.mark.parametrize(
    ("lead_min", "window"),
    [
        (10, "day"),  # the short late window starts in 30 min: not yet
        (30, "late"),  # it starts within the lead
        (60, "late"),  # a lead past its end still pre-warms the late window's config, not the night's after it
    ],
)
def test_a_long_lead_pre_warms_the_next_window_not_the_one_after(lead_min: int, window: str) -> None:
    short = (
        TimeWindow(name="day", start_hour=8, end_hour=23.5),
        TimeWindow(name="late", start_hour=23.5, end_hour=23.75),
        TimeWindow(name="night", start_hour=23.75, end_hour=8),
    )
    ctx = replace(context(), rules=replace(RULES, windows=short), window=short[0])
    assert window_ahead(ctx, lead_min * 60).name == window
