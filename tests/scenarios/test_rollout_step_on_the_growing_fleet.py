"""Scenario: a rollout's 10 % step has baked while the load ramps (a batch job arriving at night), and the same
cycle grows the fleet from 4 to 6 replicas. The 50 % step used to move the route once the candidate had the 2 ready
replicas half of the old fleet needs; half of the ramping load then fell on 2 replicas while the third cold-started,
and the candidate's errors rolled it back. The step is now sized on the fleet the cycle scales to (3 of 6), and
replicas-follow-load never scales the candidate below what the step asked for in the same cycle. Clock injected."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from controller import decide
from controller.decide import RolloutRules
from controller.domain import EngineConfig, Observation, TargetStatus, TrafficShape
from controller.domain.actions import Scale, SetWeights
from controller.domain.observation import VariantStats
from controller.domain.phases import Phase
from tests.support.builders import at_step, observed, variant
from tests.support.day_night import DAY_CONFIG, DAY_NIGHT_RULES, NIGHT_SHAPE, night_entry

NOW = datetime(2026, 12, 2, 1, 45, tzinfo=UTC)  # inside the night window
RULES = replace(
    DAY_NIGHT_RULES,
    rollout=RolloutRules(steps=(10, 50, 100), bake_s=180, min_samples=100),
)
ACTIVE = EngineConfig(speculative_method="ngram", num_speculative_tokens=2)
SHAPE = NIGHT_SHAPE.model_copy(update={"repetitiveness": 0.05})


def status(fleet: int) -> TargetStatus:
    rollout = at_step("night-1", ACTIVE, DAY_CONFIG, (10, 50, 100), 0, NOW, ago=(20, 10), proposed_by="schedule")
    # the night's measured entry (1.0 req/s a replica), scheduling the config that rolls out
    entry = night_entry(SHAPE).model_copy(update={"config": DAY_CONFIG})
    return TargetStatus(
        phase=Phase.ROLLING_OUT,
        active_config=ACTIVE,
        window="night",
        replicas=fleet,
        rollout=rollout,
        schedule=(entry,),
    )


def load(rps: float) -> Observation:
    def healthy(name: str, requests: int) -> VariantStats:
        return variant(name, requests, ttft=0.5, tpot=0.03, errors=0)

    shape: TrafficShape = SHAPE.model_copy(update={"arrival_rate_rps": rps})
    return observed(shape, NOW, healthy("candidate", 300), healthy("stable", 2700))


def decide_at(rps: float, ready: int, fleet: int = 4) -> decide.Decision:
    return decide.plan(
        status=status(fleet),
        observation=load(rps),
        observe_error=None,
        proposals=(),
        rules=RULES,
        now=NOW,
        candidate_ready_replicas=ready,
    )


def candidate_scales(d: decide.Decision) -> list[int]:
    return [a.replicas for a in d.actions if isinstance(a, Scale) and a.variant == "candidate"]


def stable_scales(d: decide.Decision) -> list[int]:
    return [a.replicas for a in d.actions if isinstance(a, Scale) and a.variant == "stable"]


@pytest.mark.parametrize(
    ("rps", "ready", "fleet_to", "moves", "candidates"),
    [
        # 4.4 req/s x 1.25 / 1.0 = 6 replicas: the 50 % step needs 3 ready, 2 are: it holds and asks for 3
        (4.4, 2, 6, False, [3]),
        # the same growth with 3 ready: the route moves to 50 %
        (4.4, 3, 6, True, []),
        # the fleet stays at 4 (3.0 x 1.25 / 1.0 = 4): 2 ready are half of it and the route moves
        (3.0, 2, None, True, []),
        # the fleet grows to 5 with 1 candidate ready: the step asks for 3 (half of 5), and the fleet's 10 %
        # (1 replica) does not scale it back down in the same cycle
        (3.6, 1, 5, False, [3]),
    ],
)
def test_a_step_is_sized_on_the_fleet_the_cycle_scales_to(
    rps: float, ready: int, fleet_to: int | None, moves: bool, candidates: list[int]
) -> None:
    d = decide_at(rps, ready)
    assert stable_scales(d) == ([] if fleet_to is None else [fleet_to])
    weights = [a.candidate_weight for a in d.actions if isinstance(a, SetWeights)]
    assert weights == ([50] if moves else [])
    assert d.status.rollout is not None and d.status.rollout.weight == (50 if moves else 10)
    if moves:
        # once the route moved, the candidate keeps half of the fleet the cycle scales to
        need = -(-(fleet_to or 4) // 2)
        assert all(n == need for n in candidate_scales(d)) and (fleet_to is None or candidate_scales(d) == [need])
    else:
        assert candidate_scales(d) == candidates, d.actions
