"""An approval is bound to what it approves: the rollout (``rollout_id``) and its ``to_config`` (``config_key``).

A decision recorded for another rollout, or for another config than the rollout's ``to_config``, is ignored by
decide: it neither moves traffic nor rejects the rollout. (The admission policy that stops a status writer from
rewriting ``to_config`` under a kept approval is tested in tests/helm/test_approval_admission.py.)
"""

from __future__ import annotations

from typing import Literal

import pytest

from controller.decide.rollout import steps as rollout
from controller.domain import Approval, EngineConfig, Phase, RolloutState
from tests.decide.rollout.test_rollout import RULES, SLO_, T0, start

pytestmark = pytest.mark.security


def awaiting() -> RolloutState:
    step = start(needs_approval=True)
    assert step.phase is Phase.AWAITING_APPROVAL and step.rollout is not None
    return step.rollout


def decided(state: RolloutState, decision: Literal["approved", "rejected"], **bound: str) -> RolloutState:
    fields = {"rollout_id": state.id, "config_key": state.to_config.key(), **bound}
    approval = Approval(by="sre-lead", at=T0, step=0, decision=decision, **fields)
    return state.model_copy(update={"approvals": (approval,)})


def advance(state: RolloutState) -> rollout.RolloutStep:
    return rollout.advance(state=state, phase=Phase.AWAITING_APPROVAL, observation=None, slo=SLO_, rules=RULES, now=T0)


def test_an_approval_of_this_rollout_and_its_config_moves_traffic() -> None:
    go = advance(decided(awaiting(), "approved"))
    assert go.phase is Phase.ROLLING_OUT and go.code == "approved"


@pytest.mark.parametrize(
    "mismatch",
    [{"rollout_id": "r-an-earlier-rollout"}, {"config_key": EngineConfig(max_num_seqs=7).key()}],
    ids=["another rollout", "another to_config"],
)
def test_a_mismatched_approval_does_not_promote(mismatch: dict[str, str]) -> None:
    state = awaiting()
    held = advance(decided(state, "approved", **mismatch))
    assert held.phase is Phase.AWAITING_APPROVAL and held.actions == ()
    assert held.code != "approved"


@pytest.mark.parametrize(
    "mismatch",
    [{"rollout_id": "r-an-earlier-rollout"}, {"config_key": EngineConfig(max_num_seqs=7).key()}],
    ids=["another rollout", "another to_config"],
)
def test_a_mismatched_rejection_does_not_reject(mismatch: dict[str, str]) -> None:
    state = awaiting()
    assert advance(decided(state, "rejected")).code == "rejected"
    held = advance(decided(state, "rejected", **mismatch))
    assert held.phase is Phase.AWAITING_APPROVAL and held.code != "rejected"
