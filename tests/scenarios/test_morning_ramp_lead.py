"""Scenario: the morning ramp with managed replicas. The load climbs steadily through the ramp window towards the
day's; the planner sizes the stable variant from the capacity probed for the window's config each control cycle
(every 5 minutes, on the last 5 minutes' mean rate), and an added replica serves only after a 3-minute cold start.
Sized from the observed load alone, each added replica arrives when the load has already passed what the replicas
before it carry. Clock injected (a fake clock through the ramp)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from controller import decide
from controller.clock import FakeClock
from controller.decide import Rules, ScalingRules
from controller.domain.actions import Scale
from controller.domain.config import EngineConfig
from controller.domain.observation import Observation
from controller.domain.slo import SLO
from controller.domain.status import TargetStatus
from controller.domain.traffic import TimeWindow, TrafficShape
from tests.support.builders import scheduled
from tests.support.builders import shape as traffic

NIGHT = TimeWindow(name="night", start_hour=0, end_hour=7)
RAMP = TimeWindow(name="morning-ramp", start_hour=7, end_hour=10)
DAY = TimeWindow(name="day", start_hour=10, end_hour=24)
START = datetime(2026, 12, 1, 7, 0, tzinfo=UTC)
CONFIG = EngineConfig(max_num_seqs=512)
CAPACITY_RPS = 20.0  # one replica within the SLO, as its probe measured and as it really is here
SLOPE_RPS_PER_MIN = 0.4  # 0 req/s at 07:00 to 72 req/s at 10:00
COLD_START_S = 180.0
CYCLE_S = 300.0
RULES = Rules(
    slo=SLO(ttft_seconds=2, tpot_seconds=0.1),
    windows=(NIGHT, RAMP, DAY),
    scaling=ScalingRules(min_replicas=1, max_replicas=16, headroom=0.1, scale_down_stabilisation_s=900),
)


def shape(rate: float) -> TrafficShape:
    return traffic(rate, 24 * rate)


def rate_at(when: datetime) -> float:
    minutes = (when - START).total_seconds() / 60
    return SLOPE_RPS_PER_MIN * min(max(minutes, 0.0), 180.0)


#: what earlier weeks show for each window's busy hour (sampled every 15 minutes, as the forecaster does)
FORECAST = {
    "morning-ramp": shape(rate_at(START + timedelta(minutes=172.5))),
    "day": shape(rate_at(START + timedelta(minutes=180))),
}


def ramp() -> list[tuple[datetime, float, int, int]]:
    """(minute, offered rate, replicas ready, replicas desired) for every minute from 07:05 to 10:00."""
    clock = FakeClock(START)
    entry = scheduled(
        "morning-ramp",
        CONFIG,
        shape(10.0),
        goodput=3000,
        stock_goodput=1500,
        reason="measured",
        capacity_rps=CAPACITY_RPS,
    )
    status = TargetStatus(active_config=CONFIG, window="morning-ramp", replicas=1, schedule=(entry,))
    ready_at = [START - timedelta(hours=1)]  # when each replica started serving
    minutes: list[tuple[datetime, float, int, int]] = []
    while clock.now() < START + timedelta(hours=3):
        for _ in range(int(CYCLE_S // 60)):
            clock.advance(60)
            ready = sum(1 for t in ready_at if t <= clock.now())
            minutes.append((clock.now(), rate_at(clock.now() - timedelta(seconds=30)), ready, len(ready_at)))
        now = clock.now()
        mean = sum(rate_at(now - timedelta(seconds=s)) for s in range(0, 300, 10)) / 30
        decision = decide.plan(
            status=status,
            observation=Observation(target="ns/m", start=now - timedelta(seconds=CYCLE_S), end=now, shape=shape(mean)),
            observe_error=None,
            proposals=(),
            rules=RULES,
            now=now,
            forecast=FORECAST,
        )
        status = decision.status
        for action in decision.actions:
            if isinstance(action, Scale) and action.variant == "stable":
                if action.replicas > len(ready_at):
                    ready_at += [now + timedelta(seconds=COLD_START_S)] * (action.replicas - len(ready_at))
                else:
                    ready_at = ready_at[: action.replicas]
    return minutes


def test_replicas_added_during_the_ramp_are_warm_before_the_load_needs_them() -> None:
    short = [
        f"{t:%H:%M} {rate:.1f} req/s on {ready} ready replica(s)"
        for t, rate, ready, _desired in ramp()
        if rate > ready * CAPACITY_RPS
    ]
    assert short == []


def test_the_lead_adds_no_replica_the_load_does_not_reach_within_the_lead() -> None:
    lead = timedelta(seconds=RULES.scaling.lead_s if RULES.scaling else 0.0)
    headroom = RULES.scaling.headroom if RULES.scaling else 0.0
    for t, _rate, _ready, desired in ramp():
        needed = math.ceil(rate_at(t + lead + timedelta(minutes=5)) * (1 + headroom) / CAPACITY_RPS - 1e-9)
        assert desired <= max(1, needed), t
