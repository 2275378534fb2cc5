"""Scenario: the evening's config rolls out at 19:00 onto the day's fleet of 8 replicas, while the evening's chat
needs 3. The rollout used to keep the day's 8 (and a candidate share of them) until it was through, an hour or more
on the evening's quieter traffic. With a capacity probed for both configs on the evening's traffic, the fleet is
sized for the evening (the whole load at the lower of the two capacities, so either can carry it) and the
candidate keeps its share of the smaller fleet. Clock injected (19:40, 20 minutes below the need)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controller import decide
from controller.decide import Rules, ScalingRules, TuningRules
from controller.domain.actions import Scale
from controller.domain.config import EngineConfig
from controller.domain.phases import Phase
from controller.domain.slo import SLO
from controller.domain.status import ScheduledConfig, TargetStatus
from controller.domain.traffic import TimeWindow
from tests.support.builders import at_step, observed, scheduled, shape

DAY = TimeWindow(name="day", start_hour=8, end_hour=19)
EVENING = TimeWindow(name="evening", start_hour=19, end_hour=24)
NIGHT = TimeWindow(name="night", start_hour=0, end_hour=8)
NOW = datetime(2026, 12, 1, 19, 40, tzinfo=UTC)
DAY_CONFIG = EngineConfig(max_num_seqs=512)
EVENING_CONFIG = EngineConfig(max_num_seqs=128, max_num_batched_tokens=2048)
CHAT = shape(2.0, 32, 800, 300)
EVENING_LOAD = CHAT.model_copy(update={"arrival_rate_rps": 4.0, "concurrency": 64})
RULES = Rules(
    slo=SLO(ttft_seconds=2, tpot_seconds=0.1),
    tuning=TuningRules(max_trials=4),
    windows=(NIGHT, DAY, EVENING),
    scaling=ScalingRules(min_replicas=1, max_replicas=32, headroom=0.25, scale_down_stabilisation_s=900),
)


def entry(window: str, config: EngineConfig, capacity: float | None) -> ScheduledConfig:
    return scheduled(
        window,
        config,
        CHAT,
        goodput=1000,
        stock_goodput=800,
        reason="measured",
        replicas=8 if window == "day" else 3,
        capacity_rps=capacity,
        fleet_rate_rps=4.0,
    )


def rolling_out(evening_capacity: float | None) -> TargetStatus:
    rollout = at_step(
        "evening-20261201190000", DAY_CONFIG, EVENING_CONFIG, (10, 50, 100), 0, NOW, ago=(40, 5), proposed_by="schedule"
    )
    return TargetStatus(
        phase=Phase.ROLLING_OUT,
        active_config=DAY_CONFIG,
        window="evening",
        replicas=8,
        rollout=rollout,
        schedule=(entry("day", DAY_CONFIG, 2.0), entry("evening", EVENING_CONFIG, evening_capacity)),
        scale_below_since=NOW - timedelta(minutes=20),
    )


@pytest.mark.parametrize(
    ("evening_capacity", "replicas"),
    [
        (2.5, 3),  # 4 req/s x 1.25 at the day config's 2.0 req/s (the lower): 3 replicas, not the day's 8
        (1.8, 3),  # the candidate's capacity is the lower: 4 x 1.25 / 1.8 = 2.8, still 3
        (None, 8),  # the candidate's capacity on this traffic is unknown: the fleet waits for the rollout
    ],
)
def test_an_evening_rollout_does_not_hold_the_days_fleet(evening_capacity: float | None, replicas: int) -> None:
    d = decide.plan(
        status=rolling_out(evening_capacity),
        observation=observed(EVENING_LOAD, NOW),
        observe_error=None,
        proposals=(),
        rules=RULES,
        now=NOW,
        forecast={"evening": EVENING_LOAD},
    )
    assert d.status.rollout is not None  # the rollout goes on
    stable = [a for a in d.actions if isinstance(a, Scale) and a.variant == "stable"]
    if replicas < 8:
        assert "scale" in d.codes
        assert [a.replicas for a in stable] == [replicas]
        # the candidate keeps its 10 % of the smaller fleet
        assert [a.replicas for a in d.actions if isinstance(a, Scale) and a.variant == "candidate"] == [1]
    else:
        assert not stable
