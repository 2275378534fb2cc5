"""Which advisor a policy gets."""

from __future__ import annotations

from pathlib import Path

from controller.advisor.factory import advisors_for
from controller.advisor.graph import AgentAdvisor
from controller.decide.optimizer import OptimizerAdvisor
from controller.policy import load_policy

PRESETS = Path(__file__).resolve().parents[2] / "policies" / "v1"


def test_llm_enabled_policy_gets_the_agent_with_the_optimizer_behind_it() -> None:
    policy = load_policy(PRESETS / "hybrid-mtp-workstation.yaml")
    assert policy.llm.enabled
    chosen = advisors_for(policy)
    assert isinstance(chosen.advisor, AgentAdvisor) and isinstance(chosen.fallback, OptimizerAdvisor)
    assert policy.llm.base_url in chosen.description


def test_without_the_llm_the_optimizer_alone() -> None:
    policy = load_policy(PRESETS / "hybrid-mtp-workstation.yaml")
    off = policy.model_copy(update={"llm": policy.llm.model_copy(update={"enabled": False})})
    chosen = advisors_for(off)
    assert isinstance(chosen.advisor, OptimizerAdvisor) and chosen.fallback is None
