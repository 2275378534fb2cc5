"""Which advisor a target gets: the LangGraph agent on the admin's advisor that the policy names, when the policy
enables the LLM, with the optimizer behind it (inside the agent, and as the Reconciler's fallback advisor); the
optimizer alone otherwise. Both use the simulator prior when the policy names known model/GPU profiles."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from controller.advisor.endpoints import AdvisorEndpoint
from controller.advisor.priors import policy_prior
from controller.decide import OptimizerAdvisor
from controller.errors import InvalidInput
from controller.policy import Policy
from controller.ports import Advisor


@dataclass(frozen=True)
class Advisors:
    advisor: Advisor
    fallback: Advisor | None
    description: str


def advisors_for(
    policy: Policy,
    endpoints: Sequence[AdvisorEndpoint] = (),
    *,
    seed: int = 0,
    checkpoint_path: str | Path | None = None,
) -> Advisors:
    """The advisors for ``policy``. ``endpoints`` are the operator admin's; a policy that enables the LLM must name
    one of them (``llm.advisor``), else :class:`InvalidInput` names the field and nothing is contacted."""
    optimizer = OptimizerAdvisor(policy, prior=policy_prior(policy), seed=seed)
    if not policy.llm.enabled:
        return Advisors(optimizer, None, "optimizer (the policy does not enable the LLM)")
    by_name = {e.name: e for e in endpoints}
    endpoint = by_name.get(policy.llm.advisor)
    if endpoint is None:
        offered = ", ".join(sorted(by_name)) or "none (the operator admin configured no LLM advisor)"
        raise InvalidInput(
            f"no LLM advisor named {policy.llm.advisor!r}; the operator offers: {offered}",
            source=f"policy {policy.name}",
            field="llm.advisor",
        )
    from controller.advisor.chat import make_chat_model
    from controller.advisor.graph import AgentAdvisor

    agent = AgentAdvisor(
        policy,
        chat_model=make_chat_model(endpoint, policy.llm),
        optimizer=optimizer,
        checkpoint_path=checkpoint_path,
        llm_timeout_s=policy.llm.timeout_s,
    )
    return Advisors(agent, optimizer, f"LLM agent on advisor {endpoint.describe()}, optimizer fallback")


__all__ = ["Advisors", "advisors_for"]
