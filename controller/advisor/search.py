"""The search loop's nodes: observe (tools into evidence), propose (the optimizer, when the agent is out), validate
(the guardrails; rejections are fed back to the model once), trial and analyse (tune mode, within the budget)."""

from __future__ import annotations

from typing import Any

from controller.advisor.schema import AgentAction
from controller.advisor.state import AgentState, proposal, proposal_dict, state_context
from controller.advisor.tools import (
    TrialRunner,
    best_measured,
    config_knobs,
    read_failure_logs,
    read_policy,
    read_traffic_and_slo,
    read_trial_history,
)
from controller.decide import OptimizerAdvisor, Rules, budget_left, check_proposals
from controller.domain.config import EngineConfig
from controller.domain.trial import TrialResult
from controller.policy import Policy


class SearchNodes:
    """``trial_runner`` requests one trial (tune mode only)."""

    def __init__(self, policy: Policy, optimizer: OptimizerAdvisor, trial_runner: TrialRunner | None) -> None:
        self.policy = policy
        rules = Rules.from_policy(policy)
        self.space, self.budget = rules.space, rules.tuning  # what the guardrails check proposals against
        self.optimizer = optimizer
        self.trial_runner = trial_runner

    def observe(self, state: AgentState) -> dict[str, Any]:
        ctx = state_context(state)
        evidence = read_traffic_and_slo(ctx)
        evidence["history"] = read_trial_history(ctx.history)
        evidence["failure_logs"] = read_failure_logs(ctx.history)
        evidence["policy"] = read_policy(self.policy)
        evidence["budget"] = {
            "trials_left": budget_left(self.budget, ctx.history),
            "proposals_wanted": max(1, min(ctx.max_proposals, budget_left(self.budget, ctx.history) or 1)),
        }
        best = best_measured(ctx.history)
        evidence["best_config"] = config_knobs(best.config) if best else None
        return {
            "evidence": evidence,
            "candidates": [],
            "accepted": [],
            "rejected": [],
            "rejected_rounds": 0,
            "use_optimizer": False,
            "fallback_reason": "",
            "hypothesis": "",
            "answer_action": "",
        }

    def propose(self, state: AgentState) -> dict[str, Any]:
        if not state.get("use_optimizer"):
            return {}
        ctx = state_context(state)
        reason = state.get("fallback_reason", "")
        props = self.optimizer.propose(ctx)
        return {
            "candidates": [
                proposal_dict(p.config, f"{p.rationale} [optimizer takes over: {reason}]", p.proposed_by) for p in props
            ]
        }

    def validate(self, state: AgentState) -> dict[str, Any]:
        ctx = state_context(state)
        proposals = [proposal(c) for c in state.get("candidates", [])]
        verdict = check_proposals(
            proposals,
            space=self.space,
            budget=self.budget,
            active=ctx.active,
            history=ctx.history,
            max_accept=ctx.max_proposals,
        )
        best = best_measured(ctx.history)
        evidence = {
            "hypothesis": state.get("hypothesis", ""),
            "shape": ctx.shape.describe(),
            "best_measured": best.summary() if best else None,
        }
        records = list(state.get("records", []))
        for r in verdict.records:
            records.append(
                {
                    "by": r.proposed_by,
                    "config": r.label,
                    "key": r.config_key,
                    "accepted": r.accepted,
                    "kind": r.kind,
                    "reason": r.rationale if r.accepted else "; ".join(r.reasons),
                    "rationale": r.rationale,
                    "evidence": evidence,
                }
            )
        rejected = list(state.get("rejected", [])) + [
            {
                "label": rj.proposal.config.label(),
                "knobs": config_knobs(rj.proposal.config),
                "proposed_by": rj.proposal.proposed_by,
                "kind": rj.kind.value,
                "reasons": list(rj.reasons),
                "rationale": rj.proposal.rationale,
            }
            for rj in verdict.rejected
        ]
        invalid = state.get("rejected", []) if not state.get("use_optimizer") else []
        for inv in invalid:
            records.append(
                {
                    "by": inv["proposed_by"],
                    "config": inv["label"],
                    "key": "",
                    "accepted": False,
                    "kind": inv["kind"],
                    "reason": "; ".join(inv["reasons"]),
                    "rationale": inv["rationale"],
                    "evidence": evidence,
                }
            )
        accepted = [proposal_dict(p.config, p.rationale, p.proposed_by) for p in verdict.accepted]
        tune = state.get("mode") == "tune"
        by_agent = not state.get("use_optimizer")
        update: dict[str, Any] = {"accepted": accepted, "rejected": rejected, "records": records}
        if accepted:
            update["route"] = "trial" if tune else "end"
        elif by_agent and state.get("answer_action") == AgentAction.STOP.value and not rejected:
            update["route"] = "decide" if tune else "end"
        elif by_agent and state.get("rejected_rounds", 0) < self.policy.llm.max_rejected_rounds:
            update["route"] = "hypothesise"
            update["rejected_rounds"] = state.get("rejected_rounds", 0) + 1
        elif by_agent:
            update["route"] = "propose"
            update["use_optimizer"] = True
            update["fallback_reason"] = "the agent kept proposing configs the guardrails rejected"
        else:
            update["route"] = "decide" if tune else "end"
        return update

    def trial(self, state: AgentState) -> dict[str, Any]:
        if self.trial_runner is None:
            raise RuntimeError("tune mode needs a trial_runner")
        ctx = state_context(state)
        history = list(state.get("history", []))
        ran: list[TrialResult] = list(ctx.history)
        for p in state.get("accepted", []):
            if budget_left(self.budget, ran) <= 0:
                break
            result = self.trial_runner(EngineConfig.model_validate(p["config"]))
            ran.append(result)
            history.append(result.model_dump(mode="json"))
        return {"history": history}

    def analyse(self, state: AgentState) -> dict[str, Any]:
        ctx = state_context(state)
        stop = state.get("answer_action") == AgentAction.STOP.value and not state.get("use_optimizer")
        route = "observe" if budget_left(self.budget, ctx.history) > 0 and not stop else "decide"
        return {"route": route}


__all__ = ["SearchNodes"]
