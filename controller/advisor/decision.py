"""The decision's nodes: decide (does the best measured config beat the active one by ``min_gain``?),
plan_rollout (the policy's steps), await_approval (a LangGraph ``interrupt`` resumed from the CLI or the CR status,
when the policy asks for one) and roll_out (or, in dry-run mode, only report)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.types import interrupt
from pydantic import ValidationError

from controller.advisor.state import AgentState, ApprovalAnswer, state_context
from controller.advisor.tools import best_measured
from controller.domain.config import EngineConfig
from controller.policy import Policy


class DecisionNodes:
    """``rollout`` starts the approved rollout (tune mode)."""

    def __init__(self, policy: Policy, rollout: Callable[[dict[str, Any]], None] | None) -> None:
        self.policy = policy
        self.rollout = rollout

    def decide(self, state: AgentState) -> dict[str, Any]:
        ctx = state_context(state)
        best = best_measured(ctx.history)
        baseline = next((r for r in ctx.history if r.config.key() == ctx.active.key() and r.ok), None)
        if best is None:
            return {"decision": {"action": "keep", "reason": "no trial produced a usable measurement"}, "route": "end"}
        base_val = baseline.objective() if baseline else 0.0
        gain = best.objective() / base_val if base_val > 0 else None
        who = next(
            (r["by"] for r in reversed(state.get("records", [])) if r.get("key") == best.config.key()), "unknown"
        )
        evidence = {
            "best": best.summary(),
            "baseline": baseline.summary() if baseline else None,
            "trials": len(ctx.history),
        }
        if best.config.key() == ctx.active.key() or (gain is not None and gain < 1 + self.policy.min_gain):
            reason = f"no candidate beats the active config by {self.policy.min_gain:.0%} (best {best.summary()})"
            return {"decision": {"action": "keep", "reason": reason, "evidence": evidence}, "route": "end"}
        reason = f"{best.config.label()} measured {best.objective():,.0f} tok/s goodput" + (
            f", {gain:.2f}x the active config" if gain else " (active config not measured)"
        )
        decision = {
            "action": "rollout",
            "config": best.config.model_dump(mode="json"),
            "label": best.config.label(),
            "proposed_by": who,
            "reason": reason,
            "evidence": evidence,
            "gain": gain,
            "lossy": self.policy.lossy_reasons(best.config),
        }
        return {"decision": decision, "route": "plan_rollout"}

    def plan_rollout(self, state: AgentState) -> dict[str, Any]:
        decision = state.get("decision") or {}
        cfg = EngineConfig.model_validate(decision["config"])
        ctx = state_context(state)
        plan = {
            "id": f"{ctx.target.name}-{cfg.key()}",
            "from": ctx.active.label(),
            "to": cfg.label(),
            "config": decision["config"],
            "steps": list(self.policy.rollout.steps),
            "bake_seconds": self.policy.rollout.bake_seconds,
            "needs_approval": self.policy.needs_approval(cfg),
            "approval_rule": self.policy.approval,
            "dry_run": self.policy.dry_run,
            "reason": decision.get("reason", ""),
            "proposed_by": decision.get("proposed_by", "unknown"),
        }
        return {"rollout": plan}

    def await_approval(self, state: AgentState) -> dict[str, Any]:
        plan = state.get("rollout") or {}
        if plan.get("dry_run"):
            return {"approval": {"decision": "skipped", "by": "policy:dry_run", "comment": "advisory mode"}}
        if not plan.get("needs_approval"):
            return {"approval": {"decision": "approved", "by": f"policy:{plan.get('approval_rule')}", "comment": ""}}
        value = interrupt({"rollout": plan, "question": f"approve rollout {plan.get('from')} -> {plan.get('to')}?"})
        try:
            answer = ApprovalAnswer.model_validate(value)
        except ValidationError as exc:
            return {"approval": {"decision": "rejected", "by": "guardrails", "comment": f"invalid approval: {exc}"}}
        return {"approval": answer.model_dump()}

    def roll_out(self, state: AgentState) -> dict[str, Any]:
        plan = state.get("rollout") or {}
        approval = state.get("approval") or {}
        if plan.get("dry_run"):
            return {
                "outcome": f"dry-run: would roll out {plan.get('to')} in steps {plan.get('steps')}; nothing changed"
            }
        if approval.get("decision") != "approved":
            return {"outcome": f"not rolled out: {approval.get('decision')} by {approval.get('by')}"}
        if self.rollout is not None:
            self.rollout(plan)
        return {
            "outcome": f"rolling out {plan.get('to')} in steps {plan.get('steps')} (approved by {approval.get('by')})"
        }


__all__ = ["DecisionNodes"]
