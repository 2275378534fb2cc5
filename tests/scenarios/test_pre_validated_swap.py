"""Scenario: two days of a day window and a night window on a fake clock, through decide and act on in-memory ports.

The first night's config and the first morning's are each rolled out in full (the policy's four analysed steps of
five minutes), and each promotion leaves its evidence in status (``status.served``: the canary trial, the analysed
steps). On the second evening both configs have been served in production in the windows the switch moves between,
so the switch is a pre-validated swap (code ``pre-validated-swap``): the night config's replicas for the night's
forecast surged at once, two steps of a minute, the analysis still on. A swapped config that breaches the SLO is
rolled back as any rollout is. The pre-warm starts one measured cold start (and the schedule's margin) before the
window, so the candidate's replicas are ready as it begins. Status goes through its JSON every cycle, as it does
through the CR."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest

from controller import decide
from controller.act import ActPorts, Executor, TrialSettings
from controller.act.fold import fold
from controller.adapters.notify.recording import RecordingNotifier
from controller.clock import FakeClock
from controller.decide import Rules, ScalingRules, ScheduleRules, TuningRules
from controller.decide.signals.drift import DriftParams
from controller.domain import ServedConfig
from controller.domain.actions import DeployCandidate, SetWeights
from controller.domain.config import EngineConfig
from controller.domain.observation import Observation, TargetRef
from controller.domain.phases import Phase
from controller.domain.rollout import RolloutState
from controller.domain.slo import SLO
from controller.domain.status import TargetStatus
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialResult
from controller.ports import TrialBudget, TrialRequest
from controller.testing.memory import InMemoryCluster, InMemoryRouter
from tests.support import builders
from tests.support.builders import shape, variant
from tests.support.day_night import DAY, DAY_CONFIG, NIGHT, NIGHT_CONFIG, NIGHT_SHAPE, day_entry, night_entry

TARGET = TargetRef("team-a", "docs", "llama")
SLO_ = SLO(ttft_seconds=2, tpot_seconds=0.1)
COLD_START_S = 240.0
DAY_SHAPE = shape(10, 16)
#: the fleet's load in each window's busy hour: 20 req/s by day, 4 req/s of documents at night
FORECAST = {
    "day": DAY_SHAPE.model_copy(update={"arrival_rate_rps": 20.0}),
    "night": NIGHT_SHAPE.model_copy(update={"arrival_rate_rps": 4.0}),
}
RULES = Rules(
    slo=SLO_,
    tuning=TuningRules(max_trials=4, approval="auto"),
    windows=(NIGHT, DAY),
    scaling=ScalingRules(min_replicas=1, max_replicas=32, headroom=0.25, scale_down_stabilisation_s=0),
    drift=DriftParams(weight_concurrency=0),  # the fleet's concurrency moves with its replicas; the mix does not
)
START = datetime(2026, 11, 30, 22, 0, tzinfo=UTC)
SECOND_EVENING = START + timedelta(days=1)


def trial(config: EngineConfig, shape: TrafficShape, rate: float, goodput: float, startup_s: float) -> TrialResult:
    """A canary trial of ``config`` on ``shape``'s mix at ``rate`` req/s that met the SLO."""
    at_rate = shape.model_copy(update={"arrival_rate_rps": rate})
    return builders.trial(config, at_rate, slo=SLO_, goodput=goodput, startup_s=startup_s, goodput_rps=rate)


def first_status(startup_s: float) -> TargetStatus:
    """The evening before the first night: the day config active, both windows tuned and probed, nothing served
    after a rollout yet (the day config was there before Shiftlight)."""
    night = night_entry()
    day = day_entry(DAY_SHAPE, fleet_rate_rps=20.0)
    trials = (
        trial(NIGHT_CONFIG, NIGHT_SHAPE, 1.0, 600, startup_s),
        trial(DAY_CONFIG, NIGHT_SHAPE, 0.5, 400, startup_s),  # the day config on the night's documents
        trial(DAY_CONFIG, DAY_SHAPE, 10.0, 3000, startup_s),
        trial(NIGHT_CONFIG, DAY_SHAPE, 5.0, 1500, startup_s),  # the night config on the day's chat
    )
    return TargetStatus(active_config=DAY_CONFIG, window="day", replicas=3, schedule=(night, day), trials=trials)


class NoTrials:
    """The load tester: this scenario runs none (every window is tuned and probed already)."""

    def run(self, request: TrialRequest) -> TrialResult:
        raise AssertionError(f"no trial expected, got one of {request.config.label()}")


