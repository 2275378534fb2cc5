"""The whole graph in tune mode: trials within budget, a decision with evidence, the approval interrupt, a
checkpoint that survives a restart (JSON), dry-run, and the Mermaid picture."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.advisor import TuningAgent
from controller.advisor.checkpoint import SerializableSaver
from controller.advisor.graph import mermaid
from controller.advisor.scripted import ScriptedChatModel, heuristic_model
from controller.domain.config import EngineConfig
from controller.domain.proposal import AdvisorContext
from controller.policy import Policy

from .conftest import measure, surface

MakeCtx = Callable[..., AdvisorContext]


def runner(log: list[EngineConfig]) -> Callable[[EngineConfig], Any]:
    def run(cfg: EngineConfig) -> Any:
        log.append(cfg)
        return measure(cfg)

    return run


def test_tune_run_waits_for_approval_and_resumes_after_a_restart(
    policy: Policy, make_context: MakeCtx, tmp_path: Path
) -> None:
    ran: list[EngineConfig] = []
    rolled: list[dict[str, Any]] = []
    agent = TuningAgent(policy, chat_model=heuristic_model(), trial_runner=runner(ran), rollout=rolled.append)
    run = agent.start("t1", make_context(n=2))
    assert run.awaiting_approval
    assert 1 <= len(ran) <= policy.trial_budget.max_trials
    assert len({c.key() for c in ran}) == len(ran)
    assert all(policy.validate_config(c) == [] for c in ran)
    decision = run.decision
    assert decision is not None and decision["action"] == "rollout"
    best = max(ran, key=surface)
    assert decision["label"] == best.label() and decision["proposed_by"] in ("agent", "optimizer")
    assert decision["evidence"]["best"] and decision["lossy"]  # fp16 SSM state: lossy -> manual approval
    assert run.state["rollout"]["steps"] == policy.rollout.steps and run.state["rollout"]["needs_approval"]
    assert rolled == []
    # persist the checkpoint, "restart" with a fresh agent, resume with an approval
    path = tmp_path / "checkpoint.json"
    agent.checkpointer.save(path)
    assert json.loads(path.read_text())["format"] == "shiftlight.checkpoint/v1"
    ran_after: list[EngineConfig] = []
    restarted = TuningAgent(
        policy,
        chat_model=ScriptedChatModel(script=[RuntimeError("must not be called")]),
        trial_runner=runner(ran_after),
        rollout=rolled.append,
        checkpointer=SerializableSaver.load(path),
    )
    assert restarted.snapshot("t1").awaiting_approval
    done = restarted.resume("t1", {"decision": "approved", "by": "alice", "comment": "evals passed"})
    assert not done.awaiting_approval and ran_after == []
    assert done.state["approval"]["by"] == "alice"
    assert len(rolled) == 1 and rolled[0]["to"] == best.label()
    assert "rolling out" in done.outcome


def test_rejected_or_invalid_approval_rolls_out_nothing(policy: Policy, make_context: MakeCtx) -> None:
    for answer in ({"decision": "rejected", "by": "bob"}, {"decision": "yes please", "by": "x", "extra": 1}):
        rolled: list[dict[str, Any]] = []
        agent = TuningAgent(policy, chat_model=heuristic_model(), trial_runner=runner([]), rollout=rolled.append)
        assert agent.start("t", make_context()).awaiting_approval
        done = agent.resume("t", answer)
        assert rolled == [] and "not rolled out" in done.outcome


def test_dry_run_reports_without_rolling_out(policy: Policy, make_context: MakeCtx) -> None:
    dry = policy.model_validate(policy.model_dump() | {"dry_run": True})
    rolled: list[dict[str, Any]] = []
    agent = TuningAgent(dry, chat_model=heuristic_model(), trial_runner=runner([]), rollout=rolled.append)
    run = agent.start("d", make_context())
    assert not run.awaiting_approval and rolled == []
    assert run.outcome.startswith("dry-run: would roll out")
    assert run.decision is not None and run.decision["action"] == "rollout"


def test_auto_approval_and_optimizer_only(policy: Policy, make_context: MakeCtx) -> None:
    auto = policy.model_validate(policy.model_dump() | {"approval": "auto", "llm": {"enabled": False}})
    rolled: list[dict[str, Any]] = []
    ran: list[EngineConfig] = []
    run = TuningAgent(auto, trial_runner=runner(ran), rollout=rolled.append).start("a", make_context(n=1))
    assert not run.awaiting_approval and len(rolled) == 1
    assert len(ran) == auto.trial_budget.max_trials
    assert all(r["by"] == "optimizer" for r in run.records)
    assert run.state["approval"]["by"] == "policy:auto"


def test_mermaid_picture_has_every_node() -> None:
    text = mermaid()
    for node in (
        "observe",
        "hypothesise",
        "propose",
        "validate",
        "trial",
        "analyse",
        "decide",
        "plan_rollout",
        "await_approval",
        "roll_out",
    ):
        assert node in text
