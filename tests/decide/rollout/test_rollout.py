"""Rollout analysis and stepping: table-driven over scripted variant stats and a fake clock."""

from __future__ import annotations

from datetime import timedelta

import pytest

from controller.decide import RolloutRules
from controller.decide.rollout import steps as rollout
from controller.decide.rollout.analysis import analyse
from controller.decide.rollout.sizing import candidate_replicas_for
from controller.domain import DeployCandidate, Promote, RequestApproval, Rollback, Scale, SetWeights
from controller.domain.config import STOCK
from controller.domain.observation import VariantStats
from controller.domain.phases import Phase
from controller.domain.rollout import Approval
from tests.support.rollout_steps import CANDIDATE, RULES, SLO_, T0, advance, obs, start, stats


@pytest.mark.parametrize(
    ("candidate", "stable", "verdict", "code"),
    [
        (None, stats("stable", 500), "Inconclusive", "no-candidate-series"),
        (stats("candidate", 50), stats("stable", 500), "Pending", "too-few-samples"),
        (stats("candidate", 150), stats("stable", 500), "Successful", "within-slo"),
        (stats("candidate", 150, ttft=0.6), stats("stable", 500, ttft=0.3), "Failed", "regression"),
        (stats("candidate", 150, ttft=1.5), stats("stable", 500), "Failed", "slo-breach"),
        (stats("candidate", 150, tpot=0.08), stats("stable", 500), "Failed", "slo-breach"),
        (stats("candidate", 150, errors=10), stats("stable", 500), "Failed", "error-rate"),
        (
            stats("candidate", 150, ttft=1.6),
            stats("stable", 500, ttft=1.5),
            "Inconclusive",
            "stable-breach",
        ),
        # a clear regression needs fewer samples to roll back than a success needs to promote
        (stats("candidate", 30, ttft=0.9), stats("stable", 500, ttft=0.3), "Failed", "regression"),
        (stats("candidate", 5, ttft=0.9), stats("stable", 500, ttft=0.3), "Pending", "regression"),
    ],
)
def test_analysis_table(candidate: VariantStats | None, stable: VariantStats | None, verdict: str, code: str) -> None:
    result = analyse(candidate=candidate, stable=stable, slo=SLO_, rules=RULES)
    assert (result.verdict, result.code) == (verdict, code), result.reason


def test_full_rollout_walks_every_step_then_promotes() -> None:
    step = start()
    assert step.phase is Phase.ROLLING_OUT and isinstance(step.actions[0], DeployCandidate)
    assert step.rollout is not None and step.rollout.weight == 0
    now = T0
    weights: list[int] = []
    for _ in range(20):
        assert step.rollout is not None
        now += timedelta(seconds=150)
        step = advance(step.rollout, step.phase, obs(stats("candidate", 400)), now=now)
        weights += [a.candidate_weight for a in step.actions if isinstance(a, SetWeights)]
        if any(isinstance(a, Promote) for a in step.actions):
            break
    assert weights == [5, 25, 50, 100]
    assert step.phase is Phase.OBSERVING
    assert step.rollout is not None and len(step.rollout.analyses) == 4


def test_candidate_not_ready_holds_weight_at_zero() -> None:
    step = start()
    assert step.rollout is not None
    held = advance(step.rollout, step.phase, obs(None), candidate_ready_replicas=0)
    assert held.rollout is not None and held.rollout.weight == 0
    assert [a.replicas for a in held.actions if isinstance(a, Scale)] == [1]
    assert "needs 1 ready candidate replicas, 0 are ready" in held.notes[0]


def test_regression_rolls_back_at_first_step() -> None:
    step = start()
    assert step.rollout is not None
    step = advance(step.rollout, step.phase, obs(None))
    assert step.rollout is not None and step.rollout.weight == 5
    bad = obs(stats("candidate", 60, ttft=0.7), stats("stable", 1500, ttft=0.3))
    step = advance(step.rollout, step.phase, bad)
    assert step.phase is Phase.ROLLED_BACK
    assert isinstance(step.actions[0], Rollback) and step.code == "regression"


