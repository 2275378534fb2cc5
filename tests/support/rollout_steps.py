"""The rollout stepper's test setting: stock to MTP1 at noon in 5/25/50/100 % steps of five minutes' bake, and the
variant signals an analysis reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from controller.decide import RolloutRules
from controller.decide.rollout import steps as rollout
from controller.domain import SLO, STOCK, EngineConfig, Observation, Phase, RolloutState, VariantStats
from tests.support.builders import observed, shape, variant

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SLO_ = SLO(ttft_seconds=1.0, tpot_seconds=0.05, max_error_rate=0.01)
RULES = RolloutRules(steps=(5, 25, 50, 100), bake_s=300, min_samples=100)
CANDIDATE = EngineConfig(speculative_method="mtp", num_speculative_tokens=1)
SHAPE = shape(10, 64)


def stats(
    name: str, requests: int, ttft: float = 0.3, tpot: float = 0.02, errors: int = 0, good: int | None = None
) -> VariantStats:
    """A variant's signals; by default every request that did not fail met the SLO."""
    return variant(
        name,
        requests,
        ttft=ttft,
        tpot=tpot,
        errors=errors,
        good_requests=requests - errors if good is None else good,
    )


def obs(candidate: VariantStats | None, stable: VariantStats | None = None) -> Observation:
    """Five minutes from ``T0`` with the ``candidate``'s and ``stable``'s signals (a healthy stable by default)."""
    variants = [v for v in (candidate, stable or stats("stable", 2000)) if v is not None]
    return observed(SHAPE, T0 + timedelta(minutes=5), *variants)


def start(needs_approval: bool = False, rules: RolloutRules = RULES, **kw: Any) -> rollout.RolloutStep:
    """The rollout's first step: from stock to ``CANDIDATE`` at ``T0``, the optimizer's for a 1.5x gain, unless
    ``kw`` says otherwise (``rollout_id``, ``from_config``, ``to_config``, ``now``, ``candidate_replicas``...)."""
    first: dict[str, Any] = {"rollout_id": "r1", "from_config": STOCK, "to_config": CANDIDATE, "now": T0}
    why: dict[str, Any] = {"reason": "faster", "proposed_by": "optimizer", "expected_gain": 1.5}
    return rollout.start(rules=rules, needs_approval=needs_approval, **(first | why | kw))


def advance(
    state: RolloutState,
    phase: Phase,
    observation: Observation | None,
    *,
    now: datetime = T0,
    rules: RolloutRules = RULES,
    **kw: Any,
) -> rollout.RolloutStep:
    """One cycle of the rollout ``state`` in ``phase`` on ``observation`` at ``now``, against ``SLO_``; ``kw`` gives
    the ready candidate replicas and the fleet's size where a test sets them."""
    return rollout.advance(state=state, phase=phase, observation=observation, slo=SLO_, rules=rules, now=now, **kw)
