"""The capacity finalist with more sequence slots than a round's leader, table-driven."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from controller.decide import Rules, ScalingRules
from controller.decide.context import PlanContext
from controller.decide.tuning import probe
from controller.domain.config import STOCK, EngineConfig
from controller.domain.slo import SLO
from controller.domain.status import TargetStatus, TuningRound
from controller.domain.traffic import TimeWindow
from controller.domain.trial import TrialResult
from tests.support import builders
from tests.support.builders import plan_context, shape

DAY = TimeWindow(name="day", start_hour=0, end_hour=24)
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SHAPE = shape(20, 512)
SLO_ = SLO(ttft_seconds=2, tpot_seconds=0.05)
LEADER = EngineConfig(max_num_seqs=512, kv_cache_dtype="fp8")
S256 = EngineConfig(max_num_seqs=256)
S1024_FP8 = EngineConfig(kv_cache_dtype="fp8")
ACTIVE = EngineConfig(max_num_seqs=128)


def result(config: EngineConfig, goodput: float, *, meets: bool = True) -> TrialResult:
    return builders.trial(
        config,
        SHAPE,
        slo=SLO_,
        goodput=goodput,
        ttft=(0.3, 0.6 if meets else 4.0, 0.8 if meets else 6.0),
        throughput=20,
    )


def context(trials: list[TrialResult], *, scaling: bool = True, blocked: tuple[str, ...] = ()) -> PlanContext:
    round_ = TuningRound(
        id="r",
        window="day",
        shape=SHAPE,
        started_at=NOW,
        reason="tuning",
        trial_keys=tuple(t.config.key() for t in trials),
    )
    status = TargetStatus(
        active_config=ACTIVE, window="day", tuning=round_, trials=tuple(trials), blocked_configs=blocked
    )
    rules = Rules(
        slo=SLO_, windows=(DAY,), scaling=ScalingRules(max_replicas=16) if scaling else None, design_slots=512
    )
    return plan_context(
        status,
        rules,
        NOW,
        DAY,
        is_lossy=lambda c: c.kv_cache_dtype == "fp8",
        candidate_ready_replicas=None,
        forecast={},
        external_autoscaler=None,
    )


@pytest.mark.parametrize(
    ("config", "expected"),
    [(STOCK, math.inf), (EngineConfig(max_num_seqs=64), 64.0), (LEADER, 512.0)],
)
def test_slots(config: EngineConfig, expected: float) -> None:
    assert probe.slots(config) == expected


@pytest.mark.parametrize(
    ("trials", "scaling", "blocked", "expected", "why"),
    [
        ([result(LEADER, 2000), result(STOCK, 1400)], True, (), STOCK, "the engine's default: more slots"),
        ([result(LEADER, 2000), result(S256, 1900)], True, (), None, "fewer slots than the leader"),
        ([result(LEADER, 2000), result(STOCK, 1400, meets=False)], True, (), None, "missed the SLO"),
        ([result(LEADER, 2000), result(STOCK, 1400)], False, (), None, "replicas not managed"),
        ([result(LEADER, 2000), result(STOCK, 1400)], True, (STOCK.key(),), None, "blocked"),
        (
            [result(LEADER, 2000), result(STOCK, 1400), result(S1024_FP8, 1500)],
            True,
            (),
            S1024_FP8,
            "the best goodput of the wider ones (lossy is fine beside a lossy leader)",
        ),
        ([result(LEADER, 2000), result(ACTIVE, 1000)], True, (), None, "the active config is probed apart"),
    ],
)
def test_more_slots(
    trials: list[TrialResult], scaling: bool, blocked: tuple[str, ...], expected: EngineConfig | None, why: str
) -> None:
    ctx = context(trials, scaling=scaling, blocked=blocked)
    found = probe.more_slots(ctx, trials[0], skip=set())
    assert (found.config if found is not None else None) == expected, why


def test_a_lossless_leader_gets_no_lossy_finalist() -> None:
    leader = EngineConfig(max_num_seqs=512)
    trials = [result(leader, 2000), result(S1024_FP8, 1500)]
    assert probe.more_slots(context(trials), trials[0], skip=set()) is None


def test_the_capacity_finalists_add_the_wider_config_after_the_near_goodput_ones() -> None:
    trials = [result(LEADER, 2000), result(S256, 1900), result(STOCK, 1400)]
    found = probe.capacity_finalists(context(trials), trials[0])
    assert [t.config for t in found] == [S256, STOCK]
