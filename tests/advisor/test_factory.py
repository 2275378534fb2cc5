"""Which advisor a policy gets: the agent only on one of the operator admin's named advisors."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.advisor.endpoints import AdvisorEndpoint
from controller.advisor.factory import advisors_for
from controller.advisor.graph import AgentAdvisor
from controller.decide.search.optimizer import OptimizerAdvisor
from controller.errors import InvalidInput
from controller.policy import load_policy

PRESETS = Path(__file__).resolve().parents[2] / "policies" / "v1"
ADMIN = (
    AdvisorEndpoint(name="default", base_url="http://127.0.0.1:8000/v1", model="workhorse"),
    AdvisorEndpoint(name="hosted", base_url="https://llm.example.internal/v1", model="big"),
)


def test_llm_enabled_policy_gets_the_agent_on_the_named_advisor_with_the_optimizer_behind_it() -> None:
    policy = load_policy(PRESETS / "hybrid-mtp-workstation.yaml")
    assert policy.llm.enabled and policy.llm.advisor == "default"
    chosen = advisors_for(policy, ADMIN)
    assert isinstance(chosen.advisor, AgentAdvisor) and isinstance(chosen.fallback, OptimizerAdvisor)
    assert "http://127.0.0.1:8000/v1" in chosen.description and "workhorse" in chosen.description
    hosted = policy.model_copy(update={"llm": policy.llm.model_copy(update={"advisor": "hosted"})})
    assert "https://llm.example.internal/v1" in advisors_for(hosted, ADMIN).description


def test_an_advisor_the_admin_does_not_offer_is_refused_naming_the_field() -> None:
    policy = load_policy(PRESETS / "hybrid-mtp-workstation.yaml")
    unknown = policy.model_copy(update={"llm": policy.llm.model_copy(update={"advisor": "mine"})})
    with pytest.raises(InvalidInput) as err:
        advisors_for(unknown, ADMIN)
    assert err.value.field == "llm.advisor"
    with pytest.raises(InvalidInput) as none_offered:
        advisors_for(policy, ())
    assert none_offered.value.field == "llm.advisor"


def test_without_the_llm_the_optimizer_alone() -> None:
    policy = load_policy(PRESETS / "hybrid-mtp-workstation.yaml")
    off = policy.model_copy(update={"llm": policy.llm.model_copy(update={"enabled": False})})
    chosen = advisors_for(off)
    assert isinstance(chosen.advisor, OptimizerAdvisor) and chosen.fallback is None
