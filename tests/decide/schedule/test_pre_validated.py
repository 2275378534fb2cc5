"""When a scheduled switch is a pre-validated swap: production served both configs after a rollout that passed (the
scheduled one in its window, the active one in the window now), and no human approves rollouts; the swap's rules
are checked like the rollout's."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from controller import decide
from controller.decide import Rules, ScalingRules, ScheduleRules, TuningRules
from controller.domain import ServedConfig
from controller.domain.config import EngineConfig
from controller.domain.slo import SLO
from controller.domain.status import TargetStatus
from controller.domain.trial import TrialResult
from tests.support.builders import observed, shape
from tests.support.day_night import DAY, DAY_CONFIG, NIGHT, NIGHT_CONFIG, held_probe, night_entry

NOW = datetime(2026, 12, 1, 23, 50, tzinfo=UTC)
SHAPE = shape(1.0, 16, 24000, 1024)
FORECAST = SHAPE.model_copy(update={"arrival_rate_rps": 4.0})


def rules(approval: str = "auto") -> Rules:
    return Rules(
        slo=SLO(ttft_seconds=2, tpot_seconds=0.1),
        tuning=TuningRules(max_trials=4, approval=approval),  # type: ignore[arg-type]
        windows=(NIGHT, DAY),
        scaling=ScalingRules(min_replicas=1, max_replicas=32, headroom=0.25, scale_down_stabilisation_s=0),
    )


def held(config: EngineConfig, rate: float, goodput: float) -> TrialResult:
    return held_probe(config, SHAPE.model_copy(update={"arrival_rate_rps": rate}), goodput)


def served(window: str, config: EngineConfig) -> ServedConfig:
    return ServedConfig(
        window=window,
        config=config,
        promoted_at=NOW - timedelta(days=1),
        rollout_id=f"{window}-1",
        analysed_steps=4,
        canary_goodput_tokens_per_s=600,
    )


def evening(evidence: tuple[ServedConfig, ...]) -> TargetStatus:
    night = night_entry(SHAPE)
    day = night.model_copy(update={"window": "day", "config": DAY_CONFIG, "capacity_rps": 0.5})
    return TargetStatus(
        active_config=DAY_CONFIG,
        window="day",
        replicas=10,
        schedule=(night, day),
        trials=(held(NIGHT_CONFIG, 1.0, 600), held(DAY_CONFIG, 0.5, 400)),
        served=evidence,
    )


def plan(status: TargetStatus, approval: str = "auto") -> decide.Decision:
    return decide.plan(
        status=status,
        observation=observed(FORECAST, NOW),
        observe_error=None,
        proposals=(),
        rules=rules(approval),
        now=NOW,
        forecast={"night": FORECAST},
    )


BOTH = (served("night", NIGHT_CONFIG), served("day", DAY_CONFIG))


@pytest.mark.parametrize(
    ("evidence", "approval", "code"),
    [
        (BOTH, "auto", "pre-validated-swap"),
        ((served("night", NIGHT_CONFIG),), "auto", "prewarm"),  # the active config never served here after a rollout
        ((served("day", DAY_CONFIG),), "auto", "prewarm"),  # the night config never served at night
        # served, but in another window than the one it is scheduled for
        ((served("day", NIGHT_CONFIG), served("day", DAY_CONFIG)), "auto", "prewarm"),
        (BOTH, "manual", "prewarm"),  # a human approves every rollout: no swap around them
    ],
)
def test_a_switch_is_a_swap_only_between_configs_production_served(
    evidence: tuple[ServedConfig, ...], approval: str, code: str
) -> None:
    d = plan(evening(evidence), approval)
    assert d.codes[0] == code, d.codes
    rollout = d.status.rollout
    assert rollout is not None
    if code == "pre-validated-swap":
        assert rollout.steps == ScheduleRules().swap_steps and rollout.bake_s == ScheduleRules().swap_bake_s
        assert rollout.surge_replicas == 5  # 4 req/s x 1.25 at 1.0 req/s a replica
    else:
        assert rollout.surge_replicas is None and rollout.bake_s is None


def test_the_swaps_steps_and_bake_come_from_the_schedule_rules() -> None:
    custom = replace(rules(), schedule=ScheduleRules(swap_steps=(25, 100), swap_bake_s=120.0))
    d = decide.plan(
        status=evening(BOTH),
        observation=observed(FORECAST, NOW),
        observe_error=None,
        proposals=(),
        rules=custom,
        now=NOW,
        forecast={"night": FORECAST},
    )
    assert d.codes[0] == "pre-validated-swap"
    assert d.status.rollout is not None
    assert (d.status.rollout.steps, d.status.rollout.bake_s) == ((25, 100), 120.0)


@pytest.mark.parametrize(
    "bad",
    [
        {"swap_steps": (50, 90)},  # does not end at 100
        {"swap_steps": (100, 50)},  # not increasing
        {"swap_steps": ()},
        {"swap_bake_s": 0.0},
        {"prewarm_margin_s": -1.0},
    ],
)
def test_invalid_swap_rules_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        ScheduleRules(**bad)  # type: ignore[arg-type]
