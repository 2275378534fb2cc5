"""Which advisor a target gets: the LangGraph agent on the policy's OpenAI-compatible endpoint when the policy
enables the LLM, with the optimizer behind it (inside the agent, and as the Reconciler's fallback advisor); the
optimizer alone otherwise. Both use the simulator prior when the policy names known model/GPU profiles."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from controller.advisor.priors import policy_prior
from controller.decide.optimizer import OptimizerAdvisor
from controller.policy import Policy
from controller.ports import Advisor


@dataclass(frozen=True)
class Advisors:
    advisor: Advisor
    fallback: Advisor | None
    description: str


def advisors_for(policy: Policy, *, seed: int = 0, checkpoint_path: str | Path | None = None) -> Advisors:
    optimizer = OptimizerAdvisor(policy, prior=policy_prior(policy), seed=seed)
    if not policy.llm.enabled:
        return Advisors(optimizer, None, "optimizer (the policy does not enable the LLM)")
    from controller.advisor.chat import make_chat_model
    from controller.advisor.graph import AgentAdvisor

    agent = AgentAdvisor(
        policy,
        chat_model=make_chat_model(policy.llm),
        optimizer=optimizer,
        checkpoint_path=checkpoint_path,
        llm_timeout_s=policy.llm.timeout_s,
    )
    return Advisors(agent, optimizer, f"LLM agent ({policy.llm.model} at {policy.llm.base_url}), optimizer fallback")
