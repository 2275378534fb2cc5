"""Capacity-based scaling and window economics: table-driven."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controller.decide import ApiPrice
from controller.decide.capacity.sizing import (
    ProbeRules,
    ScalingDecision,
    ScalingRules,
    desired_replicas,
    next_probe_factor,
    probe_bracket,
)
from controller.decide.tuning.economics import WindowEconomics, window_economics
from tests.support.builders import scheduled, shape

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
RULES = ScalingRules(min_replicas=1, max_replicas=6, headroom=0.2, scale_down_stabilisation_s=600)


def desire(
    forecast: float, capacity: float, current: int, *, rules: ScalingRules = RULES, now: datetime = NOW, **kw: Any
) -> ScalingDecision:
    """The replicas ``forecast`` req/s needs at ``capacity`` req/s a replica, ``current`` running, at ``now``."""
    return desired_replicas(
        forecast_rps=forecast, capacity_rps_per_replica=capacity, current=current, rules=rules, now=now, **kw
    )


def economics(
    window: str, gpu_hours: float, *, tokens: tuple[float, float, float], api: ApiPrice, gpu_usd_per_hour: float = 4.05
) -> WindowEconomics:
    """``window``'s economics over ``gpu_hours``; ``tokens``: input, output and the output the GPUs could have made."""
    return window_economics(
        window=window,
        gpu_hours=gpu_hours,
        gpu_usd_per_hour=gpu_usd_per_hour,
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        capacity_output_tokens=tokens[2],
        api=api,
    )


@pytest.mark.parametrize(
    ("forecast", "capacity", "current", "below_since", "external", "replicas", "says"),
    [
        (10.0, 5.0, 1, None, None, 3, "scale up 1 -> 3"),  # 10 * 1.2 / 5 = 2.4 -> 3
        (10.0, 5.0, 3, None, None, 3, "keep 3"),
        (100.0, 5.0, 2, None, None, 6, "bounded to [1, 6]"),
        (0.0, 5.0, 2, None, None, 2, "scale-down waits 600 s"),  # first time below: wait
        (0.0, 5.0, 2, NOW - timedelta(seconds=700), None, 1, "scale down 2 -> 1"),
        (1.0, 0.0, 2, None, None, 2, "no measured capacity"),
        (10.0, 5.0, 1, None, "HorizontalPodAutoscaler/vllm", 1, "deferring"),
    ],
)
def test_desired_replicas(
    forecast: float,
    capacity: float,
    current: int,
    below_since: datetime | None,
    external: str | None,
    replicas: int,
    says: str,
) -> None:
    d = desire(forecast, capacity, current, below_since=below_since, external_autoscaler=external)
    assert d.replicas == replicas
    assert says in d.reason


def test_takeover_mode_scales_despite_an_hpa() -> None:
    rules = ScalingRules(external_autoscaler_mode="takeover")
    d = desire(10, 5, 1, rules=rules, external_autoscaler="ScaledObject/vllm")
    assert d.replicas == 3 and "taking over from ScaledObject/vllm" in d.reason


def test_stabilisation_window_is_carried_in_state() -> None:
    first = desire(0, 5, 3)
    assert first.replicas == 3 and first.below_since == NOW
    later = desire(0, 5, 3, now=NOW + timedelta(seconds=601), below_since=first.below_since)
    assert later.replicas == 1
    bounce = desire(20, 5, 3)
    assert bounce.below_since is None


