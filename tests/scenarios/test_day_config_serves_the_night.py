"""Scenario: the day's config serves the night as well as the night's own (stock, searched on the night's traffic).
The day's config was never measured on the night's traffic, so nothing said what switching away from it would gain;
each night the fleet switched to stock and each morning back, two rollouts a day on candidate GPUs for nothing. It
is now measured on the night's traffic once, before the first switch, and the schedule weighs the switch on that
trial: no switch at all, and no second trial on later nights. Where the day's config fails the night's SLO the same
trial lets the switch go ahead. Clock injected (a fake clock, one decision every 5 minutes for three days), trials
answered by a fake canary; a rollout that starts is taken as promoted at once (what matters here is which switches
the schedule starts)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from controller import decide
from controller.act.effects import TrialRecorded
from controller.act.fold import fold
from controller.clock import FakeClock
from controller.decide import Rules, TuningRules
from controller.domain.actions import RunTrial
from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import Observation
from controller.domain.phases import Phase
from controller.domain.slo import SLO
from controller.domain.status import ScheduledConfig, TargetStatus
from controller.domain.traffic import TimeWindow
from controller.domain.trial import TrialResult, TrialStatus
from tests.support import builders
from tests.support.builders import scheduled, shape

NIGHT = TimeWindow(name="night", start_hour=0, end_hour=8)
DAY = TimeWindow(name="day", start_hour=8, end_hour=24)
START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
CYCLE_S = 300.0
DAY_CONFIG = EngineConfig(async_scheduling=True, max_num_seqs=512, max_num_batched_tokens=4096)
DAY_SHAPE = shape(40.0, 1024)
NIGHT_SHAPE = DAY_SHAPE.model_copy(update={"arrival_rate_rps": 4.0, "concurrency": 96})
RULES = Rules(
    slo=SLO(ttft_seconds=2, tpot_seconds=0.05), tuning=TuningRules(max_trials=8, min_gain=1.03), windows=(NIGHT, DAY)
)


def schedule() -> tuple[ScheduledConfig, ...]:
    tuned = START - timedelta(days=1)
    return (
        scheduled("night", STOCK, NIGHT_SHAPE, stock_goodput=2000, reason="keeping stock", tuned_at=tuned),
        scheduled("day", DAY_CONFIG, DAY_SHAPE, goodput=16000, stock_goodput=12000, reason="measured", tuned_at=tuned),
    )


def canary(action: RunTrial, day_config_at_night: float) -> TrialResult:
    at_night = action.shape.concurrency < 200
    goodput = (2000.0 if action.config == STOCK else day_config_at_night) if at_night else 16000.0
    ok = goodput > 0
    return builders.trial(
        action.config,
        action.shape,
        slo=RULES.slo,
        status=TrialStatus.MEASURED if ok else TrialStatus.FAILED,
        goodput=goodput,
        ttft=(0.2, 0.5, 0.8) if ok else None,
        tpot=(0.02, 0.03, 0.04) if ok else None,
        completed=200 if ok else 0,
        goodput_rps=action.shape.arrival_rate_rps,
        duration_s=120.0,
        reason="" if ok else "engine exited during start-up",
    )


def three_days(day_config_at_night: float) -> tuple[Counter[str], list[tuple[str, EngineConfig]]]:
    """Reason codes over three days, and each trial's (day, config)."""
    clock = FakeClock(START)
    status = TargetStatus(active_config=DAY_CONFIG, replicas=1, schedule=schedule(), window="day")
    codes: Counter[str] = Counter()
    trials: list[tuple[str, EngineConfig]] = []
    while clock.now() < START + timedelta(days=3):
        clock.advance(CYCLE_S)
        now = clock.now()
        shape = NIGHT_SHAPE if now.hour < 8 else DAY_SHAPE
        decision = decide.plan(
            status=status,
            observation=Observation(target="ns/m", start=now - timedelta(seconds=CYCLE_S), end=now, shape=shape),
            observe_error=None,
            proposals=(),
            rules=RULES,
            now=now,
        )
        codes.update(decision.codes)
        runs = [a for a in decision.actions if isinstance(a, RunTrial)]
        trials.extend((f"{now:%a}", a.config) for a in runs)
        status = fold(
            decision.status, [TrialRecorded(a, canary(a, day_config_at_night)) for a in runs], keep_trials=200
        )
        if status.rollout is not None:  # promoted at once
            status = status.model_copy(
                update={
                    "active_config": status.rollout.to_config,
                    "rollout": None,
                    "phase": Phase.OBSERVING,
                    "last_switch_at": now,
                }
            )
    return codes, trials


def test_a_day_config_as_good_at_night_is_measured_once_and_kept() -> None:
    codes, trials = three_days(day_config_at_night=1990.0)
    assert trials == [("Mon", DAY_CONFIG)]  # 23:45, ahead of the first night, on the night's traffic
    assert codes["switch-check"] == 1
    assert codes["prewarm"] == codes["scheduled-switch"] == 0  # before: 6 pre-warmed switches in three days


@pytest.mark.parametrize("at_night", [0.0, 1000.0])
def test_a_day_config_that_fails_or_trails_at_night_gives_way_after_one_trial(at_night: float) -> None:
    codes, trials = three_days(day_config_at_night=at_night)
    assert trials == [("Mon", DAY_CONFIG)]
    switches = codes["prewarm"] + codes["scheduled-switch"]
    assert switches == 6, codes  # to stock each night and back each morning
