"""Scenario: the evening before the night window, with managed replicas. The night's scheduled config measured more
goodput than the day's config at the night's load, so the old rule (goodput gain x the window's length against a
fixed switch cost) pre-warmed it. Whether a switch pays is a question of GPUs: the replicas it saves over the night
at the forecast load against the GPU time its rollout holds on candidates. Clock injected (23:50, lead 15 min)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controller import decide
from controller.domain.config import EngineConfig
from controller.domain.status import TargetStatus
from controller.domain.trial import Percentiles, TrialResult
from tests.support.builders import observed, shape
from tests.support.day_night import DAY_CONFIG, DAY_NIGHT_RULES, NIGHT_CONFIG, day_entry, held_probe, night_entry

BEFORE_MIDNIGHT = datetime(2026, 11, 30, 23, 50, tzinfo=UTC)
DAY_SHAPE = shape(20, 256)
#: one replica's share of the night's documents, as the night's round replayed it
NIGHT_SHAPE = shape(0.5, 8, 24000, 1024, repetitiveness=0.85)
NIGHT_FORECAST = NIGHT_SHAPE.model_copy(update={"arrival_rate_rps": 4.0, "concurrency": 64})
RULES = DAY_NIGHT_RULES


def held(config: EngineConfig, rate: float, goodput: float) -> TrialResult:
    """A probe of ``config`` on the night's mix at ``rate`` req/s that met the SLO."""
    return held_probe(
        config, NIGHT_SHAPE.model_copy(update={"arrival_rate_rps": rate, "concurrency": 16 * rate}), goodput
    )


def evening(day_config_capacity: float | None) -> TargetStatus:
    night = night_entry(NIGHT_SHAPE)  # 1.5x the day config's goodput on the night's load
    day = day_entry(DAY_SHAPE)
    trials = [held(NIGHT_CONFIG, 1.0, 600)]
    if day_config_capacity is not None:
        trials.append(held(DAY_CONFIG, day_config_capacity, 400))
    else:  # measured on the night's load, outside the SLO there: no capacity to tell
        missed = Percentiles(p50=1.5, p95=3.0, p99=4.0)
        trials.append(held(DAY_CONFIG, NIGHT_SHAPE.arrival_rate_rps, 400).model_copy(update={"ttft_s": missed}))
    return TargetStatus(active_config=DAY_CONFIG, window="day", replicas=4, schedule=(night, day), trials=tuple(trials))


@pytest.mark.parametrize(
    ("day_config_capacity", "prewarms"),
    [
        (1.0, False),  # both configs need 5 replicas for the night's 4 req/s: the switch saves no GPU
        # 6 vs 5 replicas at the forecast, but a 5 % capacity gap is inside the two probes' noise: at the new
        # config's capacity less that noise both need 6, so the switch is not known to save anything
        (0.95, False),
        (0.8, True),  # 7 vs 6 replicas at every load within the forecast's uncertainty: one GPU all night
        (0.5, True),  # 10 vs 5 replicas all night: the switch pays many times over
        (None, True),  # no load of the night's mix held within the SLO: the goodput gain decides
    ],
)
def test_a_scheduled_switch_must_save_more_gpu_time_than_its_rollout_holds(
    day_config_capacity: float | None, prewarms: bool
) -> None:
    d = decide.plan(
        status=evening(day_config_capacity),
        observation=observed(DAY_SHAPE, BEFORE_MIDNIGHT),
        observe_error=None,
        proposals=(),
        rules=RULES,
        now=BEFORE_MIDNIGHT,
        forecast={"night": NIGHT_FORECAST},
    )
    assert (d.status.rollout is not None) is prewarms, d.codes
    if prewarms:
        assert d.codes == ("prewarm",)
    else:
        assert d.codes == ("switch-not-paying",)