def test_metrics_outage_freezes_without_promoting() -> None:
    step = start()
    assert step.rollout is not None
    step = advance(step.rollout, step.phase, obs(None))
    assert step.rollout is not None
    frozen = advance(step.rollout, step.phase, None, now=T0 + timedelta(hours=2))
    assert frozen.actions == () and frozen.rollout == step.rollout and "metrics unavailable" in frozen.notes[0]


def test_manual_approval_then_rejection_and_approval() -> None:
    step = start(needs_approval=True)
    assert step.phase is Phase.AWAITING_APPROVAL
    assert any(isinstance(a, RequestApproval) for a in step.actions)
    assert step.rollout is not None
    waiting = advance(step.rollout, step.phase, None)
    assert waiting.phase is Phase.AWAITING_APPROVAL and waiting.actions == ()
    approved = step.rollout.model_copy(
        update={"approvals": (Approval(by="alice", at=T0, step=0, decision="approved"),)}
    )
    go = advance(approved, step.phase, None)
    assert go.phase is Phase.ROLLING_OUT and isinstance(go.actions[0], SetWeights)
    assert go.code == "approved"
    rejected = step.rollout.model_copy(
        update={"approvals": (Approval(by="bob", at=T0, step=0, decision="rejected", comment="not today"),)}
    )
    no = advance(rejected, step.phase, None)
    assert no.phase is Phase.OBSERVING and no.rollout is None and no.code == "rejected"


def test_inconclusive_analysis_pauses_for_a_human() -> None:
    step = start()
    assert step.rollout is not None
    step = advance(step.rollout, step.phase, obs(None))
    assert step.rollout is not None
    both_slow = obs(stats("candidate", 300, ttft=1.6), stats("stable", 3000, ttft=1.5))
    later = T0 + timedelta(seconds=400)
    step = advance(step.rollout, step.phase, both_slow, now=later)
    assert step.phase is Phase.AWAITING_APPROVAL
    assert isinstance(step.actions[0], RequestApproval) and step.actions[0].step == 1


def test_pause_resume_and_abort() -> None:
    step = start()
    assert step.rollout is not None
    step = advance(step.rollout, step.phase, obs(None))
    assert step.rollout is not None
    paused = step.rollout.model_copy(update={"paused": True})
    p = advance(paused, Phase.ROLLING_OUT, obs(stats("candidate", 500)), now=T0 + timedelta(hours=1))
    assert p.phase is Phase.PAUSED and p.actions == ()
    resumed = advance(paused.model_copy(update={"paused": False}), Phase.PAUSED, None, now=T0 + timedelta(hours=2))
    assert resumed.phase is Phase.ROLLING_OUT
    aborted = advance(
        step.rollout.model_copy(update={"abort_requested": True, "abort_reason": "ops"}), Phase.ROLLING_OUT, None
    )
    assert aborted.phase is Phase.ROLLED_BACK and aborted.code == "aborted"


def test_manual_gate_waits_before_its_step() -> None:
    rules = RolloutRules(steps=(10, 50, 100), bake_s=60, min_samples=10, manual_gates=(2,))
    step = start(rules=rules)
    now = T0
    seen: list[str] = []
    for _ in range(10):
        assert step.rollout is not None
        now += timedelta(seconds=120)
        step = advance(step.rollout, step.phase, obs(stats("candidate", 100)), now=now, rules=rules)
        seen.append(step.phase.value)
        if step.phase is Phase.AWAITING_APPROVAL:
            break
    assert step.rollout is not None and step.rollout.weight == 50
    assert isinstance(step.actions[0], RequestApproval) and step.actions[0].step == 2


@pytest.mark.parametrize("steps", [(), (5, 25), (50, 25, 100), (0, 100)])
def test_bad_step_schedules_are_rejected(steps: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="steps"):
        RolloutRules(steps=steps)


