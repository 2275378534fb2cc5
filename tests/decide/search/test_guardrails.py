"""Guardrails: every proposal is checked; rejections carry a kind, the reasons and who proposed it."""

from __future__ import annotations

import pytest

from controller.decide import Rules
from controller.decide.search.guardrails import RejectKind, budget_left, check_proposals
from controller.domain.codes import INFO, Code
from controller.domain.config import STOCK, EngineConfig
from controller.domain.proposal import Proposal
from controller.domain.slo import SLO
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.domain.trial import Percentiles, TrialResult, TrialStatus
from controller.policy import Policy, parse_policy

POLICY = parse_policy(
    "target: {gpu_family: hopper, hybrid: false, has_mtp: false}\n"
    "space:\n  max_num_seqs: [64, 128, 256]\n  async_scheduling: [true, false]\n"
    "trial_budget: {max_trials: 3, canary_gpu_minutes: 10, trial_duration_s: 120, warmup_s: 0}\n"
)
BUDGET = Rules.from_policy(POLICY).tuning
SHAPE = TrafficShape(
    arrival_rate_rps=1,
    concurrency=8,
    prompt_tokens=LengthDistribution(mean=100),
    output_tokens=LengthDistribution(mean=100),
)
PCT = Percentiles(p50=0.1, p95=0.1, p99=0.1)


def trial(cfg: EngineConfig, status: TrialStatus = TrialStatus.MEASURED, minutes: float = 2.0) -> TrialResult:
    return TrialResult(
        config=cfg,
        shape=SHAPE,
        slo=SLO(),
        status=status,
        reason="" if status is TrialStatus.MEASURED else "OOM",
        ttft_s=PCT if status is TrialStatus.MEASURED else None,
        tpot_s=PCT if status is TrialStatus.MEASURED else None,
        duration_s=minutes * 60,
    )


def p(by: str = "agent", **knobs: object) -> Proposal:
    return Proposal(EngineConfig.model_validate({"max_num_seqs": 64, "async_scheduling": True} | knobs), "why", by)


CASES = [
    # (proposal, history, active, expected kind or None, reason fragment)
    (p(), (), STOCK, None, ""),
    (p(max_num_seqs=128), (trial(p(max_num_seqs=128).config),), STOCK, RejectKind.DUPLICATE, "already trialled"),
    (p(), (trial(p().config, TrialStatus.INFEASIBLE),), STOCK, RejectKind.DUPLICATE, "already trialled"),
    (p(), (), p().config, RejectKind.DUPLICATE, "is the active config"),
    (p(max_num_seqs=96), (), STOCK, RejectKind.OUT_OF_POLICY, "not in the policy's allowed values"),
    (p(kv_cache_dtype="fp8"), (), STOCK, RejectKind.OUT_OF_POLICY, "fixed by the policy"),
    (p(speculative_method="mtp", num_speculative_tokens=1), (), STOCK, RejectKind.OUT_OF_POLICY, "speculative_method"),
    (
        p(max_num_batched_tokens=32),
        (),
        STOCK.model_copy(update={"max_num_batched_tokens": 32}),
        RejectKind.INFEASIBLE,
        "< max_num_seqs",
    ),
    (
        p(),
        (
            trial(p(max_num_seqs=128).config),
            trial(p(max_num_seqs=256).config),
            trial(p(async_scheduling=False).config, minutes=1),
        ),
        STOCK,
        RejectKind.OVER_BUDGET,
        "exceeds max_trials 3",
    ),
    (p(), (trial(p(max_num_seqs=128).config, minutes=9),), STOCK, RejectKind.OVER_BUDGET, "canary GPU-minutes"),
]


@pytest.mark.parametrize(("proposal", "history", "active", "kind", "fragment"), CASES)
def test_each_rejection_kind(
    proposal: Proposal, history: tuple[TrialResult, ...], active: EngineConfig, kind: RejectKind | None, fragment: str
) -> None:
    verdict = check_proposals([proposal], space=POLICY.space, budget=BUDGET, active=active, history=history)
    if kind is None:
        assert verdict.accepted == (proposal,) and not verdict.rejected
        assert verdict.records[0].accepted and verdict.records[0].proposed_by == "agent"
        return
    assert not verdict.accepted
    (rejection,) = verdict.rejected
    assert rejection.kind is kind
    assert any(fragment in r for r in rejection.reasons), rejection.reasons
    record = verdict.records[0]
    assert not record.accepted and record.kind == kind.value and record.proposed_by == "agent"
    assert rejection.code is kind.code and record.code is kind.code
    assert fragment in verdict.feedback()


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        (RejectKind.DUPLICATE, Code.REJECTED_DUPLICATE),
        (RejectKind.OUT_OF_POLICY, Code.REJECTED_OUT_OF_POLICY),
        (RejectKind.INFEASIBLE, Code.REJECTED_INFEASIBLE),
        (RejectKind.OVER_BUDGET, Code.REJECTED_OVER_BUDGET),
    ],
)
def test_each_rejection_kind_has_its_own_code(kind: RejectKind, code: Code) -> None:
    assert kind.code is code
    assert INFO[code].kind == "guardrails"


def test_the_rejection_kinds_codes_are_distinct() -> None:
    assert len({kind.code for kind in RejectKind}) == len(RejectKind)


def test_batch_duplicates_and_max_accept() -> None:
    a, b, c = p(by="optimizer"), p(by="agent"), p(max_num_seqs=128, by="agent")
    verdict = check_proposals([a, b, c], space=POLICY.space, budget=BUDGET, active=STOCK, max_accept=1)
    assert verdict.accepted == (a,)
    kinds = [r.kind for r in verdict.rejected]
    assert kinds == [RejectKind.DUPLICATE, RejectKind.OVER_BUDGET]
    assert [r.proposed_by for r in verdict.records] == ["optimizer", "agent", "agent"]


def test_memory_oracle_rejects_infeasible() -> None:
    verdict = check_proposals(
        [p(max_num_seqs=256)],
        space=POLICY.space,
        budget=BUDGET,
        active=STOCK,
        feasibility=lambda c: "KV cache does not fit",
    )
    assert verdict.rejected[0].kind is RejectKind.INFEASIBLE
    assert "KV cache does not fit" in verdict.rejected[0].reasons[0]


def test_budget_left_counts_trials_and_minutes() -> None:
    assert budget_left(BUDGET, ()) == 3
    assert budget_left(BUDGET, (trial(p().config, minutes=2),)) == 2
    assert budget_left(BUDGET, (trial(p().config, minutes=9),)) == 0
    assert budget_left(Rules.from_policy(Policy()).tuning, ()) == Policy().trial_budget.max_trials
