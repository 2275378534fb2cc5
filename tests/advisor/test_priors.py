"""The simulator prior plugged into the optimizer: the first proposal is the performance model's top pick."""

from __future__ import annotations

from pathlib import Path

from controller.advisor.priors import policy_prior
from controller.decide.search.optimizer import OptimizerAdvisor
from controller.domain.config import STOCK
from controller.domain.observation import TargetRef
from controller.domain.proposal import AdvisorContext
from controller.policy import Policy, load_policy

from .conftest import SHAPE

ROOT = Path(__file__).resolve().parents[2]


def test_simulator_prior_warm_starts_the_optimizer() -> None:
    policy = load_policy(ROOT / "policies" / "v1" / "hybrid-mtp-workstation.yaml")
    prior = policy_prior(policy)
    assert prior is not None
    configs = list(policy.space.configs(policy.feasibility))
    top = max(configs, key=lambda c: prior(c, SHAPE))
    assert prior(top, SHAPE) > prior(STOCK, SHAPE) > 0
    ctx = AdvisorContext(TargetRef("ns", "svc", "m"), SHAPE, policy.slo, STOCK, (), max_proposals=1)
    (proposal,) = OptimizerAdvisor(policy, prior=prior).propose(ctx)
    assert proposal.config == top and "prior rank 1" in proposal.rationale


def test_no_prior_without_known_profiles() -> None:
    assert policy_prior(Policy()) is None
    assert policy_prior(Policy.model_validate({"target": {"model": "nope", "gpu": "h200"}})) is None
