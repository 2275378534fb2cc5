"""An approval is bound to what it approves: the rollout (``rollout_id``) and its ``to_config`` (``config_key``).

A decision recorded for another rollout, or for another config than the rollout's ``to_config``, is ignored by
decide: it neither moves traffic nor rejects the rollout. On promotion the status records the config the promoted
Deployment runs, as read back from the cluster, not the ``to_config`` status asked for. (The admission policy that
stops a status writer from rewriting ``to_config`` under a kept approval: tests/helm/test_approval_admission.py.)
"""

from __future__ import annotations

from typing import Literal

import pytest

from controller.act import deployments
from controller.act.context import ActContext, ActPorts, TrialSettings
from controller.act.effects import Promoted
from controller.act.fold import fold
from controller.adapters.notify.recording import RecordingNotifier
from controller.clock import FakeClock
from controller.decide.rollout import steps as rollout
from controller.domain import SLO, STOCK, Approval, EngineConfig, Phase, RolloutState, TargetRef, TargetStatus
from controller.domain.actions import Promote
from controller.domain.codes import Code
from controller.domain.trial import TrialResult
from controller.ports import TrialBudget, TrialRequest
from controller.testing.memory import InMemoryCluster, InMemoryRouter
from tests.support.rollout_steps import RULES, SLO_, T0, start

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


#: An approval or rejection for another rollout, or for another config than the one awaiting it.
MISMATCHES = pytest.mark.parametrize(
    "mismatch",
    [{"rollout_id": "r-an-earlier-rollout"}, {"config_key": EngineConfig(max_num_seqs=7).key()}],
    ids=["another rollout", "another to_config"],
)


@MISMATCHES
def test_a_mismatched_approval_does_not_promote(mismatch: dict[str, str]) -> None:
    state = awaiting()
    held = advance(decided(state, "approved", **mismatch))
    assert held.phase is Phase.AWAITING_APPROVAL and held.actions == ()
    assert held.code != "approved"


@MISMATCHES
def test_a_mismatched_rejection_does_not_reject(mismatch: dict[str, str]) -> None:
    state = awaiting()
    assert advance(decided(state, "rejected")).code == "rejected"
    held = advance(decided(state, "rejected", **mismatch))
    assert held.phase is Phase.AWAITING_APPROVAL and held.code != "rejected"


class ReadBackCluster(InMemoryCluster):
    """A cluster whose promote reads back the config the candidate ran, as the Kubernetes adapter does from the
    candidate Deployment's config annotation."""

    def promote(self, target: TargetRef) -> EngineConfig | None:
        running = self.variants[(str(target), "candidate")].config
        super().promote(target)
        return running


def test_on_promotion_status_records_the_config_the_candidate_ran_not_a_rewritten_to_config() -> None:
    target = TargetRef("prod", "workhorse", "m")
    ran, rewritten = EngineConfig(max_num_seqs=128), EngineConfig(kv_cache_dtype="fp8")
    cluster = ReadBackCluster(clock=FakeClock())
    cluster.deploy(target, "stable", STOCK, 2)
    cluster.deploy(target, "candidate", ran, 2)
    ports = ActPorts(InMemoryRouter(), cluster, RecordingNotifier(), UnusedLoadTester())
    settings = TrialSettings(slo=SLO(), budget=TrialBudget(duration_s=60.0, warmup_s=5.0), seed=0)
    # status.rollout.to_config was rewritten to fp8 under a kept approval: decide promotes what status says
    effects = deployments.promote(Promote(rewritten, "approved"), ActContext(target, ports, settings))
    assert effects == (Promoted(rewritten, running=ran),)
    decided = TargetStatus(phase=Phase.OBSERVING, active_config=rewritten)
    after = fold(decided, effects, keep_trials=10)
    assert after.active_config == ran  # what runs
    assert [r.code for r in after.last_reasons] == [Code.PROMOTED_CONFIG_DIFFERS]
    # when the candidate ran what status asked for, the status is left as decided
    assert fold(decided, (Promoted(rewritten, running=rewritten),), keep_trials=10) == decided


class UnusedLoadTester:
    def run(self, request: TrialRequest) -> TrialResult:
        raise AssertionError("no trial runs on a promotion")