@dataclass
class Week:
    """The fake clock, the in-memory cluster and router, and what happened cycle by cycle."""

    bad_swap: bool = False
    clock: FakeClock = field(default_factory=lambda: FakeClock(START))
    router: InMemoryRouter = field(default_factory=InMemoryRouter)
    cluster: InMemoryCluster = field(init=False)
    deployed_at: datetime | None = None
    codes: list[tuple[datetime, tuple[str, ...]]] = field(default_factory=list)
    rollouts: list[RolloutState] = field(default_factory=list)
    decided: list[tuple[datetime, object]] = field(default_factory=list)
    candidate_ready_at: list[tuple[datetime, datetime]] = field(default_factory=list)
    served: list[ServedConfig] = field(default_factory=list)
    """Each promotion's evidence, as status recorded it."""

    def __post_init__(self) -> None:
        self.cluster = InMemoryCluster(clock=self.clock, router=self.router)
        self.cluster.deploy(TARGET, "stable", DAY_CONFIG, 3)

    def candidate_ready(self, now: datetime) -> int | None:
        """Replicas of the candidate that have finished their cold start (None: no candidate deployed)."""
        deployed = self.cluster.variants.get((str(TARGET), "candidate"))
        if deployed is None or self.deployed_at is None:
            return None
        return deployed.replicas if now >= self.deployed_at + timedelta(seconds=COLD_START_S) else 0

    def observation(self, now: datetime, status: TargetStatus) -> Observation:
        window = "night" if now.hour < 8 else "day"
        load = FORECAST[window]
        good = variant("stable", 600, ttft=0.8, tpot=0.03, output_tokens_per_s=900)
        variants = {"stable": good}
        rollout = status.rollout
        if rollout is not None and rollout.weight > 0:
            candidate = good.model_copy(update={"variant": "candidate"})
            if self.bad_swap and rollout.started_at >= SECOND_EVENING:
                candidate = candidate.model_copy(update={"ttft_p95_s": 6.0, "good_requests": 200})
            variants["candidate"] = candidate
        return Observation(target=str(TARGET), start=now - timedelta(minutes=1), end=now, shape=load, variants=variants)

    def run(self, status: TargetStatus, until: datetime) -> TargetStatus:
        executor = Executor(
            ActPorts(router=self.router, cluster=self.cluster, notifier=RecordingNotifier(), load_tester=NoTrials()),
            TrialSettings(slo=SLO_, budget=TrialBudget()),
        )
        while self.clock.now() < until:
            now = self.clock.now()
            d = decide.plan(
                status=status,
                observation=self.observation(now, status),
                observe_error=None,
                proposals=(),
                rules=RULES,
                now=now,
                candidate_ready_replicas=self.candidate_ready(now),
                forecast=FORECAST,
            )
            for action in d.actions:
                if isinstance(action, DeployCandidate):
                    self.deployed_at = now
                    self.candidate_ready_at.append((now, now + timedelta(seconds=COLD_START_S)))
                self.decided.append((now, action))
            effects = executor.execute(TARGET, d.actions)
            status = fold(d.status, effects, keep_trials=200)
            status = TargetStatus.model_validate_json(status.model_dump_json())  # through the CR's status
            if status.rollout is not None and (not self.rollouts or self.rollouts[-1].id != status.rollout.id):
                self.rollouts.append(status.rollout)
            self.served += [s for s in status.served if s not in self.served]
            self.codes.append((now, d.codes))
            self.clock.advance(60)
        return status

    def first(self, code: str, after: datetime = START) -> datetime:
        return next(at for at, codes in self.codes if code in codes and at >= after)


@pytest.fixture(scope="module")
def two_days() -> tuple[Week, TargetStatus]:
    week = Week()
    return week, week.run(first_status(COLD_START_S), SECOND_EVENING + timedelta(hours=3))


def test_first_night_and_morning_roll_out_in_full_and_leave_their_evidence(
    two_days: tuple[Week, TargetStatus],
) -> None:
    week, _ = two_days
    night, morning = week.rollouts[0], week.rollouts[1]
    assert (night.to_config, morning.to_config) == (NIGHT_CONFIG, DAY_CONFIG)
    for rollout in (night, morning):
        assert rollout.steps == RULES.rollout.steps and rollout.bake_s is None and rollout.surge_replicas is None
    night_served, day_served = week.served[0], week.served[1]
    assert (night_served.window, night_served.config, night_served.rollout_id) == ("night", NIGHT_CONFIG, night.id)
    assert (day_served.window, day_served.config, day_served.rollout_id) == ("day", DAY_CONFIG, morning.id)
    assert night_served.analysed_steps >= len(RULES.rollout.steps)
    assert night_served.canary_goodput_tokens_per_s == 600 and night_served.cold_start_s == COLD_START_S
    assert day_served.analysed_steps >= len(RULES.rollout.steps)


