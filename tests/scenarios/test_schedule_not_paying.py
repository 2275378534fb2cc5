"""Scenario: the schedule's running account and the fall-back to static after a losing week. The day's config
(also probed on the night's documents) is the best static config measured; the night's own config needs fewer
replicas there, so each night switches to it and each morning back. The account in status counts every cycle's
GPUs against what the static config would have run. A week that ends behind sets the schedule aside: the static
config serves every window for a week (code ``schedule-not-paying``, said in the digest), no switch and no
tune-ahead runs, and the schedule resumes once that week is over. Clock injected (a fake clock, one decision every
5 minutes); the week before the test is pre-loaded in the account (behind, or ahead); a rollout that starts is
taken as promoted at once."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from controller import decide
from controller.clock import FakeClock
from controller.decide import Rules, ScalingRules, TuningRules
from controller.decide.rules import DigestRules
from controller.decide.schedule.account import static_reference, tally
from controller.domain.actions import Notify
from controller.domain.config import EngineConfig
from controller.domain.observation import Observation
from controller.domain.phases import Phase
from controller.domain.slo import SLO
from controller.domain.status import ScheduleAccount, TargetStatus
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialResult
from tests.support.builders import plan_context, scheduled, shape
from tests.support.day_night import DAY, DAY_CONFIG, NIGHT, NIGHT_CONFIG, NIGHT_SHAPE, held_probe

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
CYCLE_S = 300.0
#: one replica's share, as the rounds replayed them
DAY_SHAPE = shape(10.0, 128)
SLO_ = SLO(ttft_seconds=2, tpot_seconds=0.1)
RULES = Rules(
    slo=SLO_,
    tuning=TuningRules(max_trials=4),
    windows=(NIGHT, DAY),
    scaling=ScalingRules(min_replicas=1, max_replicas=32, headroom=0.25, scale_down_stabilisation_s=0),
    digest=DigestRules(hour=9),
)


def held(config: EngineConfig, shape: TrafficShape, rate: float, goodput: float) -> TrialResult:
    """A trial of ``config`` on ``shape``'s mix at ``rate`` req/s that met the SLO."""
    at_rate = shape.model_copy(update={"arrival_rate_rps": rate}) if rate != shape.arrival_rate_rps else shape
    return held_probe(config, at_rate, goodput, slo=SLO_, completed=200)


def start_status(account: ScheduleAccount) -> TargetStatus:
    tuned = START - timedelta(days=8)
    schedule = (
        scheduled(
            "day",
            DAY_CONFIG,
            DAY_SHAPE,
            goodput=5000,
            stock_goodput=4000,
            reason="measured",
            tuned_at=tuned,
            capacity_rps=10.0,
            fleet_rate_rps=40.0,
        ),
        scheduled(
            "night",
            NIGHT_CONFIG,
            NIGHT_SHAPE,
            goodput=600,
            stock_goodput=400,
            reason="measured",
            tuned_at=tuned,
            capacity_rps=2.0,
            fleet_rate_rps=4.0,
        ),
    )
    trials = (
        held(DAY_CONFIG, DAY_SHAPE, 10.0, 5000),
        held(DAY_CONFIG, NIGHT_SHAPE, 1.0, 400),  # the day's config on the night's documents: 1 req/s a replica
        held(NIGHT_CONFIG, NIGHT_SHAPE, 2.0, 600),
    )
    return TargetStatus(
        active_config=DAY_CONFIG,
        replicas=5,
        window="day",
        schedule=schedule,
        trials=trials,
        schedule_account=account,
        last_digest_on=START.date(),
    )


def run(
    account: ScheduleAccount, days: float
) -> tuple[Counter[str], list[tuple[datetime, EngineConfig]], TargetStatus]:
    clock = FakeClock(START)
    status = start_status(account)
    codes: Counter[str] = Counter()
    switches: list[tuple[datetime, EngineConfig]] = []
    digests: list[str] = []
    while clock.now() < START + timedelta(days=days):
        clock.advance(CYCLE_S)
        now = clock.now()
        night = now.hour < 8
        shape = (NIGHT_SHAPE if night else DAY_SHAPE).model_copy(
            update={"arrival_rate_rps": 4.0 if night else 40.0, "concurrency": 64.0 if night else 512.0}
        )
        decision = decide.plan(
            status=status,
            observation=Observation(target="ns/m", start=now - timedelta(seconds=CYCLE_S), end=now, shape=shape),
            observe_error=None,
            proposals=(),
            rules=RULES,
            now=now,
        )
        codes.update(decision.codes)
        digests += [str(a.fields) for a in decision.actions if isinstance(a, Notify) and a.title == "Daily digest"]
        status = decision.status
        if status.rollout is not None:  # promoted at once
            switches.append((now, status.rollout.to_config))
            status = status.model_copy(
                update={
                    "active_config": status.rollout.to_config,
                    "rollout": None,
                    "phase": Phase.OBSERVING,
                    "last_switch_at": now,
                }
            )
    assert all("schedule account" in d for d in digests), digests
    return codes, switches, status


