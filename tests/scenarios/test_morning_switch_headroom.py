"""Scenario: the dense fleet's night->morning switch. At 08:00 the night's few-slot lookup config is stable on 8
replicas and the day's config rolls out in 10/50/100 % steps while the traffic turns from long documents into
agents. The candidate's p95 TTFT reads 1.11-1.15x stable's (its replicas carry another share of the load under
weighted routing, on traffic that is still changing shape), at under a fifth of the 2 s SLO. With the shipped
policy's SLO headroom the rollout promotes; judged on the ratio alone (the old rule) it rolled back at the first step
and the night's config served the morning. A breach of the SLO in the same walk still rolls back. Clock injected."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from controller.decide import Rules
from controller.decide.rollout import steps as rollout
from controller.domain import Promote, Rollback, SetWeights
from controller.domain.config import EngineConfig
from controller.domain.observation import Observation
from controller.domain.phases import Phase
from controller.domain.traffic import TrafficShape
from controller.policy import load_policy
from tests.support.builders import shape as traffic
from tests.support.builders import variant

POLICIES = Path(__file__).resolve().parents[2] / "policies" / "v1"
MORNING = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
NIGHT_CONFIG = EngineConfig(speculative_method="ngram", num_speculative_tokens=4, max_num_seqs=16)
DAY_CONFIG = EngineConfig(max_num_seqs=128)
FLEET = 8


def shape(minute: int) -> TrafficShape:
    """Documents fading into agents over the morning's first hour."""
    documents = max(0.0, 1.0 - minute / 60)
    return traffic(6 + minute / 10, 40 + minute, 2000 + 20000 * documents, 400, repetitiveness=0.2 + 0.6 * documents)


def observe(now: datetime, weight: int, candidate_ttft_s: float) -> Observation:
    minute = int((now - MORNING).total_seconds() // 60)
    stable_requests = int(60 * 6 * (100 - weight) / 100) + 1
    candidate_requests = int(60 * 6 * weight / 100) * 3 + 1
    candidate = variant("candidate", candidate_requests, ttft=candidate_ttft_s, tpot=0.011, output_tokens_per_s=900.0)
    stable = variant("stable", stable_requests * 3, ttft=0.330, tpot=0.010, output_tokens_per_s=900.0)
    return Observation(
        target="shop/llm",
        start=now - timedelta(minutes=3),
        end=now,
        shape=shape(minute),
        variants={"candidate": candidate, "stable": stable},
    )


def walk(candidate_ttft_s: float, slo_headroom: float | None = None) -> tuple[list[int], Phase, str]:
    policy = load_policy(POLICIES / "dense-8b-h200.yaml")
    if slo_headroom is not None:
        thresholds = policy.rollout.thresholds.model_copy(update={"slo_headroom": slo_headroom})
        policy = policy.model_copy(update={"rollout": policy.rollout.model_copy(update={"thresholds": thresholds})})
    rules = Rules.from_policy(policy).rollout
    step = rollout.start(
        rollout_id="morning",
        from_config=NIGHT_CONFIG,
        to_config=DAY_CONFIG,
        rules=rules,
        now=MORNING,
        reason="day window",
        proposed_by="schedule",
        expected_gain=1.6,
        needs_approval=False,
        candidate_replicas=FLEET,
    )
    now, reason = MORNING, ""
    weights: list[int] = []
    for _ in range(60):
        if step.rollout is None or step.phase is not Phase.ROLLING_OUT:
            break
        now += timedelta(seconds=rules.analysis_interval_s)
        step = rollout.advance(
            state=step.rollout,
            phase=step.phase,
            observation=observe(now, step.rollout.weight, candidate_ttft_s),
            slo=policy.slo,
            rules=rules,
            now=now,
            fleet_replicas=FLEET,
        )
        weights += [a.candidate_weight for a in step.actions if isinstance(a, SetWeights)]
        for action in step.actions:
            if isinstance(action, Promote | Rollback):
                reason = action.reason
    return weights, step.phase, reason


def test_a_candidate_far_inside_the_slo_is_promoted_at_the_window_boundary() -> None:
    weights, phase, _ = walk(candidate_ttft_s=0.365)  # 1.11x stable's 330 ms, 18 % of the 2 s SLO
    assert weights[:3] == [10, 50, 100]
    assert phase is Phase.OBSERVING


def test_the_ratio_alone_rolled_it_back_without_headroom() -> None:
    weights, phase, reason = walk(candidate_ttft_s=0.365, slo_headroom=0.0)
    assert phase is Phase.ROLLED_BACK and weights == [10]
    assert "1.11x stable" in reason


def test_a_breach_of_the_slo_still_rolls_back() -> None:
    weights, phase, reason = walk(candidate_ttft_s=2.4)
    assert phase is Phase.ROLLED_BACK and weights == [10]
    assert "exceeds the SLO" in reason