def test_the_second_night_is_a_pre_validated_swap(two_days: tuple[Week, TargetStatus]) -> None:
    week, status = two_days
    first, swap = week.rollouts[0], week.rollouts[2]
    assert swap.to_config == NIGHT_CONFIG and swap.window == "night"
    assert "pre-validated-swap" in dict(week.codes)[swap.started_at]
    # fewer steps and a shorter bake than the first night's rollout
    assert len(swap.steps) < len(first.steps) and swap.steps == ScheduleRules().swap_steps
    assert swap.bake_s == ScheduleRules().swap_bake_s < RULES.rollout.bake_s
    # the surge: the night's 4 req/s x 1.25 headroom at 1.0 req/s a replica, deployed at once
    surge = math.ceil(4.0 * 1.25 / 1.0)
    assert swap.surge_replicas == surge
    deploys = [a for at, a in week.decided if isinstance(a, DeployCandidate) and at >= swap.started_at]
    assert deploys[0].replicas == surge
    assert ("deploy", surge) in [(c.op, c.replicas) for c in week.cluster.calls if c.variant == "candidate"]
    # the analysis is on: each step was analysed before the next, and the promotion follows the last
    weights = [a.candidate_weight for at, a in week.decided if isinstance(a, SetWeights) and at >= swap.started_at]
    assert weights[: len(swap.steps)] == list(swap.steps)
    assert status.active_config == NIGHT_CONFIG and status.phase is Phase.OBSERVING
    assert status.replicas == surge
    promoted = next(s for s in status.served if s.window == "night")
    assert promoted.rollout_id == swap.id and promoted.analysed_steps == len(swap.steps)
    swap_took = promoted.promoted_at - swap.started_at
    first_took = next(at for at, c in week.codes if at > first.started_at and "within-slo" in c) - first.started_at
    assert swap_took < first_took


def test_a_swapped_config_that_breaches_is_rolled_back() -> None:
    week = Week(bad_swap=True)
    status = week.run(first_status(COLD_START_S), SECOND_EVENING + timedelta(hours=3))
    swap = week.rollouts[2]
    assert swap.surge_replicas is not None
    assert "pre-validated-swap" in dict(week.codes)[swap.started_at]
    rolled_back = next(at for at, codes in week.codes if at > swap.started_at and "slo-breach" in codes)
    assert rolled_back - swap.started_at <= timedelta(seconds=COLD_START_S + 2 * 60)
    assert ("retire", "candidate") in [(c.op, c.variant) for c in week.cluster.calls]
    # the failed swap is no evidence any more: the night config's next try is a full analysed rollout, which fails
    # on the night's traffic and leaves it blocked there, the day config serving the night
    retry = week.rollouts[3]
    assert retry.to_config == NIGHT_CONFIG and retry.steps == RULES.rollout.steps and retry.surge_replicas is None
    assert status.served_in("night", NIGHT_CONFIG.key()) is None
    assert NIGHT_CONFIG.key() in status.blocked_for("night")
    assert status.active_config == DAY_CONFIG


@pytest.mark.parametrize(
    ("startup_s", "lead_min"),
    [
        (COLD_START_S, 9),  # measured: 4 min of cold start and the 5-min margin
        (0.0, 15),  # never measured: the schedule's prewarm_lead_s
    ],
)
def test_the_prewarm_starts_one_measured_cold_start_before_the_window(startup_s: float, lead_min: int) -> None:
    week = Week()
    week.run(first_status(startup_s), START + timedelta(hours=2, minutes=1))
    midnight = START + timedelta(hours=2)
    started = week.first("prewarm")
    assert started == midnight - timedelta(minutes=lead_min)
    deployed, ready = week.candidate_ready_at[0]
    assert deployed == started and ready <= midnight


def test_a_longer_margin_starts_the_prewarm_earlier() -> None:
    rules = replace(RULES, schedule=ScheduleRules(prewarm_margin_s=600))
    d = decide.plan(
        status=first_status(COLD_START_S),
        observation=Week().observation(START + timedelta(hours=1, minutes=46), first_status(COLD_START_S)),
        observe_error=None,
        proposals=(),
        rules=rules,
        now=START + timedelta(hours=1, minutes=46),
        forecast=FORECAST,
    )
    assert "prewarm" in d.codes  # 4 + 10 min ahead: from 23:46
