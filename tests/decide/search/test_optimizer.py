"""The optimizer: finds near-best configs in few trials on a synthetic surface, never repeats or leaves the
policy, is deterministic, and continues across restarts from the history alone."""

from __future__ import annotations

import random

import pytest

from controller.decide.search.optimizer import OptimizerAdvisor, optimize
from controller.domain.config import STOCK, EngineConfig
from controller.domain.proposal import AdvisorContext
from controller.domain.slo import SLO
from controller.domain.trial import TrialResult
from controller.ports import Advisor
from tests.support.optimizer_surface import POLICY, SHAPE, TARGET, measured, surface

CANDIDATES = list(POLICY.space.configs())
OPTIMUM = max(surface(c) for c in CANDIDATES)


@pytest.mark.parametrize("strategy", ["gp", "tpe"])
def test_never_repeats_and_stays_in_policy(strategy: str) -> None:
    rng = random.Random(0)
    result = optimize(lambda c: measured(c, rng), POLICY, budget=30, seed=3, strategy=strategy)  # type: ignore[arg-type]
    keys = [t.config.key() for t in result.trials]
    assert result.trials_used == 30 == len(set(keys))
    assert all(POLICY.validate_config(t.config) == [] for t in result.trials)
    assert result.best is not None and result.best.objective() == max(t.objective() for t in result.trials)


@pytest.mark.parametrize("seed", range(6))
def test_finds_within_3_percent_in_16_trials_without_a_prior(seed: int) -> None:
    rng = random.Random(seed)
    result = optimize(lambda c: measured(c, rng), POLICY, budget=16, seed=seed)
    assert result.best is not None
    assert surface(result.best.config) >= 0.97 * OPTIMUM


def test_prior_warm_start_and_a_wrong_prior_is_corrected() -> None:
    # the prior overrates max_num_seqs=512 by 30%: its top pick is not the optimum
    def prior(c: EngineConfig) -> float:
        return surface(c) * (1.3 if c.max_num_seqs == 512 else 1.0) + (500 if c.k == 3 and c.max_num_seqs == 512 else 0)

    top = max(CANDIDATES, key=prior)
    result = optimize(measured, POLICY, budget=8, seed=0, prior=prior)
    assert result.trials[0].config == top
    assert "prior" in result.rationales[0]
    assert result.best is not None and surface(result.best.config) >= 0.97 * OPTIMUM


def test_baseline_is_measured_first() -> None:
    result = optimize(measured, POLICY, budget=4, seed=0, baseline=STOCK)
    assert result.trials[0].config == STOCK
    assert len({t.config.key() for t in result.trials}) == 4


def test_deterministic_for_a_seed() -> None:
    a = optimize(measured, POLICY, budget=10, seed=5)
    b = optimize(measured, POLICY, budget=10, seed=5)
    assert [t.config for t in a.trials] == [t.config for t in b.trials]


def test_custom_score_and_any_candidate_list() -> None:
    configs = CANDIDATES[:40]
    result = optimize(measured, configs, budget=40, seed=1, score=lambda r: -r.goodput_tokens_per_s)
    assert result.best is not None
    assert result.best.objective() == min(measured(c).objective() for c in configs if measured(c).ok)


def _context(history: tuple[TrialResult, ...], n: int = 1, active: EngineConfig = STOCK) -> AdvisorContext:
    return AdvisorContext(TARGET, SHAPE, SLO(), active, history, max_proposals=n)


def test_advisor_is_stateless_and_resumes_from_history() -> None:
    one = OptimizerAdvisor(POLICY, seed=2)
    assert isinstance(one, Advisor)
    history: tuple[TrialResult, ...] = ()
    for _ in range(10):
        (prop,) = one.propose(_context(history))
        assert prop.proposed_by == "optimizer" and prop.rationale
        history += (measured(prop.config),)
    # a "restarted operator": fresh advisors fed the first 5 trials continue with the same picks
    resumed: tuple[TrialResult, ...] = history[:5]
    for _ in range(5):
        (prop,) = OptimizerAdvisor(POLICY, seed=2).propose(_context(resumed))
        resumed += (measured(prop.config),)
    assert [t.config for t in resumed] == [t.config for t in history]


def test_advisor_batch_excludes_history_and_active() -> None:
    active = CANDIDATES[0]
    history = tuple(measured(c) for c in CANDIDATES[1:6])
    props = OptimizerAdvisor(POLICY, prior=lambda c, s: surface(c), seed=0).propose(
        _context(history, n=4, active=active)
    )
    keys = {p.config.key() for p in props}
    assert len(props) == 4 == len(keys)
    assert active.key() not in keys
    assert not keys & {t.config.key() for t in history}
    assert all(POLICY.validate_config(p.config) == [] for p in props)
    assert OptimizerAdvisor(POLICY).propose(_context(history, n=0)) == []