@pytest.mark.parametrize("bad", [{"min_replicas": 3, "max_replicas": 2}, {"headroom": -0.1}])
def test_bad_scaling_rules(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ScalingRules(**bad)  # type: ignore[arg-type]


def test_busy_gpu_beats_the_api_and_idle_gpu_loses() -> None:
    api = ApiPrice(input_per_million=0.30, output_per_million=1.20)
    busy = economics("day", 8, tokens=(200e6, 200e6, 250e6), api=api)
    assert busy.self_hosted_usd == pytest.approx(32.4)
    assert busy.api_usd == pytest.approx(60 + 240)
    assert not busy.api_is_cheaper and busy.saving == pytest.approx(1 - 32.4 / 300)
    assert busy.usd_per_million_output == pytest.approx(0.162)
    assert busy.utilisation == pytest.approx(0.8)
    idle = economics("night", 7, tokens=(2e6, 1e6, 200e6), api=api)
    assert idle.api_is_cheaper and "API cheaper" in idle.describe() and "0.5% utilised" in idle.describe()


@pytest.mark.parametrize("gpu_usd_per_hour", [0.0, 4.05])
def test_no_api_price_gives_no_verdict(gpu_usd_per_hour: float) -> None:
    """An API price of 0 is no price set, not a free API: no "API cheaper", no saving against it."""
    free = ApiPrice(input_per_million=0.0, output_per_million=0.0)
    e = economics("day", 8, tokens=(200e6, 200e6, 250e6), api=free, gpu_usd_per_hour=gpu_usd_per_hour)
    assert not e.api_is_cheaper and e.saving == 0.0
    assert "API cheaper" not in e.describe() and "no API price" in e.describe()


def test_negative_inputs_are_rejected() -> None:
    with pytest.raises(ValueError):
        economics(
            "w", -1, tokens=(0, 0, 0), api=ApiPrice(input_per_million=1, output_per_million=1), gpu_usd_per_hour=1
        )


def test_schedule_economics_projects_each_window() -> None:
    from controller.decide.tuning.economics import schedule_economics
    from controller.domain import STOCK, TimeWindow

    mix = shape(10, 256, 500, 500)
    windows = (TimeWindow(name="day", start_hour=8, end_hour=18), TimeWindow(name="night", start_hour=18, end_hour=8))
    schedule = (
        scheduled("day", STOCK, mix, goodput=5000, stock_goodput=5000, replicas=2, capacity_rps=6, fleet_rate_rps=10),
        scheduled(
            "night", STOCK, mix, goodput=5000, stock_goodput=5000, replicas=1, capacity_rps=6, fleet_rate_rps=0.1
        ),
        scheduled("gone", STOCK, mix, goodput=1, stock_goodput=1, fleet_rate_rps=1),
    )
    day, night = schedule_economics(
        schedule, windows=windows, gpu_usd_per_hour=4.0, api=ApiPrice(input_per_million=0.3, output_per_million=1.2)
    )
    assert day.gpu_hours == 20 and day.self_hosted_usd == 80
    assert day.output_tokens == pytest.approx(10 * 36000 * 500)
    assert day.utilisation == pytest.approx(10 / 12)
    assert not day.api_is_cheaper and night.api_is_cheaper and night.gpu_hours == 14


@pytest.mark.parametrize(
    ("low", "high", "tried", "expect"),
    [
        (1.0, None, 0, 2.0),  # held at the round's load: double
        (4.0, None, 2, 8.0),
        (64.0, None, 6, None),  # 64 x 256 x 2 would pass the concurrency cap
        (2.0, 4.0, 2, 2.8284),  # bracketed: geometric middle
        (2.8284, 3.0844, 4, None),  # within 10 %: done
        (0.0, 1.0, 0, 0.5),  # missed at the round's load: halve
        (1.0, None, 8, None),  # out of probes
    ],
)
def test_the_capacity_search_doubles_then_narrows(
    low: float, high: float | None, tried: int, expect: float | None
) -> None:
    got = next_probe_factor(low, high, base_concurrency=256, tried=tried, rules=ProbeRules())
    assert got == (pytest.approx(expect) if expect is not None else None)


def test_the_probe_bracket_is_the_highest_held_and_the_lowest_missed_load() -> None:
    assert probe_bracket([(1.0, True), (2.0, True), (4.0, False), (2.83, False)]) == (2.0, 2.83)
    assert probe_bracket([(1.0, False)]) == (0.0, 1.0)
    assert probe_bracket([(1.0, True)]) == (1.0, None)
