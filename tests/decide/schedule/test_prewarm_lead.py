"""How far ahead of its window a scheduled config is pre-warmed: its measured cold start and the margin, and, when
the window's forecast brings more load than the fleet serves now, the whole stepped rollout on top, so the ramp
meets the new config promoted."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from controller.decide import RolloutRules
from controller.decide.context import PlanContext, prewarm_lead_s, rollout_span_s, window_at
from controller.domain import Observation, TargetStatus, TrafficShape
from tests.support.day_night import DAY, DAY_CONFIG, DAY_NIGHT_RULES, NIGHT_SHAPE, day_entry, held_probe, night_entry

NOW = datetime(2026, 12, 1, 23, 0, tzinfo=UTC)
RULES = replace(DAY_NIGHT_RULES, rollout=RolloutRules(steps=(10, 50, 100), bake_s=180))
COLD_S = 200.0


def context(*, now_rps: float, forecast_rps: float | None, cold: bool = True, scheduled: bool = True) -> PlanContext:
    night = night_entry()
    probe = held_probe(night.config, NIGHT_SHAPE, 600).model_copy(update={"startup_s": COLD_S if cold else 0.0})
    status = TargetStatus(
        active_config=DAY_CONFIG if scheduled else night.config,
        window=DAY.name,
        replicas=2,
        schedule=(night,),
        trials=(probe,),
    )
    now_shape = NIGHT_SHAPE.model_copy(update={"arrival_rate_rps": now_rps})
    forecast: dict[str, TrafficShape] = {}
    if forecast_rps is not None:
        forecast["night"] = NIGHT_SHAPE.model_copy(update={"arrival_rate_rps": forecast_rps})
    return PlanContext(
        status=status,
        observation=Observation(target="ns/m", start=NOW - timedelta(minutes=5), end=NOW, shape=now_shape),
        observe_error=None,
        proposals=(),
        rules=RULES,
        now=NOW,
        window=window_at(RULES.windows, NOW),
        forecast=forecast,
    )


BASE = COLD_S + RULES.schedule.prewarm_margin_s
SPAN = 3 * 180 + COLD_S  # three steps baked; on 2 replicas only the last adds one (1, 1, 2) and waits for it


@pytest.mark.parametrize(
    ("now_rps", "forecast_rps", "cold", "scheduled", "lead"),
    [
        (3.0, 28.0, True, True, BASE + SPAN),  # the night ramps up: the rollout finishes on today's load
        (3.0, 2.0, True, True, BASE),  # the night is lighter: the steps can move on its load
        (3.0, 3.0, True, True, BASE),  # as much load: no ramp
        (3.0, None, True, True, BASE),  # no forecast: nothing says the load rises
        (
            3.0,
            28.0,
            False,
            True,
            RULES.schedule.prewarm_lead_s + 3 * 180 + RULES.schedule.prewarm_lead_s,
        ),  # never measured: the schedule's lead stands in for the cold start
        (3.0, 28.0, True, False, RULES.schedule.prewarm_lead_s),  # the night keeps the active config: nothing to warm
    ],
)
def test_prewarm_lead(now_rps: float, forecast_rps: float | None, cold: bool, scheduled: bool, lead: float) -> None:
    assert prewarm_lead_s(context(now_rps=now_rps, forecast_rps=forecast_rps, cold=cold, scheduled=scheduled)) == lead


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


def test_a_ramp_starts_the_prewarm_earlier_through_the_plan() -> None:
    """Through the planner: 15 minutes before the night, a ramp to 12 req/s pre-warms its config now; without the
    ramp the same moment is too early."""
    from controller import decide

    early = NOW.replace(hour=23, minute=45)
    ctx = context(now_rps=3.0, forecast_rps=28.0)
    day = day_entry(ctx.status.schedule[0].shape)
    # the day's config measured on the night's traffic: half the night config's capacity
    active_there = held_probe(DAY_CONFIG, NIGHT_SHAPE.model_copy(update={"arrival_rate_rps": 0.5}), 300)
    status = ctx.status.model_copy(
        update={"replicas": 4, "schedule": (*ctx.status.schedule, day), "trials": (*ctx.status.trials, active_there)}
    )
    for forecast_rps, code in ((12.0, "prewarm"), (2.0, None)):
        decision = decide.plan(
            status=status,
            observation=ctx.observation,
            observe_error=None,
            proposals=(),
            rules=RULES,
            now=early,
            forecast={"night": NIGHT_SHAPE.model_copy(update={"arrival_rate_rps": forecast_rps})},
        )
        codes = [str(c) for c in decision.codes]
        if code is None:
            assert "prewarm" not in codes, codes
        else:
            assert code in codes, (codes, "\n".join(decision.notes))