def week_before(realised_h: float, static_h: float) -> ScheduleAccount:
    """The week that ends an hour into the test, as counted."""
    since = START - timedelta(days=7) + timedelta(hours=1)
    return ScheduleAccount(
        since=since,
        updated_at=START,
        realised_gpu_s=realised_h * 3600,
        static_gpu_s=static_h * 3600,
        static_config=DAY_CONFIG,
    )


def test_the_best_static_config_measured_is_the_one_probed_on_every_window() -> None:
    ctx = plan_context(start_status(week_before(0, 0)), RULES, START, DAY)
    # the night's config was never probed on the day's traffic; the day's config needs 5 replicas for 40 req/s by
    # day (16 h) and 5 for 4 req/s at night (8 h)
    assert static_reference(ctx) == (DAY_CONFIG, 5 * 16 + 5 * 8)


def test_a_cycle_is_counted_against_what_the_static_config_would_have_run() -> None:
    status = start_status(ScheduleAccount(since=START, updated_at=START)).model_copy(
        update={"active_config": NIGHT_CONFIG, "replicas": 3}
    )
    now = START.replace(hour=2) + timedelta(days=1)
    status = status.model_copy(
        update={"schedule_account": ScheduleAccount(since=START, updated_at=now - timedelta(seconds=CYCLE_S))}
    )
    night = NIGHT_SHAPE.model_copy(update={"arrival_rate_rps": 4.0, "concurrency": 64.0})
    ctx = plan_context(
        status,
        RULES,
        now,
        NIGHT,
        observation=Observation(target="ns/m", start=now - timedelta(seconds=CYCLE_S), end=now, shape=night),
    )
    counted = tally(ctx)
    assert counted is not None and counted.code == "schedule-account"
    account = counted.status.schedule_account
    assert account is not None
    assert account.realised_gpu_s == pytest.approx(3 * CYCLE_S)  # the night's config on 3 replicas
    assert account.static_gpu_s == pytest.approx(5 * CYCLE_S)  # the day's config would have needed 5


def test_a_losing_week_falls_back_to_static_for_a_week_then_the_schedule_resumes() -> None:
    codes, switches, status = run(week_before(realised_h=500.0, static_h=400.0), days=9)
    assert codes["schedule-not-paying"] == 1, codes
    account = status.schedule_account
    assert account is not None and account.fallback_config is None  # over by the end of day 8
    # the day's config was active already: no switch for a week, then the night's config again on the 8th night
    assert switches, codes
    first = switches[0][0]
    assert first >= START + timedelta(days=7, hours=1), switches
    assert switches[0][1] == NIGHT_CONFIG
    assert codes["tune-ahead"] == 0


def test_a_week_ahead_of_static_keeps_the_schedule() -> None:
    codes, switches, _status = run(week_before(realised_h=300.0, static_h=400.0), days=2)
    assert codes["schedule-not-paying"] == 0
    # the first night: to the night's config, pre-warmed ahead of midnight
    assert switches[0] == (START + timedelta(hours=11, minutes=45), NIGHT_CONFIG), switches


def test_a_losing_week_moves_to_the_static_config_when_another_one_runs() -> None:
    """At night, on the night's config, when the week is settled behind: the static config is rolled out at once
    (code ``schedule-not-paying``)."""
    at_night = START.replace(hour=3)
    status = start_status(
        ScheduleAccount(
            since=at_night - timedelta(days=7),
            updated_at=at_night - timedelta(seconds=CYCLE_S),
            realised_gpu_s=500 * 3600.0,
            static_gpu_s=400 * 3600.0,
            static_config=DAY_CONFIG,
        )
    ).model_copy(update={"active_config": NIGHT_CONFIG, "replicas": 3, "window": "night"})
    night = NIGHT_SHAPE.model_copy(update={"arrival_rate_rps": 4.0, "concurrency": 64.0})
    decision = decide.plan(
        status=status,
        observation=Observation(target="ns/m", start=at_night - timedelta(seconds=CYCLE_S), end=at_night, shape=night),
        observe_error=None,
        proposals=(),
        rules=RULES,
        now=at_night,
    )
    assert decision.codes[0] == "schedule-not-paying"
    assert "schedule-not-paying" in decision.codes[1:], decision.codes
    assert decision.status.rollout is not None and decision.status.rollout.to_config == DAY_CONFIG
