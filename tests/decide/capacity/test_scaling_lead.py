"""Scaling ahead of a rising load: the rate a replica count is sized for, table-driven."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controller.decide import Rules, ScalingRules
from controller.decide.capacity import scaling
from controller.decide.capacity.sizing import leading_rate
from controller.decide.context import PlanContext
from controller.domain.actions import Scale
from controller.domain.config import EngineConfig
from controller.domain.status import TargetStatus
from controller.domain.traffic import TimeWindow, TrafficShape
from tests.support.builders import observed as observed_at
from tests.support.builders import plan_context, scheduled
from tests.support.builders import shape as traffic


@pytest.mark.parametrize(
    ("observed", "end_rate", "lead_s", "remaining_s", "expected"),
    [
        (10.0, 30.0, 600.0, 3600.0, 10.0 + 20.0 * 600 / 3600),  # a straight line to the window's end
        (10.0, 30.0, 600.0, 300.0, 30.0),  # the end is within the lead: its load
        (10.0, 30.0, 600.0, 600.0, 30.0),
        (30.0, 10.0, 600.0, 3600.0, 30.0),  # falling: the observed load
        (10.0, 10.0, 600.0, 3600.0, 10.0),
        (10.0, None, 600.0, 3600.0, 10.0),  # no forecast
        (10.0, 30.0, 0.0, 3600.0, 10.0),  # no lead
        (0.0, 30.0, 900.0, 10800.0, 2.5),
    ],
)
def test_leading_rate(
    observed: float, end_rate: float | None, lead_s: float, remaining_s: float, expected: float
) -> None:
    assert leading_rate(observed, end_rate, lead_s=lead_s, remaining_s=remaining_s) == pytest.approx(expected)


def test_a_negative_lead_is_refused() -> None:
    with pytest.raises(ValueError, match="lead_s"):
        ScalingRules(lead_s=-1)


RAMP = TimeWindow(name="ramp", start_hour=7, end_hour=10)
DAY = TimeWindow(name="day", start_hour=10, end_hour=18)
EVENING = TimeWindow(name="evening", start_hour=18, end_hour=7)
CONFIG = EngineConfig(max_num_seqs=512)
RULES = Rules(
    windows=(RAMP, DAY, EVENING),
    scaling=ScalingRules(min_replicas=1, max_replicas=16, headroom=0.25, scale_down_stabilisation_s=900, lead_s=600),
)


def shape(rate: float, prompt: float = 512) -> TrafficShape:
    return traffic(rate, 24 * rate, prompt, 512)


DOCUMENTS = 24000.0


def context(
    now: datetime, observed: float, forecast: dict[str, float | tuple[float, float]], replicas: int = 1
) -> PlanContext:
    window = next(w for w in RULES.windows if w.contains(now.hour + now.minute / 60))
    entries = tuple(
        scheduled(w.name, CONFIG, shape(10.0), goodput=3000, stock_goodput=1500, reason="measured", capacity_rps=20.0)
        for w in RULES.windows
    )
    status = TargetStatus(active_config=CONFIG, window=window.name, replicas=replicas, schedule=entries)
    observation = observed_at(shape(observed), now)
    return plan_context(
        status,
        RULES,
        now,
        window,
        observation=observation,
        forecast={name: shape(*rate) if isinstance(rate, tuple) else shape(rate) for name, rate in forecast.items()},
    )


DAY_OF = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("hour", "observed", "forecast", "end_rate", "replicas"),
    [
        # the ramp rises into a busier day: its own busy hour at its end; 15 + 16 x 10/60 = 17.7 x 1.25 > 20
        (9.0, 15.0, {"ramp": 31.0, "day": 40.0}, 31.0, 2),
        # sized from the observed load alone it would keep 1 (15 x 1.25 < 20); no forecast: no lead
        (9.0, 15.0, {}, None, 1),
        # the day's busy hour is behind it and the evening is quieter: the load at the day's end is the evening's,
        # below what is observed, so nothing is led even minutes before the end
        (17.9, 15.0, {"day": 40.0, "evening": 12.0}, 12.0, 1),
        # the next window has no forecast: this window's busy hour, within the lead of the end (40 x 1.25 / 20)
        (17.9, 15.0, {"day": 40.0}, 40.0, 3),
        # a quiet ramp: the lead stays within one replica
        (8.0, 2.0, {"ramp": 10.0, "day": 40.0}, 10.0, 1),
        # a forecast of another length mix (24k-token documents) is not a rate the observed mix's capacity sizes
        (9.0, 15.0, {"ramp": (31.0, DOCUMENTS), "day": 40.0}, None, 1),
        (9.0, 15.0, {"ramp": 31.0, "day": (40.0, DOCUMENTS)}, None, 1),
    ],
)
def test_window_end_rate_and_the_replicas_it_leads_to(
    hour: float,
    observed: float,
    forecast: dict[str, float | tuple[float, float]],
    end_rate: float | None,
    replicas: int,
) -> None:
    now = DAY_OF + timedelta(hours=hour)
    ctx = context(now, observed, forecast)
    left = (RULES.windows[0].end_hour if ctx.window.name == "ramp" else 18) * 3600 - hour * 3600
    assert scaling.window_end_rate(ctx, left) == end_rate
    intent = scaling.scale(ctx)
    wanted = next((a.replicas for a in intent.actions if isinstance(a, Scale)), ctx.status.replicas)
    assert wanted == replicas, intent.notes
    assert intent.code == ("scale" if replicas > 1 else "replicas-kept")
