"""A step whose candidate breaches a latency bound while short of the replicas its load needs restarts its analysis
on the grown fleet (code ``candidate-short``) instead of rolling back: at most twice per step, for latency bounds
only. Scripted stats and a fake clock."""

from __future__ import annotations

from datetime import timedelta

import pytest

from controller.decide.rollout import steps as rollout
from controller.domain import Phase, Promote, Rollback, SetWeights
from controller.domain.codes import Code
from controller.domain.rollout import RolloutState
from tests.support.rollout_steps import RULES, T0, advance, obs, start, stats

BREACH = obs(stats("candidate", 150, tpot=0.08))  # TPOT p95 80 ms against a 50 ms SLO
REGRESSION = obs(stats("candidate", 150, ttft=0.7), stats("stable", 1500, ttft=0.3))
HEALTHY = obs(stats("candidate", 400))


def at_step(weight: int) -> RolloutState:
    """A rollout whose step at ``weight`` percent started at T0."""
    begun = start().rollout
    assert begun is not None
    return begun.model_copy(update={"step_index": RULES.steps.index(weight), "weight": weight, "step_started_at": T0})


def cycle(state: RolloutState, minutes: int, observation: object, *, ready: int, fleet: int) -> rollout.RolloutStep:
    return advance(
        state,
        Phase.ROLLING_OUT,
        observation,
        now=T0 + timedelta(minutes=minutes),
        candidate_ready_replicas=ready,
        fleet_replicas=fleet,
    )


@pytest.mark.parametrize(
    ("weight", "ready", "fleet", "observation", "code"),
    [
        (100, 1, 2, BREACH, Code.CANDIDATE_SHORT),  # the fleet grows to 2 as the load arrives; 1 ready
        (50, 1, 4, BREACH, Code.CANDIDATE_SHORT),  # half of a fleet of 4 needs 2
        (100, 2, 2, BREACH, Code.SLO_BREACH),  # as many ready as needed: the breach is the config's
        (50, 2, 4, BREACH, Code.SLO_BREACH),
        (50, 1, 4, REGRESSION, Code.REGRESSION),  # slower than stable at the same load: not load
    ],
)
def test_a_breach_on_a_short_candidate_restarts_the_step(
    weight: int, ready: int, fleet: int, observation: object, code: Code
) -> None:
    step = cycle(at_step(weight), 5, observation, ready=ready, fleet=fleet)
    assert step.code is code
    assert step.rollout is not None
    if code is Code.CANDIDATE_SHORT:
        assert step.phase is Phase.ROLLING_OUT and not step.actions
        assert step.rollout.weight == weight and step.rollout.step_started_at == T0 + timedelta(minutes=5)
        assert [r.outcome for r in step.rollout.analyses] == ["Inconclusive"]
    else:
        assert step.phase is Phase.ROLLED_BACK and any(isinstance(a, Rollback) for a in step.actions)


def test_the_cycle_after_a_restart_restarts_again_then_a_third_breach_rolls_back() -> None:
    first = cycle(at_step(100), 5, BREACH, ready=1, fleet=2)
    assert first.rollout is not None and first.code is Code.CANDIDATE_SHORT
    # the new replica is ready, but the window since the restart holds its cold start
    second = cycle(first.rollout, 10, BREACH, ready=2, fleet=2)
    assert second.rollout is not None and second.code is Code.CANDIDATE_SHORT
    third = cycle(second.rollout, 15, BREACH, ready=2, fleet=2)
    assert third.code is Code.SLO_BREACH and third.phase is Phase.ROLLED_BACK
    # a short candidate cannot hold a step longer than the cap either
    short_again = cycle(second.rollout, 15, BREACH, ready=1, fleet=3)
    assert short_again.phase is Phase.ROLLED_BACK


def test_a_restarted_step_bakes_again_on_the_grown_fleet_then_promotes() -> None:
    restarted = cycle(at_step(100), 5, BREACH, ready=1, fleet=2)
    assert restarted.rollout is not None
    baking = cycle(restarted.rollout, 8, HEALTHY, ready=2, fleet=2)  # 3 min into the restarted step's 5-min bake
    assert baking.rollout is not None and baking.phase is Phase.ROLLING_OUT and not baking.actions
    done = cycle(baking.rollout, 11, HEALTHY, ready=2, fleet=2)
    assert done.phase is Phase.OBSERVING and any(isinstance(a, Promote) for a in done.actions)
    assert not any(isinstance(a, SetWeights) for a in done.actions)
