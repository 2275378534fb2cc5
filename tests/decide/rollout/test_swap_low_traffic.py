"""A pre-validated swap's step passes on low traffic once it has baked its own (short) bake, with the analysis still
on; a full rollout's step still waits ``low_traffic_after_s``. Scripted stats and a fake clock."""

from __future__ import annotations

from datetime import timedelta

import pytest

from controller.domain import Phase, Rollback, SetWeights
from controller.domain.codes import Code
from controller.domain.rollout import RolloutState
from tests.support.rollout_steps import T0, advance, obs, start, stats

QUIET = obs(stats("candidate", 30))  # fewer than min_samples (100), more than min_failure_samples (25)
BREACH = obs(stats("candidate", 30, tpot=0.08))


def at_half(*, swap: bool) -> RolloutState:
    """A rollout at 50 % since T0: a pre-validated swap's (its surge and its 60 s bake) or a full rollout's."""
    begun = start().rollout
    assert begun is not None
    update: dict[str, object] = {"step_index": 2, "weight": 50, "step_started_at": T0}
    if swap:
        update.update(steps=(50, 100), step_index=0, bake_s=60.0, surge_replicas=4)
    return begun.model_copy(update=update)


@pytest.mark.parametrize(
    ("swap", "minutes", "observation", "code", "weight"),
    [
        (True, 2, QUIET, Code.LOW_TRAFFIC, 100),  # baked 60 s, 30 requests, nothing wrong: on to 100 %
        (True, 0, QUIET, Code.ROLLOUT_STEP, 50),  # not baked yet
        (False, 2, QUIET, Code.ROLLOUT_STEP, 50),  # a full rollout waits for min_samples or low_traffic_after_s
        (False, 41, QUIET, Code.LOW_TRAFFIC, 100),
        (True, 2, BREACH, Code.SLO_BREACH, 0),  # the analysis is still on
    ],
)
def test_a_swap_step_passes_on_low_traffic_after_its_own_bake(
    swap: bool, minutes: int, observation: object, code: Code, weight: int
) -> None:
    step = advance(
        at_half(swap=swap),
        Phase.ROLLING_OUT,
        observation,
        now=T0 + timedelta(minutes=minutes, seconds=1),
        candidate_ready_replicas=4,
        fleet_replicas=4,
    )
    assert step.code is code
    assert step.rollout is not None and step.rollout.weight == weight
    if weight == 0:
        assert any(isinstance(a, Rollback) for a in step.actions)
    elif weight == 100:
        assert [a.candidate_weight for a in step.actions if isinstance(a, SetWeights)] == [100]
