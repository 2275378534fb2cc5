"""Diurnal traffic: deterministic by seed, day and night shapes as the profile describes, windows, weekends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from controller.domain import TrafficShape
from controller.errors import InvalidInput
from controller.simulator.traffic.diurnal import DiurnalTraffic
from controller.simulator.traffic.presets import PRESETS, preset_names
from controller.simulator.traffic.profile import TrafficProfile

MONDAY = datetime(2026, 11, 30, tzinfo=UTC)  # a Monday
SATURDAY = MONDAY + timedelta(days=5)


def at(hour: float, day: datetime = MONDAY) -> datetime:
    return day + timedelta(hours=hour)


def test_same_seed_same_day_different_seed_different_noise() -> None:
    a, b, c = DiurnalTraffic(7), DiurnalTraffic(7), DiurnalTraffic(8)
    day_a = [s for _, s in a.day(MONDAY, step_s=600)]
    day_b = [s for _, s in b.day(MONDAY, step_s=600)]
    day_c = [s for _, s in c.day(MONDAY, step_s=600)]
    assert day_a == day_b
    assert [s.arrival_rate_rps for s in day_a] != [s.arrival_rate_rps for s in day_c]


def test_shape_is_a_pure_function_of_time_not_call_order() -> None:
    traffic = DiurnalTraffic(3)
    late_first = traffic.shape_at(at(13.5))
    for hour in range(24):
        traffic.shape_at(at(hour))
    assert DiurnalTraffic(3).shape_at(at(13.5)) == late_first


def test_daytime_is_agent_traffic_at_high_concurrency() -> None:
    day = DiurnalTraffic(0).shape_at(at(13))
    assert 200 <= day.concurrency <= 320
    assert 450 <= day.prompt_tokens.mean <= 600 and 450 <= day.output_tokens.mean <= 600
    assert day.repetitiveness < 0.2
    assert day.window is not None and day.window.name == "day"


def test_night_is_long_documents_at_low_concurrency() -> None:
    traffic = DiurnalTraffic(0)
    for hour in (0, 2, 4, 6):
        night = traffic.shape_at(at(hour))
        assert 1 <= night.concurrency <= 8
        assert night.prompt_tokens.mean >= 10_000
        assert night.repetitiveness >= 0.7
        assert night.window is not None and night.window.name == "night"


def test_peak_around_midday_and_ramps_in_between() -> None:
    traffic = DiurnalTraffic(0, TrafficProfile.parse({**PRESETS["coding-agents"], "noise_cv": 0.0}))
    conc = {h: traffic.shape_at(at(h)).concurrency for h in range(24)}
    peak_hour = max(conc, key=lambda h: conc[h])
    assert 11 <= peak_hour <= 15
    # monotone morning ramp and evening fall-off
    morning = [conc[h] for h in range(7, 12)]
    assert morning == sorted(morning)
    evening = [conc[h] for h in range(15, 23)]
    assert evening == sorted(evening, reverse=True)
    ramp = traffic.shape_at(at(8.5))
    assert 8 < ramp.concurrency < 200


def test_noise_is_multiplicative_and_bounded() -> None:
    quiet = DiurnalTraffic(0, TrafficProfile.parse({**PRESETS["coding-agents"], "noise_cv": 0.0}))
    noisy = DiurnalTraffic(0)
    ratios = []
    for minute in range(0, 1440, 7):
        q, n = quiet.shape_at(at(minute / 60)), noisy.shape_at(at(minute / 60))
        ratio = n.concurrency / q.concurrency
        assert n.arrival_rate_rps / q.arrival_rate_rps == pytest.approx(ratio)
        assert n.prompt_tokens == q.prompt_tokens  # noise moves load, not the request mix
        ratios.append(ratio)
    assert 0.7 < min(ratios) < 1.0 < max(ratios) < 1.3
    assert sum(ratios) / len(ratios) == pytest.approx(1.0, abs=0.05)


def test_littles_law_holds_per_population() -> None:
    flat = DiurnalTraffic(0, "agents-flat").shape_at(at(12))
    population = PRESETS["agents-flat"]["populations"]["agents"]
    assert flat.concurrency == pytest.approx(population["peak_concurrency"])
    assert flat.arrival_rate_rps == pytest.approx(flat.concurrency / population["request_seconds"])


def test_named_windows_tile_the_day() -> None:
    traffic = DiurnalTraffic(0)
    assert [w.name for w in traffic.windows] == ["night", "morning-ramp", "day", "evening"]
    assert [(w.start_hour, w.end_hour) for w in traffic.windows] == [(0, 7), (7, 10), (10, 18), (18, 24)]
    assert traffic.window_at(6.99).name == "night"
    assert traffic.window_at(7).name == "morning-ramp"
    assert traffic.window_at(23.9).name == "evening"
    assert traffic.window("day").hours == 8


def test_nominal_window_shapes_differ_day_vs_night() -> None:
    traffic = DiurnalTraffic(0)
    day, night = traffic.nominal_shape("day"), traffic.nominal_shape("night")
    assert day.window is not None and day.window.name == "day"
    assert day.concurrency > 20 * night.concurrency
    assert night.prompt_tokens.mean > 20 * day.prompt_tokens.mean
    assert night.repetitiveness > day.repetitiveness + 0.5
    assert day.bucket() != night.bucket()
    with pytest.raises(InvalidInput, match="window"):
        traffic.nominal_shape("lunch")


def test_ramp_mixes_lengths_with_exact_moments() -> None:
    ramp = DiurnalTraffic(0).shape_at_hour(7.5, noise=False)
    # both populations active: the prompt mean lies between them and the spread is far wider than either's
    assert 512 < ramp.prompt_tokens.mean < 24_000
    assert ramp.prompt_tokens.cv > 1.0
    assert ramp.prompt_tokens.maximum == 128_000


def test_weekday_generator_ignores_weekends_week_generator_does_not() -> None:
    daily, weekly = DiurnalTraffic(0), DiurnalTraffic.week(0)
    assert daily.shape_at(at(13, SATURDAY)).concurrency > 200
    weekend_noon = weekly.shape_at(at(13, SATURDAY))
    weekday_noon = weekly.shape_at(at(13))
    assert weekend_noon.concurrency < 0.5 * weekday_noon.concurrency
    # on weekends documents run longer into the morning
    assert weekly.shape_at(at(8, SATURDAY)).prompt_tokens.mean > 10_000
    assert weekly.shape_at_hour(13, day_of_week=6, noise=False).concurrency < 100
    assert weekly.shape_at_hour(13, day_of_week=2, noise=False).concurrency > 200


def test_shapes_are_valid_domain_values() -> None:
    for _, shape in DiurnalTraffic(11).day(MONDAY, step_s=300):
        assert isinstance(shape, TrafficShape)
        TrafficShape.model_validate(shape.model_dump())


def test_presets_parse() -> None:
    for name in preset_names():
        DiurnalTraffic(0, name)
    with pytest.raises(InvalidInput, match="unknown traffic profile"):
        DiurnalTraffic(0, "no-such-profile")


def test_bad_profiles_name_the_field(tmp_path: Path) -> None:
    overlapping = {**PRESETS["coding-agents"], "windows": [{"name": "a", "start_hour": 0, "end_hour": 13}]}
    with pytest.raises(InvalidInput, match="windows"):
        TrafficProfile.parse(overlapping, source="mine.yaml")
    bad_curve = tmp_path / "bad.yaml"
    bad_curve.write_text(
        "name: x\nwindows: [{name: all, start_hour: 0, end_hour: 24}]\npopulations:\n"
        "  a: {peak_concurrency: 4, request_seconds: 10, prompt_tokens: {mean: 10}, output_tokens: {mean: 10},\n"
        "      curve: {knots: [[0, 0.5], [12, 2.0], [24, 0.5]]}}\n"
    )
    with pytest.raises(InvalidInput, match=r"bad\.yaml:populations\.a\.curve\.knots"):
        TrafficProfile.from_yaml(bad_curve)
    with pytest.raises(InvalidInput, match="cannot read"):
        TrafficProfile.from_yaml(tmp_path / "missing.yaml")
    with pytest.raises(InvalidInput, match="day_of_week"):
        DiurnalTraffic(0).shape_at_hour(3, day_of_week=7)


def test_yaml_profile_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "flat.yaml"
    path.write_text(
        "name: tiny\nnoise_cv: 0\nwindows: [{name: all, start_hour: 0, end_hour: 24}]\npopulations:\n"
        "  a: {peak_concurrency: 4, request_seconds: 10, prompt_tokens: {mean: 100}, output_tokens: {mean: 50},\n"
        "      curve: {knots: [[0, 1], [24, 1]]}}\n"
    )
    shape = DiurnalTraffic(0, TrafficProfile.from_yaml(path)).shape_at(at(5))
    assert shape.concurrency == 4 and shape.arrival_rate_rps == pytest.approx(0.4)


def test_load_scale_multiplies_streams_and_rate_not_the_mix() -> None:
    full, quarter = DiurnalTraffic(5), DiurnalTraffic(5, load_scale=0.25)
    for hour in (3, 8, 13, 20):
        a, b = full.shape_at(at(hour)), quarter.shape_at(at(hour))
        assert b.concurrency == pytest.approx(a.concurrency / 4)
        assert b.arrival_rate_rps == pytest.approx(a.arrival_rate_rps / 4)
        assert b.prompt_tokens == a.prompt_tokens and b.repetitiveness == a.repetitiveness
    with pytest.raises(InvalidInput, match="load_scale"):
        DiurnalTraffic(0, load_scale=0)