def test_candidate_replicas_follow_the_weight_and_gate_each_step() -> None:
    rules = RolloutRules(steps=(25, 50, 100), bake_s=60, min_samples=10)
    step = start(rules=rules, rollout_id="r", reason="x", expected_gain=None, candidate_replicas=8)
    deploy = step.actions[0]
    assert isinstance(deploy, DeployCandidate) and deploy.replicas == 2  # 25% of 8
    assert step.rollout is not None
    go = advance(step.rollout, step.phase, None, rules=rules, candidate_ready_replicas=2, fleet_replicas=8)
    assert go.rollout is not None and go.rollout.weight == 25
    later = T0 + timedelta(seconds=120)
    wait = advance(
        go.rollout,
        go.phase,
        obs(stats("candidate", 50)),
        now=later,
        rules=rules,
        candidate_ready_replicas=2,
        fleet_replicas=8,
    )
    assert wait.rollout is not None and wait.rollout.weight == 25
    assert [a.replicas for a in wait.actions if isinstance(a, Scale)] == [4]
    ready = advance(
        go.rollout,
        go.phase,
        obs(stats("candidate", 50)),
        now=later,
        rules=rules,
        candidate_ready_replicas=4,
        fleet_replicas=8,
    )
    assert ready.rollout is not None and ready.rollout.weight == 50
    assert candidate_replicas_for(3, 5) == 1 and candidate_replicas_for(16, 100) == 16


@pytest.mark.parametrize(
    ("weight", "replicas", "ratio", "verdict"),
    [
        (25, 1, 1.20, "Successful"),  # one candidate replica at a third of stable's load: full trade-off not expected
        (25, 1, 1.45, "Failed"),
        (25, 16, 1.30, "Successful"),  # 4 of 16 replicas for 25%: equal load, the canary's 1.4x applies in full
        (25, 16, 1.45, "Successful"),
        (25, 16, 1.70, "Failed"),
    ],
)
def test_expected_trade_off_follows_the_candidates_share_of_the_load(
    weight: int, replicas: int, ratio: float, verdict: str
) -> None:
    candidate = stats("candidate", 200, ttft=0.1 * ratio)
    result = analyse(
        candidate=candidate,
        stable=stats("stable", 600, ttft=0.1),
        slo=SLO_,
        rules=RolloutRules(min_samples=100, max_ttft_regression=0.1),
        expected_ttft_ratio=1.4,
        weight=weight,
        fleet_replicas=replicas,
    )
    assert result.verdict == verdict, result.reason


def test_a_step_judges_the_trade_off_at_the_fleets_own_split() -> None:
    """At 25 % of 16 replicas the candidate runs 4 and carries as much per replica as stable: the canary's whole
    1.3x TTFT trade-off is expected there (on a fleet of 1 only a third of it would be)."""
    state = rollout.start(
        rollout_id="r1",
        from_config=STOCK,
        to_config=CANDIDATE,
        rules=RolloutRules(steps=(5, 25, 50, 100), bake_s=300, min_samples=100),
        now=T0,
        reason="test",
        proposed_by="optimizer",
        expected_gain=1.2,
        needs_approval=False,
        candidate_replicas=16,
        expected_ttft_ratio=1.3,
    ).rollout
    assert state is not None
    at_25 = state.model_copy(update={"step_index": 1, "weight": 25, "step_started_at": T0})
    observation = obs(stats("candidate", 500, ttft=0.405), stats("stable", 1500, ttft=0.3))  # 1.35x stable
    step = advance(
        at_25,
        Phase.ROLLING_OUT,
        observation,
        now=T0 + timedelta(seconds=600),
        rules=RolloutRules(steps=(5, 25, 50, 100), bake_s=300, min_samples=100),
        fleet_replicas=16,
    )
    assert step.phase is Phase.ROLLING_OUT
    assert [type(a) for a in step.actions if isinstance(a, SetWeights | Rollback)] == [SetWeights]
