"""Hour-of-week profile folding and the forecast on synthetic history with a known pattern."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from controller.observe.arrival_forecast import forecast
from controller.observe.profile import TrafficProfile, hour_of_week, profile_from_series

MONDAY = datetime(2026, 11, 2, 0, 0, tzinfo=UTC)
STEP = 300.0


def pattern(when: datetime, growth_per_day: float = 0.0, days_from_start: float = 0.0) -> float:
    """Weekday daytime peak of 10 req/s, night 2 req/s, weekends half; optional linear growth."""
    base = 2.0 + 8.0 * max(0.0, math.sin(math.pi * (when.hour - 6) / 14)) if 6 <= when.hour < 20 else 2.0
    if when.weekday() >= 5:
        base /= 2
    return base + growth_per_day * days_from_start


def synthetic(
    days: int, growth_per_day: float = 0.0, idle_hours: tuple[int, ...] = ()
) -> dict[str, list[tuple[float, float]]]:
    series: dict[str, list[tuple[float, float]]] = {
        k: [] for k in ("arrival_rate", "concurrency", "prompt_mean", "output_mean")
    }
    steps = int(days * 86400 / STEP)
    for i in range(steps):
        when = MONDAY + timedelta(seconds=i * STEP)
        ts = when.timestamp()
        rate = pattern(when, growth_per_day, i * STEP / 86400)
        if when.hour in idle_hours:
            series["arrival_rate"].append((ts, 0.0))
            series["concurrency"].append((ts, 0.0))
            series["prompt_mean"].append((ts, math.nan))
            series["output_mean"].append((ts, math.nan))
            continue
        series["arrival_rate"].append((ts, rate))
        series["concurrency"].append((ts, rate * 1.5))  # 1.5 s mean latency
        series["prompt_mean"].append((ts, 2000.0 if when.hour < 12 else 500.0))
        series["output_mean"].append((ts, 200.0))
    return series


def build(days: int, **kwargs: object) -> TrafficProfile:
    end = MONDAY + timedelta(days=days)
    return profile_from_series(
        "prod/chat",
        synthetic(days, **kwargs),
        start=MONDAY,
        end=end,
        step_s=STEP,
        built_at=end,  # type: ignore[arg-type]
    )


def test_profile_slots_hold_the_pattern() -> None:
    profile = build(14)
    assert len(profile.slots) == 168 and profile.history_hours == 14 * 24
    tuesday_2pm = MONDAY + timedelta(days=1, hours=14)
    slot = profile.slot(hour_of_week(tuesday_2pm))
    assert slot is not None
    assert slot.arrival_rate == pytest.approx(
        sum(pattern(tuesday_2pm + timedelta(minutes=5 * k)) for k in range(12)) / 12, rel=1e-3
    )
    assert slot.concurrency == pytest.approx(slot.arrival_rate * 1.5, rel=1e-3)
    assert slot.prompt_mean == 500.0 and slot.output_mean == 200.0
    shape = profile.typical_shape(tuesday_2pm, arrival_rate=20.0)
    assert shape is not None and shape.concurrency == pytest.approx(30.0, rel=1e-3)


def test_profile_fits_in_a_status_and_round_trips() -> None:
    profile = build(28)
    text = profile.model_dump_json()
    assert len(text) < 24_000
    assert TrafficProfile.model_validate_json(text) == profile


def test_idle_hours_give_zero_rate_and_no_lengths() -> None:
    profile = build(7, idle_hours=(3,))
    slot = profile.slot(3)
    assert slot is not None and slot.arrival_rate == 0.0 and slot.prompt_mean is None
    assert profile.typical_shape(MONDAY + timedelta(hours=3)) is None


@pytest.mark.parametrize(
    ("days", "method", "tolerance"),
    [(21, "holt-winters-weekly", 0.15), (3, "holt-winters-daily", 0.25), (1, "seasonal-baseline", 0.0)],
)
def test_forecast_follows_the_season(days: int, method: str, tolerance: float) -> None:
    profile = build(days)
    now = MONDAY + timedelta(days=days)
    result = forecast(profile, now=now, horizon_h=24)
    assert result.method == method and len(result.points) == 24
    errors = [abs(p.arrival_rate - pattern(p.at + timedelta(minutes=30))) for p in result.points]
    mean_level = sum(pattern(p.at) for p in result.points) / 24
    if tolerance:
        assert sum(errors) / 24 <= tolerance * mean_level
    for p in result.points:
        assert p.low <= p.arrival_rate <= p.high


def test_forecast_extrapolates_trend() -> None:
    profile = build(21, growth_per_day=0.2)
    now = MONDAY + timedelta(days=21)
    result = forecast(profile, now=now, horizon_h=24)
    flat = forecast(build(21), now=now, horizon_h=24)
    gain = sum(p.arrival_rate for p in result.points) / 24 - sum(p.arrival_rate for p in flat.points) / 24
    assert gain == pytest.approx(0.2 * 21, rel=0.2)


def test_forecast_without_history_is_empty() -> None:
    empty = TrafficProfile(target="t", built_at=MONDAY, history_start=MONDAY, step_s=300)
    assert forecast(empty, now=MONDAY).points == ()


def test_forecast_skips_ahead_when_profile_is_older() -> None:
    profile = build(21)
    later = MONDAY + timedelta(days=22, hours=5)
    result = forecast(profile, now=later, horizon_h=3)
    assert result.points[0].at == later
    assert result.points[0].arrival_rate == pytest.approx(pattern(later + timedelta(minutes=30)), rel=0.2, abs=0.5)
