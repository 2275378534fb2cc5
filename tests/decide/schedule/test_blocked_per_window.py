"""A config rolled back in production is blocked for the window whose traffic it failed on, not everywhere. Stock
rolled back on the evening's chat at 50 % (its TPOT p99 over the bound) was blocked for good, and the nights of
long documents, where stock was the config measured best and holding the SLO, then ran the evening's config on
five replicas instead of three. Blocks recorded before (``blocked_configs``) still hold in every window. Pure,
table-driven."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controller import decide
from controller.decide import Rules, TuningRules
from controller.decide.search.screening import screen
from controller.domain import (
    SLO,
    STOCK,
    EngineConfig,
    LengthDistribution,
    Observation,
    Percentiles,
    Phase,
    RolloutState,
    ScheduledConfig,
    TargetStatus,
    TimeWindow,
    TrafficShape,
    TrialResult,
    TrialStatus,
    VariantStats,
)
from controller.domain.proposal import Proposal
from controller.domain.status import BlockedConfig, TuningRound
from controller.policy import Policy
from tests.support.builders import shape

NIGHT = TimeWindow(name="night", start_hour=0, end_hour=8)
EVENING = TimeWindow(name="evening", start_hour=8, end_hour=24)
SLO_ = SLO(ttft_seconds=2, tpot_seconds=0.05)
RULES = Rules(slo=SLO_, tuning=TuningRules(max_trials=4, min_gain=1.03), windows=(NIGHT, EVENING))
MTP1 = EngineConfig(speculative_method="mtp", num_speculative_tokens=1)
CHAT = shape(10, 64, 1024, 384)
DOCUMENTS = CHAT.model_copy(update={"arrival_rate_rps": 1, "prompt_tokens": LengthDistribution(mean=8000)})
EVENING_AT = datetime(2026, 12, 2, 18, 10, tzinfo=UTC)
NIGHT_AT = datetime(2026, 12, 3, 1, 0, tzinfo=UTC)


def variant(name: str, requests: int, tpot_p95: float) -> VariantStats:
    return VariantStats(
        variant=name, requests=requests, errors=0, ttft_p95_s=0.5, tpot_p95_s=tpot_p95, good_requests=requests
    )


def test_a_rollback_blocks_the_config_for_the_window_it_failed_in() -> None:
    rollout = RolloutState(
        id="evening-1",
        from_config=MTP1,
        to_config=STOCK,
        steps=(10, 50, 100),
        step_index=1,
        weight=50,
        started_at=EVENING_AT - timedelta(minutes=30),
        step_started_at=EVENING_AT - timedelta(minutes=10),
    )
    status = TargetStatus(window="evening", phase=Phase.ROLLING_OUT, active_config=MTP1, rollout=rollout)
    obs = Observation(
        target="ns/m",
        start=EVENING_AT - timedelta(minutes=5),
        end=EVENING_AT,
        shape=CHAT,
        variants={"candidate": variant("candidate", 320, 0.061), "stable": variant("stable", 320, 0.03)},
    )
    d = decide.plan(status=status, observation=obs, observe_error=None, proposals=(), rules=RULES, now=EVENING_AT)
    assert d.codes == ("slo-breach",) and d.status.phase is Phase.ROLLED_BACK
    assert d.status.blocked_in_windows == (BlockedConfig(key=STOCK.key(), window="evening"),)
    assert d.status.blocked_configs == ()


@pytest.mark.parametrize(
    ("status", "window", "blocked"),
    [
        (TargetStatus(blocked_in_windows=(BlockedConfig(key="a", window="evening"),)), "evening", {"a"}),
        (TargetStatus(blocked_in_windows=(BlockedConfig(key="a", window="evening"),)), "night", set()),
        (TargetStatus(blocked_configs=("b",)), "night", {"b"}),  # recorded before: blocked everywhere
        (
            TargetStatus(blocked_configs=("b",), blocked_in_windows=(BlockedConfig(key="a", window="night"),)),
            "night",
            {"a", "b"},
        ),
        (TargetStatus(blocked_in_windows=(BlockedConfig(key="a", window="night"),)), None, set()),
    ],
)
def test_blocked_for(status: TargetStatus, window: str | None, blocked: set[str]) -> None:
    assert status.blocked_for(window) == blocked


def trial(config: EngineConfig, goodput: float, shape: TrafficShape) -> TrialResult:
    return TrialResult(
        config=config,
        shape=shape,
        slo=SLO_,
        status=TrialStatus.MEASURED,
        ttft_s=Percentiles(p50=0.3, p95=0.6, p99=0.9),
        tpot_s=Percentiles(p50=0.02, p95=0.03, p99=0.04),
        goodput_tokens_per_s=goodput,
        output_tokens_per_s=goodput,
        request_throughput=shape.arrival_rate_rps,
        completed=100,
    )


def night_entry() -> ScheduledConfig:
    return ScheduledConfig(
        window="night",
        config=STOCK,
        shape=DOCUMENTS,
        goodput_tokens_per_s=300,
        stock_goodput_tokens_per_s=300,
        reason="measured",
        tuned_at=NIGHT_AT - timedelta(days=1),
    )


@pytest.mark.parametrize(("blocked_in", "switches"), [("evening", True), ("night", False)])
def test_the_night_switches_to_a_config_blocked_only_in_the_evening(blocked_in: str, switches: bool) -> None:
    status = TargetStatus(
        window="night",
        active_config=MTP1,
        schedule=(night_entry(),),
        trials=(trial(MTP1, 150, DOCUMENTS),),  # the evening's config at half the night's goodput
        blocked_in_windows=(BlockedConfig(key=STOCK.key(), window=blocked_in),),
    )
    obs = Observation(target="ns/m", start=NIGHT_AT - timedelta(minutes=5), end=NIGHT_AT, shape=DOCUMENTS)
    d = decide.plan(status=status, observation=obs, observe_error=None, proposals=(), rules=RULES, now=NIGHT_AT)
    assert ("scheduled-switch" in d.codes) is switches, d.codes
    assert (d.status.rollout is not None and d.status.rollout.to_config == STOCK) is switches


@pytest.mark.parametrize(("round_window", "chosen"), [("night", STOCK), ("evening", MTP1)])
def test_a_round_chooses_a_config_blocked_only_in_another_window(round_window: str, chosen: EngineConfig) -> None:
    """A night round measured stock at twice the evening config's goodput; stock is blocked in the evening."""
    shape = DOCUMENTS.model_copy(update={"window": NIGHT if round_window == "night" else EVENING})
    round_ = TuningRound(
        id="r1",
        window=round_window,
        shape=shape,
        started_at=NIGHT_AT - timedelta(minutes=30),
        reason="drift",
        trial_keys=(MTP1.key(), STOCK.key(), MTP1.key()),
        trial_proposers=("baseline", "baseline", "repeat"),
        trial_reasons=("", "", ""),
        stop_code="search-no-proposals",
        stop_reason="no untried proposal passed the guardrails",
    )
    status = TargetStatus(
        window="night",
        phase=Phase.TRIALLING,
        active_config=MTP1,
        tuning=round_,
        trials=(trial(MTP1, 150, shape), trial(STOCK, 300, shape), trial(MTP1, 150, shape)),
        blocked_in_windows=(BlockedConfig(key=STOCK.key(), window="evening"),),
    )
    obs = Observation(target="ns/m", start=NIGHT_AT - timedelta(minutes=5), end=NIGHT_AT, shape=DOCUMENTS)
    d = decide.plan(status=status, observation=obs, observe_error=None, proposals=(), rules=RULES, now=NIGHT_AT)
    entry = d.status.schedule_for(round_window)
    started = d.status.rollout.to_config if d.status.rollout is not None else None
    assert (started or (entry.config if entry is not None else None)) == chosen, d.codes


@pytest.mark.parametrize(("round_window", "accepted"), [("night", True), ("evening", False)])
def test_the_guardrails_refuse_a_config_only_where_it_was_rolled_back(round_window: str, accepted: bool) -> None:
    round_ = TuningRound(id="r1", window=round_window, shape=DOCUMENTS, started_at=NIGHT_AT, reason="drift")
    status = TargetStatus(
        window="night",
        phase=Phase.TRIALLING,
        tuning=round_,
        active_config=MTP1,
        blocked_in_windows=(BlockedConfig(key=STOCK.key(), window="evening"),),
    )
    policy = Policy.model_validate({"space": {"speculative_method": ["none", "mtp"], "num_speculative_tokens": [1]}})
    taken, refused = screen(
        [Proposal(STOCK, "stock", "optimizer")], status, rules=Rules.from_policy(policy), max_accept=4
    )
    assert bool(taken) is accepted
    assert any("rolled back in production" in r for r in refused) is not accepted
